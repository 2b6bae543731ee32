"""MAP from the forum's own users: which results of a served search helped them.

Every search the service answers (POST /search, GET /threads/{id}/similar) is written to the feedback log with an
id, ``search_id`` in its response: its endpoint, target, reranker and generation, and the ids of the results it
showed in their order with each one's place before the reranker. So is every ranking of given candidates
(``served_order``): a thread's comments sorted by GET /threads/{id}/answers (target ``comments``), each one's place
in the thread as its place before the ranker, so that its ``first_stage`` figure is the thread's own order; and what
the /rerank endpoints rank (POST /rerank: ``comments``, /rerank/questions: ``questions``, /rerank/answers:
``answers``), each candidate's place in the request as its place before the ranker (the order the forum sent).

A user (the search page's "Helpful? yes / no", or a forum's own buttons) sends POST /feedback with that id and a
judgement of a shown result; it is on disk (fsync'd) before the answer. ``report`` scores the judged searches with
the SemEval-2016 official scorer's arithmetic, grouped by what served them, so the figure is the served path's on the
forum's own traffic:

- ``MAP``: average precision over the first 10 ranks of the judged results only, in the order they were shown (a
  result nobody judged is left out, not counted as useless: users judge one or two results of a page, and a result
  left unjudged says nothing; Sakai's condensed lists);
- ``MAP_unjudged_not_helpful``: the same with every unjudged result counted as not helpful (what a benchmark whose
  every result is judged gives; with partial judgements a lower bound);
- ``first_stage``: the MAP of the same judged results in the order the reranker was given them (the first stage's,
  with the similar threads' comments after its hits: what the search showed before its reranker), with the paired randomisation test: what the reranker adds on
  this forum's traffic. Users judge what they were shown, so this favours the order shown (a result the first stage
  would have put first but the reranker put eleventh was never judged); read it as a floor of the reranker's gain
  only where it is positive.

- ``interleaving``, for the searches interleaved with a challenger (``ranking.interleave``: both rankers' orders
  merged by team-draft, each result remembering the ranker that put it there): the searches whose helpful results
  came more from the reranker's picks, more from the challenger's, or as many, with the sign test. Unlike
  ``first_stage``, it compares two rankers on lists both had the same chance to fill.

Only a search's first page counts in MAP (later pages are ranks 11 on); the judgements of later pages are counted.
The log keeps no client, and no query text unless CQA_FEEDBACK_QUERIES says so: then each search's request too, so
that ``ranking.evaluation.replay`` can search the judged ones again with another ranker, for ``keep_request_days``
(CQA_FEEDBACK_QUERY_DAYS), judged or not (read as gone once past it, and dropped by each worker's sweep, ``forget``),
and not past an erasure or a takedown of a text it carries (``KeptRequests``). A search nobody judged is forgotten
after ``keep_days`` and can no longer be judged; a judged one is kept. The file is the data folder's, shared by every
worker (SQLite in WAL mode): a search one worker served can be judged through another."""
from __future__ import annotations

import json
import logging
import math
import re
import secrets
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from indexing.store import Erased, immediate, opened_while_others_open

log = logging.getLogger(__name__)

# past this many judged searches in a group, its interval and test are the normal approximation's and the paired
# t-test's: the bootstrap and the randomisation test draw 10,000 resamples of every search (at 100,000 searches, a
# billion draws a report), and with thousands of searches the approximations agree with them
EXACT_UP_TO = 5000
SEARCH_ID_HEX = 32  # 128 random bits: an id nobody can guess, so only whoever got the results can judge them
FORGET_EVERY_S = 10.0  # how often a process deletes the searches nobody judged within keep_days,
FORGET_AT_ONCE = 2000  # at most this many at a time: a backlog (after a long stop) never holds a search's write long
BUSY_TIMEOUT_S = 2.0  # how long a write waits for another worker's (in a thread, never on the event loop)


class UnknownSearch(LookupError):
    """No search with this id: never served, or nobody judged it within ``keep_days`` and it was forgotten."""


class NotShown(ValueError):
    """A judgement of a result the search did not show."""

    def __init__(self, search_id: str, ids: list[str], shown: int):
        self.ids = ids
        super().__init__(f"search {search_id} did not show {', '.join(map(repr, ids[:5]))}"
                         f"{' and more' if len(ids) > 5 else ''}; judge the ids of its {shown} results")


class FeedbackUnavailable(RuntimeError):
    """The feedback log's file could not be written: the judgement was not recorded (the caller says so: 503)."""


@dataclass(frozen=True)
class Served:
    """What one search showed: its results' ids in rank order from rank ``offset`` + 1, and each one's place in
    the order the reranker was given (0 first)."""
    endpoint: str
    target: str
    ranker: str | None
    generation: str
    offset: int
    results: tuple[str, ...]
    first_stage: tuple[int, ...]
    challenger: str | None = None  # an interleaved search's challenger (ranking.interleave)
    teams: tuple[str | None, ...] = ()  # then each result's team (A: the reranker, B: the challenger)
    request: str | None = None  # the request as JSON (``SearchRequest.to_json``), kept where CQA_FEEDBACK_QUERIES says


@dataclass(frozen=True)
class Judged:
    search_id: str
    recorded: int  # judgements written by this request
    judged: int  # results of the search judged, this request's included
    removed: tuple[str, ...] = ()  # results judged that an erasure or a takedown removed since: not written


