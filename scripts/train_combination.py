"""Train the learned combination for subtask A: logistic regression over per-question z-scored ranker
scores (bilstm, bm25, the given order) and forum signals, on the subtask A training threads; the
regularisation C chosen by 2016 dev-A MAP. Writes ranking/combination_A.json. JSON object last.
Usage: python scripts/train_combination.py
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexing.config import Settings  # noqa: E402
from ranking.combination import COMBINATION_FILE, LearnedCombination, feature_matrix  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.runner import align_to_gold, predictions  # noqa: E402
from ranking.evaluation.scorer import read_lines, score  # noqa: E402
from ranking.neural.data import TRAIN_FILES  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402
from ranking.signals import NAMES  # noqa: E402

PARTS = ("bilstm", "bm25", "ir-baseline")


def main() -> None:
    from indexing.loaders import load
    from sklearn.linear_model import LogisticRegression
    s = Settings()
    parts = [get_ranker(n, s) for n in PARTS]
    queries, labels = [], []
    for f in TRAIN_FILES:
        path = s.semeval_dir / f
        label = {a.id: a.label == "Good" for t in load(path).threads for a in t.answers}
        for q in queries_for(path, "A"):
            queries.append(q)
            labels.append([label[c.id] for c in q.candidates])
    X = np.vstack(feature_matrix(queries, parts))
    y = np.concatenate([np.asarray(lab, dtype=int) for lab in labels])
    dev_xml, dev_gold = BENCHMARKS["semeval2016-dev-A"].paths(s.semeval_dir)
    dev_q, gold = queries_for(dev_xml, "A"), read_lines(dev_gold)
    results = []
    for C in (0.01, 0.1, 1.0, 10.0):
        lr = LogisticRegression(C=C, max_iter=2000).fit(X, y)
        comb = LearnedCombination(parts, lr.coef_[0], float(lr.intercept_[0]))
        m = score(gold, align_to_gold(predictions(dev_q, comb), gold)).MAP
        results.append({"C": C, "dev_MAP": m, "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0])})
        print(json.dumps({"C": C, "dev_MAP": m}), file=sys.stderr, flush=True)
    best = max(results, key=lambda r: r["dev_MAP"])
    record = {"name": "bilstm+signals", "parts": list(PARTS), "features": list(PARTS) + list(NAMES),
              "coef": best["coef"], "intercept": best["intercept"], "C": best["C"], "dev_MAP": best["dev_MAP"],
              "grid": [{k: r[k] for k in ("C", "dev_MAP")} for r in results], "train_files": list(TRAIN_FILES),
              "train_pairs": int(len(y)), "trained_at": datetime.now(timezone.utc).isoformat(),
              "command": "python scripts/train_combination.py"}
    COMBINATION_FILE.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("C", "dev_MAP", "train_pairs")} |
                     {"weights": dict(zip(record["features"], np.round(best["coef"], 3).tolist()))}))


if __name__ == "__main__":
    main()
