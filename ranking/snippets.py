"""A search result's snippet: the part of its text where the question's words are, with those words marked.

A long comment that a search finds shows its first lines on a results page, which often say nothing of why it was
found. The snippet is the window of at most ``width`` characters, on word boundaries, that holds the most distinct
words of the question (as the index analyses them: a word matches another of the same stem, so "renewing" marks
"renew"; stop words mark nothing), the earliest such window where several do; a text no longer than ``width`` is its
own snippet. Where the question's words are in two places no one window holds (a long answer that names the problem
at its start and the fix at its end), two windows of half the room each, joined by " … ", where they show more of
the question's words than the one does. Each marked word is a ``[start, end)`` span of character offsets into the
snippet's text; ``parts`` says where each window is in the result's text.
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
    text: str = Field(description="at most 300 characters of the result's text, on word boundaries: one part, or two "
                      "joined by \" … \"")
    start: int = Field(description="where it begins in the result's text (0: its beginning)")
    truncated: bool = Field(description="whether the result's text goes on past it (or began before it)")
    highlights: list[tuple[int, int]] = Field(
        default_factory=list, description="[start, end) character offsets into the snippet's text of each of its "
        "words that is a word of the question, as the index analyses words (same stem)")
    parts: list[tuple[int, int]] = Field(
        default_factory=list, description="[start, end) of each part in the result's text, in order: one, or two "
        "where the question's words are in two places no one window holds (the text joins them with \" … \")")


SEPARATOR = " … "


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


def snippet(text: str, question: str, analyzer: Analyzer, width: int = SNIPPET_CHARS, max_parts: int = 2) -> Snippet:
    """``text``'s snippet for ``question`` (module docstring); ``max_parts`` 1: one window always (before round 57)."""
    return snippets([text], question, analyzer, width, max_parts)[0]


def snippets(texts: list[str], question: str, analyzer: Analyzer, width: int = SNIPPET_CHARS,
             max_parts: int = 2) -> list[Snippet]:
    """Each text's snippet for ``question``: the question analysed once, and each distinct word of the texts."""
    wanted, seen = frozenset(analyzer(question)), {}
    return [_snippet(text, wanted, analyzer, width, seen, max_parts) for text in texts]


def _snippet(text: str, wanted: frozenset[str], analyzer: Analyzer, width: int, seen: dict,
             max_parts: int = 2) -> Snippet:
    words = _words(text, wanted, analyzer, seen) if wanted else []
    if len(text) <= width:
        parts = [(0, len(text))]
    else:
        one = _window(text, words, width) or (0, _cut(text, words, 0, width))
        parts = [one]
        if max_parts > 1 and len(_keys(words, 0, len(text))) > len(shown := _keys(words, *one)):
            parts = _two_parts(text, words, width, len(shown)) or parts
    pieces, highlights, at = [], [], 0
    for start, end in parts:
        if pieces:
            pieces.append(SEPARATOR)
            at += len(SEPARATOR)
        highlights += [(w.start - start + at, w.end - start + at) for w in words
                       if w.key is not None and start <= w.start and w.end <= end]
        pieces.append(text[start:end])
        at += end - start
    return Snippet(text="".join(pieces), start=parts[0][0], truncated=parts[0][0] > 0 or parts[-1][1] < len(text)
                   or len(parts) > 1, highlights=highlights, parts=parts)


def _keys(words: list[_Word], start: int, end: int) -> set[str]:
    return {w.key for w in words if w.key is not None and start <= w.start and w.end <= end}


def _two_parts(text: str, words: list[_Word], width: int, one_shows: int) -> list[tuple[int, int]] | None:
    """Two windows of half the room each (the separator's taken out), where they show more distinct question words
    than the one window (``one_shows``): the best half window, and the best other one before or after it for the
    words it lacks. None where two show no more."""
    half = (width - len(SEPARATOR)) // 2
    first = _window(text, words, half)
    if first is None:
        return None
    known = frozenset(_keys(words, *first))
    sides = [w for w in (_window(text, words, half, 0, first[0], known), _window(text, words, half, first[1],
                                                                               len(text), known)) if w is not None]
    if not sides:
        return None
    second = max(sides, key=lambda w: (len(_keys(words, *w) - known), -w[0]))
    if len(known | _keys(words, *second)) <= one_shows:
        return None
    return sorted([first, second])


def _window(text: str, words: list[_Word], width: int, lo: int = 0, hi: int | None = None,
            known: frozenset[str] = frozenset()) -> tuple[int, int] | None:
    """[start, end) of at most ``width`` characters on word boundaries within [``lo``, ``hi``) holding the most
    distinct question words not in ``known`` (then the most distinct, then the most of them, then the earliest);
    None when it holds none not known."""
    hi = len(text) if hi is None else hi
    hits = [i for i, w in enumerate(words) if w.key is not None and lo <= w.start and w.end <= hi]
    best, best_score = None, (0, 0, 0)
    right = 0
    for a, i in enumerate(hits):  # windows that begin at a matched word
        right = max(right, a)
        while right < len(hits) and words[hits[right]].end - words[i].start <= width:
            right += 1
        inside = [words[j].key for j in hits[a:right]]
        distinct = set(inside)
        score = (len(distinct - known), len(distinct), len(inside))
        if score[0] and score > best_score:
            best, best_score = i, score
    if best is None:
        return None
    # begin a few words before the first match, so the reader sees what leads to it, within the width
    first = words[best].start
    end_of_last = max(words[j].end for j in hits if words[j].start >= first and words[j].end - first <= width)
    room = width - (end_of_last - first)
    before = [w for w in words if lo <= w.start < first and first - w.start <= room // 3]
    start = before[0].start if before else first
    return start, _cut(text, words, start, width, hi)


def _cut(text: str, words: list[_Word], start: int, width: int, hi: int | None = None) -> int:
    """The end of the last whole word that fits ``width`` characters from ``start`` (or the text's end), before
    ``hi``."""
    hi = len(text) if hi is None else hi
    if hi - start <= width and hi == len(text):
        return len(text)
    ends = [w.end for w in words if w.start >= start and w.end - start <= width and w.end <= hi]
    return ends[-1] if ends else min(start + width, hi)
