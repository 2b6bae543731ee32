"""Two parts of every build (`cqa reindex`, and so every automatic refresh) against what they replaced, side by side
in one run, on the same documents:

- analysis of every document: the compiled Snowball stemmers (PyStemmer, what snowballstemmer hands out when it is
  installed) against snowballstemmer's pure-Python ones, each from an empty stem cache as a build's child process
  starts; the tokens must be identical;
- the IBM Model 1 translation table (question -> answer pairs, as a build trains it): its alignment links built from
  flat id arrays and numbered through a table of cells (``alignment_keys``, ``index_keys``) against one outer
  product per pair numbered by ``np.unique`` (what a build did before round 18); the tables must be identical, bit
  for bit;
- reading the store's documents: ``ThreadStore.documents`` (one query in one transaction, round 16) against
  ``Documents.from_threads(iter_threads())`` (thread objects, batch by batch); the documents must be identical;
- a build's documents and their match with the live generation's (``copy``), when one thread was written since the
  live generation was built (its last: a thread a comment is added to is written last): the threads the live
  generation holds as they are copied from its documents and only the one written read from the store
  (``read_documents`` with the live generation's record of the store's threads, round 21; the copied texts kept as
  the live file's bytes, ``TextRuns``), against every thread read
  from the store and each document matched with the live ones by id and text (``Carried.matched``, what a build did
  before); each side loads the live documents as a build does, and the documents and their live rows must be
  identical;
- a generation's documents, as a build writes them and a service going live reads them: documents.bin (round 20:
  each column's UTF-8 bytes end to end with their offsets, the repeating columns coded, the texts decoded as they are
  read) against documents.json as JSON lines (rounds 18-19); written, read, and read with every text (what a build
  matching its documents with the live ones reads); the documents read must be identical, and the Python memory a
  read holds is measured once for each (tracemalloc: a mapped file's pages are not Python's, and are shared by the
  processes serving it);
- the term ids of a build that adds one comment to a live generation (``--generation``): the kept documents' term ids
  carried over as ids (``TokenIds.carried``), the term matrix counted from them and the question-answer pairs
  digested from the documents' saved token digests (``pair_hash``, round 20), against the kept documents' tokens read
  back as strings, the term matrix numbered from the strings again and every pair's tokens hashed (what a build did
  before); the term matrices (vocabulary, ids, counts) must be identical, and the pairs' digests must tell the same
  pairs apart;
- the stored comment vectors of a build that adds one comment to a live generation (``--generation``, default the
  corpus's live one): the live file hard-linked and the new vector written beside it (``RowVectors.grown``, round
  19) against every kept vector copied into a new one-row-per-document file (what a build did before); each side
  flushed to disk as ``publish`` does (``fsync_tree``), and the vectors of every row must be identical.

Rounds alternate the two sides. The documents are a data folder's store (default: the full 2016 corpus `cqa evaluate`
builds under --data-dir), or --store. Prints a JSON object last.

    python bench/build_parts.py --data-dir /tmp/cqa-full --rounds 3
    python bench/build_parts.py --store /tmp/big10/threads.sqlite3 --parts term_ids,vectors \\
        --generation /tmp/big10/indexes/$(cat /tmp/big10/indexes/current)
    python bench/build_parts.py --store /tmp/big10/threads.sqlite3 --parts copy
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import indexing.text as text  # noqa: E402
import indexing.translation as translation  # noqa: E402
from indexing.documents import Documents, documents_file  # noqa: E402
from indexing.generations import ANSWER_VECTORS, current_generation, fsync_tree  # noqa: E402
from indexing.documents import FILE as DOCUMENTS_FILE  # noqa: E402
from indexing.documents import MADE  # noqa: E402
from indexing.reindex import (THREADS_FILE, LiveDocuments, pair_hash, pair_rows, read_documents,  # noqa: E402
                              translation_pairs)
from indexing.store import ThreadRows  # noqa: E402
from indexing.rowvectors import RowVectors  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402
from indexing.termmatrix import TermMatrix, TokenIds, token_digests  # noqa: E402
from indexing.text import INDEX_ANALYZER  # noqa: E402
from load import built_corpus, save_documents_lines  # noqa: E402


def analyse(texts: list[str], pure: bool) -> tuple[float, list[list[str]]]:
    """Seconds to analyse ``texts`` with a fresh analyzer and an empty stem cache, and the tokens."""
    analyzer = replace(INDEX_ANALYZER)  # what a build analyses with, its stemmers not yet made
    if pure:
        from snowballstemmer.english_stemmer import EnglishStemmer
        analyzer.__dict__["_stem"] = EnglishStemmer()  # what snowballstemmer gives without PyStemmer
    text._STEMS.clear()
    t0 = time.perf_counter()
    tokens = [analyzer(t) for t in texts]
    return time.perf_counter() - t0, tokens


def reference_alignment_keys(pairs, sid, tid, max_len):
    """The links as a build made them before round 18: one outer product per pair, concatenated."""
    n_t = len(tid)
    keys, groups = [], []
    g = 0
    for s, t in pairs:
        si = np.array([0] + [sid[w] for w in s[:max_len] if w in sid], dtype=np.int64)
        ti = np.array([tid[w] for w in t[:max_len] if w in tid], dtype=np.int64)
        if ti.size == 0:
            continue
        keys.append((si[None, :] * n_t + ti[:, None]).ravel())
        groups.append(np.repeat(np.arange(g, g + ti.size), si.size))
        g += ti.size
    if not keys:
        return None, None, 0
    key = np.concatenate(keys)
    if len(sid) * n_t < 2 ** 31:
        key = key.astype(np.int32)
    return key, np.concatenate(groups), g


def train(pairs, reference: bool) -> tuple[float, translation.TranslationTable]:
    fast = translation.alignment_keys, translation.index_keys
    if reference:
        translation.alignment_keys = reference_alignment_keys
        translation.index_keys = lambda key, cells: np.unique(key, return_inverse=True)
    try:
        t0 = time.perf_counter()
        table = translation.TranslationTable.train(pairs)
        return time.perf_counter() - t0, table
    finally:
        translation.alignment_keys, translation.index_keys = fast


def same_table(a: translation.TranslationTable, b: translation.TranslationTable) -> bool:
    return (a.src_vocab == b.src_vocab and a.tgt_vocab == b.tgt_vocab and a.params == b.params
            and all(np.array_equal(getattr(a.table, f), getattr(b.table, f)) for f in ("data", "indices", "indptr")))


class OneCommentMore:
    """A build of ``generation``'s documents and one new comment (the last row), as the stored comment vectors see
    it: the live store in this round's layout (made once, untimed), the rows kept and the new vector."""

    def __init__(self, generation: Path, work: Path):
        live = RowVectors.open(generation / ANSWER_VECTORS)
        if live is None:
            raise SystemExit(f"{generation} stores no comment vectors (CQA_ANSWER_ENCODER)")
        docs = Documents.load(documents_file(generation))
        self.n = len(docs) + 1
        self.rows = np.asarray(docs.answer_rows() + [len(docs)], dtype=np.int64)
        self.live_row = np.append(np.arange(len(docs), dtype=np.int64), -1)
        new = np.random.default_rng(0).normal(size=(1, live.dim)).astype(np.float32)
        self.new = new / np.linalg.norm(new)
        kept = self.rows[:-1]
        RowVectors.build(len(docs), kept, live[kept]).save(work / "live")  # as a round-19 generation holds them
        self.live = RowVectors.load(work / "live")
        self.work = work

    def linked(self) -> tuple[float, RowVectors]:
        out = self.work / "linked"
        t0 = time.perf_counter()
        RowVectors.grown(self.live, self.live_row, self.rows, self.rows[-1:], self.new).save(out)
        fsync_tree(out)
        return time.perf_counter() - t0, RowVectors.load(out)

    def copied(self) -> tuple[float, RowVectors]:
        """Before round 19: every kept vector copied into a matrix of one row per document, saved whole."""
        out = self.work / "copied"
        out.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        copy = self.rows[:-1]
        m = np.zeros((self.n, self.live.dim), dtype=np.float32)
        m[copy] = self.live[self.live_row[copy]]
        m[self.rows[-1]] = self.new[0]
        np.save(out / "answer_vectors.npy", m)
        fsync_tree(out)
        return time.perf_counter() - t0, RowVectors.legacy(out / "answer_vectors.npy")

    def written(self, side: str) -> int:
        """Bytes a side wrote: its files but the hard-linked ones."""
        return sum(p.stat().st_size for p in (self.work / side).rglob("*") if p.is_file() and p.stat().st_nlink == 1)

    def same(self, a: RowVectors, b: RowVectors) -> bool:
        for start in range(0, self.n, 50_000):
            rows = list(range(start, min(start + 50_000, self.n)))
            if not np.array_equal(a[rows], b[rows]):
                return False
        return True

    def clear(self) -> None:
        for side in ("linked", "copied"):
            shutil.rmtree(self.work / side, ignore_errors=True)


