"""Text analysis shared by every lexical index: normalise, tokenise, optionally drop stop words and stem.

Arabic normalisation follows the usual IR practice (Larkey et al. 2002, "light" normalisation):
strip diacritics and tatweel, unify alef forms, ta marbuta to ha, alef maqsura to ya.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass
from functools import cached_property

# bump whenever the same settings would give a text other tokens (a new tokenizer, stemmer or stop list): builds then
# analyse every document again instead of reusing the tokens the live generation saved
ANALYSIS_VERSION = 1

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_AR_DIACRITICS = re.compile("[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed]")
_AR_TATWEEL = "\u0640"
_AR_MAP = str.maketrans({"\u0623": "\u0627", "\u0625": "\u0627", "\u0622": "\u0627", "\u0671": "\u0627",
                         "\u0629": "\u0647", "\u0649": "\u064a"})

ENGLISH_STOP = frozenset("""a about above after again against all am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
nor not now of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves""".split())
ARABIC_STOP = frozenset("""في من على الى إلى عن مع هذا هذه ذلك التي الذي ان أن او أو ما لا لم لن هل كان قد
ثم كل بعد قبل عند بين حتى اذا إذا هو هي هم انا أنا نحن""".split())


_STEMS: dict[str, dict[str, str]] = {}  # stemmer -> token -> stem; vocabularies are small


def normalize_arabic(text: str) -> str:
    text = _AR_DIACRITICS.sub("", text).replace(_AR_TATWEEL, "")
    return text.translate(_AR_MAP)


@dataclass(frozen=True)
class Analyzer:
    """One configuration of the analysis chain; stored in each index manifest."""
    lowercase: bool = True
    arabic: bool = True
    stopwords: bool = True
    stemmer: str | None = "english"  # a snowball language, or None
    min_len: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def fingerprint(self) -> dict:
        """What decides a text's tokens: the settings and ``ANALYSIS_VERSION``. A build reuses the tokens an earlier
        build saved only under the same fingerprint."""
        return {**self.to_dict(), "analysis_version": ANALYSIS_VERSION}

    @classmethod
    def from_dict(cls, d: dict) -> "Analyzer":
        return cls(**d)

    @cached_property
    def _stem(self):
        if not self.stemmer:
            return None
        import snowballstemmer
        return snowballstemmer.stemmer(self.stemmer)

    def normalize(self, text: str) -> str:
        text = unicodedata.normalize("NFKC", text)
        if self.lowercase:
            text = text.casefold()
        if self.arabic:
            text = normalize_arabic(text)
        return text

    def __call__(self, text: str) -> list[str]:
        toks = [t for t in _TOKEN.findall(self.normalize(text)) if len(t) >= self.min_len]
        if self.stopwords:
            toks = [t for t in toks if t not in ENGLISH_STOP and t not in ARABIC_STOP]
        if self._stem is not None:
            cache = _STEMS.setdefault(self.stemmer, {})
            stem = self._stem.stemWord
            toks = [cache.get(t) or cache.setdefault(t, stem(t)) for t in toks]
        return toks
