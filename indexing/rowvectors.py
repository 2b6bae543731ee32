"""Stored vectors by document row that a build shares with the live generation rather than writing them again.

The answer encoder's vector of every comment (``answer_vectors/``) is the largest thing a generation holds after the
dense index: 345 MB at 235k documents. Most of it is the same from one build to the next, so a generation keeps

    answer_vectors/
        base.npy       # vectors written once, then hard-linked by the generations built after it
        added.npy      # the vectors of documents new or edited since base.npy was written (absent when none)
        rows.npy       # per document row: its vector's row in [base; added], or -1 (none: a question)
        manifest.json

and a build (``RowVectors.grown``) links the live base, copies the live ``added`` rows it keeps and appends the new
ones. It writes the base anew (``folded``) past ``fold_at`` added vectors or once more than ``max_dead`` of the base's
rows belong to no document any more, so neither the rewritten part nor the dead part grows without end.

Older generations stored one ``answer_vectors.npy`` with a row per document (zero for questions); it loads as a base
whose rows are the documents' (``RowVectors.legacy``), and the first build after it writes a compact base.
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import numpy as np

KIND = "row-vectors"
FORMAT_VERSION = 1


class RowVectors:
    """Vectors by document row: ``self[row]`` (zeros where a row has none), ``self[a:b]``, ``self[[rows]]``.
    ``at`` maps each document row to a row of the base (``< len(base)``) or of ``added`` (``len(base) + i``), or -1."""

    def __init__(self, base: np.ndarray, at: np.ndarray, added: np.ndarray | None = None,
                 base_file: Path | None = None):
        self.base = base
        self.dim = int(base.shape[1])
        self.added = (np.zeros((0, self.dim), dtype=np.float32) if added is None
                      else np.asarray(added, dtype=np.float32).reshape(-1, self.dim))
        self.at = np.asarray(at, dtype=np.int64)
        self.base_file = base_file  # the file the base was read from, unchanged since: ``save`` links it
        if len(self.at) and int(self.at.max()) >= len(self.base) + len(self.added):
            raise ValueError(f"a row points past the {len(self.base) + len(self.added)} stored vectors")

    @classmethod
    def build(cls, n_docs: int, rows, vectors: np.ndarray) -> "RowVectors":
        """A fresh store: ``vectors[i]`` is document row ``rows[i]``'s, in one compact base."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        at = np.full(n_docs, -1, dtype=np.int64)
        at[np.asarray(rows, dtype=np.int64)] = np.arange(len(vectors))
        return cls(vectors, at)

    @classmethod
    def legacy(cls, file: Path) -> "RowVectors":
        """An older generation's ``answer_vectors.npy``: one row per document, memory-mapped."""
        base = np.load(file, mmap_mode="r")
        return cls(base, np.arange(len(base), dtype=np.int64), base_file=file)

    @classmethod
    def open(cls, path: Path) -> "RowVectors | None":
        """The store at ``path`` (a folder), or an older generation's one file beside it (``path`` + ``.npy``); None
        when there is neither."""
        if path.is_dir():
            return cls.load(path)
        if path.with_suffix(".npy").is_file():
            return cls.legacy(path.with_suffix(".npy"))
        return None

    @classmethod
    def load(cls, folder: Path) -> "RowVectors":
        from .generations import read_manifest
        read_manifest(folder, KIND, FORMAT_VERSION)
        added = np.load(folder / "added.npy", mmap_mode="r") if (folder / "added.npy").exists() else None
        return cls(np.load(folder / "base.npy", mmap_mode="r"), np.load(folder / "rows.npy"), added,
                   base_file=folder / "base.npy")

    def save(self, folder: Path) -> None:
        """Into ``folder``: the base (a hard link to the file it was read from, so a build writes only what it added),
        the added vectors and the row map."""
        from .generations import link_or_copy
        folder.mkdir(parents=True, exist_ok=True)
        if self.base_file is not None:
            link_or_copy(self.base_file, folder / "base.npy")
        else:
            np.save(folder / "base.npy", np.ascontiguousarray(self.base, dtype=np.float32))
        if len(self.added):
            np.save(folder / "added.npy", self.added)
        np.save(folder / "rows.npy", self.at)
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": KIND, "format_version": FORMAT_VERSION, "dim": self.dim, "documents": len(self.at),
             "vectors": self.n_vectors, "base_rows": len(self.base), "added": len(self.added), "dead": self.dead},
            indent=2))

    def __len__(self) -> int:
        return len(self.at)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.at), self.dim

    @property
    def n_vectors(self) -> int:
        """How many document rows have a vector."""
        return int((self.at >= 0).sum())

    @cached_property
    def dead(self) -> int:
        """Base rows no document row points to: disk a linked base keeps until it is written anew."""
        used = np.zeros(len(self.base), dtype=bool)
        used[self.at[(self.at >= 0) & (self.at < len(self.base))]] = True
        return int(len(self.base) - used.sum())

    def where(self, doc_rows: np.ndarray) -> np.ndarray:
        """The storage row ([base; added]) of each of ``doc_rows``, -1 where it has no vector (or is out of range)."""
        doc_rows = np.asarray(doc_rows, dtype=np.int64)
        ok = (doc_rows >= 0) & (doc_rows < len(self.at))
        return np.where(ok, self.at[np.where(ok, doc_rows, 0)] if len(self.at) else -1, -1)

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, (int, np.integer)):
            return self._gather(self.at[[key]])[0]
        at = self.at[key]
        if isinstance(key, slice) and len(at) and at[0] >= 0 and at[-1] < len(self.base) and (
                len(at) == 1 or (np.diff(at) == 1).all()):
            return self.base[at[0]:at[-1] + 1]  # consecutive base rows: a view, read only when used
        return self._gather(at)

    def _gather(self, at: np.ndarray) -> np.ndarray:
        out = np.zeros((len(at), self.dim), dtype=np.float32)
        nb = len(self.base)
        in_base, in_added = (at >= 0) & (at < nb), at >= nb
        if in_base.any():
            out[in_base] = self.base[at[in_base]]
        if in_added.any():
            out[in_added] = self.added[at[in_added] - nb]
        return out

    @classmethod
    def grown(cls, live: "RowVectors", live_row: np.ndarray, rows, new_rows, new: np.ndarray,
              fold_at: int = 10_000, max_dead: float = 0.1) -> "RowVectors":
        """A new generation's store from ``live``'s: document row ``r`` of ``rows`` whose ``live_row[r]`` is a live
        document row with a vector keeps that vector (the base's linked, the added ones copied); ``new`` are the
        vectors of document rows ``new_rows``. Written anew in one base past ``fold_at`` added vectors (always when it
        is negative) or ``max_dead`` of the base's rows dead."""
        rows = np.asarray(rows, dtype=np.int64)
        new_rows = np.asarray(new_rows, dtype=np.int64)
        new = np.asarray(new, dtype=np.float32).reshape(-1, live.dim)
        src = live.where(np.asarray(live_row, dtype=np.int64)[rows] if len(rows) else rows)
        nb = len(live.base)
        kept_base, kept_added = src[(src >= 0) & (src < nb)], src[src >= nb]
        at = np.full(len(live_row), -1, dtype=np.int64)
        at[rows[(src >= 0) & (src < nb)]] = kept_base
        at[rows[src >= nb]] = nb + np.arange(len(kept_added))
        at[new_rows] = nb + len(kept_added) + np.arange(len(new_rows))
        added = np.concatenate([np.asarray(live.added[kept_added - nb]), new])
        out = cls(live.base, at, added, live.base_file)
        if len(added) > fold_at or out.dead > max_dead * max(nb, 1):
            return out.folded()
        return out

    def folded(self) -> "RowVectors":
        """The same vectors in one compact base, in document order (written anew by ``save``)."""
        rows = np.flatnonzero(self.at >= 0)
        return RowVectors.build(len(self.at), rows, self._gather(self.at[rows]))
