"""Subtask C: comments of related threads ranked for a new question. A comment is useful when it answers
the new question (the answer ranker on (new question, comment)), when it answers its own thread's question
(the same ranker on (thread question, comment)) and when its thread is related (the search engine's rank
of the thread, and a question-similarity ranker's score of the thread's question, i.e. subtask B), most of
all when both hold (their product), and when it stands out in its own thread by a subtask A ranker with
forum signals (``own_quality``: the thread's question, its comments in thread order with their authors and
positions). The features are z-scored per new question and summed with weights
tuned on 2016 dev-C (ranking/related_defaults.json, written by scripts/tune_related.py). With no thread
metadata the thread terms drop out and the ranker is the answer ranker alone; with threads in no search order
(``search_order`` false) the thread's rank counts 0 and the thread similarity is subtask B's without the order.

For search (ranking/search_answers_defaults.json, tuned end to end on dev by scripts/tune_search.py) more
features count: where the first stage put the comment (``retrieval_rank``; a benchmark's given order
otherwise), its first-stage scores over the whole corpus (``stage_*``; 0 outside a search), and the
comment's own quality, the forum-signal half of the subtask A model (by the asker, position, length, URLs,
dialogue in its thread...) computed from its whole stored thread, and a second answer ranker on (new question,
comment) (``answer_model``: the subtask A bi-encoder, which reads the comment vectors each generation stores, so
only the question is encoded per search). Files tuned before a feature existed give it no weight."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .candidate_rankers import in_search_order, order_weights
from .candidates import VECTOR_ENCODER, Candidate, Query
from .fusion import zscore
from .rankers import FirstStageScore

FEATURES = ("new_question", "own_question", "thread_rank", "thread_similarity", "own_x_similarity",
            "retrieval_rank", "quality", "stage_bm25", "stage_lm", "stage_dense", "stage_fused", "own_quality",
            "answer_model", "thread_answered", "quality_x_similarity")
STAGES = ("bm25", "lm", "dense", "fused")


def _threads(q: Query) -> dict[str, tuple[int, str, list[int], dict]]:
    """thread id -> (search rank, thread question, candidate indices, the question's stored embedding as
    meta: "vector" and the encoder that made it, or nothing), for candidates that carry their thread."""
    out: dict[str, tuple[int, str, list[int], dict]] = {}
    for i, c in enumerate(q.candidates):
        if c.meta.get("thread_question"):
            vec = {k: v for k, v in (("vector", c.meta.get("thread_vector")),
                                     (VECTOR_ENCODER, c.meta.get(VECTOR_ENCODER))) if v is not None}
            out.setdefault(c.meta.get("thread_id"), (c.meta.get("thread_rank", 1), c.meta["thread_question"], [],
                                                     vec))[2].append(i)
    return out


def _thread_candidates(q: Query, th: dict, order: list[str]) -> tuple[Candidate, ...]:
    """``q``'s related threads (``_threads``) in search ``order`` as a thread ranker's candidates: each its question,
    its rank, its question's stored vector, and its comments as the request gives them (read by a thread ranker that
    weighs them, question-fusion+answers)."""
    return tuple(Candidate(t, th[t][1], {"thread_rank": r, **th[t][3],
                                         "comments": tuple(q.candidates[i].text for i in th[t][2])})
                 for r, t in enumerate(order, 1))


def quality_prior(q: Query) -> np.ndarray:
    """The forum-signal part of the subtask A model (its signal coefficients over the signals), per candidate."""
    from .presets import PRESETS
    from .signals import matrix
    d = PRESETS["cross-encoder+signals"].params()
    names = tuple(d["features"][len(d["parts"]):])
    coef = np.asarray(d["coef"][len(d["parts"]):], dtype=float)
    return matrix(q, names) @ coef


def feature_columns(queries: list[Query], answer_ranker, thread_ranker=None, quality_ranker=None,
                    answer_model=None) -> list[np.ndarray]:
    """Per query, a (candidates x 15) matrix of the z-scored features (FEATURES). Each ranker is called
    once for the whole batch: the answer ranker on the new questions and the thread questions together, the
    thread ranker on the thread questions in search order (with the query's metadata, so a query whose threads
    come in no search order, ``search_order`` false, is ranked by its unordered weights), the quality ranker (a
    subtask A ranker with forum signals) on each thread's question and its comments as the thread gives them
    (``own_quality``; 0 without one), and a second answer ranker on the new questions (``answer_model``; 0 without
    one). ``thread_answered``: how well the comment's thread answers the new question, the best answer-ranker score
    of the new question against the thread's comments as given (0 for a comment without its thread);
    ``quality_x_similarity``: own_quality times the thread's similarity, built as own_x_similarity is."""
    second = answer_model.score(queries) if answer_model is not None else [np.zeros(len(q.candidates)) for q in queries]
    threads = [_threads(q) for q in queries]
    own_queries = [Query(f"{q.id}/{tid}", text, tuple(q.candidates[i] for i in idx), vec)
                   for q, th in zip(queries, threads) for tid, (_, text, idx, vec) in th.items()]
    both = answer_ranker.score(queries + own_queries)  # one call: a model encodes each comment once
    direct, own_scores = both[:len(queries)], iter(both[len(queries):])
    quality_scores = iter(quality_ranker.score(own_queries) if own_queries and quality_ranker else [])
    in_order = [sorted(th, key=lambda t: th[t][0]) for th in threads]
    sim_queries = [Query(q.id, q.text, _thread_candidates(q, th, order), q.meta)
                   for q, th, order in zip(queries, threads, in_order) if th and thread_ranker]
    sim_scores = iter(thread_ranker.score(sim_queries) if sim_queries else [])
    out = []
    for q, th, order, d, d2 in zip(queries, threads, in_order, direct, second):
        if not q.candidates:
            out.append(np.zeros((0, len(FEATURES))))
            continue
        own, sim, own_quality, answered = (np.zeros(len(q.candidates)) for _ in range(4))
        for _, _, idx, _ in th.values():
            own[idx] = next(own_scores)
            answered[idx] = max(d[i] for i in idx)
            if quality_ranker:
                own_quality[idx] = next(quality_scores)
        if th and thread_ranker:
            for t, value in zip(order, next(sim_scores)):
                sim[th[t][2]] = value
        ordered = in_search_order(q)  # else the threads' ranks and places say nothing: those features are 0
        rank = np.array([-math.log(c.meta.get("thread_rank", 1)) * ordered for c in q.candidates], dtype=float)
        own_z, sim_z, quality_z = zscore(own), zscore(sim), zscore(own_quality)
        retrieved = np.array([-math.log(c.meta.get("retrieval_rank", i + 1)) * ordered
                              for i, c in enumerate(q.candidates)])
        stages = [zscore(np.asarray(FirstStageScore(s).score([q])[0])) for s in STAGES]
        out.append(np.column_stack([zscore(np.asarray(d, dtype=float)), own_z, zscore(rank), sim_z,
                                    zscore(own_z * (sim_z - sim_z.min())), zscore(retrieved),
                                    zscore(quality_prior(q)), *stages, quality_z,
                                    zscore(np.asarray(d2, dtype=float)), zscore(answered),
                                    zscore(quality_z * (sim_z - sim_z.min()))]))
    return out


