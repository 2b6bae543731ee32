"""End-to-end benchmarks of POST /search: the full 2016 corpus indexed (as ``make serve`` indexes it), each
original question of 2016 dev or test searched through the same ``SearchPipeline`` the service builds,
with the same rerankers and settings. Relevant, relative to that original question: the comments judged
Good for it (target answers) or its related questions judged PerfectMatch or Relevant (target questions, and
target threads: the thread of such a question); questions with nothing relevant are left out."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from indexing.catalog import SEARCH_QUERY_FILES
from indexing.loaders import load_semeval
from indexing.store import ThreadStore

from .evaluation.measures import (
    map_interval,
    paired_ap,
    per_query,
    write_trec_qrels,
    write_trec_run,
)
from .evaluation.runner import finish_report, report_folder
from .fullcorpus import corpus_settings, ensure_corpus, figures_of
from .pipeline import SearchPipeline, SearchRequest, build_pipeline
from .settings import MAX_RESULTS, RankingSettings

# Results asked for: MAP@10, nDCG@10 and P@1 read the first 10, Recall@100 all of them. A search with any smaller k
# gets the first k of these (``SearchPipeline.fetch_depth``), so the figures @10 are those of POST /search's k = 10.
K = MAX_RESULTS


@dataclass(frozen=True)
class SearchRun:
    """One configuration of the pipeline over a benchmark's questions."""
    label: str
    rerank: bool = True
    collapse: bool = True
    expansion: str | None = None  # a request's ``expand`` (None: the retriever's tuned setting)


FIRST_STAGE = SearchRun("first-stage", rerank=False)
RERANKED = SearchRun("reranked")
COMPARE_RUNS = {r.label: r for r in (FIRST_STAGE, SearchRun("no-collapse", collapse=False),
                                     SearchRun("first-stage-no-collapse", rerank=False, collapse=False))}


Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


def qrels_for(settings: RankingSettings, split: str, target: str) -> tuple[Qrels, dict[str, tuple[str, str]]]:
    """Judgements per original question (only those with something relevant) and each question's
    (subject, body)."""
    docs = [load_semeval(settings.semeval_dir / f, strict=True) for f in SEARCH_QUERY_FILES[split]]
    qrels: dict[str, dict[str, int]] = {}
    for t in (t for doc in docs for t in doc.threads):
        judged = qrels.setdefault(t.meta["orgq_id"], {})
        if target in ("questions", "threads"):  # a related question's id is its thread's
            judged[t.id] = int(t.meta.get("relevance2orgq") in ("PerfectMatch", "Relevant"))
        else:
            for a in t.answers:
                judged[a.id] = int(a.meta.get("relevance2orgq") == "Good")
    qrels = {q: j for q, j in qrels.items() if any(j.values())}
    return qrels, {q.id: (q.subject, q.body) for doc in docs for q in doc.org_questions.values() if q.id in qrels}


def search_run(pipeline: SearchPipeline, questions: dict[str, tuple[str, str]], target: str, run: SearchRun,
               qrels: Qrels, progress: bool = False) -> tuple[Run, list[float]]:
    """The ranked ids of each question as the pipeline returns them (scores from ranks) and each search's ms.

    A collapsed result shows one text for several identical copies (the corpus holds duplicated threads,
    each judged only under its own original question), so it is scored by the copy judged relevant, if any."""
    out, ms = {}, []
    for qid, (subject, body) in tqdm(questions.items(), desc=f"search {target} {run.label}", disable=not progress):
        t0 = time.perf_counter()
        resp = pipeline.search(SearchRequest.asking(subject, body, k=K, target=target, rerank=run.rerank,
                                                    collapse=run.collapse, expansion=run.expansion))
        ms.append(1000 * (time.perf_counter() - t0))
        out[qid] = as_run(resp.results, qrels.get(qid, {}), K)
    return out, ms


def as_run(results, judged: dict[str, int], k: int) -> dict[str, float]:
    """A response's first ``k`` results as a run (scores from ranks), a folded result by its copy judged relevant,
    if any (``scored_id``)."""
    return {scored_id([r.id, *r.duplicates], judged): float(k + 1 - r.rank) for r in results[:k]}


def scored_id(copies: list[str], judged: dict[str, int]) -> str:
    """The id a collapsed result is scored by: the first of its copies judged relevant, else the one shown."""
    return next((d for d in copies if judged.get(d)), copies[0])


def latency(ms: list[float]) -> dict[str, float]:
    """p50 and p95 of per-search milliseconds, rounded as every report gives them."""
    return {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)}


def run_search_benchmark(settings: RankingSettings, split: str, target: str, compare: SearchRun | None = FIRST_STAGE,
                         run: SearchRun = RERANKED, progress: bool = True,
                         pipeline: SearchPipeline | None = None) -> dict:
    """Search every question of the split through the serving pipeline; with ``compare``, also run that
    configuration and test the per-question AP@10 difference (paired randomisation and t-test)."""
    name = f"semeval2016-{split}-search-{target}"
    gen = ensure_corpus(settings, progress)
    qrels, questions = qrels_for(settings, split, target)
    with ThreadStore(corpus_settings(settings).store_path) as store:
        pipe = pipeline or build_pipeline(settings, gen, store)
        t0 = time.perf_counter()
        ranked, ms = search_run(pipe, questions, target, run, qrels, progress)
        seconds = time.perf_counter() - t0
        other = search_run(pipe, questions, target, compare, qrels, progress) if compare else None
    reranker = pipe.reranker_of(target)
    ranker = reranker.name if run.rerank and reranker is not None else run.label
    figures = figures_of(qrels, ranked)
    out, stamp = report_folder(settings.reports_dir, name, ranker)
    write_trec_run(ranked, out / "run.trec", ranker)
    write_trec_qrels(qrels, out / "qrels.trec")
    ap = per_query(qrels, ranked, "AP@10")
    report = {"benchmark": name, "ranker": ranker, "run": run.__dict__, "generation": gen.name,
              "created_at": stamp.isoformat(), "questions": len(questions), "documents": gen.manifest["documents"],
              "k": K, "rerank_depth": pipe.depth, "seconds": round(seconds, 2),
              "latency_ms": latency(ms),
              "figures": figures, "MAP": figures["MAP@10"], "MRR": figures["MRR"], "P@1": figures["P@1"],
              "MAP_interval_95": map_interval(ap), "per_question_ap": ap, "folder": str(out)}
    if other is not None:
        run2, ms2 = other
        ap2 = per_query(qrels, run2, "AP@10")
        fig2 = figures_of(qrels, run2)  # both runs have every question of the qrels (0 where nothing was found)
        report["compare"] = {"run": compare.__dict__, "figures": fig2, "MAP": fig2["MAP@10"],
                             "latency_ms": latency(ms2), **paired_ap(ap, ap2)}
    finish_report(out, report, xlabel="MAP@10 of /search over the whole 2016 corpus")
    return report
