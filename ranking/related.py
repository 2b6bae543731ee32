"""Subtask C: comments of related threads ranked for a new question. A comment is useful when it answers
the new question (the answer ranker on (new question, comment)), when it answers its own thread's question
(the same ranker on (thread question, comment)) and when its thread is related (the search engine's rank
of the thread, and a question-similarity ranker's score of the thread's question, i.e. subtask B), most of
all when both hold (their product). The features are z-scored per new question and summed with weights
tuned on 2016 dev-C (ranking/related_defaults.json, written by scripts/tune_related.py). With no thread
metadata the thread terms drop out and the ranker is the answer ranker alone."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .candidates import Query
from .fusion import zscore

DEFAULTS_FILE = Path(__file__).with_name("related_defaults.json")
FEATURES = ("new_question", "own_question", "thread_rank", "thread_similarity", "own_x_similarity")


def _thread_similarity(queries: list[Query], thread_ranker) -> list[np.ndarray]:
    """The thread ranker's score of each candidate's thread question against the new question."""
    from .candidates import Candidate
    b_queries, owners = [], []
    for q in queries:
        threads: dict[str, int] = {}
        for c in q.candidates:
            if c.meta.get("thread_question") and c.meta.get("thread_id") not in threads:
                threads[c.meta.get("thread_id")] = len(threads)
        ordered = sorted(threads, key=lambda t: next(c.meta.get("thread_rank", 1) for c in q.candidates
                                                    if c.meta.get("thread_id") == t))
        cands = tuple(Candidate(t, next(c.meta["thread_question"] for c in q.candidates if c.meta.get("thread_id") == t),
                                {"thread_rank": r}) for r, t in enumerate(ordered, 1))
        b_queries.append(Query(q.id, q.text, cands))
        owners.append(ordered)
    scores = thread_ranker.score([b for b in b_queries if b.candidates]) if thread_ranker else []
    it = iter(scores)
    out = []
    for q, b, ordered in zip(queries, b_queries, owners):
        by_thread = dict(zip(ordered, next(it))) if (b.candidates and thread_ranker) else {}
        out.append(np.array([by_thread.get(c.meta.get("thread_id"), 0.0) for c in q.candidates], dtype=float))
    return out


def feature_columns(queries: list[Query], answer_ranker, thread_ranker=None) -> list[np.ndarray]:
    """Per query, a (candidates x 5) matrix of the z-scored features (FEATURES)."""
    direct = answer_ranker.score(queries)
    similarity = _thread_similarity(queries, thread_ranker)
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
        own_z, sim_z = zscore(own), zscore(similarity[qi])
        out.append(np.column_stack([zscore(np.asarray(direct[qi], dtype=float)), own_z, zscore(rank), sim_z,
                                    zscore(own_z * (sim_z - sim_z.min()))])
                   if q.candidates else np.zeros((0, len(FEATURES))))
    return out


@dataclass
class RelatedAnswersRanker:
    answer_ranker: object
    weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0)
    name: str = "related-answers"
    info: dict = field(default_factory=dict)
    thread_ranker: object = None

    @property
    def parts(self) -> list:
        return [r for r in (self.answer_ranker, self.thread_ranker) if r is not None]

    def score(self, queries: list[Query]) -> list[list[float]]:
        w = np.asarray(self.weights, dtype=float)
        return [(X @ w).tolist() for X in feature_columns(queries, self.answer_ranker, self.thread_ranker)]


def load_related(settings, path: Path = DEFAULTS_FILE) -> RelatedAnswersRanker:
    from .rankers import get_ranker
    d = json.loads(path.read_text(encoding="utf-8"))
    thread = get_ranker(d["thread_ranker"], settings) if d.get("thread_ranker") else None
    return RelatedAnswersRanker(get_ranker(d["answer_ranker"], settings), tuple(d["weights"]), d["name"], d, thread)
