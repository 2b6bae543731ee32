"""Cross-validation of the subtask B ranker over the training questions (issue 16): dev-B has 50 questions, so
the question model and the question-fusion weights are also judged on the 267 original questions of 2016 train
part 2 and the recovered part 1, which the shipped question bi-encoder was trained on.

The training questions are dealt into K folds (`ranking.evaluation.tuning.folds_of`, seed 2016, as the Arabic
cross-validation deals its questions). For each fold a question bi-encoder is trained on the
other folds with the shipped recipe (the `train` section of models/question-bi-encoder/config.json: the cosine
hinge loss, a 3-epoch schedule kept at the end of epoch 1, the epoch dev-B chose) and scores the fold's questions,
so every training question gets the score of a model that never saw it. Any other part the weights name (the
subtask A bi-encoder over a candidate's comments, `answers-model-max`) is scored by the shipped ranker: where that
ranker was trained on these threads (the A models saw their comments with their own questions), its training-fold
figure flatters it. With these out-of-fold scores and the
untrained parts (the given IR order, BM25, the zero-shot MiniLM cosine) the fusion weights are searched over the
grid the dev-B tuning uses ({0, 0.5, 1} per part), and three choices are compared: by dev-B (the shipped
weights), by the training folds, and by both pooled (MAP over the 267 + 50 questions). Dev-B figures use the
shipped question bi-encoder, trained on all training questions. Test is not read.

The parts built over the question model's vectors (`question-centrality`, `closest-question`) are scored from each
fold's model as well, where the shipped weights or a `--candidate` file (a `scripts/tune_candidate_fusion.py`
output) weigh them. `--candidate` judges that file's weights beside the shipped ones, with the paired randomisation
and t-tests of their per-question AP on the training folds and on dev-B. `--reuse-folds` scores with the fold
models already under OUT when they hold out the same questions and were trained from the same start for as many
steps, instead of training them again.

    python scripts/cv_question_model.py [--folds 5] [--out var/reports/cv-question-model] [--candidate FILE]
        [--augment transitive --against var/reports/cv-question-model]

``--augment transitive`` adds to each fold's training threads the pairs its original questions imply
(`transitive_question_pairs`: two questions relevant to one are relevant to each other), trains one more model on
every training question the same way (OUT/full, scored on dev-B alone and in question-fusion), and ``--against``
names the fold models of the recipe without it: both are scored on the folds, and the augmented folds' question-fusion
(shipped weights) is tested against theirs, question by question (round 40, rule 25).
``--init-from CHECKPOINT --against FOLDS_DIR`` does the same for another start (round 42, rule 27: the model adapted
to the forum's text by scripts/adapt_minilm.py).

Writes OUT/report.json (the folds' dev-B MAP and training time, each part's cross-validated MAP, the three
choices with their training-fold and dev-B MAP) and the folds' checkpoints under OUT/fold-K. JSON object last.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.measures import against_shipped  # noqa: E402
from ranking.evaluation.tuning import FOLD_SEED, GoldMAP, folds_of, fused_scores, grid_search, map_of  # noqa: E402
from ranking.neural.ranker import MiniLMRanker  # noqa: E402
from ranking.neural.train_minilm import (  # noqa: E402
    MiniLMTrainConfig,
    dev_set,
    held_out_scores,
    question_groups,
    question_training_set,
    recorded_recipe,
    train_minilm,
)
from ranking.presets import BUILDERS, PRESETS  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402

UNTRAINED = ("ir-baseline", "bm25", "minilm-cosine")
MODEL = "question-bi-encoder"
# presets whose only part is the question model: scored from each fold's model too
OVER_MODEL = tuple(n for n, spec in PRESETS.items() if spec.parts == (MODEL,))


def over_model(name: str, model, settings: Settings):
    """The preset ``name`` built over ``model`` (a fold's question model) in place of the shipped one."""
    spec = PRESETS[name]
    return BUILDERS[spec.kind](spec, settings, [model], name)


def reusable(fold_dir: Path, held: list[str], cfg: MiniLMTrainConfig) -> bool:
    """Whether ``fold_dir`` holds a fold model trained as ``cfg`` says (its start and steps) that held out exactly
    ``held``."""
    path = fold_dir / "config.json"
    if not (path.is_file() and (fold_dir / "metrics.json").is_file()):
        return False
    config = json.loads(path.read_text())
    trained = config.get("train") or {}
    return (config.get("held_out_questions") == sorted(held) and trained.get("init_from") == cfg.init_from
            and trained.get("max_steps") == cfg.max_steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("var/reports/cv-question-model"))
    ap.add_argument("--max-steps", type=int, help="stop each fold's training after this many steps (smoke runs)")
    ap.add_argument("--init-from", metavar="CHECKPOINT",
                    help="start each fold's model from this bi-encoder checkpoint (e.g. the subtask A bi-encoder) "
                         "instead of the shipped recipe's start")
    ap.add_argument("--candidate", type=Path, metavar="FILE",
                    help="a weights file (scripts/tune_candidate_fusion.py --out) to judge beside the shipped weights")
    ap.add_argument("--reuse-folds", action="store_true",
                    help="score with OUT/fold-K where it holds out the same questions and was trained with the same "
                         "start and steps, instead of training it again")
    ap.add_argument("--augment", choices=["transitive"],
                    help="transitive: each fold also trains on the question pairs its original questions imply")
    ap.add_argument("--against", type=Path, metavar="FOLDS_DIR",
                    help="with --augment or --init-from: the fold models of the recipe without it (a "
                         "cv_question_model.py --out folder), tested against these question by question")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args()
    if args.against and not (args.augment or args.init_from):
        ap.error("--against compares --augment's or --init-from's folds with another recipe's; give one of them")
    s = Settings()
    threads, queries, gold = question_training_set(s.semeval_dir)
    dev_q, dev_gold = dev_set(s.semeval_dir, "B")
    folds = [[queries[i].id for i in fold] for fold in folds_of(queries, args.folds)]
    args.out.mkdir(parents=True, exist_ok=True)

    shipped = PRESETS["question-fusion"].params()["weights"]
    candidate = json.loads(args.candidate.read_text())["weights"] if args.candidate else {}
    weighed = {n for weights in (shipped, candidate) for n, w in weights.items() if w}
    unknown = sorted(n for n in weighed if n not in PRESETS)
    if unknown:
        raise SystemExit(f"no such ranker: {unknown}")
    # parts the weights name that no fold model is behind (the subtask A models over a candidate's comments, say):
    # scored by the shipped ranker, as the untrained ones are
    as_shipped = tuple(sorted(n for n in weighed if n not in (*UNTRAINED, MODEL, *OVER_MODEL)))
    scored = (*UNTRAINED, *as_shipped, MODEL, *(n for n in OVER_MODEL if n in weighed))
    trained = [n for n in scored if n == MODEL or n in OVER_MODEL]

    oof: dict[str, dict[str, list[float]]] = {n: {} for n in trained}
    fold_log = []
    for k, held in enumerate(folds):
        held_set = set(held)
        train_threads = [t for tid, t in threads.items() if tid not in held_set]
        groups = question_groups(train_threads, args.augment)
        # the shipped model's recipe, stopped at the end of its first epoch (the epoch dev-B chose)
        cfg = recorded_recipe(s.question_bi_encoder_checkpoint / "config.json", groups, s.device,
                              max_steps=args.max_steps, **({"init_from": args.init_from} if args.init_from else {}))
        fold_dir = args.out / f"fold-{k}"
        t0 = time.perf_counter()
        reused = args.reuse_folds and reusable(fold_dir, held, cfg)
        if reused:
            metrics = json.loads((fold_dir / "metrics.json").read_text())
        else:
            metrics = train_minilm(groups, dev_q, dev_gold, fold_dir, cfg,
                                   {"task": "B", "cv_fold": k, "held_out_questions": sorted(held)}, not args.quiet)
        ranker = MiniLMRanker.from_checkpoint(fold_dir, s.device, name=f"{MODEL}-fold{k}")
        fq = [q for q in queries if q.id in held_set]
        for n in trained:
            part = ranker if n == MODEL else over_model(n, ranker, s)
            oof[n].update({q.id: row for q, row in zip(fq, part.score(fq))})
        fold_log.append({"fold": k, "train_questions": len(train_threads), "held_out_questions": len(held),
                         "steps": cfg.max_steps, "init_from": cfg.init_from, "dev_B_MAP": metrics["dev_MAP"],
                         "held_out_MAP": map_of(fq, [oof[MODEL][q.id] for q in fq], gold), "reused": reused,
                         "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps(fold_log[-1]), file=sys.stderr, flush=True)

    train_parts = {n: get_ranker(n, s).score(queries) for n in (*UNTRAINED, *as_shipped)}
    train_parts.update({n: [oof[n][q.id] for q in queries] for n in trained})
    dev_parts = {n: get_ranker(n, s).score(dev_q) for n in scored}
    searched = (*UNTRAINED, MODEL)  # the grids: the parts round 4's cross-validation searched
    by_train = grid_search(queries, {n: train_parts[n] for n in searched}, gold)
    by_dev = grid_search(dev_q, {n: dev_parts[n] for n in searched}, dev_gold)
    pooled_q, pooled_gold = queries + dev_q, gold + dev_gold
    by_both = grid_search(pooled_q, {n: train_parts[n] + dev_parts[n] for n in searched}, pooled_gold)
    shipped = {n: shipped.get(n, 0.0) for n in scored}
    train_map, dev_map = GoldMAP(queries, gold), GoldMAP(dev_q, dev_gold)

    def fused(weights: dict[str, float], parts: dict[str, list]) -> list[list[float]]:
        w = {n: v for n, v in weights.items() if v}
        return fused_scores({n: parts[n] for n in w}, w)

    def judged(weights: dict[str, float]) -> dict:
        return {"weights": weights, "train_cv_MAP": train_map(fused(weights, train_parts)),
                "dev_B_MAP": dev_map(fused(weights, dev_parts))}

    def against_shipped_weights(weights: dict[str, float], parts: dict[str, list], gold_map: GoldMAP) -> dict:
        """The candidate's per-question AP against the shipped weights': paired randomisation and t-test."""
        return against_shipped(gold_map.per_question(fused(weights, parts)),
                               gold_map.per_question(fused(shipped, parts)))
    augmented = {}
    if args.augment or args.against:
        augmented = judge_augmented(args, s, threads, queries, gold, dev_q, dev_gold, folds, train_parts, dev_parts,
                                    train_map, dev_map, fused, shipped)
    report = {
        "folds": fold_log, "questions": {"train": len(queries), "dev": len(dev_q)},
        "single_parts": {n: judged({n: 1.0}) for n in train_parts},
        "chosen": {"shipped (by dev-B)": judged(shipped), "by training folds": judged(by_train[0]["weights"]),
                   "by both, pooled": judged(by_both[0]["weights"]),
                   "by dev-B over these parts": judged(by_dev[0]["weights"])},
        "scored_as_shipped": list(as_shipped), "fold_seed": FOLD_SEED,
        "command": "python scripts/cv_question_model.py " + " ".join(sys.argv[1:]),
    }
    if augmented:
        report["augmented"] = augmented
    if args.candidate:
        weights = {n: candidate.get(n, 0.0) for n in scored}
        report["candidate"] = {"file": str(args.candidate), **judged(weights),
                               "train_folds": against_shipped_weights(weights, train_parts, train_map),
                               "dev_B": against_shipped_weights(weights, dev_parts, dev_map)}
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("single_parts", "chosen", "candidate", "augmented") if k in report}))


