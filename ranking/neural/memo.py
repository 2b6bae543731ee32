"""A serving model's scores of (question, answer) text pairs, kept so that a thread sorted again (a page shown
twice, a thread with one new comment) costs the model only the pairs it has not scored yet.

Two tiers:

- ``ScoreMemo``, in each serving process's memory: the least recently used pair goes first once ``capacity``
  is reached.
- ``ScoreStore``, one SQLite file in the data folder that every serving process of it shares (all the workers of
  ``cqa serve --workers N``, and the processes after a restart). A pair the memory lacks is looked up there
  before the model runs; what the model scores is written there by a background thread, never on the request's
  path. It is a cache: a write that cannot be made is dropped and counted, a file that cannot be read is moved
  aside and started again, and no request ever fails because of it.

Keys are keyed BLAKE2b digests of the pair, the key being the model's identity (its weights, config, scoring
code, device, inference variant and input length), so a retrained or differently run model never reads another's
scores. The evaluation runs use the same two tiers (``ranking.neural.ranker.cached_scores``): a store per model
in the data folder's cache, unbounded, flushed before the run goes on.

A serving encoder's memo of text vectors (``memo_vectors``, ``CQA_VECTOR_MEMO_TEXTS``) has the same two tiers: its
shared file is a ``VectorStore`` (``CQA_VECTOR_STORE_TEXTS``), whose values are the vectors' exact bytes, so a text
any serving process of the data folder encoded is never encoded again, and scores the same. An evaluation run's
bi-encoder keeps its vectors in one too (``ranking.neural.ranker.cached_vectors``), beside its pair scores.
"""
from __future__ import annotations

import hashlib
import logging
import queue
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)


def pair_key(question: str, answer: str, model: str = "") -> bytes:
    """16 bytes that stand for the pair's two texts as scored by ``model`` (keyed BLAKE2b; the texts themselves
    are not kept)."""
    q = question.encode("utf-8", "surrogatepass")
    h = hashlib.blake2b(digest_size=16, key=model.encode()[:64])
    h.update(len(q).to_bytes(8, "little"))  # where the question ends: ("a\0", "b") and ("a", "\0b") differ
    h.update(q)
    h.update(answer.encode("utf-8", "surrogatepass"))
    return h.digest()


