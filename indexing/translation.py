"""IBM Model 1 word translation probabilities learned from question-answer pairs with EM
(Brown et al. 1993; used for cQA by Berger and Lafferty 1999 and Xue, Jeon and Croft 2008).

``t(target | source)`` for any direction of the pairs given: the reindex job trains question -> answer
on the store (expansion terms: "visa" -> "permit"); the translation language model trains answer ->
question on the training files (ranking/candidate_rankers.py). Unlabelled: every answer of a thread is
paired with its question, so no relevance label is used and no evaluation judgement can leak in.
Stored as plain CSR arrays, top translations only.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

FORMAT_VERSION = 1
NULL = "<null>"


class TranslationTable:
    kind = "translation"

    def __init__(self, src_vocab: list[str], tgt_vocab: list[str], table: sp.csr_matrix, params: dict):
        self.src_vocab, self.tgt_vocab, self.table, self.params = src_vocab, tgt_vocab, table, params
        self.src_id = {w: i for i, w in enumerate(src_vocab)}
        self.tgt_id = {w: i for i, w in enumerate(tgt_vocab)}

    def translations(self, word: str, n: int = 10) -> list[tuple[str, float]]:
        """The n most likely targets of a source word, with t(target | word)."""
        i = self.src_id.get(word)
        if i is None:
            return []
        lo, hi = self.table.indptr[i], self.table.indptr[i + 1]
        cols, vals = self.table.indices[lo:hi], self.table.data[lo:hi]
        order = np.argsort(-vals, kind="stable")[:n]
        return [(self.tgt_vocab[cols[j]], float(vals[j])) for j in order]

    def prob(self, target: str, source: str) -> float:
        i, j = self.src_id.get(source), self.tgt_id.get(target)
        return float(self.table[i, j]) if i is not None and j is not None else 0.0

    @classmethod
    def train(cls, pairs: Sequence[tuple[list[str], list[str]]], iterations: int = 5, min_count: int = 3,
              max_len: int = 40, keep: int = 50, min_prob: float = 1e-3, progress=None) -> "TranslationTable":
        """EM for IBM Model 1 over (source tokens, target tokens) pairs, fully vectorised.

        E-step: each target token's alignment posterior over the source tokens of its pair (plus NULL);
        M-step: t(f|e) = expected count(e, f) / expected count(e)."""
        src_cnt = Counter(w for s, _ in pairs for w in s[:max_len])
        tgt_cnt = Counter(w for _, t in pairs for w in t[:max_len])
        src_vocab = [NULL] + sorted(w for w, c in src_cnt.items() if c >= min_count)
        tgt_vocab = sorted(w for w, c in tgt_cnt.items() if c >= min_count)
        sid = {w: i for i, w in enumerate(src_vocab)}
        tid = {w: i for i, w in enumerate(tgt_vocab)}
        n_t = len(tgt_vocab)
        key, grp, g = alignment_keys(pairs, sid, tid, max_len)
        if key is None:
            return cls(src_vocab, tgt_vocab, sp.csr_matrix((len(src_vocab), n_t)), {"pairs": 0})
        uniq, inv = index_keys(key, len(src_vocab) * n_t)
        uniq = uniq.astype(np.int64)
        src_of = uniq // n_t
        t = np.ones(uniq.size)
        for it in range(iterations):
            val = t[inv]
            post = val / np.bincount(grp, weights=val, minlength=g)[grp]
            c = np.bincount(inv, weights=post, minlength=uniq.size)
            t = c / np.bincount(src_of, weights=c, minlength=len(src_vocab))[src_of]
            if progress:
                progress(it + 1)
        tgt_of = uniq % n_t
        full = sp.csr_matrix((t, (src_of, tgt_of)), shape=(len(src_vocab), n_t))
        table = _prune(full, keep, min_prob)
        params = {"pairs": len(pairs), "iterations": iterations, "min_count": min_count, "max_len": max_len,
                  "keep": keep, "min_prob": min_prob}
        return cls(src_vocab, tgt_vocab, table, params)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "data.npy", self.table.data.astype(np.float32))
        np.save(folder / "indices.npy", self.table.indices.astype(np.int32))
        np.save(folder / "indptr.npy", self.table.indptr.astype(np.int64))
        (folder / "vocab.json").write_text(json.dumps({"source": self.src_vocab, "target": self.tgt_vocab},
                                                      ensure_ascii=False), encoding="utf-8")
        (folder / "manifest.json").write_text(json.dumps(
            {"kind": self.kind, "format_version": FORMAT_VERSION, "params": self.params,
             "source_terms": len(self.src_vocab), "target_terms": len(self.tgt_vocab)}, indent=2))

    @classmethod
    def load(cls, folder: Path) -> "TranslationTable":
        from .generations import read_manifest
        m = read_manifest(folder, cls.kind, FORMAT_VERSION)
        v = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        arrays = [np.load(folder / f"{n}.npy", allow_pickle=False) for n in ("data", "indices", "indptr")]
        table = sp.csr_matrix(tuple(arrays), shape=(len(v["source"]), len(v["target"])))
        return cls(v["source"], v["target"], table, m["params"])


def alignment_keys(pairs: Sequence[tuple[list[str], list[str]]], sid: dict[str, int], tid: dict[str, int],
                   max_len: int) -> tuple[np.ndarray | None, np.ndarray | None, int]:
    """IBM Model 1's alignment links, all pairs at once: for each pair with a known target token, for each of its
    target tokens in order, one link to each of its source tokens (NULL, id 0, first) in order. Returns each link's
    ``source id * targets + target id`` (int32 when that fits), the running number of its target token (the group
    whose posterior sums to 1), and the number of target tokens; (None, None, 0) without any.

    The links in the order a loop over the pairs, one outer product each, makes them, so the table's sums run in
    the same order (tests/test_retriever.py); built from flat id arrays rather than one array per pair, and a
    question's ids looked up once for all its answers (``translation_pairs`` hands one list per question)."""
    import itertools
    n_t = len(tid)
    asked: dict[int, tuple[list[str], list[int]]] = {}  # by the list's id; the list kept, so its id stays its own
    sources, targets = [], []
    for s, t in pairs:
        ti = [tid[w] for w in t[:max_len] if w in tid]
        if not ti:
            continue
        seen = asked.get(id(s))
        if seen is None or seen[0] is not s:
            seen = asked[id(s)] = (s, [0] + [sid[w] for w in s[:max_len] if w in sid])
        si = seen[1]
        sources.append(si)
        targets.append(ti)
    if not targets:
        return None, None, 0
    ns = np.fromiter(map(len, sources), dtype=np.int64, count=len(sources))
    nt = np.fromiter(map(len, targets), dtype=np.int64, count=len(targets))
    src = np.fromiter(itertools.chain.from_iterable(sources), dtype=np.int64, count=int(ns.sum()))
    tgt = np.fromiter(itertools.chain.from_iterable(targets), dtype=np.int64, count=int(nt.sum()))
    g = tgt.size
    links = np.repeat(ns, nt)  # each target token's links: its pair's source count
    first = np.cumsum(links) - links  # each target token's first link
    src_first = np.repeat(np.cumsum(ns) - ns, nt)  # each target token's pair's first source in ``src``
    n = int(links.sum())
    # link e of target token j reads source src_first[j] + (e - first[j])
    key = src[np.arange(n, dtype=np.int64) + np.repeat(src_first - first, links)]
    key *= n_t
    key += np.repeat(tgt, links)
    if len(sid) * n_t < 2 ** 31:
        key = key.astype(np.int32)  # half the bytes to index
    grp = np.repeat(np.arange(g, dtype=np.int64), links)
    return key, grp, g


