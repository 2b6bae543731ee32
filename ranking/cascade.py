"""A cascade: a cheap ranker orders every candidate, and an expensive one rescores only the top ``top`` of
that order. The head comes first in the expensive ranker's order, the rest follows in the cheap one's.

The expensive ranker sees a smaller query, so what its features read from the whole candidate list is
carried over first: each candidate keeps its position in the given list and its thread's dialogue signals
(ranking/signals.py), the head stays in the given order, and the query says whether that order was the
thread's (ranking/combination.py ``in_thread_order``). Only the z-scoring of ranker scores within the
question and a comment's closest neighbour (``closest-comment``, found among the head's comments) see the head
alone; the MAP-against-``top`` curve in docs/BENCHMARKS.md (before round 31) measures what the z-scoring and the
cut cost (on SemEval's threads of 10 comments the head of 10 is the whole thread).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .candidates import Candidate, Query


@dataclass
class Cascade:
    parts: list  # [cheap, expensive]
    top: int
    name: str = "cascade"
    info: dict = field(default_factory=dict)

    def score(self, queries: list[Query]) -> list[list[float]]:
        from .combination import scored_in_time_order
        return scored_in_time_order(self._score, queries)  # the head is cut from the thread's order where known

    def _score(self, queries: list[Query]) -> list[list[float]]:
        cheap, expensive = self.parts
        first = cheap.score(queries)
        heads = [sorted(np.argsort(-np.asarray(s), kind="stable")[: self.top].tolist()) for s in first]
        second = expensive.score([head_query(q, h) for q, h in zip(queries, heads)]) if self.top > 0 else None
        out = []
        for qi, (q, s) in enumerate(zip(queries, first)):
            s = np.asarray(s, dtype=float)
            if second is None or not len(s):
                out.append(s.tolist())
                continue
            head = np.asarray(second[qi], dtype=float)
            final = np.empty_like(s)
            final[heads[qi]] = head
            rest = np.setdiff1d(np.arange(len(s)), heads[qi])
            if len(rest):  # below the head, in the cheap order
                final[rest] = s[rest] - s[rest].max() + head.min() - 1.0
            out.append(final.tolist())
        return out


def head_query(q: Query, head: list[int]) -> Query:
    """The query with only the candidates at ``head`` (given order), each keeping what the full list told
    about it: its position and its dialogue signals; the query keeps whether the order is the thread's."""
    from .combination import in_thread_order
    from .signals import thread_features
    dialogue = thread_features(q)
    cands = []
    for i in head:
        c = q.candidates[i]
        meta = dict(c.meta)
        meta.setdefault("position", i + 1)
        meta.setdefault("dialogue", dialogue[i].tolist())
        cands.append(Candidate(c.id, c.text, meta))
    return replace(q, candidates=tuple(cands), meta={**q.meta, "thread_order": in_thread_order(q)})
