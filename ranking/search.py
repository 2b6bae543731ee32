"""Search as the service answers it: the retriever's hits turned into result records."""
from __future__ import annotations

from indexing.searcher import Generation

from .retriever import Filters, Retriever


def search_generation(gen: Generation, query: str, k: int, target: str = "answers",
                      filters: Filters | None = None, expansion: str | None = None,
                      retriever: Retriever | None = None) -> dict:
    retriever = retriever or Retriever(gen, default_config(gen))
    r = retriever.search(query, k, target, filters, expansion)
    results = []
    for rank, h in enumerate(r.hits, 1):
        if h.doc_id.startswith("t:"):
            tid = h.doc_id[2:]
            row = gen.row[f"q:{tid}"]
            rec = {"id": tid, "kind": "thread", "thread_id": tid, "text": gen.docs.texts[row]}
        else:
            row = gen.row[h.doc_id]
            rec = {"id": h.doc_id.split(":", 1)[1], "kind": gen.docs.kinds[row],
                   "thread_id": gen.docs.thread_ids[row], "text": gen.docs.texts[row]}
        qrow = gen.row.get(f"q:{rec['thread_id']}")
        rec["thread_title"] = gen.docs.texts[qrow].split("\n", 1)[0][:200] if qrow is not None else None
        rec.update(score=h.score, rank=rank,
                   stages={n: s.get(h.doc_id) for n, s in r.stages.items()} if not h.doc_id.startswith("t:") else {})
        results.append(rec)
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
