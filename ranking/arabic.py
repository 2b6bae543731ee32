"""Subtask D (Arabic medical cQA, SemEval-2016): rank the 30 or so (question, answer) pairs a search engine
returned for a new question, with 5-fold cross-validation on the 2016 dev file.

The dev file (250 questions, 7,384 pairs) is all the Arabic text there is: the test questions' text was never
released, so the published 2016 subtask D results (on test) cannot be scored here and nothing below compares
with them. Everything trained or tuned (the translation table, the fusion weights) is fitted on four folds of
dev questions and applied to the fifth; the folds split by original question. Term statistics (idf,
collection probabilities) come from the pool of every candidate in the file, as a search engine over that
forum would have them; no label is read for them.

Rankers: the IR baseline (the given order), BM25 and the Dirichlet LM with the Arabic analyzer over the whole
pair and over its question alone, the translation LM (IBM Model 1 learned within the folds), and their z-score
fusion with weights chosen on the training folds.
"""
from __future__ import annotations

import re
import threading
import weakref
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from indexing.bm25 import bm25_weight, idf_lucene
from indexing.loaders import LoadError, load_semeval
from indexing.termmatrix import TermMatrix
from indexing.text import ARABIC_CHAR, ARABIC_SCRIPT, Analyzer
from indexing.translation import TranslationTable

from .candidate_rankers import LexicalRanker, TranslationLMRanker
from .candidates import Candidate, Query
from .evaluation.measures import map_interval, paired_randomization
from .evaluation.runner import align_to_gold
from .evaluation.scorer import Line, per_question_ap, read_lines, score
from .evaluation.tuning import FOLD_SEED, FOLDS, folds_of, fused_scores, grid_search

# Arabic light normalisation (indexing/text.py) and Snowball's Arabic stemmer; English stopwords stay out too.
ARABIC = Analyzer(stemmer="arabic")
PARTS = ("ir-baseline", "bm25", "lm", "bm25-question", "translation-lm")
WEIGHT_GRID = (0.0, 0.5, 1.0, 2.0)
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_ARABIC_ONLY_LETTER = re.compile(f"(?={ARABIC_SCRIPT})[^\\W\\d_]")  # its letters: not its digits or punctuation


def arabic_share(texts) -> float:
    """The share of the letters of ``texts`` that are Arabic script (0.0 when there is no letter)."""
    letters = arabic = 0
    for t in texts:
        letters += len(_LETTER.findall(t or ""))
        arabic += len(_ARABIC_ONLY_LETTER.findall(t or ""))
    return arabic / letters if letters else 0.0


VOTING_CHARS = 500  # of each text, the first characters that vote: enough for a language, and a bound on the cost


def is_arabic_text(text: str) -> bool:
    """Whether most letters of a text's first ``VOTING_CHARS`` characters are Arabic script (a /search question)."""
    return arabic_share([text[:VOTING_CHARS]]) > 0.5


def is_arabic(q: Query) -> bool:
    """Whether most letters of a question and its candidates are Arabic script (the first ``VOTING_CHARS``
    characters of each text vote): POST /rerank then ranks them with $CQA_ARABIC_RANKER, as dev-D measured, not with
    the English models of the default ranker."""
    return arabic_share([q.text[:VOTING_CHARS], *(c.text[:VOTING_CHARS] for c in q.candidates)]) > 0.5


def as_read_by_arabic_ranker(q: Query, gen, thread_question: bool = False) -> Query:
    """``q`` as $CQA_ARABIC_RANKER reads it: the live generation ``gen`` in its metadata (the forum's statistics,
    ``ArabicBM25``), and with ``thread_question`` (POST /rerank/answers) each comment after its thread's question, as
    a dev-D question-answer pair is read."""
    cands = q.candidates
    if thread_question:
        cands = tuple(Candidate(c.id, f"{c.meta.get('thread_question') or ''}\n{c.text}", c.meta) for c in cands)
    return Query(q.id, q.text, cands, {**q.meta, "generation": gen})


