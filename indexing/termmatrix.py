"""A document-term count matrix (CSC: one column per term) and its vocabulary.

Shared by BM25 and the query-likelihood LM; stored as plain ``.npy`` arrays plus a JSON
vocabulary, memory-mapped on load.
"""
from __future__ import annotations

import json
from functools import cached_property
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import scipy.sparse as sp


class TermMatrix:
    def __init__(self, counts: sp.csc_matrix, vocab: list[str]):
        self.counts = counts
        self.vocab = vocab
        # set by ``build``: every document's term ids in token order and the n + 1 offsets where each starts, saved
        # with the matrix so a later build reads a kept document's tokens back (``saved_tokens``) instead of analysing
        self.sequence: tuple[np.ndarray, np.ndarray] | None = None
        self.term_id = {t: i for i, t in enumerate(vocab)}
        self.doc_len = np.asarray(counts.sum(axis=1)).ravel().astype(np.float64)

    @cached_property
    def by_doc(self) -> sp.csr_matrix:
        """The same counts, row-major: a document's terms (for relevance feedback)."""
        return self.counts.tocsr()

    @property
    def n_docs(self) -> int:
        return self.counts.shape[0]

    @classmethod
    def build(cls, token_lists: Iterable[list[str]]) -> "TermMatrix":
        term_id: dict[str, int] = {}
        rows: list[np.ndarray] = []
        cols: list[int] = []
        lengths: list[int] = []
        n = 0
        for doc_tokens in token_lists:
            ids = [term_id.setdefault(t, len(term_id)) for t in doc_tokens]
            cols.extend(ids)
            rows.append(np.full(len(ids), n, dtype=np.int32))
            lengths.append(len(ids))
            n += 1
        r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int32)
        c = np.asarray(cols, dtype=np.int32)
        counts = sp.csc_matrix((np.ones(len(c), dtype=np.float32), (r, c)), shape=(n, len(term_id)))
        counts.sum_duplicates()
        vocab = [""] * len(term_id)
        for t, i in term_id.items():
            vocab[i] = t
        m = cls(counts, vocab)
        m.sequence = (c, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64))
        return m

    def query_terms(self, query: list[str] | Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Known query term ids and their weights: counts for a token list, or the given weights of an
        expanded query (unknown terms dropped)."""
        weights = query if isinstance(query, Mapping) else Counter(query)
        known = [(self.term_id[t], float(w)) for t, w in weights.items() if t in self.term_id and w > 0]
        ids = np.fromiter((i for i, _ in known), dtype=np.int64, count=len(known))
        qtf = np.fromiter((w for _, w in known), dtype=np.float64, count=len(known))
        return ids, qtf

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "counts_data.npy", self.counts.data.astype(np.float32))
        np.save(folder / "counts_indices.npy", self.counts.indices.astype(np.int32))
        np.save(folder / "counts_indptr.npy", self.counts.indptr.astype(np.int64))
        (folder / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        (folder / "shape.json").write_text(json.dumps(list(self.counts.shape)))
        if self.sequence is not None:
            np.save(folder / "tokens.npy", self.sequence[0])
            np.save(folder / "token_offsets.npy", self.sequence[1])

    @classmethod
    def load(cls, folder: Path) -> "TermMatrix":
        shape = tuple(json.loads((folder / "shape.json").read_text()))
        data = np.load(folder / "counts_data.npy", mmap_mode="r", allow_pickle=False)
        indices = np.load(folder / "counts_indices.npy", mmap_mode="r", allow_pickle=False)
        indptr = np.load(folder / "counts_indptr.npy", mmap_mode="r", allow_pickle=False)
        counts = sp.csc_matrix((data, indices, indptr), shape=shape)
        return cls(counts, json.loads((folder / "vocab.json").read_text(encoding="utf-8")))


def saved_tokens(folder: Path, rows: np.ndarray) -> list[list[str]] | None:
    """The token lists of documents ``rows`` of the term matrix saved in ``folder``, as the build that saved it
    analysed them (the same strings in the same order); None when it saved no token sequence (an older build)."""
    if not (folder / "tokens.npy").exists():
        return None
    vocab = np.array(json.loads((folder / "vocab.json").read_text(encoding="utf-8")), dtype=object)
    sequence = np.load(folder / "tokens.npy", mmap_mode="r", allow_pickle=False)
    offsets = np.load(folder / "token_offsets.npy", allow_pickle=False)
    rows = np.asarray(rows, dtype=np.int64)
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    # every wanted position at once: each document's start, then counting up within it
    where = np.repeat(starts - bounds[:-1], lengths) + np.arange(bounds[-1])
    words = vocab[sequence[where]].tolist()
    b = bounds.tolist()
    return [words[b[i]:b[i + 1]] for i in range(len(rows))]