def judge_augmented(args, s, threads, queries, gold, dev_q, dev_gold, folds, train_parts, dev_parts, train_map,
                    dev_map, fused, shipped) -> dict:
    """Rules 25 and 27's figures: a model trained the same way (the same data, the same start) on every training
    question (OUT/full) on dev-B, and these folds' question-fusion against ``--against``'s folds, question by
    question."""
    from ranking.evaluation.measures import paired_ap
    every = list(threads.values())
    groups = question_groups(every, args.augment)
    cfg = recorded_recipe(s.question_bi_encoder_checkpoint / "config.json", groups, s.device, max_steps=args.max_steps,
                          **({"init_from": args.init_from} if args.init_from else {}))
    full = args.out / "full"
    metrics = train_minilm(groups, dev_q, dev_gold, full, cfg, {"task": "B", "augment": args.augment}, not args.quiet)
    dev_rows = MiniLMRanker.from_checkpoint(full, s.device, name=f"{MODEL}-augmented").score(dev_q)
    out = {"augment": args.augment, "init_from": args.init_from, "training_groups": len(groups), "steps": cfg.max_steps,
           "full": {"checkpoint": str(full), "dev_B_alone": dev_map(dev_rows),
                    "dev_B_fusion": dev_map(fused(shipped, {**dev_parts, MODEL: dev_rows})),
                    "train_seconds": metrics["train_seconds"]}}
    if args.against:
        oof = held_out_scores([args.against / f"fold-{k}" for k in range(len(folds))], folds, queries, s.device,
                              f"{MODEL}-against")
        theirs = {**train_parts, MODEL: [oof[q.id] for q in queries]}
        out["against"] = {"folds": str(args.against),
                          "their_cv_fusion": train_map(fused(shipped, theirs)),
                          "their_cv_alone": train_map(theirs[MODEL]),
                          "cv_fusion": train_map(fused(shipped, train_parts)),
                          "cv_alone": train_map(train_parts[MODEL]),
                          "paired": paired_ap(train_map.per_question(fused(shipped, train_parts)),
                                              train_map.per_question(fused(shipped, theirs)))}
    return out


if __name__ == "__main__":
    main()
