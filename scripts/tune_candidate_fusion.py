"""Tune the given-candidate fusion on a dev benchmark only and store the weights, with the numbers
that chose them, in ranking/candidate_fusion_defaults.json.

Parts: by default the task's own IR order, BM25, query likelihood, translation LM, MiniLM cosine (the `fusion`
preset); `--parts` names others (`question-fusion`: with the question-question bi-encoder and the A-trained
models). Per question z-scored and summed with weights from {0, 0.5, 1}^n (`--grid` another set). Selection by official
dev MAP. `--method minmax|rrf` normalises the parts otherwise, to explore: the shipped fusion presets z-score, so such
weights go to an `--out` outside ranking/.
`--section unordered` stores the weights under that key of an existing file, beside its own (the question fusion's
weights for candidates in no search order, tuned on semeval2016-dev-B-unordered without the order's part).
Usage: python scripts/tune_candidate_fusion.py [--benchmark semeval2016-dev-B] [--parts a,b,...] [--out FILE]
[--section unordered] [--grid 0,0.5,1] [--method zscore] (JSON object last)
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.candidate_rankers import FUSION_DEFAULTS, FUSION_PARTS  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.scorer import read_lines  # noqa: E402
from ranking.evaluation.tuning import grid_search, write_params  # noqa: E402
from ranking.fusion import SCORE_TRANSFORMS  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402


def shown(path: Path) -> str:
    """``path`` as the recorded command gives it: relative to the project where it lies inside it."""
    path = path.resolve()
    root = FUSION_DEFAULTS.parent.parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--benchmark", default="semeval2016-dev-B")
    ap.add_argument("--out", type=Path, default=FUSION_DEFAULTS)
    ap.add_argument("--parts", default=",".join(FUSION_PARTS), help="the presets to fuse, comma-separated")
    ap.add_argument("--section", choices=["unordered"], help="store under this key of --out, keeping the rest of it")
    ap.add_argument("--grid", default="0,0.5,1", help="the weights each part may take, comma-separated")
    ap.add_argument("--method", default="zscore", choices=sorted(SCORE_TRANSFORMS),
                    help="how each part's scores are made summable per question (the shipped presets: zscore)")
    args = ap.parse_args()
    parts = tuple(args.parts.split(","))
    grid = tuple(float(w) for w in args.grid.split(","))
    if args.method != "zscore" and args.out.resolve().parent == FUSION_DEFAULTS.parent:
        raise SystemExit(f"--method {args.method}: the fusion presets that read ranking/ z-score their parts; "
                         "write these weights to an --out outside ranking/")
    bench = BENCHMARKS[args.benchmark]
    if bench.split != "dev":
        raise SystemExit("tune on a dev benchmark only")
    settings = Settings()
    xml, gold_path = bench.paths(settings.semeval_dir)
    if args.section == "unordered" and (bench.variant != "unordered" or "ir-baseline" in parts):
        raise SystemExit("--section unordered: tune on an unordered benchmark, without the ir-baseline part")
    queries = queries_for(xml, bench.subtask, bench.variant)
    gold = read_lines(gold_path)
    per_part = {name: get_ranker(name, settings).score(queries) for name in parts}
    results = grid_search(queries, per_part, gold, grid=grid, method=args.method)
    singles = {n: next(r["dev_MAP"] for r in results if r["weights"][n] == max(grid) and
                       sum(v > 0 for v in r["weights"].values()) == 1) for n in parts}
    record = {"weights": results[0]["weights"], "dev_MAP": results[0]["dev_MAP"], "benchmark": bench.name,
              "dev_single_parts": singles, "top10": results[:10], "grid_size": len(results),
              "tuned_at": datetime.now(timezone.utc).isoformat(), **({} if args.method == "zscore" else
                                                                      {"method": args.method}),
              "command": f"python scripts/tune_candidate_fusion.py --benchmark {bench.name}"
                         + ("" if parts == FUSION_PARTS else f" --parts {args.parts}")
                         + ("" if args.out == FUSION_DEFAULTS else f" --out {shown(args.out)}")
                         + (f" --section {args.section}" if args.section else "")
                         + (f" --grid {args.grid}" if grid != (0.0, 0.5, 1.0) else "")
                         + (f" --method {args.method}" if args.method != "zscore" else "")}
    write_params(args.out, record, args.section)
    print(json.dumps({"weights": record["weights"], "dev_MAP": record["dev_MAP"], "dev_single_parts": singles}))


if __name__ == "__main__":
    main()
