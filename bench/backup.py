"""`cqa backup` and `cqa export` of a store that a real `cqa serve` is writing to and searching, as an operator runs
them: each command a process of its own, timed whole (wall, with the interpreter's start) and by its own summary.
Meanwhile one client POSTs a new thread with two comments to /threads every 0.1 s and another sends POST /search
(target answers, reranked) every 0.25 s; their latencies are split by whether a backup or export was running.

The reference, side by side in the same run on the same store: SQLite's online backup API as Python offers it
(`sqlite3.Connection.backup`, the whole file in one step), in this process; and the same copy and export asked of
the serving process, `POST /backups` (timed to its job's end through GET /jobs/{id}), each file then downloaded by
`GET /backups/{name}` (timed apart). Every copy's answers and threads are counted, and every backup (the downloaded
ones too) passes `PRAGMA integrity_check`.

The store is a copy of the full 2016 corpus's (DATA/benchmarks/fullcorpus-2016, built if missing); --copies N adds
N-1 copies of every thread under new ids first, for a store N times the size (the live index generation holds only
the original; the automatic refresh is off, so no build runs meanwhile). Prints a JSON object last.

    python bench/backup.py --data-dir /tmp/cqa-full --rounds 5 --copies 1
    python bench/backup.py --data-dir /tmp/cqa-full --rounds 5 --copies 10

--demo instead: an empty data folder that the server fills with the shipped demo corpus (seconds; what the tests run).
"""
from __future__ import annotations

import argparse
import json
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

from load import PacedClient, built_corpus, get_json, post_json, server, split_latency  # noqa: E402

TOKEN = "backup-bench"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def grow(store_path: Path, copies: int) -> dict:
    """Add ``copies`` - 1 copies of every thread, ids suffixed ~k (answer ids too)."""
    from indexing.store import ThreadStore
    with ThreadStore(store_path) as store:
        originals = list(store.iter_threads())
        for k in range(1, copies):
            store.upsert(t.model_copy(update={"id": f"{t.id}~{k}", "answers": [
                a.model_copy(update={"id": f"{a.id}~{k}"}) for a in t.answers]}) for t in originals)
        return store.counts()


def reference_backup(store_path: Path, dest: Path) -> dict:
    """Python's sqlite3 online backup (the whole database in one step), checked as `cqa backup` checks its copy."""
    t0 = time.perf_counter()
    src = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    dst = sqlite3.connect(dest)
    try:
        src.backup(dst)
    finally:
        src.close()
    try:
        (check,) = dst.execute("PRAGMA integrity_check").fetchone()
        (threads,) = dst.execute("SELECT COUNT(*) FROM threads").fetchone()
        (answers,) = dst.execute("SELECT COUNT(*) FROM answers").fetchone()
    finally:
        dst.close()
    return {"seconds": round(time.perf_counter() - t0, 3), "threads": threads, "answers": answers,
            "integrity": check, "bytes": dest.stat().st_size}


