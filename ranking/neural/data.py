"""Training data for answer selection: (question, good answer, bad answer) triplets of subtask A."""
from __future__ import annotations

import random
from dataclasses import dataclass

from indexing.models import Thread

DEV_BENCHMARK = "semeval2016-dev-A"


@dataclass(frozen=True)
class Group:
    """One question with its good and bad answers (token ids)."""
    question: list[int]
    good: list[list[int]]
    bad: list[list[int]]


def groups_from_threads(threads: list[Thread], encode, max_q: int, max_a: int) -> list[Group]:
    usable = [t for t in threads if any(a.label == "Good" for a in t.answers)
              and any(a.label in ("Bad", "PotentiallyUseful") for a in t.answers)]
    q_ids = encode([t.question_text for t in usable], max_q)
    out = []
    for t, q in zip(usable, q_ids):
        good = [a.text for a in t.answers if a.label == "Good"]
        bad = [a.text for a in t.answers if a.label in ("Bad", "PotentiallyUseful")]
        out.append(Group(q, encode(good, max_a), encode(bad, max_a)))
    return out


def triplets(groups: list[Group], rng: random.Random, negatives: int = 1) -> list[tuple[list[int], list[int], list[int]]]:
    """Every good answer with ``negatives`` bad answers of its own thread, shuffled."""
    out = []
    for g in groups:
        for a in g.good:
            for _ in range(negatives):
                out.append((g.question, a, rng.choice(g.bad)))
    rng.shuffle(out)
    return out
