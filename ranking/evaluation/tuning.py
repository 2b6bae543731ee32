"""Weights for a per-question z-score fusion, chosen by official MAP over a grid: what the given-candidate
fusions (`scripts/tune_candidate_fusion.py`) and the cross-validations (Arabic, `ranking/arabic.py`; subtask B
over the training questions, `scripts/cv_question_model.py`) tune, and the folds those deal questions into."""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np

from ..candidates import Query
from ..fusion import SCORE_TRANSFORMS, zscore
from .benchmarks import BenchmarkError
from .scorer import Line, ScoringError, average_precision, rank_by_score


FOLDS, FOLD_SEED = 5, 2016


def write_params(path: Path, record: dict, section: str | None = None) -> None:
    """A tuned parameters file (beside ranking/): ``record`` as the whole file, or with ``section`` under that key of
    the file as it is (e.g. "unordered": the weights for candidates in no search order), the rest kept."""
    whole = {**json.loads(path.read_text(encoding="utf-8")), section: record} if section else record
    path.write_text(json.dumps(whole, indent=2) + "\n", encoding="utf-8")


def folds_of(queries: list, k: int = FOLDS, seed: int = FOLD_SEED) -> list[list[int]]:
    """Query indexes of each fold: the questions (or any items) shuffled with a fixed seed, then dealt round robin."""
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


def question_key(thread_id: str) -> str:
    """The original question a thread belongs to: 2016's related threads (``Q201_R26``) share ``Q201``'s key."""
    return thread_id.split("_R")[0]


def thread_folds(threads: dict[str, list], k: int = FOLDS, seed: int = FOLD_SEED) -> dict[str, dict[str, int]]:
    """File -> thread id -> fold, for cross-fitting over training files (`scripts/crossfit_A.py`): the original
    questions dealt into ``k`` folds as ``folds_of`` deals questions, so the related threads of one question share a
    fold. Keyed by file first: thread ids repeat across files (68 of 2015 train's are 2015 dev's, other threads)."""
    keys = sorted({(f, question_key(t.id)) for f, ts in threads.items() for t in ts})
    fold = {keys[j]: i for i, idx in enumerate(folds_of(keys, k, seed)) for j in idx}
    return {f: {t.id: fold[(f, question_key(t.id))] for t in ts} for f, ts in threads.items()}


def fused_scores(part_scores: dict[str, list[list[float]]], weights: dict[str, float]) -> list[list[float]]:
    """Per query, the weighted sum of each part's z-scored scores."""
    n = len(next(iter(part_scores.values())))
    return [sum(w * zscore(np.asarray(part_scores[p][i], dtype=float)) for p, w in weights.items()).tolist()
            for i in range(n)]


class GoldMAP:
    """Official MAP of score settings for one set of queries and its gold, for a grid that scores many: the gold lines
    of these queries are matched to their candidates once, then each call ranks each question's gold labels by the
    scores as the scorer does (questions and ties in the gold's order) and averages their average precision, so it
    equals ``score(gold, align_to_gold(lines, gold)).MAP`` without building and aligning lines each time."""

    def __init__(self, queries: list[Query], gold: list[Line]):
        where = {(q.id, c.id): (i, j) for i, q in enumerate(queries) for j, c in enumerate(q.candidates)}
        ids = {q.id for q in queries}
        self.questions: dict[str, tuple[int, list[int], list[bool]]] = {}
        for g in gold:
            if g.qid not in ids:
                continue
            if (g.qid, g.cid) not in where:
                raise BenchmarkError(f"the ranker produced no score for gold candidate ({g.qid}, {g.cid})")
            i, j = where[(g.qid, g.cid)]
            _, js, labels = self.questions.setdefault(g.qid, (i, [], []))
            js.append(j)
            labels.append(g.label)
        if not self.questions:
            raise ScoringError("nothing to score (no gold lines for these queries)")

    def __call__(self, scores: list) -> float:
        """MAP of ``scores`` (per query, one score per candidate, in the queries' order)."""
        return sum(ap for _, ap in self._aps(scores)) / len(self.questions)

    def per_question(self, scores: list) -> dict[str, float]:
        """Each gold question's average precision by ``scores``, as the official scorer ranks it (the input of a
        paired test)."""
        return dict(self._aps(scores))

    def _aps(self, scores: list):
        for qid, (i, js, labels) in self.questions.items():
            yield qid, average_precision(rank_by_score([(rel, float(scores[i][j])) for j, rel in zip(js, labels)]))


def map_of(queries: list[Query], scores: list[list[float]], gold: list[Line]) -> float:
    """Official MAP of these scores against the gold lines of these queries."""
    return GoldMAP(queries, gold)(scores)


def grid_search(queries: list[Query], part_scores: dict[str, list[list[float]]], gold: list[Line],
                grid: tuple[float, ...] = (0.0, 0.5, 1.0), method: str = "zscore") -> list[dict]:
    """Every weight setting of ``grid`` per part (not all zero) with its MAP, best first; between equal MAPs
    the one with fewer parts first. Each part's scores are made summable per query by ``method`` (a
    ``ranking.fusion.SCORE_TRANSFORMS`` name, as a fusion preset's ``method``)."""
    transform = SCORE_TRANSFORMS[method]
    parts = tuple(part_scores)
    z = {p: [transform(np.asarray(s, dtype=float)) for s in part_scores[p]] for p in parts}
    map_of_scores = GoldMAP(queries, gold)
    results = []
    for w in itertools.product(grid, repeat=len(parts)):
        if not any(w):
            continue
        fused = [sum(wi * z[p][i] for wi, p in zip(w, parts)) for i in range(len(queries))]
        results.append({"weights": dict(zip(parts, w)), "dev_MAP": map_of_scores(fused)})
    results.sort(key=lambda r: (-round(r["dev_MAP"], 6), sum(v > 0 for v in r["weights"].values())))
    return results
