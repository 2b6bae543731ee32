"""Each request's id, the access log, and how the service's log lines are written (text or JSON).

An operator who reads "internal error" in a forum's bug report needs the one log line that says why. So every request
gets an id: the ``X-Request-ID`` its proxy or the forum's backend sent (1-128 letters, digits and ``._:-``), or a
new one. The response carries it in the same header, an error body carries it (``error.request_id``), every line
logged while the request is served carries it, and so does the job a request starts (``GET /jobs/{id}``) and each
line that job logs.

The access log is one line per request, written when the response has ended: client, method, path (a user's id in
it written as ``{author_id}``), status, milliseconds, request id (logger ``cqa.access``, on standard output as
uvicorn's own access log was; every other line on standard error). ``CQA_ACCESS_LOG=false`` turns it off.
``CQA_LOG_FORMAT=json`` writes each line as one JSON object, with the access fields as keys, for a log shipper.

``RequestIds`` is a plain ASGI middleware (no task per request, as ``BaseHTTPMiddleware`` makes). It also turns an
exception no handler took into the service's 500 body, with the request id, so that the line logged for it, the
response and the access line name the same request.
"""
from __future__ import annotations

import json
import logging
import re
import time
import uuid
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Literal

log = logging.getLogger(__name__)
access = logging.getLogger("cqa.access")

HEADER = "x-request-id"
_HEADER_KEY = HEADER.encode()  # ASGI headers: lower-case bytes
_ACCEPTED = re.compile(r"[A-Za-z0-9._:-]{1,128}")
LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"
ACCESS_FIELDS = ("client", "method", "path", "status", "ms", "queued_ms", "batch_wait_ms")
QUEUED_MS = "cqa.queued_ms"  # the scope's key for how long a ranking request waited for a run slot (app.main)

CANCELLED = 499  # the access log's status of a request cancelled before any answer began (nginx's "client closed")

current: ContextVar[str | None] = ContextVar("cqa_request_id", default=None)
# the seconds each of the request's model calls waited for its micro-batch to begin (app.batching): the batch being
# gathered and the one before it being scored. A list each request starts empty, shared by whatever serves it (a
# thread of the pool, the batcher's task: each runs in a copy of its context); None outside a request
batch_waits: ContextVar[list[float] | None] = ContextVar("cqa_batch_waits", default=None)


def request_id() -> str | None:
    """The id of the request being served here (in a job: the request that started it), or None."""
    return current.get()


