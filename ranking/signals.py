"""Forum signals that carried the SemEval-2016 winners (the comment is by the asker, its position,
length, URLs, e-mails and phone numbers, question marks, thanks), each optional: with no metadata a
feature is 0 and its "missing" flag says so, so a blind test set still ranks.

Thread signals (KeLP's and ConvKN's dialogue features) look at the comment's neighbours in its thread:
how many comments its author wrote there, and whether the asker answered it next (with thanks)."""
from __future__ import annotations

import math
import re

import numpy as np

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


def thread_features(query: Query) -> np.ndarray:
    """(candidates x 3): log(1 + the author's other comments in the thread), the next comment of the
    thread is by the asker, and that next comment thanks. Candidates of one thread are taken in the
    order given; with no author metadata every value is 0."""
    out = np.zeros((len(query.candidates), len(THREAD_NAMES)))
    threads: dict[str, list[int]] = {}
    for i, c in enumerate(query.candidates):
        threads.setdefault(c.meta.get("thread_id", ""), []).append(i)
    for idx in threads.values():
        authors = [query.candidates[i].meta.get("author_id") for i in idx]
        for j, i in enumerate(idx):
            c = query.candidates[i]
            asker = query.meta.get("author_id") or c.meta.get("asker_id")
            if not authors[j]:
                continue
            out[i, 0] = math.log1p(sum(a == authors[j] for a in authors) - 1)
            if j + 1 < len(idx) and asker and authors[j + 1] == asker and authors[j] != asker:
                out[i, 1] = 1.0
                out[i, 2] = float(bool(THANKS.search(query.candidates[idx[j + 1]].text or "")))
    return out


def matrix(query: Query, names: tuple[str, ...] = NAMES) -> np.ndarray:
    """The named signals of every candidate, one row each."""
    base = np.array([features(query, c, i) for i, c in enumerate(query.candidates)], dtype=float).reshape(-1, len(NAMES))
    cols = {n: base[:, k] for k, n in enumerate(NAMES)}
    if any(n in THREAD_NAMES for n in names):
        extra = thread_features(query)
        cols.update({n: extra[:, k] for k, n in enumerate(THREAD_NAMES)})
    return np.column_stack([cols[n] for n in names]) if names else np.zeros((len(query.candidates), 0))