def padded(weights) -> np.ndarray:
    """A weight per feature (FEATURES): a file tuned before a feature existed gives it no weight."""
    w = np.zeros(len(FEATURES))
    w[:len(weights)] = weights
    return w


@dataclass
class RelatedAnswersRanker:
    answer_ranker: object
    weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0, 1.0)
    name: str = "related-answers"
    info: dict = field(default_factory=dict)
    thread_ranker: object = None
    quality_ranker: object = None
    answer_model: object = None
    # threads in no search order: the file's "unordered" weights (scripts/tune_related.py --section unordered); none
    # shipped, since dev-C-unordered chose the ordered ones (docs/BENCHMARKS.md, round 12)
    unordered_weights: tuple[float, ...] | None = None

    @property
    def parts(self) -> list:
        return [r for r in (self.answer_ranker, self.thread_ranker, self.quality_ranker, self.answer_model)
                if r is not None]

    def score(self, queries: list[Query]) -> list[list[float]]:
        ordered = padded(self.weights)
        unordered = None if self.unordered_weights is None else padded(self.unordered_weights)
        return [(X @ order_weights(q, ordered, unordered)).tolist()
                for q, X in zip(queries, feature_columns(queries, self.answer_ranker, self.thread_ranker,
                                                         self.quality_ranker, self.answer_model))]
