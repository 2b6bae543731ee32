"""Tune the subtask C ranker (ranking/related.py) on 2016 dev-C only: the weights of its z-scored
features (answer ranker on the new question, answer ranker on the comment's own thread question, the
thread's rank, the thread question's similarity by a subtask B ranker, own x similarity, and with
--quality-ranker the comment's quality in its own thread by a subtask A ranker with forum signals) over a
grid, chosen by official dev-C MAP, stored in ranking/related_defaults.json. The quality ranker is named in
the file only when it gets a weight.
With --section unordered (on semeval2016-dev-C-unordered, the parts the file already names): the weights for threads
in no search order, where the thread's rank is 0, stored under that key beside the file's own.
With --answer-model: a second answer ranker on (new question, comment), weighed over the same grid.
With --add-feature NAME: the shipped file's parts and weights kept, only that feature's weight chosen from --add-grid
(round 37, rule 15); --out names the candidate file.
Usage: python scripts/tune_related.py [--answer-ranker bi-encoder] [--thread-ranker fusion]
       [--quality-ranker bilstm+signals] [--answer-model related-bi-encoder] [--benchmark NAME --section unordered]
       [--out FILE]  (JSON object last)
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
from ranking.evaluation.scorer import read_lines  # noqa: E402
from ranking.evaluation.tuning import GoldMAP, write_params  # noqa: E402
from ranking.presets import HERE, PRESETS, RELATED_PARTS  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402
from ranking.related import FEATURES, feature_columns, padded  # noqa: E402

GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0)
# own_quality: finer below 0.25, since the answer ranker's own z-score weighs 1
QUALITY_GRID = (0.0, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0)


def add_feature(args, bench, shipped: dict) -> None:
    """The shipped weights kept; ``args.add_feature``'s weight chosen on ``bench`` from 0 and ``args.add_grid``."""
    settings = Settings()
    xml, gold_path = bench.paths(settings.semeval_dir)
    queries, gold = queries_for(xml, "C", bench.variant), read_lines(gold_path)
    X = feature_columns(queries, *(get_ranker(shipped[k], settings) if shipped.get(k) else None
                                   for k in RELATED_PARTS))  # the parts the file names, in feature_columns' order
    col = FEATURES.index(args.add_feature)
    base = padded(shipped["weights"])
    dev_map, results = GoldMAP(queries, gold), []
    for g in (0.0, *(float(v) for v in args.add_grid.split(","))):
        w = base.copy()
        w[col] = g
        results.append({"weight": g, "dev_MAP": dev_map([x @ w for x in X])})
    best = max(results, key=lambda r: r["dev_MAP"])  # the first of equals: the smaller weight
    weights = base.copy()
    weights[col] = best["weight"]
    used = max(col + 1, len(shipped["weights"])) if best["weight"] else len(shipped["weights"])
    record = {**{k: v for k, v in shipped.items() if k not in ("top5", "grid_size")},
              "features": list(FEATURES[:used]), "weights": weights[:used].tolist(), "dev_MAP": best["dev_MAP"],
              "benchmark": bench.name, "added_feature": {"name": args.add_feature, "grid": results},
              "tuned_at": datetime.now(timezone.utc).isoformat(),
              "command": f"python scripts/tune_related.py --add-feature {args.add_feature} --add-grid {args.add_grid}"}
    write_params(args.out, record, None)
    print(json.dumps({"feature": args.add_feature, "grid": results, "weights": record["weights"],
                      "dev_MAP": best["dev_MAP"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--answer-ranker", default="bi-encoder")
    ap.add_argument("--thread-ranker", default="fusion", help="subtask B ranker for the thread question")
    ap.add_argument("--quality-ranker", default=None,
                    help="subtask A ranker for the comment within its own thread (own_quality), e.g. bilstm+signals")
    ap.add_argument("--answer-model", default=None,
                    help="a second answer ranker on (new question, comment) (answer_model), e.g. related-bi-encoder")
    ap.add_argument("--benchmark", default="semeval2016-dev-C")
    ap.add_argument("--out", type=Path, default=None,
                    help="write the tuned file here instead of ranking/related_defaults.json (a candidate to judge)")
    ap.add_argument("--section", choices=["unordered"], help="store under this key of the file, keeping the rest")
    ap.add_argument("--add-feature", choices=FEATURES, help="keep the shipped weights; choose only this feature's")
    ap.add_argument("--add-grid", default="0.05,0.1,0.25,0.5,1", help="--add-feature's weights (0 is always tried)")
    args = ap.parse_args()
    bench = BENCHMARKS[args.benchmark]
    if bench.split != "dev" or bench.subtask != "C":
        raise SystemExit("tune on a dev subtask C benchmark only")
    path = HERE / PRESETS["related-answers"].file
    shipped = json.loads(path.read_text(encoding="utf-8"))
    if args.add_feature:
        if not args.out:
            raise SystemExit("--add-feature writes a candidate file: give --out")
        return add_feature(args, bench, shipped)
    parts = RELATED_PARTS
    if args.section and (bench.variant != "unordered"
                         or tuple(getattr(args, k) for k in parts) != tuple(shipped.get(k) for k in parts)):
        raise SystemExit("--section unordered: tune on semeval2016-dev-C-unordered with the parts the file names")
    settings = Settings()
    xml, gold_path = bench.paths(settings.semeval_dir)
    queries, gold = queries_for(xml, "C", bench.variant), read_lines(gold_path)
    quality = get_ranker(args.quality_ranker, settings) if args.quality_ranker else None
    second = get_ranker(args.answer_model, settings) if args.answer_model else None
    X = feature_columns(queries, get_ranker(args.answer_ranker, settings), get_ranker(args.thread_ranker, settings),
                        quality, second)
    # the new-question score (weight 1), the thread features of the grid (not the thread's rank when there is no
    # order: it is 0), and own_quality and answer_model when asked for
    thread = [c for c in range(1, 5) if not (args.section and FEATURES[c] == "thread_rank")]
    columns = ([0] + thread + ([FEATURES.index("own_quality")] if quality else [])
               + ([FEATURES.index("answer_model")] if second else []))
    X = [x[:, columns] for x in X]
    dev_map = GoldMAP(queries, gold)
    results = []
    for w in itertools.product((1.0,), *[GRID] * len(thread), *([QUALITY_GRID] if quality else []),
                               *([GRID] if second else [])):
        results.append({"weights": list(w), "dev_MAP": dev_map([x @ np.asarray(w) for x in X])})
    results.sort(key=lambda r: -r["dev_MAP"])
    alone = next(r["dev_MAP"] for r in results if r["weights"][0] == 1.0 and not any(r["weights"][1:]))
    best = results[0]["weights"]
    # the thread features are always written; own_quality and answer_model only with a weight (weight 0: not named)
    used = columns[:1 + len(thread)] + [c for c, w in zip(columns[1 + len(thread):], best[1 + len(thread):])
                                        if w or args.section]
    weights = [0.0] * (max(used) + 1)
    for col, w in zip(used, best):
        weights[col] = w
    record = {"name": "related-answers", "answer_ranker": args.answer_ranker,
              "features": list(FEATURES[:len(weights)]), "weights": weights, "dev_MAP": results[0]["dev_MAP"],
              "benchmark": bench.name, "thread_ranker": args.thread_ranker,
              **({"quality_ranker": args.quality_ranker} if FEATURES.index("own_quality") in used else {}),
              **({"answer_model": args.answer_model} if FEATURES.index("answer_model") in used else {}),
              "answer_ranker_alone_dev_MAP": alone, "tuned_features": [FEATURES[c] for c in columns],
              "top5": results[:5], "grid_size": len(results), "tuned_at": datetime.now(timezone.utc).isoformat(),
              "command": f"python scripts/tune_related.py --answer-ranker {args.answer_ranker} "
                         f"--thread-ranker {args.thread_ranker}"
                         + (f" --quality-ranker {args.quality_ranker}" if quality else "")
                         + (f" --answer-model {args.answer_model}" if second else "")
                         + (f" --benchmark {bench.name} --section {args.section}" if args.section else "")}
    if args.section and args.out and not args.out.exists():  # a section of a candidate: the shipped file around it
        args.out.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    write_params(args.out or path, record, args.section)
    print(json.dumps({k: record.get(k) for k in ("answer_ranker", "quality_ranker", "weights", "dev_MAP",
                                                 "answer_ranker_alone_dev_MAP")}))


if __name__ == "__main__":
    main()
