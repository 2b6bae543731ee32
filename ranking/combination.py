"""A small learned layer over ranker scores and forum signals: logistic regression on training data,
its regularisation chosen by dev MAP. Ranker scores are z-scored within each question.

Forum metadata is not always there. Each question is scored in the regime its input allows: who wrote each
comment is known ("users"), and the candidates come in their thread's order ("order": the caller says so, or
every candidate has a timestamp and they never go back in time; candidates of one thread in another order with
their timestamps are put back in the thread's order first, ``in_time_order``). A regime has its own weights, trained on the
training threads with that metadata removed and chosen on dev-A with it removed, and the features it lacks
(NEEDS) weigh nothing; so input without user ids or in a foreign order is ranked by what it does carry.

A layer's lexical parts (BM25) take their term statistics from each question's own candidates, as POST /rerank
does with the one thread it is given: the weights are trained, chosen and evaluated on the scores the service
computes (``part_scores``)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from indexing.models import moment

from .candidates import Candidate, Query
from .fusion import zscore
from .signals import ALL_NAMES, NAMES, matrix

COMBINATION_FILE = Path(__file__).with_name("combination_A.json")
# name -> (file, ranker parts, signals, training files); see scripts/train_combination.py
COMBINATIONS = {
    "bilstm+signals": ("combination_A.json", ("bilstm", "bm25", "ir-baseline"), NAMES, "train"),
    # closest-comment(-margin): what the texts say of a comment's place in the thread (round 31, rule 8)
    "cross-encoder+signals": ("combination_cross_A.json", ("cross-encoder", "bi-encoder", "bm25", "ir-baseline",
                                                           "closest-comment", "closest-comment-margin"),
                              ALL_NAMES, "held-out"),
}


# What each feature means only with: the thread's order, known users, or both.
NEEDS: dict[str, frozenset[str]] = {
    "ir-baseline": frozenset({"order"}), "position": frozenset({"order"}),
    "by_asker": frozenset({"users"}), "asker_unknown": frozenset({"users"}), "author_comments": frozenset({"users"}),
    "asker_next": frozenset({"users", "order"}), "asker_thanks_next": frozenset({"users", "order"}),
}
# regime -> the metadata it has, and the benchmark variant that removes the rest (for training and selection)
REGIMES: dict[str, tuple[frozenset[str], str | None]] = {
    "full": (frozenset({"users", "order"}), None),
    "no-users": (frozenset({"order"}), "nometa"),
    "no-order": (frozenset({"users"}), "shuffled-nodates"),  # no time either: the order is not recovered
    "none": (frozenset(), "nometa-shuffled-nodates"),
}


def in_thread_order(q: Query) -> bool:
    """The candidates come in their thread's order: ``thread_order`` in the query's metadata says so, or else
    every candidate has a timestamp and none is earlier than the one before."""
    said = q.meta.get("thread_order")
    if said is not None:
        return bool(said)
    stamps = [c.meta.get("created_at") for c in q.candidates]
    if not all(stamps):
        return False
    when = [moment(s) for s in stamps]  # times compared as times where they are ISO 8601, as time_order sorts them
    keys = when if all(w is not None for w in when) else stamps
    return all(a <= b for a, b in zip(keys, keys[1:]))


def time_order(q: Query) -> list[int] | None:
    """The thread's order of candidates that come in another (``thread_order`` false, or timestamps that go back in
    time), recovered from their timestamps: the candidate indices oldest first, ties in the order given. None where
    the order given is the thread's already, or cannot be recovered: a candidate without an ISO 8601 timestamp, or
    candidates of more than one thread."""
    if not q.candidates or in_thread_order(q):
        return None
    if len({c.meta.get("thread_id") for c in q.candidates}) > 1:
        return None
    stamps = [moment(c.meta.get("created_at")) for c in q.candidates]
    if any(t is None for t in stamps):
        return None
    return sorted(range(len(stamps)), key=lambda i: stamps[i])


def in_time_order(q: Query) -> tuple[Query, list[int] | None]:
    """The query as its thread ordered it, where ``time_order`` recovers that order: its candidates oldest first,
    each with its position in that order and no dialogue signals carried from the order given (they are read again
    from this one), said to be in thread order; and the order (None: the query as it is). A forum that lists a
    thread's comments newest first, or by votes, and sends their times gets the thread-order regime."""
    order = time_order(q)
    if order is None:
        return q, None
    cands = []
    for pos, i in enumerate(order, 1):
        c = q.candidates[i]
        cands.append(Candidate(c.id, c.text, {**{k: v for k, v in c.meta.items() if k != "dialogue"}, "position": pos}))
    return replace(q, candidates=tuple(cands), meta={**q.meta, "thread_order": True}), order


