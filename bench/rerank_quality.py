"""Ranking quality of POST /rerank, /rerank/questions and /rerank/answers as a forum gets it: each thread of a
SemEval subtask A file sent to a real `cqa serve` as a forum sends it (question subject and body, asker, each
comment's id, text, author and time, and whether the comments come in their thread's order) to /rerank; each question
of a subtask B file with its related questions in the order the task's search engine gave them (id, subject, body)
to /rerank/questions; each question of a subtask C file with its related threads in that order (id, subject, body,
asker, category, and their comments as subtask A sends them) to /rerank/answers. The returned order is scored with
the project's official-scorer MAP, side by side with the reference: the same ranker run in process on the same file,
as `cqa evaluate` runs it. Their difference is what the served path adds or loses. Prints a JSON object last.

    python bench/rerank_quality.py --data-dir DEMO --benchmarks semeval2016-test-A,semeval2016-test-A-nometa-shuffled-nodates
    python bench/rerank_quality.py --data-dir DEMO --benchmarks semeval2016-test-B,semeval2016-test-C

The data folder needs a live generation (`/rerank` needs one to start; the demo corpus will do). Each server gets
an empty score store of its own, so no score comes from an earlier run.

With --stored, each subtask A thread is not sent: its comments are asked for by the thread's id alone, GET
/threads/{id}/answers, from a data folder whose store holds the file's threads as the file gives them (the 2016
corpus's, `DATA/benchmarks/fullcorpus-2016`, which `cqa evaluate` builds); the bench stops if a stored thread's
comments are not the benchmark's.

    python bench/rerank_quality.py --data-dir var/benchmarks/fullcorpus-2016 --stored --benchmarks semeval2016-test-A
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bodies import ENDPOINTS, body_of, related_threads  # noqa: E402
from load import get_json, parse_configs, post_json, server  # noqa: E402


def served_scores(base: str, queries, variant: str | None, subtask: str = "A", threads: dict | None = None,
                  stored: bool = False) -> tuple[list[list[float]], Counter, list[float]]:
    scores, regimes, latency = [], Counter(), []
    for q in queries:
        t0 = time.perf_counter()
        if stored:  # the thread by its id alone, as the store holds it
            where = f"GET /threads/{q.id}/answers"
            status, out = get_json(f"{base}/threads/{urllib.parse.quote(q.id, safe='')}/answers")
        else:
            where = f"POST {ENDPOINTS[subtask]}"
            body = body_of(q, variant, subtask, threads[q.id] if threads is not None else None)
            status, out = post_json(base + ENDPOINTS[subtask], body)
        latency.append(time.perf_counter() - t0)
        if status != 200:
            raise SystemExit(f"{where} answered {status} for question {q.id}: {out}")
        if stored and sorted(r["id"] for r in out["results"]) != sorted(c.id for c in q.candidates):
            raise SystemExit(f"{where}: the stored thread's comments are not the benchmark's; serve a data folder "
                             "whose store holds this file's threads")
        by_id = {r["id"]: r["score"] for r in out["results"]}
        scores.append([by_id[c.id] for c in q.candidates])
        if "metadata" in out:  # the subtask A ranker's metadata regime
            regimes[out["metadata"]] += 1
        if "search_order" in out:  # the subtask B and C rankers: whether they weighed the order given
            regimes["search order" if out["search_order"] else "no search order"] += 1
        if "comments_read" in out:  # the subtask B ranker: whether it weighed the candidates' comments
            regimes["comments read" if out["comments_read"] else "comments not read"] += 1
    return scores, regimes, latency


def inversion_gap(served: list[float], local: list[float]) -> float:
    """The largest, over the pairs of candidates ordered one way by ``served`` and the other by ``local``, of the
    smaller of the two gaps between their scores: 0 where both orders agree (ties apart)."""
    gap = 0.0
    for i in range(len(served)):
        for j in range(i + 1, len(served)):
            a, b = served[i] - served[j], local[i] - local[j]
            if a * b < 0:
                gap = max(gap, min(abs(a), abs(b)))
    return gap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="a data folder with a live generation")
    ap.add_argument("--benchmarks", default="semeval2016-test-A,semeval2016-test-A-nometa-shuffled,"
                    "semeval2016-test-A-nometa-shuffled-nodates",
                    help="subtask A, B or C benchmarks (cqa evaluate --list), comma-separated")
    ap.add_argument("--config", default="default", help="the server's settings, as one bench/load.py "
                    "--rerank-configs entry (label=RANKER@INFERENCE;VAR=VALUE); the reference runs the same ranker")
    ap.add_argument("--limit", type=int, default=0, help="only the first N threads of each file (0: all)")
    ap.add_argument("--stored", action="store_true", help="subtask A: ask for each thread's comments by its id "
                    "(GET /threads/{id}/answers) from a data folder that stores the file's threads, instead of "
                    "sending them to POST /rerank")
    args = ap.parse_args()

    import numpy as np

    from app.settings import Settings
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    from ranking.evaluation.measures import paired_randomization
    from ranking.evaluation.runner import align_to_gold, indexed_by
    from ranking.evaluation.scorer import Line, per_question_ap, read_lines
    from ranking.evaluation.tuning import map_of
    from ranking.pipeline import as_given_to
    from ranking.rankers import get_ranker

    (label, env), = parse_configs(args.config)
    os.environ.update(env)  # the reference reads the server's settings: the same ranker, variant and depths
    settings = Settings(data_dir=args.data_dir)
    names = {"A": settings.default_ranker, "B": settings.default_ranker_b, "C": settings.default_ranker_c}
    references: dict = {}
    out = {"bench": "rerank_quality", "config": label, "env": env, "stored": args.stored,
           "reranker": settings.default_ranker,
           "question_reranker": settings.default_ranker_b, "answers_reranker": settings.default_ranker_c,
           "benchmarks": {}}
    files = {}
    for name in args.benchmarks.split(","):
        bench = BENCHMARKS[name]
        if args.stored and (bench.subtask != "A" or bench.variant):
            raise SystemExit(f"{name}: --stored asks for a stored thread's comments (subtask A, as stored: no variant)")
        if bench.subtask not in ENDPOINTS:
            raise SystemExit(f"{name}: /rerank sorts a thread's comments (subtask A), /rerank/questions given "
                             f"questions (subtask B), /rerank/answers given threads' comments (subtask C); no "
                             f"endpoint serves subtask {bench.subtask}")
        xml, gold = bench.paths(settings.semeval_dir)
        queries = queries_for(xml, bench.subtask, bench.variant)
        threads = related_threads(xml, bench.variant) if bench.subtask == "C" else None
        files[name] = (bench, queries[: args.limit] if args.limit else queries, read_lines(gold), threads)
    # subtask B in process reads the stored vectors the server's /rerank/questions reads (as cqa evaluate does): the
    # data folder's live generation, loaded once
    indexed = indexed_by(settings, "B") if any(b.subtask == "B" for b, *_ in files.values()) else None
    for name, (bench, queries, gold, threads) in files.items():
        with server(args.data_dir, env) as (base, ready):  # a server per file: no memo holds the last file's pairs
            out["served_reranker"], out["served_question_reranker"] = ready["reranker"], ready["question_reranker"]
            out["served_answers_reranker"] = ready["answers_reranker"]
            served, regimes, latency = served_scores(base, queries, bench.variant, bench.subtask, threads, args.stored)
        if bench.subtask not in references:
            references[bench.subtask] = get_ranker(names[bench.subtask], settings)
        given = as_given_to(indexed, queries) if bench.subtask == "B" else queries
        t0 = time.perf_counter()
        local = references[bench.subtask].score(given)
        local_s = time.perf_counter() - t0
        ids = {q.id for q in queries}
        g = [x for x in gold if x.qid in ids]

        def ap(scores):
            lines = [Line(q.id, c.id, float(s), False) for q, row in zip(queries, scores)
                     for c, s in zip(q.candidates, row)]
            return per_question_ap(g, align_to_gold(lines, g))

        ap_served, ap_local = ap(served), ap(local)
        qids = sorted(ap_local)
        a, b = [ap_served[i] for i in qids], [ap_local[i] for i in qids]
        lat = np.asarray(latency) * 1000
        out["benchmarks"][name] = {
            "threads": len(queries), "served_map": round(map_of(queries, served, g), 4),
            "in_process_map": round(map_of(queries, local, g), 4),
            "difference": round(map_of(queries, served, g) - map_of(queries, local, g), 4),
            "p_randomisation": round(paired_randomization(a, b), 4),
            "threads_ranked_differently": sum(
                list(np.argsort(-np.asarray(s), kind="stable")) != list(np.argsort(-np.asarray(r), kind="stable"))
                for s, r in zip(served, local)),
            # an order told apart by less than a score's float noise is a near-tie, not a different ranking: the
            # largest gap by which two candidates are ordered one way served and the other in process
            "largest_inversion_gap": max((inversion_gap(s, r) for s, r in zip(served, local)), default=0.0),
            "largest_score_difference": round(max((abs(x - y) for s, r in zip(served, local)
                                                   for x, y in zip(s, r)), default=0.0), 6),
            "metadata_regimes": dict(regimes), "served_p50_ms": round(float(np.percentile(lat, 50)), 1),
            "in_process_seconds": round(local_s, 1)}
        print(json.dumps({name: out["benchmarks"][name]}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
