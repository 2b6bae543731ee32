"""One JSON shape for every error: {"error": {"status", "code", "message", "details"?, "request_id"?}}; the request id
(``app.access``) is the one its response's ``X-Request-ID`` and the server's log lines for it carry."""
from __future__ import annotations

import logging
import math
import sqlite3

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ranking.retriever import TagsNotIndexed

from .access import logged_path, request_id

log = logging.getLogger(__name__)

CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
         409: "conflict", 412: "precondition_failed", 413: "payload_too_large", 415: "unsupported_media_type",
         422: "invalid_request", 429: "too_many_requests", 500: "internal_error", 503: "not_ready"}


def _text(s: str) -> str:
    """A message as UTF-8 can carry it: text a client sent with unpaired surrogates (in a field name, say) is
    echoed as \\udXXX escapes instead of failing the response."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(status: int, message: str, details: list | None = None, code: str | None = None) -> dict:
    err = {"status": status, "code": code or CODES.get(status, "error"), "message": _text(message)}
    if details:
        err["details"] = [{k: _text(v) if isinstance(v, str) else v for k, v in d.items()} for d in details]
    if (rid := request_id()) is not None:
        err["request_id"] = rid
    return {"error": err}


# pydantic puts this before the message of a validator's ValueError; ours are written for the client to read as is
_VALUE_ERROR = "Value error, "


def _field_errors(exc: RequestValidationError) -> list[dict]:
    return field_errors(exc.errors())


def field_errors(errors: list[dict]) -> list[dict]:
    """Pydantic's errors as the error body's ``details``: the field's dotted path (the request body's own fields, not
    "body."), the message as a client reads it, and pydantic's type."""
    out = []
    for e in errors:
        loc = [str(x) for x in e.get("loc", ())]
        if loc and loc[0] == "body":
            loc = loc[1:]
        msg = e.get("msg", "invalid")
        if e.get("type") == "value_error" and msg.startswith(_VALUE_ERROR):
            msg = msg[len(_VALUE_ERROR):]
        out.append({"field": ".".join(loc) or "(body)", "message": msg, "type": e.get("type")})
    return out


def internal_error() -> JSONResponse:
    """The answer to an error no handler took: never a traceback; the request id (in the body and the header) finds
    the server's log line."""
    return JSONResponse(error_body(500, "internal error; the server log has the details"), status_code=500)


class Overloaded(Exception):
    """A ranking request refused at once (``app.limits.Admission``): the worker holds ``limit`` such requests it has
    not answered yet. Answered 503 ``overloaded`` with Retry-After."""

    def __init__(self, limit: int):
        super().__init__(f"this worker is answering {limit} ranking requests already (CQA_MAX_IN_FLIGHT); nothing of "
                         "this one was done: send it again in a moment")
        self.limit = limit


class RateLimited(Exception):
    """A ranking request refused (``app.limits.RateLimiter``, CQA_RATE_LIMIT_PER_MIN): its client has sent more than
    its rate (to all the workers of the data folder together), its burst spent. Answered 429 ``rate_limited`` with
    Retry-After (the seconds until it may send one more), after CQA_OVER_SHARE_DELAY_MS."""

    def __init__(self, client: str, per_min: int, burst: int, retry_after_s: float):
        super().__init__(f"this client ({client}) has sent more than {per_min} ranking requests a minute "
                         f"(CQA_RATE_LIMIT_PER_MIN; bursts of {burst} allowed); nothing of this one was done: send it "
                         f"again in {retry_after_s:.1f} s")
        self.client, self.per_min, self.burst, self.retry_after_s = client, per_min, burst, retry_after_s


class OverShare(Exception):
    """A ranking request refused (``app.limits.Admission``, CQA_FAIR_SHARE): the worker holds an eighth of
    CQA_MAX_IN_FLIGHT or more, and its client holds its share of it already, while other clients are searching.
    Answered 429 ``over_share`` with Retry-After, after CQA_OVER_SHARE_DELAY_MS."""

    def __init__(self, client: str, held: int, share: int, clients: int, limit: int):
        super().__init__(f"this client ({client}) has {held} ranking requests in this worker not answered yet; its "
                         f"share of the {limit} it takes at once (CQA_MAX_IN_FLIGHT) is {share} while {clients} clients "
                         "are searching (CQA_FAIR_SHARE); nothing of this one was done: send it again once one of "
                         "yours is answered")
        self.client, self.held, self.share, self.clients, self.limit = client, held, share, clients, limit


class ShuttingDown(Exception):
    """A ranking request whose model stopped before it scored it: the service is shutting down. Answered 503
    ``shutting_down`` with Retry-After (another worker or replica can answer it)."""

    def __init__(self):
        super().__init__("this worker is shutting down and stopped before ranking this request; nothing of it was "
                         "done: send it again")


def install(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        details = _field_errors(exc)
        if any(d["type"] == "json_invalid" for d in details):
            return JSONResponse(error_body(400, "the request body is not valid JSON: " + details[0]["message"]),
                                status_code=400)
        first = details[0] if details else {"field": "(body)", "message": "invalid"}
        msg = f"invalid request: {first['field']}: {first['message']}"
        return JSONResponse(error_body(422, msg, details), status_code=422)

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded):
        return JSONResponse(error_body(503, str(exc), code="overloaded"), status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(OverShare)
    async def _over_share(request: Request, exc: OverShare):
        return JSONResponse(error_body(429, str(exc), code="over_share"), status_code=429, headers={"Retry-After": "1"})

    @app.exception_handler(RateLimited)
    async def _rate_limited(request: Request, exc: RateLimited):
        return JSONResponse(error_body(429, str(exc), code="rate_limited"), status_code=429,
                            headers={"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))})

    @app.exception_handler(ShuttingDown)
    async def _shutting_down(request: Request, exc: ShuttingDown):
        return JSONResponse(error_body(503, str(exc), code="shutting_down"), status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(TagsNotIndexed)
    async def _tags_not_indexed(request: Request, exc: TagsNotIndexed):
        return JSONResponse(error_body(409, str(exc), code="reindex_needed"), status_code=409)

    @app.exception_handler(sqlite3.OperationalError)
    async def _store_busy(request: Request, exc: sqlite3.OperationalError):
        """A write that waited its busy timeout for another one (a long one: a VACUUM, another process's bulk
        import) and was rolled back: the client may send it again."""
        if "locked" not in str(exc) and "busy" not in str(exc):
            return await _unexpected(request, exc)
        log.warning("%s %s: the store stayed locked past the busy timeout (%s); answered 503", request.method,
                    logged_path(request.scope), exc)
        return JSONResponse(error_body(503, "the store is busy with another write; nothing of this request was "
                                       "written; send it again", code="store_busy"), status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # never a traceback to the client
        log.exception("unhandled error on %s %s", request.method, logged_path(request.scope))
        return internal_error()


__all__ = ["HTTPException", "OverShare", "Overloaded", "RateLimited", "error_body", "install", "internal_error"]
