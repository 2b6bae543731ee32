"""Train a learned combination for subtask A: logistic regression over per-question z-scored ranker
scores and forum signals; the regularisation C chosen by 2016 dev-A MAP. Which parts and which training
threads are in ranking/combination.py (COMBINATIONS): bilstm+signals trains on the training files,
cross-encoder+signals on the training file the MiniLM rankers held out, so its ranker scores are those of
unseen threads. Writes the combination's JSON file. JSON object last.
Usage: python scripts/train_combination.py [--name bilstm+signals|cross-encoder+signals]
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.catalog import NEURAL_TRAIN_FILES as TRAIN_FILES  # noqa: E402
from ranking.combination import (  # noqa: E402
    COMBINATIONS,
    LearnedCombination,
    combination_file,
    feature_matrix,
)
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.runner import align_to_gold, predictions  # noqa: E402
from ranking.evaluation.scorer import read_lines, score  # noqa: E402
from ranking.neural.train_minilm import HELD_OUT_FILE  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402


def main() -> None:
    import argparse

    from sklearn.linear_model import LogisticRegression

    from indexing.loaders import load
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", choices=sorted(COMBINATIONS), default="bilstm+signals")
    args = ap.parse_args()
    _, part_names, signal_names, which = COMBINATIONS[args.name]
    files = TRAIN_FILES if which == "train" else (HELD_OUT_FILE,)
    s = Settings()
    parts = [get_ranker(n, s) for n in part_names]
    queries, labels = [], []
    for f in files:
        path = s.semeval_dir / f
        label = {a.id: a.label == "Good" for t in load(path).threads for a in t.answers}
        for q in queries_for(path, "A"):
            queries.append(q)
            labels.append([label[c.id] for c in q.candidates])
    X = np.vstack(feature_matrix(queries, parts, signal_names))
    y = np.concatenate([np.asarray(lab, dtype=int) for lab in labels])
    dev_xml, dev_gold = BENCHMARKS["semeval2016-dev-A"].paths(s.semeval_dir)
    dev_q, gold = queries_for(dev_xml, "A"), read_lines(dev_gold)
    results = []
    for C in (0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 10.0):
        lr = LogisticRegression(C=C, max_iter=2000).fit(X, y)
        comb = LearnedCombination(parts, lr.coef_[0], float(lr.intercept_[0]), signals=signal_names)
        m = score(gold, align_to_gold(predictions(dev_q, comb), gold)).MAP
        results.append({"C": C, "dev_MAP": m, "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0])})
        print(json.dumps({"C": C, "dev_MAP": m}), file=sys.stderr, flush=True)
    best = max(results, key=lambda r: r["dev_MAP"])
    record = {"name": args.name, "parts": list(part_names), "features": list(part_names) + list(signal_names),
              "coef": best["coef"], "intercept": best["intercept"], "C": best["C"], "dev_MAP": best["dev_MAP"],
              "grid": [{k: r[k] for k in ("C", "dev_MAP")} for r in results], "train_files": list(files),
              "train_pairs": int(len(y)), "trained_at": datetime.now(timezone.utc).isoformat(),
              "command": f"python scripts/train_combination.py --name {args.name}"}
    combination_file(args.name).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("C", "dev_MAP", "train_pairs")} |
                     {"weights": dict(zip(record["features"], np.round(best["coef"], 3).tolist()))}))


if __name__ == "__main__":
    main()
