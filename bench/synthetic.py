"""Synthetic corpora for benchmarks: Zipfian vocabulary, log-normal document lengths."""
from __future__ import annotations

import numpy as np


def zipf_corpus(n_docs: int, vocab: int = 50_000, s: float = 1.07, mean_len: float = 45.0,
                seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / ranks ** s
    p /= p.sum()
    lengths = np.clip(rng.lognormal(np.log(mean_len) - 0.5, 1.0, n_docs).astype(int), 1, 2000)
    words = rng.choice(vocab, size=int(lengths.sum()), p=p)
    out, at = [], 0
    for n in lengths:
        out.append([f"w{w}" for w in words[at:at + n]])
        at += n
    return out


def zipf_queries(n: int, vocab: int = 50_000, seed: int = 1, min_len: int = 2, max_len: int = 8) -> list[list[str]]:
    """Queries drawn from the mid-frequency band, where real question words sit."""
    rng = np.random.default_rng(seed)
    return [[f"w{w}" for w in rng.integers(20, vocab // 5, rng.integers(min_len, max_len + 1))]
            for _ in range(n)]
