"""The SemEval-2016 Task 3 official scorer's arithmetic, reproduced exactly.

Gold and prediction files hold ``qid  candidate_id  rank  score  true|false`` lines. The
prediction is read beside the gold line by line (ids must match; reading stops at the end of
the shorter file); each question's candidates are sorted by score, descending, with a stable
sort; only the top 10 count; a question with no relevant candidate keeps AP = RR = 0.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

TOP = 10


class ScoringError(Exception):
    """A prediction or gold file that cannot be scored; the message says which line and why."""


@dataclass(frozen=True)
class Line:
    qid: str
    cid: str
    score: float
    label: bool


def read_lines(path: Path | str) -> list[Line]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            parts = raw.split()
            if len(parts) != 5:
                raise ScoringError(f"{path}: line {n}: expected 5 fields "
                                   f"(qid, candidate id, rank, score, true|false), got {len(parts)}: {raw.strip()[:80]!r}")
            qid, cid, _rank, score, label = parts
            try:
                value = float(score)
            except ValueError:
                raise ScoringError(f"{path}: line {n}: score {score!r} is not a number") from None
            if label.lower() not in ("true", "false"):
                raise ScoringError(f"{path}: line {n}: label {label!r} must be 'true' or 'false'")
            out.append(Line(qid, cid, value, label.lower() == "true"))
    return out


@dataclass
class Scores:
    MAP: float
    AvgRec: float
    MRR: float
    P: float
    R: float
    F1: float
    Acc: float
    questions: int
    lines: int

    def official(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("MAP", "AvgRec", "MRR", "P", "R", "F1", "Acc")}


def average_precision(ranked_relevance: list[bool], top: int = TOP) -> float:
    """Mean of precision@k over the ranks k <= top holding a relevant candidate (SemEval ev.py)."""
    hits, precisions = 0, []
    for i, rel in enumerate(ranked_relevance[:top]):
        if rel:
            hits += 1
            precisions.append(hits / (i + 1))
    return sum(precisions) / len(precisions) if precisions else 0.0


def reciprocal_rank(ranked_relevance: list[bool], top: int = TOP) -> float:
    for i, rel in enumerate(ranked_relevance[:top]):
        if rel:
            return 1.0 / (i + 1)
    return 0.0


def rank_by_score(pairs: list[tuple[bool, float]]) -> list[bool]:
    """Relevance flags sorted by score, descending; ties keep file order (Python's sort is stable)."""
    return [rel for rel, _ in sorted(pairs, key=lambda p: p[1], reverse=True)]


def per_question_ap(gold: list[Line], pred: list[Line]) -> dict[str, float]:
    ranked = ranked_by_question(gold, pred)
    return {q: average_precision(r) for q, r in ranked.items()}


def ranked_by_question(gold: list[Line], pred: list[Line]) -> "OrderedDict[str, list[bool]]":
    """Each question's gold labels in the order of the prediction's scores (``rank_by_score``), questions in file
    order: what every figure is computed from."""
    by_q: OrderedDict[str, list[tuple[bool, float]]] = OrderedDict()
    for g, p in zip(gold, pred):
        by_q.setdefault(g.qid, []).append((g.label, p.score))
    return OrderedDict((q, rank_by_score(v)) for q, v in by_q.items())


def check_alignment(gold: list[Line], pred: list[Line], pred_name: str = "prediction") -> None:
    for n, (g, p) in enumerate(zip(gold, pred), 1):
        if g.qid != p.qid or g.cid != p.cid:
            raise ScoringError(f"{pred_name}: line {n}: ids ({p.qid}, {p.cid}) do not match the gold "
                               f"({g.qid}, {g.cid}); the prediction must list the gold's candidates in the gold's order")
    if len(pred) < len(gold):
        log.warning("%s has %d lines, the gold %d: scoring the first %d lines only, as the official scorer does",
                    pred_name, len(pred), len(gold), len(pred))
    elif len(pred) > len(gold):
        log.warning("%s has %d lines, the gold only %d: the extra lines are ignored", pred_name, len(pred), len(gold))


def score(gold: list[Line], pred: list[Line], pred_name: str = "prediction") -> Scores:
    """All seven official figures for a prediction aligned with its gold."""
    check_alignment(gold, pred, pred_name)
    n = min(len(gold), len(pred))
    if n == 0:
        raise ScoringError(f"{pred_name}: nothing to score (no lines)")
    ranked = ranked_by_question(gold, pred)
    nq = len(ranked)
    map_ = sum(average_precision(r) for r in ranked.values()) / nq
    mrr = 100.0 * sum(reciprocal_rank(r) for r in ranked.values()) / nq
    # AvgRec: mean over k = 1..10 of (relevant in top k) / (relevant a perfect ranking puts in top k).
    found = [0] * TOP
    best = [0] * TOP
    for r in ranked.values():
        total_rel = sum(r)
        for k in range(TOP):
            found[k] += sum(r[: k + 1])
            best[k] += min(k + 1, total_rel)
    avgrec = sum(f / b for f, b in zip(found, best) if b) / TOP
    tp = fp = fn = tn = 0
    for g, p in zip(gold, pred):
        if p.label and g.label:
            tp += 1
        elif p.label:
            fp += 1
        elif g.label:
            fn += 1
        else:
            tn += 1
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    acc = (tp + tn) / n
    return Scores(map_, avgrec, mrr, prec, rec, f1, acc, questions=nq, lines=n)


def score_files(gold_path: Path | str, pred_path: Path | str) -> Scores:
    return score(read_lines(gold_path), read_lines(pred_path), pred_name=str(pred_path))


def parse_score_report(path: Path | str) -> dict[str, float]:
    """The ``ALL SCORES`` line of an official ``.score`` report."""
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("ALL SCORES:"):
            vals = [float(x) for x in line.split(":", 1)[1].split()]
            return dict(zip(("MAP", "AvgRec", "MRR", "P", "R", "F1", "Acc"), vals))
    raise ScoringError(f"{path}: no 'ALL SCORES:' line")
