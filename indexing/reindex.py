"""The batch reindex job: store -> documents -> BM25, LM, FAISS -> a new published generation."""
from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm import tqdm

from .bm25 import BM25Index
from .config import IndexSettings
from .dense import DenseIndex, choose_kind
from .documents import FILE as DOCUMENTS_FILE
from .documents import MADE, QUESTION, Documents, TextRuns, documents_file
from .embcache import EmbeddingCache, embed_with_cache, text_key
from .engines import EncodeFn, Engine, LocalEngine, embed_block
from .generations import (ANSWER_VECTORS, FORMAT, FORMAT_VERSION, IndexFormatError, current_generation, link_or_copy,
                          prune, publish, remove_stale_builds)
from .lm import LMIndex
from .models import Thread
from .rowvectors import RowVectors
from .store import StoreRead, ThreadRows, ThreadStore
from .termmatrix import TermMatrix, TokenIds, token_digests
from .text import INDEX_ANALYZER, Analyzer
from .translation import TranslationTable

log = logging.getLogger(__name__)

Progress = Callable[[str, float], None]  # (stage, fraction done) for job status


class ReindexError(Exception):
    pass


class _Lock:
    """The data folder's reindex lock (an flock, so a killed holder frees it): one build at a time, whatever process."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.fh = open(root / ".reindex.lock", "w")
        self.held = False

    def acquire(self) -> "_Lock":
        """Take the lock now, or raise ReindexError (BUSY) at once when another build holds it."""
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise ReindexError(BUSY) from None
        self.held = True
        return self

    def __enter__(self):
        return self if self.held else self.acquire()

    def __exit__(self, *exc):
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


BUSY = "another reindex is running on this data directory; wait for it to finish"


@dataclass(frozen=True)
class Staleness:
    """What the live generation lacks: ``generation`` (there is none), ``store`` (threads added, changed or deleted
    since it was built: search does not see them), ``documents`` (every thread is searchable; its documents were made
    by an earlier release, without what a later one reads of them: their threads' tags, round 55) or ``translation``
    (every thread is searchable; only the translation table, which ``expand: "translation"`` alone reads, awaits
    training on the store's pairs); and why, in words."""
    behind: Literal["generation", "store", "documents", "translation"]
    reason: str


def staleness(settings: IndexSettings, store: ThreadStore | None = None,
              fingerprint: str | None = None) -> Staleness | None:
    """What the live generation lacks of the store as it is now (None: nothing): there is no live generation, a
    thread was added, changed or deleted since it was built (the store's fingerprint against the one it recorded), its
    documents were made otherwise than this release makes them (``documents.MADE``: a build after an upgrade reads
    every thread again, its vectors and tokens reused), or it went live before its translation table was trained
    (``reindex``'s ``translation_later``) and no second generation has followed yet.
    ``store``: an open handle on the data folder's store (a service's), else one is opened for the question;
    ``fingerprint``: the store's, read already (``cqa status`` reads it without opening the store for writing)."""
    from .searcher import manifest_of
    m = manifest_of(settings.index_root)
    if m is None:
        return Staleness("generation", "no live generation")
    if fingerprint is None and store is None:
        with ThreadStore(settings.store_path) as store:
            return staleness(settings, store)
    if (fingerprint if fingerprint is not None else store.fingerprint()) != m.get("store_fingerprint"):
        return Staleness("store", f"the store changed since {m['generation']} was built")
    if m.get("documents_made", 0) < MADE:
        return Staleness("documents", f"{m['generation']} was built by an earlier release, whose documents lack their "
                         "threads' tags: search serves it, and a tag filter waits for the next build")
    if m.get("build", {}).get("translation", {}).get("trains_after_publish"):
        return Staleness("translation", f"{m['generation']} went live before its translation table was trained on "
                         "the store's pairs: the build that trains it publishes a generation with it, or, stopped "
                         "first, left it to the next build")
    return None


def why_stale(settings: IndexSettings, store: ThreadStore | None = None) -> str | None:
    """``staleness``'s reason: why the live generation does not hold the store as it is now (None when it does)."""
    s = staleness(settings, store)
    return s.reason if s is not None else None


def local_engine(settings: IndexSettings, encode_fn: EncodeFn | None = None, spec=None) -> LocalEngine:
    """The in-process engine, with the real encoder (``spec``, default $CQA_DENSE_ENCODER) unless a test gives
    another ``encode_fn``."""
    if encode_fn is None:
        from .encoder import encode
        spec = spec or settings.encoder

        def encode_fn(texts):
            return encode(texts, batch_size=settings.embedding_batch_size, device=settings.device, spec=spec)
        return LocalEngine(encode_fn, batch_size=embed_block(settings.embedding_batch_size), encoder=spec)
    return LocalEngine(encode_fn, batch_size=embed_block(settings.embedding_batch_size))


def ray_engine(settings: IndexSettings, options):
    """The Ray engine (``indexing.engines.RayOptions``) for this data folder: its dense encoder, device and batch
    size, as ``cqa reindex --engine ray`` and bench/reindex_scale.py make it."""
    from .engines import RayEngine
    return RayEngine(options, device=settings.device, encoder_batch=settings.embedding_batch_size,
                     encoder=settings.encoder)


def reindex(settings: IndexSettings, progress: bool = True, skip_dense: bool = False,
            on_progress: Progress | None = None, analyzer: Analyzer | None = None,
            encode_fn: EncodeFn | None = None, engine: Engine | None = None, if_stale: bool = False,
            translation_later: bool = False, on_live: Callable[[dict], None] | None = None,
            grow_dense: bool = True, carry_translation: bool = True) -> dict:
    """Build every index from the store into a new generation and make it live. Returns a summary.

    With ``if_stale`` it builds only when the live generation no longer holds the store (``why_stale``), checked
    under the lock, and a build already running elsewhere is no error: the summary then says ``skipped`` and why,
    so any number of processes may ask at once (a service's automatic refresh, a cron job) and one builds.

    With ``translation_later``, a build whose question-answer pairs changed while the live generation has a
    translation table publishes first with that table (the one index no default search reads: only ``expand:
    "translation"`` does), calls ``on_live`` with that generation, then trains the table on the new pairs and
    publishes a second generation, the first's files (hard links) with the new table: what a build without the
    option publishes, a few seconds sooner searchable (what the automatic refresh asks for). Killed between the two,
    the live generation says its table awaits training (``why_stale``), so the next ``if_stale`` build trains it.

    An HNSW or IVF dense index grows the live generation's (``grow_plan``) unless ``grow_dense`` or the setting
    ``dense_grow`` is off. The live translation table is kept while few question-answer pairs changed since it was
    trained (``build_translation``, the setting ``translation_retrain_changed``) unless ``carry_translation`` is
    off.

    ``engine`` does the analysis and the embedding (default: this process, see ``indexing.engines``); whatever
    the engine, this function merges its output and writes and publishes the generation."""
    analyzer = analyzer or INDEX_ANALYZER
    engine = engine or local_engine(settings, encode_fn)
    root = settings.index_root
    report = on_progress or (lambda stage, frac: None)
    try:
        lock = _Lock(root).acquire()
    except ReindexError:
        if not if_stale:
            raise
        return {"skipped": BUSY, "generation": current_generation(root)}
    with lock:
        if if_stale and (why := why_stale(settings)) is None:
            return {"skipped": "the live generation holds the store as it is", "generation": current_generation(root)}
        if if_stale:
            log.info("building a new generation: %s", why)
        stale = remove_stale_builds(root)
        if stale:
            log.info("removed %d unfinished builds: %s", len(stale), ", ".join(stale))
        t_start = time.perf_counter()
        stamp, name, tmp = _new_build(root)
        timings: dict[str, dict] = {}

        report("documents", 0.0)
        t0 = time.perf_counter()
        with ThreadStore(settings.store_path) as store:
            read, docs, carried, how = read_documents(store, LiveDocuments.of(root))  # one read transaction
        fingerprint, n_threads = read.fingerprint, len(read.threads)
        if len(docs) == 0:
            raise ReindexError("the store is empty: ingest threads first (`cqa ingest PATH`)")
        docs.save(tmp / DOCUMENTS_FILE)
        read.threads.save(tmp / THREADS_FILE)
        del read
        timings["documents"] = {**_timing(t0, len(docs)), **how}

        report("lexical", 0.1)
        t0 = time.perf_counter()
        tokens, how = analyse_carried(docs, carried, engine, analyzer, progress)
        timings["analyse"] = {**_timing(t0, len(docs)), **how}
        t0 = time.perf_counter()
        terms = TermMatrix.of(tokens)
        terms.save(tmp / "terms")
        timings["terms"] = _timing(t0, len(docs))
        t0 = time.perf_counter()
        bm25 = BM25Index.build(terms, k1=settings.bm25_k1, b=settings.bm25_b)
        bm25.save(tmp / "bm25")
        timings["bm25"] = _timing(t0, len(docs))
        t0 = time.perf_counter()
        lm = LMIndex(terms, settings.lm_smoothing, mu=settings.lm_mu, lam=settings.lm_lambda)
        lm.save(tmp / "lm")
        timings["lm"] = _timing(t0, len(docs))

        report("translation", 0.2)
        t0 = time.perf_counter()
        q_rows, a_rows = pair_rows(docs)
        hashes = pair_hash(tokens.digests[q_rows], tokens.digests[a_rows])

        def pairs():  # the token lists, only when a table is trained
            return translation_pairs(docs, tokens.lists())
        built = build_translation(root, pairs, hashes, tmp / "translation_qa", later=translation_later,
                                  retrain_changed=settings.translation_retrain_changed if carry_translation else 0.0)
        timings["translation"] = {**_timing(t0, len(docs)), **built}
        if not built.get("trains_after_publish"):
            del hashes, tokens, pairs  # else kept to train the table once this generation is live

        dense_params, encoder = None, settings.encoder
        if not skip_dense:
            made_by = getattr(engine, "encoder", None)
            if made_by is not None and made_by.id != encoder.id:
                raise ReindexError(f"the {engine.name} engine encodes with {made_by.id}, but this data "
                                   f"directory's dense encoder is {encoder.id} ($CQA_DENSE_ENCODER)")
            report("embed", 0.3)
            t0 = time.perf_counter()
            kind = choose_kind(len(docs), settings.dense_index_kind, settings.dense_exact_max_docs)
            growth = (grow_plan(carried, kind, encoder, settings.dense_grow_max_removed)
                      if grow_dense and settings.dense_grow and carried is not None else None)
            rows = growth.added_rows if growth is not None else list(range(len(docs)))
            vecs, encoded = embed_cached(settings, encoder.id, [docs.texts[i] for i in rows], engine.embed, "embed",
                                         "doc", progress,
                                         lambda done: report("embed", 0.3 + 0.6 * done / max(len(rows), 1)))
            if growth is not None:
                dense = DenseIndex.grown(growth.live, growth.now_row, np.asarray(rows, dtype=np.int64), vecs,
                                         settings.dense_grow_fold_docs)
                how = {"grown_from": growth.generation, "kept": growth.kept, "added": len(rows),
                       "removed_rows": dense.removed, "delta": len(dense.delta),
                       "base": "linked" if dense.base_file is not None else "written"}
            else:
                dense = DenseIndex.build(vecs, kind=kind, model=encoder.id)
                how = {"built": kind}
            dense.save(tmp / "dense")
            dense_params = dense.params
            timings["dense"] = {**_timing(t0, len(docs)), **how, "encoded": encoded, "from_cache": len(rows) - encoded}
            del vecs, dense

        # a test's stand-in encode_fn encodes the dense index only: it must not pass for the answer encoder's vectors
        answer_spec = None if skip_dense or encode_fn is not None else settings.answer_spec
        if answer_spec is not None:
            report("embed answers", 0.9)
            t0 = time.perf_counter()
            encoded, where, how = store_answer_vectors(docs, settings, answer_spec, tmp / ANSWER_VECTORS,
                                                       progress, engine, carried, link=grow_dense)
            timings["answer_vectors"] = {**_timing(t0, len(docs)), "answers": docs.counts()["answers"],
                                         "encoded": encoded, "engine": where, **how}

        report("publish", 0.95)
        manifest = {
            "kind": FORMAT, "format_version": FORMAT_VERSION, "generation": name,
            "created_at": stamp.isoformat(), "store_fingerprint": fingerprint,
            "threads": n_threads, "documents": docs.counts(), "documents_made": MADE, "analyzer": analyzer.to_dict(),
            "analysis": analyzer.fingerprint(),
            "indexes": {"bm25": bm25.params, "lm": lm.params, "dense": dense_params},
            "model": encoder.id if dense_params else None,
            "encoder": encoder.to_dict() if dense_params else None,
            "answer_encoder": answer_spec.to_dict() if answer_spec is not None else None,
            "engine": engine.describe(),
            "build": timings,
        }
        _publish_built(root, tmp, name, manifest)
        live_after = None
        if built.get("trains_after_publish"):
            live_after = {"generation": name, "seconds": round(time.perf_counter() - t_start, 3)}
            log.info("%s is live with %s's translation table; training the table on the new pairs", name,
                     built["carried_from"])
            if on_live is not None:
                on_live(live_after)
            report("translation", 0.96)
            t0 = time.perf_counter()
            first = name
            stamp, name, tmp = _new_build(root)
            _link_tree(root / first, tmp, skip={"translation_qa", "manifest.json"})
            trained = train_translation(pairs(), hashes, tmp / "translation_qa")
            timings = {**timings, "translation": {**_timing(t0, len(docs)), **trained, "trained_after": first}}
            _publish_built(root, tmp, name, {**manifest, "generation": name, "created_at": stamp.isoformat(),
                                             "build": timings})
        removed = prune(root, settings.keep_generations)
        report("done", 1.0)
    out = {"generation": name, "engine": engine.name, "threads": n_threads, "documents": docs.counts(),
           "seconds": round(time.perf_counter() - t_start, 3), "indexes": timings, "pruned": removed}
    return {**out, "live_before_translation": live_after} if live_after else out


# what reading a damaged or foreign live generation raises; a build then computes what it would have reused
UNREADABLE = (OSError, ValueError, KeyError, IndexError, TypeError, RuntimeError, IndexFormatError)


def _not_reused(generation: str, what: str, error: Exception) -> None:
    log.warning("not reusing %s of the live generation %s (%s: %s); computing it", what, generation,
                type(error).__name__, error)


THREADS_FILE = "store_threads.npy"  # a generation's record of the store's threads it was built from (ThreadRows)


@dataclass
class LiveDocuments:
    """The live generation's documents, and its record of the store's threads they were made from (``threads``; None
    for a generation built before round 21, or whose documents were made otherwise: ``documents.MADE``)."""
    generation: str
    folder: Path
    manifest: dict
    documents: Documents
    threads: ThreadRows | None
    starts: np.ndarray  # each thread's first document row (its question), then the number of documents

    @classmethod
    def of(cls, root: Path) -> "LiveDocuments | None":
        """None without a live generation, or with one whose documents cannot be read (a warning says so)."""
        name = current_generation(root)
        if name is None:
            return None
        folder = root / name
        try:
            docs = Documents.load(documents_file(folder))
            manifest = json.loads((folder / "manifest.json").read_text())
        except UNREADABLE as e:
            _not_reused(name, "its documents", e)
            return None
        threads, starts = None, docs.thread_starts()
        if manifest.get("documents_made") == MADE and (folder / THREADS_FILE).exists():
            try:
                threads = ThreadRows.load(folder / THREADS_FILE, [docs.thread_ids[i] for i in starts[:-1]])
            except UNREADABLE as e:
                _not_reused(name, "its record of the store's threads", e)
        return cls(name, folder, manifest, docs, threads, starts)


def read_documents(store: ThreadStore, live: LiveDocuments | None) -> tuple[StoreRead, Documents, "Carried | None",
                                                                            dict]:
    """A build's documents, in the store's order, and what they share with the live generation (``Carried``).

    With the live generation's record of the store's threads, only the threads it lacks as they are (new, edited,
    or moved) are read from the store; the others' documents are copied from the live generation, whose rows they
    are. Reading every thread again and matching every document with the live ones took 0.9 s at 235k documents in a
    build that adds one comment; this takes 0.23 s (bench/build_parts.py ``copy``). A document read is matched with a
    live one of the same id and text (a comment of an edited thread), as ``Carried.matched`` does. The documents are
    those a full read gives (tests/test_incremental_build.py), so every index is the same. Returns the store's read,
    the documents, the match and the build's record."""
    read = store.documents(live.threads if live is not None else None)
    if live is None:
        return read, read.documents, None, {"read_threads": len(read.threads)}
    if live.threads is None:
        return (read, read.documents, Carried.matched(live, read.documents),
                {"read_threads": len(read.threads)})
    old, fresh, old_starts = live.documents, read.documents, live.starts
    fresh_starts = fresh.thread_starts().tolist()
    at = {t: k for k, t in enumerate(live.threads.ids)}
    # runs of rows: (from the live generation?, start, stop), one per run of threads copied or read in order
    runs: list[list] = []
    held = np.zeros(len(live.threads), dtype=bool)
    f = 0
    for tid, was_read in zip(read.threads.ids, read.read.tolist()):
        if was_read:
            src, a, b = False, fresh_starts[f], fresh_starts[f + 1]
            f += 1
        else:
            k = at[tid]
            held[k] = True
            src, a, b = True, int(old_starts[k]), int(old_starts[k + 1])
        if runs and runs[-1][0] == src and runs[-1][2] == a:
            runs[-1][2] = b
        else:
            runs.append([src, a, b])
    docs = Documents(texts=TextRuns())
    for name, column in docs.__dict__.items():
        for src, a, b in runs:
            if name == "texts":  # a live text stays the bytes of its mapped file until read
                column.extend((old if src else fresh).texts, a, b)
            else:
                column.extend((old if src else fresh).__dict__[name][a:b])
    live_row = np.concatenate([np.arange(a, b, dtype=np.int64) if src else np.full(b - a, -1, dtype=np.int64)
                               for src, a, b in runs] or [np.zeros(0, dtype=np.int64)])
    # a document read matched by id and text among the live threads not copied (edited or deleted since)
    gone = np.flatnonzero(~held).tolist()
    rows = {old.ids[r]: r for k in gone for r in range(int(old_starts[k]), int(old_starts[k + 1]))}
    for j in np.flatnonzero(live_row < 0).tolist():
        r = rows.pop(docs.ids[j], -1)
        if r >= 0 and old.texts[r] == docs.texts[j]:
            live_row[j] = r
    carried = Carried(live.generation, live.folder, live.manifest, live_row)
    return read, docs, carried, {"copied_from": live.generation, "copied_threads": int(held.sum()),
                                 "read_threads": int(read.read.sum())}


@dataclass
class Carried:
    """What a build's documents share with the live generation: ``live_row[j]`` is the row of the live generation's
    document with the same id and the same text as the build's document ``j``, or -1 (new, or edited since). Such a
    document's tokens and vectors are what the live generation holds, so a build reads them back rather than
    computing them again (``analyse_carried``, ``grow_plan``)."""
    generation: str
    folder: Path
    manifest: dict
    live_row: np.ndarray

    @classmethod
    def matched(cls, live: LiveDocuments, docs: Documents) -> "Carried":
        """The match of ``docs`` with the live generation's documents one by one: by id, then the text compared
        (rather than hashing every text of both); pop: each live document matches one document at most."""
        at = {d: i for i, d in enumerate(live.documents.ids)}
        texts = list(live.documents.texts)  # decoded in one pass
        live_row = np.fromiter((-1 if (i := at.pop(d, -1)) < 0 or texts[i] != t else i
                                for d, t in zip(docs.ids, docs.texts)), dtype=np.int64, count=len(docs))
        return cls(live.generation, live.folder, live.manifest, live_row)

    @property
    def kept(self) -> np.ndarray:
        """The build's document rows that the live generation holds as they are."""
        return np.flatnonzero(self.live_row >= 0)


def analyse_carried(docs: Documents, carried: Carried | None, engine: Engine, analyzer: Analyzer,
                    progress: bool) -> tuple[TokenIds, dict]:
    """Every document's token ids and digests: a kept document's carried over from the live generation's term matrix
    (``TokenIds.carried``: the ids ``TokenIds.of`` gives the same token lists, so every index built from them is the
    one a full analysis gives), the others analysed by ``engine``. The live ids count only when they were made by the
    same analysis (``Analyzer.fingerprint``). Returns them and the build's record."""
    kept = carried.kept if carried is not None else np.zeros(0, dtype=np.int64)
    live = None
    if len(kept) and carried.manifest.get("analysis") == analyzer.fingerprint():
        try:
            live = TokenIds.load(carried.folder / "terms")
        except UNREADABLE as e:
            _not_reused(carried.generation, "its tokens", e)
    if live is not None:
        rest = np.flatnonzero(carried.live_row < 0).tolist()
        fresh = engine.analyse([docs.texts[j] for j in rest], analyzer, progress) if rest else []  # none after deletes
        try:
            tokens = TokenIds.carried(live, carried.live_row, fresh)
        except UNREADABLE as e:  # saved ids that do not fit the live documents
            _not_reused(carried.generation, "its tokens", e)
            live = None
    if live is None:
        return TokenIds.of(engine.analyse(docs.texts, analyzer, progress), digest=True), {"analysed": len(docs)}
    how = {"carried_from": carried.generation, "carried": len(kept), "analysed": len(rest)}
    if tokens.digests is None:  # the live generation was built before round 20: its tokens digested once
        tokens.digests = token_digests(tokens.lists())
        how["digested"] = len(docs)
    return tokens, how


GROWABLE = ("hnsw", "ivf")  # the kinds whose build costs far more than adding to them


@dataclass
class GrowPlan:
    """How a build grows the live generation's dense index instead of building its own: the live index, each live
    document row's row in this build (``now_row``, -1: gone or edited, its vector marked removed) and the document
    rows the live index lacks (``added_rows``, whose vectors the build adds)."""
    generation: str
    live: DenseIndex
    now_row: np.ndarray
    added_rows: list[int]
    kept: int


def grow_plan(carried: Carried, kind: str, encoder, max_removed: float) -> GrowPlan | None:
    """A plan to grow the live generation's dense index into one for the build's documents, or None when the build
    must build its own: a kind other than HNSW or IVF (a flat index costs no more to build than to copy), a live
    index of another kind or encoder, or more than ``max_removed`` of the grown index's rows marked removed (each
    costs search time, so the build starts afresh and the next builds grow that). A kept row holds a document of
    the same id and the same text (the vector depends on nothing else)."""
    params = (carried.manifest.get("indexes") or {}).get("dense") or {}
    if (kind not in GROWABLE or not (carried.folder / "dense").exists() or params.get("index") != kind
            or carried.manifest.get("encoder") != encoder.to_dict()):
        return None
    try:
        live = DenseIndex.load(carried.folder / "dense", lazy=True)  # its FAISS file read only if added to
    except UNREADABLE as e:
        _not_reused(carried.generation, "its dense index", e)
        return None
    kept = carried.kept
    kept = kept[live.holds(carried.live_row[kept])]  # (a live index holds every live document)
    now_row = np.full(int(carried.live_row.max(initial=-1)) + 1, -1, dtype=np.int64)
    now_row[carried.live_row[kept]] = kept
    held = np.zeros(len(carried.live_row), dtype=bool)
    held[kept] = True
    added = np.flatnonzero(~held).tolist()
    base, in_delta = live.moved(now_row)
    removed = int((base < 0).sum())
    total = len(base) + int((in_delta >= 0).sum()) + len(added)  # the grown index's rows
    if removed > max_removed * total:
        log.info("building the dense index anew: growing %s's would mark %d of %d rows removed (over %.0f%%)",
                 carried.generation, removed, total, 100 * max_removed)
        return None
    return GrowPlan(carried.generation, live, now_row, added, len(kept))


def _new_build(root: Path) -> tuple[datetime, str, Path]:
    """A new generation's time, name and build folder (created)."""
    stamp = datetime.now(timezone.utc)
    name = f"gen-{stamp:%Y%m%dT%H%M%S%f}Z-{secrets.token_hex(2)}"
    tmp = root / f".tmp-{name}"
    tmp.mkdir(parents=True)
    return stamp, name, tmp


def _publish_built(root: Path, tmp: Path, name: str, manifest: dict) -> None:
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    if os.environ.get("CQA_TEST_CRASH_BEFORE_PUBLISH"):  # lets a test kill a reindex at its worst moment
        os.kill(os.getpid(), 9)
    publish(root, tmp, name)


def _link_tree(src: Path, dst: Path, skip: set[str]) -> None:
    """``src``'s files under ``dst`` (which exists) as hard links, but for the top-level names in ``skip``; copies
    where the file system has no hard links. Generations are never written after they are published, so sharing
    their files is safe."""
    import shutil
    for p in src.iterdir():
        if p.name in skip:
            continue
        if p.is_dir():
            shutil.copytree(p, dst / p.name, copy_function=link_or_copy)
        else:
            link_or_copy(p, dst / p.name)


def embed_cached(settings: IndexSettings, model_id: str, texts: list[str], embed, desc: str, unit: str,
                 progress: bool, on_done: Callable[[int], None] | None = None) -> tuple[np.ndarray, int]:
    """``texts``' vectors through the data folder's embedding cache (``model_id``'s entries), the missing ones
    embedded by ``embed`` (an engine's), under a progress bar; ``on_done(texts done)`` after each batch. Returns the
    matrix and how many texts were encoded."""
    cache = EmbeddingCache(settings.cache_dir / "embeddings.sqlite3", model_id)
    bar = tqdm(total=len(texts), unit=unit, desc=desc, disable=not progress)
    done = [0]

    def tick(n):
        done[0] += n
        bar.update(n)
        if on_done is not None:
            on_done(done[0])
    try:
        return embed_with_cache(texts, cache, embed, progress=tick)
    finally:
        cache.close()
        bar.close()


def encode_ahead(settings: IndexSettings, threads: Iterable[Thread], max_texts: int | None,
                 progress: bool = False) -> dict:
    """Put in the data folder's embedding cache now the vectors the next build will want for ``threads``: the dense
    index's of every text and the answer encoder's of every comment, encoded by this process (the service, whose
    encoders are loaded or soon are). POST /threads calls it before its write, so every build that sees the write
    (the automatic refresh's child, another worker's, a cron job's) finds them cached and need not load either model,
    which otherwise costs a new thread or answer several seconds of its wait to be searchable. A cache only: the
    build encodes whatever is missing, as before. When the cache lacks more than ``max_texts`` of them, they are left
    to the build, so a large import does not hold the service's encoder (None: no limit, as `cqa ingest` asks, under
    progress bars); texts it holds cost nothing and do not count, so a long thread sent again with one new comment is
    encoded ahead. Returns what it did (``texts``, ``encoded``, ``seconds``, or ``skipped`` and why)."""
    t0 = time.perf_counter()
    texts, answers = ahead_texts(settings, threads)
    n = len(texts) + len(answers)
    todo = [(missing, engine, what) for some, engine, what in (
        (texts, local_engine(settings), "texts"),
        (answers, local_engine(settings, spec=settings.answer_spec), "comments"))
        if (missing := uncached(settings, engine.encoder.id, some))]
    lacking = sum(len(missing) for missing, _, _ in todo)
    if max_texts is not None and lacking > max_texts:
        return {"texts": n,  # only those the cache lacks count
                "skipped": f"{lacking} texts, more than {max_texts} ($CQA_ENCODE_AHEAD_TEXTS): the build encodes them"}
    encoded = sum(embed_cached(settings, engine.encoder.id, missing, engine.embed, f"encode ahead ({what})", "text",
                               progress)[1] for missing, engine, what in todo)
    return {"texts": n, "encoded": encoded, "seconds": round(time.perf_counter() - t0, 3)}


def uncached(settings: IndexSettings, model_id: str, texts: list[str]) -> list[str]:
    """The distinct ``texts`` the data folder's embedding cache holds no vector of for ``model_id``."""
    if not texts:
        return []
    cache = EmbeddingCache(settings.cache_dir / "embeddings.sqlite3", model_id)
    try:
        keys = {text_key(model_id, t): t for t in texts}
        held = cache.get_many(list(keys))
    finally:
        cache.close()
    return [t for k, t in keys.items() if k not in held]


def ahead_texts(settings: IndexSettings, threads: Iterable[Thread]) -> tuple[list[str], list[str]]:
    """What ``encode_ahead`` encodes for ``threads``: every text for the dense index, and every comment for the answer
    encoder (none when there is no answer encoder)."""
    docs = Documents.from_threads(threads)
    return docs.texts, [docs.texts[i] for i in docs.answer_rows()] if settings.answer_spec is not None else []


def store_answer_vectors(docs: Documents, settings: IndexSettings, spec, folder: Path, progress: bool,
                         engine: Engine, carried: Carried | None = None, link: bool = True) -> tuple[int, str, dict]:
    """The answer encoder's vector of every comment (``$CQA_ANSWER_ENCODER``) by document row, saved in ``folder``
    for /search to rerank answers without encoding them. A comment the live generation holds as it is (``carried``)
    keeps the vector stored there, when that encoder made it: ``RowVectors.grown`` links the live file rather than
    writing it again (with ``link`` off, as ``cqa reindex --full``, it writes all of them anew). The others come
    through the embedding cache, so a reindex encodes only new or changed comments, on ``engine``'s workers where it
    can load the encoder (Ray), else in this process. Returns how many comments it encoded, the engine that encoded
    them and the build's record of what it kept."""
    rows = np.asarray(docs.answer_rows(), dtype=np.int64)
    live = None
    if carried is not None and carried.manifest.get("answer_encoder") == spec.to_dict():
        try:
            live = RowVectors.open(carried.folder / ANSWER_VECTORS)
        except UNREADABLE as e:
            _not_reused(carried.generation, "its comment vectors", e)
    kept = live.where(carried.live_row[rows]) >= 0 if live is not None else np.zeros(len(rows), dtype=bool)
    need = rows[~kept]
    embed = engine.embedder(spec)
    where = engine.name if embed is not None else "local"
    embed = embed or local_engine(settings, spec=spec).embed
    vecs, encoded = embed_cached(settings, spec.id, [docs.texts[i] for i in need], embed,
                                 f"embed answers ({where})", "comment", progress)
    if not len(vecs):
        vecs = np.zeros((0, live.dim if live is not None else 384), dtype=np.float32)
    if live is None or not kept.any():
        RowVectors.build(len(docs), need, vecs).save(folder)
        return encoded, where, {"base": "written"}
    # without ``link`` every build folds (-1 added vectors is always too many): one compact base, written
    out = RowVectors.grown(live, carried.live_row, rows, need, vecs, settings.dense_grow_fold_docs if link else -1,
                           settings.dense_grow_max_removed)
    out.save(folder)
    return encoded, where, {"copied": int(kept.sum()), "copied_from": carried.generation,
                            "base": "linked" if out.base_file is not None else "written", "added": len(out.added),
                            "dead": out.dead}


def pair_rows(docs: Documents) -> tuple[np.ndarray, np.ndarray]:
    """The store's (question, answer) document row pairs, in document order: each comment whose thread's question is
    among the documents, with that question."""
    question_row = {tid: i for i, (kind, tid) in enumerate(zip(docs.kinds, docs.thread_ids)) if kind == QUESTION}
    pairs = [(question_row[tid], i) for i, (kind, tid) in enumerate(zip(docs.kinds, docs.thread_ids))
             if kind != QUESTION and tid in question_row]
    rows = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return rows[:, 0], rows[:, 1]


def translation_pairs(docs: Documents, tokens: list[list[str]]) -> list[tuple[list[str], list[str]]]:
    """The store's (question, answer) token pairs (``pair_rows``), from the analysed documents: what IBM Model 1,
    t(answer word | question word), is trained on for translation expansion (ranking/expansion.py). A question's
    answers share one list."""
    return [(tokens[q], tokens[a]) for q, a in zip(*(r.tolist() for r in pair_rows(docs)))]


PAIRS_FILE = "pairs.npy"  # in a table's folder: the pairs it was trained on, one 64-bit digest each, sorted
# how those digests are made, in a trained table's build record: 2, ``pair_hash`` of the documents' token digests
# (round 20); a table whose record says otherwise was digested another way, so its pairs are not compared
PAIR_HASH = 2


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, on uint64 arrays (wrapping): a bijection whose every output bit depends on every input
    bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def pair_hash(question: np.ndarray, answer: np.ndarray) -> np.ndarray:
    """One 64-bit digest per (question, answer) pair of documents from their tokens' digests (``token_digests``, rows
    in pair order): what a build reads for both questions it asks of IBM Model 1's pairs, whether they are the live
    table's (``pairs_digest``) and how many changed since it was trained (``changed_pairs``). Both words of both
    digests count, and the order (a pair is not its reverse)."""
    q, a = np.asarray(question, dtype=np.uint64), np.asarray(answer, dtype=np.uint64)
    return _mix(q[:, 0] ^ _mix(a[:, 0] ^ _mix(q[:, 1] ^ _mix(a[:, 1] + np.uint64(0x9E3779B97F4A7C15)))))


def pair_hashes(pairs: list[tuple[list[str], list[str]]]) -> np.ndarray:
    """``pair_hash`` of (question, answer) token lists: what a build computes from its documents' digests."""
    return pair_hash(token_digests(q for q, _ in pairs), token_digests(a for _, a in pairs))


def pairs_digest(hashes: np.ndarray) -> str:
    """The pairs of ``pair_hashes`` as one digest: equal digests, the same pairs in the same order, the same table."""
    import hashlib
    return hashlib.sha256(np.ascontiguousarray(hashes, dtype=np.uint64).tobytes()).hexdigest()[:32]


def changed_pairs(before: np.ndarray, now: np.ndarray) -> int:
    """Pairs in one of two lists of ``pair_hashes`` and not the other, counted as multisets (the same pair twice is
    two): a new or removed comment counts one, an edited one two (its old pair gone, its new one added)."""
    a, ca = np.unique(before, return_counts=True)
    b, cb = np.unique(now, return_counts=True)
    _, ia, ib = np.intersect1d(a, b, assume_unique=True, return_indices=True)
    return int(before.size + now.size - 2 * np.minimum(ca[ia], cb[ib]).sum())


def build_translation(root: Path, pairs: Callable[[], list[tuple[list[str], list[str]]]], hashes: np.ndarray,
                      out: Path, later: bool = False, retrain_changed: float = 0.0) -> dict:
    """The translation table of the pairs ``pairs()`` gives (called only when the table is trained; their
    ``pair_hash`` digests are ``hashes``) saved at ``out``, and the build's record of it:

    - copied from the live generation when it was trained on the same pairs (a new question without answers, an edit
      of a title, a delete of an unanswered thread change none: training again would give the same table);
    - carried over from it (``carried_from``, ``changed_pairs``) when at most ``retrain_changed`` of ``pairs``
      differ from those it was trained on (its ``pairs.npy``): a table trained on nearly the same pairs, kept until
      the changes add up past the share (bench/translation_staleness.py measures what it costs `expand:
      "translation"`); ``retrain_changed`` 0 never carries;
    - else, with ``later``, copied too, the record saying ``trains_after_publish`` (``reindex``'s
      ``translation_later``);
    - else trained."""
    import shutil

    from .searcher import manifest_of
    digest = pairs_digest(hashes)
    m = manifest_of(root) or {}
    live, live_record = m.get("generation"), m.get("build", {}).get("translation", {})
    live_digest = live_record.get("pairs_digest")
    table = root / live / "translation_qa" if live else None
    if table is None or live_digest is None or not table.is_dir():
        return train_translation(pairs(), hashes, out)
    if live_digest == digest:
        shutil.copytree(table, out)
        return {"pairs": len(hashes), "pairs_digest": digest, "pair_hash": PAIR_HASH, "reused_from": live}
    if retrain_changed > 0 and len(hashes) and live_record.get("pair_hash") == PAIR_HASH:
        try:
            trained = np.load(table / PAIRS_FILE, allow_pickle=False)
        except FileNotFoundError:
            trained = None  # trained before round 18, which kept no pairs: train again
        except UNREADABLE as e:
            _not_reused(live, "its translation table's pairs", e)
            trained = None
        if trained is not None:
            changed = changed_pairs(trained, hashes)
            if changed <= retrain_changed * len(hashes):
                shutil.copytree(table, out)
                return {"pairs": len(hashes), "pairs_digest": live_digest, "pair_hash": PAIR_HASH, "carried_from": live,
                        "changed_pairs": changed, "trained_on": int(trained.size)}
    if later:
        shutil.copytree(table, out)
        return {"pairs": len(hashes), "pairs_digest": live_digest, "carried_from": live, "trains_after_publish": True}
    return train_translation(pairs(), hashes, out)


def train_translation(pairs: list[tuple[list[str], list[str]]], hashes: np.ndarray, out: Path) -> dict:
    """IBM Model 1 trained on ``pairs`` (whose ``pair_hash`` digests are ``hashes``), saved at ``out`` with those
    digests, sorted (``PAIRS_FILE``); the build's record."""
    table = TranslationTable.train(pairs)
    table.save(out)
    np.save(out / PAIRS_FILE, np.sort(hashes))
    return {"pairs": table.params.get("pairs", 0), "pairs_digest": pairs_digest(hashes), "pair_hash": PAIR_HASH}


def _timing(t0: float, n: int) -> dict:
    s = time.perf_counter() - t0
    return {"seconds": round(s, 3), "docs_per_s": round(n / s, 1) if s > 0 else None}
