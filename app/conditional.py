"""Conditional requests on one stored thread (RFC 9110, section 13): its ETag is the content hash of what it says,
sent on GET /threads/{id} and on each single-thread write's response; ``If-Match`` makes a write happen only while
the thread is still as the client read it (412 otherwise, with the ETag it has now), and ``If-None-Match`` on a GET
answers 304 while it is."""
from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from indexing.store import PreconditionFailed, etag_matches

from .errors import error_body


def quoted(etag: str) -> str:
    """An ETag as the header carries it."""
    return f'"{etag}"'


def etags(header: str | None, weak: bool = False) -> list[str] | None:
    """The entity tags an ``If-Match`` or ``If-None-Match`` header lists, ``*`` kept as it is; None without the header,
    a 400 when it lists nothing. A weak tag (``W/"..."``) is kept whole, so that the strong comparison If-Match asks
    for never matches it, unless ``weak``: If-None-Match compares weakly, so there it counts as its tag."""
    if header is None:
        return None
    tags = [t.strip() for t in header.split(",") if t.strip()]
    if not tags:
        raise HTTPException(400, detail='If-Match / If-None-Match is empty: send an ETag in quotes ("...") or *')
    if weak:
        tags = [t[2:] if t.startswith("W/") else t for t in tags]
    return [t[1:-1] if len(t) >= 2 and t[0] == t[-1] == '"' else t for t in tags]


def met(thread_id: str, tagged: tuple, tags: list[str] | None):
    """The stored thread of ``tagged`` (``ThreadStore.get_tagged``) when it meets ``tags`` (an If-Match's), so that a
    write whose condition already fails answers 412 before it encodes anything ahead; the write's own transaction
    checks again."""
    thread, etag = tagged
    if not etag_matches(etag, tags):
        raise PreconditionFailed(thread_id, etag)
    return thread


def install(app: FastAPI) -> None:
    """Every ``PreconditionFailed`` a request meets, in the store's transaction or at ``met``, answers the 412 a write
    whose If-Match the thread no longer meets gets, with the thread's ETag as it is now."""
    @app.exception_handler(PreconditionFailed)
    async def _refused(request: Request, exc: PreconditionFailed):
        return JSONResponse(error_body(412, str(exc)), status_code=412, headers={"ETag": quoted(exc.etag)})
