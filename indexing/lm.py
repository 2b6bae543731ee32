"""Query-likelihood language model (Ponte and Croft 1998) with Dirichlet or Jelinek-Mercer
smoothing (Zhai and Lafferty 2001), computed sparsely from the shared count matrix.

log p(q|d) splits into a part over the documents that hold a query term, a part that depends
only on the document length, and a constant; so a query touches a few columns and one vector.
Query terms unseen in the collection are dropped (p(w|C) = 0 would make every score -inf).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .hits import Hit, top_k
from .termmatrix import TermMatrix

FORMAT_VERSION = 1


def dirichlet_log_p(tf, dl, p_c, mu):
    """log p(w|d) = log((c(w,d) + mu p(w|C)) / (|d| + mu))."""
    return np.log((tf + mu * p_c) / (dl + mu))


def jelinek_mercer_log_p(tf, dl, p_c, lam):
    """log p(w|d) = log((1 - lambda) c(w,d)/|d| + lambda p(w|C))."""
    ml = np.divide(tf, dl, out=np.zeros_like(np.asarray(tf, dtype=float)), where=np.asarray(dl) > 0)
    return np.log((1 - lam) * ml + lam * p_c)


def _dirichlet(idx: "LMIndex", ids, qtf, param: float) -> np.ndarray:
    mu = param
    p = idx.p_collection[ids]
    out = float(qtf.sum()) * np.log(mu / (idx.terms.doc_len + mu)) + float(np.dot(qtf, np.log(p)))
    for j, q, pc in zip(ids, qtf, p):
        rows, tf = idx._column(j)
        out[rows] += q * np.log1p(tf / (mu * pc))
    return out


def _jelinek_mercer(idx: "LMIndex", ids, qtf, param: float) -> np.ndarray:
    lam = param
    p = idx.p_collection[ids]
    out = np.full(idx.terms.n_docs, float(np.dot(qtf, np.log(lam * p))))
    for j, q, pc in zip(ids, qtf, p):
        rows, tf = idx._column(j)
        out[rows] += q * np.log1p((1 - lam) * tf / (idx.terms.doc_len[rows] * lam * pc))
    return out


SMOOTHING = {"dirichlet": _dirichlet, "jelinek-mercer": _jelinek_mercer}


class LMIndex:
    kind = "lm"

    def __init__(self, terms: TermMatrix, smoothing: str = "dirichlet", mu: float = 2000.0, lam: float = 0.7):
        if smoothing not in SMOOTHING:
            raise ValueError(f"unknown smoothing {smoothing!r}; known: {', '.join(SMOOTHING)}")
        self.terms, self.smoothing, self.mu, self.lam = terms, smoothing, mu, lam
        cf = np.asarray(terms.counts.sum(axis=0)).ravel().astype(np.float64)
        total = cf.sum()
        self.p_collection = cf / total if total > 0 else cf

    @property
    def params(self) -> dict:
        return {"smoothing": self.smoothing, "mu": self.mu, "lambda": self.lam}

    def _column(self, j: int):
        c = self.terms.counts
        lo, hi = c.indptr[j], c.indptr[j + 1]
        return c.indices[lo:hi], np.asarray(c.data[lo:hi], dtype=np.float64)

    def scores(self, query, smoothing: str | None = None) -> np.ndarray:
        """log p(q|d) for every document; ``query`` is a token list or term weights (an expanded query)."""
        sm = smoothing or self.smoothing
        ids, qtf = self.terms.query_terms(query)
        if ids.size == 0:
            return np.zeros(self.terms.n_docs)
        return SMOOTHING[sm](self, ids, qtf, self.mu if sm == "dirichlet" else self.lam)

    def search_tokens(self, query, k: int, ids: list[str], candidates=None) -> list[Hit]:
        return top_k(self.scores(query), k, ids, candidates)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": self.kind, "format_version": FORMAT_VERSION, "params": self.params,
             "documents": self.terms.n_docs, "terms": len(self.terms.vocab)}, indent=2))

    @classmethod
    def load(cls, folder: Path, terms: TermMatrix) -> "LMIndex":
        from .generations import read_manifest
        p = read_manifest(folder, cls.kind, FORMAT_VERSION)["params"]
        return cls(terms, p["smoothing"], p["mu"], p["lambda"])
