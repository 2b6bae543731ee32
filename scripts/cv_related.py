"""The subtask C ranker's thread weights judged on the C questions of 2016 train part 2 (round 38, rule 21): 67
original questions, 6,700 comments judged against them, which the C tuning (scripts/tune_related.py, dev-C's 50
questions) never looked at.

Two features of the C ranker (ranking/related.py) can be read on them without a model trained on them: the thread's
search rank (``thread_rank``) and its question's similarity to the new question (``thread_similarity``) by
``question-fusion``, when the question model inside it is the cross-validation fold model that held the question out
(the fold models of scripts/cv_question_model.py under --question-folds, which must hold out exactly this dealing of
the 267 B training questions: K folds, seed 2016). Every other feature reads a model trained on these comments with
their own questions, so it keeps its shipped weight. The two weights are searched over scripts/tune_related.py's grid
and chosen three ways: by dev-C, by the training questions, by both pooled. The pooled choice is judged against the
shipped weights by the paired randomisation and t-tests of per-question AP, on the training questions and on dev-C,
and written as a candidate file (--candidate) for the checks a rule asks for. Test is not read.

    python scripts/cv_related.py [--folds 5] [--question-folds var/reports/cv-question-model]
                                 [--out var/reports/cv-related]

Writes OUT/report.json and OUT/related_candidate.json (the shipped file with the pooled weights). JSON object last.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.measures import against_shipped  # noqa: E402
from ranking.evaluation.tuning import FOLD_SEED, GoldMAP, folds_of  # noqa: E402
from ranking.neural.ranker import MiniLMRanker  # noqa: E402
from ranking.neural.train_minilm import dev_set, question_training_set, related_training_set  # noqa: E402
from ranking.presets import BUILDERS, HERE, PRESETS, RELATED_PARTS  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402
from ranking.related import FEATURES, feature_columns, padded  # noqa: E402

GRID = (0.0, 0.25, 0.5, 1.0, 2.0, 3.0)  # scripts/tune_related.py's
SEARCHED = ("thread_rank", "thread_similarity")
THREAD_RANKER = "question-fusion"
MODEL = "question-bi-encoder"


def fold_thread_ranker(fold_dir: Path, k: int, settings: Settings):
    """``question-fusion`` with the fold's question model in place of the shipped one."""
    spec = PRESETS[THREAD_RANKER]
    model = MiniLMRanker.from_checkpoint(fold_dir, settings.device, name=f"{MODEL}-fold{k}")
    parts = [model if n == MODEL else get_ranker(n, settings) for n in spec.part_names()]
    return BUILDERS[spec.kind](spec, settings, parts, f"{THREAD_RANKER}-fold{k}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--question-folds", type=Path, default=Path("var/reports/cv-question-model"),
                    help="scripts/cv_question_model.py's --out: its fold-K question models")
    ap.add_argument("--out", type=Path, default=Path("var/reports/cv-related"))
    args = ap.parse_args()
    s = Settings()
    shipped = json.loads((HERE / PRESETS["related-answers"].file).read_text(encoding="utf-8"))
    if shipped.get("thread_ranker") != THREAD_RANKER or shipped.get("answer_model"):
        raise SystemExit(f"the shipped C file must rank threads with {THREAD_RANKER} and name no answer_model")
    _, b_queries, _ = question_training_set(s.semeval_dir)
    folds = [sorted(b_queries[i].id for i in fold) for fold in folds_of(b_queries, args.folds)]
    queries, gold = related_training_set(s.semeval_dir)
    missing = [q.id for q in queries if not any(q.id in f for f in folds)]
    if missing:
        raise SystemExit(f"C training questions in no fold: {missing}")
    answer, quality = (get_ranker(shipped[k], s) for k in ("answer_ranker", "quality_ranker"))

    columns: dict[str, np.ndarray] = {}
    fold_log = []
    for k, held in enumerate(folds):
        fold_dir = args.question_folds / f"fold-{k}"
        config = json.loads((fold_dir / "config.json").read_text()) if (fold_dir / "config.json").is_file() else {}
        if config.get("held_out_questions") != held:
            raise SystemExit(f"{fold_dir}: not a fold model that held out fold {k} of {args.folds} (seed "
                             f"{FOLD_SEED}); run scripts/cv_question_model.py --folds {args.folds} --out "
                             f"{args.question_folds}")
        fq = [q for q in queries if q.id in set(held)]
        columns.update(zip((q.id for q in fq), feature_columns(fq, answer, fold_thread_ranker(fold_dir, k, s),
                                                               quality)))
        fold_log.append({"fold": k, "C_questions": len(fq), "model": str(fold_dir)})
        print(json.dumps(fold_log[-1]), file=sys.stderr, flush=True)
    train_X = [columns[q.id] for q in queries]
    dev_q, dev_gold = dev_set(s.semeval_dir, "C")
    parts = [get_ranker(shipped[k], s) if shipped.get(k) else None for k in RELATED_PARTS]
    dev_X = feature_columns(dev_q, *parts)

    train_map, dev_map = GoldMAP(queries, gold), GoldMAP(dev_q, dev_gold)
    pooled_map = GoldMAP(queries + dev_q, gold + dev_gold)
    base = padded(shipped["weights"])

    def weights_of(setting: tuple[float, ...]) -> np.ndarray:
        w = base.copy()
        for name, v in zip(SEARCHED, setting):
            w[FEATURES.index(name)] = v
        return w

    def scores(w: np.ndarray, X: list[np.ndarray]) -> list[np.ndarray]:
        return [x @ w for x in X]

    grid = []
    for setting in itertools.product(GRID, repeat=len(SEARCHED)):
        w = weights_of(setting)
        grid.append({"weights": dict(zip(SEARCHED, setting)), "train_MAP": train_map(scores(w, train_X)),
                     "dev_MAP": dev_map(scores(w, dev_X)),
                     "pooled_MAP": pooled_map(scores(w, train_X) + scores(w, dev_X))})
    shipped_setting = {n: float(base[FEATURES.index(n)]) for n in SEARCHED}
    shipped_row = next(r for r in grid if r["weights"] == shipped_setting)
    chosen = {"shipped (by dev-C, scripts/tune_related.py)": shipped_row,
              **{f"by {what}": max(grid, key=lambda r: r[key])  # the first of equals: the grid's smaller weights
                 for what, key in (("dev-C over this grid", "dev_MAP"), ("training questions", "train_MAP"),
                                   ("both, pooled", "pooled_MAP"))}}
    pooled = chosen["by both, pooled"]
    w_pooled, w_shipped = weights_of(tuple(pooled["weights"].values())), base

    def pooled_against_shipped(X, gold_map) -> dict:
        return against_shipped(gold_map.per_question(scores(w_pooled, X)), gold_map.per_question(scores(w_shipped, X)))
    report = {"questions": {"train": len(queries), "dev": len(dev_q)}, "folds": fold_log, "fold_seed": FOLD_SEED,
              "held_at_shipped": {n: float(base[i]) for i, n in enumerate(FEATURES) if n not in SEARCHED and base[i]},
              "chosen": chosen, "pooled_against_shipped": {"train": pooled_against_shipped(train_X, train_map),
                                                            "dev_C": pooled_against_shipped(dev_X, dev_map)},
              "grid": grid, "command": "python scripts/cv_related.py " + " ".join(sys.argv[1:])}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    candidate = {**shipped, "weights": [float(v) for v in w_pooled[:max(len(shipped["weights"]),
                                                                         *(FEATURES.index(n) + 1 for n in SEARCHED))]],
                 "chosen_by": "scripts/cv_related.py: dev-C and train part 2's C questions pooled"}
    (args.out / "related_candidate.json").write_text(json.dumps(candidate, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("questions", "chosen", "pooled_against_shipped")}))


if __name__ == "__main__":
    main()
