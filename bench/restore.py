"""Restoring the store from a backup made before an erasure and a takedown, as an operator runs it: `cqa restore`,
side by side with the way the README gave before it (the copy put in place by hand, then `cqa reindex --full`; an
export read by `cqa ingest`, then `cqa reindex --full`).

On a copy of a data folder (the 2016 corpus's by default, with its embedding cache, as on the machine that serves
it), a store backup and an export are made off-site (outside the backups folder: an erasure does not rewrite them).
Then the user with the most comments, at most 200 (`--remove`), is erased with `remove`, and a thread taken down
(`--takedown`; by default the one with the most comments no other post repeats), in the store, their texts' vectors
deleted from the embedding cache, and a generation built from scratch, as the erasure's job does. Each arm runs on its own copy of that folder:

- **store, restore**: `cqa restore OLD.sqlite3 --replace` (the store replaced is the ledger);
- **store, by hand**: OLD.sqlite3 copied over threads.sqlite3, then `cqa reindex --full`;
- **export, restore**: no store left (damaged, say), a store backup in the backups folder made after the erasure (as
  its job rewrites them), `cqa restore OLD.jsonl.gz`;
- **export, by hand**: `cqa ingest OLD.jsonl.gz` into the folder without a store, then `cqa reindex --full`.

Then the machine lost with its data folder and backups folder, and only an export made after the erasure left
(off-site, NEW.jsonl.gz, which carries the store's ledger as its first line), each into a new, empty data folder
(no build: these arms are about what the store keeps):

- **lost, ingest**: `cqa ingest NEW.jsonl.gz` (it takes the ledger line into the empty store);
- **lost, restore**: `cqa restore NEW.jsonl.gz --no-reindex`;
- **lost, ingest, no ledger**: `cqa ingest` of the same export written with `cqa export --no-ledger`, as every export
  was before exports carried their ledger: the control.

After each: the seconds to a live generation, how many of the erased user's and the thread's texts (40 characters
or more, those no other post holds) the restored store holds, and what the forum's sync sending again every thread
the user wrote in, and the thread taken down, stores (`ThreadStore.upsert`, as POST /threads writes).

Last, the ledger line's cost (`--ledger-records`, 1,000): a copy of the store with as many erasures and takedowns on
record, exported with the line and without it in turn, each export ingested into an empty store.

    python bench/restore.py [--data-dir var/benchmarks/fullcorpus-2016] [--remove U268] [--takedown ID] [--ledger-records N]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from erasure import heaviest  # noqa: E402

from app.settings import Settings  # noqa: E402
from indexing.backup import backup, dated_name, export  # noqa: E402
from indexing.erasure import forget_vectors  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402

CQA = [sys.executable, "-m", "app.cli"]


def cqa(data: Path, *args: str) -> tuple[float, dict]:
    """One `cqa` command on the data folder ``data``: its seconds and the JSON of its last line."""
    env = {**os.environ, "CQA_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    run = subprocess.run([*CQA, *args, "-q"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"cqa {' '.join(args)}: exit {run.returncode}\n{run.stderr[-3000:]}")
    return seconds, json.loads(run.stdout.strip().splitlines()[-1])


def without_store(data: Path) -> None:
    """The data folder ``data`` without its store (and the store's log): damaged, say."""
    for side in ("", "-wal", "-shm"):
        Path(f"{data / 'threads.sqlite3'}{side}").unlink(missing_ok=True)


def held(store_file: Path, texts: list[str]) -> set[str]:
    """Those of ``texts`` some post of the store at ``store_file`` holds (within its text, subject or body): one
    read of the store, then Python's substring search, not SQLite's ``instr`` once per text and row."""
    with sqlite3.connect(store_file) as c:
        everything = "\0".join([r[0] for r in c.execute("SELECT text FROM answers")]
                                + [f"{s}\0{b}" for s, b in c.execute("SELECT subject, body FROM threads")])
    return {t for t in texts if t in everything}


def synced(store_file: Path, resend: list, texts: list[str]) -> dict:
    """What the store at ``store_file`` makes of the forum sending ``resend`` again (a copy of it: nothing kept), and
    how many of ``texts`` it holds after."""
    with tempfile.TemporaryDirectory(prefix="cqa-sync-") as tmp:
        copy = Path(tmp) / "s.sqlite3"
        backup(store_file, copy)
        with ThreadStore(copy) as store:
            r = store.upsert(resend)
        return {"inserted": r.inserted, "updated": r.updated, "unchanged": r.unchanged, **r.erased(),
                "texts_after": len(held(copy, texts))}


def ledger_line_cost(store_file: Path, records: int, repeats: int = 3) -> dict:
    """What the ledger line costs an export and its ingest: a copy of the store with ``records`` erasures and as
    many takedowns on record (ids no post carries), exported with the line and with ``--no-ledger`` in turn
    (``repeats`` times each, the fastest kept), and each export ingested into an empty store."""
    from indexing.ingest import ingest_paths
    from indexing.ledger import record_takedown
    with tempfile.TemporaryDirectory(prefix="cqa-ledger-line-") as tmp:
        tmp = Path(tmp)
        copy = tmp / "s.sqlite3"
        backup(store_file, copy)
        with ThreadStore(copy) as store:
            store.erase_authors([f"bench-erased-{i}" for i in range(records)], remove=True)
            with store._transaction() as cur:
                for i in range(records):
                    record_takedown(cur, f"bench-down-{i}", None if i % 2 else f"bench-down-c{i}", time.time())
        best = {arm: {"export_s": float("inf"), "ingest_s": float("inf")} for arm in ("ledger", "no_ledger")}
        for r in range(repeats):
            for arm in (("ledger", "no_ledger") if r % 2 == 0 else ("no_ledger", "ledger")):
                out = tmp / f"{arm}-{r}.jsonl.gz"
                t0 = time.perf_counter()
                export(copy, out, with_ledger=arm == "ledger")
                t1 = time.perf_counter()
                with ThreadStore(tmp / f"in-{arm}-{r}.sqlite3") as store:
                    report = ingest_paths(store, [out], progress=False)
                t2 = time.perf_counter()
                assert bool(report.ledgers) == (arm == "ledger") and report.skipped == 0, report.as_dict()
                best[arm] = {"export_s": min(best[arm]["export_s"], round(t1 - t0, 3)),
                             "ingest_s": min(best[arm]["ingest_s"], round(t2 - t1, 3)), "bytes": out.stat().st_size}
        with gzip.open(tmp / "ledger-0.jsonl.gz", "rt", encoding="utf-8") as fh:
            line_bytes = len(fh.readline().encode())
    return {"records": records, **best, "ledger_line_bytes": line_bytes,
            "ratio_export": round(best["ledger"]["export_s"] / best["no_ledger"]["export_s"], 3),
            "ratio_ingest": round(best["ledger"]["ingest_s"] / best["no_ledger"]["ingest_s"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016",
                    help="a data folder with a live generation (copied)")
    ap.add_argument("--remove", help="the author erased (default: see above)")
    ap.add_argument("--takedown", help="the thread taken down (default: see above)")
    ap.add_argument("--ledger-records", type=int, default=1000,
                    help="erasures and takedowns on record for the ledger line's cost (0: not measured)")
    args = ap.parse_args()
    store_file = args.data_dir / "threads.sqlite3"
    if not store_file.is_file():
        raise SystemExit(f"{args.data_dir}: no store; python bench/rerank_quality.py builds the 2016 corpus's folder")
    user = args.remove or heaviest(store_file, 200, set())
    with sqlite3.connect(store_file) as c:
        if args.takedown is None:
            args.takedown = c.execute(
                "SELECT t.id FROM threads t JOIN answers a ON a.thread_id = t.id WHERE (t.author_id IS NULL OR "
                "t.author_id != ?) AND a.text IN (SELECT text FROM answers GROUP BY text HAVING COUNT(*) = 1) "
                "GROUP BY t.id ORDER BY COUNT(*) DESC, t.id LIMIT 1", (user,)).fetchone()[0]
        texts = sorted({t for (t,) in c.execute("SELECT text FROM answers WHERE (author_id=? OR thread_id=?) AND "
                                                "length(text) >= 40", (user, args.takedown))})  # each text once
    with ThreadStore(store_file) as store:
        resend = [t for t in store.iter_threads()
                  if t.id == args.takedown or user in {t.author_id, *(a.author_id for a in t.answers)}]
    out: dict = {"bench": "restore", "machine": platform.processor() or platform.machine(),
                 "date": time.strftime("%Y-%m-%d"), "user": user, "takedown": args.takedown,
                 "threads_resent": len(resend)}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cqa-restore-") as tmp:
        tmp = Path(tmp)
        base, offsite = tmp / "base", tmp / "offsite"
        shutil.copytree(args.data_dir, base, ignore=shutil.ignore_patterns("reports", "jobs", "backups"))
        offsite.mkdir()
        backup(base / "threads.sqlite3", offsite / "old.sqlite3")
        export(base / "threads.sqlite3", offsite / "old.jsonl.gz")
        with ThreadStore(base / "threads.sqlite3") as store:
            t0 = time.perf_counter()
            erased = store.erase_authors([user], remove=True)
            gone = store.delete(args.takedown, takedown=True)
            out["erasure_store_ms"] = round(1000 * (time.perf_counter() - t0), 1)
            erased.texts += store.unheld([gone.subject, gone.body, *(a.text for a in gone.answers)])
        out["erased"] = erased.summary()
        out["cache_vectors_deleted"] = forget_vectors(Settings(data_dir=base), erased)  # as the erasure does
        out["rebuild_after_erasure_s"] = round(cqa(base, "reindex", "--full")[0], 2)  # as the erasure's job does
        print(f"erased and rebuilt ({time.perf_counter() - start:.0f} s in)", file=sys.stderr)
        elsewhere = held(base / "threads.sqlite3", texts)
        texts = [t for t in texts if t not in elsewhere]  # those no other post holds
        out["texts_checked"] = len(texts)
        out["texts_in_old_backup"] = len(held(offsite / "old.sqlite3", texts))

        export(base / "threads.sqlite3", offsite / "new.jsonl.gz")  # after the erasure: it carries the ledger
        export(base / "threads.sqlite3", offsite / "new-bare.jsonl.gz", with_ledger=False)

        arms: dict[str, dict] = {}
        for arm in ("store_restore", "store_by_hand", "export_restore", "export_by_hand", "lost_ingest",
                    "lost_restore", "lost_ingest_no_ledger"):
            data = tmp / arm
            if arm.startswith("lost_"):
                data.mkdir()  # a new machine's empty data folder
            else:
                shutil.copytree(base, data)
            if arm.startswith("lost_ingest"):
                name = "new-bare.jsonl.gz" if arm.endswith("no_ledger") else "new.jsonl.gz"
                seconds, summary = cqa(data, "ingest", str(offsite / name), "--encode", "never")
                note = {"ledgers": summary.get("ledgers", [])}
            elif arm == "lost_restore":
                seconds, summary = cqa(data, "restore", str(offsite / "new.jsonl.gz"), "--no-reindex")
                note = {k: summary[k] for k in ("erasures_carried", "takedowns", "ledgers_read")}
            elif arm == "store_restore":
                seconds, summary = cqa(data, "restore", str(offsite / "old.sqlite3"), "--replace")
                note = {k: summary[k] for k in ("authors_erased", "threads_deleted", "answers_removed",
                                                "takedowns_applied", "build_seconds")}
            elif arm == "store_by_hand":
                t0 = time.perf_counter()
                without_store(data)
                shutil.copyfile(offsite / "old.sqlite3", data / "threads.sqlite3")
                seconds, summary = cqa(data, "reindex", "--full")
                seconds += time.perf_counter() - t0
                note = {"build_seconds": summary["seconds"]}
            elif arm == "export_restore":
                (data / "backups").mkdir()
                backup(data / "threads.sqlite3", data / "backups" / dated_name("store"))  # made after the erasure
                without_store(data)
                seconds, summary = cqa(data, "restore", str(offsite / "old.jsonl.gz"))
                note = {"export": summary["export"], "build_seconds": summary["build_seconds"]}
            else:
                without_store(data)
                ingest_s, _ = cqa(data, "ingest", str(offsite / "old.jsonl.gz"), "--encode", "never")
                seconds, summary = cqa(data, "reindex", "--full")
                note = {"ingest_seconds": round(ingest_s, 2), "build_seconds": summary["seconds"]}
                seconds += ingest_s
            arms[arm] = {"seconds": round(seconds, 2), **note,
                         "texts_left": len(held(data / "threads.sqlite3", texts)),
                         "sync_again": synced(data / "threads.sqlite3", resend, texts)}
            print(f"{arm:22s} ({time.perf_counter() - start:.0f} s in) {seconds:7.2f} s  texts left "
                  f"{arms[arm]['texts_left']:4d}  sync {arms[arm]['sync_again']}", file=sys.stderr)
            shutil.rmtree(data)
    out["arms"] = arms
    if args.ledger_records:
        out["ledger_line"] = ledger_line_cost(store_file, args.ledger_records)
        print(f"ledger line: {out['ledger_line']}", file=sys.stderr)
    out["ratio_store_restore_to_by_hand"] = round(arms["store_restore"]["seconds"] / arms["store_by_hand"]["seconds"], 3)
    out["ratio_export_restore_to_by_hand"] = round(arms["export_restore"]["seconds"]
                                                   / arms["export_by_hand"]["seconds"], 3)
    assert all(arms[a]["texts_left"] == 0 for a in ("store_restore", "export_restore", "lost_ingest", "lost_restore",
                                                    "lost_ingest_no_ledger")), arms
    print(json.dumps(out))


if __name__ == "__main__":
    main()
