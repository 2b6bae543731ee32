"""A serving model's scores of (question, answer) text pairs, kept in memory so that a thread sorted again (a
page shown twice, a thread with one new comment) costs the model only the pairs it has not scored yet.

The evaluation runs keep their scores in SQLite instead (``ranking.neural.ranker.cached_scores``); a serving
process keeps them here, bounded: the least recently used pair goes first once ``capacity`` is reached.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable


def pair_key(question: str, answer: str) -> bytes:
    """16 bytes that stand for the pair's two texts (BLAKE2b; the texts themselves are not kept)."""
    q = question.encode("utf-8", "surrogatepass")
    h = hashlib.blake2b(digest_size=16)
    h.update(len(q).to_bytes(8, "little"))  # where the question ends: ("a\0", "b") and ("a", "\0b") differ
    h.update(q)
    h.update(answer.encode("utf-8", "surrogatepass"))
    return h.digest()


@dataclass
class ScoreMemo:
    """Scores by pair, least recently used dropped first; safe to share between threads. A model call sees
    only the pairs the memo lacks, each once, and runs outside the lock. (A serving bi-encoder keeps its recent
    questions' vectors in one too, keyed by (question, "").)"""
    capacity: int
    hits: int = 0
    misses: int = 0
    _scores: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"a score memo holds at least one pair, not {self.capacity}")

    def scores(self, pairs: list[tuple[str, str]], compute: Callable[[list[tuple[str, str]]], list[float]]) -> list[float]:
        keys = [pair_key(q, a) for q, a in pairs]
        known: dict[bytes, float] = {}
        with self._lock:
            for k in keys:
                if k in self._scores:
                    self._scores.move_to_end(k)
                    known[k] = self._scores[k]
        todo = {k: p for k, p in zip(keys, pairs) if k not in known}  # each new pair once
        fresh = dict(zip(todo, compute(list(todo.values())))) if todo else {}
        with self._lock:
            self.misses += len(fresh)  # pairs the model scored
            self.hits += len(keys) - len(fresh)  # pairs answered without it
            for k, v in fresh.items():
                self._scores[k] = v
                self._scores.move_to_end(k)
            while len(self._scores) > self.capacity:
                self._scores.popitem(last=False)
        return [known[k] if k in known else fresh[k] for k in keys]

    def stats(self) -> dict:
        with self._lock:
            return {"pairs": len(self._scores), "capacity": self.capacity, "hits": self.hits, "misses": self.misses}
