"""The FastAPI application. Heavy state (store, index generation, models) loads in the lifespan."""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from indexing.config import Settings, get_settings
from indexing.generations import IndexFormatError
from indexing.store import ThreadStore

log = logging.getLogger(__name__)


class QuestionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str = Field("", max_length=20_000)
    body: str = Field(..., max_length=20_000)

    @field_validator("body")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the question body must not be empty or whitespace")
        return v


class FiltersIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    category: str | None = Field(None, max_length=200)
    since: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$",
                              description="ISO date or date-time, inclusive")
    until: str | None = Field(None, pattern=r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$",
                              description="ISO date or date-time, inclusive")


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: QuestionIn
    k: int = Field(10, ge=1, le=100)
    target: Literal["answers", "questions", "threads"] = "answers"
    filters: FiltersIn | None = None
    expand: bool | Literal["rm3", "translation"] | None = Field(
        None, description="query expansion: true = rm3, or name a method; default: the tuned retriever's")
    explain: bool = False


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.settings = settings
        app.state.store = ThreadStore(settings.store_path)
        app.state.generation = None
        try:
            from indexing.searcher import load_current
            app.state.generation = await run_in_threadpool(load_current, settings.index_root, settings.device)
            log.info("serving index generation %s", app.state.generation.name)
        except IndexFormatError as e:
            log.warning("no index generation loaded: %s", e)
        try:
            yield
        finally:
            app.state.store.close()

    app = FastAPI(title="cQA answer ranking", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        return JSONResponse({"error": {"status": exc.status_code, "message": exc.detail}},
                            status_code=exc.status_code)

    @app.get("/health", summary="Liveness: the process answers")
    def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready", summary="Readiness: store open and an index generation loaded")
    def ready(request: Request):
        gen = request.app.state.generation
        if gen is None:
            raise HTTPException(503, detail="no index generation is loaded yet; run `cqa reindex`")
        return {"status": "ready", "generation": gen.name, "sizes": gen.sizes()}

    @app.get("/threads/{thread_id}", summary="One thread with its answers")
    def get_thread(thread_id: str, request: Request):
        t = request.app.state.store.get(thread_id)
        if t is None:
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}")
        return t.model_dump()

    @app.get("/evaluation", summary="The latest offline evaluation per benchmark")
    def evaluation(request: Request):
        from ranking.evaluation.runner import latest_reports
        return {"benchmarks": latest_reports(request.app.state.settings.reports_dir)}

    @app.post("/search", summary="Find the best existing answers (or questions) for a new question")
    async def search(body: SearchIn, request: Request):
        gen = request.app.state.generation
        if gen is None:
            raise HTTPException(503, detail="no index generation is loaded yet; run `cqa reindex`")
        from ranking.retriever import Filters
        from ranking.search import search_generation
        expansion = {True: "rm3", False: "none", None: None}.get(body.expand, body.expand)
        filters = Filters(**body.filters.model_dump()) if body.filters else None
        out = await run_in_threadpool(search_generation, gen, f"{body.question.subject}\n{body.question.body}",
                                      body.k, body.target, filters, expansion)
        if not body.explain:
            out.pop("expansion", None)
            for r in out["results"]:
                r.pop("stages", None)
        return out

    return app