def run_cli(args: list[str], env: dict) -> tuple[float, float, dict]:
    """A `cqa` command as a process: (wall start, wall seconds, its summary)."""
    w0, t0 = time.time(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", *args, "-q"] if args[0] == "export"
                          else [sys.executable, "-m", "app.cli", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"cqa {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return w0, time.perf_counter() - t0, json.loads(done.stdout.strip().splitlines()[-1])


def run_api(base: str, kind: str, dest: Path) -> tuple[float, float, dict]:
    """POST /backups (``kind`` store or export) on the serving process, waited for through GET /jobs/{id}, then the
    file downloaded by GET /backups/{name} into ``dest``: (wall start, wall seconds to the job's end, its summary with
    the download's seconds)."""
    import urllib.request
    w0, t0 = time.time(), time.perf_counter()
    status, submitted = post_json(base + "/backups", {"kind": kind}, headers=ADMIN)
    if status != 202:
        raise SystemExit(f"POST /backups answered {status}: {submitted}")
    job = submitted["job"]
    while job["state"] not in ("succeeded", "failed"):
        time.sleep(0.02)
        job = get_json(f"{base}/jobs/{job['id']}")[1]
    wall = time.perf_counter() - t0
    if job["state"] != "succeeded":
        raise SystemExit(f"the {kind} backup job failed: {job['error']}")
    t1 = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(f"{base}/backups/{job['result']['name']}", headers=ADMIN)) as r:
        dest.write_bytes(r.read())
    summary = {**job["result"], "download_s": round(time.perf_counter() - t1, 3), "downloaded": str(dest)}
    if dest.stat().st_size != summary["bytes"]:
        raise SystemExit(f"downloaded {dest.stat().st_size} bytes of {summary['bytes']}")
    return w0, wall, summary


def main() -> None:
    import os
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--rounds", type=int, default=5, help="backups and exports each (and reference backups)")
    ap.add_argument("--copies", type=int, default=1, help="the store this many times the corpus (default 1)")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between two commands")
    ap.add_argument("--demo", action="store_true", help="the shipped demo corpus instead of the full 2016 corpus")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="cqa-backup-") as tmp:
        folder, out_dir = Path(tmp) / "data", Path(tmp) / "copies"
        out_dir.mkdir()
        store_path = folder / "threads.sqlite3"
        extra = {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": "0"}
        if args.demo:
            extra["CQA_SHARED_DATA_DIR"] = str(Path(tmp) / "none")  # so the bootstrap takes the demo corpus
            with server(folder, extra, bootstrap=True):
                pass
        else:
            shutil.copytree(built_corpus(args.data_dir).data_dir, folder)
        counts = grow(store_path, args.copies)
        size = store_path.stat().st_size
        env = {**os.environ, "CQA_DATA_DIR": str(folder), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        with server(folder, extra) as (base, _):
            def write(i):
                thread = {"id": f"bench-{i}", "subject": f"Bench question {i} about visas",
                          "body": f"Where do I renew a residence permit, case {i}?",
                          "answers": [{"id": f"bench-{i}-a{j}", "text": f"At the immigration office, desk {j} ({i})."}
                                      for j in range(2)]}
                return post_json(base + "/threads", {"threads": [thread]}, headers=ADMIN)[0]

            def search(i):
                return post_json(base + "/search", {"question": {"body": f"renew my visa {i % 7}"}, "k": 10,
                                                    "target": "answers"})[0]
            post_json(base + "/search", {"question": {"body": "warm up"}, "target": "answers"})
            write(-1)  # loads the answer encoder that encoding ahead uses
            writer, searcher = PacedClient(write, 0.1), PacedClient(search, 0.25)
            writer.start()
            searcher.start()
            runs: dict[str, list[dict]] = {"backup": [], "export": [], "api_backup": [], "api_export": [],
                                           "reference_backup": []}
            windows = []
            try:
                time.sleep(5)  # writes and searches with nothing else running
                for r in range(args.rounds):
                    for kind in ("backup", "export"):
                        dest = out_dir / f"{kind}-{r}.{'sqlite3' if kind == 'backup' else 'jsonl'}"
                        cmd = [kind, str(dest)] if kind == "backup" else [kind, "-o", str(dest)]
                        w0, wall, summary = run_cli(cmd, env)
                        windows.append((w0, w0 + wall))
                        runs[kind].append({"wall_s": round(wall, 3), **summary})
                        time.sleep(args.pause)
                    for kind in ("store", "export"):  # the same through the serving process: POST /backups
                        suffix = "sqlite3" if kind == "store" else "jsonl.gz"
                        w0, wall, summary = run_api(base, kind, out_dir / f"api-{kind}-{r}.{suffix}")
                        windows.append((w0, w0 + wall))
                        runs["api_backup" if kind == "store" else "api_export"].append({"wall_s": round(wall, 3),
                                                                                         **summary})
                        time.sleep(args.pause)
                    w0 = time.time()
                    ref = reference_backup(store_path, out_dir / f"reference-{r}.sqlite3")
                    windows.append((w0, w0 + ref["seconds"]))
                    runs["reference_backup"].append(ref)
                    time.sleep(args.pause)
                time.sleep(3)
            finally:
                writer.stop.set()
                searcher.stop.set()
                writer.join()
                searcher.join()
            for b in runs["backup"] + runs["api_backup"]:
                with sqlite3.connect(b.get("downloaded", b["backup"])) as c:
                    b["integrity"] = c.execute("PRAGMA integrity_check").fetchone()[0]

    def best(kind, key):
        return min(x[key] for x in runs[kind])
    print(json.dumps({
        "bench": "backup", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}, "
                                      f"{os.cpu_count()} CPUs",
        "store": {**counts, "bytes": size, "copies": args.copies}, "rounds": args.rounds, "runs": runs,
        "best_s": {"backup": best("backup", "seconds"), "backup_wall": best("backup", "wall_s"),
                   "export": best("export", "seconds"), "export_wall": best("export", "wall_s"),
                   "api_backup": best("api_backup", "seconds"), "api_backup_wall": best("api_backup", "wall_s"),
                   "api_backup_download": best("api_backup", "download_s"),
                   "api_export": best("api_export", "seconds"), "api_export_wall": best("api_export", "wall_s"),
                   "reference_backup": best("reference_backup", "seconds")},
        "backup_vs_reference": round(best("reference_backup", "seconds") / best("backup", "seconds"), 2),
        "api_backup_wall_vs_cli_wall": round(best("backup", "wall_s") / best("api_backup", "wall_s"), 2),
        "all_intact": all(b["integrity"] == "ok" for b in runs["backup"] + runs["api_backup"] + runs["reference_backup"]),
        "threads_grew": [b["threads"] for b in runs["backup"]],
        "api_threads_grew": [b["threads"] for b in runs["api_backup"]],
        "writes": split_latency(writer.samples, windows), "searches": split_latency(searcher.samples, windows)}))


if __name__ == "__main__":
    main()
