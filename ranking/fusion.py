"""Fusion of ranked hit lists. Pure functions: inputs are never mutated; empty lists, single hits,
all-equal scores and hits missing from some lists are all handled."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from indexing.hits import Hit


def rrf(runs: Sequence[Sequence[Hit]], k: int = 60, weights: Sequence[float] | None = None) -> list[Hit]:
    """Reciprocal rank fusion (Cormack, Clarke and Buettcher 2009): sum of w / (k + rank) over hit lists."""
    weights = weights or [1.0] * len(runs)
    acc: dict[str, float] = {}
    for w, run in zip(weights, runs):
        for rank, h in enumerate(run, 1):
            acc[h.doc_id] = acc.get(h.doc_id, 0.0) + w / (k + rank)
    return _sorted(acc)


# A list whose spread is below this share of its largest magnitude holds one value up to float rounding (identical
# texts scored in batches of different padding, sums taken in another order): normalising would stretch that noise
# to the whole scale and let it order them.
CONSTANT_SPREAD = 1e-6


def _constant(scores: np.ndarray, spread: float) -> bool:
    return spread <= CONSTANT_SPREAD * max(1.0, float(np.abs(scores).max(initial=0.0)))


def minmax(scores: np.ndarray) -> np.ndarray:
    """(score - min) / (max - min) within the list; ones for a list of numerically equal scores."""
    scores = np.asarray(scores, dtype=float)
    if not len(scores):
        return scores
    lo, hi = float(scores.min()), float(scores.max())
    return np.ones_like(scores) if _constant(scores, hi - lo) else (scores - lo) / (hi - lo)


def zscore(scores: np.ndarray) -> np.ndarray:
    """(score - mean) / standard deviation within the list; zeros for a list of numerically equal scores."""
    scores = np.asarray(scores, dtype=float)
    sd = float(scores.std()) if len(scores) else 0.0
    if _constant(scores, sd):
        return np.zeros_like(scores)
    return (scores - scores.mean()) / sd


def reciprocal_rank(scores: np.ndarray, k: int = 60) -> np.ndarray:
    """1 / (k + rank) of each score within its list (RRF's per-list term; ties keep list order)."""
    ranks = np.empty(len(scores))
    ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
    return 1.0 / (k + ranks)


NORMALIZERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"minmax": minmax, "zscore": zscore}
# How a list of scores becomes summable across rankers, for fusing scores of the same candidates.
SCORE_TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {**NORMALIZERS, "rrf": reciprocal_rank}


def comb(runs: Sequence[Sequence[Hit]], method: str = "sum", norm: str = "minmax",
         weights: Sequence[float] | None = None) -> list[Hit]:
    """CombSUM / CombMNZ (Fox and Shaw 1994) over normalised scores; MNZ multiplies by the number of
    lists that hold the hit."""
    if method not in ("sum", "mnz"):
        raise ValueError(f"unknown comb method {method!r}; known: sum, mnz")
    f = NORMALIZERS[norm]
    weights = weights or [1.0] * len(runs)
    acc: dict[str, float] = {}
    seen: dict[str, int] = {}
    for w, run in zip(weights, runs):
        if not run:
            continue
        normed = f(np.array([h.score for h in run], dtype=float))
        for h, s in zip(run, normed):
            acc[h.doc_id] = acc.get(h.doc_id, 0.0) + w * float(s)
            seen[h.doc_id] = seen.get(h.doc_id, 0) + 1
    if method == "mnz":
        acc = {d: s * seen[d] for d, s in acc.items()}
    return _sorted(acc)


def _sorted(acc: dict[str, float]) -> list[Hit]:
    return [Hit(d, s) for d, s in sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))]


FUSIONS: dict[str, Callable[..., list[Hit]]] = {
    "rrf": rrf,
    "combsum": lambda runs, **kw: comb(runs, "sum", **kw),
    "combmnz": lambda runs, **kw: comb(runs, "mnz", **kw),
}
