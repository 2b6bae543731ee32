"""Tune a /search reranker end to end on 2016 dev: every dev original question is searched through the
serving pipeline's first stage and duplicate collapse (ranking/pipeline.py, the service's settings), the
reranker's features are computed once on the head it would rerank, and a grid of weights is scored by
MAP@10 of the final list (reranked head, first-stage tail). Weights are fitted on the training questions
(2016 train part 2 and the recovered part 1, whose related threads the corpus holds) and checked on dev;
test is never read.

    python scripts/tune_search.py --target answers     # writes ranking/search_answers_defaults.json
    python scripts/tune_search.py --target questions   # writes ranking/search_questions_defaults.json
    python scripts/tune_search.py --target answers --answer-model bi-encoder --sweep answer_model
    python scripts/tune_search.py --target questions --sweep answers-model-max
        # keep the shipped weights and choose only the added feature's
    python scripts/tune_search.py --target answers --answer-model bi-encoder --thread-ranker question-fusion --keep \
        --out var/candidate.json  # fit nothing: the shipped weights with another thread ranker, on both splits

answers: the related-answers features (ranking/related.py); questions: a z-score fusion of question-question
scores (the first-stage order and scores over the corpus, BM25, LM and the MiniLM cosine over the head)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.settings import Settings  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402
from ranking.fullcorpus import corpus_settings, ensure_corpus  # noqa: E402
from ranking.fusion import zscore  # noqa: E402
from ranking.pipeline import SearchRequest, build_pipeline, rerank_order  # noqa: E402
from ranking.rankers import for_serving, get_ranker  # noqa: E402
from ranking.related import FEATURES, feature_columns  # noqa: E402
from ranking.evaluation.measures import per_query  # noqa: E402
from ranking.search_benchmark import K, qrels_for, scored_id  # noqa: E402

QUESTION_PARTS = ("ir-baseline", "bm25", "lm", "minilm-cosine", "stage-bm25", "stage-lm", "stage-dense", "stage-fused",
                  "answers-cosine-max", "answers-cosine-top3", "answers-model-max", "answers-model-top3")
STEPS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, -0.25, -0.5)
SWEEP = (0.1, 0.25, 0.5, 1.0, 2.0)  # --sweep: one added feature's weight, the shipped ones kept


def features(settings, target: str, split: str, answer_ranker: str, answer_model: str | None = None,
             thread_ranker: str = "fusion"):
    """Per question of the split: (feature matrix of the reranked head, evaluated id of every kept result,
    judgements). A collapsed group is scored by its copy judged relevant, if any (as the benchmark does)."""
    gen = ensure_corpus(settings)
    qrels, questions = qrels_for(settings, split, target)
    rows = []
    with ThreadStore(corpus_settings(settings).store_path) as store:
        pipe = build_pipeline(settings, gen, store, rerankers={})
        if target == "answers":
            answer = for_serving(get_ranker(answer_ranker, settings))
            thread = for_serving(get_ranker(thread_ranker, settings))
            second = for_serving(get_ranker(answer_model, settings)) if answer_model else None
        else:
            parts = [for_serving(get_ranker(n, settings)) for n in QUESTION_PARTS]
        for qid, (subject, body) in tqdm(questions.items(), desc=f"features {split} {target}"):
            req = SearchRequest.asking(subject, body, k=K, target=target)
            got = pipe.retrieve(req)
            head = pipe.head_query(req, got)
            if target == "answers":
                X = feature_columns([head], answer, thread, answer_model=second)[0]
            else:
                X = np.column_stack([zscore(np.asarray(p.score([head])[0], dtype=float)) for p in parts])
            judged = qrels[qid]
            ids = [scored_id([got.candidates[j].id for j in g], judged) for g in got.groups]
            rows.append((X, ids, judged))
    return rows, pipe.depth


def mean_ap(rows, w: np.ndarray | None) -> float:
    """MAP@10 of the final lists, as the search benchmarks measure it (ir_measures' AP@10): the head reranked by
    X @ w (None: the first stage's order), then the tail."""
    qrels, run = {}, {}
    for qi, (X, ids, judged) in enumerate(rows):
        order = list(range(len(ids))) if w is None else rerank_order((X @ w).tolist(), len(ids))
        qrels[str(qi)] = judged
        run[str(qi)] = {ids[i]: float(len(order) - r) for r, i in enumerate(order)}
    return float(np.mean(list(per_query(qrels, run, "AP@10").values())))


def shipped_weights(target: str, names) -> list[float]:
    """The target's shipped weights in the order of ``names``; a feature the file predates weighs 0."""
    w = json.loads((ROOT / "ranking" / f"search_{target}_defaults.json").read_text())["weights"]
    return [float(w.get(n, 0.0)) for n in names] if isinstance(w, dict) else list(w) + [0.0] * (len(names) - len(w))


def sweep(rows, shipped: list[float], i: int) -> np.ndarray:
    """The shipped weights with feature ``i``'s weight chosen over SWEEP by MAP@10; ties keep the smaller
    weight."""
    base = np.asarray(shipped, dtype=float)
    best, w = -1.0, base
    for v in (0.0, *SWEEP):
        trial = base.copy()
        trial[i] = v
        m = mean_ap(rows, trial)
        if m > best + 1e-9:
            best, w = m, trial
    return w


def coordinate_ascent(rows, n: int, rounds: int = 4) -> np.ndarray:
    """Metzler and Croft (2007): one weight at a time over STEPS, keeping what raises MAP@10, from the best
    single feature; ties keep the current (smaller) change."""
    singles = [mean_ap(rows, np.eye(n)[i]) for i in range(n)]
    w = np.eye(n)[int(np.argmax(singles))]
    best = mean_ap(rows, w)
    for _ in range(rounds):
        improved = False
        for i in range(n):
            for v in STEPS:
                trial = w.copy()
                trial[i] = v
                if not trial.any():
                    continue
                m = mean_ap(rows, trial)
                if m > best + 1e-9:
                    best, w, improved = m, trial, True
        if not improved:
            break
    return w


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=["answers", "questions"], required=True)
    ap.add_argument("--fit", choices=["train", "train-part2", "dev"], default="dev",
                    help="where the weights are fitted (default: dev)")
    ap.add_argument("--check", choices=["train", "train-part2", "dev"], default="train-part2",
                    help="the other split the fitted weights are checked on (default: the training questions of "
                         "part 2, whose related threads the corpus holds with their comments)")
    ap.add_argument("--answer-ranker", default="minilm-cosine", help="answers: the ranker of (question, comment)")
    ap.add_argument("--answer-model", help="answers: a second ranker of (question, comment), the feature answer_model "
                    "(e.g. bi-encoder, which reads the comment vectors a generation stores)")
    ap.add_argument("--thread-ranker", default="fusion", help="answers: the ranker of (new question, thread "
                    "question), the feature thread_similarity (default: fusion)")
    ap.add_argument("--keep", action="store_true", help="fit nothing: score the target's shipped weights as they are "
                    "(with the rankers named here)")
    ap.add_argument("--sweep", choices=FEATURES + QUESTION_PARTS, help="keep the shipped weights of the target and "
                    "choose only this feature's weight, over SWEEP, on the --fit questions (coordinate ascent "
                    "otherwise)")
    ap.add_argument("--out", type=Path, help="defaults file to write (default: ranking/search_<target>_defaults.json)")
    args = ap.parse_args()
    settings = Settings()
    t0 = time.perf_counter()
    names = FEATURES if args.target == "answers" else QUESTION_PARTS
    if args.keep and args.sweep:
        ap.error("--keep fits nothing; --sweep fits one weight: give one of them")
    if args.keep and not args.out:  # it scores another setting: the shipped file stays as it is
        ap.error("--keep writes a candidate file: give --out")
    if args.sweep and args.sweep not in names:
        ap.error(f"--sweep {args.sweep} is not a feature of the {args.target} reranker: one of {', '.join(names)}")
    data = {split: features(settings, args.target, split, args.answer_ranker, args.answer_model,
                            args.thread_ranker)[0]
            for split in {args.fit, args.check}}
    depth = settings.rerank_depth
    feature_seconds = time.perf_counter() - t0
    if args.keep:
        w = np.asarray(shipped_weights(args.target, names), dtype=float)
    elif args.sweep:
        w = sweep(data[args.fit], shipped_weights(args.target, names), names.index(args.sweep))
    else:
        w = coordinate_ascent(data[args.fit], len(names))
    figures = {split: {"first_stage": mean_ap(rows, None), "reranked": mean_ap(rows, w),
                       "single_features": {n: mean_ap(rows, np.eye(len(names))[i]) for i, n in enumerate(names)},
                       "questions": len(rows)} for split, rows in data.items()}
    weights = [float(x) for x in w]
    if args.target == "answers":
        d = {"name": "search-answers", "answer_ranker": args.answer_ranker, "thread_ranker": args.thread_ranker,
             **({"answer_model": args.answer_model} if args.answer_model else {}),
             "features": list(FEATURES), "weights": weights}
    else:
        d = {"name": "search-questions", "weights": dict(zip(names, weights))}
    d.update({"fitted_on": f"semeval2016-{args.fit}-search-{args.target} questions (coordinate ascent on MAP@10)",
              "MAP@10": figures, "rerank_depth": depth, "feature_seconds": round(feature_seconds, 1),
              "command": f"python scripts/tune_search.py --target {args.target} --fit {args.fit} --check {args.check}"
                         + (f" --answer-ranker {args.answer_ranker}" if args.answer_ranker != "minilm-cosine" else "")
                         + (f" --answer-model {args.answer_model}" if args.answer_model else "")
                         + (f" --thread-ranker {args.thread_ranker}" if args.thread_ranker != "fusion" else "")
                         + (" --keep" if args.keep else "")
                         + (f" --sweep {args.sweep}" if args.sweep else "")})
    if args.sweep:
        d["fitted_on"] = (f"semeval2016-{args.fit}-search-{args.target} questions: the weight of {args.sweep} over "
                          f"{list(SWEEP)}, the others as shipped")
    if args.keep:
        d["fitted_on"] = "nothing: the shipped weights kept as they are"
    out = args.out or ROOT / "ranking" / f"search_{args.target}_defaults.json"
    out.write_text(json.dumps(d, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"target": args.target, "fit": args.fit, "weights": dict(zip(names, weights)),
                      **{f"{s}_MAP@10": {"first_stage": round(f["first_stage"], 4), "reranked": round(f["reranked"], 4)}
                         for s, f in figures.items()}, "out": str(out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
