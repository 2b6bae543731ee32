"""The one record that passes between stages: a document id and its score."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Hit:
    doc_id: str
    score: float


def top_k(scores: np.ndarray, k: int, ids, candidates: np.ndarray | None = None) -> list[Hit]:
    """The k best rows of a dense score vector (argpartition, then a sort of k), as hits.

    ``candidates`` optionally restricts the rows (e.g. a filter); ties break by row order.
    """
    rows = np.arange(scores.size) if candidates is None else np.asarray(candidates)
    sub = scores[rows] if candidates is not None else scores
    k = min(k, sub.size)
    if k <= 0:
        return []
    part = np.argpartition(-sub, k - 1)[:k] if k < sub.size else np.arange(sub.size)
    order = part[np.lexsort((rows[part], -sub[part]))]
    return [Hit(ids[int(rows[i])], float(sub[i])) for i in order]