def reference_pair_hashes(pairs) -> np.ndarray:
    """Before round 20: every pair's answer tokens joined and hashed with its question's digest."""
    import hashlib
    asked: dict[int, tuple[list[str], bytes]] = {}
    out = np.empty(len(pairs), dtype=np.uint64)
    for i, (q, a) in enumerate(pairs):
        seen = asked.get(id(q))
        if seen is None or seen[0] is not q:
            seen = asked[id(q)] = (q, hashlib.blake2b("\x1f".join(q).encode(), digest_size=16).digest())
        out[i] = int.from_bytes(hashlib.blake2b(seen[1] + "\x1f".join(a).encode(), digest_size=8).digest(), "little")
    return out


class OneCommentTokens:
    """A build of ``generation``'s documents and one new comment on its first thread (the last row), as the lexical
    stages see it: the live term ids and digests (digested untimed when the generation predates them), the kept rows
    and the new comment's tokens."""

    def __init__(self, generation: Path, work: Path):
        live = TokenIds.load(generation / "terms")
        if live is None:
            raise SystemExit(f"{generation} saved no token ids with its term matrix (an older build)")
        if live.digests is None:
            live.digests = token_digests(live.lists())
        TermMatrix.of(live).save(work / "terms")  # as a round-20 generation holds them
        self.folder = work / "terms"
        self.docs = Documents.load(documents_file(generation))
        self.docs.texts = list(self.docs.texts)
        self.docs._add("a:bench_new", "answer", self.docs.thread_ids[0], self.docs.categories[0], None,
                       "a brand new comment about the visa office hours")
        self.live_row = np.append(np.arange(len(self.docs) - 1, dtype=np.int64), -1)
        self.fresh = [INDEX_ANALYZER(self.docs.texts[-1])]

    def ids(self) -> tuple[float, tuple[TermMatrix, np.ndarray]]:
        t0 = time.perf_counter()
        tokens = TokenIds.carried(TokenIds.load(self.folder), self.live_row, self.fresh)
        terms = TermMatrix.of(tokens)
        q, a = pair_rows(self.docs)
        hashes = pair_hash(tokens.digests[q], tokens.digests[a])
        return time.perf_counter() - t0, (terms, hashes)

    def strings(self) -> tuple[float, tuple[TermMatrix, np.ndarray]]:
        t0 = time.perf_counter()
        kept = np.flatnonzero(self.live_row >= 0)
        lists = TokenIds.load(self.folder).lists(self.live_row[kept]) + self.fresh
        terms = TermMatrix.build(lists)
        hashes = reference_pair_hashes(translation_pairs(self.docs, lists))
        return time.perf_counter() - t0, (terms, hashes)

    @staticmethod
    def same(a: tuple[TermMatrix, np.ndarray], b: tuple[TermMatrix, np.ndarray]) -> bool:
        (ta, ha), (tb, hb) = a, b
        matrices = (ta.vocab == tb.vocab and all(np.array_equal(getattr(ta.counts, f), getattr(tb.counts, f))
                                                 for f in ("data", "indices", "indptr"))
                    and np.array_equal(ta.sequence.ids, tb.sequence.ids)
                    and np.array_equal(ta.sequence.offsets, tb.sequence.offsets))
        # the two digests differ in kind; both must make the same pairs equal and the same pairs distinct
        _, inv_a = np.unique(ha, return_inverse=True)
        _, inv_b = np.unique(hb, return_inverse=True)
        first_a = np.unique(inv_a, return_index=True)[1][inv_a]
        first_b = np.unique(inv_b, return_index=True)[1][inv_b]
        return matrices and np.array_equal(first_a, first_b)


