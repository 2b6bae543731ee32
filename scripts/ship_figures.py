"""Write ranking/shipped_figures.json: the figures this release ships with, taken from real report folders
(`cqa evaluate --benchmark ...` runs), so GET /evaluation and the search page show them on a fresh install.

    python scripts/ship_figures.py semeval2016-test-A=cross-encoder+signals semeval2016-test-search-answers ...

Each argument is a benchmark, optionally =RANKER (default: the latest run of that benchmark, whatever its ranker).
With --update, the file keeps its other entries and only the entries of the (benchmark, ranker) pairs given are
replaced (or added): a benchmark shipped with two variants of a ranker (test-C's related-answers in bf16 and in fp32)
keeps the one not given."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ranking.evaluation.runner import SHIPPED_FILE, latest_per_ranker  # noqa: E402

KEEP = ("MAP", "MAP@10", "MRR", "P@1", "nDCG@10", "Recall@100", "AvgRec")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("entries", nargs="+", metavar="BENCHMARK[=RANKER]")
    ap.add_argument("--reports", type=Path, default=Path(os.environ.get("CQA_DATA_DIR", "var")) / "reports")
    ap.add_argument("--out", type=Path, default=SHIPPED_FILE)
    ap.add_argument("--update", action="store_true", help="keep the file's entries for other (benchmark, ranker) pairs")
    ap.add_argument("--drop", action="append", default=[], metavar="BENCHMARK=RANKER",
                    help="with --update, remove this pair's entry (one a new entry replaces under another name, e.g. "
                         "a variant measured as `auto` and now named); repeatable")
    args = ap.parse_args()
    if args.drop and not args.update:
        ap.error("--drop edits the file's entries: it needs --update")
    from ranking.neural.inference import cpu_flags, has_bf16
    bf16 = "with" if has_bf16(cpu_flags()) else "without"
    machine = (f"{os.cpu_count()} CPU cores {bf16} bf16 instructions, {platform.machine()}, no GPU, "
               f"Python {platform.python_version()}")
    figures = []
    for entry in args.entries:
        bench, _, ranker = entry.partition("=")
        runs = latest_per_ranker(args.reports / bench)
        if not runs:
            print(f"error: no report of {bench} under {args.reports}", file=sys.stderr)
            return 2
        r = runs[ranker] if ranker else max(runs.values(), key=lambda x: x["created_at"])
        cmd = f"cqa evaluate --benchmark {bench} --ranker {r['ranker']}"
        if "compare" in r:
            cmd += f" --compare {r['compare']['run']['label']}"
        f = {k: round(float(v), 4) for k, v in r["figures"].items() if k in KEEP}
        if "compare" in r:
            f.update({f"{k} ({r['compare']['run']['label']})": round(float(v), 4)
                      for k, v in r["compare"]["figures"].items() if k in KEEP})
            f["p (paired randomisation)"] = round(float(r["compare"]["p_randomization"]), 4)
        if "latency_ms" in r:
            f["p50 ms per search"] = r["latency_ms"]["p50"]
        entry = {"benchmark": bench, "ranker": r["ranker"], "figures": f, "command": cmd,
                 "measured_at": r["created_at"][:19] + "Z", "machine": machine, "inference": r.get("inference"),
                 "MAP_interval_95": [round(float(x), 4) for x in r["MAP_interval_95"]]
                 if r.get("MAP_interval_95") else None}
        if r.get("candidates_with_stored_comments"):  # B read the generation's stored comments: say which folder
            entry["data_folder"] = os.path.relpath(args.reports.parent, ROOT)
        figures.append(entry)
    if args.update and args.out.exists():
        given = {(f["benchmark"], f["ranker"]) for f in figures}
        old = json.loads(args.out.read_text(encoding="utf-8"))["figures"]
        order = {(f["benchmark"], f["ranker"]): i for i, f in enumerate(old)}  # replaced entries keep their place
        dropped = {tuple(d.split("=", 1)) for d in args.drop}
        missing = dropped - set(order)
        if missing:
            print(f"error: --drop names no entry of {args.out}: {sorted(missing)}", file=sys.stderr)
            return 2
        kept = [f for f in old if (f["benchmark"], f["ranker"]) not in given | dropped]
        figures = sorted(kept + figures, key=lambda f: order.get((f["benchmark"], f["ranker"]), len(order)))
    args.out.write_text(json.dumps({"figures": figures}, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"shipped": len(figures), "out": str(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