_SCHEMA = """
CREATE TABLE IF NOT EXISTS served (id TEXT PRIMARY KEY, at REAL NOT NULL, endpoint TEXT NOT NULL,
    target TEXT NOT NULL, ranker TEXT, generation TEXT NOT NULL, first INTEGER NOT NULL, results TEXT NOT NULL,
    first_stage TEXT NOT NULL, challenger TEXT, teams TEXT, request TEXT) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS served_at ON served (at);
CREATE TABLE IF NOT EXISTS judged (search TEXT NOT NULL, result TEXT NOT NULL, helpful INTEGER NOT NULL,
    at REAL NOT NULL, PRIMARY KEY (search, result)) WITHOUT ROWID;
"""
# the served table's columns, in order (``request`` came in round 61: a log made before gains it when first opened)
SERVED_COLUMNS = ("id", "at", "endpoint", "target", "ranker", "generation", "first", "results", "first_stage",
                  "challenger", "teams", "request")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _with_request_column(conn: sqlite3.Connection) -> None:
    """A log made before round 61 given the ``request`` column (another worker adding it first is a "duplicate
    column name" that ``opened_while_others_open`` runs the setup again for)."""
    if "request" not in _columns(conn, "served"):
        conn.execute("ALTER TABLE served ADD COLUMN request TEXT")