def routed(q: Query, ranker, arabic_ranker, gen, thread_question: bool = False) -> tuple:
    """(the ranker that ranks ``q``, the query it reads): where an Arabic ranker is set ($CQA_ARABIC_RANKER) and
    ``q`` is Arabic (``is_arabic``), that ranker and ``q`` as it reads it (``as_read_by_arabic_ranker``); else
    ``ranker`` and ``q``. The rerank endpoints route so, and the evaluations of what they serve."""
    if arabic_ranker is not None and is_arabic(q):
        return arabic_ranker, as_read_by_arabic_ranker(q, gen, thread_question)
    return ranker, q


def restem(token: str) -> str:
    """A token of another analyzer with Arabic script in it stemmed by Snowball's Arabic stemmer (the analyzer of a
    generation built before round 25 normalises Arabic but stems every token as English, which leaves Arabic words
    whole); others as given."""
    return _arabic_stem(token) if ARABIC_CHAR.search(token) else token


@lru_cache(maxsize=200_000)  # the stems of the most recent Arabic terms (the dev-D forum has 60,839 terms in all)
def _arabic_stem(token: str) -> str:
    with _STEMMER_LOCK:  # a Snowball stemmer keeps its word in itself: one thread at a time
        return _arabic_stemmer().stemWord(token)


_STEMMER_LOCK = threading.Lock()


def _as_is(token: str) -> str:
    return token


@lru_cache(maxsize=1)
def _arabic_stemmer():
    import snowballstemmer
    return snowballstemmer.stemmer("arabic")


@dataclass
class ForumStatistics:
    """Term statistics of a forum's Arabic documents, from an index generation: the documents with a term in Arabic
    script, their number, mean length and each term's document frequency among them. A generation whose analyzer
    stems Arabic (``Analyzer.arabic_stem``, every build since round 25) holds Arabic stems already; an older one's
    Arabic terms are stemmed here (``restem``), and so are a text's tokens, so both count a text alike."""
    analyzer: Analyzer  # the generation's
    terms: TermMatrix  # the generation's
    n_docs: int
    avgdl: float
    _by_stem: dict[str, list[int]]  # a stem -> the generation's Arabic terms that restem to it
    _arabic_doc: np.ndarray  # bool per document

    @classmethod
    def of(cls, gen) -> "ForumStatistics":
        """The statistics of a loaded generation, computed once per generation (``ArabicBM25.prepare``, which the
        service runs as the generation goes live): a pass over its vocabulary."""
        stats = _FORUM_STATS.get(gen)
        if stats is None:
            terms = gen.terms
            by_stem: dict[str, list[int]] = {}
            stem = _as_is if gen.analyzer.arabic_stem else restem
            for j, t in enumerate(terms.vocab):
                if ARABIC_CHAR.search(t):
                    by_stem.setdefault(stem(t), []).append(j)
            arabic_terms = [j for ids in by_stem.values() for j in ids]
            for s, ids in by_stem.items():  # a stem out of Arabic script ("٢٨" -> "28") meets the term itself, as
                if s in terms.term_id and not ARABIC_CHAR.search(s):  # in a generation that stems Arabic
                    ids.append(terms.term_id[s])
            arabic_doc = terms.counts[:, arabic_terms].getnnz(axis=1) > 0
            n = int(arabic_doc.sum())
            stats = cls(gen.analyzer, terms, n, float(terms.doc_len[arabic_doc].mean()) if n else 0.0, by_stem,
                        arabic_doc)
            _FORUM_STATS[gen] = stats
        return stats

    def tokens(self, text: str) -> list[str]:
        return self.analyzer(text) if self.analyzer.arabic_stem else [restem(t) for t in self.analyzer(text)]

    def df(self, term: str) -> int:
        """Of the Arabic documents, how many hold the term (a stem, or a term in other script as the index has it)."""
        # a term in Arabic script that is no stem of the generation's (in one built before it stemmed Arabic, a
        # whole word that happens to be spelt as the stem asked for) holds no document with that stem
        whole = term in self.terms.term_id and (self.analyzer.arabic_stem or not ARABIC_CHAR.search(term))
        ids = self._by_stem.get(term) or ([self.terms.term_id[term]] if whole else [])
        if not ids:
            return 0
        return int(np.count_nonzero((self.terms.counts[:, ids].getnnz(axis=1) > 0) & self._arabic_doc))


_FORUM_STATS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # generation -> ForumStatistics


