"""Request guards in front of the app: body size (413), content type (415), UTF-8 (400), and how many ranking
requests one worker takes at once (503 ``overloaded``, ``Admission``)."""
from __future__ import annotations

import json
from dataclasses import dataclass

from .errors import Overloaded, error_body


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


@dataclass
class Admission:
    """The ranking requests (searches, reranks, a thread's comments or similar threads) one worker has taken and not
    answered yet, those waiting for a model or a thread included. Past ``limit``, a new one is refused at once
    (``Overloaded``: 503 with Retry-After) rather than queued behind them, so that under a burst a client learns in
    milliseconds to try again, or another replica, instead of waiting for the whole queue; 0: no bound. Counted on
    the event loop, which takes one request at a time, so it needs no lock."""
    limit: int
    in_flight: int = 0
    most: int = 0  # the most in flight at once since the start
    refused: int = 0

    def take(self) -> None:
        if self.limit and self.in_flight >= self.limit:
            self.refused += 1
            raise Overloaded(self.limit)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)

    def done(self) -> None:
        self.in_flight -= 1

    def stats(self) -> dict:
        return {"limit": self.limit, "in_flight": self.in_flight, "most": self.most, "refused": self.refused}