def scored_in_time_order(score, queries: list[Query]) -> list[list[float]]:
    """``score`` (a ranker's batch scoring) run on each query in its thread's order where ``in_time_order``
    recovers it; the scores come back in the order given."""
    pairs = [in_time_order(q) for q in queries]
    out = []
    for (_, order), s in zip(pairs, score([q for q, _ in pairs])):
        if order is None:
            out.append(s)
            continue
        back = [0.0] * len(order)
        for j, i in enumerate(order):
            back[i] = s[j]
        out.append(back)
    return out


def regime_of(q: Query) -> str:
    asker = q.meta.get("author_id") or any(c.meta.get("asker_id") for c in q.candidates)
    users = bool(asker) and all(c.meta.get("author_id") for c in q.candidates)
    order = in_thread_order(q) or time_order(q) is not None
    return {(True, True): "full", (False, True): "no-users", (True, False): "no-order"}.get((users, order), "none")


def regime_mask(features: list[str] | tuple[str, ...], regime: str) -> np.ndarray:
    """1 for the features a regime has, 0 for those it lacks."""
    has = REGIMES[regime][0]
    return np.array([float(NEEDS.get(f, frozenset()) <= has) for f in features])


def combination_file(name: str) -> Path:
    return Path(__file__).with_name(COMBINATIONS[name][0])


def good_labels(semeval_dir: Path, files: tuple[str, ...] | list[str]) -> dict[str, dict[str, bool]]:
    """File -> comment id -> the comment is Good: a layer's training labels. Keyed by file first, since comment ids
    repeat across the training files (2015 train and 2015 dev share thread ids, with other threads and comments)."""
    from indexing.loaders import load
    return {f: {a.id: a.label == "Good" for t in load(semeval_dir / f).threads for a in t.answers} for f in files}


def part_scores(part, queries: list[Query]) -> list[list[float]]:
    """A part's scores as the service computes them: a lexical part (BM25) one question at a time, so its term
    statistics come from that question's own candidates and never from the others scored with it."""
    if hasattr(part, "per_query"):
        return [part.score([q])[0] for q in queries]
    return part.score(queries)


def feature_matrix(queries: list[Query], parts, signals: tuple[str, ...] = NAMES) -> list[np.ndarray]:
    scores = [part_scores(p, queries) for p in parts]
    out = []
    for qi, q in enumerate(queries):
        cols = [zscore(np.asarray(ps[qi], dtype=float)) for ps in scores]
        out.append(np.column_stack(cols + [matrix(q, signals)]) if q.candidates
                   else np.zeros((0, len(parts) + len(signals))))
    return out


@dataclass
class LearnedCombination:
    parts: list
    coef: np.ndarray
    intercept: float = 0.0
    name: str = "combination"
    info: dict = field(default_factory=dict)
    signals: tuple[str, ...] = NAMES
    # regime -> its (weights, intercept); a regime not listed uses ``coef`` and ``intercept``
    regimes: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)

    def weights_for(self, q: Query) -> tuple[np.ndarray, float]:
        r = regime_of(q) if self.regimes else "full"
        return self.regimes.get(r, (self.coef, self.intercept))

    def score(self, queries: list[Query]) -> list[list[float]]:
        return scored_in_time_order(self._score, queries)

    def _score(self, queries: list[Query]) -> list[list[float]]:
        out = []
        for q, X in zip(queries, feature_matrix(queries, self.parts, self.signals)):
            w, b = self.weights_for(q)
            out.append((X @ w + b).tolist())
        return out