@dataclass
class ArabicBM25:
    """BM25 for Arabic input ($CQA_ARABIC_RANKER: POST /rerank, and the head of a /search whose question is Arabic).
    Its statistics (idf, mean length) come from the forum: the Arabic documents of the live generation the query
    carries (meta "generation"), the question and candidates read as the index reads them with Arabic words stemmed
    (``ForumStatistics``). A forum that knows fewer Arabic documents than the request has candidates (an English
    forum), or a query without a generation, takes them from the candidates given, with the Arabic analyzer
    (``ARABIC``), as ``LexicalRanker`` does."""
    name: str = "bm25-arabic"
    k1: float = 1.2
    b: float = 0.75
    per_query: bool = False  # set when served: the candidates' statistics then come from each request alone

    def prepare(self, gen) -> None:
        """What scoring with ``gen`` needs, computed now (the service calls it as the generation goes live)."""
        ForumStatistics.of(gen)

    def score(self, queries: list[Query]) -> list[list[float]]:
        out: list[list[float] | None] = [None] * len(queries)
        alone = []
        for i, q in enumerate(queries):
            gen = q.meta.get("generation")
            stats = ForumStatistics.of(gen) if gen is not None else None
            if stats is None or stats.n_docs < len(q.candidates):
                alone.append(i)
                continue
            qtf = Counter(stats.tokens(q.text))
            idf = {t: float(idf_lucene(stats.df(t), stats.n_docs)) for t in qtf}
            out[i] = [self._bm25(qtf, idf, stats.tokens(c.text), stats.avgdl) for c in q.candidates]
        if alone:
            fallback = LexicalRanker("bm25", self.name, ARABIC, per_query=self.per_query)
            for i, row in zip(alone, fallback.score([queries[i] for i in alone])):
                out[i] = row
        return out

    def _bm25(self, qtf: Counter, idf: dict[str, float], tokens: list[str], avgdl: float) -> float:
        tf = Counter(tokens)
        return sum(w * float(bm25_weight(tf[t], len(tokens), avgdl, idf[t], self.k1, self.b))
                   for t, w in qtf.items() if tf[t])


def d_queries(xml: Path) -> list[Query]:
    """One query per original question, its pairs in the search engine's order. A candidate's text is the pair's
    question and answer; ``question`` and ``answer`` in its metadata are each alone, ``thread_id`` and ``answer_id``
    the ids `cqa ingest` of the file gives them."""
    doc = load_semeval(xml, strict=True)
    threads = {t.id: t for t in doc.threads}
    if not doc.threads or any("qaid" not in t.meta for t in doc.threads):
        raise LoadError(xml, "the file", "not in the subtask D format (Question elements holding QApair elements, "
                        "each with a QAID); subtasks A, B and C take the English files")
    out = []
    for oq in doc.org_questions.values():
        cands = []
        for pos, tid in enumerate(oq.thread_ids, 1):
            t = threads[tid]
            answer = t.answers[0] if t.answers else None
            cands.append(Candidate(t.meta["qaid"], f"{t.body}\n{answer.text if answer else ''}", {
                "position": pos, "question": t.body, "answer": answer.text if answer else "", "thread_id": t.id,
                "answer_id": answer.id if answer else None}))
        out.append(Query(oq.id, oq.body, tuple(cands)))
    return out


def in_gold_order(lines: list[Line]) -> list[Line]:
    """Prediction lines in the order of the subtask D gold files: questions as the file gives them, each one's pairs
    by numeric QAID. The official scorer reads a prediction line by line beside the gold, so `cqa predict --subtask
    D` writes them so (and ties in score then fall as they do in ``run_cross_validation``, aligned to the gold)."""
    order = {q: i for i, q in enumerate(dict.fromkeys(ln.qid for ln in lines))}
    return sorted(lines, key=lambda ln: (order[ln.qid], (0, int(ln.cid), "") if ln.cid.isdigit() else (1, 0, ln.cid)))


@dataclass
class _QuestionField:
    """A lexical ranker over the pair's question alone."""
    inner: LexicalRanker
    name: str = "bm25-question"

    def score(self, queries: list[Query]) -> list[list[float]]:
        return self.inner.score([Query(q.id, q.text, tuple(Candidate(c.id, c.meta["question"], c.meta)
                                                           for c in q.candidates)) for q in queries])