@dataclass
class FeedbackLog:
    """The data folder's feedback file (``path``). ``record`` writes a served search (synchronous=NORMAL: it survives
    the process's kill -9, a power cut may lose the last ones, which then cannot be judged); ``judge`` writes
    judgements on a connection of its own that syncs each commit (synchronous=FULL): a judgement answered is on
    disk. Where the file fails, ``record`` gives no id (the search is answered all the same, counted in
    ``store_errors``) and ``judge`` raises ``FeedbackUnavailable``."""
    path: Path
    keep_days: float = 30.0
    keep_request_days: float = 30.0  # how long a search's request (CQA_FEEDBACK_QUERIES) is kept, judged or not
    store_errors: int = 0
    recorded: int = 0  # searches written by this process
    judgements: int = 0  # judgements written by this process
    _served_db: sqlite3.Connection | None = field(default=None, repr=False)
    _judged_db: sqlite3.Connection | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _judge_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _next_forget: float = 0.0
    _logged_error_at: float = float("-inf")

    @classmethod
    def of(cls, settings) -> "FeedbackLog":
        """The data folder's log as ``settings`` (the service's) keep it: its file, CQA_FEEDBACK_DAYS and
        CQA_FEEDBACK_QUERY_DAYS."""
        return cls(Path(settings.feedback_file), settings.feedback_days, settings.feedback_query_days)

    @property
    def keep_s(self) -> float:
        return self.keep_days * 86400.0

    @property
    def keep_request_s(self) -> float:
        return self.keep_request_days * 86400.0

    def _forget(self, db: sqlite3.Connection, now: float) -> tuple[int, int]:
        """In ``db``'s write transaction: at most ``FORGET_AT_ONCE`` searches nobody judged within ``keep_days``
        deleted, and as many requests older than ``keep_request_days`` dropped. Returns how many of each."""
        searches = db.execute("DELETE FROM served WHERE id IN (SELECT id FROM served WHERE at < ? AND NOT EXISTS "
                              "(SELECT 1 FROM judged WHERE judged.search = served.id) LIMIT ?)",
                              (now - self.keep_s, FORGET_AT_ONCE)).rowcount
        # a judged search keeps its ids and judgements, not the text a user typed past its own period
        requests = db.execute("UPDATE served SET request = NULL WHERE id IN (SELECT id FROM served WHERE at < ? AND "
                              "request IS NOT NULL LIMIT ?)", (now - self.keep_request_s, FORGET_AT_ONCE)).rowcount
        return searches, requests

    def forget(self, now: float | None = None) -> dict:
        """What is past its period forgotten now, in bounded batches until none is left (``_forget``), even where no
        search comes to write: the service's sweep (``app.main.sweep_feedback``) calls it every ``FORGET_EVERY_S``
        that no search did, and a restore after merging an old backup. Returns how many of each; an absent file
        holds nothing. ``FeedbackUnavailable`` where the file fails."""
        now = time.time() if now is None else now
        out = {"searches_forgotten": 0, "requests_dropped": 0}
        if not self.path.exists():
            return out
        try:
            while True:
                with self._lock, immediate(self._served()) as db:
                    self._next_forget = now + FORGET_EVERY_S
                    searches, requests = self._forget(db, now)
                out["searches_forgotten"] += searches
                out["requests_dropped"] += requests
                if searches < FORGET_AT_ONCE and requests < FORGET_AT_ONCE:
                    return out
        except (sqlite3.Error, OSError) as e:
            self.store_errors += 1
            raise FeedbackUnavailable(f"the feedback log {self.path} could not be written ({e})") from None

    def forget_due(self, now: float | None = None) -> dict | None:
        """``forget`` where no search of this process did within ``FORGET_EVERY_S`` (None where one did)."""
        now = time.time() if now is None else now
        return self.forget(now) if now >= self._next_forget else None

    def _open(self, synchronous: str) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)

        def setup(conn: sqlite3.Connection) -> None:  # every worker may open it at the same moment
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            _with_request_column(conn)
        opened_while_others_open(db, setup)
        db.execute(f"PRAGMA synchronous={synchronous}")
        return db

    def _served(self) -> sqlite3.Connection:
        if self._served_db is None:
            self._served_db = self._open("NORMAL")
        return self._served_db

    def _judged(self) -> sqlite3.Connection:
        if self._judged_db is None:
            self._judged_db = self._open("FULL")
        return self._judged_db

    def record(self, served: Served, now: float | None = None) -> str | None:
        """``served`` written under a new id (returned); None where the file failed (logged once a minute)."""
        now = time.time() if now is None else now
        search_id = secrets.token_hex(SEARCH_ID_HEX // 2)
        row = (search_id, now, served.endpoint, served.target, served.ranker, served.generation, served.offset,
               json.dumps(list(served.results)), json.dumps([int(i) for i in served.first_stage]), served.challenger,
               json.dumps(list(served.teams)) if served.challenger else None, served.request)
        try:
            with self._lock, immediate(self._served()) as db:
                db.execute(f"INSERT INTO served ({', '.join(SERVED_COLUMNS)}) VALUES "
                           f"({', '.join('?' * len(SERVED_COLUMNS))})", row)
                if now >= self._next_forget:
                    self._next_forget = now + FORGET_EVERY_S
                    self._forget(db, now)
        except (sqlite3.Error, OSError) as e:
            self.store_errors += 1
            if now - self._logged_error_at > 60:
                self._logged_error_at = now
                log.warning("the feedback log %s failed (%s); searches are answered without a search_id until it "
                            "works again (%d so far)", self.path, e, self.store_errors)
            return None
        self.recorded += 1
        return search_id

    def judge(self, search_id: str, judgements: list[tuple[str, bool]], now: float | None = None,
              unstored: Callable[[list[str]], set[str]] | None = None) -> Judged:
        """The judgements (result id, helpful) of search ``search_id`` written and synced, each replacing an earlier
        one of the same result (a user who changes their mind). ``UnknownSearch`` where there is no such search or it
        is older than ``keep_days``; ``NotShown`` (nothing written) where a result is not one it showed. A result the
        search showed that an erasure or a takedown removed since stands in the log for a post nobody can name
        (``forget_posts``): judged by its old id, which ``unstored`` (those of the ids given that the store no longer
        holds) says is gone, as many as the search's stand-ins, it is left out (``Judged.removed``) and the others are
        written. On such a search an id the store never held reads as one removed: nothing is written for it."""
        now = time.time() if now is None else now
        try:
            with self._judge_lock, immediate(self._judged()) as db:
                row = db.execute("SELECT results, at FROM served WHERE id = ?", (search_id,)).fetchone()
                if row is None or row[1] < now - self.keep_s:
                    raise UnknownSearch(search_id)
                shown = json.loads(row[0])
                missing = sorted({r for r, _ in judgements} - set(shown))
                stand_ins = sum(r.startswith(REMOVED_POST) for r in shown)
                if missing and (len(missing) > stand_ins or unstored is None or set(missing) - unstored(missing)):
                    raise NotShown(search_id, missing, len(shown))
                judgements = [(r, h) for r, h in judgements if r not in missing]
                db.executemany("INSERT INTO judged VALUES (?, ?, ?, ?) ON CONFLICT (search, result) DO UPDATE SET "
                               "helpful = excluded.helpful, at = excluded.at",
                               [(search_id, r, int(h), now) for r, h in judgements])
                (judged,) = db.execute("SELECT count(*) FROM judged WHERE search = ?", (search_id,)).fetchone()
        except (sqlite3.Error, OSError) as e:
            self.store_errors += 1
            log.warning("the feedback log %s failed (%s): a judgement was refused", self.path, e)
            raise FeedbackUnavailable(f"the feedback log could not be written ({e}); send the judgement again "
                                      "later") from None
        self.judgements += len(judgements)
        return Judged(search_id, len(judgements), judged, tuple(missing))

    def judged_searches(self, since: float | None = None, now: float | None = None) -> list[dict]:
        """Every judged search served since ``since`` (Unix time; None: all), oldest first, with its judgements
        (result id -> helpful); its request None where it is older than ``keep_request_days`` at ``now``, dropped or
        not yet (a log nobody wrote to since)."""
        now = time.time() if now is None else now
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
        try:  # a log no round-61 process has opened yet has no request column (read-only here: none added)
            request = "s.request" if "request" in _columns(db, "served") else "NULL"
            rows = db.execute("SELECT s.id, s.at, s.endpoint, s.target, s.ranker, s.generation, s.first, s.results, "
                              f"s.first_stage, s.challenger, s.teams, {request}, j.result, j.helpful FROM served s "
                              "JOIN judged j ON j.search = s.id WHERE s.at >= ? ORDER BY s.at, s.id",
                              (since or 0.0,)).fetchall()
        finally:
            db.close()
        out: dict[str, dict] = {}
        for sid, at, endpoint, target, ranker, gen, first, results, first_stage, challenger, teams, request, result, \
                helpful in rows:
            if sid not in out:  # a search's row comes once per judgement: its lists read once
                out[sid] = {"id": sid, "at": at, "endpoint": endpoint, "target": target, "ranker": ranker,
                            "generation": gen, "offset": first, "results": json.loads(results),
                            "first_stage": json.loads(first_stage), "challenger": challenger,
                            "teams": json.loads(teams) if teams else None,
                            "request": request if at >= now - self.keep_request_s else None, "judged": {}}
            out[sid]["judged"][result] = bool(helpful)
        return list(out.values())

    def stats(self) -> dict:
        return {"recorded": self.recorded, "judgements": self.judgements, "store_errors": self.store_errors,
                "keep_days": self.keep_days}

    def close(self) -> None:
        for db in (self._served_db, self._judged_db):
            if db is not None:
                db.close()
        self._served_db = self._judged_db = None


BACKUP_TABLES = {"served": "feedback_served", "judged": "feedback_judged"}  # their names in a store backup


def copy_into(backup_file: Path, log_file: Path) -> dict:
    """The feedback log at ``log_file`` copied into the store backup being written at ``backup_file`` (``cqa backup``,
    POST /backups: ``indexing.backup.backup``'s ``beside``), as its tables ``feedback_served`` and ``feedback_judged``,
    read in one transaction while the workers go on writing; ``cqa restore`` of that backup puts them back
    (``merge_from``). No log yet: nothing copied."""
    if not Path(log_file).exists():
        return {"feedback": {"searches": 0, "judgements": 0}}
    conn = sqlite3.connect(backup_file, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try:
        conn.execute("ATTACH DATABASE ? AS log", (str(log_file),))
        conn.execute("BEGIN")
        for table, copied in BACKUP_TABLES.items():  # a store restored from a backup may hold older copies
            conn.execute(f"DROP TABLE IF EXISTS {copied}")
            conn.execute(f"CREATE TABLE {copied} AS SELECT * FROM log.{table}")
        counts = [conn.execute(f"SELECT count(*) FROM {copied}").fetchone()[0] for copied in BACKUP_TABLES.values()]
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE log")
    finally:
        conn.close()
    return {"feedback": {"searches": counts[0], "judgements": counts[1]}}


def carried_by_backups(log_file: Path) -> Callable[[Path], dict]:
    """What a store backup copies besides the store (``indexing.backup.backup``'s ``beside``): the log at
    ``log_file`` (``copy_into``). `cqa backup` and POST /backups both pass it."""
    return partial(copy_into, log_file=log_file)


def drop_copies(store_file: Path) -> None:
    """The feedback tables a store restored from a backup carries (``VACUUM INTO`` copies every table), dropped once
    merged into the log: the store holds threads."""
    with sqlite3.connect(store_file, isolation_level=None, timeout=BUSY_TIMEOUT_S) as db:
        for copied in BACKUP_TABLES.values():
            db.execute(f"DROP TABLE IF EXISTS {copied}")


def merge_from(backup_file: Path, log: "FeedbackLog", now: float | None = None) -> dict:
    """The feedback tables of the store backup ``backup_file`` (``copy_into``) merged into ``log`` (``cqa restore``):
    a search the log lacks is added, a judgement replaces the log's only where it is newer. What is past its period
    at ``now`` comes back as the log would have kept it: a search nobody judged within ``keep_days`` not at all, a
    request older than ``keep_request_days`` without it. A backup without them (made before round 60, or an export)
    merges nothing."""
    now = time.time() if now is None else now
    with sqlite3.connect(f"file:{Path(backup_file).resolve()}?mode=ro", uri=True) as src:
        if not set(BACKUP_TABLES.values()) <= _tables(src):
            return {"searches_added": 0, "judgements_merged": 0, "in_backup": False}
        # a backup of a log made before round 61 has no request column: its searches come back without one
        columns = [c for c in SERVED_COLUMNS if c in _columns(src, BACKUP_TABLES["served"])]
    picked = ", ".join("CASE WHEN at < :requests THEN NULL ELSE request END" if c == "request" else c
                       for c in columns)
    db = log._judged()  # synced: what it merges is accepted data
    try:
        db.execute("ATTACH DATABASE ? AS bk", (str(backup_file),))
        with immediate(db):
            added = db.execute(f"INSERT OR IGNORE INTO served ({', '.join(columns)}) SELECT {picked} FROM "
                               "bk.feedback_served s WHERE at >= :searches OR EXISTS (SELECT 1 FROM bk.feedback_judged "
                               "j WHERE j.search = s.id)",
                               {"requests": now - log.keep_request_s, "searches": now - log.keep_s}).rowcount
            merged = db.execute("INSERT INTO judged SELECT * FROM bk.feedback_judged WHERE true ON CONFLICT (search, "
                                "result) DO UPDATE SET helpful = excluded.helpful, at = excluded.at WHERE excluded.at > "
                                "judged.at").rowcount
        db.execute("DETACH DATABASE bk")
        forgotten = log.forget(now)  # the log's own searches and requests past their period, nobody writing since
    finally:
        log.close()
    return {"searches_added": added, "judgements_merged": merged, "in_backup": True, **forgotten}


# --- an erasure's or a takedown's texts in the kept requests ----------------------------------------------------
MATCH_WORDS = 5  # the fewest words a text shares with a kept request for the request to go: shorter ones say
# little about anyone and are what many users type
_WORDS = re.compile(r"\w+")
# ASCII text's words without the regular expression: a letter lower-cased, a digit or "_" kept, any other byte a
# space; what ``\w+`` finds in ``casefold()`` of ASCII text, 4-5 times as fast (the erasure's scan reads every request)
_ASCII_WORDS = bytes(c + 32 if 65 <= c <= 90 else c if 97 <= c <= 122 or 48 <= c <= 57 or c == 95 else 32
                     for c in range(256))


def _words(text: str) -> tuple[str, ...]:
    if text.isascii():
        return tuple(text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split())
    return tuple(_WORDS.findall(text.casefold()))


FEW_KEYS = 64  # up to this many erased texts, a request is first looked at as a string (``ErasedTexts.in_question``)
_START_CHARS = 200  # the characters read for a part's first words, before its whole


def _first_words(text: str) -> tuple[str, ...]:
    """``_words(text)[:MATCH_WORDS]``, from the beginning of the text where that holds them all (a word cut at the
    end of what is read is after them when one more follows)."""
    w = _words(text[:_START_CHARS])
    return w[:MATCH_WORDS] if len(w) > MATCH_WORDS or len(text) <= _START_CHARS else _words(text)[:MATCH_WORDS]


class ErasedTexts:
    """The texts an erasure or a takedown took out of the store (``Erased.texts``), to find the kept requests that
    carry one: a request whose question (its subject, body, or both as searched) holds one of them word for word,
    or is held by one (a draft of the post searched before it was sent), the held side at least ``MATCH_WORDS``
    words long. Words compare case-folded, whatever the spaces and punctuation between them.

    Found in time linear in a request's words: a request held by a text begins with one of the texts' runs of
    ``MATCH_WORDS`` words (``runs``); one that holds a text holds its longest word (``keys``: the word and where it
    stands in the text). With few texts, a request whose case-folded string holds none of those words, and whose
    parts begin with none of those runs, is passed over without reading its words, as most are."""

    def __init__(self, texts: list[str]):
        self.texts = [w for w in dict.fromkeys(map(_words, texts)) if len(w) >= MATCH_WORDS]
        self.keys: dict[str, list[tuple[int, int]]] = defaultdict(list)  # a text's longest word -> (text, place)
        self.runs: dict[tuple[str, ...], set[int]] = defaultdict(set)  # any run of words -> the texts holding it
        for i, w in enumerate(self.texts):
            k = max(range(len(w)), key=lambda j: len(w[j]))
            self.keys[w[k]].append((i, k))
            for j in range(len(w) - MATCH_WORDS + 1):
                self.runs[w[j:j + MATCH_WORDS]].add(i)
        self.few = len(self.keys) <= FEW_KEYS

    def __bool__(self) -> bool:
        return bool(self.texts)

    @staticmethod
    def _holds(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
        return f" {' '.join(inner)} " in f" {' '.join(outer)} "

    def in_request(self, request: str) -> bool:
        """Whether the kept request (``SearchRequest.to_json``) carries one of the texts; one kept by its thread's
        id (a similar search) carries none."""
        fields = json.loads(request)
        return self.in_question(fields.get("text") or "", fields.get("subject") or "", fields.get("body") or "")

    def in_question(self, text: str, subject: str, body: str) -> bool:
        """``in_request`` of a request whose question is ``text`` (``question_text(subject, body)``, or a query
        alone without them)."""
        if self.few:  # a text inside the request has its key inside its string; a part inside a text, its start
            folded = text.casefold()
            if not any(key in folded for key in self.keys) and \
                    _first_words(text) not in self.runs and _first_words(body) not in self.runs:
                return False
        w = _words(text)  # the subject's words, then the body's
        if not self.keys.keys().isdisjoint(w):  # an erased text inside the request (inside either part: inside it)
            for j, word in enumerate(w):
                for i, k in self.keys.get(word, ()):
                    t = self.texts[i]
                    if j >= k and w[j - k:j - k + len(t)] == t:
                        return True
        n = len(_words(subject))
        for part in {w, w[:n], w[n:]}:  # the request, or its subject or body alone, inside an erased text
            if len(part) >= MATCH_WORDS and any(self._holds(self.texts[i], part)
                                                for i in self.runs.get(part[:MATCH_WORDS], ())):
                return True
        return False


APART_FROM = 16 << 20  # the file's bytes from which the scan runs in a process of its own (``carrying``): about
# 10,000 kept requests, a tenth of a second of scan here, more than a process takes to start


def _carrying(path: str, texts: list[str], table: str, since: float | None = None) -> list[str] | None:
    """The ids of the kept requests in ``table`` of the SQLite file at ``path`` that carry one of ``texts``
    (``ErasedTexts``), of those logged at ``since`` or later where it is given; None where the file has no such table
    or column (a log or backup of before round 61)."""
    erased = ErasedTexts(texts)
    with closing(sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)) as db:
        if table not in _tables(db) or \
                "request" not in _columns(db, table):
            return None
        after = "" if since is None else " AND at >= ?"
        return [sid for sid, request in db.execute(f"SELECT id, request FROM {table} WHERE request IS NOT NULL{after}",
                                                   () if since is None else (since,))
                if erased.in_request(request)]


def carrying(path: Path, texts: list[str], table: str = "served", since: float | None = None) -> list[str] | None:
    """``_carrying``; in a file of ``APART_FROM`` bytes or more, in a process of its own (spawned, the texts passed
    through its pipe, never a file): the scan is pure Python, seconds at 300,000 requests, and in the worker's process
    it held the interpreter its searches need (``bench/erasure.py --kept-requests``). Where no process can be started,
    here."""
    if since is not None or path.stat().st_size < APART_FROM:  # since: the few logged after an earlier scan
        return _carrying(str(path), texts, table, since)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as apart:
            return apart.submit(_carrying, str(path), texts, table).result()
    except (BrokenProcessPool, OSError) as e:
        log.warning("the kept requests are scanned in this process: no process of its own could start (%s)", e)
        return _carrying(str(path), texts, table)


def forget_requests(path: Path, texts: list[str], table: str = "served", settle: bool = False,
                    since: float | None = None) -> int:
    """The kept requests of the SQLite file at ``path`` (the feedback log, or a store backup's copy of it: ``table``
    ``feedback_served``) that carry one of ``texts`` (``ErasedTexts``) dropped, the search kept with its ids and
    judgements, as a request past its period is; the rows overwritten (``indexing.erasure.scrub``). Read first, then
    dropped by id in one short write, so the workers' searches wait no longer than that. Returns how many. ``settle``:
    the file's write-ahead log emptied even where none goes (the live log, after a drop that could not empty it).
    ``since``: only the requests logged then or later are looked at (those an earlier scan could not see)."""
    from indexing.erasure import scrub
    if not ErasedTexts(texts) or not Path(path).exists():
        return 0
    ids = carrying(Path(path), texts, table, since)
    if ids is None or not ids and not settle:
        return 0

    def drop(conn: sqlite3.Connection) -> int:
        return sum(conn.execute(f"UPDATE {table} SET request = NULL WHERE request IS NOT NULL AND id IN "
                                f"({','.join('?' * len(ids[i:i + 900]))})", ids[i:i + 900]).rowcount
                   for i in range(0, len(ids), 900))
    return scrub(Path(path), drop)


@dataclass(frozen=True)
class KeptRequests:
    """The feedback log's kept requests as an erasure sees them (``indexing.erasure.forget_derived``'s
    ``holders``): the log at ``log_file``, and the copy of it a store backup carries. The service does it before it
    answers an erasure, and its job again: a search that carried a removed text may be logged just after the first
    look. ``since``: the job's look reads only the requests logged from then on (the first scan's start, less
    ``RESCAN_SLACK_S``), not the whole log again."""
    log_file: Path
    name: str = "feedback_requests"
    since: float | None = None

    def forget(self, erased: Erased) -> int:
        return forget_requests(self.log_file, erased.texts, settle=True, since=self.since) if erased.texts else 0

    def forget_now(self, erased: Erased) -> tuple[int, "KeptRequests"]:
        """``forget`` before an erasure's answer: how many went, and the holder its job looks again with, which reads
        only what was logged from this scan's start on (less ``RESCAN_SLACK_S``)."""
        began = time.time() - RESCAN_SLACK_S
        return self.forget(erased), replace(self, since=began)

    def forget_in_backup(self, backup_file: Path, erased: Erased) -> int:
        return forget_requests(backup_file, erased.texts, BACKUP_TABLES["served"]) if erased.texts else 0


RESCAN_SLACK_S = 60.0  # a search logged after a scan began is looked at again by a later one (``KeptRequests.since``)
# from this long before that scan: a search's time is the wall clock's when it is logged, which may step back a little
REMOVED_POST = "removed-"  # what stands for a removed post in a logged search: this and its place in the results
SWAP_AT_ONCE = 500  # searches changed in one write: a worker's search waits to be logged for one such write at most


def _showing(path: Path, posts: list[str], served: str) -> tuple[dict[str, str], set[str]]:
    """In ``served`` of the SQLite file at ``path``: each search that showed one of ``posts`` (its id -> its results),
    and each whose kept request names one of them as its thread (a thread's similar search, ``like_thread``, or its
    comment order, ``comments_of``); read without a write lock (searches go on being logged meanwhile). Nothing where
    the file has no such table."""
    with closing(sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)) as db:
        if served not in _tables(db):
            return {}, set()
        requests = "request" in _columns(db, served)
        found: dict[str, str] = {}
        naming: set[str] = set()
        for i in range(0, len(posts), 900):
            chunk = posts[i:i + 900]
            marks = ",".join("?" * len(chunk))
            found.update(db.execute(f"SELECT DISTINCT s.id, s.results FROM {served} s, json_each(s.results) j "
                                    f"WHERE j.value IN ({marks})", chunk).fetchall())
            if requests:
                naming.update(sid for (sid,) in db.execute(
                    f"SELECT id FROM {served} WHERE json_valid(request) AND (json_extract(request, '$.like_thread') "
                    f"IN ({marks}) OR json_extract(request, '$.comments_of') IN ({marks}))", chunk * 2))
        return found, naming


def forget_posts(path: Path, posts: list[str], tables: dict[str, str] | None = None) -> int:
    """Each of ``posts`` (ids of posts an erasure or a takedown removed) replaced, in every logged search that showed
    it and in its judgements, by ``REMOVED_POST`` and its place in that search's results: an id that names no post,
    differs from the search's others and means nothing in another search, so each search's MAP and its judgements'
    count stay as they were, and nothing in the log says which post was shown or judged. A search whose kept request
    names a removed thread (its similar search, its comment order) loses the request, as one past its period does
    (a replay could not ask it again: the thread is gone). In the SQLite file at ``path`` (the feedback log, or a
    store backup's copy of it: ``tables`` ``BACKUP_TABLES``); the searches found first without a write lock
    (``_showing``), then changed by id in short writes of ``SWAP_AT_ONCE`` searches, the old rows overwritten
    (``indexing.erasure.scrub``). Returns how many searches changed."""
    from indexing.erasure import scrub
    names = tables or {"served": "served", "judged": "judged"}
    if not posts or not Path(path).exists():
        return 0
    found, naming = _showing(Path(path), sorted(set(posts)), names["served"])
    changed = sorted(set(found) | naming)
    if not changed:
        return 0
    gone = set(posts)

    def swap(batch: list[str]) -> Callable[[sqlite3.Connection], int]:
        def step(conn: sqlite3.Connection) -> int:
            for sid in batch:
                if sid in naming:
                    conn.execute(f"UPDATE {names['served']} SET request = NULL WHERE id = ?", (sid,))
                if sid not in found:
                    continue
                shown = json.loads(found[sid])
                standing = {r: f"{REMOVED_POST}{k}" for k, r in enumerate(shown) if r in gone}
                conn.execute(f"UPDATE {names['served']} SET results = ? WHERE id = ?",
                             (json.dumps([standing.get(r, r) for r in shown]), sid))
                conn.executemany(f"UPDATE {names['judged']} SET result = ? WHERE search = ? AND result = ?",
                                 [(stand, sid, r) for r, stand in standing.items()])
            return len(batch)
        return step
    steps = [swap(changed[i:i + SWAP_AT_ONCE]) for i in range(0, len(changed), SWAP_AT_ONCE)]
    return scrub(Path(path), steps[0], then=steps[1:])


@dataclass(frozen=True)
class ShownPosts:
    """The feedback log's logged searches as an erasure or a takedown sees them (``indexing.erasure.forget_derived``'s
    ``holders``): the ids of the posts it removed, among what they showed and what their users judged, replaced
    (``forget_posts``), in the log at ``log_file`` and in the copy a store backup carries. The service does it before
    it answers, and its job again: a search that read the store just before the removal may be logged just after."""
    log_file: Path
    name: str = "feedback_searches"

    def forget(self, erased: Erased) -> int:
        return forget_posts(self.log_file, erased.posts)

    def forget_in_backup(self, backup_file: Path, erased: Erased) -> int:
        return forget_posts(backup_file, erased.posts, BACKUP_TABLES)


COMMENTS_ENDPOINT = "/threads/{id}/answers"  # a stored thread's comments, most useful first
COMMENTS = "comments"  # their target in the log: one thread's comments ranked (subtask A), stored or given
# what a forum sends to be ranked (the /rerank endpoints), by the target it is kept under: each candidate's place
# before the ranker is its place in the request
GIVEN = {"/rerank": COMMENTS, "/rerank/questions": "questions", "/rerank/answers": "answers"}


def served_order(shown: list[str], given: list[str], ranker: str, generation: str | None,
                 endpoint: str = COMMENTS_ENDPOINT, thread_id: str | None = None, challenger: str | None = None,
                 teams: Sequence[str] = ()) -> Served:
    """What one ranking of given candidates showed: their ids in the order ``shown``, and each one's place in
    ``given``, the order the ranker was given them, as its place before the reranker. GET /threads/{id}/answers
    (target ``comments``) gives the thread's own order (oldest first), so the report's ``first_stage`` is what the
    ranker adds over the order a forum shows without one; the /rerank endpoints (``GIVEN``) the request's.
    ``thread_id``: the stored thread kept as the request (``comments_request``; GET /threads/{id}/answers where
    CQA_FEEDBACK_QUERIES says): a replay ranks the thread as the store holds it then, and a thread gone leaves no
    words here. A /rerank request is the forum's own text and is never kept. ``challenger``: where the order shown
    was interleaved with one (CQA_INTERLEAVE_COMMENTS), its name, and ``teams`` each shown result's team."""
    place = {cid: i for i, cid in enumerate(given)}
    return Served(endpoint, GIVEN.get(endpoint, COMMENTS), ranker, generation or "none", 0, tuple(shown),
                  tuple(place[c] for c in shown), challenger, tuple(teams),
                  request=None if thread_id is None else json.dumps({"comments_of": thread_id}, ensure_ascii=False))


def comments_request(request: str) -> str:
    """The thread id a GET /threads/{id}/answers request was kept by (``served_order``)."""
    thread_id = json.loads(request).get("comments_of")
    if not isinstance(thread_id, str):
        raise ValueError(f"not a thread's comments request: {request[:80]!r}")
    return thread_id


def served_of(response, endpoint: str, request: str | None = None) -> Served:
    """What a ``SearchResponse`` showed (its results' ids and places before the reranker); with ``request`` (the
    request it answered as ``SearchRequest.to_json`` wrote it, where CQA_FEEDBACK_QUERIES keeps them), that too, so
    the search can be searched again by another ranker (``ranking.evaluation.replay``)."""
    return Served(endpoint, response.target, response.reranker, response.generation, response.offset,
                  tuple(r.id for r in response.results), tuple(r.first_stage_rank for r in response.results),
                  response.interleaved_with, tuple(r.team for r in response.results), request)


def judgements_in_order(search: dict, order: list[int] | None, condensed: bool) -> list[bool]:
    """The judgements of a search's results in ``order`` (indices into its results; None: as shown); ``condensed``:
    its unjudged results left out, else counted not helpful."""
    judged, ids = search["judged"], search["results"]
    return [judged.get(ids[i], False) for i in (range(len(ids)) if order is None else order)
            if not condensed or ids[i] in judged]


def order_before(endpoint: str) -> str:
    """What the order a search's results had before its reranker was: a thread's own (GET /threads/{id}/answers),
    the request's (the /rerank endpoints), or its first stage's (a search)."""
    return "thread" if endpoint == COMMENTS_ENDPOINT else "given" if endpoint in GIVEN else "first stage"


def _first_pages(page: list[dict], reranked: bool, order: str = "first stage") -> dict:
    """The figures of a group's judged first pages (module docstring); ``reranked``: with the order before the
    reranker beside them (``first_stage``), ``order`` saying what that order was (``order_before``)."""
    from .measures import map_interval, normal_interval, paired_randomization, paired_t
    from .scorer import TOP, average_precision, reciprocal_rank
    ap = {s["id"]: average_precision(judgements_in_order(s, None, True)) for s in page}
    full = [average_precision(judgements_in_order(s, None, False)) for s in page]
    rr = [reciprocal_rank(judgements_in_order(s, None, True)) for s in page]
    judgements = sum(len(s["judged"]) for s in page)
    exact = len(page) <= EXACT_UP_TO
    by_rank = [[0, 0] for _ in range(TOP)]  # per rank: helpful, judged
    for s in page:
        for i, rid in enumerate(s["results"][:TOP]):
            if rid in s["judged"]:
                by_rank[i][0] += s["judged"][rid]
                by_rank[i][1] += 1
    g = {"MAP": round(sum(ap.values()) / len(ap), 4),
         "MAP_interval_95": [round(v, 4) for v in (map_interval(ap) if exact else normal_interval(ap.values()))],
         "interval": "bootstrap" if exact else "normal",
         "MAP_unjudged_not_helpful": round(sum(full) / len(full), 4),
         "MRR": round(100.0 * sum(rr) / len(rr), 2),
         "helpful_share": round(sum(sum(s["judged"].values()) for s in page) / judgements, 4),
         "generations": len({s["generation"] for s in page}),
         "helpful_by_rank": [{"rank": i + 1, "helpful": h, "judged": n} for i, (h, n) in enumerate(by_rank) if n]}
    if reranked:  # the same judged results in the order the reranker was given them
        a = list(ap.values())
        b = [average_precision(judgements_in_order(s, sorted(range(len(s["results"])), key=s["first_stage"].__getitem__), True))
             for s in page]
        g["first_stage"] = {"MAP": round(sum(b) / len(b), 4), "order": order,
                            "reranker_gain": round((sum(a) - sum(b)) / len(a), 4),
                            "p": (paired_randomization(a, b) if exact else paired_t(a, b)) if a != b else 1.0}
    return g


def report(searches: list[dict], days: float | None = None) -> dict:
    """The figures of ``searches`` (``FeedbackLog.judged_searches``), per (endpoint, target, reranker, challenger),
    the official scorer's arithmetic over the first 10 ranks of the first pages (module docstring)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)  # every judged page of a group, later ones too
    for s in searches:
        groups[(s["endpoint"], s["target"], s["ranker"], s.get("challenger"))].append(s)
    out = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2] or "", k[3] or "")):
        endpoint, target, ranker, challenger = key
        page = [s for s in groups[key] if s["offset"] == 0]
        g: dict = {"endpoint": endpoint, "target": target, "reranker": ranker, "searches": len(page),
                   "judgements": sum(len(s["judged"]) for s in page),
                   "judgements_later_pages": sum(len(s["judged"]) for s in groups[key] if s["offset"]),
                   "replayable": sum(s.get("request") is not None for s in page)}
        if challenger is not None:
            g["interleaving"] = interleaving(groups[key], challenger)
        if page:
            g.update(_first_pages(page, reranked=ranker is not None, order=order_before(endpoint)))
        out.append(g)
    return {"days": days, "searches_judged": len(searches),
            "groups": out,
            "note": "MAP over the first 10 ranks of each search's first page, its judged results only in the order "
                    "shown (the SemEval-2016 scorer's arithmetic); users judge what they were shown, so the first "
                    "stage's figure favours the order shown"}


def interleaving(searches: list[dict], challenger: str) -> dict:
    """Team-draft interleaving's verdict over judged interleaved ``searches`` (``ranking.interleave``): each search
    credits each team with its results judged helpful; one with more helpful results from a team is that team's win,
    one with as many (none helpful, or as many each) a tie. ``p``: the two-sided sign test of the wins (ties left
    out), the chance of wins at least this uneven were both rankers preferred alike. ``searches_for_a_verdict``:
    about how many judged searches in all that test needs for p < 0.05 if wins and ties keep their present shares:
    how long an experiment must run."""
    from scipy.stats import binomtest
    wins = {"A": 0, "B": 0}
    ties = 0
    for s in searches:
        credit = {"A": 0, "B": 0}
        for rid, team in zip(s["results"], s["teams"] or ()):
            if team in credit and s["judged"].get(rid):
                credit[team] += 1
        if credit["A"] == credit["B"]:
            ties += 1
        else:
            wins["A" if credit["A"] > credit["B"] else "B"] += 1
    decided = wins["A"] + wins["B"]
    return {"challenger": challenger, "searches": len(searches), "reranker_wins": wins["A"],
            "challenger_wins": wins["B"], "ties": ties,
            "challenger_preference": round((wins["B"] - wins["A"]) / len(searches), 4) if searches else 0.0,
            "p": float(binomtest(wins["B"], decided, 0.5).pvalue) if decided else 1.0,
            "searches_for_a_verdict": searches_for_a_verdict(wins["A"], wins["B"], len(searches))}


def searches_for_a_verdict(a_wins: int, b_wins: int, searches: int, alpha: float = 0.05) -> int | None:
    """About how many searches the two-sided sign test needs to call the preference of ``a_wins`` against ``b_wins``
    (of ``searches``, the rest ties) significant at ``alpha``, if it and the share of ties hold: the fewest decided
    searches, from the normal approximation's (z / |2w - 1|)^2 on (w the share of them one side won), whose exact
    test at that split is under ``alpha``, over the share decided. None where neither side leads (no number of
    searches would tell them apart at this split)."""
    from scipy.stats import binomtest, norm
    decided = a_wins + b_wins
    if not decided or a_wins == b_wins:
        return None
    minor = min(a_wins, b_wins) / decided
    n = max(1, math.ceil((norm.ppf(1 - alpha / 2) / (1 - 2 * minor)) ** 2))
    while binomtest(round(n * minor), n, 0.5).pvalue >= alpha:  # the exact test asks a few more at small n
        n += 1
    return math.ceil(n * searches / decided)


def feedback_report(log: FeedbackLog, days: float | None = None, now: float | None = None) -> dict:
    """``report`` of ``log`` (the searches served in the last ``days``; None: all). An absent file is a report of
    nothing."""
    now = time.time() if now is None else now
    since = now - days * 86400.0 if days is not None else None
    searches = log.judged_searches(since, now) if log.path.exists() else []
    return report(searches, days)
