"""Request guards in front of the app: body size (413), content type (415), UTF-8 (400), how many ranking requests one
worker takes at once (503 ``overloaded``), and from one client while others wait (429 ``over_share``): ``Admission``;
which of them runs next (``FairQueue``); and how many one client may send over time (429 ``rate_limited``):
``RateLimiter``."""
from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from indexing.store import immediate

from .errors import OverShare, Overloaded, RateLimited, error_body

log = logging.getLogger(__name__)


class BodyLimitMiddleware:
    """Pure ASGI: refuses a declared or streamed body over ``max_bytes`` before the app reads it,
    and a POST body that is not JSON. The paths of ``streamed`` (a file sent whole, ``POST /imports``) are passed
    through untouched: their endpoint reads the body as it comes, to disk, under its own limit."""

    def __init__(self, app, max_bytes: int, streamed: tuple[str, ...] = ()):
        self.app, self.max_bytes, self.streamed = app, max_bytes, streamed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH") or \
                scope.get("path") in self.streamed:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return await _reply(send, 400, "Content-Length is not a number")
            if int(declared) > self.max_bytes:
                return await _reply(send, 413, f"the request body is {declared} bytes; the limit is {self.max_bytes}")
        ctype = headers.get("content-type", "")
        body_expected = declared not in (None, "0") or "transfer-encoding" in headers
        if body_expected and ctype.split(";")[0].strip().lower() != "application/json":
            return await _reply(send, 415, f"send the body as application/json (got {ctype or 'no content type'!r})")
        chunks, size = [], 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await _reply(send, 413, f"the request body is over the limit of {self.max_bytes} bytes")
            chunks.append(chunk)
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            return await _reply(send, 400, f"the request body is not valid UTF-8 (byte {e.start})")
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        return await self.app(scope, replay, send)


