"""The dense index: normalised sentence embeddings in FAISS (inner product = cosine).

Exact (flat) up to a size threshold, HNSW or IVF above it, or as configured.

An HNSW or IVF index takes a long time to build (HNSW: 32 s for 235k documents on 2 cores) and is cheap to add
to, so a rebuild may instead grow the live generation's index (``DenseIndex.grown``): its rows whose document is
unchanged are kept, the rest are marked removed, and the new documents' vectors are kept beside it (the delta,
searched exactly) until there are enough to add to it. Such an index maps its FAISS rows to document rows (``rows``;
-1: removed, never returned); a fresh build's rows are the documents'.
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
    """A FAISS index (the base) and, once grown, the vectors added since it was written (the delta, searched
    exactly beside it, so a growth step writes only them and links the base's file). ``rows`` maps the base's FAISS
    rows to document rows (-1: removed, never returned; None: the same numbers), ``delta_rows`` the delta's."""
    kind = "dense"

    def __init__(self, index, params: dict, rows: np.ndarray | None = None, delta: np.ndarray | None = None,
                 delta_rows: np.ndarray | None = None, base_file: Path | None = None,
                 shape: tuple[int, int] | None = None):
        """``index`` None: the base is read from ``base_file`` when first used (``index``), and ``shape`` says its
        size (vectors, dimensions) meanwhile."""
        if index is None and (base_file is None or shape is None):
            raise ValueError("an index read when first used needs its file and its shape")
        self._index, self.params = index, params
        self.ntotal, self.dim = (index.ntotal, index.d) if index is not None else shape
        self.base_file = base_file  # the file the base was read from, unchanged since: ``save`` links it
        self.delta = (np.zeros((0, self.dim), dtype=np.float32) if delta is None
                      else np.ascontiguousarray(delta, dtype=np.float32))
        self.delta_rows = np.zeros(0, dtype=np.int64) if delta_rows is None else np.asarray(delta_rows, dtype=np.int64)
        if len(self.delta) != len(self.delta_rows):
            raise ValueError(f"{len(self.delta_rows)} row numbers for {len(self.delta)} added vectors")
        if rows is None and len(self.delta):
            rows = np.arange(self.ntotal, dtype=np.int64)
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)  # FAISS row -> document row
        self._where = self._in_delta = self._live = None
        if self.rows is not None:
            if len(self.rows) != self.ntotal:
                raise ValueError(f"{len(self.rows)} row numbers for an index of {self.ntotal} vectors")
            live = self.rows >= 0
            size = int(max(self.rows.max(initial=-1), self.delta_rows.max(initial=-1))) + 1
            self._where = np.full(size, -1, dtype=np.int64)  # document row -> FAISS row
            self._where[self.rows[live]] = np.flatnonzero(live)
            self._in_delta = np.full(size, -1, dtype=np.int64)  # document row -> delta row
            self._in_delta[self.delta_rows] = np.arange(len(self.delta_rows))
            # the selector reads this bitmap in place: it lives as long as the index
            self._live = np.packbits(live, bitorder="little") if not live.all() else None

    @property
    def index(self):
        """The FAISS index of the base: read from its file, memory-mapped, when first used by an index loaded
        ``lazy``."""
        if self._index is None:
            import faiss
            index = faiss.read_index(str(self.base_file), faiss.IO_FLAG_MMAP)
            if (index.ntotal, index.d) != (self.ntotal, self.dim):
                raise ValueError(f"{self.base_file}: {index.ntotal} vectors of {index.d} dimensions, "
                                 f"{self.ntotal} of {self.dim} recorded")
            if self.params.get("index") == "hnsw":
                index.hnsw.efSearch = self.params.get("ef_search", 128)
            self._index = index
        return self._index

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
    def grown(cls, live: "DenseIndex", now_row: np.ndarray, added_rows: np.ndarray, added: np.ndarray,
              fold_at: int = 10_000) -> "DenseIndex":
        """``live`` grown into a new generation's index. ``now_row`` maps each live document row to the new
        document row holding the same document (-1: gone or edited, its row marked removed); ``added`` are the
        vectors of document rows ``added_rows``. They join the delta, which keeps the live base's file as it is;
        past ``fold_at`` vectors the delta is added to the base (FAISS's own add, as a build's, so an added vector
        is as findable as a built one), which is then written anew."""
        base, in_delta = live.moved(now_row)
        added = np.asarray(added, dtype=np.float32).reshape(-1, live.dim)
        delta = np.concatenate([live.delta[in_delta >= 0], added])
        delta_rows = np.concatenate([in_delta[in_delta >= 0], np.asarray(added_rows, dtype=np.int64)])
        if len(delta) <= fold_at:  # the base as it is: not read when the live one was not
            return cls(live._index, dict(live.params), base, delta, delta_rows, live.base_file,
                       (live.ntotal, live.dim))
        index = live.writable()
        if len(delta):
            index.add(delta)
        return cls(index, dict(live.params), np.concatenate([base, delta_rows]))

    def moved(self, now_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The document rows its base rows and its delta rows hold once ``now_row`` renumbers the documents (-1:
        removed, or gone)."""
        now_row = np.asarray(now_row, dtype=np.int64)

        def renumbered(rows: np.ndarray) -> np.ndarray:
            ok = (rows >= 0) & (rows < len(now_row))
            return np.where(ok, now_row[np.where(ok, rows, 0)], -1)
        return (renumbered(self.rows if self.rows is not None else np.arange(self.ntotal, dtype=np.int64)),
                renumbered(self.delta_rows))

    def writable(self):
        """The base index in memory, to add to (a loaded one is memory-mapped)."""
        import faiss
        if self.base_file is None:
            return self.index
        index = faiss.read_index(str(self.base_file))
        if self.params.get("index") == "hnsw":
            index.hnsw.efSearch = self.params.get("ef_search", 128)
        return index

    @property
    def n_docs(self) -> int:
        """How many documents it holds (rows marked removed not counted)."""
        return self.ntotal if self.rows is None else int((self.rows >= 0).sum()) + len(self.delta)

    @property
    def removed(self) -> int:
        """FAISS rows marked removed: a grown index's cost (searched past, never returned) until the next full
        build."""
        return 0 if self.rows is None else int((self.rows < 0).sum())

    def faiss_rows(self, doc_rows) -> np.ndarray:
        """The base's FAISS rows holding document rows ``doc_rows`` (those it does not hold left out)."""
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        if self.rows is None:
            return doc_rows[(doc_rows >= 0) & (doc_rows < self.ntotal)]
        inside = doc_rows[(doc_rows >= 0) & (doc_rows < len(self._where))]
        found = self._where[inside]
        return found[found >= 0]

    def _delta_at(self, doc_rows) -> np.ndarray:
        """The delta rows holding document rows ``doc_rows`` (those it does not hold left out)."""
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        found = self._in_delta[doc_rows[(doc_rows >= 0) & (doc_rows < len(self._in_delta))]]
        return found[found >= 0]

    def holds(self, doc_rows) -> np.ndarray:
        """Whether it holds a vector of each of ``doc_rows`` (in the base or the delta)."""
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        if self.rows is None:
            return (doc_rows >= 0) & (doc_rows < self.ntotal)
        ok = (doc_rows >= 0) & (doc_rows < len(self._where))
        at = np.where(ok, doc_rows, 0)
        return ok & ((self._where[at] >= 0) | (self._in_delta[at] >= 0))

    def vector(self, doc_row: int) -> np.ndarray | None:
        """The stored vector of a document row; None when it holds none or its kind cannot give it back."""
        if self._in_delta is not None and 0 <= doc_row < len(self._in_delta) and self._in_delta[doc_row] >= 0:
            return self.delta[self._in_delta[doc_row]].copy()
        found = self.faiss_rows([doc_row])
        if len(found) == 0:
            return None
        try:
            return self.index.reconstruct(int(found[0]))
        except RuntimeError:
            return None

    def search_vectors(self, q: np.ndarray, k: int, ids: list[str], allowed=None) -> list[Hit]:
        """Top k by inner product, over the FAISS index and the delta; ``allowed`` (sorted document rows) restricts
        both, inside FAISS."""
        import faiss
        k = min(k, self.n_docs)
        if k <= 0:
            return []
        q = np.ascontiguousarray(q.reshape(1, -1), dtype=np.float32)
        found: list[tuple[float, int]] = []
        if len(self.delta):  # the delta, exactly (no copy of it when nothing is filtered)
            which = None if allowed is None else self._delta_at(allowed)
            scores = self.delta @ q[0] if which is None else self.delta[which] @ q[0]
            if len(scores):
                top = np.argpartition(-scores, k - 1)[:k] if len(scores) > k else np.arange(len(scores))
                top = top[np.argsort(-scores[top], kind="stable")]
                rows = self.delta_rows if which is None else self.delta_rows[which]
                found = [(float(scores[i]), int(rows[i])) for i in top]
        params, sel, base_k = None, None, k
        if allowed is not None:
            allowed = self.faiss_rows(allowed)
            sel = faiss.IDSelectorBatch(allowed)
            base_k = min(k, len(allowed))
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
        if base_k > 0:
            scores, got = self.index.search(q, base_k, params=params)
            got = got[0] if self.rows is None else np.where(got[0] >= 0, self.rows[np.maximum(got[0], 0)], -1)
            base = [(float(s), int(r)) for s, r in zip(scores[0], got) if r >= 0]
            found = base if not found else sorted(base + found, key=lambda h: -h[0])[:k]
        return [Hit(ids[r], s) for s, r in found]

    def save(self, folder: Path) -> None:
        """Into ``folder``: the base's FAISS file (a hard link to the file it was read from when unchanged, so a
        growth step writes only what it added), the row maps and the delta, with the FAISS file's size and rows
        (what ``load`` with ``lazy`` checks)."""
        from .generations import link_or_copy
        folder.mkdir(parents=True, exist_ok=True)
        if self.base_file is not None:
            link_or_copy(self.base_file, folder / "index.faiss")
        else:
            import faiss
            faiss.write_index(self.index, str(folder / "index.faiss"))
        if self.rows is not None:
            np.save(folder / "rows.npy", self.rows)
        if len(self.delta):
            np.save(folder / "delta.npy", self.delta)
            np.save(folder / "delta_rows.npy", self.delta_rows)
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": self.kind, "format_version": FORMAT_VERSION, "params": self.params,
             "documents": self.n_docs, "removed_rows": self.removed, "delta": len(self.delta),
             "faiss_rows": self.ntotal, "faiss_bytes": (folder / "index.faiss").stat().st_size}, indent=2))

    @classmethod
    def load(cls, folder: Path, loaded: "DenseIndex | None" = None, lazy: bool = False) -> "DenseIndex":
        """The index saved in ``folder``, its FAISS file memory-mapped (``writable`` reads it to add to). When
        ``loaded`` (the live generation's, in memory) was read from the same file, a hard link of a grown index's
        build, its FAISS index is shared rather than read again: a published file is never written, so it is the same
        index, and going live costs no second read of it (loading took 0.31 s instead of 0.60 s at 235k documents,
        ``bench/generation_switch.py --faiss``) nor a second copy in memory while both generations are.

        ``lazy``: the FAISS file is read when the index is first searched or added to (``index``), not now, when the
        file has the size and the manifest the rows its build recorded (what a build that grows the live index and
        links its file needs: 0.8 s less at 235k documents, the reading and the import of FAISS); else now."""
        from .generations import read_manifest
        m = read_manifest(folder, cls.kind, FORMAT_VERSION)
        file = folder / "index.faiss"
        rows = np.load(folder / "rows.npy") if (folder / "rows.npy").exists() else None
        delta = delta_rows = None
        if (folder / "delta.npy").exists():
            delta, delta_rows = np.load(folder / "delta.npy"), np.load(folder / "delta_rows.npy")
        if lazy and "faiss_bytes" in m and file.stat().st_size == m["faiss_bytes"]:
            return cls(None, m["params"], rows, delta, delta_rows, base_file=file,
                       shape=(m["faiss_rows"], m["params"]["dim"]))
        import faiss
        if loaded is not None and loaded.base_file is not None and loaded.params == m["params"] and _same_file(
                loaded.base_file, file):
            index = loaded.index
        else:
            index = faiss.read_index(str(file), faiss.IO_FLAG_MMAP)
        if m["params"]["index"] == "hnsw":
            index.hnsw.efSearch = m["params"].get("ef_search", 128)
        return cls(index, m["params"], rows, delta, delta_rows, base_file=file)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False
