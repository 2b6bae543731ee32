"""Retrieval latency per stage (filter, expansion, bm25, lm, dense, fusion) of the default retriever
on the 2016 SemEval corpus, and on that corpus replicated to ~100k documents (same texts under new
ids, so the embedding cache serves them). Queries: the 70 test original questions. JSON object last.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.generations import current_generation  # noqa: E402
from indexing.models import Answer, Thread  # noqa: E402
from indexing.reindex import reindex  # noqa: E402
from indexing.searcher import load_current  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402
from ranking.config import load_retriever_defaults  # noqa: E402
from ranking.fullcorpus import corpus_settings, ensure_corpus, qrels_and_queries  # noqa: E402
from ranking.retriever import Retriever  # noqa: E402


def replicate(src: Settings, dst: Settings, copies: int) -> None:
    with ThreadStore(src.store_path) as s, ThreadStore(dst.store_path) as d:
        if d.counts()["threads"]:
            return
        threads = list(s.iter_threads())
        for c in range(copies):
            d.upsert(Thread(**{**t.model_dump(), "id": f"{t.id}~{c}",
                               "answers": [Answer(**{**a.model_dump(), "id": f"{a.id}~{c}"}) for a in t.answers]})
                     for t in threads)


def measure(gen, queries: list[str], expansion: str | None = None) -> dict:
    r = Retriever(gen, load_retriever_defaults())
    r.search(queries[0], 10, "answers")  # warm-up (loads the encoder)
    stages: dict[str, list[float]] = {}
    totals = []
    for q in queries:
        t0 = time.perf_counter()
        res = r.search(q, 10, "answers", expansion=expansion)
        totals.append(1000 * (time.perf_counter() - t0))
        for k, v in res.timings_ms.items():
            stages.setdefault(k, []).append(v)
    out = {k: {"p50_ms": round(float(np.percentile(v, 50)), 3), "p95_ms": round(float(np.percentile(v, 95)), 3)}
           for k, v in stages.items()}
    out["total"] = {"p50_ms": round(float(np.percentile(totals, 50)), 2),
                    "p95_ms": round(float(np.percentile(totals, 95)), 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", type=Path, default=Path("var"))
    ap.add_argument("--copies", type=int, default=5, help="replicas of the corpus for the large run")
    args = ap.parse_args()
    settings = Settings(data_dir=args.data_dir)
    gen = ensure_corpus(settings, progress=False)
    _, queries = qrels_and_queries(settings, "test")
    qs = list(queries.values())
    result = {"semeval": {"documents": gen.manifest["documents"]["total"], "default": measure(gen, qs),
                          "rm3": measure(gen, qs, "rm3")}}
    big = settings.model_copy(update={"data_dir": settings.data_dir / "benchmarks" / f"replicated-x{args.copies}"})
    replicate(corpus_settings(settings), big, args.copies)
    cache = big.cache_dir / "embeddings.sqlite3"
    if not cache.exists():  # same texts: seed the cache so the replicas are not embedded again
        import shutil
        big.cache_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(corpus_settings(settings).cache_dir / "embeddings.sqlite3", cache)
    if current_generation(big.index_root) is None:
        print(json.dumps({"replicated_reindex": reindex(big, progress=False)}), file=sys.stderr, flush=True)
    g2 = load_current(big.index_root)
    result["replicated"] = {"documents": g2.manifest["documents"]["total"], "default": measure(g2, qs)}
    result["machine"] = platform.machine()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