class ScoreStore:
    """Pair scores in one SQLite file shared by processes, at most about ``capacity`` of them (the oldest
    written go first). Reads are synchronous (WAL: a reader never waits for a writer); writes go through a queue
    to one writer thread (``flush`` waits for it). ``ScoreStore.at`` gives a process one store per file."""

    TABLE, VALUE = "scores", "REAL"  # what the file holds: a table of (key, value)
    PAGE_SIZE: int | None = None  # SQLite's default
    MAX_PUTS = 64  # queued writes (a request's entries each) per transaction: a backlog never makes one huge one
    WAL_LIMIT = 32 << 20  # bytes the write-ahead log is cut back to after a checkpoint
    _open_stores: dict = {}  # (kind, path) -> the store of this process on that file
    _open_lock = threading.Lock()

    @classmethod
    def at(cls, path: Path, capacity: int) -> "ScoreStore":
        """This process's store on ``path`` (one reader connection and one writer thread per file)."""
        path = Path(path).resolve()
        with cls._open_lock:
            store = cls._open_stores.get((cls, path))
            if store is None or store.capacity != capacity:
                store = cls._open_stores[(cls, path)] = cls(path, capacity)
            return store

    @staticmethod
    def pack(value):
        """A value as the file holds it."""
        return value

    @staticmethod
    def unpack(held):
        """A value as the file held it, back."""
        return held

    def __init__(self, path: Path, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a {self.TABLE} store holds at least one entry, not {capacity}")
        self.path, self.capacity = Path(path), capacity
        self.written = self.dropped = self.read_errors = 0
        self.error = ""  # why the store is off, if it is
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._db = self._open()
        if self._db is not None:
            threading.Thread(target=self._writer, name=f"{self.TABLE}-store-writer", daemon=True).start()

    def _connect(self) -> sqlite3.Connection:
        from indexing.store import opened_while_others_open
        db = sqlite3.connect(self.path, timeout=5.0, check_same_thread=False, isolation_level=None)
        if self.PAGE_SIZE:  # takes effect on a new file only
            db.execute(f"PRAGMA page_size={self.PAGE_SIZE}")
        db.execute(f"PRAGMA journal_size_limit={self.WAL_LIMIT}")
        db.execute("PRAGMA synchronous=NORMAL")  # a killed process loses nothing; a cache need not survive power loss

        def setup(conn: sqlite3.Connection) -> None:  # each worker of a new data folder opens it at the same moment
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self.TABLE} (k BLOB PRIMARY KEY, v {self.VALUE} NOT NULL)")
        opened_while_others_open(db, setup)
        return db

    def _open(self) -> sqlite3.Connection | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                return self._connect()
            except sqlite3.DatabaseError as e:  # not a database, or damaged: it only held a cache
                if not self.path.exists() or isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                    raise
                aside = self.path.with_name(self.path.name + ".unreadable")
                log.warning("%s store %s cannot be read (%s); moved to %s, starting an empty one", self.TABLE,
                            self.path, e, aside)
                for suffix in ("-wal", "-shm"):
                    self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
                self.path.replace(aside)
                return self._connect()
        except (OSError, sqlite3.Error) as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("%s store %s is off: %s; each process keeps only its own memo", self.TABLE, self.path,
                        self.error)
            return None

    def get(self, keys: list[bytes]) -> dict:
        if self._db is None or not keys:
            return {}
        found: dict = {}
        try:
            with self._lock:
                for s in range(0, len(keys), 500):
                    chunk = keys[s: s + 500]
                    found.update((k, self.unpack(v)) for k, v in self._db.execute(
                        f"SELECT k, v FROM {self.TABLE} WHERE k IN ({','.join('?' * len(chunk))})", chunk))
        except sqlite3.Error as e:
            self.read_errors += 1
            if self.read_errors == 1:
                log.warning("%s store %s: a read failed (%s); the model computes those", self.TABLE, self.path, e)
        return found

    def put(self, items: dict) -> None:
        """Queue ``items`` for the writer thread (the caller never waits for the disk)."""
        if self._db is not None and items:
            self._queue.put(dict(items))

    def flush(self) -> None:
        """Wait until every queued write is made or dropped."""
        if self._db is not None:
            self._queue.join()

    def _writer(self) -> None:
        try:
            db = self._connect()
        except sqlite3.Error as e:
            db = None
            log.warning("%s store %s: no writer (%s); nothing is written", self.TABLE, self.path, e)
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty() and len(batch) < self.MAX_PUTS:
                batch.append(self._queue.get_nowait())
            rows = [(k, self.pack(v)) for items in batch for k, v in items.items()]
            try:
                if db is None:
                    raise sqlite3.OperationalError("no writer connection")
                db.execute("BEGIN IMMEDIATE")
                db.executemany(f"INSERT OR REPLACE INTO {self.TABLE} (k, v) VALUES (?, ?)", rows)
                # rowids grow with each write (a replaced pair gets a new one): keep the last ``capacity``
                db.execute(f"DELETE FROM {self.TABLE} WHERE rowid <= (SELECT max(rowid) FROM {self.TABLE}) - ?",
                           (self.capacity,))
                db.execute("COMMIT")
                self.written += len(rows)
            except sqlite3.Error as e:
                try:
                    if db is not None and db.in_transaction:
                        db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                self.dropped += len(rows)
                log.warning("%s store %s: %d entries not written (%s)", self.TABLE, self.path, len(rows), e)
            finally:
                for _ in batch:
                    self._queue.task_done()

    def stats(self) -> dict:
        return {"path": str(self.path), "capacity": self.capacity, "written": self.written, "dropped": self.dropped,
                "read_errors": self.read_errors, "error": self.error}


