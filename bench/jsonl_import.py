"""What `cqa ingest` of a large JSONL file (a forum's export) costs in time and memory now that it is read as a stream
and written a batch at a time, against a whole read (the reference: the same command with each file parsed whole and
written in one transaction, as up to round 48; round 48's loader also held the file's bytes and their lines while it
parsed, so it needed more), side by side in one run, and whether both give the same store.

The forum: `cqa export` of the data folder's store (the 2016 corpus's by default: 3,869 threads, 19,680 comments),
written --copies times over (each copy's thread and comment ids suffixed, ~2, ~3...), as plain JSONL and gzipped. Each
arm is `cqa ingest FILE -q --encode never` as a user runs it (a subprocess, into an empty data folder of its own),
--repeats times in turn (the order rotating); the fastest wall time and the peak resident memory of each are kept:

- `whole`: the reference: the command run with the loader's stream turned off (each file parsed whole);
- `stream`: the command as it ships (its first line read, then the file read for its threads 2,000 at a time);
- `stream_strict`: with --strict (every record checked in a first pass before anything is written, then read again);
- `stream_gz`: the gzipped file (decompressed to its end once to check it, then read);
- `stdin_gz`: the gzipped file piped in (`cqa ingest -`: spooled to a temporary file, then as `stream_gz`).

Then every store is compared with the reference's by `cqa export`'s fingerprint. Prints a JSON object last.

    python bench/jsonl_import.py [--data-dir var/benchmarks/fullcorpus-2016] [--copies 10] [--repeats 2]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from indexing.backup import export  # noqa: E402
from indexing.loaders import load_jsonl  # noqa: E402

# Runs the command (stdin from the file named, or none) and writes its peak resident memory (KB). A child's peak counts
# what it held before its exec, so the launcher is a fresh small interpreter and the command is forked from it.
LAUNCHER = ("import resource, subprocess, sys; src = sys.argv[2]; "
            "code = subprocess.call(sys.argv[3:], stdin=open(src, 'rb') if src != '-' else None); "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
            "sys.exit(code)")

# The whole read: `cqa ingest` with every JSONL file loaded whole (``load`` without ``stream``), so ``ingest_paths``
# writes it in one transaction, as it did up to round 48.
WHOLE = ("import sys; import indexing.ingest as ingest; loaded = ingest.load; "
         "ingest.load = lambda f, fmt=None, strict=False, stream=False, dated=False: loaded(f, fmt, strict=strict); "
         "from app.cli import main; sys.exit(main(sys.argv[1:]))")

ARMS = ("whole", "stream", "stream_strict", "stream_gz", "stdin_gz")


def command(arm: str, plain: Path, gz: Path) -> tuple[list[str], str]:
    """The arm's command line and the file its standard input comes from ('-': none)."""
    cli = [sys.executable, "-m", "app.cli", "ingest"]
    tail = ["-q", "--encode", "never"]
    return {"whole": ([sys.executable, "-c", WHOLE, "ingest", str(plain), *tail], "-"),
            "stream": ([*cli, str(plain), *tail], "-"),
            "stream_strict": ([*cli, str(plain), "--strict", *tail], "-"),
            "stream_gz": ([*cli, str(gz), *tail], "-"),
            "stdin_gz": ([*cli, "-", *tail], str(gz))}[arm]


def ingest(cmd: list[str], stdin: str, data_dir: Path) -> dict:
    """The command into ``data_dir`` (emptied first): wall seconds, peak resident memory (MB), its summary line."""
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    env = {**os.environ, "CQA_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    rss = data_dir.parent / f"{data_dir.name}.rss"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", LAUNCHER, str(rss), stdin, *cmd], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed ({p.returncode}): {p.stderr[-2000:]}")
    return {"seconds": seconds, "peak_rss_mb": round(int(rss.read_text()) / 1024, 1),
            "summary": json.loads(p.stdout.strip().splitlines()[-1])}


def write_forum(source: Path, copies: int, plain: Path, gz: Path) -> dict:
    """The store's threads ``copies`` times over as JSONL, plain and gzipped, written a line at a time."""
    base = plain.with_suffix(".base")
    export(source, base, with_ledger=False)
    threads = load_jsonl(base, strict=True).threads
    base.unlink()
    n = answers = 0
    with plain.open("w", encoding="utf-8") as a, gzip.open(gz, "wt", encoding="utf-8", compresslevel=6) as b:
        for k in range(1, copies + 1):
            for t in threads:
                if k > 1:
                    t = t.model_copy(update={"id": f"{t.id}~{k}", "answers": [
                        x.model_copy(update={"id": f"{x.id}~{k}"}) for x in t.answers]})
                line = t.model_dump_json(exclude_defaults=True) + "\n"
                a.write(line)
                b.write(line)
                n += 1
                answers += len(t.answers)
    return {"threads": n, "answers": answers, "bytes": plain.stat().st_size, "bytes_gz": gz.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=ROOT / "var" / "benchmarks" / "fullcorpus-2016",
                   help="the data folder whose store is the forum (default: the 2016 corpus the search benches build)")
    p.add_argument("--copies", type=int, default=1, help="the forum written N times over (default 1)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--arms", default=",".join(ARMS), help=f"which to run, of {', '.join(ARMS)}")
    args = p.parse_args(argv)
    source = args.data_dir / "threads.sqlite3"
    if not source.exists():
        raise SystemExit(f"no store at {source}; build the 2016 corpus first (docs/BENCHMARKS.md) or pass --data-dir")
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"unknown arms {sorted(unknown)}; expected some of {', '.join(ARMS)}")
    with tempfile.TemporaryDirectory(prefix="jsonl-import-") as tmp:
        tmp = Path(tmp)
        plain, gz = tmp / "forum.jsonl", tmp / "forum.jsonl.gz"
        made = write_forum(source, args.copies, plain, gz)
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        for r in range(args.repeats):
            for arm in arms[r % len(arms):] + arms[:r % len(arms)]:  # the order rotates
                runs[arm].append(ingest(*command(arm, plain, gz), tmp / arm))
                print(f"# run {r} {arm}: {runs[arm][-1]['seconds']:.2f} s, {runs[arm][-1]['peak_rss_mb']} MB",
                      file=sys.stderr)
        fingerprints = {a: export(tmp / a / "threads.sqlite3", tmp / f"{a}.out.jsonl")["fingerprint"] for a in arms}
        best = {a: min(x["seconds"] for x in v) for a, v in runs.items()}
        ref = "whole" if "whole" in arms else arms[0]
        result = {
            "bench": "jsonl_import", "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"), "copies": args.copies, **made,
            "seconds": {a: [round(x["seconds"], 2) for x in v] for a, v in runs.items()},
            "best_seconds": {a: round(v, 2) for a, v in best.items()},
            "peak_rss_mb": {a: max(x["peak_rss_mb"] for x in v) for a, v in runs.items()},
            f"time_ratio_to_{ref}": {a: round(best[a] / best[ref], 2) for a in arms},
            "summary": {a: {f: v[-1]["summary"].get(f) for f in ("threads", "answers", "skipped", "inserted")}
                        for a, v in runs.items()},
            f"same_store_as_{ref}": {a: fingerprints[a] == fingerprints[ref] for a in arms},
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
