"""The embedded thread store: SQLite in WAL mode, the source of truth for threads.

Every write is one transaction committed with ``synchronous=FULL``, so a thread that
``upsert`` returned for is on disk and survives a kill -9 or a power cut.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from . import ledger
from .models import Answer, Thread, moment, question_text, tag_key

if TYPE_CHECKING:
    from .documents import Documents

SCHEMA_VERSION = 1
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    category TEXT,
    created_at TEXT,
    author_id TEXT,
    meta TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    seq INTEGER NOT NULL,
    revision INTEGER
);
CREATE TABLE IF NOT EXISTS answers (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    text TEXT NOT NULL,
    created_at TEXT,
    author_id TEXT,
    label TEXT,
    meta TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tag_synonyms (source TEXT PRIMARY KEY, target TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS answers_thread ON answers(thread_id, position);
CREATE INDEX IF NOT EXISTS threads_seq ON threads(seq);
CREATE INDEX IF NOT EXISTS threads_author ON threads(author_id);
CREATE INDEX IF NOT EXISTS answers_author ON answers(author_id);
""" + ledger.SCHEMA + ledger.TAKEDOWNS


class StoreError(Exception):
    """A write the store refused; the message says which record and why. ``written_before``: the threads of the same
    file written before it, in the batches before the refused one (a StackExchange dump is written in batches)."""
    written_before: int = 0


QUESTION_FIELDS = frozenset({"subject", "body", "category", "created_at", "author_id", "meta"})  # update_question


class TagSynonymConflict(Exception):
    """A tag synonym the store refused: its target is a synonym, or its source has synonyms; the message says how."""


class NotInStore(LookupError):
    """The thread, or the comment of a thread, that a write names is not stored; the message says which."""


class PreconditionFailed(Exception):
    """A write made on the condition that the thread is as one of the given ETags says (``if_match``) found it
    otherwise; nothing was written. ``etag`` is the thread's as it is now."""

    def __init__(self, thread_id: str, etag: str):
        super().__init__(f"thread {thread_id!r} has changed since it was read: its ETag is now \"{etag}\"; read it "
                         "again (GET /threads/{id}) and make the change over what it holds now")
        self.thread_id, self.etag = thread_id, etag


@dataclass
class UpsertResult:
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    superseded: list[str] = field(default_factory=list)  # sent with a revision not above the stored one: not written
    # what the erasure ledger (``indexing.ledger``) left out of what was sent: threads asked by a user erased with
    # ``remove`` (not written), such a user's comments (left out), posts of a user erased with ``anonymize`` (written
    # without their id)
    suppressed: list[str] = field(default_factory=list)
    answers_suppressed: int = 0
    posts_anonymized: int = 0
    # what the ledger's takedowns left out: threads taken down (not written), comments taken down (left out)
    taken_down: list[str] = field(default_factory=list)
    answers_taken_down: int = 0

    def add(self, other: "UpsertResult") -> None:
        self.inserted += other.inserted
        self.updated += other.updated
        self.unchanged += other.unchanged
        self.superseded += other.superseded
        self.suppressed += other.suppressed
        self.answers_suppressed += other.answers_suppressed
        self.posts_anonymized += other.posts_anonymized
        self.taken_down += other.taken_down
        self.answers_taken_down += other.answers_taken_down

    def erased(self) -> dict:
        """What the ledger (erasures, takedowns) left out or anonymized, for a summary (empty when it did nothing)."""
        return {k: v for k, v in (("suppressed", len(self.suppressed)), ("answers_suppressed", self.answers_suppressed),
                                  ("posts_anonymized", self.posts_anonymized), ("taken_down", len(self.taken_down)),
                                  ("answers_taken_down", self.answers_taken_down)) if v}


@dataclass
class AnswersResult(UpsertResult):
    """``ThreadStore.upsert_answers``: the comments added, replaced and sent unchanged, how many the thread has, and
    its ETag after the write."""
    answers: int = 0
    etag: str = ""


@dataclass
class Edited:
    """``update_question``: whether anything changed (its truth value), and the thread's ETag after the write."""
    changed: bool
    etag: str

    def __bool__(self) -> bool:
        return self.changed


@dataclass
class Removed:
    """``delete_answer``: how many comments the thread has left, its ETag after the write, and the removed comment's
    text (what a purge forgets)."""
    left: int
    etag: str
    text: str = field(default="", repr=False)


