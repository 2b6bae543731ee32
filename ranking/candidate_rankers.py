"""Rankers that order the candidates a task gives (SemEval A, B, C) with the lexical models, the
translation language model, and fusions of them with the MiniLM cosine.

Term statistics (idf, collection probabilities) come from the pool of every candidate in the
file, as a search engine over that forum would have them; no label is read. The translation
table is learned from the training files only (unlabelled question-answer pairs).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexing.bm25 import BM25Index
from indexing.catalog import TRANSLATION_TRAIN_FILES
from indexing.lm import LMIndex
from indexing.termmatrix import TermMatrix
from indexing.text import Analyzer
from indexing.translation import TranslationTable

from .candidates import Query
from .fusion import SCORE_TRANSFORMS

log = logging.getLogger(__name__)

FUSION_PARTS = ("ir-baseline", "bm25", "lm", "translation-lm", "minilm-cosine")
FUSION_DEFAULTS = Path(__file__).with_name("candidate_fusion_defaults.json")


def fusion_weights() -> dict[str, float]:
    """Tuned on dev (scripts/tune_candidate_fusion.py); equal weights until tuned."""
    if FUSION_DEFAULTS.exists():
        return json.loads(FUSION_DEFAULTS.read_text(encoding="utf-8"))["weights"]
    return {n: 1.0 for n in FUSION_PARTS}




class _Pool:
    """One term matrix over every candidate of a benchmark; rows follow the queries' candidates."""

    def __init__(self, queries: list[Query], analyzer: Analyzer):
        self.analyzer = analyzer
        self.doc_tokens = [analyzer(c.text) for q in queries for c in q.candidates]
        self.terms = TermMatrix.build(self.doc_tokens)
        self.offsets = np.cumsum([0] + [len(q.candidates) for q in queries])


@dataclass
class LexicalRanker:
    """BM25 or query likelihood of the question against each candidate."""
    model: str = "bm25"
    name: str = "bm25"
    analyzer: Analyzer = field(default_factory=Analyzer)
    per_query: bool = False  # term statistics from each query's own candidates (the service's batches)

    def score(self, queries: list[Query]) -> list[list[float]]:
        if self.per_query and len(queries) > 1:
            return [self.score([q])[0] for q in queries]
        pool = _Pool(queries, self.analyzer)
        index = BM25Index.build(pool.terms, idf="lucene") if self.model == "bm25" else LMIndex(pool.terms, mu=1000)
        out = []
        for i, q in enumerate(queries):
            s = index.scores(self.analyzer(q.text))
            out.append(s[pool.offsets[i]:pool.offsets[i + 1]].tolist())
        return out


def translation_lm_scores(q_tokens: list[str], doc_tokens: list[str], table: TranslationTable,
                          p_collection, beta: float = 0.5, lam: float = 0.2) -> float:
    """Translation-based language model (Xue, Jeon and Croft 2008):
    log p(q|d) = sum_w log((1 - lam) [beta sum_t T(w|t) P_ml(t|d) + (1 - beta) P_ml(w|d)] + lam P(w|C))."""
    if not doc_tokens:
        return float(sum(np.log(lam * max(p_collection(w), 1e-9)) for w in q_tokens))
    counts: dict[str, int] = {}
    for t in doc_tokens:
        counts[t] = counts.get(t, 0) + 1
    n = len(doc_tokens)
    src = np.zeros(len(table.src_vocab))
    for t, c in counts.items():
        j = table.src_id.get(t)
        if j is not None:
            src[j] = c / n
    trans = table.table.T @ src  # p_tr(w|d) for every target word
    total = 0.0
    for w in q_tokens:
        pc = p_collection(w)
        if pc <= 0:
            continue
        j = table.tgt_id.get(w)
        p_tr = float(trans[j]) if j is not None else 0.0
        p_ml = counts.get(w, 0) / n
        total += np.log((1 - lam) * (beta * p_tr + (1 - beta) * p_ml) + lam * pc)
    return float(total)


@dataclass
class TranslationLMRanker:
    semeval_dir: Path
    cache_dir: Path | None = None  # the trained table is kept here, keyed by the training files' content
    name: str = "translation-lm"
    analyzer: Analyzer = field(default_factory=Analyzer)
    _table: TranslationTable | None = field(default=None, repr=False)

    def table(self) -> TranslationTable:
        if self._table is None:
            self._table = self._load_or_train()
        return self._table

    def _load_or_train(self) -> TranslationTable:
        import hashlib

        from indexing.loaders import file_digest, load
        from indexing.translation import qa_pairs
        key = hashlib.sha256(json.dumps([[file_digest(self.semeval_dir / f) for f in TRANSLATION_TRAIN_FILES],
                                         self.analyzer.to_dict()]).encode()).hexdigest()[:16]
        cached = self.cache_dir / f"translation-aq-{key}" if self.cache_dir else None
        if cached is not None and (cached / "manifest.json").exists():
            return TranslationTable.load(cached)
        threads = [t for f in TRANSLATION_TRAIN_FILES for t in load(self.semeval_dir / f).threads]
        # answer -> question: the direction that scores a candidate (document) for a question (query)
        table = TranslationTable.train([(a, q) for q, a in qa_pairs(threads, self.analyzer)])
        if cached is not None:
            table.save(cached)
        return table

    def score(self, queries: list[Query]) -> list[list[float]]:
        pool = _Pool(queries, self.analyzer)
        table = self.table()
        lm = LMIndex(pool.terms)

        def p_c(w: str) -> float:
            j = pool.terms.term_id.get(w)
            return float(lm.p_collection[j]) if j is not None else 0.0
        out = []
        for i, q in enumerate(queries):
            qt = self.analyzer(q.text)
            docs = pool.doc_tokens[pool.offsets[i]:pool.offsets[i + 1]]
            out.append([translation_lm_scores(qt, d, table, p_c) for d in docs])
        return out


