"""BM25 with scores precomputed at build time into a sparse doc-term matrix.

A query is a weighted sum of a few columns and a top-k, never a loop over documents.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .hits import Hit, top_k
from .termmatrix import TermMatrix

FORMAT_VERSION = 1


def idf_okapi(df: np.ndarray, n: int, epsilon: float = 0.25) -> np.ndarray:
    """Robertson-Sparck Jones idf, log((N - df + 0.5) / (df + 0.5)); negative values are floored at
    epsilon times the mean idf, as rank_bm25's BM25Okapi does."""
    idf = np.log(n - df + 0.5) - np.log(df + 0.5)
    if idf.size:
        idf = np.where(idf < 0, epsilon * idf.mean(), idf)
    return idf


def idf_lucene(df: np.ndarray, n: int, epsilon: float = 0.0) -> np.ndarray:
    """Lucene's non-negative idf, log(1 + (N - df + 0.5) / (df + 0.5))."""
    return np.log1p((n - df + 0.5) / (df + 0.5))


IDF = {"okapi": idf_okapi, "lucene": idf_lucene}


def bm25_weight(tf: np.ndarray, dl: np.ndarray, avgdl: float, idf: np.ndarray, k1: float, b: float) -> np.ndarray:
    """Robertson et al. (1994): idf * tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl))."""
    norm = k1 * (1.0 - b + b * dl / avgdl) if avgdl > 0 else k1
    return idf * tf * (k1 + 1.0) / (tf + norm)


class BM25Index:
    kind = "bm25"

    def __init__(self, weights: sp.csc_matrix, terms: TermMatrix, params: dict):
        self.weights, self.terms, self.params = weights, terms, params

    @classmethod
    def build(cls, terms: TermMatrix, k1: float = 1.2, b: float = 0.75, idf: str = "okapi",
              epsilon: float = 0.25) -> "BM25Index":
        if idf not in IDF:
            raise ValueError(f"unknown idf variant {idf!r}; known: {', '.join(IDF)}")
        c = terms.counts
        n = terms.n_docs
        df = np.diff(c.indptr).astype(np.float64)
        idf_v = IDF[idf](df, n, epsilon)
        avgdl = float(terms.doc_len.mean()) if n else 0.0
        col = np.repeat(np.arange(c.shape[1]), np.diff(c.indptr))
        data = bm25_weight(np.asarray(c.data, dtype=np.float64), terms.doc_len[c.indices], avgdl,
                           idf_v[col], k1, b)
        w = sp.csc_matrix((data.astype(np.float64), c.indices, c.indptr), shape=c.shape)
        return cls(w, terms, {"k1": k1, "b": b, "idf": idf, "epsilon": epsilon, "avgdl": avgdl})

    def scores(self, query) -> np.ndarray:
        """BM25 of every document for query tokens (repeated terms count again) or term weights."""
        ids, qtf = self.terms.query_terms(query)
        out = np.zeros(self.terms.n_docs, dtype=np.float64)
        for j, q in zip(ids, qtf):
            lo, hi = self.weights.indptr[j], self.weights.indptr[j + 1]
            out[self.weights.indices[lo:hi]] += q * self.weights.data[lo:hi]
        return out

    def search_tokens(self, query, k: int, ids: list[str], candidates=None) -> list[Hit]:
        return top_k(self.scores(query), k, ids, candidates)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "weights_data.npy", self.weights.data)
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": self.kind, "format_version": FORMAT_VERSION, "params": self.params,
             "documents": self.terms.n_docs, "terms": len(self.terms.vocab)}, indent=2))

    @classmethod
    def load(cls, folder: Path, terms: TermMatrix) -> "BM25Index":
        from .generations import read_manifest
        m = read_manifest(folder, cls.kind, FORMAT_VERSION)
        data = np.load(folder / "weights_data.npy", mmap_mode="r", allow_pickle=False)
        c = terms.counts
        w = sp.csc_matrix((data, c.indices, c.indptr), shape=c.shape)
        return cls(w, terms, m["params"])

