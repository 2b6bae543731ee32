"""Arabic input to POST /rerank, /rerank/questions and /rerank/answers, as an Arabic forum sends it, to a real `cqa
serve`: each question of the 2016 subtask D dev file (Arabic medical questions) with its 30 or so question-answer
pairs in the search engine's order, no user id, no time:

- /rerank: each pair one candidate, its question and answer as the text;
- /rerank/questions: each pair's question as a candidate question (id: its thread's id in the forum);
- /rerank/answers: each pair as a related thread, its question and its answer as the one comment (ids: the forum's).

The returned order is scored with the official scorer's MAP against the pairs' labels (at /rerank/questions that is
a proxy: a label judges the pair, and the endpoint sees its question only), side by side in one run:

- off: a server with CQA_ARABIC_RANKER empty, where each endpoint's default ranker (its models trained on English)
  ranks Arabic input too, as before Arabic input had a ranker of its own;
- on: a server with the default settings, which rank Arabic input with $CQA_ARABIC_RANKER;

each beside the ranker the server named run in process on the same texts and the same generation (the reference;
for the English rankers at /rerank/questions and /rerank/answers, bench/rerank_quality.py holds that reference on
subtasks B and C). At /rerank also the given order, BM25 with the Arabic analyzer and its statistics from every pair
of the file (what `cqa evaluate --benchmark semeval2016-dev-D` reports as bm25), and the same with each request's
candidates as its statistics (bm25-arabic-candidates). Paired randomisation compares on with off at each endpoint,
question by question. Prints a JSON object last.

    python bench/arabic_rerank.py --data-dir DEMO     # an English forum: the Arabic ranker's statistics come from
                                                      # each request's candidates
    python bench/arabic_rerank.py --data-dir DFORUM   # the dev-D pairs as the forum (cqa ingest of the dev-D file,
                                                      # cqa reindex): its statistics come from the forum

The data folder needs a live generation (/rerank needs one to start). The test questions' text was never
released, so this is dev-D, the file the Arabic ranker was chosen on (docs/BENCHMARKS.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import post_json, server  # noqa: E402


ENDPOINTS = {"rerank": "/rerank", "questions": "/rerank/questions", "answers": "/rerank/answers"}


def body_of(q, endpoint: str) -> dict:
    """What an Arabic forum sends: the new question, and each question-answer pair as ``endpoint`` takes it."""
    question = {"body": q.text}
    if endpoint == "rerank":
        return {"question": question, "candidates": [{"id": c.id, "text": c.text} for c in q.candidates]}
    if endpoint == "questions":
        return {"question": question, "candidates": [{"id": c.meta["thread_id"], "body": c.meta["question"]}
                                                     for c in q.candidates]}
    return {"question": question, "threads": [
        {"id": c.meta["thread_id"], "body": c.meta["question"],
         "comments": [{"id": c.meta["answer_id"], "text": c.meta["answer"]}]} for c in q.candidates]}


def sent_id(c, endpoint: str) -> str:
    """The id ``body_of`` gives a pair's result at ``endpoint`` (the pair's own id, QAID, is what the gold file
    scores)."""
    return {"rerank": c.id, "questions": c.meta["thread_id"], "answers": c.meta["answer_id"]}[endpoint]


def as_read(q, endpoint: str, gen):
    """The query the Arabic ranker should see for ``body_of(q, endpoint)``, written out here from the texts sent
    (not by the service's code): a candidate question as subject and body join, a comment after its thread's
    question."""
    from indexing.models import question_text
    from ranking.candidates import Candidate, Query
    text = {"rerank": lambda c: c.text, "questions": lambda c: question_text("", c.meta["question"]),
            "answers": lambda c: f"{question_text('', c.meta['question'])}\n{c.meta['answer']}"}[endpoint]
    return Query(q.id, q.text, tuple(Candidate(c.id, text(c)) for c in q.candidates), {"generation": gen})


def served(base: str, queries, endpoint: str) -> tuple[list[list[float]], list[str], list[float]]:
    scores, rankers, latency = [], [], []
    for q in queries:
        t0 = time.perf_counter()
        status, out = post_json(base + ENDPOINTS[endpoint], body_of(q, endpoint))
        latency.append(time.perf_counter() - t0)
        if status != 200:
            raise SystemExit(f"POST {ENDPOINTS[endpoint]} answered {status} for question {q.id}: {out}")
        by_id = {r["id"]: r["score"] for r in out["results"]}
        scores.append([by_id[sent_id(c, endpoint)] for c in q.candidates])
        rankers.append(out["reranker"])
    return scores, rankers, latency


def detection_cost(settings, arabic_queries) -> dict:
    """What deciding the language adds to every POST /rerank, English ones included: ``is_arabic`` timed in process
    over each test-A thread (English), each dev-D question, and the largest request the defaults accept
    ($CQA_MAX_CANDIDATES candidates of $CQA_MAX_TEXT_CHARS characters)."""
    from ranking.arabic import is_arabic
    from ranking.candidates import Candidate, Query
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for

    def each_ms(queries) -> list[float]:
        out = []
        for q in queries:
            t0 = time.perf_counter()
            is_arabic(q)
            out.append(time.perf_counter() - t0)
        return out
    english = queries_for(BENCHMARKS["semeval2016-test-A"].paths(settings.semeval_dir)[0], "A")
    text = ("How do I renew my residence permit in Doha? " * 500)[: settings.max_text_chars]
    largest = Query("largest", text, tuple(Candidate(str(i), text) for i in range(settings.max_candidates)))
    return {"english_test_A_p50_ms": p50_ms(each_ms(english), 3), "arabic_dev_D_p50_ms": p50_ms(each_ms(arabic_queries), 3),
            "largest_request_ms": p50_ms(each_ms([largest] * 3), 1),
            "taken_as_arabic_of_english": sum(is_arabic(q) for q in english), "english_threads": len(english)}


def p50_ms(seconds: list[float], digits: int = 1) -> float:
    s = sorted(seconds)
    return round(1000 * s[len(s) // 2], digits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="a data folder with a live generation")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all 250)")
    ap.add_argument("--endpoints", default=",".join(ENDPOINTS),
                    help=f"comma-separated, among {', '.join(ENDPOINTS)} (default: all)")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.searcher import load_current
    from ranking.arabic import ARABIC, ForumStatistics, d_queries, is_arabic
    from ranking.candidate_rankers import LexicalRanker
    from ranking.candidates import Query
    from ranking.evaluation.benchmarks import BENCHMARKS
    from ranking.evaluation.measures import paired_randomization
    from ranking.evaluation.runner import align_to_gold
    from ranking.evaluation.scorer import Line, per_question_ap, read_lines, score
    from ranking.rankers import service_reranker

    settings = Settings(data_dir=args.data_dir)
    xml, gold_path = BENCHMARKS["semeval2016-dev-D"].paths(settings.semeval_dir)
    queries, gold = d_queries(xml), read_lines(gold_path)
    if args.limit:
        queries = queries[: args.limit]
        kept = {q.id for q in queries}
        gold = [g for g in gold if g.qid in kept]

    def official(scores) -> tuple[float, dict[str, float]]:
        lines = [Line(q.id, c.id, float(v), False) for q, row in zip(queries, scores) for c, v in zip(q.candidates, row)]
        pred = align_to_gold(lines, gold)
        return round(score(gold, pred).MAP, 4), per_question_ap(gold, pred)

    out: dict = {"bench": "arabic_rerank", "benchmark": "semeval2016-dev-D", "questions": len(queries),
                 "pairs": sum(len(q.candidates) for q in queries),
                 "taken_as_arabic": sum(is_arabic(q) for q in queries)}
    gen = load_current(settings.index_root, settings.device)  # what the servers serve; the reference reads it too
    out["generation"] = gen.name
    t0 = time.perf_counter()  # what going live on a generation adds, once (Service.load_generation)
    out["forum_arabic_documents"] = ForumStatistics.of(gen).n_docs
    out["forum_statistics_seconds"] = round(time.perf_counter() - t0, 3)
    out["forum_terms"] = len(gen.terms.vocab)
    out["detection"] = detection_cost(settings, queries)
    out["given_order_MAP"] = official([[-float(i) for i in range(len(q.candidates))] for q in queries])[0]
    out["bm25_arabic_file_statistics_MAP"] = official(LexicalRanker("bm25", "bm25", ARABIC).score(queries))[0]
    # the same BM25 with each request's candidates as its statistics (bm25-arabic-candidates), in process
    out["bm25_arabic_candidates_statistics_MAP"], candidates_ap = official(
        LexicalRanker("bm25", "bm25", ARABIC, per_query=True).score(queries))
    out["lm_arabic_candidates_statistics_MAP"] = official(  # the other candidate for the Arabic ranker (lm-arabic)
        LexicalRanker("lm", "lm", ARABIC, per_query=True).score(queries))[0]
    endpoints = args.endpoints.split(",")
    if unknown := set(endpoints) - set(ENDPOINTS):
        raise SystemExit(f"--endpoints: unknown {sorted(unknown)}; choose among {sorted(ENDPOINTS)}")
    ap_of: dict = {e: {} for e in endpoints}
    out["endpoints"] = {e: {} for e in endpoints}
    for label, env in (("off", {"CQA_ARABIC_RANKER": ""}), ("on", {})):
        with server(args.data_dir, env) as (base, ready):
            runs = {e: served(base, queries, e) for e in endpoints}
        for e, (scores, names, latency) in runs.items():
            name = names[0]
            r = {"reranker": name, "rankers_answered": sorted(set(names))}
            r["served_MAP"], ap_of[e][label] = official(scores)
            arabic = name == ready["arabic_reranker"]
            if arabic or e == "rerank":  # the served preset, set up as the service sets it up
                reference = service_reranker(settings, {}, name)
                ref_scores = [reference.score([as_read(q, e, gen) if arabic
                                               else Query(q.id, q.text, q.candidates, {"generation": gen})])[0]
                              for q in queries]
                r.update({"in_process_MAP": official(ref_scores)[0],
                          "threads_ordered_differently": sum(
                              sorted(range(len(a)), key=lambda i: -a[i]) != sorted(range(len(b)), key=lambda i: -b[i])
                              for a, b in zip(scores, ref_scores)),
                          "largest_score_difference": max(abs(x - y) for a, b in zip(scores, ref_scores)
                                                          for x, y in zip(a, b))})
            r.update({"p50_ms": p50_ms(latency),
                      "p95_ms": round(1000 * sorted(latency)[int(0.95 * (len(latency) - 1))], 1)})
            out["endpoints"][e][label] = r
            print(json.dumps({e: {label: r}}), file=sys.stderr, flush=True)
    for e in endpoints:
        keys = sorted(ap_of[e]["on"])
        res = out["endpoints"][e]
        res["p_on_vs_off"] = round(paired_randomization([ap_of[e]["on"][k] for k in keys],
                                                        [ap_of[e]["off"][k] for k in keys]), 4)
        res["p50_ratio_off_over_on"] = round(res["off"]["p50_ms"] / res["on"]["p50_ms"], 1)
    if "rerank" in endpoints:
        keys = sorted(ap_of["rerank"]["on"])
        out["endpoints"]["rerank"]["p_on_vs_candidates_statistics"] = round(paired_randomization(
            [ap_of["rerank"]["on"][k] for k in keys], [candidates_ap[k] for k in keys]), 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
