"""Forum signals that carried the SemEval-2016 winners (the comment is by the asker, its position,
length, URLs, e-mails and phone numbers, question marks, thanks), each optional: with no metadata a
feature is 0 and its "missing" flag says so, so a blind test set still ranks."""
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


def matrix(query: Query) -> np.ndarray:
    return np.array([features(query, c, i) for i, c in enumerate(query.candidates)], dtype=float).reshape(-1, len(NAMES))
