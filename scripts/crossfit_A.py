"""Cross-fitted (out-of-fold) MiniLM scores for the subtask A training threads (issue 16).

The learned layer `cross-encoder+signals` (ranking/combination.py) must learn from ranker scores of threads the
rankers never saw, so until now it trained on the one file the MiniLM models hold out (2015 test: 1,844 comments).
Cross-fitting gives it the other training files too: their threads are dealt into K folds by original question
(`ranking.evaluation.tuning.thread_folds`, seed 2016; the related threads of one 2016 question share a fold), a model
of each kind is trained on the other folds with the shipped recipe (`cqa train`'s settings, the best dev-A point
kept), and it scores its own fold. Every training comment then carries the score of a model that never saw it.
`python scripts/train_combination.py --name cross-encoder+signals --regimes --cross-fitted OUT/scores.json` trains
the layer on those scores and on the held-out file's scores of the shipped models.

    python scripts/crossfit_A.py train --kind cross-encoder --fold 0 [--folds 4] [--epochs 3 --eval-every 167]
                                       [--device cuda] [--out var/crossfit]      (one fold model; run them at once)
    python scripts/crossfit_A.py score [--folds 4] [--out var/crossfit]   (each fold model scores its fold)

`score` writes OUT/scores.json: per kind and file, each training comment's out-of-fold score; each thread's fold; each
fold model's dev-A MAP and training settings. JSON object last.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.tuning import FOLD_SEED, thread_folds  # noqa: E402

KINDS = ("cross-encoder", "bi-encoder")


def train_fold(args: argparse.Namespace, settings: Settings) -> dict:
    """One fold model: ``args.kind`` trained on the threads of the other folds, as `cqa train` trains it."""
    from ranking.neural.train_minilm import MiniLMTrainConfig, a_training_threads, train_minilm_from_semeval
    threads = a_training_threads(settings.semeval_dir)
    fold = thread_folds(threads, args.folds)
    kept = {f: [t for t in ts if fold[f][t.id] != args.fold] for f, ts in threads.items()}
    left_out = sum(map(len, threads.values())) - sum(map(len, kept.values()))
    cfg = MiniLMTrainConfig(kind=args.kind, epochs=args.epochs, eval_every=args.eval_every, max_length=args.max_length,
                            device=args.device, seed=args.seed, max_steps=args.max_steps)
    out = args.out / f"{args.kind}-fold{args.fold}"
    m = train_minilm_from_semeval(settings.semeval_dir, out, cfg, progress=False, threads=kept, meta={
        "cross_fit": {"fold": args.fold, "folds": args.folds, "seed": FOLD_SEED, "threads_left_out": left_out}})
    return {"kind": args.kind, "fold": args.fold, "out": str(out), "dev_MAP": m["dev_MAP"], "best": m["best"],
            "train_seconds": m["train_seconds"], "threads": sum(map(len, kept.values()))}


def score_folds(args: argparse.Namespace, settings: Settings) -> dict:
    """Each fold model scores the questions of its own fold; OUT/scores.json."""
    from ranking.evaluation.benchmarks import queries_for
    from ranking.neural.checkpoint import read_metrics
    from ranking.neural.ranker import MiniLMRanker
    from ranking.neural.train_minilm import a_training_threads
    threads = a_training_threads(settings.semeval_dir)
    fold = thread_folds(threads, args.folds)
    queries = {f: queries_for(settings.semeval_dir / f, "A")[:args.limit] for f in threads}
    scores: dict[str, dict[str, dict[str, float]]] = {k: {f: {} for f in threads} for k in KINDS}
    models: dict[str, list[dict]] = {k: [] for k in KINDS}
    inference = ""
    t0 = time.perf_counter()
    for kind in KINDS:
        for i in range(args.folds):
            folder = args.out / f"{kind}-fold{i}"
            ranker = MiniLMRanker.from_checkpoint(folder, args.device, name=kind, inference=args.inference)
            mine = [(f, q) for f, qs in queries.items() for q in qs if fold[f][q.id] == i]
            for (f, q), row in zip(mine, ranker.score([q for _, q in mine])):
                scores[kind][f].update({c.id: float(s) for c, s in zip(q.candidates, row)})
            met = read_metrics(folder)
            models[kind].append({"fold": i, "questions": len(mine), "dev_MAP": met["dev_MAP"], "best": met["best"],
                                 "train": json.loads((folder / "config.json").read_text()).get("train"),
                                 "train_seconds": met.get("train_seconds")})
            inference = f"{ranker.device} {ranker.inference.label}"
    record = {"folds": args.folds, "seed": FOLD_SEED, "files": list(threads), "inference": inference,
              "limit": args.limit,
              "fold_of": fold, "models": models, "scores": scores,
              "seconds": round(time.perf_counter() - t0, 1)}
    (args.out / "scores.json").write_text(json.dumps(record) + "\n")
    return {"out": str(args.out / "scores.json"), "comments": {k: sum(map(len, v.values())) for k, v in scores.items()},
            "fold_dev_MAP": {k: [round(m["dev_MAP"], 4) for m in v] for k, v in models.items()},
            "seconds": record["seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["train", "score"])
    ap.add_argument("--kind", choices=KINDS, help="train: which MiniLM ranker")
    ap.add_argument("--fold", type=int, help="train: the fold left out")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3, help="train (default 3, the shipped cross-encoder's recipe)")
    ap.add_argument("--eval-every", type=int, default=167, help="train: dev-A evaluation every N steps")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--max-steps", type=int, default=None, help="train: stop after this many steps (smoke runs)")
    ap.add_argument("--limit", type=int, default=None, help="score: the first N questions of each file (smoke runs)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--inference", default="auto", help="score: the variant (CUDA always runs torch-bf16)")
    ap.add_argument("--out", type=Path, default=Path("var/crossfit"))
    args = ap.parse_args()
    settings = Settings()
    if args.step == "train":
        from ranking.neural.train import stop_on_sigterm
        stop_on_sigterm()  # a job's time limit stops training as Ctrl-C does: the best point so far is kept
        if args.kind is None or args.fold is None or not 0 <= args.fold < args.folds:
            ap.error(f"train needs --kind and --fold in 0..{args.folds - 1}")
        print(json.dumps(train_fold(args, settings)))
    else:
        print(json.dumps(score_folds(args, settings)))


if __name__ == "__main__":
    main()
