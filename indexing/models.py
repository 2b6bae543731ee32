"""The thread model: the unit the store holds and the loaders produce."""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


def invalid_unicode(value: Any, path: str) -> str | None:
    """Where ``value`` (a string, or dicts and lists of them, keys included) holds text that is not valid Unicode:
    an unpaired surrogate, which a JSON escape such as \\ud800 can carry but no UTF-8 text (the store, the
    analyzers, a response) can. None when it is all valid; else the path and the offending code point."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            return f"{path} has an unpaired surrogate (U+{ord(value[e.start]):04X} at character {e.start})"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            bad = invalid_unicode(k, f"{path} key") or invalid_unicode(v, f"{path}.{ascii(k)[1:-1]}")
            if bad:
                return bad
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            bad = invalid_unicode(v, f"{path}[{i}]")
            if bad:
                return bad
    return None


def moment(stamp) -> datetime | None:
    """An ISO 8601 timestamp (``2013-06-11 09:28:51``, ``2013-06-11T09:28:51Z``...) as a naive UTC datetime; None
    if it is missing or not one."""
    if isinstance(stamp, datetime):
        t = stamp
    else:
        try:
            t = datetime.fromisoformat(str(stamp).strip())
        except ValueError:
            return None
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


MAX_TAGS = 50  # of one thread: more are not a forum's tags (StackExchange allows 5)
MAX_TAG_CHARS = 100


def tag_key(tag: str) -> str:
    """A tag as a filter compares it: its words' spacing collapsed and case folded (``Python``, `` python `` and
    ``PYTHON`` are one tag)."""
    return " ".join(str(tag).split()).casefold()


def alternatives(text: str) -> tuple[str, ...]:
    """Tags joined by a bar (``a|b``, a query's ``tag_group`` or `cqa search --tag-group`), each stripped, once each,
    in order (an empty one kept, for the caller to refuse)."""
    return tuple(dict.fromkeys(t.strip() for t in text.split("|")))


SYNONYMS_LINE_KEY = "tag_synonyms"


def synonyms_line(synonyms: dict[str, str]) -> str:
    """A store's tag synonyms (synonym -> target) as a line of an export (docs/data-format.md, "The tag synonyms
    line"), read back by ``synonyms_of``."""
    return json.dumps({SYNONYMS_LINE_KEY: dict(sorted(synonyms.items()))}, ensure_ascii=False,
                      separators=(",", ":")) + "\n"


def is_synonyms(obj: object) -> bool:
    """Whether a parsed JSONL record is a tag synonyms line (an object whose one key is ``tag_synonyms``), not a
    thread."""
    return isinstance(obj, dict) and len(obj) == 1 and SYNONYMS_LINE_KEY in obj


def is_synonyms_line(line: str) -> bool:
    """Whether a line of an export is its tag synonyms line (readable or not)."""
    try:
        return is_synonyms(json.loads(line))
    except ValueError:
        return False


def synonyms_of(obj: dict) -> dict[str, str]:
    """The synonyms a tag synonyms line holds, each tag as ``tag_key`` compares it; ``ValueError`` saying what is
    wrong where they are not what a store can hold (a synonym of itself, a target that is a synonym, an empty tag)."""
    raw = obj[SYNONYMS_LINE_KEY]
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError("a tag synonyms line maps each synonym (a string) to its target tag (a string)")
    out = {tag_key(k): tag_key(v) for k, v in raw.items()}
    if len(out) < len(raw):
        raise ValueError("a tag synonyms line names a synonym twice (as tags compare: case and spacing aside)")
    for k, v in out.items():
        if not k or not v:
            raise ValueError(f"a tag synonym needs a source and a target tag: {k!r} -> {v!r}")
        if k == v:
            raise ValueError(f"{k!r} cannot be a synonym of itself")
        if v in out:
            raise ValueError(f"{v!r} is a target and a synonym (of {out[v]!r}): a target is a tag of its own")
    return out


def thread_tags(raw: Any) -> tuple[str, ...]:
    """A thread's tags as ``meta["tags"]`` holds them (a StackExchange dump's, or a forum's JSONL): a list of strings,
    or one string for one tag; each as ``tag_key`` compares it, once each, sorted. What is not a string, and a tag
    that is empty or longer than MAX_TAG_CHARS, is not a tag; past MAX_TAGS, the rest are not read."""
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, (list, tuple)) else ()
    keys = {tag_key(t) for t in items[:MAX_TAGS] if isinstance(t, str)}
    return tuple(sorted(k for k in keys if k and len(k) <= MAX_TAG_CHARS))


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


def question_text(subject: str, body: str) -> str:
    """A question as every index, ranker and search reads it: its subject, then its body."""
    return f"{subject}\n{body}".strip()


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
    revision: int | None = Field(None, ge=0, le=2**63 - 1, strict=True, description=(
        "The forum's own revision of this thread as sent (a counter, or its last change in epoch milliseconds), "
        "higher at each change. A whole thread sent with a revision is stored only when the stored one is lower or "
        "absent, so snapshots that arrive out of order never replace a later one. Not part of the content."))

    @field_validator("id")
    @classmethod
    def _strip_id(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("thread id must not be blank")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Thread":
        bad = invalid_unicode(self.model_dump(), "thread")
        if bad:
            raise ValueError(f"{bad}: not valid Unicode text; send UTF-8 text (thread {ascii(self.id)})")
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
        return question_text(self.subject, self.body)

    def content_hash(self) -> str:
        """What the thread says (not its revision): the store's change test, its write's ETag, the index's record."""
        payload = json.dumps(self.model_dump(mode="json", exclude={"revision"}), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def newest_post(self) -> datetime | None:
        """The time of its newest post, the question or a comment (``moment``); None if none has one."""
        return max((when for stamp in (self.created_at, *(a.created_at for a in self.answers))
                    if (when := moment(stamp)) is not None), default=None)


def newest_post(threads) -> datetime | None:
    """The time of the newest question or comment of ``threads`` (``Thread.newest_post``); None if none has one."""
    return max((when for t in threads if (when := t.newest_post()) is not None), default=None)
