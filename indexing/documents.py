"""The documents every index holds, in one row order: questions (subject + body) and answers."""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .models import Thread

QUESTION, ANSWER = "question", "answer"
FORMAT, VERSION, CHUNK = "documents", 2, 2000  # documents.json: a header line, then CHUNK documents a line


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
        """JSON lines: a header, then the columns of ``CHUNK`` documents a line. A service that goes live on a new
        generation reads it while it answers searches, and parsing one line holds Python's lock for a few ms where
        the whole file as one JSON value held it for 0.17 s at 235k documents (bench/generation_switch.py)."""
        n = len(self)
        lines = [json.dumps({"format": FORMAT, "version": VERSION, "documents": n, "chunk": CHUNK})]
        lines += [json.dumps({k: v[lo:lo + CHUNK] for k, v in self.__dict__.items()}, ensure_ascii=False)
                  for lo in range(0, n, CHUNK)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> "Documents":
        """What ``save`` wrote, a line at a time; or a file of one JSON object (generations built before round 18)."""
        with open(path, encoding="utf-8") as fh:
            head = json.loads(fh.readline())
            if head.get("format") != FORMAT:
                return cls(**head)
            docs = cls()
            columns = docs.__dict__
            for line in fh:
                for k, v in json.loads(line).items():
                    columns[k].extend(v)
        if any(len(v) != head["documents"] for v in columns.values()):
            raise ValueError(f"{path}: {head['documents']} documents announced, "
                             f"{sorted({len(v) for v in columns.values()})} read")
        return docs
