"""What a reranker sees: a question and the candidates to order for it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Candidate:
    id: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    candidates: tuple[Candidate, ...]
    meta: dict[str, Any] = field(default_factory=dict)