def in_search_order(q: Query) -> bool:
    """The candidates (or C's threads) come in the order of the search that found them (the SemEval files' IR order),
    unless the query's metadata says ``search_order`` false (POST /rerank/questions or /rerank/answers with
    ``search_order: false``, the unordered benchmarks)."""
    return q.meta.get("search_order") is not False


def order_weights(q: Query, ordered, unordered):
    """The weights that rank ``q``: ``unordered`` when its candidates come in no search order and there are such
    weights, ``ordered`` otherwise (FusedRanker, RelatedAnswersRanker)."""
    return ordered if unordered is None or in_search_order(q) else unordered


@dataclass
class FusedRanker:
    """Per-question fusion of several rankers' scores: z-score or min-max normalised weighted sum,
    or reciprocal rank fusion. ``unordered_weights`` (one per part) rank a question whose candidates come in no
    search order (``in_search_order``); without them every question takes ``weights``. A part is scored only
    for the questions whose weights use it."""
    parts: list
    weights: list[float]
    method: str = "zscore"
    name: str = "fusion"
    unordered_weights: list[float] | None = None
    # A part's say for a candidate it has no evidence for (``without_evidence``: a thread without comments for the parts
    # that read what answered it). None: its score as given, normalised with the others'. A number: the part's
    # normalised value for such a candidate, its other candidates normalised among themselves (0.0: no say either
    # way; below 0, a penalty of that many of the others' standard deviations under z-score fusion).
    missing: float | None = None

    def score(self, queries: list[Query]) -> list[list[float]]:
        transform = SCORE_TRANSFORMS[self.method]
        weights = [order_weights(q, self.weights, self.unordered_weights) for q in queries]
        out = [np.zeros(len(q.candidates)) for q in queries]
        for j, part in enumerate(self.parts):
            used = [i for i, w in enumerate(weights) if w[j]]
            if not used:
                continue
            scores = part.score([queries[i] for i in used])
            blind = getattr(part, "without_evidence", None) if self.missing is not None else None
            for i, row in zip(used, scores):
                row = np.asarray(row, dtype=float)
                if blind is None:
                    out[i] = out[i] + weights[i][j] * transform(row)
                    continue
                seen = ~blind(queries[i])  # normalised among the candidates it has evidence for
                part_row = np.full(len(row), float(self.missing))
                part_row[seen] = transform(row[seen])
                out[i] = out[i] + weights[i][j] * part_row
        return [row.tolist() for row in out]


@dataclass
class ByComments:
    """Two rankers of the same candidates: ``parts[0]`` for a question any of whose candidates carries its thread's
    comments, ``parts[1]`` for one whose candidates carry none (nothing for a part that reads them), each question
    scored by its own, batched. With ``stored_only``, ``parts[0]`` ranks a question only where reading its candidates'
    comments costs nothing but the new question: each candidate that carries comments carries their stored vectors by
    every comment reader in ``parts[0]`` (``rankers.comment_readers``; ``AnswersModel.stored``: a live generation
    that indexes the thread with exactly those comments hands them over, ``SearchPipeline.comment_meta``; a reader
    that cannot say counts as encoding them); any other goes to ``parts[1]``."""
    parts: list  # [with comments, without]
    name: str = "by-comments"
    stored_only: bool = False

    def __post_init__(self):
        from .rankers import comment_readers
        self._readers = comment_readers(self.parts[0])  # found once: serving sets the parts up in place

    def route(self, q: Query):
        """The ranker that scores ``q``."""
        from .rankers import without_comments
        if without_comments(q).all():
            return self.parts[1]
        answered = [c for c in q.candidates if c.meta.get("comments")]
        if self.stored_only and not all(hasattr(r, "stored") and r.stored(c) for r in self._readers for c in answered):
            return self.parts[1]
        return self.parts[0]

    def score(self, queries: list[Query]) -> list[list[float]]:
        routes = [self.route(q) for q in queries]
        out: list[list[float] | None] = [None] * len(queries)
        for ranker in self.parts:
            idx = [i for i, r in enumerate(routes) if r is ranker]
            if idx:
                for i, row in zip(idx, ranker.score([queries[i] for i in idx])):
                    out[i] = row
        return out
