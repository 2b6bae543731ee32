"""A document-term count matrix (CSC: one column per term) and its vocabulary.

Shared by BM25 and the query-likelihood LM; stored as plain ``.npy`` arrays plus a JSON
vocabulary, memory-mapped on load.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp


class TermMatrix:
    def __init__(self, counts: sp.csc_matrix, vocab: list[str]):
        self.counts = counts
        self.vocab = vocab
        # set by ``build`` and ``of``: every document's term ids in token order, saved with the matrix
        self.sequence: TokenIds | None = None
        self.term_id = {t: i for i, t in enumerate(vocab)}
        self.doc_len = np.asarray(counts.sum(axis=1)).ravel().astype(np.float64)

    @cached_property
    def by_doc(self) -> sp.csr_matrix:
        """The same counts, row-major: a document's terms (for relevance feedback)."""
        return self.counts.tocsr()

    @property
    def n_docs(self) -> int:
        return self.counts.shape[0]

    @classmethod
    def build(cls, token_lists: Iterable[list[str]]) -> "TermMatrix":
        return cls.of(TokenIds.of(token_lists))

    @classmethod
    def of(cls, tokens: "TokenIds") -> "TermMatrix":
        """The counts of documents' term ids, saved with them (``sequence``) so a later build carries a kept
        document's ids over (``TokenIds.carried``) instead of analysing it again."""
        n = len(tokens)
        lengths = np.diff(tokens.offsets)
        r = np.repeat(np.arange(n, dtype=np.int32), lengths)
        c = np.asarray(tokens.ids, dtype=np.int32)
        counts = sp.csc_matrix((np.ones(len(c), dtype=np.float32), (r, c)), shape=(n, len(tokens.vocab)))
        counts.sum_duplicates()
        m = cls(counts, list(tokens.vocab))
        m.sequence = tokens
        return m

    def query_terms(self, query: list[str] | Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Known query term ids and their weights: counts for a token list, or the given weights of an
        expanded query (unknown terms dropped)."""
        weights = query if isinstance(query, Mapping) else Counter(query)
        known = [(self.term_id[t], float(w)) for t, w in weights.items() if t in self.term_id and w > 0]
        ids = np.fromiter((i for i, _ in known), dtype=np.int64, count=len(known))
        qtf = np.fromiter((w for _, w in known), dtype=np.float64, count=len(known))
        return ids, qtf

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "counts_data.npy", self.counts.data.astype(np.float32))
        np.save(folder / "counts_indices.npy", self.counts.indices.astype(np.int32))
        np.save(folder / "counts_indptr.npy", self.counts.indptr.astype(np.int64))
        (folder / "vocab.json").write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")
        (folder / "shape.json").write_text(json.dumps(list(self.counts.shape)))
        if self.sequence is not None:
            self.sequence.save(folder)

    @classmethod
    def load(cls, folder: Path) -> "TermMatrix":
        shape = tuple(json.loads((folder / "shape.json").read_text()))
        data = np.load(folder / "counts_data.npy", mmap_mode="r", allow_pickle=False)
        indices = np.load(folder / "counts_indices.npy", mmap_mode="r", allow_pickle=False)
        indptr = np.load(folder / "counts_indptr.npy", mmap_mode="r", allow_pickle=False)
        counts = sp.csc_matrix((data, indices, indptr), shape=shape)
        return cls(counts, json.loads((folder / "vocab.json").read_text(encoding="utf-8")))


def spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every position of the spans ``[starts[i], starts[i] + lengths[i])``, in order, at once: each span's start, then
    counting up within it."""
    lengths = np.asarray(lengths, dtype=np.int64)
    before = np.cumsum(lengths) - lengths  # where each span begins in the output
    return np.repeat(np.asarray(starts, dtype=np.int64) - before, lengths) + np.arange(int(lengths.sum()))


def token_digests(token_lists: Iterable[list[str]]) -> np.ndarray:
    """Each token list digested (BLAKE2b, 16 bytes, tokens joined by a unit separator so their bounds count), as two
    64-bit words a list: what tells whether two documents were analysed into the same tokens, without the tokens."""
    import hashlib
    raw = b"".join(hashlib.blake2b("\x1f".join(t).encode(), digest_size=16).digest() for t in token_lists)
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 2).astype(np.uint64)


