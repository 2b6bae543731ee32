"""The documents every index holds, in one row order: questions (subject + body) and answers."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .models import Thread

QUESTION, ANSWER = "question", "answer"


def question_doc_id(thread_id: str) -> str:
    return f"q:{thread_id}"


def answer_doc_id(answer_id: str) -> str:
    return f"a:{answer_id}"


@dataclass
class Documents:
    ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    thread_ids: list[str] = field(default_factory=list)
    categories: list[str | None] = field(default_factory=list)
    created_at: list[str | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_threads(cls, threads: Iterable[Thread]) -> "Documents":
        d = cls()
        for t in threads:
            d._add(question_doc_id(t.id), QUESTION, t.id, t.category, t.created_at, t.question_text)
            for a in t.answers:
                d._add(answer_doc_id(a.id), ANSWER, t.id, t.category, a.created_at or t.created_at, a.text)
        return d

    def _add(self, did, kind, tid, cat, created, text) -> None:
        self.ids.append(did)
        self.kinds.append(kind)
        self.thread_ids.append(tid)
        self.categories.append(cat)
        self.created_at.append(created)
        self.texts.append(text)

    def answer_rows(self) -> list[int]:
        """The rows that are comments, in order: what the answer encoder encodes."""
        return [i for i, k in enumerate(self.kinds) if k == ANSWER]

    def counts(self) -> dict[str, int]:
        q = sum(k == QUESTION for k in self.kinds)
        return {"total": len(self), "questions": q, "answers": len(self) - q}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.__dict__, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> "Documents":
        return cls(**json.loads(path.read_text(encoding="utf-8")))
