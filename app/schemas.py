"""Request and response bodies. Unknown fields are refused everywhere."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from indexing.models import Thread

DATE = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Text lengths and list sizes are limited by the settings (CQA_MAX_TEXT_CHARS, CQA_MAX_CANDIDATES,
# CQA_MAX_THREADS_PER_REQUEST), checked in app/limits.py, so one number governs each limit.
class QuestionIn(Strict):
    subject: str = Field("", description="at most CQA_MAX_TEXT_CHARS characters")
    body: str = Field(..., description="at most CQA_MAX_TEXT_CHARS characters")

    @field_validator("body")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the question body must not be empty or whitespace")
        return v

    @property
    def text(self) -> str:
        return f"{self.subject}\n{self.body}".strip()

    def fields(self, prefix: str = "question"):
        return [(f"{prefix}.subject", self.subject), (f"{prefix}.body", self.body)]


class FiltersIn(Strict):
    category: str | None = Field(None, max_length=200)
    since: str | None = Field(None, pattern=DATE, description="ISO date or date-time, inclusive")
    until: str | None = Field(None, pattern=DATE, description="ISO date or date-time, inclusive")


class SearchIn(Strict):
    question: QuestionIn
    k: int = Field(10, ge=1, le=100)
    target: Literal["answers", "questions", "threads"] = "answers"
    filters: FiltersIn | None = None
    rerank: bool = True
    expand: bool | Literal["rm3", "translation"] | None = Field(
        None, description="query expansion: true = rm3, or name a method; default: the tuned retriever's")
    explain: bool = False


class CandidateIn(Strict):
    id: str = Field(..., min_length=1, max_length=200)
    text: str = Field(..., description="at most CQA_MAX_TEXT_CHARS characters")
    author_id: str | None = Field(None, max_length=200)
    created_at: str | None = Field(None, max_length=40)


class RerankIn(Strict):
    question: QuestionIn
    candidates: list[CandidateIn] = Field(..., min_length=1, description="at most CQA_MAX_CANDIDATES")

    @field_validator("candidates")
    @classmethod
    def _unique(cls, v: list[CandidateIn]) -> list[CandidateIn]:
        seen = set()
        for c in v:
            if c.id in seen:
                raise ValueError(f"candidate id {c.id!r} appears twice")
            seen.add(c.id)
        return v


class ThreadsIn(Strict):
    threads: list[Thread] = Field(..., min_length=1, description="at most CQA_MAX_THREADS_PER_REQUEST")


class EvaluationIn(Strict):
    benchmark: str = Field(..., max_length=100)
    ranker: str | None = Field(None, max_length=100)
