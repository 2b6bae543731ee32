"""Getting the threads out while the store is written to: `cqa backup` (a consistent SQLite copy, a store again) and
`cqa export` (JSONL that `cqa ingest` reads back), through their functions, the command line, and a real server whose
backup serves in a new data folder."""
from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import threading
import time
import urllib.request

import pytest

from indexing.backup import backup, export
from indexing.loaders import load_jsonl
from indexing.models import Answer, Thread
from indexing.store import Snapshot, StoreError, ThreadStore

from .conftest import CQA, ROOT
from .test_api import TOKEN, free_port, http, start_server, stop_server, wait_ready


def _threads(n: int, start: int = 0, answers: int = 2) -> list[Thread]:
    return [Thread(id=f"t{i}", subject=f"Visa question {i} é", body="Where do I renew?", category="Visas",
                   created_at="2015-01-04T09:00:00", author_id=f"u{i}", meta={"source": "test", "n": i},
                   answers=[Answer(id=f"t{i}_a{j}", text=f"At the office {j} – ✓", label="Good" if j else None,
                                   author_id=None if j else "u9", meta={"k": [j]}) for j in range(answers)])
            for i in range(start, start + n)]


def test_an_export_ingested_again_gives_the_same_threads_in_the_same_order(tmp_path):
    src = tmp_path / "a" / "threads.sqlite3"
    with ThreadStore(src) as store:
        store.upsert(_threads(30))
        store.upsert([Thread(id="t3", subject="edited, so stored again last", answers=[])])  # a later seq
        store.delete("t7")
        before = list(store.iter_threads())
    for name in ("all.jsonl", "all.jsonl.gz"):
        out = export(src, tmp_path / name)
        assert (out["threads"], out["answers"]) == (29, 28 * 2) and out["bytes"] == (tmp_path / name).stat().st_size
        loaded = load_jsonl(tmp_path / name, strict=True)
        assert not loaded.errors and loaded.threads == before
    with gzip.open(tmp_path / "all.jsonl.gz", "rt", encoding="utf-8") as fh:
        first = json.loads(fh.readline())
    assert "é" in first["subject"] and "created_at" in first and "label" not in first["answers"][0]  # defaults left out
    again = tmp_path / "b" / "threads.sqlite3"
    with ThreadStore(again) as store:
        store.upsert(load_jsonl(tmp_path / "all.jsonl").threads)
        assert list(store.iter_threads()) == before


def test_backup_and_export_hold_one_moment_while_a_writer_goes_on(tmp_path):
    """A writer adds threads of 3 answers each, one transaction each, while backups and exports run: every copy holds
    whole threads only (answers = 3 x threads) and its summary's fingerprint, and passes SQLite's integrity check."""
    src = tmp_path / "threads.sqlite3"
    with ThreadStore(src) as store:
        store.upsert(_threads(200, answers=3))
    stop = threading.Event()

    def write():
        with ThreadStore(src) as w:
            i = 1000
            while not stop.is_set():
                w.upsert(_threads(1, start=i, answers=3))
                i += 1
    writer = threading.Thread(target=write)
    writer.start()
    try:
        copies = [(backup(src, tmp_path / f"b{k}.sqlite3"), export(src, tmp_path / f"e{k}.jsonl")) for k in range(6)]
    finally:
        stop.set()
        writer.join()
    with ThreadStore(src) as store:
        final = store.counts()["threads"]
    assert final > 200
    for b, e in copies:
        assert b["answers"] == 3 * b["threads"] and e["answers"] == 3 * e["threads"], (b, e)
        with ThreadStore(b["backup"]) as copy:
            assert copy.fingerprint() == b["fingerprint"] and copy.counts()["threads"] == b["threads"]
        with sqlite3.connect(b["backup"]) as c:
            assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        lines = load_jsonl(tmp_path / e["export"].rsplit("/", 1)[1], strict=True).threads
        assert len(lines) == e["threads"] and all(len(t.answers) == 3 for t in lines)
    assert [b["threads"] for b, _ in copies] == sorted(b["threads"] for b, _ in copies)