def accepted_id(sent: str | None) -> str:
    """The id a request is known by: the one it was sent with, where it is 1-128 of ``[A-Za-z0-9._:-]`` (safe in a
    log line and a header), else a new one (32 hex digits)."""
    if sent is not None and _ACCEPTED.fullmatch(sent):
        return sent
    return uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    """Puts the request id on every record: ``request_id`` (None outside a request) and ``request_tag`` (" [id]" or
    ""), which the text format prints after the logger's name."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = getattr(record, "request_id", None) or current.get()
        record.request_id = rid
        record.request_tag = f" [{rid}]" if rid else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601 to the millisecond), level, logger, message, the process id, the
    request id where there is one, an access line's fields (``ACCESS_FIELDS``), and an exception's traceback as
    ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
               .replace("+00:00", "Z"),
               "level": record.levelname, "logger": record.name, "message": record.getMessage(),
               "pid": record.process}  # which worker of `cqa serve --workers N` wrote it
        if getattr(record, "request_id", None):
            out["request_id"] = record.request_id
        for key in ACCESS_FIELDS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def log_config(fmt: LogFormat = "text", level: str = "INFO") -> dict:
    """A ``logging.config.dictConfig`` for every process of the service (uvicorn applies it in each worker too):
    every logger through the root's handler on standard error, the access log on standard output, both with the
    request id, in ``fmt``. uvicorn's own loggers go to the root; its access log stays off (``cqa.access`` is
    written instead)."""
    formatter = {"()": f"{__name__}.JsonFormatter"} if fmt == "json" else {"format": TEXT_FORMAT}
    handler = {"formatter": "default", "filters": ["request_id"]}
    return {
        "version": 1, "disable_existing_loggers": False,
        "filters": {"request_id": {"()": f"{__name__}.RequestIdFilter"}},
        # uvicorn sets ``use_colors`` on formatters named "default" and "access" when it is told to
        "formatters": {"default": formatter, "access": formatter},
        "handlers": {"default": {**handler, "class": "logging.StreamHandler", "stream": "ext://sys.stderr"},
                     "access": {**handler, "formatter": "access", "class": "logging.StreamHandler",
                                "stream": "ext://sys.stdout"}},
        "root": {"handlers": ["default"], "level": level},
        "loggers": {"cqa.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
                    **{name: {"handlers": [], "propagate": True} for name in ("uvicorn", "uvicorn.error")},
                    "uvicorn.access": {"handlers": [], "propagate": False}},
    }


def configure(fmt: LogFormat = "text", level: str = "INFO") -> None:
    """This process's logging as ``log_config`` says (the CLI's commands; ``cqa serve``'s workers get the same
    through uvicorn)."""
    import logging.config
    logging.config.dictConfig(log_config(fmt, level))


# path parameters that name a person: the access log writes their name, not their value
# (GET /authors/{author_id}/posts), so a user's id is not kept in the logs, which an erasure (cqa erase) cannot reach
PRIVATE_PARAMS = frozenset({"author_id"})
_PARAM = re.compile(r"{(\w+)(?::\w+)?}")


def logged_path(scope) -> str:
    """The request's path as the access log writes it: as sent, but a ``PRIVATE_PARAMS`` parameter of its route left
    as the route names it."""
    path, params = scope.get("path", ""), scope.get("path_params") or {}
    template = getattr(scope.get("route"), "path", None)
    if template is None or not PRIVATE_PARAMS & set(params):
        return path
    return _PARAM.sub(lambda m: m.group(0) if m.group(1) in PRIVATE_PARAMS else str(params.get(m.group(1), m.group(0))),
                      template)


class RequestIds:
    """ASGI middleware: the request's id (``accepted_id``) set for everything that serves it and echoed in
    ``X-Request-ID``; an exception no handler took answered with the service's 500 body; and, with ``access_log``,
    one access line when the response has ended."""

    def __init__(self, app, access_log: bool = True):
        self.app, self.access_log = app, access_log

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == _HEADER_KEY), None)
        rid = accepted_id(sent)
        token, waits = current.set(rid), batch_waits.set([])
        started, status = time.perf_counter(), [0]
        header = (_HEADER_KEY, rid.encode("latin-1"))

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)
        try:
            await self.app(scope, receive, sending)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), logged_path(scope))
            if status[0]:  # the response had begun: nothing more can be said to the client
                raise
            from .errors import internal_error
            await internal_error()(scope, receive, sending)
        finally:  # no response begun and none sent for an error: the request was cancelled (the client gone, a stop)
            if self.access_log:
                self._log(scope, status[0] or CANCELLED, 1000 * (time.perf_counter() - started), batch_waits.get())
            current.reset(token)
            batch_waits.reset(waits)

    @staticmethod
    def _log(scope, status: int, ms: float, waits: list[float] | None = None) -> None:
        client = scope.get("client")
        path = logged_path(scope)
        if scope.get("query_string"):
            path += "?" + scope["query_string"].decode("latin-1")
        host = client[0] if client else "-"
        extra = {"client": host, "method": scope.get("method"), "path": path, "status": status, "ms": round(ms, 1)}
        if (queued := scope.get(QUEUED_MS)) is None:
            access.info('%s "%s %s" %d %.1f ms', host, scope.get("method"), path, status, ms, extra=extra)
            return
        # a ranking request: of its time, how long it waited for a run slot (CQA_RUN_SLOTS), and then for its
        # reranker's batches to begin (the model busy with others' requests: app.batching), where it had any
        extra["queued_ms"] = queued
        if waits:
            extra["batch_wait_ms"] = round(1000 * sum(waits), 1)
            access.info('%s "%s %s" %d %.1f ms (queued %.1f ms, batch wait %.1f ms)', host, scope.get("method"), path,
                        status, ms, queued, extra["batch_wait_ms"], extra=extra)
        else:
            access.info('%s "%s %s" %d %.1f ms (queued %.1f ms)', host, scope.get("method"), path, status, ms, queued,
                        extra=extra)


__all__ = ["HEADER", "JsonFormatter", "LogFormat", "PRIVATE_PARAMS", "QUEUED_MS", "RequestIdFilter", "RequestIds",
           "accepted_id", "batch_waits", "configure", "current", "log_config", "logged_path", "request_id"]
