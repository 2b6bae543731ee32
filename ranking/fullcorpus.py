"""The full-corpus benchmarks: every 2016 thread is indexed and each original question of 2016
test (or dev, for tuning) is searched against all of it. Relevant: its related questions judged
PerfectMatch or Relevant and the comments judged Good for it; anything unjudged counts as not relevant."""
from __future__ import annotations

import json
import logging
import random
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from indexing.catalog import CORPUS_FILES, split_file
from indexing.documents import answer_doc_id, question_doc_id
from indexing.ingest import ingest_paths
from indexing.loaders import file_digest, load_semeval
from indexing.reindex import reindex, staleness
from indexing.searcher import Generation, load_current, manifest_of, stored_answer_encoder
from indexing.store import ThreadStore
from indexing.text import INDEX_ANALYZER

from .evaluation.measures import ir_figures, write_trec_qrels, write_trec_run
from .evaluation.runner import finish_report, report_folder
from .retriever import Retriever, RetrieverConfig
from .settings import RankingSettings

log = logging.getLogger(__name__)

DEPTH = 100


def qrels_and_queries(settings: RankingSettings, split: str = "test") -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    doc = load_semeval(settings.semeval_dir / split_file(split), strict=True)
    qrels: dict[str, dict[str, int]] = {}
    for t in doc.threads:
        judged = qrels.setdefault(t.meta["orgq_id"], {})
        judged[question_doc_id(t.id)] = int(t.meta.get("relevance2orgq") in ("PerfectMatch", "Relevant"))
        for a in t.answers:
            judged[answer_doc_id(a.id)] = int(a.meta.get("relevance2orgq") == "Good")
    return qrels, {q.id: q.text for q in doc.org_questions.values()}


def corpus_settings(settings: RankingSettings) -> RankingSettings:
    """Its own store and indexes under the data folder."""
    return settings.model_copy(update={"data_dir": settings.data_dir / "benchmarks" / "fullcorpus-2016"})


def ensure_corpus(settings: RankingSettings, progress: bool = True) -> Generation:
    cs = corpus_settings(settings)
    cs.data_dir.mkdir(parents=True, exist_ok=True)
    files = [settings.semeval_dir / f for f in CORPUS_FILES]
    digests = json.dumps({f.name: file_digest(f) for f in files}, sort_keys=True)
    ingested = cs.data_dir / "corpus-files.json"
    with ThreadStore(cs.store_path) as store:
        # Part 1 of train comes as two files sharing thread ids (questions only, then with comments), so
        # ingesting again rewrites those threads: ingest only when the files changed.
        if not ingested.exists() or ingested.read_text(encoding="utf-8") != digests:
            ingest_paths(store, files, progress=progress)
            ingested.write_text(digests, encoding="utf-8")
        fingerprint = store.fingerprint()
    m = manifest_of(cs.index_root)
    # stale as a service's refresh sees it (the store moved, documents an earlier release made, a translation table
    # behind), or built otherwise than the benchmarks measure
    if (staleness(cs, fingerprint=fingerprint) is not None or not m["indexes"].get("dense")
            or "translation" not in m.get("build", {})
            or m.get("model") != cs.encoder.id  # the manifest's "model" is its encoder's id
            or stored_answer_encoder(m) != cs.answer_encoder_id
            or m.get("analysis") != INDEX_ANALYZER.fingerprint()):  # built by an older analyzer: what a build reads now
        reindex(cs, progress=progress)
    return load_current(cs.index_root, settings.device)


@dataclass(frozen=True)
class UnansweredCopy:
    """A copy of the full corpus in which a seeded share of the answered threads lost their comments (a forum whose
    new questions have no comment yet), reindexed: what ``unanswered_copy`` made."""
    settings: RankingSettings  # the copy's data folder
    threads: int
    stripped: int  # threads whose comments were removed
    without_comments_before: int
    without_comments: int
    reindex_seconds: float


def unanswered_copy(settings: RankingSettings, folder: Path, share: float, seed: int,
                    progress: bool = True) -> UnansweredCopy:
    """Copy the full corpus (built if missing) into ``folder``, remove the comments of each answered thread with
    probability ``share`` (``random.Random(seed)``, judged and unjudged threads alike), and reindex the copy. The
    corpus itself is not changed. bench/unanswered.py measures on it, scripts/tune_missing.py tunes on it."""
    ensure_corpus(settings, progress)
    shutil.copytree(corpus_settings(settings).data_dir, folder)
    copy = settings.model_copy(update={"data_dir": folder})
    with ThreadStore(copy.store_path) as store:
        threads = list(store.iter_threads())
        rng = random.Random(seed)
        stripped = [t.model_copy(update={"answers": []}) for t in threads if t.answers and rng.random() < share]
        store.upsert(stripped)
        without = sum(1 for t in store.iter_threads() if not t.answers)
    t0 = time.perf_counter()
    reindex(copy, progress=progress)
    return UnansweredCopy(copy, len(threads), len(stripped), sum(1 for t in threads if not t.answers), without,
                          round(time.perf_counter() - t0, 1))


def search_all(gen: Generation, config: RetrieverConfig, queries: dict[str, str], progress: bool = False,
               label: str = "") -> dict[str, dict[str, float]]:
    retriever = Retriever(gen, config)
    run = {}
    for qid, text in tqdm(queries.items(), desc=f"search {label}", disable=not progress):
        run[qid] = {h.doc_id: h.score for h in retriever.search(text, DEPTH, target="all").hits}
    return run


def figures_of(qrels, run, recall_at: int = 100) -> dict[str, float]:
    fig = ir_figures(qrels, run, cutoffs=(recall_at,))
    return {"MAP@10": fig["trec_AP@10"], "nDCG@10": fig["nDCG@10"], f"Recall@{recall_at}": fig[f"R@{recall_at}"],
            "P@1": fig["P@1"], "MRR": 100 * fig["RR"]}


def run_fullcorpus(settings: RankingSettings, ranker: str = "first-stage", split: str = "test", progress: bool = True) -> dict:
    """``ranker``: a retriever preset (ranking/presets.py, kind "retriever")."""
    from .presets import retriever_config
    config = retriever_config(ranker)
    gen = ensure_corpus(settings, progress)
    qrels, queries = qrels_and_queries(settings, split)
    t0 = time.perf_counter()
    run = search_all(gen, replace(config, depth=DEPTH), queries, progress, ranker)
    seconds = time.perf_counter() - t0
    figures = figures_of(qrels, run)
    name = f"semeval2016-{split}-fullcorpus"
    out, stamp = report_folder(settings.reports_dir, name, ranker)
    write_trec_run(run, out / "run.trec", ranker)
    write_trec_qrels(qrels, out / "qrels.trec")
    report = {"benchmark": name, "ranker": ranker, "config": config.__dict__, "generation": gen.name,
              "created_at": stamp.isoformat(), "questions": len(queries), "documents": gen.manifest["documents"],
              "seconds": round(seconds, 2), "figures": figures, "MAP": figures["MAP@10"], "MRR": figures["MRR"],
              "P@1": figures["P@1"], "folder": str(out)}
    finish_report(out, report, xlabel="MAP@10 over the whole 2016 corpus")
    return report
