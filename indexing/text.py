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
ARABIC_SCRIPT = "[\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff]"
ARABIC_CHAR = re.compile(ARABIC_SCRIPT)  # any character of the script: a token holding one is Arabic


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
    # with a ``stemmer``: words in Arabic script stemmed by Snowball's Arabic stemmer, the others by ``stemmer`` (an
    # English stemmer leaves Arabic words whole). Off by default, as for every manifest written before the setting
    # existed and the rankers trained on English; the index builds with it on (``INDEX_ANALYZER``).
    arabic_stem: bool = False

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

    @cached_property
    def _arabic(self):
        """The stemmer of words in Arabic script, where it is not ``stemmer`` itself; else None."""
        if not self.arabic_stem or not self.stemmer or self.stemmer == "arabic":
            return None
        import snowballstemmer
        return snowballstemmer.stemmer("arabic")

    @cached_property
    def _stem_key(self) -> str:
        return f"{self.stemmer}+arabic" if self._arabic is not None else str(self.stemmer)

    def _stem_word(self, token: str) -> str:
        return (self._arabic if ARABIC_CHAR.search(token) else self._stem).stemWord(token)

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
            cache = _STEMS.setdefault(self._stem_key, {})
            stem = self._stem.stemWord if self._arabic is None else self._stem_word
            toks = [cache.get(t) or cache.setdefault(t, stem(t)) for t in toks]
        return toks


# what `cqa reindex` builds every index with: the defaults, and Arabic words stemmed as Arabic (round 25), so that an
# Arabic forum's first stage meets a plural with its singular
INDEX_ANALYZER = Analyzer(arabic_stem=True)
