"""The store's record of the forum users it erased (its erasure ledger), and what that record does to a post.

An erasure (``ThreadStore.erase_authors``) takes a user's posts out of the store, but the forum may send them again:
its sync job resends a thread the service lacks, a comment is edited after the request, an old export is ingested.
So the store keeps, in the same transaction as the erasure, a row per erased user in its ``erasures`` table, and
every write applies it (``apply``, ``apply_to_answers``): a post of a user erased with ``remove`` is not stored (a
thread they asked, not at all), one of a user erased with ``anonymize`` is stored without their id and the ``meta``
keys the erasure named. The write's result counts what it left out.

A takedown (a thread or comment deleted with ``purge``: content that must be gone, such as a legal request) is
recorded beside the erasures, in the ``takedowns`` table, by the thread's or the comment's id: a forum that still
holds the thread and sends it again (its sync job, an old export) does not bring it back, and the write counts it
(``taken_down``, ``answers_taken_down``). An operator lifts one (``lift``, ``DELETE /takedowns/...``) where the
content may come back.

A row names its user by a keyed hash (HMAC-SHA256 under a random key the store draws at its first erasure and keeps
in its ``meta`` table), not by the id: the table does not list who asked to be erased, and the key travels with the
store's copies (``cqa backup`` holds the ledger too). It is still a membership test: whoever holds the store file and
a candidate id can tell whether that id was erased, which is what the test is for.

An export (``cqa export``, JSONL) carries the ledger too, as its first line (``ledger_line``, read back by
``from_line``), when the store holds any record: ``cqa ingest`` of the export into a store without threads takes it
(``ThreadStore.take_ledger``), and ``cqa restore`` reads it, so a forum restored from an export alone still keeps its
erased users and takedowns out. The line holds the key and the keyed hashes, as a store backup does; the export of a
user's own posts (``cqa export --author``) holds no ledger."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .models import Answer, Thread

SCHEMA = """
CREATE TABLE IF NOT EXISTS erasures (
    author_key TEXT PRIMARY KEY,
    remove INTEGER NOT NULL,
    meta_keys TEXT NOT NULL,
    at REAL NOT NULL
);
"""
TAKEDOWNS = """
CREATE TABLE IF NOT EXISTS takedowns (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX IF NOT EXISTS takedowns_thread ON takedowns(thread_id);
"""
_KEY_ROW = "erasure_key"  # the meta table's row holding the hash's key (hex)


@dataclass(frozen=True)
class Rule:
    """What an erasure does to one user's posts: removed (``remove``), or kept without their id and these ``meta``
    keys."""
    remove: bool
    meta_keys: frozenset[str] = frozenset()

    def with_(self, other: "Rule") -> "Rule":
        """Both erasures of one user in force: ``remove`` once asked stays, the meta keys of both."""
        return Rule(self.remove or other.remove, self.meta_keys | other.meta_keys)


@dataclass
class Applied:
    """``apply``: the thread as it may be stored (None: its asker's posts are removed, so the thread is not stored),
    the texts left out, how many comments were left out and how many posts were kept without their author's id."""
    thread: Thread | None
    texts: list[str] = field(default_factory=list, repr=False)
    answers_removed: int = 0
    posts_anonymized: int = 0
    taken_down: bool = False  # the thread is taken down (``thread`` is None)
    answers_taken_down: int = 0  # comments left out because each is taken down


def _anonymous(post, rule: Rule):
    return post.model_copy(update={"author_id": None,
                                   "meta": {k: v for k, v in post.meta.items() if k not in rule.meta_keys}})


def apply_to_answers(answers: Sequence[Answer], rules: Mapping[str, Rule]) -> tuple[list[Answer], list[str], int]:
    """``answers`` as the ledger lets them be stored: those of a removed user left out (their texts returned), those
    of an anonymized one without their id; and how many were anonymized."""
    kept, gone, anonymized = [], [], 0
    for a in answers:
        rule = rules.get(a.author_id) if a.author_id is not None else None
        if rule is None:
            kept.append(a)
        elif rule.remove:
            gone.append(a.text)
        else:
            kept.append(_anonymous(a, rule))
            anonymized += 1
    return kept, gone, anonymized


def apply(thread: Thread, rules: Mapping[str, Rule]) -> Applied:
    """``thread`` as the ledger lets it be stored, ``rules`` being those in force for its authors (``rules_for``)."""
    if not rules:
        return Applied(thread)
    asker = rules.get(thread.author_id) if thread.author_id is not None else None
    if asker is not None and asker.remove:
        return Applied(None, [thread.question_text, thread.subject, thread.body, *(a.text for a in thread.answers)],
                       answers_removed=len(thread.answers))
    answers, gone, anonymized = apply_to_answers(thread.answers, rules)
    kept = thread.model_copy(update={"answers": answers})
    if asker is not None:
        kept, anonymized = _anonymous(kept, asker), anonymized + 1
    return Applied(kept, gone, len(gone), anonymized)


def authors_of(thread: Thread) -> set[str]:
    """Every author id a thread carries, its asker's and its commenters'."""
    return {a for a in (thread.author_id, *(c.author_id for c in thread.answers)) if a is not None}


def _key(cur: sqlite3.Cursor, create: bool = False) -> bytes | None:
    """The hash's key of the store ``cur`` writes to; drawn and kept on the first erasure (``create``), None before."""
    row = cur.execute("SELECT value FROM meta WHERE key=?", (_KEY_ROW,)).fetchone()
    if row is None and create:
        cur.execute("INSERT INTO meta VALUES (?, ?)", (_KEY_ROW, os.urandom(32).hex()))
        row = cur.execute("SELECT value FROM meta WHERE key=?", (_KEY_ROW,)).fetchone()
    return bytes.fromhex(row[0]) if row is not None else None


def _hashed(key: bytes, author_id: str) -> str:
    return hmac.new(key, author_id.encode("utf-8"), hashlib.sha256).hexdigest()


def rules_for(cur: sqlite3.Cursor, author_ids: Iterable[str]) -> dict[str, Rule]:
    """The erasures in force for any of ``author_ids`` (by id); empty, and one read, in a store that erased no one."""
    ids = sorted(set(author_ids))
    key = _key(cur) if ids else None
    if key is None:
        return {}
    by_key = {_hashed(key, a): a for a in ids}
    keys = list(by_key)
    out = {}
    for i in range(0, len(keys), 500):
        chunk = keys[i:i + 500]
        for k, remove, meta_keys in cur.execute(f"SELECT author_key, remove, meta_keys FROM erasures WHERE author_key "
                                                f"IN ({','.join('?' * len(chunk))})", chunk):
            out[by_key[k]] = Rule(bool(remove), frozenset(json.loads(meta_keys)))
    return out


def record(cur: sqlite3.Cursor, author_ids: Sequence[str], rule: Rule, at: float) -> dict[str, Rule]:
    """Record the erasure of ``author_ids`` by ``rule`` (with any earlier one of theirs: ``Rule.with_``), in the
    transaction of ``cur``; the rules in force for them after it."""
    before = rules_for(cur, author_ids)
    key = _key(cur, create=True)
    now = {a: before[a].with_(rule) if a in before else rule for a in dict.fromkeys(author_ids)}
    cur.executemany("INSERT OR REPLACE INTO erasures VALUES (?, ?, ?, ?)",  # a record the erasure does not change
                    [(_hashed(key, a), int(r.remove), json.dumps(sorted(r.meta_keys)), at)  # keeps its time
                     for a, r in now.items() if before.get(a) != r])
    return now


@dataclass(frozen=True)
class Takedown:
    """One recorded takedown: a whole thread (``answer_id`` None) or one comment of it."""
    thread_id: str
    answer_id: str | None
    at: float


def record_takedown(cur: sqlite3.Cursor, thread_id: str, answer_id: str | None, at: float) -> None:
    """Record the takedown of a thread (``answer_id`` None) or of one comment, in the transaction of ``cur``."""
    kind, id_ = ("thread", thread_id) if answer_id is None else ("comment", answer_id)
    cur.execute("INSERT OR REPLACE INTO takedowns VALUES (?, ?, ?, ?)", (kind, id_, thread_id, at))


def taken_down(cur: sqlite3.Cursor, thread_id: str, answer_ids: Sequence[str]) -> tuple[bool, set[str]]:
    """Whether the thread ``thread_id`` is taken down, and which of ``answer_ids`` are (a comment's takedown goes by
    its id, which is unique in the store): one indexed read for a thread of up to 500 comments."""
    ids = sorted(set(answer_ids))
    thread, down = False, set()
    for i in range(0, max(len(ids), 1), 500):
        chunk = ids[i:i + 500]
        for kind, id_ in cur.execute("SELECT kind, id FROM takedowns WHERE (kind='thread' AND id=?) OR (kind='comment' "
                                     f"AND id IN ({','.join('?' * len(chunk))}))", (thread_id, *chunk)):
            if kind == "thread":
                thread = True
            else:
                down.add(id_)
    return thread, down


def takedowns(cur: sqlite3.Cursor, thread_id: str | None = None, after: tuple[str, str] | None = None,
              limit: int = 100) -> list[Takedown]:
    """The recorded takedowns by thread id then comment id (a thread's own first), ``limit`` at a time after
    ``after`` (a (thread id, comment id or "") pair); only those of ``thread_id`` where it is given."""
    where, args = [], []
    if thread_id is not None:
        where.append("thread_id = ?")
        args.append(thread_id)
    if after is not None:
        where.append("(thread_id, CASE kind WHEN 'thread' THEN '' ELSE id END) > (?, ?)")
        args += list(after)
    rows = cur.execute("SELECT thread_id, CASE kind WHEN 'thread' THEN NULL ELSE id END AS answer_id, at FROM "
                       f"takedowns {'WHERE ' + ' AND '.join(where) if where else ''} "
                       "ORDER BY thread_id, COALESCE(answer_id, '') LIMIT ?", (*args, limit)).fetchall()
    return [Takedown(*r) for r in rows]


def lift(cur: sqlite3.Cursor, thread_id: str, answer_id: str | None) -> bool:
    """Lift a recorded takedown (what is sent later is stored again); False when none was recorded."""
    if answer_id is None:
        n = cur.execute("DELETE FROM takedowns WHERE kind='thread' AND id=?", (thread_id,)).rowcount
    else:
        n = cur.execute("DELETE FROM takedowns WHERE kind='comment' AND id=? AND thread_id=?",
                        (answer_id, thread_id)).rowcount
    return n > 0


def admit(cur: sqlite3.Cursor, thread: Thread) -> Applied:
    """``thread`` as the ledger of the store ``cur`` reads lets a write store it: not at all when it is taken down,
    without its comments that are, then ``apply`` with the erasures in force for its authors."""
    thread_down, down = taken_down(cur, thread.id, [a.id for a in thread.answers])
    if thread_down:
        return Applied(None, [thread.question_text, thread.subject, thread.body, *(a.text for a in thread.answers)],
                       taken_down=True)
    gone = [a.text for a in thread.answers if a.id in down]
    if down:
        thread = thread.model_copy(update={"answers": [a for a in thread.answers if a.id not in down]})
    applied = apply(thread, rules_for(cur, authors_of(thread)))
    applied.texts += gone
    applied.answers_taken_down = len(gone)
    return applied


@dataclass
class Held:
    """What one store's ledger holds (``read``): the hash's key (None before its first erasure), each erasure by
    its keyed hash with when it was recorded, and the takedowns."""
    key: bytes | None
    erasures: dict[str, Rule] = field(default_factory=dict)
    takedowns: list[Takedown] = field(default_factory=list)
    erased_at: dict[str, float] = field(default_factory=dict)

    def matching(self, author_ids: Iterable[str]) -> dict[str, Rule]:
        """Of ``author_ids``, those this ledger holds an erasure of (by id), found by hashing each under its key."""
        if self.key is None or not self.erasures:
            return {}
        return {a: self.erasures[h] for a in author_ids if (h := _hashed(self.key, a)) in self.erasures}

    @property
    def empty(self) -> bool:
        """Nothing to apply: no erasure and no takedown."""
        return not self.erasures and not self.takedowns

    def merged(self, other: "Held") -> "Held | None":
        """This ledger with ``other``'s records added (an erasure of both: ``Rule.with_``, the later time; a takedown
        of both: the earlier time); None where both have keys and they differ (stores of other lineages)."""
        if self.key is not None and other.key is not None and self.key != other.key:
            return None
        out = Held(self.key or other.key, dict(self.erasures), [], dict(self.erased_at))
        for k, rule in other.erasures.items():
            if k in out.erasures:
                out.erasures[k] = out.erasures[k].with_(rule)
                out.erased_at[k] = max(out.erased_at.get(k, 0.0), other.erased_at.get(k, 0.0))
            else:
                out.erasures[k] = rule
                out.erased_at[k] = other.erased_at.get(k, time.time())
        downs = {(t.thread_id, t.answer_id): t for t in self.takedowns}
        for t in other.takedowns:
            mine = downs.get((t.thread_id, t.answer_id))
            downs[(t.thread_id, t.answer_id)] = t if mine is None or t.at < mine.at else mine
        out.takedowns = sorted(downs.values(), key=lambda t: (t.thread_id, t.answer_id or ""))
        return out


# --- the ledger as an export's first line --------------------------------------------------------------------------
_HEX64 = r"^[0-9a-f]{64}$"


class _ErasureLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    author_key: str = Field(pattern=_HEX64)
    remove: bool
    meta_keys: list[str] = []
    at: float


class _TakedownLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    thread_id: str = Field(min_length=1)
    answer_id: str | None = None
    at: float


class _LedgerLine(BaseModel):
    """The ledger as an export writes it: ``{"ledger": {"key": ..., "erasures": [...], "takedowns": [...]}}``."""
    model_config = ConfigDict(extra="forbid")
    key: str | None = Field(default=None, pattern=_HEX64)
    erasures: list[_ErasureLine] = []
    takedowns: list[_TakedownLine] = []


def ledger_line(held: Held) -> str:
    """``held`` as an export's first line (docs/data-format.md, "The ledger line")."""
    line = _LedgerLine(key=held.key.hex() if held.key is not None else None,
                       erasures=[_ErasureLine(author_key=k, remove=r.remove, meta_keys=sorted(r.meta_keys),
                                              at=held.erased_at.get(k, 0.0)) for k, r in sorted(held.erasures.items())],
                       takedowns=[_TakedownLine(thread_id=t.thread_id, answer_id=t.answer_id, at=t.at)
                                  for t in held.takedowns])
    return json.dumps({"ledger": line.model_dump(mode="json")}, separators=(",", ":")) + "\n"


def is_ledger(obj: object) -> bool:
    """Whether a parsed JSONL record is a ledger line (an object whose one key is ``ledger``), not a thread."""
    return isinstance(obj, dict) and len(obj) == 1 and "ledger" in obj  # no set built for each thread line


def _parsed(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:  # not JSON: not a ledger line
        return None


def is_ledger_line(line: str) -> bool:
    """Whether a line of an export is its ledger line (readable or not)."""
    return is_ledger(_parsed(line))


def of_line(line: str) -> Held | None:
    """The ledger a line of an export holds; None where it is not a ledger line (a thread); ``ValueError`` for a
    ledger line that cannot be read."""
    obj = _parsed(line)
    return from_line(obj) if is_ledger(obj) else None


def from_line(obj: dict) -> Held:
    """The ledger a parsed ledger line (``is_ledger``) holds; ``ValueError`` saying what is wrong with it."""
    try:
        line = _LedgerLine.model_validate(obj["ledger"])
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"a ledger line that cannot be read: ledger.{where}: {first['msg']}") from None
    if line.erasures and line.key is None:
        raise ValueError("a ledger line with erasures but no key")
    return Held(bytes.fromhex(line.key) if line.key else None,
                {e.author_key: Rule(e.remove, frozenset(e.meta_keys)) for e in line.erasures},
                [Takedown(t.thread_id, t.answer_id, t.at) for t in line.takedowns],
                {e.author_key: e.at for e in line.erasures})


def _missing_table(e: sqlite3.OperationalError) -> bool:
    return "no such table" in str(e)


def _erasures(cur: sqlite3.Cursor, key: bytes | None) -> Held:
    """The store's erasures, with their times, as a ``Held`` under ``key`` (no takedowns)."""
    held = Held(key)
    for k, r, m, at in cur.execute("SELECT author_key, remove, meta_keys, at FROM erasures"):
        held.erasures[k], held.erased_at[k] = Rule(bool(r), frozenset(json.loads(m))), at
    return held


def read(cur: sqlite3.Cursor) -> Held:
    """The ledger of the store ``cur`` reads (any connection, read-only included): a table a store written before it
    existed lacks (erasures before round 44, takedowns before round 45) reads as empty."""
    held = Held(_key(cur))
    try:
        held = _erasures(cur, held.key)
    except sqlite3.OperationalError as e:
        if not _missing_table(e):
            raise
    try:
        held.takedowns = takedowns(cur, limit=-1)
    except sqlite3.OperationalError as e:
        if not _missing_table(e):
            raise
    return held


def carry(cur: sqlite3.Cursor, other: Held) -> bool:
    """Add ``other``'s erasures to the ledger of the store ``cur`` writes, where both hash under one key (or this one
    has none yet and takes ``other``'s), each merged with any it holds (``Rule.with_``, the later time); False, and
    nothing carried, where the keys differ (stores of other lineages: ``Held.matching`` finds their users among the
    posts instead). The takedowns are not carried here: ``record_takedown``."""
    if other.key is None or not other.erasures:
        return True
    own = _key(cur)
    if own is None:
        cur.execute("INSERT INTO meta VALUES (?, ?)", (_KEY_ROW, other.key.hex()))
    elif own != other.key:
        return False
    both = _erasures(cur, other.key).merged(Held(other.key, other.erasures, [], other.erased_at))
    cur.executemany("INSERT OR REPLACE INTO erasures VALUES (?, ?, ?, ?)",
                    [(k, int(both.erasures[k].remove), json.dumps(sorted(both.erasures[k].meta_keys)), both.erased_at[k])
                     for k in other.erasures])
    return True
