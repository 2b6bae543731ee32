"""What unpacking a StackExchange dump's `.7z` costs `cqa ingest` (`indexing.archives.unpack_dump`: Posts.xml and
PostLinks.xml, in 4 MiB chunks), against py7zr's own `extract` of the same two members (the reference: chunks of up
to 128 MB), side by side in one run, each in a fresh process: seconds and peak resident memory, and whether both
wrote the same Posts.xml.

The dump: the data folder's store (the 2016 corpus's by default) written as a dump by
`scripts/make_stackexchange_dump.py`, --copies times over for each count given (ids suffixed), packed by py7zr's
defaults. Prints a JSON object last.

    python bench/archive_unpack.py [--data-dir var/benchmarks/fullcorpus-2016] [--copies 1,4]
"""
from __future__ import annotations

import argparse
import filecmp
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
sys.path.insert(0, str(ROOT / "bench"))

import py7zr  # noqa: E402

from indexing.backup import export  # noqa: E402
from indexing.loaders import load_jsonl  # noqa: E402
from scripts.make_stackexchange_dump import write_dump  # noqa: E402
from stackexchange_import import LAUNCHER  # noqa: E402

SIDES = {
    "py7zr_extract": "import sys, py7zr; z = py7zr.SevenZipFile(sys.argv[1]); "
                     "z.extract(path=sys.argv[2], targets=['Posts.xml', 'PostLinks.xml']); z.close()",
    "unpack_dump": "import sys; from pathlib import Path; from indexing.archives import unpack_dump; "
                   "unpack_dump(Path(sys.argv[1]), '7z', Path(sys.argv[2]))",
}


def unpack(side: str, archive: Path, into: Path) -> dict:
    """One side in a fresh process (forked from a small launcher, so its peak is its own): seconds, peak MB."""
    into.mkdir()
    rss = into.parent / f"{side}.rss"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", LAUNCHER, str(rss), sys.executable, "-c", SIDES[side], str(archive),
                    str(into)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_mb": round(int(rss.read_text()) / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var" / "benchmarks" / "fullcorpus-2016")
    ap.add_argument("--copies", default="1,4", help="dump sizes, as copies of the forum, comma-separated")
    args = ap.parse_args()
    source = args.data_dir / "threads.sqlite3"
    if not source.exists():
        raise SystemExit(f"no store at {source}; build the 2016 corpus first (docs/BENCHMARKS.md) or pass --data-dir")
    out = {"bench": "archive_unpack", "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d"), "py7zr": py7zr.__version__, "dumps": []}
    with tempfile.TemporaryDirectory(prefix="archive-unpack-") as tmp:
        tmp = Path(tmp)
        export(source, tmp / "forum.jsonl", with_ledger=False)
        base = load_jsonl(tmp / "forum.jsonl", strict=True).threads
        for copies in (int(c) for c in args.copies.split(",")):
            threads = base + [t.model_copy(update={"id": f"{t.id}~{k}", "answers": [
                a.model_copy(update={"id": f"{a.id}~{k}"}) for a in t.answers]}) for k in range(2, copies + 1)
                for t in base]
            dump, archive = tmp / f"dump{copies}", tmp / f"site{copies}.7z"
            write_dump(threads, dump)
            with py7zr.SevenZipFile(archive, "w") as z:
                for f in sorted(dump.iterdir()):
                    z.write(f, arcname=f.name)
            sides = {side: unpack(side, archive, tmp / f"{side}{copies}") for side in SIDES}
            same = filecmp.cmp(tmp / f"py7zr_extract{copies}" / "Posts.xml", tmp / f"unpack_dump{copies}" / "Posts.xml",
                               shallow=False)
            row = {"copies": copies, "posts_xml_mb": round((dump / "Posts.xml").stat().st_size / 2**20, 1),
                   "archive_mb": round(archive.stat().st_size / 2**20, 1), **sides, "same_posts_xml": same,
                   "peak_ratio_unpack_dump_over_py7zr": round(sides["unpack_dump"]["peak_rss_mb"] /
                                                              sides["py7zr_extract"]["peak_rss_mb"], 2)}
            print(json.dumps(row), file=sys.stderr, flush=True)
            out["dumps"].append(row)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
