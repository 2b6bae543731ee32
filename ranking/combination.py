"""A small learned layer over ranker scores and forum signals: logistic regression on training data,
its regularisation chosen by dev MAP. Ranker scores are z-scored within each question."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .candidates import Query
from .fusion import zscore
from .signals import ALL_NAMES, NAMES, matrix

COMBINATION_FILE = Path(__file__).with_name("combination_A.json")
# name -> (file, ranker parts, signals, training files); see scripts/train_combination.py
COMBINATIONS = {
    "bilstm+signals": ("combination_A.json", ("bilstm", "bm25", "ir-baseline"), NAMES, "train"),
    "cross-encoder+signals": ("combination_cross_A.json", ("cross-encoder", "bi-encoder", "bm25", "ir-baseline"),
                              ALL_NAMES, "held-out"),
}


def combination_file(name: str) -> Path:
    return Path(__file__).with_name(COMBINATIONS[name][0])


def feature_matrix(queries: list[Query], parts, signals: tuple[str, ...] = NAMES) -> list[np.ndarray]:
    part_scores = [p.score(queries) for p in parts]
    out = []
    for qi, q in enumerate(queries):
        cols = [zscore(np.asarray(ps[qi], dtype=float)) for ps in part_scores]
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

    def score(self, queries: list[Query]) -> list[list[float]]:
        return [(X @ self.coef + self.intercept).tolist() for X in feature_matrix(queries, self.parts, self.signals)]