@dataclass
class LedgerTaken:
    """``ThreadStore.take_ledger``: whether an export's ledger was taken in, what it added, and why not."""
    taken: bool
    erasures: int = 0  # records added to the store's ledger
    takedowns: int = 0  # takedowns recorded
    erasures_not_carried: int = 0  # under another key than the store's
    reason: str | None = None

    def summary(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Erased:
    """``ThreadStore.erase_authors``: what an erasure changed in the store. ``texts`` are the texts it no longer
    holds (what a cache keyed by text forgets); ``wal_truncated`` whether the write-ahead log, which held the
    pages as they were before, was emptied (a reader of another process in a read transaction keeps it until the
    next erasure or checkpoint)."""
    threads_deleted: list[str] = field(default_factory=list)  # asked by an erased author: gone with every comment
    threads_changed: list[str] = field(default_factory=list)  # kept, without the authors' comments or their ids
    answers_removed: int = 0  # the authors' comments removed from threads that are kept
    posts_anonymized: int = 0  # questions and comments kept without their author's id
    texts: list[str] = field(default_factory=list, repr=False)  # none the store still holds elsewhere
    # the ids of the posts it removed: each thread deleted (its id) and its comments, each comment removed
    posts: list[str] = field(default_factory=list, repr=False)
    wal_truncated: bool = False
    at: float = 0.0  # when it was committed, in seconds since the epoch
    # the request, which the backups are rewritten by (``indexing.erasure.rewrite_backups``): the users and their
    # rule, or a takedown's (thread id, comment id; None: the whole thread)
    authors: list[str] = field(default_factory=list, repr=False)
    rule: ledger.Rule | None = field(default=None, repr=False)
    takedown: list[tuple[str, str | None]] = field(default_factory=list, repr=False)

    @property
    def changed(self) -> bool:
        return bool(self.threads_deleted or self.threads_changed)

    def summary(self) -> dict:
        """What it changed, without any text or author id."""
        return {"threads_deleted": len(self.threads_deleted), "threads_changed": len(self.threads_changed),
                "answers_removed": self.answers_removed, "posts_anonymized": self.posts_anonymized,
                "wal_truncated": self.wal_truncated}


@dataclass(frozen=True)
class Post:
    """One question or comment as the store holds it, with its thread (``ThreadStore.posts_by``): what a user's
    access request gets of what they wrote."""
    kind: str  # question or comment
    thread_id: str
    id: str  # the thread's id for a question, the comment's for a comment
    author_id: str
    created_at: str | None
    meta: dict
    subject: str | None = None  # a question's own fields
    body: str | None = None
    category: str | None = None
    text: str | None = None  # a comment's
    label: str | None = None

    def as_json(self) -> dict:
        """Its fields, those of the other kind left out."""
        return {k: v for k, v in self.__dict__.items()
                if not (v is None and k in ("subject", "body", "category", "text", "label"))}


@dataclass(frozen=True)
class Listed:
    """One thread of ``ThreadStore.listing``."""
    id: str
    revision: int | None
    etag: str
    subject: str
    answers: int


@dataclass(frozen=True)
class HeldPosts:
    """What ``ThreadStore.held_posts`` found: each thread asked for (and each comment's thread) by id, its subject and
    body; each comment asked for by id, its text and its thread's id."""
    questions: dict[str, tuple[str, str]]
    answers: dict[str, tuple[str, str]]

    def question(self, thread_id: str) -> str | None:
        """The thread's question as every index reads it (``question_text``), None where it is not stored."""
        held = self.questions.get(thread_id)
        return None if held is None else question_text(*held)


def _state(cur: sqlite3.Cursor, thread_id: str) -> tuple[str, int | None] | None:
    """A stored thread's content hash (its ETag, and the index's record of it) and revision; None when not stored."""
    return cur.execute("SELECT content_hash, revision FROM threads WHERE id=?", (thread_id,)).fetchone()


def _chunks(ids: list[str], size: int = 500) -> Iterator[list[str]]:
    """``ids`` in lists of at most ``size``, each within SQLite's limit on a statement's parameters."""
    return (ids[i:i + size] for i in range(0, len(ids), size))


def _held(cur: sqlite3.Cursor, texts: set[str]) -> set[str]:
    """Those of ``texts`` the store holds as a comment, a subject, a body or a question's text (another user's
    identical comment, a thread the same text was copied into): what an erasure leaves to the caches."""
    held: set[str] = set()
    for chunk in _chunks(sorted(texts)):
        marks = ",".join("?" * len(chunk))
        held.update(t for (t,) in cur.execute(f"SELECT DISTINCT text FROM answers WHERE text IN ({marks})", chunk))
        for subject, body in cur.execute(f"SELECT subject, body FROM threads WHERE subject IN ({marks}) OR body IN "
                                         f"({marks})", chunk * 2):
            held.update(t for t in (subject, body, question_text(subject, body)) if t in texts)
    return held


def _delete_rows(cur: sqlite3.Cursor, thread_id: str) -> None:
    """A thread's rows, its comments' and its own, deleted in the transaction of ``cur``."""
    cur.execute("DELETE FROM answers WHERE thread_id=?", (thread_id,))
    cur.execute("DELETE FROM threads WHERE id=?", (thread_id,))


def _supersedes(stored: int | None, sent: int | None) -> bool:
    """Whether a stored revision keeps a whole thread sent with ``sent`` from replacing it: both given, and the
    sent one not above it (a revision grows with each change)."""
    return stored is not None and sent is not None and sent <= stored


def etag_matches(etag: str, if_match: Sequence[str] | None) -> bool:
    """Whether a thread whose ETag is ``etag`` meets ``if_match`` (None: no condition; ``*``: any stored thread)."""
    return if_match is None or "*" in if_match or etag in if_match


# how long opening an SQLite file waits for other processes opening it at the same moment (the workers of `cqa serve
# --workers N` on a new data folder), as a write waits for another (busy_timeout)
OPEN_WAIT_S = 10.0
_RACED = ("locked", "busy", "duplicate column name")


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``conn`` (a connection in autocommit mode, ``isolation_level=None``), taken at once
    (``BEGIN IMMEDIATE``: it waits up to the busy timeout for another process's writer, never fails later for one),
    committed at the end or rolled back whole on any error: the small files every worker writes (the rate limit's, the
    feedback log)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def opened_while_others_open(conn: sqlite3.Connection, setup: Callable[[sqlite3.Connection], T],
                             wait_s: float = OPEN_WAIT_S) -> T:
    """``setup(conn)`` (a file's change to WAL, its tables), tried again while other processes open the same file.
    Several processes may open a new file at once: the change to WAL and the first schema are written under locks
    SQLite does not wait for (it answers "database is locked" at once where waiting could deadlock). So ``setup`` is
    run again until ``wait_s`` has passed; each of its steps must be idempotent (IF NOT EXISTS, OR IGNORE), so that a
    step another process did first is no error."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return setup(conn)
        except sqlite3.OperationalError as e:
            if not any(r in str(e) for r in _RACED) or time.monotonic() > deadline:
                raise
            if conn.in_transaction:
                conn.rollback()
            time.sleep(0.02)


def _setup(conn: sqlite3.Connection) -> str:
    """The store's file in WAL mode with this code's tables; its schema version."""
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(_SCHEMA)
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('changes', '0')")  # older stores gain it here
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('tag_synonyms', '0')")  # and this (``tag_synonyms_version``)
    if "revision" not in {r[1] for r in conn.execute("PRAGMA table_info(threads)")}:
        conn.execute("ALTER TABLE threads ADD COLUMN revision INTEGER")  # and this, as the last column
    (version,) = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return version


class ThreadStore:
    """Thread-safe handle on one SQLite file. Open it once per process and share it."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA busy_timeout=10000")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        # what a write deletes or replaces is overwritten with zeros, not left in the file's free space: an erased
        # text (``erase_authors``), a moderator's removal or an edit's old text is gone from the disk with its commit
        self._conn.execute("PRAGMA secure_delete=ON")
        with self._lock:
            version = opened_while_others_open(self._conn, _setup)
        if int(version) != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema version {version}, this code reads {SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "ThreadStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writes -----------------------------------------------------------------
    def upsert(self, threads: Iterable[Thread], dry_run: bool = False) -> UpsertResult:
        """Insert or replace threads by id in one transaction; identical content is left alone. A thread sent with a
        ``revision`` replaces a stored one only where the stored thread's revision is lower or absent; one whose
        revision is not above the stored one's is left as stored and listed in ``superseded`` (or counted unchanged
        when it says what the store holds), so whole-thread snapshots that arrive out of order never replace a later
        one. A thread sent without a revision replaces the stored one, as it always has. The erasure ledger applies
        to each thread first (``indexing.ledger``): a thread or comment taken down is left out, an erased user's posts
        are left out or anonymized, as their erasure said, and each is counted in the result. With ``dry_run``, the
        transaction is rolled back: the result says what the write would have done, and nothing is written."""
        result = UpsertResult()
        with self._transaction(commit=not dry_run) as cur:
            for t in threads:
                applied = ledger.admit(cur, t)
                if applied.thread is None:  # taken down, or asked by a user erased with remove: not stored at all
                    (result.taken_down if applied.taken_down else result.suppressed).append(t.id)
                    continue
                result.answers_taken_down += applied.answers_taken_down
                result.answers_suppressed += applied.answers_removed
                result.posts_anonymized += applied.posts_anonymized
                self._upsert_one(cur, applied.thread, result, by_revision=True)
            if result.inserted or result.updated:
                self._count_change(cur)
        return result

    @contextmanager
    def _transaction(self, commit: bool = True) -> Iterator[sqlite3.Cursor]:
        """One write transaction, taken at once (``BEGIN IMMEDIATE``: a writer of another process waits for it, and it
        for them, up to the busy timeout), committed at the end (rolled back without ``commit``: a dry run) or rolled
        back whole on any error."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT" if commit else "ROLLBACK")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def upsert_answers(self, thread_id: str, answers: Sequence[Answer],
                       if_match: Sequence[str] | None = None) -> AnswersResult:
        """Add comments to a stored thread, or replace those whose id it holds, in one transaction: what a forum sends
        when a user posts or edits a comment. A new comment goes after the thread's others, in the order given, or,
        where it and all of them carry an ISO 8601 time, after the last at or before its time (a comment delivered
        late takes its place in the thread's order); a replaced one keeps its place. The thread is read and written
        inside the transaction, so two writers adding comments to one thread at once (two requests, two workers,
        another process) both keep theirs, which two whole-thread upserts sent out of order would not. The stored
        thread is the one ``upsert`` of the whole thread would store, its content hash included. Raises
        ``NotInStore`` when the thread is not stored, ``PreconditionFailed`` when ``if_match`` (ETags, or ``*``) does
        not name the stored thread's, and ``StoreError`` (nothing written) when an answer id belongs to another
        thread. The thread keeps its revision. The ledger applies to the comments sent, as ``upsert`` says: one taken
        down, or by a user erased with ``remove``, is left out.
        """
        with self._transaction() as cur:
            thread, etag = self._stored(cur, thread_id, if_match, f"no thread with id {thread_id!r}; POST /threads (or "
                                        "`cqa ingest`) stores a new one")
            merged = list(thread.answers)
            result = AnswersResult()
            _, down = ledger.taken_down(cur, thread_id, [a.id for a in answers])
            result.answers_taken_down = sum(a.id in down for a in answers)
            answers = [a for a in answers if a.id not in down]
            answers, gone, result.posts_anonymized = ledger.apply_to_answers(
                answers, ledger.rules_for(cur, (a.author_id for a in answers if a.author_id is not None)))
            result.answers_suppressed = len(gone)
            for a in answers:
                at = next((i for i, b in enumerate(merged) if b.id == a.id), None)
                if at is None:
                    merged.insert(_place(merged, a), a)
                    result.inserted += 1
                elif merged[at] == a:
                    result.unchanged += 1
                else:
                    merged[at] = a
                    result.updated += 1
            if result.inserted or result.updated:
                etag = self._upsert_one(cur, thread.model_copy(update={"answers": merged}), UpsertResult())
                self._count_change(cur)
            result.answers, result.etag = len(merged), etag
        return result

    def update_question(self, thread_id: str, fields: dict, if_match: Sequence[str] | None = None) -> Edited:
        """Change a stored thread's own fields (subject, body, category, created_at, author_id, meta: those ``fields``
        names) and keep its comments, read and written in one transaction, as ``upsert_answers`` does: a question's
        edit never loses a comment added meanwhile. Returns whether anything changed and the ETag after; raises
        ``NotInStore`` when the thread is not stored, ``PreconditionFailed`` when ``if_match`` does not name its ETag,
        pydantic's ``ValidationError`` when the thread that results is not valid, and ``StoreError`` when the new
        asker is a user erased with ``remove`` (nothing written in each case). A new asker erased with ``anonymize``
        is not stored (the erasure ledger)."""
        unknown = sorted(set(fields) - QUESTION_FIELDS)
        if unknown:
            raise ValueError(f"not a field of the question: {', '.join(unknown)} (it takes {sorted(QUESTION_FIELDS)})")
        with self._transaction() as cur:
            thread, etag = self._stored(cur, thread_id, if_match,
                                        f"no thread with id {thread_id!r}; POST /threads stores a new one")
            edited = Thread.model_validate({**thread.model_dump(), **fields})
            if "author_id" in fields:
                edited = ledger.admit(cur, edited).thread
                if edited is None:
                    raise StoreError(f"thread {thread_id!r} cannot name {fields['author_id']!r} as its asker: that "
                                     "user was erased with their posts removed, so a thread they asked is not stored")
            if edited == thread:
                return Edited(False, etag)
            etag = self._upsert_one(cur, edited, UpsertResult())
            self._count_change(cur)
        return Edited(True, etag)

    def delete_answer(self, thread_id: str, answer_id: str, if_match: Sequence[str] | None = None,
                      takedown: bool = False) -> Removed:
        """Remove one comment of a stored thread (the others keep their order), in one transaction, as ``delete``
        removes a thread: what a moderator's removal sends. Returns how many comments the thread has left and its ETag
        after; raises ``NotInStore`` when the thread is not stored or holds no such comment, and ``PreconditionFailed``
        when ``if_match`` does not name its ETag. With ``takedown``, the removal is recorded in the ledger in the same
        transaction, so the comment sent again is left out (``indexing.ledger``)."""
        with self._transaction() as cur:
            thread, _ = self._stored(cur, thread_id, if_match, f"no thread with id {thread_id!r}")
            kept = [a for a in thread.answers if a.id != answer_id]
            if len(kept) == len(thread.answers):
                raise NotInStore(f"thread {thread_id!r} has no answer with id {answer_id!r}")
            etag = self._upsert_one(cur, thread.model_copy(update={"answers": kept}), UpsertResult())
            self._count_change(cur)
            if takedown:
                ledger.record_takedown(cur, thread_id, answer_id, time.time())
        return Removed(len(kept), etag, next(a.text for a in thread.answers if a.id == answer_id))

    def _stored(self, cur: sqlite3.Cursor, thread_id: str, if_match: Sequence[str] | None,
                missing: str) -> tuple[Thread, str]:
        """The stored thread a single-thread write changes and its ETag, read inside its transaction:
        ``NotInStore(missing)`` when there is none, ``PreconditionFailed`` when it does not meet ``if_match``."""
        tagged = self._read_tagged(cur, thread_id)
        if tagged is None:
            raise NotInStore(missing)
        if not etag_matches(tagged[1], if_match):
            raise PreconditionFailed(thread_id, tagged[1])
        return tagged

    @staticmethod
    def _read_tagged(cur: sqlite3.Cursor, thread_id: str) -> tuple[Thread, str] | None:
        """The stored thread and its ETag (the content hash its row holds); None when it is not stored."""
        row = cur.execute("SELECT * FROM threads WHERE id=?", (thread_id,)).fetchone()
        if row is None:
            return None
        answers = cur.execute("SELECT * FROM answers WHERE thread_id=? ORDER BY position", (thread_id,)).fetchall()
        return _thread_from_rows(row, answers), row[7]

    def _upsert_one(self, cur: sqlite3.Cursor, t: Thread, result: UpsertResult, by_revision: bool = False) -> str:
        """Write ``t`` over the stored thread of its id, counted in ``result``; its content hash after. Identical
        content is left alone, its revision kept if it is new (no new write number: no index reads it). With
        ``by_revision`` (a whole thread sent), a stored revision not below ``t``'s keeps the stored thread."""
        digest = t.content_hash()
        state = _state(cur, t.id)
        if state is not None:
            stored, revision = state
            if by_revision and _supersedes(revision, t.revision):
                if stored == digest:
                    result.unchanged += 1
                else:
                    result.superseded.append(t.id)
                return stored
            if stored == digest:
                if revision != t.revision:
                    cur.execute("UPDATE threads SET revision=? WHERE id=?", (t.revision, t.id))
                result.unchanged += 1
                return digest
        for chunk in _chunks([a.id for a in t.answers]):
            clash = cur.execute(
                f"SELECT id, thread_id FROM answers WHERE id IN ({','.join('?' * len(chunk))}) AND thread_id != ?",
                (*chunk, t.id)).fetchone()
            if clash:
                raise StoreError(f"answer id {clash[0]!r} of thread {t.id!r} already belongs to "
                                 f"thread {clash[1]!r}; answer ids must be unique across threads")
        (seq,) = cur.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM threads").fetchone()
        if state is not None:
            cur.execute("DELETE FROM answers WHERE thread_id=?", (t.id,))
            cur.execute("UPDATE threads SET subject=?, body=?, category=?, created_at=?, author_id=?, "
                        "meta=?, content_hash=?, seq=?, revision=? WHERE id=?",
                        (t.subject, t.body, t.category, t.created_at, t.author_id,
                         json.dumps(t.meta, ensure_ascii=False), digest, seq, t.revision, t.id))
            result.updated += 1
        else:
            cur.execute("INSERT INTO threads (id, subject, body, category, created_at, author_id, meta, content_hash, "
                        "seq, revision) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (t.id, t.subject, t.body, t.category, t.created_at, t.author_id,
                         json.dumps(t.meta, ensure_ascii=False), digest, seq, t.revision))
            result.inserted += 1
        cur.executemany("INSERT INTO answers VALUES (?,?,?,?,?,?,?,?)",
                        [(a.id, t.id, i, a.text, a.created_at, a.author_id, a.label,
                          json.dumps(a.meta, ensure_ascii=False)) for i, a in enumerate(t.answers)])
        return digest

    def delete(self, thread_id: str, if_match: Sequence[str] | None = None, takedown: bool = False) -> Thread | None:
        """Remove a thread and its comments: the thread as it was (what a purge forgets), None when it is not
        stored. ``PreconditionFailed`` (nothing removed) when ``if_match`` does not name its ETag. With ``takedown``,
        the removal is recorded in the ledger in the same transaction, so the thread sent again is not stored
        (``indexing.ledger``)."""
        with self._transaction() as cur:
            tagged = self._read_tagged(cur, thread_id)
            if tagged is None:
                return None
            if not etag_matches(tagged[1], if_match):
                raise PreconditionFailed(thread_id, tagged[1])
            _delete_rows(cur, thread_id)
            self._count_change(cur)
            if takedown:
                ledger.record_takedown(cur, thread_id, None, time.time())
        return tagged[0]

    def remove(self, thread_ids: Sequence[str], dry_run: bool = False) -> list[str]:
        """Remove threads and their comments in one transaction (``cqa ingest --mirror``: what the forum's site
        removed); the ids of those that were stored. Not a takedown: a thread sent again is stored again. With
        ``dry_run``, rolled back: the ids it would remove."""
        removed: list[str] = []
        with self._transaction(commit=not dry_run) as cur:
            for chunk in _chunks(list(thread_ids)):
                marks = ",".join("?" * len(chunk))
                removed += [r[0] for r in cur.execute(f"SELECT id FROM threads WHERE id IN ({marks})", chunk)]
                cur.execute(f"DELETE FROM answers WHERE thread_id IN ({marks})", chunk)
                cur.execute(f"DELETE FROM threads WHERE id IN ({marks})", chunk)
            if removed:
                self._count_change(cur)
        return removed

    def erase_authors(self, author_ids: Sequence[str], remove: bool = False,
                      meta_keys: Sequence[str] = ()) -> Erased:
        """Erase what the store holds of the authors ``author_ids`` (a forum user's erasure request), in one
        transaction. With ``remove``, their comments are removed from every thread and the threads they asked are
        deleted with all their comments (a thread is its question); without it, their questions and comments are
        kept without their author id (anonymized), and each of them also loses the ``meta`` keys named in
        ``meta_keys`` (a user name a loader kept there). Each thread changed gets a new content hash (ETag), as any
        write gives it, and keeps its revision. Deleted and replaced rows are overwritten with zeros
        (``secure_delete``), and the write-ahead log is then emptied, so the erased values are gone from the store's
        files, not only from its tables. The erasure is recorded in the store's ledger (``indexing.ledger``) in the
        same transaction, so whatever of theirs is written later is left out or anonymized in the same way; a user
        erased again keeps the stronger erasure (``remove`` stays)."""
        rule = ledger.Rule(remove, frozenset(meta_keys))
        out = Erased(authors=list(dict.fromkeys(author_ids)), rule=rule)
        with self._transaction() as cur:
            rules = ledger.record(cur, out.authors, rule, time.time())  # what any later write of theirs meets
            touched: set[str] = set()
            for chunk in _chunks(out.authors):
                marks = ",".join("?" * len(chunk))
                touched.update(r[0] for r in cur.execute(f"SELECT id FROM threads WHERE author_id IN ({marks})", chunk))
                touched.update(r[0] for r in cur.execute(
                    f"SELECT DISTINCT thread_id FROM answers WHERE author_id IN ({marks})", chunk))
            for tid in sorted(touched):
                thread, _ = self._read_tagged(cur, tid)
                applied = ledger.apply(thread, rules)
                out.texts += applied.texts
                if applied.thread is None:  # a thread is its question: it goes with every comment
                    _delete_rows(cur, tid)
                    out.threads_deleted.append(tid)
                    out.posts += [tid, *(a.id for a in thread.answers)]
                    continue
                kept = {a.id for a in applied.thread.answers}
                out.posts += [a.id for a in thread.answers if a.id not in kept]
                out.answers_removed += applied.answers_removed
                out.posts_anonymized += applied.posts_anonymized
                self._upsert_one(cur, applied.thread, UpsertResult())
                out.threads_changed.append(tid)
            if out.changed:
                self._count_change(cur)
            out.texts = sorted(set(out.texts) - _held(cur, set(out.texts)))
        out.at = time.time()
        out.wal_truncated = self.truncate_wal()
        return out

    def admitted(self, threads: Sequence[Thread]) -> list[Thread]:
        """``threads`` as the erasure ledger lets a write store them (an erased user's posts left out or anonymized;
        a thread they asked, with ``remove``, not at all): what may be encoded ahead of the write. Only the writes
        themselves apply the ledger; this reads it for what comes before them."""
        with self._lock:
            cur = self._conn.cursor()
            applied = [ledger.admit(cur, t).thread for t in threads]
        return [t for t in applied if t is not None]

    def takedowns(self, thread_id: str | None = None, after: tuple[str, str] | None = None,
                  limit: int = 100) -> list[ledger.Takedown]:
        """The takedowns the ledger holds, a page at a time (``ledger.takedowns``)."""
        with self._lock:
            return ledger.takedowns(self._conn.cursor(), thread_id, after, limit)

    def record_takedown(self, thread_id: str, answer_id: str | None = None, at: float | None = None) -> None:
        """Record a takedown without removing anything (a copy that did not hold it yet: a backup's rewrite, a
        restore), at ``at`` (default: now)."""
        with self._transaction() as cur:
            ledger.record_takedown(cur, thread_id, answer_id, time.time() if at is None else at)

    def lift_takedown(self, thread_id: str, answer_id: str | None = None) -> bool:
        """Lift the takedown of a thread (``answer_id`` None) or of one of its comments, so that what the forum sends
        again is stored; False when none was recorded."""
        with self._transaction() as cur:
            return ledger.lift(cur, thread_id, answer_id)

    def ledger(self) -> ledger.Held:
        """What the store's ledger holds: its erasures (keyed hashes) and takedowns."""
        with self._lock:
            return ledger.read(self._conn.cursor())

    def carry_ledger(self, other: ledger.Held) -> bool:
        """Add another store's erasures to this one's ledger, where they hash under one key (``ledger.carry``); False
        where the keys differ."""
        with self._transaction() as cur:
            return ledger.carry(cur, other)

    def take_ledger(self, other: ledger.Held) -> "LedgerTaken":
        """An export's ledger (``cqa ingest`` of it) taken into this store, in one transaction, where the store holds
        no thread yet (a restore by ingest into an empty data folder: nothing here the records would have to be
        applied to): its erasures carried (``ledger.carry``; not where this store already hashes under another key)
        and its takedowns recorded, with their times. Into a store that holds threads it changes nothing and says
        why: the records would name posts the store may hold (``cqa restore --ledger-from`` applies them)."""
        with self._transaction() as cur:
            (threads,) = cur.execute("SELECT COUNT(*) FROM threads").fetchone()
            if threads:
                return LedgerTaken(False, reason=f"the store holds threads already ({threads}): a ledger is taken "
                                                 "only into a store without threads")
            carried = ledger.carry(cur, other)
            for t in other.takedowns:
                ledger.record_takedown(cur, t.thread_id, t.answer_id, t.at)
            return LedgerTaken(True, len(other.erasures) if carried else 0, len(other.takedowns),
                               0 if carried else len(other.erasures),
                               None if carried else "the store hashes ids under another key")

    def author_ids(self) -> list[str]:
        """Every author id a question or comment carries."""
        with self._lock:
            return [r[0] for r in self._conn.execute(
                "SELECT author_id FROM threads WHERE author_id IS NOT NULL UNION "
                "SELECT author_id FROM answers WHERE author_id IS NOT NULL")]

    def erased(self, author_ids: Sequence[str]) -> dict[str, ledger.Rule]:
        """The erasures the store's ledger holds for any of ``author_ids`` (by id): an audit's question, and what a
        write of theirs meets."""
        with self._lock:
            return ledger.rules_for(self._conn.cursor(), author_ids)

    def truncate_wal(self, wait_s: float = 2.0) -> bool:
        """Write the write-ahead log's pages into the store's file and empty it (``empty_wal``): the older versions
        of pages it held, with what a write since deleted or replaced, are gone. False when another process kept it
        from completing for ``wait_s`` (a reader in a long read transaction; the erasure's job tries again)."""
        with self._lock:
            return empty_wal(self._conn, wait_s)

    def vacuum(self) -> None:
        """Write the store's file anew with only what it holds (SQLite's ``VACUUM``): what writes made before
        ``secure_delete`` was on (before this version) left in its free pages is gone. Writers wait for it (seconds
        for a store of 20,000 comments, ``bench/erasure.py``)."""
        with self._lock:
            self._conn.execute("VACUUM")
        self.truncate_wal()

    @staticmethod
    def _count_change(cur: sqlite3.Cursor) -> None:
        """One more write that changed something, in the write's own transaction (see ``change_count``)."""
        cur.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='changes'")

    # --- tag synonyms ----------------------------------------------------------
    def set_tag_synonym(self, source: str, target: str) -> None:
        """``source`` is a synonym of ``target`` from now on (both as ``tag_key`` compares them): a tag filter on either
        takes the threads carrying any of the two (``Filters.with_synonyms``), as StackExchange's tag synonyms. A
        target is a tag of its own: it cannot be a synonym, nor a synonym have synonyms (``TagSynonymConflict``).
        Threads are not written again and no index is rebuilt: filters read the synonyms as they search."""
        source, target = tag_key(source), tag_key(target)
        if not source or not target:
            raise ValueError("a tag synonym needs a source and a target tag")
        if source == target:
            raise ValueError(f"{source!r} cannot be a synonym of itself")
        with self._transaction() as cur:
            if (row := cur.execute("SELECT target FROM tag_synonyms WHERE source = ?", (target,)).fetchone()):
                if row[0] == source:  # the other way round
                    raise TagSynonymConflict(f"{target!r} is a synonym of {source!r} already: remove it first")
                raise TagSynonymConflict(f"{target!r} is itself a synonym of {row[0]!r}: make {source!r} a synonym "
                                         f"of {row[0]!r}")
            if (rows := cur.execute("SELECT source FROM tag_synonyms WHERE target = ? ORDER BY source",
                                    (source,)).fetchall()):
                raise TagSynonymConflict(f"{source!r} has synonyms of its own ({', '.join(r[0] for r in rows)}): make "
                                         f"them synonyms of {target!r} first, or remove them")
            cur.execute("INSERT INTO tag_synonyms VALUES (?, ?, ?) ON CONFLICT(source) DO UPDATE SET "
                        "target = excluded.target, created_at = excluded.created_at",
                        (source, target, datetime.now().astimezone().isoformat(timespec="seconds")))
            _synonyms_changed(cur)

    def delete_tag_synonym(self, source: str) -> str | None:
        """``source`` a tag of its own again: the target it stood for, or None where it was no synonym."""
        with self._transaction() as cur:
            row = cur.execute("DELETE FROM tag_synonyms WHERE source = ? RETURNING target",
                              (tag_key(source),)).fetchone()
            if row:
                _synonyms_changed(cur)
        return row and row[0]

    def tag_synonyms(self) -> dict[str, str]:
        """Each synonym and its target, by synonym."""
        with self._lock:
            return _read_synonyms(self._conn)

    def tag_synonyms_version(self) -> int:
        """How many changes the synonyms have had, by any process: one read of one row, so a service reads the
        synonyms again only when they changed."""
        with self._lock:
            (n,) = self._conn.execute("SELECT value FROM meta WHERE key='tag_synonyms'").fetchone()
        return int(n)

    # --- reads ------------------------------------------------------------------
    def change_count(self) -> int:
        """How many committed writes have changed the store, by any process: one read of one row, so a service can
        ask every few seconds whether the store moved (and only then compare ``fingerprint`` with its index)."""
        with self._lock:
            (n,) = self._conn.execute("SELECT value FROM meta WHERE key='changes'").fetchone()
        return int(n)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return _counts(self._conn)

    def get(self, thread_id: str) -> Thread | None:
        tagged = self.get_tagged(thread_id)
        return tagged and tagged[0]

    def get_tagged(self, thread_id: str) -> tuple[Thread, str] | None:
        """The thread and its ETag (the content hash stored with it), read together; None when it is not stored."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                return self._read_tagged(self._conn.cursor(), thread_id)
            finally:
                self._conn.execute("COMMIT")

    def superseded(self, threads: Sequence[Thread]) -> set[str]:
        """The ids of ``threads`` that ``upsert`` would leave as stored now for their revision (sent with one not above
        the stored thread's), read in one query: what a caller skips before work it does ahead of the write, whose
        own transaction decides."""
        sent = {t.id: t.revision for t in threads if t.revision is not None}
        with self._lock:
            rows = [r for chunk in _chunks(list(sent)) for r in self._conn.execute(
                f"SELECT id, revision FROM threads WHERE id IN ({','.join('?' * len(chunk))})", chunk)]
        return {tid for tid, stored in rows if _supersedes(stored, sent[tid])}

    def answers_after(self, after: datetime) -> dict[str, list[Answer]]:
        """The stored comments posted after ``after`` (a naive UTC time; their ``created_at`` read by ``moment``), by
        thread id, each thread's in its order: what a mirror keeps of the forum's own (``cqa ingest --mirror``)."""
        # ISO dates sort as text: the day before's prefix narrows the read (a time with an offset may name the day
        # before its UTC one), moment decides
        with self._lock:
            rows = self._conn.execute("SELECT * FROM answers WHERE created_at >= ? ORDER BY thread_id, position",
                                      ((after - timedelta(days=1)).date().isoformat(),)).fetchall()
        out: dict[str, list[Answer]] = {}
        for a in rows:
            if (when := moment(a[4])) is not None and when > after:
                out.setdefault(a[1], []).append(Answer(id=a[0], text=a[3], created_at=a[4], author_id=a[5],
                                                       label=a[6], meta=json.loads(a[7])))
        return out

    def dated_ids(self) -> dict[str, str | None]:
        """Every stored thread's id and when it was posted (its ``created_at`` as stored)."""
        with self._lock:
            return dict(self._conn.execute("SELECT id, created_at FROM threads"))

    def listing(self, after: str | None = None, limit: int = 100) -> list["Listed"]:
        """The stored threads in id order from the first id above ``after``, at most ``limit``: each one's id,
        revision, ETag, subject and number of comments, without reading their texts. What a forum's sync job walks
        (as it walks its own threads in id order) to find what the service lacks, holds at an older revision or
        holds and the forum deleted."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT t.id, t.revision, t.content_hash, t.subject, "
                "(SELECT COUNT(*) FROM answers a WHERE a.thread_id = t.id) FROM threads t WHERE t.id > ? "
                "ORDER BY t.id LIMIT ?", (after or "", limit)).fetchall()
        return [Listed(*r) for r in rows]

    def held_posts(self, thread_ids: Sequence[str], answer_ids: Sequence[str]) -> "HeldPosts":
        """Those of ``thread_ids`` and ``answer_ids`` the store holds now, with what they say now, read by id in one
        transaction: what a search checks the results it shows against, so that a post deleted or taken down since
        its index generation was built is not shown, and an edited one is shown as it is now
        (``ranking.pipeline.SearchPipeline``). The comments' threads come with them."""
        answers: dict[str, tuple[str, str]] = {}
        questions: dict[str, tuple[str, str]] = {}
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                cur = self._conn.cursor()
                for chunk in _chunks(sorted(set(answer_ids))):
                    answers.update((i, (text, tid)) for i, text, tid in cur.execute(
                        f"SELECT id, text, thread_id FROM answers WHERE id IN ({','.join('?' * len(chunk))})", chunk))
                for chunk in _chunks(sorted({*thread_ids, *(tid for _, tid in answers.values())})):
                    questions.update((i, (subject, body)) for i, subject, body in cur.execute(
                        f"SELECT id, subject, body FROM threads WHERE id IN ({','.join('?' * len(chunk))})", chunk))
            finally:
                self._conn.execute("COMMIT")
        return HeldPosts(questions, answers)

    def unheld(self, texts: Sequence[str]) -> list[str]:
        """Those of ``texts`` the store no longer holds in any post (``_held``): what the caches keyed by text may
        forget once a purge removed them."""
        with self._lock:
            return sorted(set(texts) - _held(self._conn.cursor(), set(texts)))

    def posts_by(self, author_ids: Sequence[str]) -> list[Post]:
        """Every question and comment the authors ``author_ids`` wrote, read in one transaction (``_read_posts``)."""
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                return _read_posts(self._conn, author_ids)
            finally:
                self._conn.execute("COMMIT")

    def iter_threads(self, batch: int = 1000) -> Iterator[Thread]:
        """All threads in insertion order, read in batches so memory stays flat (each batch as it is when read; a
        consistent copy of the whole store while it is written to: ``Snapshot``)."""
        return _read_threads(self._conn, self._lock, batch)

    def fingerprint(self) -> str:
        """Changes whenever any thread is added, changed or deleted."""
        with self._lock:
            return _fingerprint(self._conn)

    def documents(self, known: "ThreadRows | None" = None) -> "StoreRead":
        """What a reindex reads, all in one read transaction, so the parts agree with each other while other processes
        write (batches read one by one could meet a thread twice, updated in between): the store's fingerprint, every
        thread's id, write number and content hash (``ThreadRows``), and the documents of every thread (questions and
        answers as ``Documents.from_threads(self.iter_threads())`` gives them), or, with ``known``, of the threads
        that ``known`` does not hold as they are (same id, write number and content): the live generation's record
        of the store it was built from, whose documents a build copies rather than reading them again.
        One query and no thread objects: 5.6x faster than thread objects on the SemEval corpus, the same documents
        (bench/build_parts.py, tests/test_store.py)."""
        from .documents import ANSWER, QUESTION, Documents, answer_doc_id, question_doc_id, tags_value
        from .models import question_text
        docs, last = Documents(), None
        tagged: dict[str | None, str | None] = {None: None}  # meta.tags as JSON text -> the tags column's value
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                fingerprint = _fingerprint(self._conn)
                rows = self._conn.execute("SELECT id, seq, content_hash FROM threads ORDER BY seq").fetchall()
                threads = ThreadRows([r[0] for r in rows], np.fromiter((r[1] for r in rows), np.int64, len(rows)),
                                     np.array([bytes.fromhex(r[2]) for r in rows], dtype=ThreadRows.HASH))
                read = threads.differ(known)
                wanted = {threads.ids[i] for i in np.flatnonzero(read).tolist()} if known is not None else None
                if read.any():
                    first = int(threads.seqs[read].min())
                    rows = self._conn.execute(
                        "SELECT t.id, t.subject, t.body, t.category, t.created_at, a.id, a.text, a.created_at, "
                        f"{_TAGS_JSON} FROM threads t LEFT JOIN answers a ON a.thread_id = t.id WHERE t.seq >= ? "
                        "ORDER BY t.seq, a.position", (first,))
                    for tid, subject, body, category, created, aid, text, answered, raw_tags in rows:
                        if wanted is not None and tid not in wanted:
                            continue  # an older thread that ``known`` holds, written between two it lacks
                        if tid != last:
                            if raw_tags not in tagged:
                                tagged[raw_tags] = tags_value(json.loads(raw_tags))
                            tags = tagged[raw_tags]
                            docs._add(question_doc_id(tid), QUESTION, tid, category, created,
                                      question_text(subject, body), tags)
                            last = tid
                        if aid is not None:
                            docs._add(answer_doc_id(aid), ANSWER, tid, category, answered or created, text, tags)
            finally:
                self._conn.execute("COMMIT")
        return StoreRead(fingerprint, threads, read, docs)


# a thread's ``meta.tags`` as JSON text (a list, or one string), else NULL: read in SQL, not by parsing every meta
_TAGS_JSON = ("CASE json_type(t.meta, '$.tags') WHEN 'array' THEN json_extract(t.meta, '$.tags') "
              "WHEN 'text' THEN json_quote(json_extract(t.meta, '$.tags')) END")


@dataclass(frozen=True)
class ThreadRows:
    """Every thread of a store, in its order (the write number ``seq``, which an insert or an update sets to one more
    than any thread's): id, write number and content hash (sha256). A generation saves the one it was built from
    (``save``, ``load``), so the next build knows which threads it holds as they are."""
    ids: list[str]
    seqs: np.ndarray  # int64
    hashes: np.ndarray  # HASH
    HASH = "S32"

    def __len__(self) -> int:
        return len(self.ids)

    def differ(self, known: "ThreadRows | None") -> np.ndarray:
        """Per thread, whether ``known`` lacks it as it is (another write number or content, or no such id): all
        True without ``known``. The same write number is not enough: a thread deleted while it was the last written
        leaves its number to the next thread written, and the same content is not either: a thread deleted and
        written again as it was moves last."""
        if known is None:
            return np.ones(len(self), dtype=bool)
        at = {t: i for i, t in enumerate(known.ids)}
        where = np.fromiter((at.get(t, -1) for t in self.ids), dtype=np.int64, count=len(self))
        found = where >= 0
        same = np.zeros(len(self), dtype=bool)
        at_known = where[found]
        same[found] = (known.seqs[at_known] == self.seqs[found]) & (known.hashes[at_known] == self.hashes[found])
        return ~same

    def save(self, path: Path) -> None:
        """The write numbers and hashes in thread order (the ids are the generation's documents')."""
        table = np.zeros(len(self), dtype=[("seq", "<i8"), ("hash", self.HASH)])
        table["seq"], table["hash"] = self.seqs, self.hashes
        np.save(path, table, allow_pickle=False)

    @classmethod
    def load(cls, path: Path, ids: list[str]) -> "ThreadRows":
        table = np.load(path, allow_pickle=False)
        if table.dtype.names != ("seq", "hash") or len(table) != len(ids):
            raise ValueError(f"{path}: {len(table)} threads of {table.dtype}, {len(ids)} threads expected")
        return cls(list(ids), table["seq"].astype(np.int64), table["hash"].astype(cls.HASH))


@dataclass
class StoreRead:
    """``ThreadStore.documents``: the store's fingerprint and threads, which of them were read (``read``, per thread)
    and their documents, in the store's order."""
    fingerprint: str
    threads: ThreadRows
    read: np.ndarray
    documents: "Documents"


def _read_threads(conn: sqlite3.Connection, lock, batch: int) -> Iterator[Thread]:
    last = 0
    while True:
        with lock:
            rows = conn.execute("SELECT * FROM threads WHERE seq > ? ORDER BY seq LIMIT ?", (last, batch)).fetchall()
            if not rows:
                return
            ids = [r[0] for r in rows]
            marks = ",".join("?" * len(ids))
            arows = conn.execute(
                f"SELECT * FROM answers WHERE thread_id IN ({marks}) ORDER BY thread_id, position", ids).fetchall()
        by_thread: dict[str, list[tuple]] = {}
        for a in arows:
            by_thread.setdefault(a[1], []).append(a)
        for r in rows:
            yield _thread_from_rows(r, by_thread.get(r[0], []))
        last = rows[-1][8]


def _read_posts(conn: sqlite3.Connection, author_ids: Sequence[str]) -> list[Post]:
    """Every question and comment the authors ``author_ids`` wrote: the questions in the order they were stored,
    then the comments by thread and place. Nothing of other users' (not the comments others wrote under their
    questions)."""
    ids = list(dict.fromkeys(author_ids))
    out: list[Post] = []
    for chunk in _chunks(ids):
        out += [Post("question", r[0], r[0], r[5], r[4], json.loads(r[6]), subject=r[1], body=r[2], category=r[3])
                for r in conn.execute(f"SELECT * FROM threads WHERE author_id IN ({','.join('?' * len(chunk))}) "
                                      "ORDER BY seq", chunk)]
    for chunk in _chunks(ids):
        out += [Post("comment", r[1], r[0], r[5], r[4], json.loads(r[7]), text=r[3], label=r[6])
                for r in conn.execute(f"SELECT * FROM answers WHERE author_id IN ({','.join('?' * len(chunk))}) "
                                      "ORDER BY thread_id, position", chunk)]
    return out


def _fingerprint(conn: sqlite3.Connection) -> str:
    row = conn.execute(
        "SELECT COUNT(*), COALESCE(MAX(seq),0), COALESCE(SUM(LENGTH(content_hash)),0) FROM threads").fetchone()
    (total,) = conn.execute(
        "SELECT group_concat(content_hash, '') FROM (SELECT content_hash FROM threads ORDER BY id)").fetchone()
    return hashlib.sha256(f"{row}|{total or ''}".encode()).hexdigest()[:16]


def _counts(conn: sqlite3.Connection) -> dict[str, int]:
    (t,) = conn.execute("SELECT COUNT(*) FROM threads").fetchone()
    (a,) = conn.execute("SELECT COUNT(*) FROM answers").fetchone()
    return {"threads": t, "answers": a}


def empty_wal(conn: sqlite3.Connection, wait_s: float = 10.0) -> bool:
    """Write the write-ahead log of ``conn``'s file into the file and empty it (``wal_checkpoint(TRUNCATE)``), so the
    older versions of pages it held (what a write just deleted or overwrote) are gone; whether it did within
    ``wait_s``. While another connection writes or checkpoints (a worker's search logged, its automatic
    checkpoint) the checkpoint answers "busy" at once, without waiting: it is tried again, a few ms later, until then.
    A file not in WAL mode has no log to empty (True)."""
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(2 * pause, 0.2)


def read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the store at ``path``, which waits for a writer's lock as ``ThreadStore`` does; a
    ``StoreError`` when there is no store there (and nothing is created)."""
    if not path.exists():
        raise StoreError(f"{path}: no store here (a data folder holds threads.sqlite3 once threads were ingested)")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def _read_synonyms(conn: sqlite3.Connection) -> dict[str, str]:
    """The tag synonyms table: each synonym's target, by synonym."""
    return dict(conn.execute("SELECT source, target FROM tag_synonyms ORDER BY source").fetchall())


def _synonyms_changed(cur: sqlite3.Cursor) -> None:
    """One more change of the synonyms, in the write's own transaction (``ThreadStore.tag_synonyms_version``)."""
    cur.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='tag_synonyms'")


class Snapshot:
    """The store as it was at one moment, read while any process goes on writing to it (``cqa export``): a
    read-only connection of its own in one read transaction, which SQLite's WAL mode keeps at the moment it began
    and which blocks no writer. ``counts`` and ``fingerprint`` are the snapshot's; ``threads()`` yields its threads
    in insertion order, the order ``cqa ingest`` of an export gives them again."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._conn = read_only(self.path)
        try:
            self._conn.execute("BEGIN")
            self.counts = _counts(self._conn)  # the first read fixes the snapshot
            self.fingerprint = _fingerprint(self._conn)
        except BaseException:
            self._conn.close()
            raise

    def threads(self, batch: int = 1000) -> Iterator[Thread]:
        return _read_threads(self._conn, nullcontext(), batch)  # its own connection, one reader

    def posts(self, author_ids: Sequence[str]) -> list[Post]:
        return _read_posts(self._conn, author_ids)

    def ledger(self) -> ledger.Held:
        """The snapshot's ledger (``ledger.read``): its records as of the moment its threads are."""
        return ledger.read(self._conn.cursor())

    def tag_synonyms(self) -> dict[str, str]:
        """The snapshot's tag synonyms, by synonym (none in a store made before they were: it has no table)."""
        try:
            return _read_synonyms(self._conn)
        except sqlite3.OperationalError:
            return {}

    def close(self) -> None:
        self._conn.execute("COMMIT")
        self._conn.close()

    def __enter__(self) -> "Snapshot":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _place(answers: list[Answer], new: Answer) -> int:
    """Where ``new`` goes among a thread's ``answers``: after the last one at or before its time, where it and all of
    them carry one (``moment``); else after them all."""
    when = moment(new.created_at)
    times = [moment(a.created_at) for a in answers]
    if when is None or None in times:
        return len(answers)
    return max((i + 1 for i, t in enumerate(times) if t <= when), default=0)


def _thread_from_rows(row: tuple, answers: list[tuple]) -> Thread:
    return Thread(
        id=row[0], subject=row[1], body=row[2], category=row[3], created_at=row[4], author_id=row[5],
        meta=json.loads(row[6]),
        revision=row[9] if len(row) > 9 else None,  # none in a store a read-only handle finds unmigrated
        answers=[Answer(id=a[0], text=a[3], created_at=a[4], author_id=a[5], label=a[6],
                        meta=json.loads(a[7])) for a in answers],
    )
