"""A ranker on an unordered benchmark (semeval2016-{dev,test}-{B,C}-unordered) as if the caller had not said that its
candidates come in no search order: the queries lose their ``search_order`` key, so the ranker weighs the seeded
other order as a search order. This is what POST /rerank/questions and /rerank/answers did before the request field
``search_order`` existed, and what they still do for a caller that leaves it out.

    python scripts/order_weighed_anyway.py --benchmark semeval2016-test-C-unordered [--ranker related-answers]
        --out /tmp/weighed-anyway.txt

Writes the predictions in the official format and the gold's order, so that ``cqa evaluate --gold GOLD --pred
REPORT/predictions.txt --compare-pred OUT`` tests the difference. JSON object last.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, ORDER_VARIANTS, queries_for  # noqa: E402
from ranking.evaluation.runner import align_to_gold, default_ranker, predictions, write_predictions  # noqa: E402
from ranking.evaluation.scorer import read_lines, score  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    unordered = [n for n, b in BENCHMARKS.items() if b.variant in ORDER_VARIANTS]
    ap.add_argument("--benchmark", required=True, choices=unordered, metavar="NAME",
                    help="an unordered benchmark: semeval2016-{dev,test}-{B,C}-unordered")
    ap.add_argument("--ranker", help="default: the subtask's default ranker")
    ap.add_argument("--out", type=Path, required=True, help="where to write the predictions")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
    args = ap.parse_args()
    settings = Settings()
    bench = BENCHMARKS[args.benchmark]
    xml, gold_path = bench.paths(settings.semeval_dir)
    queries = [replace(q, meta={k: v for k, v in q.meta.items() if k != "search_order"})
               for q in queries_for(xml, bench.subtask, bench.variant)][:args.limit or None]
    name = args.ranker or default_ranker(bench.subtask, settings)
    asked = {q.id for q in queries}
    gold = [g for g in read_lines(gold_path) if g.qid in asked]
    lines = align_to_gold(predictions(queries, get_ranker(name, settings)), gold)  # as cqa evaluate writes them
    write_predictions(lines, args.out)
    print(json.dumps({"benchmark": bench.name, "ranker": name, "search_order": "left out",
                      "MAP": score(gold, lines).MAP, "predictions": str(args.out)}))


if __name__ == "__main__":
    main()
