"""Subtask C: comments of related threads ranked for a new question. A comment is useful when it answers
the new question (the answer ranker on (new question, comment)), when it answers its own thread's question
(the same ranker on (thread question, comment)) and when its thread is related (the search engine's rank
of the thread). The three are z-scored per new question and summed with weights tuned on 2016 dev-C
(ranking/related_defaults.json, written by scripts/tune_related.py). With no thread metadata the comment's
own thread terms drop out and the ranker is the answer ranker alone."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .candidates import Query
from .fusion import zscore

DEFAULTS_FILE = Path(__file__).with_name("related_defaults.json")
FEATURES = ("new_question", "own_question", "thread_rank")


def feature_columns(queries: list[Query], answer_ranker) -> list[np.ndarray]:
    """Per query, a (candidates x 3) matrix of the z-scored features."""
    direct = answer_ranker.score(queries)
    own_queries, where = [], []
    for qi, q in enumerate(queries):
        by_q: dict[str, list[int]] = {}
        for ci, c in enumerate(q.candidates):
            if c.meta.get("thread_question"):
                by_q.setdefault(c.meta["thread_question"], []).append(ci)
        for text, idx in by_q.items():
            own_queries.append(Query(f"{q.id}/{idx[0]}", text, tuple(q.candidates[i] for i in idx)))
            where.append((qi, idx))
    own_scores = answer_ranker.score(own_queries) if own_queries else []
    out = []
    for qi, q in enumerate(queries):
        own = np.zeros(len(q.candidates))
        for (wq, idx), sc in zip(where, own_scores):
            if wq == qi:
                own[idx] = sc
        rank = np.array([-math.log(c.meta.get("thread_rank", 1)) for c in q.candidates], dtype=float)
        out.append(np.column_stack([zscore(np.asarray(direct[qi], dtype=float)), zscore(own), zscore(rank)])
                   if q.candidates else np.zeros((0, len(FEATURES))))
    return out


@dataclass
class RelatedAnswersRanker:
    answer_ranker: object
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    name: str = "related-answers"
    info: dict = field(default_factory=dict)

    def score(self, queries: list[Query]) -> list[list[float]]:
        w = np.asarray(self.weights, dtype=float)
        return [(X @ w).tolist() for X in feature_columns(queries, self.answer_ranker)]


def load_related(settings, path: Path = DEFAULTS_FILE) -> RelatedAnswersRanker:
    from .rankers import get_ranker
    d = json.loads(path.read_text(encoding="utf-8"))
    return RelatedAnswersRanker(get_ranker(d["answer_ranker"], settings), tuple(d["weights"]), d["name"], d)