class VectorStore(ScoreStore):
    """Text vectors in one SQLite file shared by processes, as ``ScoreStore`` keeps pair scores: each value is the
    vector's exact bytes (its dtype, then its numbers), so a vector read back scores as the one the encoder made."""

    TABLE, VALUE = "vectors", "BLOB"
    PAGE_SIZE = 8192  # five rows of a 1.5 KB vector fill a page; the default 4 KB holds two
    _DTYPES = {b"f": np.float32, b"d": np.float64}

    @staticmethod
    def pack(value) -> bytes:
        v = np.asarray(value)
        code = b"d" if v.dtype == np.float64 else b"f"
        return code + np.ascontiguousarray(v, dtype=VectorStore._DTYPES[code]).tobytes()

    @staticmethod
    def unpack(held: bytes) -> np.ndarray:
        return np.frombuffer(held, dtype=VectorStore._DTYPES[bytes(held[:1])], offset=1).copy()


@dataclass
class ScoreMemo:
    """Scores by pair, least recently used dropped first; safe to share between threads. A model call sees
    only the pairs the memo (and its shared ``store``, if any) lacks, each once, and runs outside the lock.
    ``model`` names what scores the pairs; it keys them in the shared store. (A serving encoder keeps its recent
    texts' vectors in one too, keyed by (text, encoder id), behind a ``VectorStore``: ``memo_vectors``.)"""
    capacity: int
    model: str = ""
    store: ScoreStore | None = None
    hits: int = 0
    shared_hits: int = 0
    misses: int = 0
    _scores: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"a score memo holds at least one pair, not {self.capacity}")
        if self.store is not None and not self.model:
            raise ValueError("a score memo that shares a store needs its model's identity")

    def scores(self, pairs: list[tuple[str, str]], compute: Callable[[list[tuple[str, str]]], list[float]]) -> list[float]:
        keys = [pair_key(q, a, self.model) for q, a in pairs]
        known: dict[bytes, float] = {}
        with self._lock:
            for k in keys:
                if k in self._scores:
                    self._scores.move_to_end(k)
                    known[k] = self._scores[k]
        shared = self.store.get([k for k in dict.fromkeys(keys) if k not in known]) if self.store is not None else {}
        todo = {k: p for k, p in zip(keys, pairs) if k not in known and k not in shared}  # each new pair once
        fresh = dict(zip(todo, compute(list(todo.values())))) if todo else {}
        if fresh and self.store is not None:
            self.store.put(fresh)
        with self._lock:
            self.misses += len(fresh)  # pairs the model scored
            self.hits += len(keys) - len(fresh)  # pairs answered without it
            self.shared_hits += sum(k in shared for k in keys)  # of those, found in the shared store
            for k, v in (*shared.items(), *fresh.items()):
                self._scores[k] = v
                self._scores.move_to_end(k)
            while len(self._scores) > self.capacity:
                self._scores.popitem(last=False)
        return [known[k] if k in known else shared[k] if k in shared else fresh[k] for k in keys]

    def clear(self) -> None:
        """Drop every pair kept in memory (the shared store keeps its own; the counts stay)."""
        with self._lock:
            self._scores.clear()

    def stats(self) -> dict:
        with self._lock:
            return {"pairs": len(self._scores), "capacity": self.capacity, "hits": self.hits,
                    "shared_hits": self.shared_hits, "misses": self.misses}


def memo_vectors(memo: ScoreMemo | None, texts: list[str], encoder: str, encode: Callable) -> list:
    """The vectors of distinct ``texts`` by ``encode`` (texts -> a batch of vectors), through a serving encoder's
    ``memo`` of text vectors (keyed by (text, ``encoder``)) when there is one: one ``encode`` call for the texts it
    lacks. Each kept row is copied out of its batch, so a row it keeps never keeps a whole batch alive."""
    if memo is None:
        return list(encode(texts)) if texts else []
    return memo.scores([(t, encoder) for t in texts],
                       lambda todo: [np.array(v) for v in encode([t for t, _ in todo])])