def test_a_copy_never_replaces_a_file_nor_leaves_half_of_one(tmp_path, monkeypatch):
    src = tmp_path / "threads.sqlite3"
    with ThreadStore(src) as store:
        store.upsert(_threads(5))
    taken = tmp_path / "taken.sqlite3"
    taken.write_text("someone's file")
    for fn in (backup, export):
        with pytest.raises(StoreError, match="exists: this never replaces a file"):
            fn(src, taken)
    assert taken.read_text() == "someone's file"
    (tmp_path / ".new.sqlite3.tmp").write_text("left by a backup killed mid-way")
    out = backup(src, tmp_path / "new.sqlite3")
    assert out["threads"] == 5 and not (tmp_path / ".new.sqlite3.tmp").exists()
    import os

    def no_links(a, b):
        raise PermissionError(1, "Operation not permitted")  # as a FAT or some network mounts answer
    with monkeypatch.context() as m:
        m.setattr(os, "link", no_links)
        out = export(src, tmp_path / "on-fat.jsonl")
        with pytest.raises(StoreError, match="exists"):
            backup(src, taken)
    assert out["threads"] == 5 and len((tmp_path / "on-fat.jsonl").read_text().splitlines()) == 5
    assert taken.read_text() == "someone's file" and not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(StoreError, match="no store here"):
        backup(tmp_path / "none" / "threads.sqlite3", tmp_path / "x.sqlite3")
    with pytest.raises(StoreError, match="no store here"):
        Snapshot(tmp_path / "none" / "threads.sqlite3")
    assert not (tmp_path / "x.sqlite3").exists() and not (tmp_path / "none").exists()


