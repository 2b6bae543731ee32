"""Forum signals that carried the SemEval-2016 winners (the comment is by the asker, its position,
length, URLs, e-mails and phone numbers, question marks, thanks), each optional: with no metadata a
feature is 0 and its "missing" flag says so, so a blind test set still ranks.

Thread signals (KeLP's and ConvKN's dialogue features) look at the comment's neighbours in its thread:
how many comments its author wrote there, and whether the asker answered it next (with thanks)."""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .candidates import Candidate, Query

URL = re.compile(r"https?://|www\.", re.I)
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
PHONE = re.compile(r"(?:\+?\d[\d\s-]{6,}\d)")
THANKS = re.compile(r"\b(thank|thanks|thx|thanx|appreciate)\b", re.I)

NAMES = ("by_asker", "asker_unknown", "position", "log_length", "has_url", "has_email", "has_phone",
         "question_mark", "thanks", "short")
THREAD_NAMES = ("author_comments", "asker_next", "asker_thanks_next")
ALL_NAMES = NAMES + THREAD_NAMES


def features(query: Query, c: Candidate, index: int) -> list[float]:
    asker = query.meta.get("author_id") or c.meta.get("asker_id")
    author = c.meta.get("author_id")
    known = bool(asker and author)
    text = c.text or ""
    n_words = len(text.split())
    pos = c.meta.get("position", index + 1)
    return [float(known and author == asker), float(not known), math.log(pos),
            math.log1p(n_words), float(bool(URL.search(text))), float(bool(EMAIL.search(text))),
            float(bool(PHONE.search(text))), float("?" in text), float(bool(THANKS.search(text))),
            float(n_words < 5)]


def dialogue(authors: list[str | None], texts: list[str], asker: str | None) -> np.ndarray:
    """(comments x 3) for one thread's comments in thread order: log(1 + the author's other comments
    in the thread), the next comment is by the asker, and that next comment thanks. A comment with no
    author gets 0 everywhere."""
    out = np.zeros((len(authors), len(THREAD_NAMES)))
    for j, author in enumerate(authors):
        if not author:
            continue
        out[j, 0] = math.log1p(sum(a == author for a in authors) - 1)
        if j + 1 < len(authors) and asker and authors[j + 1] == asker and author != asker:
            out[j, 1] = 1.0
            out[j, 2] = float(bool(THANKS.search(texts[j + 1] or "")))
    return out


def thread_features(query: Query) -> np.ndarray:
    """(candidates x 3), the dialogue signals. A candidate built from its whole stored thread carries
    them in its metadata (``answer_candidates``), so they do not depend on which of its thread's comments
    a query holds; otherwise they are computed from the candidates of each thread in the order given."""
    out = np.zeros((len(query.candidates), len(THREAD_NAMES)))
    threads: dict[str, list[int]] = {}
    for i, c in enumerate(query.candidates):
        if "dialogue" in c.meta:
            out[i] = c.meta["dialogue"]
        else:
            threads.setdefault(c.meta.get("thread_id", ""), []).append(i)
    for idx in threads.values():
        cands = [query.candidates[i] for i in idx]
        asker = query.meta.get("author_id") or cands[0].meta.get("asker_id")
        out[idx] = dialogue([c.meta.get("author_id") for c in cands], [c.text for c in cands], asker)
    return out


def matrix(query: Query, names: tuple[str, ...] = NAMES) -> np.ndarray:
    """The named signals of every candidate, one row each."""
    base = np.array([features(query, c, i) for i, c in enumerate(query.candidates)], dtype=float).reshape(-1, len(NAMES))
    cols = {n: base[:, k] for k, n in enumerate(NAMES)}
    if any(n in THREAD_NAMES for n in names):
        extra = thread_features(query)
        cols.update({n: extra[:, k] for k, n in enumerate(THREAD_NAMES)})
    return np.column_stack([cols[n] for n in names]) if names else np.zeros((len(query.candidates), 0))
