"""Query expansion: RM3 pseudo-relevance feedback and translation-model expansion.

Both return a weighted query (term -> weight) that the lexical indexes search with directly,
and the expansion terms, so an explain output can show them.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from indexing.searcher import Generation
from indexing.translation import TranslationTable


@dataclass(frozen=True)
class Expanded:
    weights: dict[str, float]
    terms: list[tuple[str, float]] = field(default_factory=list)  # the added terms, best first
    method: str = "none"


def _normalised(counts: dict[str, float]) -> dict[str, float]:
    total = sum(counts.values())
    return {t: w / total for t, w in counts.items()} if total > 0 else {}


def _interpolate(original: dict[str, float], model: dict[str, float], alpha: float) -> dict[str, float]:
    out = {t: (1 - alpha) * w for t, w in original.items()}
    for t, w in model.items():
        out[t] = out.get(t, 0.0) + alpha * w
    return out


def rm3(gen: Generation, tokens: list[str], fb_docs: int = 10, fb_terms: int = 10, alpha: float = 0.5,
        allowed=None) -> Expanded:
    """RM3 (Lavrenko and Croft 2001; Abdul-Jaleel et al. 2004): the relevance model
    p(w|R) = sum_d p(w|d) p(q|d) over the top feedback documents of a query-likelihood run,
    its best terms interpolated with the original query: (1 - alpha) q + alpha RM."""
    original = _normalised(dict(Counter(tokens)))
    if not original:
        return Expanded(original)
    hits = gen.lm.search_tokens(tokens, fb_docs, allowed)
    if not hits:
        return Expanded(original)
    loglik = np.array([h.score for h in hits])
    p_d = np.exp(loglik - loglik.max())
    p_d /= p_d.sum()
    rows = gen.terms.by_doc
    rm: dict[int, float] = {}
    for h, w in zip(hits, p_d):
        r = gen.row[h.doc_id]
        lo, hi = rows.indptr[r], rows.indptr[r + 1]
        tf = np.asarray(rows.data[lo:hi], dtype=float)
        if tf.sum() == 0:
            continue
        for j, p in zip(rows.indices[lo:hi], tf / tf.sum()):
            rm[int(j)] = rm.get(int(j), 0.0) + w * p
    top = sorted(rm.items(), key=lambda kv: -kv[1])[:fb_terms]
    model = _normalised({gen.terms.vocab[j]: p for j, p in top})
    added = [(t, p) for t, p in sorted(model.items(), key=lambda kv: -kv[1]) if t not in original]
    return Expanded(_interpolate(original, model, alpha), added, "rm3")


def translation_expansion(table: TranslationTable | None, tokens: list[str], per_term: int = 5,
                          n_terms: int = 10, alpha: float = 0.3) -> Expanded:
    """Expansion terms from t(answer word | question word) (Xue, Jeon and Croft 2008):
    p(w|q) = sum_t t(w|t) p(t|q), best terms not in the query, interpolated with weight alpha."""
    original = _normalised(dict(Counter(tokens)))
    if table is None or not original:
        return Expanded(original)
    model: dict[str, float] = {}
    for t, pt in original.items():
        for w, p in table.translations(t, per_term + 1):
            if w != t:
                model[w] = model.get(w, 0.0) + pt * p
    top = dict(sorted(model.items(), key=lambda kv: -kv[1])[:n_terms])
    model = _normalised(top)
    return Expanded(_interpolate(original, model, alpha), sorted(model.items(), key=lambda kv: -kv[1]),
                    "translation")


EXPANSIONS = {
    "none": lambda gen, tokens, allowed=None: Expanded(_normalised(dict(Counter(tokens)))),
    "rm3": lambda gen, tokens, allowed=None: rm3(gen, tokens, allowed=allowed),
    "translation": lambda gen, tokens, allowed=None: translation_expansion(gen.translation_qa, tokens),
}
