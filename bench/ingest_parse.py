"""What reading a JSONL file costs `cqa ingest` (`indexing.loaders.load_jsonl`), this tree against a reference
revision's loader, side by side in one run on the same file: every line of an export is now first asked whether it is
the ledger line (round 46). The reference's `indexing/loaders.py` (from `git show REV:...`) is loaded as a module of
this tree's `indexing` package, so both parse into the same `Thread` model; only the loader's own code differs.

The file: `cqa export` of the data folder's store (the 2016 corpus's by default; 3,869 threads), read --repeats times
by each loader in turn (the order alternating), the fastest kept. Prints a JSON object last.

    python bench/ingest_parse.py [--data-dir var/benchmarks/fullcorpus-2016] [--against 87c3da2] [--repeats 7]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from indexing import loaders  # noqa: E402
from indexing.backup import export  # noqa: E402
from load import reference_module  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016")
    ap.add_argument("--against", default="87c3da2", help="the reference revision (default: before round 46)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    store = args.data_dir / "threads.sqlite3"
    if not store.is_file():
        raise SystemExit(f"{args.data_dir}: no store; python bench/rerank_quality.py builds the 2016 corpus's folder")
    with tempfile.TemporaryDirectory(prefix="cqa-parse-") as tmp:
        tmp = Path(tmp)
        made = export(store, tmp / "all.jsonl")
        sides = {"this_tree": loaders, "reference": reference_module(args.against, "indexing/loaders.py", tmp)}
        best = {name: float("inf") for name in sides}
        counts = {}
        for r in range(args.repeats):
            for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                t0 = time.perf_counter()
                result = sides[name].load_jsonl(tmp / "all.jsonl", strict=True)
                best[name] = min(best[name], time.perf_counter() - t0)
                counts[name] = (len(result.threads), result.answers)
        assert counts["this_tree"] == counts["reference"] == (made["threads"], made["answers"]), counts
    print(json.dumps({"bench": "ingest_parse", "machine": platform.processor() or platform.machine(),
                      "date": time.strftime("%Y-%m-%d"), "against": args.against, "threads": made["threads"],
                      "answers": made["answers"], "repeats": args.repeats,
                      "best_s": {k: round(v, 4) for k, v in best.items()},
                      "ratio_this_to_reference": round(best["this_tree"] / best["reference"], 3)}))


if __name__ == "__main__":
    main()
