"""What importing a forum from a StackExchange data dump costs `cqa ingest`, against the same forum as a JSONL file
(`cqa export`'s format, the reference), side by side in one run, and whether both give the same store.

The forum: `cqa export` of the data folder's store (the 2016 corpus's by default: 3,869 threads, 19,680 comments), and
the same threads written as a StackExchange dump's folder by `scripts/make_stackexchange_dump.py` (Posts.xml with HTML
bodies, PostLinks.xml, Users.xml). Each is ingested by `cqa ingest` as a user runs it (a subprocess, into an empty data
folder of its own), --repeats times in turn (the order alternating); the fastest wall time and each one's peak resident
memory are kept. `html_text` is also timed alone over the same bodies (the dump's HTML read as text). Then the two
stores are compared thread by thread: subject, body, author, time and each comment's id, text, author and time in
order (the dump's category is its tag, compared as such). A third arm ingests the dump as the site publishes it,
one .7z archive of the same files (`cqa ingest site.7z`: its Posts.xml and PostLinks.xml unpacked into $TMPDIR),
against the unpacked folder, the two stores compared by `cqa export`'s fingerprint. With --copies N, the forum is
written N times over (ids suffixed), to see how each import's memory grows with the forum. Prints a JSON object last.

    python bench/stackexchange_import.py [--data-dir var/benchmarks/fullcorpus-2016] [--repeats 3] [--limit N]
                                         [--copies N]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import py7zr  # noqa: E402

from indexing.backup import export  # noqa: E402
from indexing.loaders import load_jsonl  # noqa: E402
from indexing.store import Snapshot  # noqa: E402
from indexing.stackexchange import html_text  # noqa: E402
from scripts.make_stackexchange_dump import as_html, tag_of, write_dump  # noqa: E402


def ingest(path: Path, data_dir: Path) -> dict:
    """`cqa ingest PATH -q` into ``data_dir`` (its store removed first): wall seconds, the process's peak resident
    memory (MB) and its summary line."""
    for f in data_dir.glob("threads.sqlite3*"):
        f.unlink()
    env = {**os.environ, "CQA_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    out, err, rss = data_dir / "out.txt", data_dir / "err.txt", data_dir / "rss.txt"
    with out.open("w") as o, err.open("w") as e:
        t0 = time.perf_counter()
        code = subprocess.run([sys.executable, "-c", LAUNCHER, str(rss), sys.executable, "-m", "app.cli", "ingest",
                               str(path), "-q", "--encode", "never"], cwd=ROOT, env=env, stdout=o, stderr=e).returncode
        seconds = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"cqa ingest {path} failed ({code}): {err.read_text()[-2000:]}")
    return {"seconds": seconds, "peak_rss_mb": round(int(rss.read_text()) / 1024, 1),
            "summary": json.loads(out.read_text().strip().splitlines()[-1])}


# Runs the command and writes its peak resident memory (KB). A child's peak counts what it held before its exec, so
# a command forked from this bench, which holds the forum's threads, would report at least this bench's size: the
# launcher is a fresh small interpreter, and the command is forked from it.
LAUNCHER = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[2:]); "
            "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
            "sys.exit(code)")


def compare(reference: Path, dump: Path) -> dict:
    """The two stores, thread by thread: how many threads and texts are the same, and the first few that are not."""
    with Snapshot(reference) as a, Snapshot(dump) as b:
        ours, theirs = list(a.threads()), {t.id: t for t in b.threads()}
    same_threads = same_texts = texts = 0
    differ: list[str] = []
    for t in ours:
        u = theirs.get(t.id)
        pairs = [(t.subject, u.subject if u else None), (t.body, u.body if u else None)]
        pairs += [(x.text, y.text) for x, y in zip(t.answers, u.answers)] if u else []
        texts += len(pairs)
        same_texts += sum(x == y for x, y in pairs)
        shape = u is not None and (tag_of(t.category), t.created_at, t.author_id,
                                   [(x.id, x.author_id, x.created_at) for x in t.answers]) == \
            (u.category, u.created_at, u.author_id, [(x.id, x.author_id, x.created_at) for x in u.answers])
        if shape and all(x == y for x, y in pairs):
            same_threads += 1
        elif len(differ) < 3:
            differ.append(t.id)
    return {"threads": len(ours), "threads_in_dump_store": len(theirs), "threads_same": same_threads,
            "texts": texts, "texts_same": same_texts, "first_differing": differ}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=ROOT / "var" / "benchmarks" / "fullcorpus-2016",
                   help="the data folder whose store is the forum (default: the 2016 corpus the search benches build)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=0, help="only the first N threads (0: all)")
    p.add_argument("--copies", type=int, default=1, help="the forum written N times over, each copy's thread and "
                   "comment ids suffixed (~2, ~3...): a larger forum of the same texts, for how memory grows")
    args = p.parse_args(argv)
    source = args.data_dir / "threads.sqlite3"
    if not source.exists():
        raise SystemExit(f"no store at {source}; build the 2016 corpus first (docs/BENCHMARKS.md) or pass --data-dir")
    with tempfile.TemporaryDirectory(prefix="se-import-") as tmp:
        tmp = Path(tmp)
        jsonl = tmp / "forum.jsonl"
        export(source, jsonl, with_ledger=False)
        threads = load_jsonl(jsonl, strict=True).threads
        if args.limit:
            threads = threads[:args.limit]
        threads += [t.model_copy(update={"id": f"{t.id}~{k}", "answers": [
            a.model_copy(update={"id": f"{a.id}~{k}"}) for a in t.answers]}) for k in range(2, args.copies + 1)
            for t in threads]
        if args.limit or args.copies > 1:
            jsonl.write_text("".join(t.model_dump_json(exclude_defaults=True) + "\n" for t in threads),
                             encoding="utf-8")
        dump = tmp / "dump"
        made = write_dump(threads, dump)
        bodies = [as_html(x) for t in threads for x in (t.body, *(a.text for a in t.answers))]
        t0 = time.perf_counter()
        for body in bodies:  # what reading the dump's HTML costs, alone
            html_text(body)
        html_seconds = time.perf_counter() - t0
        archive = tmp / "site.7z"  # the dump as the site publishes it
        t0 = time.perf_counter()
        with py7zr.SevenZipFile(archive, "w") as z:
            for f in sorted(dump.iterdir()):
                z.write(f, arcname=f.name)
        pack_seconds = time.perf_counter() - t0
        order = ["jsonl", "stackexchange", "stackexchange-7z"]
        runs: dict[str, list[dict]] = {name: [] for name in order}
        arms = {"jsonl": (jsonl, tmp / "a"), "stackexchange": (dump, tmp / "b"),
                "stackexchange-7z": (archive, tmp / "c")}
        for _, folder in arms.values():
            folder.mkdir()
        for r in range(args.repeats):
            for name in (order if r % 2 == 0 else order[::-1]):
                runs[name].append(ingest(*arms[name]))
                print(f"# run {r} {name}: {runs[name][-1]['seconds']:.2f} s", file=sys.stderr)
        same = compare(tmp / "a" / "threads.sqlite3", tmp / "b" / "threads.sqlite3")
        prints = {name: export(folder / "threads.sqlite3", folder / "out.jsonl", with_ledger=False)["fingerprint"]
                  for name, (_, folder) in arms.items() if name != "jsonl"}
        best = {k: min(x["seconds"] for x in v) for k, v in runs.items()}
        result = {
            "bench": "stackexchange_import", "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "copies": args.copies,
            "threads": made["threads"],
            "answers": made["answers"],
            "bytes": {"jsonl": jsonl.stat().st_size, "posts_xml": (dump / "Posts.xml").stat().st_size,
                      "dump_folder": sum(f.stat().st_size for f in dump.iterdir()),
                      "archive_7z": archive.stat().st_size},
            "pack_7z_seconds": round(pack_seconds, 2),
            "seconds": {k: [round(x["seconds"], 2) for x in v] for k, v in runs.items()},
            "peak_rss_mb": {k: max(x["peak_rss_mb"] for x in v) for k, v in runs.items()},
            "best_seconds": {k: round(v, 2) for k, v in best.items()},
            "ratio_stackexchange_to_jsonl": round(best["stackexchange"] / best["jsonl"], 2),
            "ratio_7z_to_unpacked_folder": round(best["stackexchange-7z"] / best["stackexchange"], 2),
            "same_store_7z_and_folder": prints["stackexchange-7z"] == prints["stackexchange"],
            "html_text": {"bodies": len(bodies), "seconds": round(html_seconds, 3)},
            "summary": {k: {f: v[-1]["summary"].get(f) for f in ("threads", "answers", "skipped", "inserted",
                                                                   "passed_over")} for k, v in runs.items()},
            "same": same,
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