def index_keys(key: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` for keys in ``[0, cells)``, the same arrays. When a table of ``cells``
    entries takes no more memory than sorting the keys would (an int32 and a flag a cell against about 20 bytes a
    key), each key is marked in it and numbered by position: two passes over the keys, no sort (with
    ``alignment_keys``, the whole table 2.27x faster on the SemEval corpus grown ten times, 196,804 pairs,
    bench/build_parts.py). Else ``unique_inverse``."""
    if cells > 4 * key.size or cells >= 2 ** 31:
        return unique_inverse(key)
    seen = np.zeros(cells, dtype=bool)
    seen[key] = True
    uniq = np.flatnonzero(seen).astype(key.dtype)
    del seen
    number = np.empty(cells, dtype=np.int32)
    number[uniq] = np.arange(uniq.size, dtype=np.int32)
    return uniq, number[key].astype(np.intp)


def unique_inverse(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)``, the same arrays (tests/test_retriever.py), from a stable sort where
    np.unique uses its default one: on IBM Model 1's keys, sorted runs one per question-answer pair, it is the faster
    (the whole table 1.57x on the SemEval corpus, bench/build_parts.py)."""
    perm = np.argsort(key, kind="stable")
    ordered = key[perm]
    first = np.empty(ordered.size, dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inv = np.empty(key.size, dtype=np.intp)
    inv[perm] = np.cumsum(first, dtype=np.intp) - 1
    return ordered[first], inv


def _prune(m: sp.csr_matrix, keep: int, min_prob: float) -> sp.csr_matrix:
    """Keep each source word's ``keep`` best targets above ``min_prob``, renormalised."""
    rows, cols, vals = [], [], []
    for i in range(m.shape[0]):
        lo, hi = m.indptr[i], m.indptr[i + 1]
        d, c = m.data[lo:hi], m.indices[lo:hi]
        sel = d >= min_prob
        d, c = d[sel], c[sel]
        if d.size > keep:
            top = np.argpartition(-d, keep - 1)[:keep]
            d, c = d[top], c[top]
        if d.size:
            rows.append(np.full(d.size, i))
            cols.append(c)
            vals.append(d / d.sum())
    if not rows:
        return sp.csr_matrix(m.shape)
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=m.shape)


def qa_pairs(threads, analyzer) -> list[tuple[list[str], list[str]]]:
    """(question tokens, answer tokens) for every answer of every thread; no labels used."""
    out = []
    for t in threads:
        q = analyzer(t.question_text)
        for a in t.answers:
            out.append((q, analyzer(a.text)))
    return out