class DocumentsFile:
    """A generation's documents written and read in the binary format and in JSON lines, in ``work``."""

    def __init__(self, docs: Documents, work: Path):
        self.docs, self.binary, self.lines = docs, work / "documents.bin", work / "documents.json"

    def save(self, binary: bool) -> tuple[float, None]:
        t0 = time.perf_counter()
        self.docs.save(self.binary) if binary else save_documents_lines(self.docs, self.lines)
        return time.perf_counter() - t0, None

    def load(self, binary: bool, every_text: bool = False) -> tuple[float, Documents]:
        t0 = time.perf_counter()
        docs = Documents.load(self.binary if binary else self.lines)
        if every_text:
            sum(map(len, docs.texts))
        return time.perf_counter() - t0, docs

    def held(self, binary: bool) -> int:
        """Python bytes a read of the documents holds (tracemalloc), once loaded."""
        import tracemalloc
        tracemalloc.start()
        docs = Documents.load(self.binary if binary else self.lines)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del docs
        return held

    def same(self, a: Documents, b: Documents) -> bool:
        return a == b == self.docs


class OneThreadWritten:
    """A live generation of the store's documents (in ``work``) whose record of the store's threads says the last one
    written was written since (its content hash another)."""

    def __init__(self, store: Path, work: Path):
        self.store, self.root = store, work / "copy-root"
        folder = self.root / "gen-live"
        folder.mkdir(parents=True)
        with ThreadStore(store) as st:
            read = st.documents()
        read.documents.save(folder / DOCUMENTS_FILE)
        hashes = read.threads.hashes.copy()
        hashes[-1] = bytes(32)
        ThreadRows(read.threads.ids, read.threads.seqs, hashes).save(folder / THREADS_FILE)
        (folder / "manifest.json").write_text(json.dumps({"generation": folder.name, "documents_made": MADE}))
        (self.root / "current").write_text(folder.name)
        self.threads = len(read.threads)

    def build(self, copy: bool) -> tuple[float, tuple[Documents, np.ndarray, dict]]:
        t0 = time.perf_counter()
        live = LiveDocuments.of(self.root)
        if not copy:
            live.threads = None  # as a generation without the record: every thread read, every document matched
        with ThreadStore(self.store) as st:
            _, docs, carried, how = read_documents(st, live)
        return time.perf_counter() - t0, (docs, carried.live_row, how)

    @staticmethod
    def same(a, b) -> bool:
        return a[0].__dict__ == b[0].__dict__ and np.array_equal(a[1], b[1]) and a[2]["read_threads"] == 1


