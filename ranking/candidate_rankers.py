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
from indexing.lm import LMIndex
from indexing.termmatrix import TermMatrix
from indexing.text import Analyzer
from indexing.translation import TranslationTable

from .candidates import Query
from .fusion import minmax, zscore

log = logging.getLogger(__name__)

FUSION_PARTS = ("ir-baseline", "bm25", "lm", "translation-lm", "minilm-cosine")
FUSION_DEFAULTS = Path(__file__).with_name("candidate_fusion_defaults.json")


def fusion_weights() -> dict[str, float]:
    """Tuned on dev (scripts/tune_candidate_fusion.py); equal weights until tuned."""
    if FUSION_DEFAULTS.exists():
        return json.loads(FUSION_DEFAULTS.read_text(encoding="utf-8"))["weights"]
    return {n: 1.0 for n in FUSION_PARTS}


TRAIN_FILES = ("train/SemEval2016-Task3-CQA-QL-train-part2.xml",
               "train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskA.xml",
               "train2015/SemEval2015-Task3-CQA-QL-train-recovered-subtaskA.xml")


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
    semeval_dir: object = None
    name: str = "translation-lm"
    analyzer: Analyzer = field(default_factory=Analyzer)
    _table: TranslationTable | None = None

    def table(self) -> TranslationTable:
        if self._table is None:
            from indexing.loaders import load
            from indexing.translation import qa_pairs
            threads = [t for f in TRAIN_FILES for t in load(self.semeval_dir / f).threads]
            # answer -> question: the direction that scores a candidate (document) for a question (query)
            self._table = TranslationTable.train([(a, q) for q, a in qa_pairs(threads, self.analyzer)])
        return self._table

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


@dataclass
class FusedRanker:
    """Per-question fusion of several rankers' scores: z-score or min-max normalised weighted sum,
    or reciprocal rank fusion."""
    parts: list
    weights: list[float]
    method: str = "zscore"
    name: str = "fusion"

    def score(self, queries: list[Query]) -> list[list[float]]:
        per_ranker = [r.score(queries) for r in self.parts]
        out = []
        for qi in range(len(queries)):
            total = np.zeros(len(queries[qi].candidates))
            for w, scores in zip(self.weights, per_ranker):
                s = np.asarray(scores[qi], dtype=float)
                if self.method == "rrf":
                    ranks = np.empty(len(s))
                    ranks[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
                    total += w / (60 + ranks)
                else:
                    total += w * (zscore(s) if self.method == "zscore" else minmax(s))
            out.append(total.tolist())
        return out