def test_cqa_backup_of_a_serving_store_serves_again_in_a_new_data_folder(tmp_path, cli_env):
    """A real `cqa serve` takes a new thread; `cqa backup` copies its store while it runs, and so does POST /backups,
    whose copy GET /backups/{name} downloads; a second `cqa serve` on an empty data folder holding only the downloaded
    copy builds its indexes and finds the thread. `cqa export` of the same store,
    ingested into a third folder, holds the same threads; bad requests end with a message and status 2."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port)
    admin = {"Authorization": f"Bearer {TOKEN}"}
    try:
        wait_ready(p, base)
        thread = {"id": "qb1", "subject": "Quokka grooming in Doha", "body": "Who grooms a pet quokka near the Pearl?",
                  "answers": [{"id": "qb1a", "text": "The quokka salon by the marina."}]}
        assert http("POST", base + "/threads", {"threads": [thread]}, admin)[0] == 200
        env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "var")}
        copies = tmp_path / "backups"
        copies.mkdir()
        run = subprocess.run(CQA + ["backup", str(copies)], env=env, capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 0, run.stderr
        made = json.loads(run.stdout.strip().splitlines()[-1])
        exported = subprocess.run(CQA + ["export", "-q"], env=env, capture_output=True, text=True, cwd=ROOT)
        assert exported.returncode == 0, exported.stderr
        said = json.loads(exported.stderr.strip().splitlines()[-1])  # stdout holds the threads
        lines = exported.stdout.splitlines()
        assert len(lines) == said["threads"] == made["threads"] and said["fingerprint"] == made["fingerprint"]
        assert json.loads(lines[-1])["id"] == "qb1"
        again = subprocess.run(CQA + ["backup", made["backup"]], env=env, capture_output=True, text=True, cwd=ROOT)
        assert again.returncode == 2 and "never replaces a file" in again.stderr
        # the same copy through the real server: POST /backups as a job, then downloaded
        status, submitted = http("POST", base + "/backups", {"kind": "store"}, admin)
        assert status == 202
        job = submitted["job"]
        for _ in range(300):
            job = http("GET", f"{base}/jobs/{job['id']}")[1]
            if job["state"] in ("succeeded", "failed"):
                break
            time.sleep(0.1)
        assert job["state"] == "succeeded", job
        served = job["result"]
        assert served["fingerprint"] == made["fingerprint"] and served["threads"] == made["threads"]
        request = urllib.request.Request(f"{base}/backups/{served['name']}", headers=admin)
        with urllib.request.urlopen(request) as r:
            (tmp_path / "downloaded.sqlite3").write_bytes(r.read())
        with sqlite3.connect(tmp_path / "downloaded.sqlite3") as c:
            assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert c.execute("SELECT count(*) FROM threads").fetchone()[0] == made["threads"]
    finally:
        stop_server(p)
    (tmp_path / "restored" / "var").mkdir(parents=True)
    (tmp_path / "restored" / "var" / "threads.sqlite3").write_bytes((tmp_path / "downloaded.sqlite3").read_bytes())
    p = start_server(tmp_path / "restored", port)
    try:
        ready = wait_ready(p, base)
        assert ready["sizes"]["documents"] == made["threads"] + made["answers"]  # built from the copy
        status, out = http("POST", base + "/search", {"question": {"body": "pet quokka grooming salon"}, "k": 5,
                                                      "target": "questions"})
        assert status == 200 and out["results"][0]["thread_id"] == "qb1"
    finally:
        stop_server(p)
    third = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "third")}  # `cqa export | cqa ingest -`
    ingest = subprocess.run(CQA + ["ingest", "-", "-q"], input=exported.stdout, env=third, capture_output=True,
                            text=True, cwd=ROOT)
    assert ingest.returncode == 0 and json.loads(ingest.stdout.strip().splitlines()[-1])["store"]["threads"] == \
        made["threads"]
    bad = subprocess.run(CQA + ["ingest", "-", "-q"], input="threads, I promise\n", env=third, capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "neither XML nor JSONL; pass --format" in bad.stderr


def test_backup_names_sort_by_time_and_only_a_backup_name_is_looked_up(tmp_path):
    from datetime import datetime, timezone

    from indexing.backup import backup_kind, backup_path, backups_in, dated_name
    early = dated_name("store", datetime(2026, 11, 25, 5, 12, 0, 123456, tzinfo=timezone.utc))
    late = dated_name("export", datetime(2026, 11, 25, 5, 12, 0, 124000, tzinfo=timezone.utc))
    assert early == "threads-20261125T051200.123Z.sqlite3" and late == "threads-20261125T051200.124Z.jsonl.gz"
    assert backup_kind(early) == "store" and backup_kind(late) == "export"
    assert backup_kind("threads-20261125T051200Z.sqlite3") == "store"  # what `cqa backup FOLDER` named before
    for name in ("threads.sqlite3", "../threads-20261125T051200.123Z.sqlite3", "." + early + ".tmp", early + ".tmp"):
        assert backup_kind(name) is None and backup_path(tmp_path, name) is None, name
    for name in (early, late, "." + early + ".tmp", "notes.txt"):
        (tmp_path / name).write_text("x")
    assert [(f.name, f.kind) for f in backups_in(tmp_path)] == [(late, "export"), (early, "store")]
    assert backup_path(tmp_path, early) == tmp_path / early and backups_in(tmp_path / "none") == []


def test_tidy_keeps_the_newest_of_a_kind_and_drops_only_stale_partial_files(tmp_path):
    import os
    from datetime import datetime, timedelta, timezone

    from indexing.backup import STALE_PARTIAL_S, backups_in, dated_name, tidy
    t0 = datetime(2026, 11, 25, 5, 0, tzinfo=timezone.utc)
    stores = [dated_name("store", t0 + timedelta(minutes=i)) for i in range(4)]
    exports = [dated_name("export", t0 + timedelta(minutes=i)) for i in range(2)]
    for name in stores + exports + ["notes.txt"]:
        (tmp_path / name).write_text("x")
    stale, running = tmp_path / f".{dated_name('store', t0)}.tmp", tmp_path / f".{stores[-1]}x.tmp"
    foreign = tmp_path / ".cache.tmp"
    for path in (stale, running, foreign):
        path.write_text("partial")
    now = 1_800_000_000.0
    for path in (stale, foreign):
        os.utime(path, (now - STALE_PARTIAL_S - 1, now - STALE_PARTIAL_S - 1))
    os.utime(running, (now - 5, now - 5))  # a backup still writing
    done = tidy(tmp_path, "store", keep=2, now=now)
    assert done == {"deleted_older": [stores[1], stores[0]], "deleted_partial": [stale.name]}
    assert [f.name for f in backups_in(tmp_path)] == [stores[3], stores[2], exports[1], exports[0]]
    assert running.exists() and foreign.exists() and (tmp_path / "notes.txt").exists()  # not a backup's partial file
    assert tidy(tmp_path, "export", keep=0, now=now) == {"deleted_older": [], "deleted_partial": []}  # 0: keep all
