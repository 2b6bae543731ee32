"""Request guards in front of the app: body size (413), content type (415), UTF-8 (400)."""
from __future__ import annotations

import json

from .errors import error_body


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
