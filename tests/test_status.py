"""`cqa status` (`indexing.status`): what a data folder holds and what needs the operator, read without changing it."""
from __future__ import annotations

import json
import os
import subprocess
import time

from app.settings import Settings
from indexing.backup import backup, dated_name
from indexing.generations import LEASES, write_lease
from indexing.models import Answer, Thread
from indexing.status import STALE_BUILD_S, folder_status, lines
from indexing.store import ThreadStore

from .conftest import CQA, ROOT
from .test_erasure import _filled


def _files(folder) -> dict[str, tuple[int, float]]:
    """Each file's size and time, but SQLite's shared-memory index (``-shm``), which any reader of a store in WAL mode
    writes to coordinate with writers."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime) for p in folder.rglob("*")
            if p.is_file() and not p.name.endswith("-shm")}


def test_status_says_what_the_folder_holds_and_what_needs_the_operator(tmp_path, cli_env):
    data = tmp_path / "var"
    settings = Settings(data_dir=data)
    env = {**cli_env, "CQA_DATA_DIR": str(data), "CQA_DENSE_ENCODER": "base", "CQA_ANSWER_ENCODER": "none"}

    def status(*args: str) -> tuple[int, dict, str]:
        run = subprocess.run([*CQA, "status", *args], env=env, capture_output=True, text=True, cwd=ROOT, timeout=120)
        return run.returncode, json.loads(run.stdout.strip().splitlines()[-1]), run.stdout

    rc, said, _ = status("--json")  # an empty folder
    assert rc == 2 and said["store"] is None and "cqa ingest" in said["attention"][0]
    with _filled(settings.store_path) as store:
        store.delete("t3", takedown=True)
        store.erase_authors(["gone"], remove=True)
    rc, said, words = status()
    assert rc == 1 and (said["store"]["threads"], said["store"]["erasures"], said["store"]["takedowns"]) == (1, 1, 1)
    assert said["generation"]["behind"] == "generation" and "no live generation" in said["attention"][0]
    assert "1 users erased, 1 takedowns on record" in words and "attention    - no live generation" in words

    built = subprocess.run([*CQA, "reindex", "-q"], env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert built.returncode == 0, built.stderr
    backup(settings.store_path, settings.backups_folder / dated_name("store"))
    before = _files(data)
    rc, said, words = status("--check")
    assert _files(data) == before  # read, not changed: no file written, none touched
    assert rc == 0 and said["attention"] == [] and said["store"]["check"] == "ok", said
    g = said["generation"]
    assert g["live"] and g["behind"] is None and g["documents"]["total"] == 3 and g["dense_encoder"], g
    assert said["backups"]["stores"] == 1 and said["backups"]["newest"].endswith(".sqlite3")
    assert "up to date with the store" in words

    with ThreadStore(settings.store_path) as store:  # written since the build: search does not see it yet
        store.upsert([Thread(id="t4", subject="New here", answers=[Answer(id="t4a", text="Welcome")])])
    root = settings.index_root
    write_lease(root, "host-1-aaaa", g["live"], ttl_s=60)  # a serving process
    write_lease(root, "host-2-bbbb", g["live"], ttl_s=-30)  # one killed without dropping its lease
    dead = root / ".tmp-gen-dead"
    dead.mkdir()
    os.utime(dead, (time.time() - 2 * STALE_BUILD_S,) * 2)
    partial = settings.backups_folder / f".{dated_name('export')}.tmp"
    partial.write_text("half")
    os.utime(partial, (time.time() - 7200,) * 2)
    s = folder_status(settings, settings.backups_folder)
    assert s.generation.behind == "store" and [lease.holder for lease in s.generation.leases] == [
        "host-1-aaaa", "host-2-bbbb"]
    assert len(s.attention) == 4, s.attention
    for words in ("the store changed since", "left by a build that died", "host-2-bbbb", "writer that died"):
        assert sum(words in a for a in s.attention) == 1, (words, s.attention)
    assert (root / LEASES / "host-2-bbbb.json").exists()  # reported, not removed
    assert "served by    1 processes\n             host-1-aaaa" in "\n".join(lines(s))

    manifest = root / g["live"] / "manifest.json"
    kept = manifest.read_bytes()
    manifest.write_text("{not json")  # a damaged manifest: named, not a crash
    s = folder_status(settings, settings.backups_folder)
    assert s.generation.behind == "generation" and any("cannot be read" in a for a in s.attention), s.attention
    manifest.write_bytes(kept)

    settings.store_path.write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)  # damaged
    for side in ("-wal", "-shm"):
        (data / f"threads.sqlite3{side}").unlink(missing_ok=True)
    rc, said, _ = status("--json")
    assert rc == 2 and said["store"] is None and "cqa restore" in said["attention"][0]
