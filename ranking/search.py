"""First-stage search over a loaded generation: every source, fused with RRF, filtered by target."""
from __future__ import annotations

import time

import numpy as np

from indexing.documents import ANSWER, QUESTION
from indexing.searcher import Generation

from .fusion import rrf

DEPTH = 100


def search_generation(gen: Generation, query: str, k: int, target: str = "answers") -> dict:
    kind = {"answers": ANSWER, "questions": QUESTION}[target]
    allowed = getattr(gen, f"_rows_{kind}", None)
    if allowed is None:
        allowed = np.array([i for i, kd in enumerate(gen.docs.kinds) if kd == kind], dtype=np.int64)
        setattr(gen, f"_rows_{kind}", allowed)
    timings, runs = {}, {}
    for name, src in gen.sources.items():
        t0 = time.perf_counter()
        runs[name] = src.search(query, DEPTH, allowed)
        timings[name] = round(1000 * (time.perf_counter() - t0), 2)
    t0 = time.perf_counter()
    fused = rrf(list(runs.values()))[:k]
    timings["fusion"] = round(1000 * (time.perf_counter() - t0), 2)
    per_source = {name: {h.doc_id: h.score for h in hits} for name, hits in runs.items()}
    results = []
    for rank, h in enumerate(fused, 1):
        row = gen.row[h.doc_id]
        results.append({"id": h.doc_id.split(":", 1)[1], "kind": gen.docs.kinds[row],
                        "thread_id": gen.docs.thread_ids[row], "text": gen.docs.texts[row],
                        "score": h.score, "rank": rank,
                        "stages": {n: s.get(h.doc_id) for n, s in per_source.items()}})
    return {"results": results, "timings_ms": timings, "generation": gen.name,
            "model": gen.manifest.get("model"), "ranker": "fusion-rrf"}
