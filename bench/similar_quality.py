"""Ranking quality of GET /threads/{id}/similar, a thread page's related questions, as a forum gets it: the full 2016
corpus with each original question of the 2016 dev or test /search benchmarks added as a thread of its own (as a
forum's new thread is, once `cqa reindex` has run), and each such thread's similar questions asked by its id from a
real `cqa serve`, scored with the /search benchmarks' judgements (MAP@10, P@1, nDCG@10; a collapsed result by the
copy judged relevant, if any). Side by side, over the same server, what a forum would do without the endpoint:
POST /search with the thread's own subject and body, as shown (the thread itself comes back, as a result or folded
into one), and with the thread's own result dropped by the caller from k + 1 results (the copies the service folded
into it go with it).
Paired randomisation tests the endpoint against the caller's drop. Prints a JSON object last.

    python bench/similar_quality.py --data-dir var --splits dev,test --target questions

--data-dir is the data folder `cqa evaluate` uses: its corpus (DATA/benchmarks/fullcorpus-2016, built if missing) is
copied to a temporary folder, which gets the original questions and a reindex there; the corpus itself is not changed.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import get_json, post_json, server  # noqa: E402
from search_quality import SHOWN, shown  # noqa: E402

OWN = "orgq-"  # the id prefix of an original question's own thread


@contextmanager
def corpus_with(settings, added):
    """A temporary copy of the 2016 corpus's data folder (built if missing) with the ``added`` threads stored and a
    generation built over them; yields (folder, seconds the reindex took). The corpus itself is not changed."""
    from indexing.reindex import reindex
    from indexing.store import ThreadStore
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    ensure_corpus(settings, progress=True)
    with tempfile.TemporaryDirectory(prefix="cqa-similar-") as tmp:
        folder = Path(tmp) / "data"
        shutil.copytree(corpus_settings(settings).data_dir, folder)
        copy = settings.model_copy(update={"data_dir": folder})
        with ThreadStore(copy.store_path) as store:
            store.upsert(added)
        t0 = time.perf_counter()
        reindex(copy, progress=True)
        yield folder, round(time.perf_counter() - t0, 1)


def shows(results: list[dict], thread_id: str) -> bool:
    """Whether a thread is among ``results``, as one or folded into one."""
    return any(thread_id in (r["thread_id"], *r["duplicates"]) for r in results)


def score_split(base: str, qrels: dict, questions: dict, target: str) -> dict:
    """Each question's own thread asked for its similar ones, beside POST /search with its text (as shown, and with
    the thread dropped by the caller); their figures, the paired test of the endpoint against the drop, and speed."""
    import numpy as np

    from ranking.evaluation.measures import paired_randomization, per_query
    from ranking.fullcorpus import figures_of
    runs: dict[str, dict] = {"similar": {}, "search": {}, "search-dropped": {}}
    ms: list[float] = []
    own_searched = own_shown = 0
    for qid, (subject, body) in questions.items():
        judged, own = qrels.get(qid, {}), OWN + qid
        t = time.perf_counter()
        status, similar = get_json(f"{base}/threads/{own}/similar?k={SHOWN}&target={target}")
        ms.append(1000 * (time.perf_counter() - t))
        if status != 200:
            raise SystemExit(f"GET /threads/{own}/similar answered {status}: {similar}")
        status, searched = post_json(base + "/search", {"question": {"subject": subject, "body": body},
                                                        "k": SHOWN + 1, "target": target})
        if status != 200:
            raise SystemExit(f"POST /search answered {status} for {qid}: {searched}")
        results = searched["results"]
        own_shown += shows(similar["results"], own)
        own_searched += shows(results[:SHOWN], own)
        runs["similar"][qid] = shown(similar["results"], judged)
        runs["search"][qid] = shown(results, judged)
        runs["search-dropped"][qid] = shown([r for r in results if r["thread_id"] != own], judged)
    figures = {name: {m: round(v, 4) for m, v in figures_of(qrels, run).items() if m in ("MAP@10", "P@1", "nDCG@10")}
               for name, run in runs.items()}
    ap_sim, ap_drop = (per_query(qrels, runs[n], "AP@10") for n in ("similar", "search-dropped"))
    qids = sorted(set(ap_sim) | set(ap_drop))
    return {"questions": len(questions), **figures,
            "similar_minus_dropped": round(figures["similar"]["MAP@10"] - figures["search-dropped"]["MAP@10"], 4),
            "p_randomisation": round(paired_randomization([ap_sim.get(q, 0.0) for q in qids],
                                                          [ap_drop.get(q, 0.0) for q in qids]), 4),
            "questions_ranked_differently": sum(list(runs["similar"][q]) != list(runs["search-dropped"][q])
                                                for q in questions),
            "search_shows_the_thread": own_searched, "similar_shows_the_thread": own_shown,
            "similar_p50_ms": round(float(np.percentile(ms, 50)), 1),
            "similar_p95_ms": round(float(np.percentile(ms, 95)), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--splits", default="dev,test", help="whose original questions: dev, test or both")
    ap.add_argument("--target", choices=("questions", "threads"), default="questions")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions of each split (0: all)")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.models import Thread
    from ranking.search_benchmark import qrels_for

    settings = Settings(data_dir=args.data_dir)
    sets = {}
    for split in args.splits.split(","):
        qrels, questions = qrels_for(settings, split, args.target)
        if args.limit:
            questions = dict(list(questions.items())[: args.limit])
            qrels = {q: qrels[q] for q in questions}
        sets[split] = (qrels, questions)
    out = {"bench": "similar_quality", "target": args.target, "k": SHOWN, "splits": {}}
    added = [Thread(id=OWN + qid, subject=subject, body=body)
             for qrels, questions in sets.values() for qid, (subject, body) in questions.items()]
    with corpus_with(settings, added) as (folder, seconds):
        out["reindex_seconds"] = seconds
        out["threads_added"] = len(added)
        with server(folder, {}) as (base, ready):
            out["generation"], out["served_reranker"] = ready["generation"], ready["search_rerankers"]["questions"]
            post_json(base + "/search", {"question": {"body": "warm up"}, "target": args.target})
            for split, (qrels, questions) in sets.items():
                out["splits"][split] = score_split(base, qrels, questions, args.target)
                print(json.dumps({split: out["splits"][split]}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
