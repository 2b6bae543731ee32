"""The full-corpus benchmark: every 2016 thread is indexed and each 2016 test original question is
searched against all of it. Relevant: its related questions judged PerfectMatch or Relevant and
the comments judged Good for it; anything unjudged counts as not relevant."""
from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timezone

from tqdm import tqdm

from indexing.config import Settings
from indexing.documents import answer_doc_id, question_doc_id
from indexing.ingest import ingest_paths
from indexing.loaders import load_semeval
from indexing.reindex import reindex
from indexing.searcher import load_current
from indexing.store import ThreadStore

from .evaluation.measures import ir_figures, write_trec_qrels, write_trec_run
from .fusion import FUSIONS

log = logging.getLogger(__name__)

CORPUS_FILES = ("train/SemEval2016-Task3-CQA-QL-train-part2.xml",
                "train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskB.xml",
                "train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskA.xml",
                "dev/SemEval2016-Task3-CQA-QL-dev.xml", "test/SemEval2016-Task3-CQA-QL-test.xml")
TEST_FILE = "test/SemEval2016-Task3-CQA-QL-test.xml"
DEPTH = 100
SINGLE = ("bm25", "lm", "dense")
FUSED = {"fusion": ("rrf", SINGLE), "fusion-rrf": ("rrf", SINGLE), "fusion-combsum": ("combsum", SINGLE),
         "fusion-combmnz": ("combmnz", SINGLE), "fusion-lexical": ("rrf", ("bm25", "lm"))}
RANKERS = SINGLE + tuple(FUSED)


def qrels_and_queries(settings: Settings) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    doc = load_semeval(settings.semeval_dir / TEST_FILE, strict=True)
    qrels: dict[str, dict[str, int]] = {}
    for t in doc.threads:
        oq = t.meta["orgq_id"]
        judged = qrels.setdefault(oq, {})
        judged[question_doc_id(t.id)] = int(t.meta.get("relevance2orgq") in ("PerfectMatch", "Relevant"))
        for a in t.answers:
            judged[answer_doc_id(a.id)] = int(a.meta.get("relevance2orgq") == "Good")
    return qrels, {q.id: q.text for q in doc.org_questions.values()}


def corpus_settings(settings: Settings) -> Settings:
    """Its own store and indexes under the data folder."""
    return settings.model_copy(update={"data_dir": settings.data_dir / "benchmarks" / "fullcorpus-2016"})


def ensure_corpus(settings: Settings, progress: bool = True) -> Settings:
    cs = corpus_settings(settings)
    cs.data_dir.mkdir(parents=True, exist_ok=True)
    with ThreadStore(cs.store_path) as store:
        ingest_paths(store, [settings.semeval_dir / f for f in CORPUS_FILES], progress=progress)
        fingerprint = store.fingerprint()
    from indexing.searcher import manifest_of
    m = manifest_of(cs.index_root)
    if m is None or m.get("store_fingerprint") != fingerprint or not m["indexes"].get("dense"):
        reindex(cs, progress=progress)
    return cs


def run_fullcorpus(settings: Settings, ranker: str = "fusion", progress: bool = True) -> dict:
    if ranker not in RANKERS:
        raise ValueError(f"unknown full-corpus ranker {ranker!r}; known: {', '.join(RANKERS)}")
    cs = ensure_corpus(settings, progress)
    gen = load_current(cs.index_root, settings.device)
    qrels, queries = qrels_and_queries(settings)
    t0 = time.perf_counter()
    run: dict[str, dict[str, float]] = {}
    for qid, text in tqdm(queries.items(), desc=f"search {ranker}", disable=not progress):
        if ranker in SINGLE:
            hits = gen.sources[ranker].search(text, DEPTH)
        else:
            method, parts = FUSED[ranker]
            hits = FUSIONS[method]([gen.sources[s].search(text, DEPTH) for s in parts])[:DEPTH]
        run[qid] = {h.doc_id: h.score for h in hits}
    seconds = time.perf_counter() - t0
    fig = ir_figures(qrels, run)
    figures = {"MAP@10": fig["trec_AP@10"], "nDCG@10": fig["nDCG@10"], "Recall@100": fig["R@100"],
               "P@1": fig["P@1"], "MRR": 100 * fig["RR"]}
    stamp = datetime.now(timezone.utc)
    out = settings.reports_dir / "semeval2016-test-fullcorpus" / f"{stamp:%Y%m%dT%H%M%S%fZ}-{ranker}"
    out.mkdir(parents=True, exist_ok=True)
    write_trec_run(run, out / "run.trec", ranker)
    write_trec_qrels(qrels, out / "qrels.trec")
    report = {"benchmark": "semeval2016-test-fullcorpus", "ranker": ranker, "generation": gen.name,
              "created_at": stamp.isoformat(), "questions": len(queries), "documents": gen.manifest["documents"],
              "seconds": round(seconds, 2), "figures": figures, "MAP": figures["MAP@10"], "MRR": figures["MRR"],
              "P@1": figures["P@1"], "folder": str(out)}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(
        f"# semeval2016-test-fullcorpus: {ranker}\n\n{report['created_at']} · {len(queries)} questions · "
        f"{gen.manifest['documents']['total']} documents\n\n| measure | value |\n|---|---|\n"
        + "".join(f"| {k} | {v:.4f} |\n" for k, v in figures.items()))
    _chart(out / "chart.png", settings.reports_dir / "semeval2016-test-fullcorpus")
    latest = settings.reports_dir / "semeval2016-test-fullcorpus" / "latest.json"
    latest.write_text(json.dumps(report, indent=2))
    return report


def _chart(path, bench_dir) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    systems = {}
    for rj in sorted(bench_dir.glob("*/report.json")):
        r = json.loads(rj.read_text())
        systems[r["ranker"]] = r["figures"]
    names = sorted(systems, key=lambda n: systems[n]["MAP@10"])
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(names) + 1.2))
    ax.barh(names, [systems[n]["MAP@10"] for n in names], color="#3b6ea5")
    ax.set_xlim(0, 1)
    ax.set_xlabel("MAP@10 over the whole 2016 corpus")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
