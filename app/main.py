"""The FastAPI application. Heavy state (store, indexes, models) loads in the lifespan."""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from indexing.config import Settings, get_settings
from indexing.store import ThreadStore


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.settings = settings
        app.state.store = ThreadStore(settings.store_path)
        try:
            yield
        finally:
            app.state.store.close()

    app = FastAPI(title="cQA answer ranking", version="0.1.0", lifespan=lifespan)

    @app.get("/health", summary="Liveness: the process answers")
    def health() -> dict:
        return {"status": "ok"}

    @app.get("/threads/{thread_id}", summary="One thread with its answers")
    def get_thread(thread_id: str):
        from fastapi import HTTPException
        t = app.state.store.get(thread_id)
        if t is None:
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}")
        return t.model_dump()

    return app