@dataclass
class TokenIds:
    """Documents' tokens as term ids: document ``i``'s are ``vocab[ids[offsets[i]:offsets[i + 1]]]`` in token order,
    the terms numbered in the order they first appear (what ``of`` gives). ``digests``, when known, are each
    document's ``token_digests``.

    A build saves them with its term matrix (``TermMatrix.save``), and the next build carries a kept document's ids
    over from there (``carried``) rather than analysing its text again, or turning its ids into strings and back."""
    vocab: list[str]
    ids: np.ndarray  # int32
    offsets: np.ndarray  # int64, one more than there are documents
    digests: np.ndarray | None = None  # uint64, (documents, 2)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def of(cls, token_lists: Iterable[list[str]], digest: bool = False) -> "TokenIds":
        """Token lists numbered in order of first appearance; with ``digest``, their digests too."""
        term_id: dict[str, int] = {}
        ids: list[int] = []
        lengths: list[int] = [0]
        lists = []
        for doc in token_lists:
            ids.extend([term_id.setdefault(t, len(term_id)) for t in doc])
            lengths.append(len(doc))
            if digest:
                lists.append(doc)
        return cls(list(term_id), np.asarray(ids, dtype=np.int32), np.cumsum(lengths, dtype=np.int64),
                   token_digests(lists) if digest else None)

    @classmethod
    def carried(cls, live: "TokenIds", live_row: np.ndarray, fresh: list[list[str]]) -> "TokenIds":
        """The token ids of documents that are either ``live``'s document ``live_row[j]`` or, where that is -1, the
        next of ``fresh``'s token lists, in order: equal to ``of`` the same token lists, digests included when
        ``live`` has them, but a kept document's ids are copied, all at once, and only ``fresh`` is looked up."""
        live_row = np.asarray(live_row, dtype=np.int64)
        kept, rest = np.flatnonzero(live_row >= 0), np.flatnonzero(live_row < 0)
        if len(rest) != len(fresh):
            raise ValueError(f"{len(rest)} documents are not kept, but {len(fresh)} token lists were given")
        src = live_row[kept]
        lengths = np.zeros(len(live_row), dtype=np.int64)
        lengths[kept] = live.offsets[src + 1] - live.offsets[src]
        lengths[rest] = [len(t) for t in fresh]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = np.empty(int(offsets[-1]), dtype=np.int64)
        n_kept = lengths[kept]
        ids[spans(offsets[kept], n_kept)] = live.ids[spans(live.offsets[src], n_kept)]
        term_id = {t: i for i, t in enumerate(live.vocab)}
        for j, doc in zip(rest.tolist(), fresh):
            ids[offsets[j]:offsets[j + 1]] = [term_id.setdefault(t, len(term_id)) for t in doc]
        digests = None
        if live.digests is not None:
            digests = np.empty((len(live_row), 2), dtype=np.uint64)
            digests[kept] = live.digests[src]
            digests[rest] = token_digests(fresh)
        return cls(list(term_id), ids, offsets, digests).renumbered()

    def renumbered(self) -> "TokenIds":
        """The same tokens with the terms numbered in order of first appearance, those that appear nowhere dropped."""
        n, first = len(self.ids), np.full(len(self.vocab), len(self.ids), dtype=np.int64)
        np.minimum.at(first, self.ids, np.arange(n, dtype=np.int64))
        used = np.flatnonzero(first < n)
        order = used[np.argsort(first[used])]  # first appearances are distinct
        new_id = np.full(len(self.vocab), -1, dtype=np.int64)
        new_id[order] = np.arange(len(order))
        return TokenIds([self.vocab[i] for i in order.tolist()], new_id[self.ids].astype(np.int32), self.offsets,
                        self.digests)

    def lists(self, rows: np.ndarray | None = None) -> list[list[str]]:
        """The token lists of documents ``rows`` (default all), as strings, as they were analysed."""
        rows = np.arange(len(self), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        starts, lengths = self.offsets[rows], self.offsets[rows + 1] - self.offsets[rows]
        words = np.array(self.vocab, dtype=object)[self.ids[spans(starts, lengths)]].tolist()
        b = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        return [words[b[i]:b[i + 1]] for i in range(len(rows))]

    def save(self, folder: Path) -> None:
        """The ids, offsets and digests beside the term matrix, whose ``vocab.json`` is their vocabulary."""
        np.save(folder / "tokens.npy", np.asarray(self.ids, dtype=np.int32))
        np.save(folder / "token_offsets.npy", np.asarray(self.offsets, dtype=np.int64))
        if self.digests is not None:
            np.save(folder / "token_digests.npy", self.digests)

    @classmethod
    def load(cls, folder: Path) -> "TokenIds | None":
        """What ``save`` wrote beside a term matrix; None when it wrote none (an older build). The digests are None
        when a build before round 20 saved the ids."""
        if not (folder / "tokens.npy").exists():
            return None
        digests = folder / "token_digests.npy"
        out = cls(json.loads((folder / "vocab.json").read_text(encoding="utf-8")),
                  np.load(folder / "tokens.npy", mmap_mode="r", allow_pickle=False),
                  np.load(folder / "token_offsets.npy", allow_pickle=False),
                  np.load(digests, allow_pickle=False) if digests.exists() else None)
        if out.offsets[-1] != len(out.ids) or (out.digests is not None and out.digests.shape != (len(out), 2)):
            raise ValueError(f"{folder}: the saved token ids, offsets and digests do not agree")
        return out
