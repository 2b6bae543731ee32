"""Tune the subtask C ranker (ranking/related.py) on 2016 dev-C only: the weights of its z-scored
features (answer ranker on the new question, answer ranker on the comment's own thread question, the
thread's rank, the thread question's similarity by a subtask B ranker, own x similarity) over a grid,
chosen by official dev-C MAP, stored in ranking/related_defaults.json.
Usage: python scripts/tune_related.py [--answer-ranker bi-encoder] [--thread-ranker fusion]  (JSON object last)
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.runner import align_to_gold  # noqa: E402
from ranking.evaluation.scorer import Line, read_lines, score  # noqa: E402
from ranking.presets import HERE, PRESETS  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402
from ranking.related import FEATURES, feature_columns  # noqa: E402

GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--answer-ranker", default="bi-encoder")
    ap.add_argument("--thread-ranker", default="fusion", help="subtask B ranker for the thread question")
    ap.add_argument("--benchmark", default="semeval2016-dev-C")
    args = ap.parse_args()
    bench = BENCHMARKS[args.benchmark]
    if bench.split != "dev" or bench.subtask != "C":
        raise SystemExit("tune on a dev subtask C benchmark only")
    settings = Settings()
    xml, gold_path = bench.paths(settings.semeval_dir)
    queries, gold = queries_for(xml, "C"), read_lines(gold_path)
    X = feature_columns(queries, get_ranker(args.answer_ranker, settings), get_ranker(args.thread_ranker, settings))
    results = []
    for w in itertools.product((1.0,), GRID, GRID, GRID, GRID):
        lines = [Line(q.id, c.id, float(s), False) for q, x in zip(queries, X)
                 for c, s in zip(q.candidates, x[:, :len(w)] @ np.asarray(w))]
        results.append({"weights": list(w), "dev_MAP": score(gold, align_to_gold(lines, gold)).MAP})
    results.sort(key=lambda r: -r["dev_MAP"])
    tuned = 1 + 4  # the new-question score (weight 1) and the four thread features of the grid
    record = {"name": "related-answers", "answer_ranker": args.answer_ranker, "features": list(FEATURES[:tuned]),
              "weights": results[0]["weights"], "dev_MAP": results[0]["dev_MAP"], "benchmark": bench.name,
              "thread_ranker": args.thread_ranker,
              "answer_ranker_alone_dev_MAP": next(r["dev_MAP"] for r in results if r["weights"] == [1.0, 0, 0, 0, 0]),
              "top5": results[:5], "grid_size": len(results), "tuned_at": datetime.now(timezone.utc).isoformat(),
              "command": f"python scripts/tune_related.py --answer-ranker {args.answer_ranker} "
                         f"--thread-ranker {args.thread_ranker}"}
    (HERE / PRESETS["related-answers"].file).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("answer_ranker", "weights", "dev_MAP", "answer_ranker_alone_dev_MAP")}))


if __name__ == "__main__":
    main()
