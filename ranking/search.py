"""Search as the service answers it: the retriever's hits turned into result records."""
from __future__ import annotations

from indexing.searcher import Generation

from .retriever import Filters, Retriever


def search_generation(retriever: Retriever, query: str, k: int, target: str = "answers",
                      filters: Filters | None = None, expansion: str | None = None) -> dict:
    """The retriever's hits as result records (id, kind, thread, text, score, rank, per-stage scores)."""
    gen = retriever.gen
    r = retriever.search(query, k, target, filters, expansion)
    results = []
    for rank, h in enumerate(r.hits, 1):
        is_thread = h.doc_id.startswith("t:")
        tid = h.doc_id[2:] if is_thread else gen.docs.thread_ids[gen.row[h.doc_id]]
        qrow = gen.row.get(f"q:{tid}")
        row = qrow if is_thread else gen.row[h.doc_id]
        results.append({
            "id": h.doc_id.split(":", 1)[1], "kind": "thread" if is_thread else gen.docs.kinds[row],
            "thread_id": tid, "text": gen.docs.texts[row],
            "thread_title": gen.docs.texts[qrow].split("\n", 1)[0][:200] if qrow is not None else None,
            "score": h.score, "rank": rank,
            "stages": {} if is_thread else {n: s.get(h.doc_id) for n, s in r.stages.items()},
        })
    return {"results": results, "timings_ms": r.timings_ms, "generation": gen.name,
            "model": gen.manifest.get("model"),
            "expansion": {"method": r.expansion.method, "terms": r.expansion.terms} if r.expansion else None}


def default_config(gen: Generation):
    from .config import load_retriever_defaults
    cfg = load_retriever_defaults()
    if "dense" in cfg.sources and gen.dense is None:
        from dataclasses import replace
        cfg = replace(cfg, sources=tuple(s for s in cfg.sources if s != "dense"))
    return cfg
