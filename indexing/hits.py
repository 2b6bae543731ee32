"""The one record that passes between stages: a document id and its score."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hit:
    doc_id: str
    score: float


def top_k(scores, k: int, ids, candidates=None) -> list[Hit]:
    """The k best rows of a dense score vector (argpartition, then a sort of k), as hits.

    ``candidates`` optionally restricts the rows (e.g. a filter); ties break by row order.
    """
    import numpy as np
    if candidates is not None:
        sub = scores[candidates]
        k = min(k, sub.size)
        if k <= 0:
            return []
        part = np.argpartition(-sub, k - 1)[:k] if k < sub.size else np.arange(sub.size)
        order = part[np.lexsort((candidates[part], -sub[part]))]
        return [Hit(ids[int(candidates[i])], float(sub[i])) for i in order]
    k = min(k, scores.size)
    if k <= 0:
        return []
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
    order = part[np.lexsort((part, -scores[part]))]
    return [Hit(ids[int(i)], float(scores[i])) for i in order]
