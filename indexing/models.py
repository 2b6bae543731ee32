"""The thread model: the unit the store holds and the loaders produce."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Labels as the SemEval sources spell them; kept verbatim.
ANSWER_LABELS = ("Good", "PotentiallyUseful", "Bad")
QUESTION_LABELS = ("PerfectMatch", "Relevant", "Irrelevant")


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    text: str
    created_at: str | None = None
    author_id: str | None = None
    label: str | None = Field(None, description="Relevance to its own thread's question, if judged.")
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _strip_id(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("answer id must not be blank")
        return v


class Thread(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    subject: str = ""
    body: str = ""
    category: str | None = None
    created_at: str | None = None
    author_id: str | None = None
    answers: list[Answer] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict,
                                 description="Source-specific facts, e.g. SemEval's ORGQ relation.")

    @field_validator("id")
    @classmethod
    def _strip_id(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("thread id must not be blank")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Thread":
        if not (self.subject.strip() or self.body.strip()):
            raise ValueError(f"thread {self.id!r} has neither subject nor body")
        seen: set[str] = set()
        for a in self.answers:
            if a.id in seen:
                raise ValueError(f"thread {self.id!r} has answer id {a.id!r} twice")
            seen.add(a.id)
        return self

    @property
    def question_text(self) -> str:
        return f"{self.subject}\n{self.body}".strip()

    def content_hash(self) -> str:
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()
