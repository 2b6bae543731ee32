"""The build after one change, as the automatic refresh runs it: `cqa reindex --if-stale --translation-later -q` in a
child process, with this tree's code against a reference revision's (`git archive`), side by side on two copies of
one data folder (its live generation hard-linked, its store and caches copied).

Each round adds the same new comment to the first thread of both copies' stores, its vectors encoded into each copy's
embedding cache first (`encode_ahead`, as POST /threads does), then builds each copy, in alternating order. A first
round (the first build of each side's code on the folder: this tree's reads the whole store once, as a generation
built before it lacks the record of the store's threads) is reported apart.

Per side: the command's wall seconds (process start, imports and build), the build's own seconds, when its first
generation went live (`live_before_translation`, else the build's end), each stage's seconds, and the child's peak
resident memory; medians over the rounds, and the reference / current ratio. Last, whether the two copies' live
generations hold the same documents, byte-identical lexical indexes and the same dense rows. Prints a JSON object
last.

    python bench/change_build.py --data-dir /tmp/big10 --reference 4964133 --rounds 5
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.settings import Settings  # noqa: E402
from indexing.documents import Documents, documents_file  # noqa: E402
from indexing.generations import current_generation  # noqa: E402
from indexing.models import Answer  # noqa: E402
from indexing.reindex import encode_ahead  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402

SIDES = ("reference", "current")
SAME_FILES = ("terms", "bm25", "lm", "dense/rows.npy", "dense/delta_rows.npy")  # folders: every file in them


def copy_folder(src: Path, dst: Path) -> None:
    """``src``'s store and caches copied (SQLite's backup, consistent while nothing writes) and its generations
    hard-linked: a build never writes a published file, it links or writes new ones."""
    dst.mkdir(parents=True)
    shutil.copytree(src / "indexes", dst / "indexes", copy_function=os.link,
                    ignore=shutil.ignore_patterns(".*"))  # the lock, and any file written in place before a rename
    (dst / "cache").mkdir()
    for db in [src / "threads.sqlite3", *sorted((src / "cache").glob("*.sqlite3"))]:
        with sqlite3.connect(db) as a, sqlite3.connect(dst / db.relative_to(src)) as b:
            a.backup(b)


def add_comment(folder: Path, k: int) -> str:
    settings = Settings(data_dir=folder)
    with ThreadStore(settings.store_path) as st:
        t = next(iter(st.iter_threads(batch=1)))
        answer = Answer(id=f"{t.id}_bench{k}", text=f"a new comment number {k} on the visa office's opening hours")
        t = t.model_copy(update={"answers": t.answers + [answer]})
        encode_ahead(settings, [t], 32)
        st.upsert([t])
    return t.id


# the command in the child, which says its own peak resident memory on its way out (RUSAGE_SELF: every thread of it)
CHILD = ("import atexit, json, resource, runpy, sys; atexit.register(lambda: print('PEAK_RSS_KB', "
         "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); sys.argv[0] = 'cqa'; "
         "runpy.run_module('app.cli', run_name='__main__')")


def build(tree: Path, folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "--data-dir", str(folder), "reindex", "--if-stale",
                           "--translation-later", "-q"], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"the build failed ({tree}):\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    peak = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KB ")]
    live = summary.get("live_before_translation") or {"seconds": summary["seconds"]}
    return {"wall_s": wall, "build_s": summary["seconds"], "live_s": live["seconds"],
            "stages": {k: v["seconds"] for k, v in summary["indexes"].items()},
            "documents": summary["indexes"]["documents"], "documents_total": summary["documents"]["total"],
            "peak_rss_mb": int(peak[-1]) / 1024}


def same_generations(a: Path, b: Path) -> dict:
    ga, gb = a / "indexes" / current_generation(a / "indexes"), b / "indexes" / current_generation(b / "indexes")
    docs = Documents.load(documents_file(ga)).__dict__ == Documents.load(documents_file(gb)).__dict__
    files = {}
    for name in SAME_FILES:
        if (ga / name).is_dir():
            files[name] = sorted(os.listdir(ga / name)) == sorted(os.listdir(gb / name)) and all(
                filecmp.cmp(ga / name / f, gb / name / f, shallow=False) for f in os.listdir(ga / name))
        elif (ga / name).exists() or (gb / name).exists():
            files[name] = filecmp.cmp(ga / name, gb / name, shallow=False)
    return {"documents": docs, **files}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True, help="a data folder with a live generation (not changed)")
    ap.add_argument("--reference", required=True, help="the git revision to compare with (e.g. the last release)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=Path, default=None, help="where the copies go (default: a temporary folder)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cqa-change-build-", dir=args.work))
    try:
        trees = {"reference": work / "reference-tree", "current": ROOT}
        trees["reference"].mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.reference], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(trees["reference"])], input=archive, check=True)
        folders = {side: work / side for side in SIDES}
        for side in SIDES:
            copy_folder(args.data_dir, folders[side])
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        first: dict[str, dict] = {}
        for k in range(args.rounds + 1):
            order = SIDES if k % 2 else SIDES[::-1]
            for side in order:
                add_comment(folders[side], k)
            for side in order:
                run = build(trees[side], folders[side])
                if k:
                    runs[side].append(run)
                else:
                    first[side] = run
                print(f"round {k} {side}: wall {run['wall_s']:.2f} s, build {run['build_s']:.2f} s, "
                      f"documents {run['stages'].get('documents')} s, dense {run['stages'].get('dense')} s",
                      file=sys.stderr)
        same = same_generations(folders["reference"], folders["current"])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(side: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[side]), 3)
    stages = sorted({s for side in SIDES for r in runs[side] for s in r["stages"]})
    result = {
        "bench": "change_build", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
        "data_dir": str(args.data_dir), "reference": args.reference,
        "current": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip() + (" (with uncommitted changes)" if subprocess.run(
                                      ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                      capture_output=True, text=True).stdout.strip() else ""),
        "documents": runs["current"][-1]["documents_total"], "rounds": args.rounds,
        "first_build": {side: {k: first[side][k] for k in ("wall_s", "build_s", "live_s")} for side in SIDES},
        "median": {side: {key: med(side, key) for key in ("wall_s", "build_s", "live_s", "peak_rss_mb")}
                   for side in SIDES},
        "median_stage_s": {side: {s: round(statistics.median(r["stages"].get(s, 0.0) for r in runs[side]), 3)
                                  for s in stages} for side in SIDES},
        "ratio": {key: round(med("reference", key) / med("current", key), 2)
                  for key in ("wall_s", "build_s", "live_s", "peak_rss_mb")},
        "seconds": {side: {key: [round(r[key], 3) for r in runs[side]] for key in ("wall_s", "build_s")}
                    for side in SIDES},
        "current_documents_record": runs["current"][-1]["documents"],
        "same": same,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
