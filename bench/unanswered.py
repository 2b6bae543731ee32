"""How the /search questions reranker holds up when many threads have no comment yet (a forum's new questions): the
full 2016 corpus with the comments of a seeded share of its threads removed (judged and unjudged alike), reindexed
in a copy, and each 2016 dev or test original question searched through the serving pipeline (target questions, k
100, scored at 10 as the /search benchmarks are). Side by side in one run: the first stage, the reranker as served,
and, with --variants, the same pipeline with other rerankers (e.g. search-questions with missing answer features
imputed). Relevance is the /search questions judgements: question similarity, which removing comments does not
change. Paired randomisation tests each reranker against the first stage. Prints a JSON object last.

    python bench/unanswered.py --data-dir /tmp/cqa-full --share 0.5 --splits dev,test

--data-dir is the data folder `cqa evaluate` uses: its corpus (DATA/benchmarks/fullcorpus-2016, built if missing) is
copied to a temporary folder, which gets the change and a reindex; the corpus itself is not changed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--share", type=float, default=0.5, help="the share of threads whose comments are removed")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--splits", default="dev,test")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions of each split (0: all)")
    ap.add_argument("--variants", default="", help="other /search questions rerankers to run beside the served one "
                    "(preset names, comma-separated)")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.searcher import load_current
    from indexing.store import ThreadStore
    from ranking.evaluation.measures import paired_randomization, per_query
    from ranking.fullcorpus import figures_of, unanswered_copy
    from ranking.pipeline import build_pipeline
    from ranking.rankers import service_reranker
    from ranking.search_benchmark import FIRST_STAGE, RERANKED, qrels_for, search_run

    settings = Settings(data_dir=args.data_dir)
    out: dict = {"bench": "unanswered", "share": args.share, "seed": args.seed, "splits": {}}
    with tempfile.TemporaryDirectory(prefix="cqa-unanswered-") as tmp:
        made = unanswered_copy(settings, Path(tmp) / "data", args.share, args.seed)
        copy = made.settings
        out["threads"], out["threads_stripped"] = made.threads, made.stripped
        out["threads_without_comments_before"] = made.without_comments_before
        out["threads_without_comments"] = made.without_comments
        out["reindex_seconds"] = made.reindex_seconds
        gen = load_current(copy.index_root, copy.device)
        with ThreadStore(copy.store_path) as store:
            pipe = build_pipeline(copy, gen, store)
            variants = {}
            for name in filter(None, args.variants.split(",")):
                ranker = service_reranker(copy, {}, name)  # set up as search_rerankers sets up the served one
                variants[name] = build_pipeline(copy, gen, store, {"questions": ranker})
            for split in args.splits.split(","):
                qrels, questions = qrels_for(settings, split, "questions")
                if args.limit:
                    questions = dict(list(questions.items())[: args.limit])
                    qrels = {q: qrels[q] for q in questions}
                runs = {"first-stage": search_run(pipe, questions, "questions", FIRST_STAGE, qrels)[0],
                        f"served ({pipe.reranker_of('questions').name})":
                            search_run(pipe, questions, "questions", RERANKED, qrels)[0]}
                for name, p in variants.items():
                    runs[name] = search_run(p, questions, "questions", RERANKED, qrels)[0]
                base = per_query(qrels, runs["first-stage"], "AP@10")
                split_out = {"questions": len(questions)}
                for name, run in runs.items():
                    fig = figures_of(qrels, run)
                    ap_run = per_query(qrels, run, "AP@10")
                    qs = sorted(base)
                    split_out[name] = {"MAP@10": round(fig["MAP@10"], 4), "P@1": round(fig["P@1"], 4)}
                    if name != "first-stage":
                        split_out[name]["p_vs_first_stage"] = round(paired_randomization(
                            [ap_run.get(q, 0.0) for q in qs], [base[q] for q in qs]), 4)
                out["splits"][split] = split_out
                print(json.dumps({split: split_out}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