def translation_table(train: list[Query], exclude: set[str], analyzer: Analyzer = ARABIC) -> TranslationTable:
    """IBM Model 1, t(question word | answer word), over the (pair question, pair answer) texts of the training
    folds' candidates; a pair that also appears under a test-fold question is left out."""
    seen, pairs = set(), []
    for q in train:
        for c in q.candidates:
            if c.id in exclude or c.id in seen:
                continue
            seen.add(c.id)
            pairs.append((analyzer(c.meta["answer"]), analyzer(c.meta["question"])))
    return TranslationTable.train(pairs)


def run_cross_validation(xml: Path, gold_path: Path, progress: bool = False) -> dict:
    """Every ranker's MAP on all the dev questions, each question scored by what was fitted without its fold,
    with paired randomisation tests against the IR baseline. JSON-ready."""
    queries, gold = d_queries(xml), read_lines(gold_path)
    # no training: term statistics from every candidate of the file (no labels), and the given order
    fixed = {"ir-baseline": [[-float(c.meta["position"]) for c in q.candidates] for q in queries],
             "bm25": LexicalRanker("bm25", "bm25", ARABIC).score(queries),
             "lm": LexicalRanker("lm", "lm", ARABIC).score(queries),
             "bm25-question": _QuestionField(LexicalRanker("bm25", "bm25-question", ARABIC)).score(queries)}
    scores = {**fixed, "translation-lm": [None] * len(queries), "fusion": [None] * len(queries)}
    fold_info = []
    for k, test_idx in enumerate(folds_of(queries)):
        test_set = set(test_idx)
        train_idx = [i for i in range(len(queries)) if i not in test_set]
        train_q = [queries[i] for i in train_idx]
        table = translation_table(train_q, {c.id for i in test_idx for c in queries[i].candidates})
        # its collection statistics come from the whole pool, as the lexical rankers'
        parts = {**fixed, "translation-lm": TranslationLMRanker(semeval_dir=xml.parent, analyzer=ARABIC,
                                                                _table=table).score(queries)}
        best = grid_search(train_q, {p: [parts[p][i] for i in train_idx] for p in PARTS}, gold, WEIGHT_GRID)[0]
        fused = fused_scores({p: [parts[p][i] for i in test_idx] for p in PARTS}, best["weights"])
        for i, f in zip(test_idx, fused):
            scores["translation-lm"][i], scores["fusion"][i] = parts["translation-lm"][i], f
        fold_info.append({"fold": k, "questions": len(test_idx), "translation_pairs": table.params.get("pairs", 0),
                          "weights": best["weights"], "train_MAP": best["dev_MAP"]})
        if progress:
            print(f"fold {k + 1}/{FOLDS}: weights {best['weights']}", flush=True)
    lines = {name: [Line(q.id, c.id, float(v), False) for q, row in zip(queries, s) for c, v in zip(q.candidates, row)]
             for name, s in scores.items()}
    base_ap = per_question_ap(gold, align_to_gold(lines["ir-baseline"], gold))
    rankers = {}
    for name in (*PARTS, "fusion"):
        pred = align_to_gold(lines[name], gold)
        official, ap = score(gold, pred), per_question_ap(gold, pred)
        keys = sorted(ap)
        p = None if name == "ir-baseline" else paired_randomization([ap[q] for q in keys], [base_ap[q] for q in keys])
        rankers[name] = {"MAP": round(official.MAP, 4), "MRR": round(official.MRR, 3),
                         "AvgRec": round(official.AvgRec, 4), "p_vs_ir_baseline": None if p is None else round(p, 4),
                         "MAP_interval_95": [round(v, 4) for v in map_interval(ap)]}
    return {"benchmark": "semeval2016-dev-D", "protocol": f"{FOLDS}-fold cross-validation by original question "
            f"(seed {FOLD_SEED}) on the 2016 dev file", "questions": len(queries),
            "pairs": sum(len(q.candidates) for q in queries), "rankers": rankers, "folds": fold_info,
            "note": "the published 2016 subtask D results are on the test set, whose questions' text was not "
                    "released; they cannot be scored here and are not comparable with these dev figures"}