PARTS = ("read", "analyse", "translation", "documents", "term_ids", "vectors", "copy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--store", type=Path, default=None, help="a threads.sqlite3 to read instead of the full corpus")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"the comparisons to make, comma-separated, of {PARTS} "
                    "(translation trains on the compiled stemmers' tokens, made untimed without analyse)")
    ap.add_argument("--generation", type=Path, default=None,
                    help="term_ids, vectors: the live generation's folder (default: the corpus's live generation)")
    args = ap.parse_args()
    parts = args.parts.split(",")
    if not parts or set(parts) - set(PARTS):
        raise SystemExit(f"--parts: comma-separated, each one of {PARTS}")
    corpus = built_corpus(args.data_dir) \
        if args.store is None or ({"tokens", "vectors"} & set(parts) and args.generation is None) else None
    store = args.store or corpus.store_path
    work = Path(tempfile.mkdtemp(prefix="cqa-build-parts-"))
    vectors = comment_tokens = None
    generation = None
    if {"term_ids", "vectors"} & set(parts):
        generation = args.generation or corpus.index_root / current_generation(corpus.index_root)
    if "vectors" in parts:
        vectors = OneCommentMore(generation, work)
    if "term_ids" in parts:
        comment_tokens = OneCommentTokens(generation, work)
    with ThreadStore(store) as st:
        docs = Documents.from_threads(st.iter_threads())
    written_one = OneThreadWritten(store, work) if "copy" in parts else None
    times: dict[str, list[float]] = {}
    same: dict[str, bool] = {}

    def side_by_side(part: str, fast_name: str, slow_name: str, fast, slow, equal) -> None:
        """One round of one comparison: the reference first, then what replaced it."""
        s_slow, out_slow = slow()
        s_fast, out_fast = fast()
        times.setdefault(slow_name, []).append(s_slow)
        times.setdefault(fast_name, []).append(s_fast)
        same[part] = same.get(part, True) and equal(out_fast, out_slow)

    def timed(f):
        def run():
            t0 = time.perf_counter()
            out = f()
            return time.perf_counter() - t0, out
        return run

    tokens = None
    for _ in range(args.rounds):
        if "read" in parts:
            with ThreadStore(store) as st:
                side_by_side("documents", "read_one_query", "read_thread_objects",
                             timed(lambda: st.documents().documents),
                             timed(lambda: Documents.from_threads(st.iter_threads())),
                             lambda a, b: a.__dict__ == b.__dict__ == docs.__dict__)
        if "analyse" in parts:
            side_by_side("tokens", "analyse_compiled", "analyse_pure_python",
                         lambda: analyse(docs.texts, pure=False), lambda: analyse(docs.texts, pure=True),
                         lambda a, b: a == b)
        if "translation" in parts:
            tokens = tokens or analyse(docs.texts, pure=False)[1]
            pairs = translation_pairs(docs, tokens)
            side_by_side("tables", "translation_flat_links", "translation_per_pair",
                         lambda: train(pairs, reference=False), lambda: train(pairs, reference=True), same_table)
        if "documents" in parts:
            file = DocumentsFile(docs, work)
            side_by_side("documents_written", "documents_save_binary", "documents_save_json_lines",
                         lambda: file.save(True), lambda: file.save(False),
                         lambda a, b: file.binary.stat().st_size > 0 and file.lines.stat().st_size > 0)
            side_by_side("documents_load", "documents_load_binary", "documents_load_json_lines",
                         lambda: file.load(True), lambda: file.load(False), file.same)
            side_by_side("documents_load", "documents_load_binary_every_text", "documents_load_json_lines_every_text",
                         lambda: file.load(True, True), lambda: file.load(False, True), file.same)
            extra = {"documents_file_bytes": {"binary": file.binary.stat().st_size,
                                              "json_lines": file.lines.stat().st_size},
                     "documents_python_bytes_held": {"binary": file.held(True), "json_lines": file.held(False)}}
        if written_one is not None:
            side_by_side("copy", "documents_copied", "documents_read_and_matched", lambda: written_one.build(True),
                         lambda: written_one.build(False), written_one.same)
        if comment_tokens is not None:
            side_by_side("term_ids", "term_ids_carried", "term_ids_from_strings", comment_tokens.ids,
                         comment_tokens.strings, comment_tokens.same)
        if vectors is not None:
            vectors.clear()
            side_by_side("vectors", "vectors_linked", "vectors_copied", vectors.linked, vectors.copied, vectors.same)
            written = {side: vectors.written(side) for side in ("linked", "copied")}
    shutil.rmtree(work, ignore_errors=True)
    best = {k: round(min(v), 4) for k, v in times.items()}
    ratios = {f"{part}_ratio": round(best[slow] / best[fast], 2)
              for part, fast, slow in (("analyse", "analyse_compiled", "analyse_pure_python"),
                                       ("translation", "translation_flat_links", "translation_per_pair"),
                                       ("read", "read_one_query", "read_thread_objects"),
                                       ("term_ids", "term_ids_carried", "term_ids_from_strings"),
                                       ("documents_save", "documents_save_binary", "documents_save_json_lines"),
                                       ("documents_load", "documents_load_binary", "documents_load_json_lines"),
                                       ("documents_load_every_text", "documents_load_binary_every_text",
                                        "documents_load_json_lines_every_text"),
                                       ("vectors", "vectors_linked", "vectors_copied"),
                                       ("copy", "documents_copied", "documents_read_and_matched")) if fast in best}
    print(json.dumps({
        "bench": "build_parts", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
        "documents": len(docs), "answers": docs.counts()["answers"], "rounds": args.rounds,
        "seconds": {k: [round(x, 4) for x in v] for k, v in times.items()}, "best_s": best, **ratios,
        **{f"same_{k}": v for k, v in same.items()},
        **({"vectors_documents": vectors.n, "bytes_written": written} if vectors is not None else {}),
        **({"term_ids_documents": len(comment_tokens.docs)} if comment_tokens is not None else {}),
        **(extra if "documents" in parts else {})}))


if __name__ == "__main__":
    main()
