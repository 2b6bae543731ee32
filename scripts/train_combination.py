"""Train a learned combination for subtask A: logistic regression over per-question z-scored ranker
scores and forum signals; the regularisation C chosen by 2016 dev-A MAP. Which parts and which training
threads are in ranking/combination.py (COMBINATIONS): bilstm+signals trains on the training files,
cross-encoder+signals on the training file the MiniLM rankers held out, so its ranker scores are those of
unseen threads. Writes the combination's JSON file. JSON object last.
With --regimes, also one set of weights per metadata regime (ranking/combination.py REGIMES): the training
threads and dev-A with user ids removed, shuffled, or both, the features a regime lacks held at zero.
With --cross-fitted SCORES (scripts/crossfit_A.py), cross-encoder+signals also trains on the other training files,
their MiniLM scores out of fold: each comment scored by a model trained without its thread.
Usage: python scripts/train_combination.py [--name bilstm+signals|cross-encoder+signals] [--regimes]
       [--extra-part PRESET --out FILE]   (a candidate feature tried without touching the shipped file)
       [--cross-fitted var/crossfit/scores.json]
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
    REGIMES,
    LearnedCombination,
    combination_file,
    feature_matrix,
    good_labels,
    regime_mask,
)
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.runner import align_to_gold, predictions  # noqa: E402
from ranking.evaluation.scorer import read_lines, score  # noqa: E402
from ranking.neural.train_minilm import HELD_OUT_FILE  # noqa: E402
from ranking.neural.memo import ScoreMemo  # noqa: E402
from ranking.rankers import encodes_texts, get_ranker, walk  # noqa: E402

# Inverse L2 strength of the logistic layer, chosen on dev-A per regime. The lowest two were added when the
# round-3 bi-encoder put the choice at the old grid's lower edge (0.0003).
GRID = (0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 10.0)


class ScoreTable:
    """A part whose scores were computed elsewhere: each candidate's score by its id (out-of-fold MiniLM scores)."""

    def __init__(self, scores: dict[str, float]):
        self.scores = scores

    def score(self, queries: list) -> list[list[float]]:
        return [[self.scores[c.id] for c in q.candidates] for q in queries]


