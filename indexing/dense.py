"""The dense index: normalised sentence embeddings in FAISS (inner product = cosine).

Exact (flat) up to a size threshold, HNSW or IVF above it, or as configured.

An HNSW or IVF index takes a long time to build (HNSW: 32 s for 235k documents on 2 cores) and is cheap to add
to, so a rebuild may instead grow the live generation's index (``DenseIndex.grown``): its rows whose document is
unchanged are kept, the rest are marked removed, and the new documents' vectors are added. Such an index maps its
FAISS rows to document rows (``rows``; -1: removed, never returned); a fresh build's rows are the documents'.
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

    def __init__(self, index, params: dict, rows: np.ndarray | None = None):
        self.index, self.params = index, params
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)  # FAISS row -> document row
        self._where = self._live = None
        if self.rows is not None:
            if len(self.rows) != index.ntotal:
                raise ValueError(f"{len(self.rows)} row numbers for an index of {index.ntotal} vectors")
            live = self.rows >= 0
            self._where = np.full(int(self.rows.max(initial=-1)) + 1, -1, dtype=np.int64)  # document row -> FAISS row
            self._where[self.rows[live]] = np.flatnonzero(live)
            # the selector reads this bitmap in place: it lives as long as the index
            self._live = np.packbits(live, bitorder="little") if not live.all() else None

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
        if kind == "ivf":
            index.make_direct_map()  # so a stored vector can be given back (``vector``), as the other kinds can
        return cls(index, {"index": kind, "model": model, "dim": dim, "hnsw_m": hnsw_m, "ef_search": ef_search})

    @classmethod
    def grown(cls, live: "DenseIndex", keep: np.ndarray, added_rows: np.ndarray,
              added: np.ndarray) -> "DenseIndex":
        """``live`` (loaded writable) grown into a new generation's index: ``keep`` gives each of its FAISS rows the
        new document row it now holds (-1: removed), and ``added`` (the vectors of document rows ``added_rows``) is
        appended. FAISS's own add, as a build's, so an added vector is as findable as a built one."""
        keep = np.asarray(keep, dtype=np.int64)
        if len(keep) != live.index.ntotal:
            raise ValueError(f"{len(keep)} row numbers for an index of {live.index.ntotal} vectors")
        if len(added):
            live.index.add(np.ascontiguousarray(added, dtype=np.float32))
        return cls(live.index, dict(live.params), np.concatenate([keep, np.asarray(added_rows, dtype=np.int64)]))

    @property
    def n_docs(self) -> int:
        """How many documents it holds (rows marked removed not counted)."""
        return self.index.ntotal if self.rows is None else int((self.rows >= 0).sum())

    @property
    def removed(self) -> int:
        """FAISS rows marked removed: a grown index's cost (searched past, never returned) until the next full
        build."""
        return 0 if self.rows is None else int((self.rows < 0).sum())

    def faiss_rows(self, doc_rows) -> np.ndarray:
        """The FAISS rows holding document rows ``doc_rows`` (those it does not hold left out)."""
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        if self.rows is None:
            return doc_rows[(doc_rows >= 0) & (doc_rows < self.index.ntotal)]
        inside = doc_rows[(doc_rows >= 0) & (doc_rows < len(self._where))]
        found = self._where[inside]
        return found[found >= 0]

    def vector(self, doc_row: int) -> np.ndarray | None:
        """The stored vector of a document row; None when it holds none or its kind cannot give it back."""
        found = self.faiss_rows([doc_row])
        if len(found) == 0:
            return None
        try:
            return self.index.reconstruct(int(found[0]))
        except RuntimeError:
            return None

    def search_vectors(self, q: np.ndarray, k: int, ids: list[str], allowed=None) -> list[Hit]:
        """Top k by inner product; ``allowed`` (sorted row numbers) restricts the search inside FAISS."""
        import faiss
        k = min(k, self.n_docs)
        if k <= 0:
            return []
        q = np.ascontiguousarray(q.reshape(1, -1), dtype=np.float32)
        params, sel = None, None
        if allowed is not None:
            allowed = self.faiss_rows(allowed)
            if len(allowed) == 0:
                return []
            sel = faiss.IDSelectorBatch(allowed)
            k = min(k, len(allowed))
        elif self._live is not None:
            sel = faiss.IDSelectorBitmap(len(self.rows), faiss.swig_ptr(self._live))
        if sel is not None:
            # each index kind takes its own parameter type (a plain one makes IVF refuse the search)
            if isinstance(self.index, faiss.IndexIVF):
                params = faiss.SearchParametersIVF(sel=sel, nprobe=self.index.nprobe)
            elif isinstance(self.index, faiss.IndexHNSW):
                params = faiss.SearchParametersHNSW(sel=sel, efSearch=self.index.hnsw.efSearch)
            else:
                params = faiss.SearchParameters(sel=sel)
        scores, found = self.index.search(q, k, params=params)
        found = found[0] if self.rows is None else np.where(found[0] >= 0, self.rows[np.maximum(found[0], 0)], -1)
        return [Hit(ids[int(r)], float(s)) for s, r in zip(scores[0], found) if r >= 0]

    def save(self, folder: Path) -> None:
        import faiss
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(folder / "index.faiss"))
        if self.rows is not None:
            np.save(folder / "rows.npy", self.rows)
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": self.kind, "format_version": FORMAT_VERSION, "params": self.params,
             "documents": self.n_docs, "removed_rows": self.removed}, indent=2))

    @classmethod
    def load(cls, folder: Path, writable: bool = False) -> "DenseIndex":
        """The index saved in ``folder``: memory-mapped, or read into memory to grow (``writable``)."""
        import faiss
        from .generations import read_manifest
        m = read_manifest(folder, cls.kind, FORMAT_VERSION)
        index = faiss.read_index(str(folder / "index.faiss"), 0 if writable else faiss.IO_FLAG_MMAP)
        if m["params"]["index"] == "hnsw":
            index.hnsw.efSearch = m["params"].get("ef_search", 128)
        rows = np.load(folder / "rows.npy") if (folder / "rows.npy").exists() else None
        return cls(index, m["params"], rows)