async def _reply(send, status: int, message: str) -> None:
    payload = json.dumps(error_body(status, message)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def enforce_text_limit(limit: int, fields) -> None:
    """422 naming the first (path, text) longer than ``limit`` characters (CQA_MAX_TEXT_CHARS)."""
    from fastapi import HTTPException
    for path, text in fields:
        if text is not None and len(text) > limit:
            raise HTTPException(422, detail=f"{path}: {len(text)} characters, longer than the limit of {limit} "
                                            "(CQA_MAX_TEXT_CHARS); shorten it")


def enforce_count_limit(path: str, n: int, limit: int, setting: str) -> None:
    from fastapi import HTTPException
    if n > limit:
        raise HTTPException(422, detail=f"{path}: {n} items, more than the limit of {limit} ({setting}); "
                                        "split the request")


USER_KEY = "cqa.user"  # the scope's key for the user a proxy named (ProxiedClient)


class ProxiedClient:
    """Pure ASGI, outermost: a request from a proxy named in CQA_FORWARDED_ALLOW_IPS (``trusted``: addresses,
    networks or *) is taken as its client's, the one its ``X-Forwarded-For`` names (uvicorn's ProxyHeadersMiddleware,
    which `cqa serve` no longer runs itself), and, with CQA_CLIENT_HEADER set (``client_header``), as the user that
    header names, whom the fair share and the run queue count (``client_key``): a forum's backend that calls for all
    its users from one address says for whom, and its users are not one client. The header is believed from those
    proxies only; from anyone else it is ignored, so nobody can take more shares by sending it. Its value is kept as
    a digest (it may be a user name), ``user:`` and 16 hex digits."""

    def __init__(self, app, trusted: str, client_header: str | None = None):
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
        self.inner = ProxyHeadersMiddleware(app, trusted_hosts=trusted)
        self.header = client_header.lower().encode("latin-1") if client_header else None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.header is not None:
            client = scope.get("client")
            # the proxies the X-Forwarded-For reading trusts, as it reads them (uvicorn's own set of them)
            if (client[0] if client else None) in self.inner.trusted_hosts:
                values = [v for k, v in scope["headers"] if k == self.header]
                named = values[-1].decode("latin-1").strip() if values else ""
                if named:
                    scope[USER_KEY] = "user:" + hashlib.sha256(named.encode()).hexdigest()[:16]
        return await self.inner(scope, receive, send)


def client_key(scope) -> str:
    """Whom a request's share and turn are counted for: the user a trusted proxy named (``ProxiedClient``,
    CQA_CLIENT_HEADER), or else its client's address as the server sees it (behind a proxy named in
    CQA_FORWARDED_ALLOW_IPS, the one its ``X-Forwarded-For`` names). An IPv6 address counts as its /64 network, the
    block one host or home is given, so a client cannot take more shares by changing the host part."""
    if user := scope.get(USER_KEY):
        return user
    client = scope.get("client")
    host = client[0] if client else "-"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # a unix socket's peer, a test client's name
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return host


def _count_down(counts: dict[str, int], client: str) -> None:
    """One fewer of ``client``'s in ``counts``, the client gone from it at none (so the map holds the busy ones)."""
    left = counts.get(client, 0) - 1
    if left > 0:
        counts[client] = left
    else:
        counts.pop(client, None)


@dataclass
class Admission:
    """The ranking requests (searches, reranks, a thread's comments or similar threads) one worker has taken and not
    answered yet, those waiting for a model or a thread included. Past ``limit``, a new one is refused at once
    (``Overloaded``: 503 with Retry-After) rather than queued behind them, so that under a burst a client learns in
    milliseconds to try again, or another replica, instead of waiting for the whole queue; 0: no bound.

    ``fair_share``: once an eighth of the bound is taken (``busy``), a client (``client_key``) that holds its share of
    the bound already, the bound divided by the clients seen in the last ``recent_s`` seconds, is refused its next one
    (``OverShare``: 429 with Retry-After), so one client sending many at once (a scraper, a runaway script) leaves room
    for everyone else instead of filling the bound and getting the others 503. A client alone may take the whole
    bound, and nobody is refused while the worker holds less than ``busy``. A client holding nothing when the bound
    is full takes one of ``spare`` places past it (an eighth of the bound, at least one), so a newcomer is not refused
    because a client alone filled it.
    Counted on the event loop, which takes one request at a time, so it needs no lock."""
    limit: int
    fair_share: bool = True
    recent_s: float = 10.0
    in_flight: int = 0
    most: int = 0  # the most in flight at once since the start
    refused: int = 0  # 503: the bound was full
    refused_share: int = 0  # 429: the client held its share
    held: dict[str, int] = field(default_factory=dict)  # client -> its requests in flight
    seen: OrderedDict[str, float] = field(default_factory=OrderedDict)  # client -> when it last asked, oldest first

    def take(self, client: str = "-") -> None:
        self._saw(client, time.monotonic())
        if self.limit and self.in_flight >= self.limit and not self._spare_for(client):
            self.refused += 1
            raise Overloaded(self.limit)
        if self.fair_share and self.limit and self.in_flight >= self.busy:
            clients = self.clients()
            share = max(1, self.limit // clients)
            if clients > 1 and (held := self.held.get(client, 0)) >= share:
                self.refused_share += 1
                raise OverShare(client, held, share, clients, self.limit)
        self.held[client] = self.held.get(client, 0) + 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)

    def _spare_for(self, client: str) -> bool:
        """With fair share, a client that holds nothing may take one of ``spare`` places past the full bound: a user's
        first search after a client alone filled the bound is taken (its share counts from then on), not refused."""
        return self.fair_share and client not in self.held and self.in_flight < self.limit + self.spare

    @property
    def spare(self) -> int:
        return max(1, self.limit // 8)

    @property
    def busy(self) -> int:
        """From how many in flight shares count: an eighth of the bound (4 of 32). Below it a worker has room for
        anyone, and with few clients a share is more than that anyway; with many, a share of 1 or 2 would refuse a
        client's second search to an idle worker. (From half the bound, as first built, let a greedy client hold 16 of
        32 beside 4 users, and their searches waited behind them: bench/fair_share.py, docs/BENCHMARKS.md "Round
        56".)"""
        return self.limit // 8

    def done(self, client: str = "-") -> None:
        self.in_flight -= 1
        _count_down(self.held, client)

    def _saw(self, client: str, now: float) -> None:
        self.seen.pop(client, None)
        self.seen[client] = now
        self._forget(now)

    def clients(self) -> int:
        """The clients sharing the bound: those that asked in the last ``recent_s`` seconds, and any still holding a
        request taken before."""
        self._forget(time.monotonic())
        return len(self.seen) + sum(1 for c in self.held if c not in self.seen)

    def _forget(self, now: float) -> None:
        """The clients that have not asked for ``recent_s``, the oldest first (so each costs once)."""
        while self.seen:
            oldest, at = next(iter(self.seen.items()))
            if now - at <= self.recent_s:
                break
            del self.seen[oldest]

    def stats(self) -> dict:
        return {"limit": self.limit, "in_flight": self.in_flight, "most": self.most, "refused": self.refused,
                "fair_share": self.fair_share, "clients": self.clients(), "refused_share": self.refused_share,
                "spare": self.spare if self.fair_share and self.limit else 0}


@dataclass
class RateLimiter:
    """How many ranking requests a client (``client_key``) may send: ``per_min`` a minute on average, and up to
    ``burst`` at once above that (a token bucket per client: it holds ``burst`` tokens, refills at ``per_min`` a
    minute, and each request takes one). A request that finds the bucket empty is refused (``RateLimited``: 429 with
    Retry-After, the seconds until a token), nothing of it done; a refused one takes no token, so a client that waits
    as told is served. Where the fair share and the run queue bound what a client holds at once, this bounds how much
    it takes over time: a scraper walking the whole forum through /search one request at a time. 0: no limit (the
    file is never opened).

    The buckets live in the SQLite file ``path``, shared by every process that opens it, so the workers of
    `cqa serve --workers N` (and any other server of the same data folder) hold a client to one rate between them,
    whichever worker each of its connections reaches (in each process's memory, as round 58 kept them, a client got up
    to N times the rate: docs/BENCHMARKS.md "Round 59"). A take is one write transaction (an upsert that takes a token
    only where one is left), so two workers never both take the last one. The file is state that may be lost: it is
    not synced (a power cut forgets who spent what), and where it cannot be read or written the request is taken, not
    refused (``store_errors``, logged): the rate limit fails open, the service does not.

    A client's bucket is forgotten once it is full again (it has not asked for ``burst`` / rate seconds), so the
    buckets held are the clients that asked lately. The clock is the wall clock, which every process shares; time
    going back counts as none passed."""
    per_min: int
    path: Path
    burst: int = 0  # 0: ten seconds' worth of the rate, at least 1
    refused: int = 0  # 429: the client's bucket was empty
    store_errors: int = 0  # takes let through because the file failed
    _db: sqlite3.Connection | None = field(default=None, repr=False)
    _db_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _next_forget: float = 0.0  # when the file's full buckets are next deleted
    _logged_error_at: float = float("-inf")

    FORGET_EVERY_S = 5.0  # how often a process deletes the file's full buckets
    BUSY_TIMEOUT_S = 0.25  # how long a take waits for another process's write before it lets the request through

    def __post_init__(self) -> None:
        self.burst = self.burst or max(1, self.per_min // 6)

    @property
    def rate(self) -> float:
        return self.per_min / 60.0

    @property
    def full_after_s(self) -> float:
        return self.burst / self.rate

    _TAKE = """INSERT INTO buckets (client, tokens, at) VALUES (:client, :burst - 1.0, :now)
        ON CONFLICT (client) DO UPDATE SET tokens = min(:burst, tokens + max(0.0, :now - at) * :rate) - 1.0,
                                           at = max(at, :now)
        WHERE min(:burst, tokens + max(0.0, :now - at) * :rate) >= 1.0
        RETURNING tokens"""
    _LEFT = "SELECT min(:burst, tokens + max(0.0, :now - at) * :rate) FROM buckets WHERE client = :client"

    def take(self, client: str = "-", now: float | None = None) -> None:
        """A token of ``client``'s bucket taken under the file's write lock (the upsert writes only where the bucket,
        refilled to ``now``, holds one), or ``RateLimited`` with the seconds until it holds one."""
        if not self.per_min:
            return
        now = time.time() if now is None else now
        values = {"client": client, "burst": float(self.burst), "now": now, "rate": self.rate}
        try:
            # the write lock first (waiting up to BUSY_TIMEOUT_S for another worker's): an upsert begun as a read
            # would be refused at once, without waiting, where another worker wrote since it began
            with self._db_lock, immediate(self._open()) as db:
                if db.execute(self._TAKE, values).fetchone() is not None:
                    left = None
                else:
                    row = db.execute(self._LEFT, values).fetchone()
                    left = row[0] if row is not None else None  # forgotten meanwhile: full again, taken
                if now >= self._next_forget:
                    self._next_forget = now + self.FORGET_EVERY_S
                    db.execute("DELETE FROM buckets WHERE at < ?", (now - self.full_after_s,))
        except (sqlite3.Error, OSError) as e:
            self.store_errors += 1
            if now - self._logged_error_at > 60:  # once a minute at most: it may fail for every request
                self._logged_error_at = now
                log.warning("the rate limit's file %s failed (%s); requests are taken unlimited until it works "
                            "again (%d so far)", self.path, e, self.store_errors)
            return
        if left is not None:
            self.refused += 1
            raise RateLimited(client, self.per_min, self.burst, (1.0 - left) / self.rate)

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            from indexing.store import opened_while_others_open
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=self.BUSY_TIMEOUT_S, check_same_thread=False,
                                 isolation_level=None)
            db.execute("PRAGMA synchronous=OFF")  # who spent what lately need not survive a power cut

            def setup(conn: sqlite3.Connection) -> None:  # every worker opens it at the same moment
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("CREATE TABLE IF NOT EXISTS buckets (client TEXT PRIMARY KEY, tokens REAL NOT NULL, "
                             "at REAL NOT NULL) WITHOUT ROWID")
                conn.execute("CREATE INDEX IF NOT EXISTS buckets_at ON buckets (at)")
                conn.execute("BEGIN IMMEDIATE")  # and the write lock once: another's change to WAL is over
                conn.execute("COMMIT")
            opened_while_others_open(db, setup)
            self._db = db
        return self._db

    def clients(self, now: float | None = None) -> int:
        """The clients whose buckets are not full again, of every process: those that asked lately."""
        if not self.per_min:
            return 0
        now = time.time() if now is None else now
        try:
            with self._db_lock:
                return self._open().execute("SELECT count(*) FROM buckets WHERE at >= ?",
                                            (now - self.full_after_s,)).fetchone()[0]
        except (sqlite3.Error, OSError):
            return 0

    def stats(self) -> dict:
        return {"rate_limit_per_min": self.per_min, "rate_burst": self.burst if self.per_min else 0,
                "rate_limited": self.refused, "rate_clients": self.clients(), "rate_shared": bool(self.per_min),
                "rate_store_errors": self.store_errors}


@dataclass
class _Waiter:
    client: str
    seq: int
    future: "asyncio.Future[None]"


@dataclass
class FairQueue:
    """How many taken ranking requests do their work at once (``slots``), and which goes next. The others wait, and a
    freed slot goes to the waiting request whose client has the fewest running; among those, the client given a slot
    longest ago (or never), and its earliest request: the clients take turns, so a user's search waits for one slot
    to free, not behind every search a busier client sent before it. With every request running at once (no queue,
    as before round 57), a user's search shared the CPU with all of a greedy client's (its whole share) and took
    several times its own time. A client alone in the worker is held to ``alone_slots`` instead (``enter``, and
    ``_next`` as it asks ``alone_now``), so its bursts keep the reranker's batches; a client running nothing that
    arrives while the slots are so overfull runs at once too, rather than wait for all of them to drain. 0 slots: no
    queue, everything runs at once.

    Counted on the event loop, like ``Admission``; a request cancelled while it waits (its client went away) leaves
    the queue, and one cancelled just as it was given a slot gives it on."""
    slots: int
    # how many a client alone in the worker runs at once (0: no bound, as rounds 57-58 shipped), and how the queue
    # asks, when a slot frees, whether one client is alone (``Admission.clients() <= 1``; None: never)
    alone_slots: int = 0
    alone_now: Callable[[], bool] | None = None
    running: dict[str, int] = field(default_factory=dict)  # client -> its requests running
    waiting: list[_Waiter] = field(default_factory=list)
    total: int = 0  # running, all clients
    queued: int = 0  # requests that waited for a slot, since the start
    most_waiting: int = 0
    overfull_entered: int = 0  # requests run at once past the slots another client alone had filled, since the start
    _seq: int = 0  # requests that waited, and slots given: the order of both
    _given: dict[str, int] = field(default_factory=dict)  # client -> when it was last given a slot (its turn)

    async def enter(self, client: str = "-", alone: bool = False) -> None:
        """Wait for a slot; ``alone``: the worker serves this client only (``Admission.clients``), which then runs
        at once, past the slots, as it did before the queue: with nobody to take turns with, a queue would only
        shrink the reranker's batches (one client's burst answered 0.85x as many searches a second with 2 slots,
        docs/BENCHMARKS.md "Round 57")."""
        if not self.slots:
            return
        if self.total < self._bound(alone) and not self.waiting:
            self._run(client)
            return
        if self.total > self.slots and client not in self.running:
            # the worker runs past its slots (a client alone filled it, and is alone no more): this client, running
            # nothing, would be first to be given a slot, but none frees until that client's requests have drained
            # below the slots; it runs at once beside them instead, as it did before the queue
            self._run(client)
            self.overfull_entered += 1
            return
        self._seq += 1
        waiter = _Waiter(client, self._seq, asyncio.get_running_loop().create_future())
        self.waiting.append(waiter)
        self.queued += 1
        self.most_waiting = max(self.most_waiting, len(self.waiting))
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.leave(client)  # given a slot as it was cancelled: the next one takes it
            elif waiter in self.waiting:
                self.waiting.remove(waiter)
                self._idle(client)
            raise

    def leave(self, client: str = "-") -> None:
        if not self.slots:
            return
        self.total -= 1
        _count_down(self.running, client)
        self._next()
        self._idle(client)

    def _run(self, client: str) -> None:
        self._seq += 1
        self.total += 1
        self.running[client] = self.running.get(client, 0) + 1
        self._given[client] = self._seq

    def _idle(self, client: str) -> None:
        """A client running and waiting nothing has no turn to keep: forgotten, so the map holds the busy ones only."""
        if client not in self.running and all(w.client != client for w in self.waiting):
            self._given.pop(client, None)

    def _bound(self, alone: bool) -> float:
        """How many may run at once: the slots, or for a client alone ``alone_slots`` (no bound at 0)."""
        if not alone:
            return self.slots
        return max(self.slots, self.alone_slots) if self.alone_slots else float("inf")

    def _next(self) -> None:
        # with a bound for a client alone, its waiting requests flow up to it while it is alone; without one (0), a
        # waiting request is given a slot only under the slots, as before the bound: a lone client's backlog
        # released all at once would leave the next user to share the cores with all of it
        alone = bool(self.alone_slots) and self.alone_now is not None and self.alone_now()
        while self.waiting and self.total < self._bound(alone):
            chosen = min(self.waiting, key=lambda w: (self.running.get(w.client, 0), self._given.get(w.client, 0),
                                                      w.seq))
            self.waiting.remove(chosen)
            if chosen.future.done():  # cancelled, its task not resumed yet to leave the queue itself
                self._idle(chosen.client)
                continue
            self._run(chosen.client)
            chosen.future.set_result(None)

    def stats(self) -> dict:
        return {"slots": self.slots, "alone_slots": self.alone_slots, "running": self.total,
                "waiting": len(self.waiting), "queued": self.queued, "most_waiting": self.most_waiting,
                "overfull_entered": self.overfull_entered}