def main() -> None:
    import argparse

    from sklearn.linear_model import LogisticRegression

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", choices=sorted(COMBINATIONS), default="bilstm+signals")
    ap.add_argument("--regimes", action="store_true", help="also weights for input without user ids or thread order")
    ap.add_argument("--extra-part", action="append", default=[], metavar="PRESET",
                    help="try another ranker preset as a feature beside the combination's parts (repeatable); use "
                    "with --out, so the shipped file stays as it is")
    ap.add_argument("--cross-fitted", type=Path, metavar="SCORES",
                    help="cross-encoder+signals: also train on the files scored out of fold in SCORES "
                    "(scripts/crossfit_A.py score), their MiniLM parts' scores read from it")
    ap.add_argument("--out", type=Path, help="write the combination here (default: its shipped file, ranking/)")
    args = ap.parse_args()
    _, part_names, signal_names, which = COMBINATIONS[args.name]
    part_names = tuple(part_names) + tuple(args.extra_part)
    files = TRAIN_FILES if which == "train" else (HELD_OUT_FILE,)
    crossfit = json.loads(args.cross_fitted.read_text()) if args.cross_fitted else None
    if crossfit:
        why = (f"{args.name} trains on every training file already" if which == "train"
               else "its scores are a --limit smoke run's, not every comment's" if crossfit.get("limit")
               else f"it scores {', '.join(sorted(set(crossfit['files']) & set(files)))}, which the layer reads with "
               "the shipped models" if set(crossfit["files"]) & set(files) else None)
        if why:
            raise SystemExit(f"error: --cross-fitted {args.cross_fitted}: {why}")
    fitted_files = tuple(crossfit["files"]) if crossfit else ()
    features = list(part_names) + list(signal_names)
    s = Settings()
    built: dict = {}  # parts that share a model (comment-centrality and bi-encoder) load it once
    parts = [get_ranker(n, s, built) for n in part_names]  # feature_matrix runs BM25 per question, as the service does
    for r in walk(parts):  # each text encoded once for every C and regime, not once per dev-A scoring
        if encodes_texts(r) and r.vector_memo is None:
            r.vector_memo = ScoreMemo(1_000_000)
    dev_xml, dev_gold = BENCHMARKS["semeval2016-dev-A"].paths(s.semeval_dir)
    gold = read_lines(dev_gold)
    labels_of = good_labels(s.semeval_dir, files + fitted_files)

    def file_features(f: str, variant: str | None) -> tuple[list[np.ndarray], np.ndarray]:
        """A training file's feature rows and labels; a cross-fitted file's MiniLM parts read out of fold."""
        queries = queries_for(s.semeval_dir / f, "A", variant)
        use = parts
        if f in fitted_files:
            use = [ScoreTable(crossfit["scores"][n][f]) if n in crossfit["scores"] else p
                   for n, p in zip(part_names, parts)]
        y = np.concatenate([np.asarray([labels_of[f][c.id] for c in q.candidates], dtype=int) for q in queries])
        return feature_matrix(queries, use, signal_names), y

    def fit(regime: str) -> dict:
        """Train on the training threads as that regime sees them, pick C by dev-A seen the same way."""
        variant = REGIMES[regime][1]
        mask = regime_mask(features, regime)
        rows = [file_features(f, variant) for f in files + fitted_files]
        X = np.vstack([x for r, _ in rows for x in r]) * mask
        y = np.concatenate([lab for _, lab in rows])
        dev_q = queries_for(dev_xml, "A", variant)
        results = []
        for C in GRID:
            lr = LogisticRegression(C=C, max_iter=2000).fit(X, y)
            coef, b = lr.coef_[0] * mask, float(lr.intercept_[0])
            comb = LearnedCombination(parts, coef, b, signals=signal_names)
            m = score(gold, align_to_gold(predictions(dev_q, comb), gold)).MAP
            results.append({"C": C, "dev_MAP": m, "coef": coef.tolist(), "intercept": b})
            print(json.dumps({"regime": regime, "C": C, "dev_MAP": m}), file=sys.stderr, flush=True)
        best = max(results, key=lambda r: r["dev_MAP"])
        return {**best, "variant": variant, "train_pairs": int(len(y)),
                "grid": [{k: r[k] for k in ("C", "dev_MAP")} for r in results]}

    full = fit("full")
    record = {"name": args.name, "parts": list(part_names), "features": features,
              "coef": full["coef"], "intercept": full["intercept"], "C": full["C"], "dev_MAP": full["dev_MAP"],
              "grid": full["grid"], "train_files": list(files + fitted_files),
              "train_pairs": full["train_pairs"], "trained_at": datetime.now(timezone.utc).isoformat(),
              "command": "python scripts/train_combination.py " + " ".join(sys.argv[1:])}
    if crossfit:
        record["cross_fitted"] = {"files": list(fitted_files), "folds": crossfit["folds"], "seed": crossfit["seed"],
                                  "parts": sorted(crossfit["scores"]), "inference": crossfit["inference"],
                                  "fold_dev_MAP": {k: [m["dev_MAP"] for m in v] for k, v in crossfit["models"].items()},
                                  "fold_train": {k: v[0]["train"] for k, v in crossfit["models"].items()}}
    if args.regimes:
        record["regimes"] = {r: {k: v for k, v in fit(r).items() if k != "train_pairs"} for r in REGIMES if r != "full"}
    (args.out or combination_file(args.name)).write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: record[k] for k in ("C", "dev_MAP", "train_pairs")} |
                     {"weights": dict(zip(features, np.round(full["coef"], 3).tolist()))} |
                     {"regimes": {r: {"C": v["C"], "dev_MAP": v["dev_MAP"]} for r, v in record.get("regimes", {}).items()}}))


if __name__ == "__main__":
    main()
