"""A search result's snippet: the part of its text where the question's words are, with those words marked.

A long comment that a search finds shows its first lines on a results page, which often say nothing of why it was
found. The snippet is the window of at most ``width`` characters, on word boundaries, that holds the most distinct
words of the question (as the index analyses them: a word matches another of the same stem, so "renewing" marks
"renew"; stop words mark nothing), the earliest such window where several do; a text no longer than ``width`` is its
own snippet. Each marked word is a ``[start, end)`` span of character offsets into the snippet's text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, Field

from indexing.text import Analyzer

SNIPPET_CHARS = 300
# the analyzer's token pattern on the text as it is, whose combining marks (Arabic diacritics, a decomposed accent)
# the analyzer's normalising takes out before it splits: here they stay inside the word they mark
_MARKS = "\u0300-\u036f\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
_WORD = re.compile(rf"(?:[^\W_]|[{_MARKS}])+", re.UNICODE)


class Snippet(BaseModel):
    text: str = Field(description="at most 300 characters of the result's text, on word boundaries")
    start: int = Field(description="where it begins in the result's text (0: its beginning)")
    truncated: bool = Field(description="whether the result's text goes on past it (or began before it)")
    highlights: list[tuple[int, int]] = Field(
        default_factory=list, description="[start, end) character offsets into the snippet's text of each of its "
        "words that is a word of the question, as the index analyses words (same stem)")


@dataclass
class _Word:
    start: int
    end: int
    key: str | None  # the word's analysed form where it is one of the question's, else None


def _words(text: str, wanted: frozenset[str], analyzer: Analyzer, seen: dict[str, str | None]) -> list[_Word]:
    out = []  # ``seen``: each word analysed once, across the texts of one question
    for m in _WORD.finditer(text):
        word = m.group()
        if word not in seen:
            seen[word] = next((k for k in analyzer(word) if k in wanted), None)
        out.append(_Word(m.start(), m.end(), seen[word]))
    return out


def snippet(text: str, question: str, analyzer: Analyzer, width: int = SNIPPET_CHARS) -> Snippet:
    """``text``'s snippet for ``question`` (module docstring)."""
    return snippets([text], question, analyzer, width)[0]


def snippets(texts: list[str], question: str, analyzer: Analyzer, width: int = SNIPPET_CHARS) -> list[Snippet]:
    """Each text's snippet for ``question``: the question analysed once, and each distinct word of the texts."""
    wanted, seen = frozenset(analyzer(question)), {}
    return [_snippet(text, wanted, analyzer, width, seen) for text in texts]


def _snippet(text: str, wanted: frozenset[str], analyzer: Analyzer, width: int, seen: dict) -> Snippet:
    words = _words(text, wanted, analyzer, seen) if wanted else []
    if len(text) <= width:
        start, end = 0, len(text)
    else:
        start, end = _window(text, words, width)
    inside = [w for w in words if w.key is not None and start <= w.start and w.end <= end]
    return Snippet(text=text[start:end], start=start, truncated=start > 0 or end < len(text),
                   highlights=[(w.start - start, w.end - start) for w in inside])


def _window(text: str, words: list[_Word], width: int) -> tuple[int, int]:
    """[start, end) of at most ``width`` characters on word boundaries holding the most distinct question words
    (then the most of them, then the earliest); the text's beginning when it holds none."""
    hits = [i for i, w in enumerate(words) if w.key is not None]
    best, best_score = None, (0, 0)
    right = 0
    for a, i in enumerate(hits):  # windows that begin at a matched word
        while right < len(hits) and words[hits[right]].end - words[i].start <= width:
            right += 1
        inside = [words[j].key for j in hits[a:right]]
        score = (len(set(inside)), len(inside))
        if score > best_score:
            best, best_score = i, score
    if best is None:
        return 0, _cut(text, words, 0, width)
    # begin a few words before the first match, so the reader sees what leads to it, within the width
    first = words[best].start
    end_of_last = max(words[hits[j]].end for j in range(len(hits)) if words[hits[j]].start >= first
                      and words[hits[j]].end - first <= width)
    room = width - (end_of_last - first)
    before = [w for w in words if w.start < first and first - w.start <= room // 3]
    start = before[0].start if before else first
    return start, _cut(text, words, start, width)


def _cut(text: str, words: list[_Word], start: int, width: int) -> int:
    """The end of the last whole word that fits ``width`` characters from ``start`` (or the text's end)."""
    if len(text) - start <= width:
        return len(text)
    ends = [w.end for w in words if w.start >= start and w.end - start <= width]
    return ends[-1] if ends else start + width
