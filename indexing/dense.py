"""The dense index: normalised sentence embeddings in FAISS (inner product = cosine).

Exact (flat) up to a size threshold, HNSW or IVF above it, or as configured.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .hits import Hit

FORMAT_VERSION = 1
KINDS = ("flat", "hnsw", "ivf")


def choose_kind(n: int, configured: str = "auto", exact_max: int = 200_000) -> str:
    if configured != "auto":
        if configured not in KINDS:
            raise ValueError(f"unknown dense index kind {configured!r}; known: auto, {', '.join(KINDS)}")
        return configured
    return "flat" if n <= exact_max else "hnsw"


class DenseIndex:
    kind = "dense"

    def __init__(self, index, params: dict):
        self.index, self.params = index, params

    @classmethod
    def build(cls, vectors: np.ndarray, kind: str = "flat", model: str = "all-MiniLM-L6-v2",
              hnsw_m: int = 32, ef_search: int = 128) -> "DenseIndex":
        import faiss
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n, dim = vectors.shape
        if kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = 80
            index.hnsw.efSearch = ef_search
        elif kind == "ivf":
            nlist = max(1, int(4 * math.sqrt(max(n, 1))))
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(vectors[np.random.default_rng(0).permutation(n)[: max(nlist * 40, 1)]])
            index.nprobe = max(1, nlist // 16)
        else:
            raise ValueError(f"unknown dense index kind {kind!r}")
        if n:
            index.add(vectors)
        return cls(index, {"index": kind, "model": model, "dim": dim, "hnsw_m": hnsw_m, "ef_search": ef_search})

    @property
    def n_docs(self) -> int:
        return self.index.ntotal

    def search_vectors(self, q: np.ndarray, k: int, ids: list[str], allowed=None) -> list[Hit]:
        """Top k by inner product; ``allowed`` (sorted row numbers) restricts the search inside FAISS."""
        import faiss
        k = min(k, self.n_docs)
        if k <= 0:
            return []
        q = np.ascontiguousarray(q.reshape(1, -1), dtype=np.float32)
        params = None
        if allowed is not None:
            if len(allowed) == 0:
                return []
            sel = faiss.IDSelectorBatch(np.asarray(allowed, dtype=np.int64))
            # each index kind takes its own parameter type (a plain one makes IVF refuse the search)
            if isinstance(self.index, faiss.IndexIVF):
                params = faiss.SearchParametersIVF(sel=sel, nprobe=self.index.nprobe)
            elif isinstance(self.index, faiss.IndexHNSW):
                params = faiss.SearchParametersHNSW(sel=sel, efSearch=self.index.hnsw.efSearch)
            else:
                params = faiss.SearchParameters(sel=sel)
            k = min(k, len(allowed))
        scores, rows = self.index.search(q, k, params=params)
        return [Hit(ids[int(r)], float(s)) for s, r in zip(scores[0], rows[0]) if r >= 0]

    def save(self, folder: Path) -> None:
        import faiss
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(folder / "index.faiss"))
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": self.kind, "format_version": FORMAT_VERSION, "params": self.params,
             "documents": self.n_docs}, indent=2))

    @classmethod
    def load(cls, folder: Path) -> "DenseIndex":
        import faiss
        from .generations import read_manifest
        m = read_manifest(folder, cls.kind, FORMAT_VERSION)
        index = faiss.read_index(str(folder / "index.faiss"), faiss.IO_FLAG_MMAP)
        if m["params"]["index"] == "hnsw":
            index.hnsw.efSearch = m["params"].get("ef_search", 128)
        return cls(index, m["params"])
