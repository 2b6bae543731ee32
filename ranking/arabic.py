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

import itertools
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexing.loaders import load_semeval
from indexing.text import Analyzer
from indexing.translation import TranslationTable

from .candidate_rankers import LexicalRanker, TranslationLMRanker
from .candidates import Candidate, Query
from .evaluation.measures import paired_randomization
from .evaluation.runner import align_to_gold, predictions
from .evaluation.scorer import Line, per_question_ap, read_lines, score
from .fusion import zscore

DEV_D = "arabic/SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.gz"
DEV_D_GOLD = "arabic/SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.relevancy"
# Arabic light normalisation (indexing/text.py) and Snowball's Arabic stemmer; English stopwords stay out too.
ARABIC = Analyzer(stemmer="arabic")
FOLDS, FOLD_SEED = 5, 2016
PARTS = ("ir-baseline", "bm25", "lm", "bm25-question", "translation-lm")
WEIGHT_GRID = (0.0, 0.5, 1.0, 2.0)


def d_queries(xml: Path) -> list[Query]:
    """One query per original question, its pairs in the search engine's order. A candidate's text is the pair's
    question and answer; ``question`` in its metadata is the pair's question alone."""
    doc = load_semeval(xml, strict=True)
    threads = {t.id: t for t in doc.threads}
    out = []
    for oq in doc.org_questions.values():
        cands = []
        for pos, tid in enumerate(oq.thread_ids, 1):
            t = threads[tid]
            answer = t.answers[0].text if t.answers else ""
            cands.append(Candidate(t.meta["qaid"], f"{t.body}\n{answer}", {"position": pos, "question": t.body,
                                                                             "answer": answer}))
        out.append(Query(oq.id, oq.body, tuple(cands)))
    return out


def folds_of(queries: list[Query], k: int = FOLDS, seed: int = FOLD_SEED) -> list[list[int]]:
    """Query indexes of each fold: the questions shuffled with a fixed seed, then dealt round robin."""
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    return [sorted(order[i::k]) for i in range(k)]


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


def _map(queries: list[Query], scores: list[list[float]], gold: list[Line]) -> float:
    ids = {q.id for q in queries}
    g = [x for x in gold if x.qid in ids]
    return score(g, align_to_gold(_pred(queries, scores), g)).MAP


def _pred(queries: list[Query], scores: list[list[float]]) -> list[Line]:
    class _Given:
        name = "given"

        def score(self, qs):
            by_id = {q.id: s for q, s in zip(queries, scores)}
            return [by_id[q.id] for q in qs]
    return predictions(queries, _Given())


def tune_fusion(queries: list[Query], part_scores: dict[str, list[list[float]]], gold: list[Line]) -> dict:
    """The weights (from WEIGHT_GRID, at least one non-zero) with the best MAP on these queries."""
    z = {p: [zscore(np.asarray(s, dtype=float)) for s in part_scores[p]] for p in PARTS}
    best, best_w = -1.0, None
    for w in itertools.product(WEIGHT_GRID, repeat=len(PARTS)):
        if not any(w):
            continue
        fused = [sum(wi * z[p][i] for wi, p in zip(w, PARTS)).tolist() for i in range(len(queries))]
        m = _map(queries, fused, gold)
        if m > best + 1e-12:
            best, best_w = m, w
    return {"weights": dict(zip(PARTS, best_w)), "train_MAP": best}


def run_cross_validation(semeval_dir: Path, progress: bool = False) -> dict:
    """Every ranker's MAP on all 250 dev questions, each question scored by what was fitted without its fold,
    with paired randomisation tests against the IR baseline. JSON-ready."""
    queries = d_queries(semeval_dir / DEV_D)
    gold = read_lines(semeval_dir / DEV_D_GOLD)
    lexical = {"bm25": LexicalRanker("bm25", "bm25", ARABIC), "lm": LexicalRanker("lm", "lm", ARABIC),
               "bm25-question": _QuestionField(LexicalRanker("bm25", "bm25-question", ARABIC))}
    # lexical scores need no training: term statistics from every candidate of the file (no labels)
    fixed = {name: r.score(queries) for name, r in lexical.items()}
    fixed["ir-baseline"] = [[-float(c.meta["position"]) for c in q.candidates] for q in queries]
    scores = {p: [None] * len(queries) for p in (*PARTS, "fusion")}
    for p, s in fixed.items():
        scores[p] = s
    fold_info = []
    for k, test_idx in enumerate(folds_of(queries)):
        test_set = set(test_idx)
        train_idx = [i for i in range(len(queries)) if i not in test_set]
        train_q = [queries[i] for i in train_idx]
        test_ids = {c.id for i in test_idx for c in queries[i].candidates}
        table = translation_table(train_q, test_ids)
        tlm = TranslationLMRanker(semeval_dir=semeval_dir, analyzer=ARABIC, _table=table)
        # the translation LM's collection statistics: the whole pool, as for the lexical rankers
        t_scores = tlm.score(queries)
        for i in test_idx:
            scores["translation-lm"][i] = t_scores[i]
        train_parts = {p: [fixed[p][i] if p in fixed else t_scores[i] for i in train_idx] for p in PARTS}
        tuned = tune_fusion(train_q, train_parts, gold)
        for i in test_idx:
            scores["fusion"][i] = sum(w * zscore(np.asarray(fixed[p][i] if p in fixed else t_scores[i], dtype=float))
                                      for p, w in tuned["weights"].items()).tolist()
        fold_info.append({"fold": k, "questions": len(test_idx), "translation_pairs": table.params.get("pairs", 0),
                          **tuned})
        if progress:
            print(f"fold {k + 1}/{FOLDS}: weights {tuned['weights']}", flush=True)
    base_ap = per_question_ap(gold, align_to_gold(_pred(queries, scores["ir-baseline"]), gold))
    rankers = {}
    for name in (*PARTS, "fusion"):
        pred = align_to_gold(_pred(queries, scores[name]), gold)
        official = score(gold, pred)
        ap = per_question_ap(gold, pred)
        keys = sorted(ap)
        rankers[name] = {"MAP": round(official.MAP, 4), "MRR": round(official.MRR, 3), "AvgRec": round(official.AvgRec, 4),
                         "p_vs_ir_baseline": None if name == "ir-baseline" else
                         round(paired_randomization([ap[q] for q in keys], [base_ap[q] for q in keys]), 4)}
    return {"benchmark": "semeval2016-dev-D", "protocol": f"{FOLDS}-fold cross-validation by original question "
            f"(seed {FOLD_SEED}) on the 2016 dev file", "questions": len(queries),
            "pairs": sum(len(q.candidates) for q in queries), "rankers": rankers, "folds": fold_info,
            "note": "the published 2016 subtask D results are on the test set, whose questions' text was not "
                    "released; they cannot be scored here and are not comparable with these dev figures"}
