"""The FastAPI application. Heavy state (store, index generation, reranker) loads in the lifespan,
never at import; CPU-bound ranking runs off the event loop."""
from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import socket
import sqlite3
import sys
import threading
import uuid
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict
from functools import partial
from typing import Callable, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from fastapi import Path as PathParam
from fastapi import Query as Param
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from indexing.generations import IndexFormatError
from indexing.models import MAX_TAG_CHARS, alternatives, tag_key
from indexing.status import FolderStatus
from indexing.store import Erased, NotInStore, StoreError, ThreadStore, etag_matches
from ranking.evaluation.feedback import (COMMENTS, COMMENTS_ENDPOINT, FeedbackLog, FeedbackUnavailable, NotShown,
                                         UnknownSearch, served_of, served_order)
from ranking.interleave import drawn, seed, with_challenger
from ranking.pipeline import SearchPipeline, SearchResponse
from ranking.retriever import TagSynonyms, tag_rows
from ranking.settings import MAX_RESULTS

from . import conditional, errors
from .access import QUEUED_MS, RequestIds, batch_waits
from .auth import require_admin
from .batching import MicroBatcher, ThreadBatched
from .jobs import Job, JobManager
from .errors import OverShare, Overloaded, RateLimited
from .limits import (Admission, BodyLimitMiddleware, FairQueue, ProxiedClient, RateLimiter, client_key,
                     enforce_count_limit, enforce_text_limit)
from .metrics import PUBLISH_S, Metrics
from .queries import answers_query, questions_query, rerank_query
from .refresh import Refresher
from .schemas import (
    AnswersIn,
    AnswersOut,
    BackupIn,
    BackupsOut,
    DeletedOut,
    EditedOut,
    ErasureIn,
    ErasureOut,
    ImportOut,
    ErasureStatusOut,
    EvaluationIn,
    FiltersIn,
    EvaluationOut,
    FeedbackIn,
    FeedbackOut,
    FeedbackReportOut,
    HealthOut,
    JobOut,
    JobSubmitted,
    LiftedOut,
    PostsOut,
    QuestionEditIn,
    ReadyOut,
    RerankIn,
    RerankOut,
    RerankAnswersIn,
    RerankAnswersOut,
    RerankQuestionsIn,
    RerankQuestionsOut,
    SearchIn,
    TagOut,
    TagSynonymIn,
    TagSynonymOut,
    TagSynonymsOut,
    TagsOut,
    TakedownsOut,
    ThreadListOut,
    ThreadsIn,
    ThreadsOut,
    blank,
)
from .settings import Settings, get_settings
from .warmup import warm_up

# CQA_CORS_ORIGINS: what a page of the forum's own site may send and read (ETag and If-Match for its conditional writes)
CORS_METHODS = ["GET", "POST", "PATCH", "DELETE"]
# no Authorization: a page of another site may search, never send the admin token (app.auth.require_admin)
CORS_HEADERS = ["Content-Type", "If-Match", "If-None-Match", "X-Request-ID"]
CORS_EXPOSED = ["ETag", "Retry-After", "X-Request-ID"]
UPLOAD_WRITE_BYTES = 1 << 20  # POST /imports: how much of the body is held before it is written
log = logging.getLogger(__name__)

PURGE = ("also delete what holds it beyond the store, as an erasure does (POST /erasures): a job builds a generation "
         "from scratch and deletes the older ones and the removed texts' cached vectors, and writes the backups that "
         "began before again without it (CQA_ERASE_BACKUPS) (GET /jobs/{id}); for content that must be gone from the "
         "disk, not only from search. The takedown is kept on record (GET /takedowns): the forum's later sends of it "
         "are left out. 409, nothing removed, while an erasure job runs")
IF_MATCH = ("the thread's ETag as read (GET /threads/{id}, or this write's last response): the write happens only "
            "while the thread is still so, else 412 with its ETag now; * for any stored thread")


def change_note(settings: Settings, done: str) -> str:
    """What POST /threads and PATCH tell the caller about when search sees the change."""
    if settings.refresh_s > 0:
        return (f"{done}; search sees it after the automatic refresh builds the next generation, which starts at once, "
                f"or {settings.refresh_s:g} s after the last one ended (CQA_REFRESH_S; GET /ready: refresh), or after "
                "POST /reindex")
    return f"{done}; search sees it after the next reindex (POST /reindex; the automatic refresh is off)"


def removal_note(settings: Settings) -> str:
    """What a DELETE tells the caller: the post is out of search results from its answer on (each search checks its
    results against the store, ``SearchPipeline.held_groups``); the indexes drop it at the next build."""
    when = ("the automatic refresh's next build (CQA_REFRESH_S; GET /ready: refresh)" if settings.refresh_s > 0
            else "the next reindex (POST /reindex; the automatic refresh is off)")
    return f"removed from the store, and from search results at once; the indexes drop it at {when}"


PURGED_NOTE = ("removed from the store, and from search results at once; the job rebuilds the indexes and deletes what "
               "held it (GET /jobs/{id})")


class Service:
    """What the app serves from. The rerankers load once; the search pipeline is rebuilt over each new
    generation and swapped atomically, so searches in flight finish on the old one."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.store = ThreadStore(settings.store_path)
        self.metrics = Metrics()
        # the ranking requests taken and not answered yet, and by whom
        self.admission = Admission(settings.max_in_flight, settings.fair_share)
        self.queue = FairQueue(settings.run_slots, settings.run_slots_alone,  # which of them runs next
                               alone_now=lambda: self.admission.clients() <= 1)
        # how many a client sends, counted in a file every worker of the data folder shares
        self.rate = RateLimiter(settings.rate_limit_per_min, settings.rate_limit_file, settings.rate_limit_burst)
        # the searches served and their users' judgements of them (CQA_FEEDBACK), a file every worker shares
        self.feedback = FeedbackLog.of(settings) if settings.feedback else None
        self._reports: dict[float | None, tuple[float, dict]] = {}  # GET /evaluation/feedback's, by window
        self._report_lock = threading.Lock()  # one report computed at a time: a burst of asks computes it once
        self._synonyms: tuple[int, TagSynonyms] = (-1, TagSynonyms())  # the store's tag synonyms, their version
        self.jobs = JobManager(settings.data_dir / "jobs")
        self._lock = threading.Lock()
        self.erasing = threading.Lock()  # POST /erasures: one erasure's check, write and job at a time
        self._following = threading.Lock()  # one load at a time: a slower load of an older generation never wins
        self.generation = None
        self.pipeline: SearchPipeline | None = None
        self.reranker = None  # POST /rerank: one thread's comments (the subtask A ranker)
        self.search_rankers: dict = {}  # /search target -> its reranker, behind a micro-batcher
        self.inference: list[dict] = []  # the MiniLM models loaded and how each runs (GET /ready)
        self.score_memos: Callable[[], dict[str, dict]] = dict  # their score memos' counts (GET /ready, /metrics)
        self.score_store = None  # the score store behind the memos (ranking.neural.memo.ScoreStore), if any
        self.vector_store = None  # the vector store behind the encoders' vector memos (VectorStore), if any
        self.batchers: list[MicroBatcher] = []
        self.rerank_batcher: MicroBatcher | None = None
        self.question_reranker = None  # POST /rerank/questions: given candidate questions (the subtask B ranker)
        self.question_batcher: MicroBatcher | None = None
        self.answers_reranker = None  # POST /rerank/answers: the comments of given threads (the subtask C ranker)
        self.answers_batcher: MicroBatcher | None = None
        self.arabic_reranker = None  # Arabic input to POST /rerank and /search ($CQA_ARABIC_RANKER)
        self.served_rankers: list = []  # the rerankers above and the /search ones, as loaded (not batched)
        self.unbatched_search_rankers: dict = {}  # /search target -> its reranker without the micro-batcher
        self.challengers: dict = {}  # /search target -> its challenger ($CQA_INTERLEAVE_*), behind a micro-batcher
        self.unbatched_challengers: dict = {}  # and without it (the warm-up's)
        # a thread's comments' challenger ($CQA_INTERLEAVE_COMMENTS: GET /threads/{id}/answers, POST /rerank), behind
        # a micro-batcher, and without it
        self.comments_challenger: MicroBatcher | None = None
        self.unbatched_comments_challenger = None
        self.warm_up_ms: dict[str, float | None] | None = None  # what each warm-up request took (app/warmup.py)
        self.attention = None
        self.holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"  # this process's lease
        self.refresher = Refresher(self) if settings.refresh_s > 0 else None  # builds when the store moved
        self._loop: asyncio.AbstractEventLoop | None = None  # the follower's, set when it starts
        self._wake: asyncio.Event | None = None

    REPORT_TTL_S = 5.0  # a feedback report is computed at most this often per window: it reads the whole log

    def feedback_report(self, days: float | None) -> dict:
        """GET /evaluation/feedback's report of the feedback log, the same one for ``REPORT_TTL_S``: anyone may ask
        for it, and it reads every judged search."""
        from ranking.evaluation.feedback import feedback_report
        now = time.monotonic()
        with self._report_lock:
            kept = self._reports.get(days)
            if kept is not None and now - kept[0] < self.REPORT_TTL_S:
                return kept[1]
            report = feedback_report(FeedbackLog.of(self.settings), days)
            if len(self._reports) > 16:  # windows asked: a few in practice; never a growing map
                self._reports.clear()
            self._reports[days] = (time.monotonic(), report)
            return report

    def forget_reports(self) -> None:
        with self._report_lock:
            self._reports.clear()

    def nudge(self) -> None:
        """This process just wrote to the store: let the automatic refresh look now instead of at the next poll (from
        the event loop or a worker thread alike)."""
        loop, wake = self._loop, self._wake
        if self.refresher is None or loop is None or wake is None:
            return
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop has closed (shutting down): the next start's refresh sees the write
            pass

    def lease_ttl(self) -> float:
        return max(30.0, 5 * self.settings.generation_poll_s)

    def follow_current(self) -> bool:
        """Go live on the generation the ``current`` pointer names, if it is not the one served (any process
        may publish one), and renew this process's lease on what it serves. True when it switched."""
        from indexing.generations import current_generation, write_lease
        with self._following:  # the follower's poll and a refresh's build both call this
            live = current_generation(self.settings.index_root)
            if live is not None and (self.generation is None or live != self.generation.name):
                self.load_generation()  # leases what it loads
                return True
            if self.generation is not None:
                write_lease(self.settings.index_root, self.holder, self.generation.name, self.lease_ttl())
            return False

    def load_rankers(self, loop) -> None:
        from ranking.rankers import (arabic_reranker, challenger_rerankers, inference_report, score_memos,
                                     search_rerankers, service_reranker, serving_store, serving_vector_store)
        built: dict = {}  # a model two rerankers share loads once
        self.reranker = service_reranker(self.settings, built)
        self.rerank_batcher = self._batcher(self.reranker)
        self.question_reranker = service_reranker(self.settings, built, self.settings.default_ranker_b)
        self.question_batcher = self._batcher(self.question_reranker)
        self.answers_reranker = service_reranker(self.settings, built, self.settings.default_ranker_c)
        self.answers_batcher = self._batcher(self.answers_reranker)
        # Arabic input to POST /rerank and /search ($CQA_ARABIC_RANKER, lexical: scored as it comes, no batcher)
        self.arabic_reranker = arabic_reranker(self.settings, built)
        searchers = search_rerankers(self.settings, built)
        self.search_rankers = {target: ThreadBatched(self._batcher(r), loop) for target, r in searchers.items()}
        # each target's challenger, interleaved with its reranker for a share of the questions (ranking.interleave)
        challengers = challenger_rerankers(self.settings, built) if self.feedback is not None else {}
        if self.feedback is None and any((self.settings.interleave_answers, self.settings.interleave_questions,
                                          self.settings.interleave_comments)):
            log.warning("CQA_INTERLEAVE_* is set but CQA_FEEDBACK is off: nothing is interleaved, since no reader's "
                        "judgement could say which ranker is preferred")
        served_challengers = list(challengers.values())
        if (comments := challengers.pop("comments", None)) is not None:
            self.comments_challenger, self.unbatched_comments_challenger = self._batcher(comments), comments
        self.challengers = {target: ThreadBatched(self._batcher(r), loop) for target, r in challengers.items()}
        self.unbatched_challengers = challengers
        served = [self.reranker, self.question_reranker, self.answers_reranker, *searchers.values(),
                  *served_challengers]
        self.served_rankers, self.unbatched_search_rankers = served, searchers
        self.inference = inference_report(served)
        self.score_memos = partial(score_memos, served)
        self.score_store = serving_store(self.settings)
        self.vector_store = serving_vector_store(self.settings)
        self.metrics.watch_memos(self.score_memos)
        if (self.settings.bilstm_checkpoint / "config.json").exists():
            try:  # the BiLSTM: per-word highlights in explain
                from ranking.neural.ranker import BiLSTMRanker
                self.attention = BiLSTMRanker.from_checkpoint(self.settings.bilstm_checkpoint, self.settings.device)
            except Exception as e:  # a broken checkpoint costs the highlights, not the service
                log.warning("BiLSTM checkpoint not loaded (%s): explain has no highlights", e)

    def _batcher(self, ranker) -> MicroBatcher:
        b = MicroBatcher(ranker, self.settings.batch_max, self.settings.batch_wait_ms, self.metrics,
                         in_flight=lambda: self.admission.in_flight)
        self.batchers.append(b)
        return b

    def resume_imports(self) -> None:
        """The uploads a stopped service had accepted (``POST /imports``) but not yet ingested: ingested now, by the
        first worker to take the import lock; the hidden files of uploads whose request never completed deleted."""
        from indexing.imports import ImportLock, drop_partial, imports_folder, pending

        from .imports import run_imports
        folder = imports_folder(self.settings.data_dir)
        if not folder.is_dir():
            return
        lock = ImportLock(folder)
        if not lock.held:
            if pending(folder):  # the killed service's child, dying with it, or another worker: tried again
                threading.Thread(target=self._resume_imports_later, name="imports-resume", daemon=True).start()
            return
        if dropped := drop_partial(folder):
            log.warning("imports: %d uploads never completed, deleted: %s", len(dropped), ", ".join(dropped))
        left = pending(folder)
        if not left:
            lock.release()
            return
        log.warning("imports: %d accepted before the service stopped, ingested now: %s", len(left),
                    ", ".join(p.name for p in left))
        _, started = self.jobs.submit("import", partial(run_imports, self.settings, lock))
        if not started:
            lock.release()

    def _resume_imports_later(self, tries: int = 30, every_s: float = 1.0) -> None:
        """``resume_imports`` found the import lock held and uploads waiting: tried again each second for a while. A
        killed service's ingest ends with it (``cli.EXIT_WITH``), within moments; another worker's import runs on,
        and ingests whatever waits (``run_imports`` takes every pending upload)."""
        from indexing.imports import import_running, imports_folder
        folder = imports_folder(self.settings.data_dir)
        for _ in range(tries):
            time.sleep(every_s)
            if not import_running(folder):
                self.resume_imports()
                return
        log.warning("imports: uploads wait, and the import lock stayed held for %.0f s: a running import ingests them "
                    "(GET /status)", tries * every_s)

    def load_generation(self) -> None:
        from indexing.searcher import load_current
        from ranking.pipeline import build_pipeline
        from indexing.generations import write_lease
        with shorter_turns(self.settings.load_switch_interval_ms / 1000):  # searches go on meanwhile
            # the generation served until now lends what the new one shares with it (a grown FAISS index)
            gen = load_current(self.settings.index_root, self.settings.device, self.generation)
            # claim it before serving it, so a concurrent reindex cannot prune it under us
            write_lease(self.settings.index_root, self.holder, gen.name, self.lease_ttl())
            # what its first searches would build, built here, while the old generation still serves
            pipeline = build_pipeline(self.settings, gen, self.store, self.search_rankers,
                                      self.attention, self.arabic_reranker, self.challengers).prepare()
        with self._lock:  # one assignment: readers see the old pair or the new pair, never a mix
            old, self.generation, self.pipeline = self.generation, gen, pipeline
        for name, n in gen.sizes().items():
            self.metrics.index_docs.labels(name).set(n)
        if old is not None and old.name != gen.name:
            self.metrics.generation.labels(old.name).set(0)  # what the workers' shared files keep of it
            self.metrics.generation.remove(old.name)
        self.metrics.generation.labels(gen.name).set(1)
        log.info("serving index generation %s", gen.name)

    def tag_synonyms(self) -> TagSynonyms:
        """The store's tag synonyms, read again only when any process changed them (one row read otherwise)."""
        version = self.store.tag_synonyms_version()
        if version != self._synonyms[0]:
            self._synonyms = (version, TagSynonyms.of(self.store.tag_synonyms()))
        return self._synonyms[1]

    def snapshot(self):
        with self._lock:
            return self.generation, self.pipeline


@contextmanager
def shorter_turns(seconds: float):
    """Python's switch interval at most ``seconds`` meanwhile (0: as it is). A thread that runs Python without a
    pause (loading a generation) keeps the interpreter's lock until another thread has waited the interval; a search's
    model gives the lock up at each of its many steps (torch, ONNX Runtime) and waits that long to get it back, each
    time (bench/generation_switch.py --switch-interval-levels)."""
    before = sys.getswitchinterval()
    if seconds:
        sys.setswitchinterval(min(before, seconds))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def encode_before_write(svc: Service, threads) -> None:
    """``indexing.reindex.encode_ahead`` for a POST /threads, before its write; never fails the request (a cache)."""
    from indexing.reindex import ahead_texts, encode_ahead
    try:
        threads = svc.store.admitted(threads)  # nothing of an erased user's goes into the cache
        done = encode_ahead(svc.settings, threads, svc.settings.encode_ahead_texts)
    except Exception as e:  # noqa: BLE001 - the build encodes what is missing; the write must go on
        log.warning("encoding ahead of the build failed (the build will encode these texts): %s", e)
        svc.metrics.encoded_ahead.labels("failed").inc(sum(map(len, ahead_texts(svc.settings, threads))))
        return
    if "skipped" in done:
        svc.metrics.encoded_ahead.labels("skipped").inc(done["texts"])
        return
    svc.metrics.encoded_ahead.labels("encoded").inc(done["encoded"])
    svc.metrics.encoded_ahead.labels("cached").inc(done["texts"] - done["encoded"])
    log.info("encoded %d of %d texts ahead of the build in %.3f s", done["encoded"], done["texts"], done["seconds"])


FEEDBACK_SWEEP_S = 60.0  # how often a worker looks whether the feedback log holds anything past its period
NUDGE_GAP_S = 0.25  # the least time between two refresh looks that writes asked for (a burst of writes, one look)


async def publish_metrics(svc: Service) -> None:
    """With several workers, this one's own metrics (memory, memos, pauses) written for the others' scrapes every
    PUBLISH_S (app/metrics.py); nothing to do with one process."""
    if svc.metrics.shared is None:
        return
    while True:
        await run_in_threadpool(svc.metrics.publish)
        await asyncio.sleep(PUBLISH_S)


async def sweep_feedback(svc: Service) -> None:
    """What the feedback log keeps past its period (a search nobody judged, a request) forgotten on time where no
    search comes to do it (``FeedbackLog.forget_due``): a service nobody searches keeps no request past
    CQA_FEEDBACK_QUERY_DAYS by more than ``FEEDBACK_SWEEP_S``. With CQA_FEEDBACK=false too: what a log written while
    it was on holds goes on time (an absent file is left absent)."""
    kept = svc.feedback or FeedbackLog.of(svc.settings)
    try:
        while True:  # at once first: a service started after a long stop
            try:
                done = await run_in_threadpool(kept.forget_due)
            except FeedbackUnavailable as e:  # the file busy or failing: the next sweep, or the next search, tries
                log.warning("feedback log: %s", e)
                done = None
            if done and any(done.values()):
                log.info("feedback log: %d searches nobody judged forgotten, %d requests dropped past their period",
                         done["searches_forgotten"], done["requests_dropped"])
            await asyncio.sleep(FEEDBACK_SWEEP_S)
    finally:
        if kept is not svc.feedback:  # the service's own is closed with it
            kept.close()


async def follow(svc: Service) -> None:
    """Every $CQA_GENERATION_POLL_S: go live on a generation published by any process (a `cqa reindex`,
    another replica's POST /reindex), renew the lease on the one served, and let the automatic refresh see whether
    the store moved (app/refresh.py). A write of this process (``Service.nudge``) makes the refresh look at once,
    so a new thread's build starts without waiting for the poll (at most one look per NUDGE_GAP_S)."""
    svc._wake = asyncio.Event()
    svc._loop = asyncio.get_running_loop()
    poll = svc.settings.generation_poll_s
    next_poll = time.monotonic() + poll
    while True:
        try:
            await asyncio.wait_for(svc._wake.wait(), max(0.0, next_poll - time.monotonic()))
        except asyncio.TimeoutError:
            pass
        svc._wake.clear()
        if time.monotonic() < next_poll:  # nudged
            if svc.refresher is not None:
                await _refresh_tick(svc)
                await asyncio.sleep(NUDGE_GAP_S)
            continue
        next_poll = time.monotonic() + poll
        try:
            if await run_in_threadpool(svc.follow_current):
                log.info("went live on index generation %s", svc.generation.name)
        except Exception as e:  # a half-written or broken generation: keep serving the current one
            log.warning("could not follow the current generation: %s", e)
        if svc.refresher is not None:
            await _refresh_tick(svc)


async def _refresh_tick(svc: Service) -> None:
    try:
        await run_in_threadpool(svc.refresher.tick)
    except Exception as e:  # a store busy or a manifest half-read: the next tick looks again
        log.warning("automatic refresh: could not compare the store with the live generation: %s", e)


def sorted_by_score(candidates, scores: list[float], ranker, t0: float, stage) -> dict:
    """The body of a /rerank answer: the candidates by descending score (ties keep the order given), the ranker, and
    the time since ``t0``, which ``stage`` (a metrics histogram) observes."""
    ranked = sorted(zip(candidates, scores), key=lambda cs: -cs[1])
    seconds = time.perf_counter() - t0
    stage.observe(seconds)
    return {"results": [{"id": c.id, "score": s, "rank": i} for i, (c, s) in enumerate(ranked, 1)],
            "reranker": ranker.name, "timings_ms": {"rerank": round(1000 * seconds, 3)}}


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        svc = Service(settings)
        app.state.settings, app.state.service = settings, svc
        await run_in_threadpool(svc.load_rankers, asyncio.get_running_loop())
        # the models and libraries: never garbage, yet walked by every full collection. Frozen before the first
        # generation loads, so a generation replaced later is collected as before.
        if settings.gc_freeze:
            gc.collect()
            gc.freeze()
        for b in svc.batchers:
            b.start()
        try:
            await run_in_threadpool(svc.load_generation)
        except IndexFormatError as e:
            log.warning("no index generation loaded: %s", e)
        if settings.warm_up:  # before the first request: what it would set up (app/warmup.py)
            svc.warm_up_ms = await run_in_threadpool(warm_up, svc)
        svc.resume_imports()
        follower = asyncio.create_task(follow(svc), name="generation-follower")
        publisher = asyncio.create_task(publish_metrics(svc), name="metrics-publisher")
        sweeper = asyncio.create_task(sweep_feedback(svc), name="feedback-sweeper")
        try:
            yield
        finally:
            follower.cancel()
            publisher.cancel()
            sweeper.cancel()
            svc.metrics.retire()
            if svc.refresher is not None:
                await run_in_threadpool(svc.refresher.close)
            for b in svc.batchers:
                await b.stop()
            from indexing.generations import drop_lease
            drop_lease(settings.index_root, svc.holder)
            if svc.feedback is not None:
                svc.feedback.close()
            svc.store.close()

    app = FastAPI(title="cQA answer ranking", version="0.1.0", lifespan=lifespan,
                  description="Answer a new question with the best existing answers; sort a thread's comments.")
    errors.install(app)
    conditional.install(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes, streamed=("/imports",))
    # outside the limits, inside the metrics (which then count a 500 it answers): each request's id, the access log
    app.add_middleware(RequestIds, access_log=settings.access_log)

    @app.middleware("http")
    async def _measure(request: Request, call_next):
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        endpoint = getattr(route, "path", "unmatched")
        svc = getattr(request.app.state, "service", None)
        if svc is not None:
            svc.metrics.requests.labels(request.method, endpoint, str(response.status_code)).inc()
            svc.metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)
            if response.status_code >= 400:
                svc.metrics.errors.labels(endpoint, str(response.status_code)).inc()
        return response

    if settings.cors_origins:  # outermost: a browser's preflight is answered first, every answer carries the headers
        from starlette.middleware.cors import CORSMiddleware
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=CORS_METHODS,
                           allow_headers=CORS_HEADERS, expose_headers=CORS_EXPOSED, max_age=600)
    # outermost of all: who the client is, for everything inside (the access log, the share, the run queue); as
    # uvicorn's default when no proxy is named
    app.add_middleware(ProxiedClient, client_header=settings.client_header,
                       trusted=settings.forwarded_allow_ips or os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1"))

    def service(request: Request) -> Service:
        return request.app.state.service

    def logged(request: Request, svc: Service = Depends(service),
               feedback: bool = Param(True, description="false: nothing of this request is kept in the feedback log "
                                      "(no search_id, nothing to judge, and never interleaved with a challenger: the "
                                      "served ranker's own order): a user who opted out of it, a forum's batch job")
               ) -> bool:
        """Whether a ranking request's results are kept in the feedback log: ``CQA_FEEDBACK`` on, and the request's
        one query parameter, ``feedback``, not false (counted by route, ``cqa_feedback_not_kept_total``). What is
        not kept is never interleaved either, since nobody could judge it."""
        if svc.feedback is not None and not feedback:
            svc.metrics.not_kept.labels(getattr(request.scope.get("route"), "path", "unmatched")).inc()
        return svc.feedback is not None and feedback

    async def admitted(request: Request, svc: Service = Depends(service)):
        """A ranking endpoint's request taken, or refused at once past its client's rate (``RateLimiter``), past
        CQA_MAX_IN_FLIGHT, or past its client's share of it (``Admission``)."""
        client, route = client_key(request.scope), getattr(request.scope.get("route"), "path", "unmatched")
        try:
            svc.rate.take(client)
            svc.admission.take(client)
        except Overloaded:
            svc.metrics.refused.labels(route).inc()
            raise
        except (OverShare, RateLimited) as e:
            counted = svc.metrics.over_share if isinstance(e, OverShare) else svc.metrics.rate_limited
            counted.labels(route).inc()
            # answered after a pause that costs no CPU (CQA_OVER_SHARE_DELAY_MS): a client sending again as soon as
            # it is refused would otherwise spend the worker's time on refusals, everyone's time
            await asyncio.sleep(svc.settings.over_share_delay_ms / 1000)
            raise
        svc.metrics.in_flight.inc()
        try:  # taken: given back once, however it ends (answered, failed, or its client gone while it waited)
            t0 = time.perf_counter()
            await svc.queue.enter(client, alone=svc.admission.clients() <= 1)
            waited = time.perf_counter() - t0
            svc.metrics.queued.observe(waited)
            request.scope[QUEUED_MS] = round(1000 * waited, 1)  # the access line's, and /search's timings_ms["queued"]
            try:
                yield
            finally:
                svc.queue.leave(client)
        finally:
            svc.admission.done(client)
            svc.metrics.in_flight.dec()

    def ready_generation(svc: Service):
        gen, pipeline = svc.snapshot()
        if gen is None:
            raise HTTPException(503, detail="no index generation is loaded yet; run `cqa reindex` or POST /reindex")
        return gen, pipeline

    # --- the search page ------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index():
        from pathlib import Path

        from fastapi.responses import FileResponse
        return FileResponse(Path(__file__).with_name("static") / "index.html", media_type="text/html")

    @app.get("/evaluation/{benchmark}/chart.png", summary="The chart of the latest report of a benchmark",
             response_class=Response)
    def evaluation_chart(benchmark: str, svc: Service = Depends(service)):
        from pathlib import Path

        from fastapi.responses import FileResponse

        from ranking.evaluation.runner import latest_reports
        report = latest_reports(svc.settings.reports_dir).get(benchmark)
        chart = Path(report["folder"]) / "chart.png" if report and report.get("folder") else None
        if chart is None or not chart.exists():
            raise HTTPException(404, detail=f"no chart for benchmark {benchmark!r}")
        return FileResponse(chart, media_type="image/png")

    # --- liveness, readiness, metrics -----------------------------------------------------------
    @app.get("/health", response_model=HealthOut, summary="Liveness: the process answers")
    def health():
        return {"status": "ok"}

    @app.get("/ready", response_model=ReadyOut,
             summary="Readiness: store open, index generation and rerankers loaded (503 until then)")
    def ready(svc: Service = Depends(service)):
        gen, _ = ready_generation(svc)
        return {"status": "ready", "generation": gen.name, "sizes": gen.sizes(),
                "dense_encoder": gen.dense.encoder.id if gen.dense is not None else None, "reranker": svc.reranker.name,
                "question_reranker": svc.question_reranker.name, "answers_reranker": svc.answers_reranker.name,
                "arabic_reranker": svc.arabic_reranker.name if svc.arabic_reranker is not None else None,
                "search_rerankers": {t: r.name for t, r in svc.search_rankers.items()}, "worker": svc.holder,
                "search_challengers": {t: r.name for t, r in svc.challengers.items()},
                "comments_challenger": (svc.unbatched_comments_challenger.name
                                        if svc.unbatched_comments_challenger is not None else None),
                "interleave_share": (svc.settings.interleave_share
                                     if svc.challengers or svc.comments_challenger is not None else None),
                "inference": svc.inference, "score_memos": svc.score_memos(),
                "score_store": svc.score_store.stats() if svc.score_store is not None else None,
                "vector_store": svc.vector_store.stats() if svc.vector_store is not None else None,
                "translation": gen.translation_status(),
                "refresh": svc.refresher.report if svc.refresher is not None else None, "warm_up_ms": svc.warm_up_ms,
                "feedback": svc.feedback.stats() if svc.feedback is not None else None,
                "admission": {**svc.admission.stats(), **svc.queue.stats(), **svc.rate.stats()}}

    @app.get("/status", response_model=FolderStatus, dependencies=[Depends(require_admin)],
             summary="What the data folder holds and what needs the operator (admin): `cqa status` from the service")
    def status(check: bool = Param(False, description="also run SQLite's quick_check on the store (reads it whole)"),
               svc: Service = Depends(service)):
        """The store (counts, size, fingerprint, the ledger's erasures and takedowns), the live generation (when
        built, whether it is behind the store), the generations on disk and the processes serving them, builds under
        way, the embedding cache and the backups folder, read without changing anything; and `attention`: what needs
        the operator, each with what to do (empty: nothing). The same as `cqa status --json`."""
        from indexing.status import folder_status
        return folder_status(svc.settings, svc.settings.backups_folder, check=check)

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    def metrics(svc: Service = Depends(service)):
        svc.metrics.store_threads.set(svc.store.counts()["threads"])
        body, media_type = svc.metrics.exposition()
        return Response(body, media_type=media_type)

    # --- search and rerank ----------------------------------------------------------------------
    @app.post("/search", response_model=SearchResponse, dependencies=[Depends(admitted)],
              summary="Find the best existing answers, questions or threads for a new question")
    async def search(body: SearchIn, request: Request, svc: Service = Depends(service),
                     keep: bool = Depends(logged)) -> SearchResponse:
        enforce_text_limit(svc.settings.max_text_chars, body.question.fields())
        return await searched(svc, body.request(), request=request, keep=keep)

    @app.get("/tags", response_model=TagsOut, response_model_exclude_none=True, summary="The tags the forum's "
             "threads carry, with how many threads carry each (what a search within tags can ask for)")
    async def tags(prefix: str = Param("", max_length=MAX_TAG_CHARS, description="only tags that begin with this "
                                       "(case and spacing ignored): a search box's suggestions as a user types"),
                   limit: int = Param(50, ge=1, le=1000), svc: Service = Depends(service)) -> TagsOut:
        """The live generation's tags (each thread's meta.tags), counted once per generation; and the tag synonyms
        that begin with the prefix, with the tag each stands for (a search within either finds both)."""
        gen, pipeline = ready_generation(svc)
        listed, matching = await run_in_threadpool(pipeline.retriever.tags_beginning, prefix, limit)
        key, known = tag_key(prefix), await run_in_threadpool(svc.tag_synonyms)
        synonyms = [TagSynonymOut(source=s, target=t) for s, t in known.targets.items() if key and s.startswith(key)]
        return TagsOut(generation=gen.name, tags=[TagOut(**c) for c in tag_rows(pipeline.retriever, listed, known)],
                       matching=matching, synonyms=sorted(synonyms, key=lambda x: x.source)[:limit])

    @app.get("/tags/synonyms", response_model=TagSynonymsOut, summary="The forum's tag synonyms (js for javascript)")
    async def tag_synonyms(svc: Service = Depends(service)):
        synonyms = await run_in_threadpool(svc.store.tag_synonyms)
        return {"synonyms": [{"source": s, "target": t} for s, t in synonyms.items()]}

    @app.put("/tags/synonyms/{source}", response_model=TagSynonymOut, dependencies=[Depends(require_admin)],
             summary="Make a tag a synonym of another (admin): a search within either finds threads carrying any")
    async def put_tag_synonym(body: TagSynonymIn, source: str = PathParam(..., min_length=1, max_length=MAX_TAG_CHARS,
                                                                          pattern=r"\S"),
                              svc: Service = Depends(service)):
        """From now on a tag filter on ``source`` or on the body's ``target`` takes the threads that carry either
        (and the target's other synonyms), in every search and at once: no thread is written again and no index is
        rebuilt. StackExchange's tag synonyms, for a forum that merged two tags. 409 where the target is itself a
        synonym or the source has synonyms; 422 for a tag made a synonym of itself."""
        from indexing.store import TagSynonymConflict
        try:
            await run_in_threadpool(svc.store.set_tag_synonym, source, body.target)
        except ValueError as e:
            raise HTTPException(422, detail=str(e)) from None
        except TagSynonymConflict as e:
            raise HTTPException(409, detail=str(e)) from None
        return {"source": tag_key(source), "target": tag_key(body.target)}

    @app.delete("/tags/synonyms/{source}", response_model=TagSynonymOut, dependencies=[Depends(require_admin)],
                summary="A synonym a tag of its own again (admin)")
    async def delete_tag_synonym(source: str, svc: Service = Depends(service)):
        if (target := await run_in_threadpool(svc.store.delete_tag_synonym, source)) is None:
            raise HTTPException(404, detail=f"{source!r} is no tag synonym (GET /tags/synonyms)")
        return {"source": tag_key(source), "target": target}

    @app.get("/threads/{thread_id}/similar", response_model=SearchResponse, dependencies=[Depends(admitted)],
             summary="What is most similar to a stored thread, the thread itself left out (a thread page's related "
                     "questions)")
    async def similar(thread_id: str, request: Request, keep: bool = Depends(logged),
                      k: int = Param(10, ge=1, le=MAX_RESULTS),
                      offset: int = Param(0, ge=0, le=MAX_RESULTS - 1, description="a later page (next_offset); "
                                          "a search ranks MAX_RESULTS results, so a page ends there"),
                      target: Literal["questions", "threads", "answers"] = "questions", rerank: bool = True,
                      category: str | None = Param(None, description="only threads of this category"),
                      tag: list[str] = Param([], description="only threads that carry this tag (meta.tags; case "
                                             "and spacing ignored); repeat it for threads that carry every one"),
                      not_tag: list[str] = Param([], description="no thread that carries this tag; repeat for more"),
                      any_tag: list[str] = Param([], description="only threads that carry at least one of the tags "
                                                 "given so; repeat it for each alternative"),
                      tag_group: list[str] = Param([], description="alternatives joined by |: only threads that "
                                                   "carry one of them at least; repeat it for more groups, each to be "
                                                   "met (tag_group=a|b&tag_group=c|d: (a or b) and (c or d))"),
                      svc: Service = Depends(service)) -> SearchResponse:
        """POST /search with the thread's own question (subject and body), leaving out the thread itself: neither
        its question nor its comments come back, while a near-copy of it posted as another thread does. ``category``,
        ``tag``, ``not_tag``, ``any_tag`` and ``tag_group`` narrow it as POST /search's filters do."""
        from ranking.pipeline import SearchRequest
        named = {"tags": "tag", "exclude_tags": "not_tag", "any_tags": "any_tag",  # the fields as the query names them
                 "tag_groups": "tag_group"}
        try:
            groups = [list(alternatives(g)) for g in tag_group]
            filters = (FiltersIn(category=category, tags=tag, exclude_tags=not_tag, any_tags=any_tag,
                                 tag_groups=groups).to_filters()
                       if category or tag or not_tag or any_tag or tag_group else None)
        except ValidationError as e:
            raise RequestValidationError([{**err, "loc": (named.get(err["loc"][0], err["loc"][0]), *err["loc"][1:])}
                                          for err in e.errors()]) from None
        t = await run_in_threadpool(svc.store.get, thread_id)
        if t is None:
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}")
        return await searched(svc, SearchRequest.like_thread(t, filters, k=k, offset=offset, target=target,
                                                             rerank=rerank), "/threads/{id}/similar", request,
                              like_thread=t.id, keep=keep)

    async def routed(svc: Service, endpoint: str, q, gen, ranker, batcher, thread_question: bool = False):
        """(the ranker that ran, its scores of ``q``): input whose letters are mostly Arabic script goes to
        $CQA_ARABIC_RANKER, with the forum's statistics from ``gen`` (and with ``thread_question``, each comment read
        after its thread's question); the rest to ``ranker`` through its micro-batcher. /metrics counts which ran
        (``cqa_ranked_total``)."""
        from ranking.arabic import routed as routed_to
        chosen, read = routed_to(q, ranker, svc.arabic_reranker, gen, thread_question)
        if read is not q:  # routed to the Arabic ranker
            ranker, scores = chosen, (await run_in_threadpool(chosen.score, [read]))[0]
        else:
            scores = await batcher.score(q)
        svc.metrics.ranked.labels(endpoint, ranker.name).inc()
        return ranker, scores

    async def searched(svc: Service, req, endpoint: str = "/search", request: Request | None = None,
                       like_thread: str | None = None, *, keep: bool) -> SearchResponse:
        """The live generation's pipeline on ``req``, its stage timings into /metrics; with ``request``, the time it
        waited for a run slot (CQA_RUN_SLOTS) too, as ``queued``. ``like_thread``: the stored thread ``req`` asks
        like, which the feedback log keeps by its id (``SearchRequest.to_json``); ``keep``: whether the log keeps
        what it showed (``logged``)."""
        _, pipeline = ready_generation(svc)

        def search():  # a tag stands for its synonyms' family (read from the store, off the event loop)
            out = pipeline.search(req.with_synonyms(svc.tag_synonyms), interleave=keep)
            if out.interleaved_with is not None:
                svc.metrics.interleaved.labels(endpoint, out.interleaved_with).inc()
            if keep and out.results:  # what it showed, under the id its users judge it by
                kept = req.to_json(like_thread) if svc.settings.feedback_queries else None
                out.search_id = svc.feedback.record(served_of(out, endpoint, kept))
                if out.search_id is None:
                    svc.metrics.feedback_unrecorded.labels("search").inc()
            return out
        out = await run_in_threadpool(search)
        for stage, ms in out.timings_ms.items():
            svc.metrics.stage.labels(stage).observe(ms / 1000)
        if request is not None and (queued := request.scope.get(QUEUED_MS)) is not None:
            out.timings_ms["queued"] = queued
        if waits := batch_waits.get():  # of the rerank stage's time, the wait for its batch's model call to begin
            out.timings_ms["batch_wait"] = round(1000 * sum(waits), 3)
        svc.metrics.ranked.labels(endpoint, out.reranker or "none").inc()
        return out

    @app.post("/rerank", response_model=RerankOut, dependencies=[Depends(admitted)],
              summary="Score and sort given candidates, e.g. a thread's comments")
    async def rerank(body: RerankIn, svc: Service = Depends(service), keep: bool = Depends(logged)):
        enforce_count_limit("candidates", len(body.candidates), svc.settings.max_candidates, "CQA_MAX_CANDIDATES")
        enforce_text_limit(svc.settings.max_text_chars, body.question.fields() +
                           [(f"candidates.{i}.text", c.text) for i, c in enumerate(body.candidates)])
        return await reranked(body, svc, "/rerank", keep=keep)

    async def reranked(body: RerankIn, svc: Service, endpoint: str, thread_id: str | None = None,
                       *, keep: bool) -> dict:
        """POST /rerank's answer to ``body``, within whatever limits its caller set; where the feedback log is on,
        the order shown kept under the ``search_id`` its readers judge it by (``kept_order``: as ``endpoint``
        served it, its request the stored thread ``thread_id`` where one is given)."""
        from ranking.combination import regime_of
        t0 = time.perf_counter()
        gen = svc.generation
        q = rerank_query(body, gen)
        ranker, scores = await routed(svc, "/rerank", q, gen, svc.reranker, svc.rerank_batcher)
        out = {**sorted_by_score(body.candidates, scores, ranker, t0, svc.metrics.stage.labels("rerank")),
               "metadata": regime_of(q)}
        teams: list[str] = []
        challenger = svc.comments_challenger
        if (challenger is not None and keep and ranker is svc.reranker
                and len(body.candidates) > 1 and drawn(q.text, COMMENTS, svc.settings.interleave_share)):
            # only an order kept in the feedback log, whose readers can judge it; never the Arabic ranker's
            t1 = time.perf_counter()
            try:
                theirs = await challenger.score(q)
            except Exception:  # an experiment's failure costs the experiment, not the thread's order
                log.warning("challenger %s failed: this order is the default ranker's alone", challenger.ranker.name,
                            exc_info=True)
            else:
                merged, teams = with_challenger([r["id"] for r in out["results"]], [c.id for c in body.candidates],
                                                theirs, seed(q.text, COMMENTS))
                # the merged order; each comment with the default ranker's score, its team kept for the log only
                out["results"] = [{**out["results"][i], "rank": rank} for rank, i in enumerate(merged, 1)]
                out["interleaved_with"] = challenger.ranker.name
                svc.metrics.interleaved.labels(endpoint, challenger.ranker.name).inc()
                out["timings_ms"]["interleave"] = round(1000 * (time.perf_counter() - t1), 3)
        out["search_id"] = await kept_order(svc, out, [c.id for c in body.candidates], gen, endpoint, thread_id,
                                            teams, keep=keep)
        return out

    async def kept_order(svc: Service, out: dict, given: list[str], gen, endpoint: str,
                         thread_id: str | None = None, teams: Sequence[str] = (), *, keep: bool) -> str | None:
        """The order a ranking of given candidates showed (``out``, the answer) kept in the feedback log beside the
        order ``given`` (``served_order``), with each result's team where it was interleaved; its ``search_id``,
        None where the log is off or failed, the request asked for it not to be kept (``keep``, ``logged``), or
        nothing was shown."""
        if not keep or not out["results"]:
            return None
        shown = served_order([r["id"] for r in out["results"]], given, out["reranker"],
                             gen.name if gen is not None else None, endpoint, thread_id,
                             out.get("interleaved_with"), teams)
        search_id = await run_in_threadpool(svc.feedback.record, shown)
        if search_id is None:
            svc.metrics.feedback_unrecorded.labels("search").inc()
        return search_id

    @app.post("/rerank/questions", response_model=RerankQuestionsOut, dependencies=[Depends(admitted)],
              summary="Score and sort given questions by how similar each is to a new one (subtask B)")
    async def rerank_questions(body: RerankQuestionsIn, svc: Service = Depends(service),
                               keep: bool = Depends(logged)):
        from ranking.rankers import reads_comments
        enforce_count_limit("candidates", len(body.candidates), svc.settings.max_candidates, "CQA_MAX_CANDIDATES")
        enforce_count_limit("comments", sum(len(c.comments) for c in body.candidates), svc.settings.max_candidates,
                            "CQA_MAX_CANDIDATES")
        enforce_text_limit(svc.settings.max_text_chars, body.question.fields() +
                           [f for i, c in enumerate(body.candidates) for f in c.fields(f"candidates.{i}")])
        t0 = time.perf_counter()
        gen, pipeline = svc.snapshot()
        q = questions_query(body, gen, pipeline)
        ranker, scores = await routed(svc, "/rerank/questions", q, gen, svc.question_reranker, svc.question_batcher)
        out = {**sorted_by_score(body.candidates, scores, ranker, t0, svc.metrics.stage.labels("rerank_questions")),
               "search_order": body.search_order and ranker is svc.question_reranker,
               "comments_read": reads_comments(ranker, q)}
        out["search_id"] = await kept_order(svc, out, [c.id for c in body.candidates], gen, "/rerank/questions",
                                            keep=keep)
        return out

    @app.post("/rerank/answers", response_model=RerankAnswersOut, dependencies=[Depends(admitted)],
              summary="Score and sort the comments of given threads by how well each answers a new question "
                      "(subtask C)")
    async def rerank_answers(body: RerankAnswersIn, svc: Service = Depends(service), keep: bool = Depends(logged)):
        comments = body.comments()
        enforce_count_limit("comments", len(comments), svc.settings.max_candidates, "CQA_MAX_CANDIDATES")
        enforce_text_limit(svc.settings.max_text_chars, body.question.fields() +
                           [f for i, t in enumerate(body.threads) for f in t.fields(f"threads.{i}")])
        t0 = time.perf_counter()
        gen = svc.generation
        q = answers_query(body, gen)
        ranker, scores = await routed(svc, "/rerank/answers", q, gen, svc.answers_reranker, svc.answers_batcher,
                                       thread_question=True)
        out = sorted_by_score([c for _, c in comments], scores, ranker, t0, svc.metrics.stage.labels("rerank_answers"))
        out["search_order"] = body.search_order and ranker is svc.answers_reranker
        thread_of = {c.id: tid for tid, c in comments}
        for r in out["results"]:
            r["thread_id"] = thread_of[r["id"]]
        out["search_id"] = await kept_order(svc, out, [c.id for _, c in comments], gen, "/rerank/answers",
                                            keep=keep)
        return out

    # --- threads --------------------------------------------------------------------------------
    @app.post("/threads", response_model=ThreadsOut, summary="Batch upsert threads (admin); durable before the response",
              dependencies=[Depends(require_admin)])
    async def post_threads(body: ThreadsIn, svc: Service = Depends(service)):
        enforce_count_limit("threads", len(body.threads), svc.settings.max_threads_per_request,
                            "CQA_MAX_THREADS_PER_REQUEST")
        enforce_text_limit(svc.settings.max_text_chars, (
            (path, text) for i, t in enumerate(body.threads)
            for path, text in [(f"threads.{i}.subject", t.subject), (f"threads.{i}.body", t.body)]
            + [(f"threads.{i}.answers.{j}.text", a.text) for j, a in enumerate(t.answers)]))
        ids = [t.id for t in body.threads]
        if len(set(ids)) != len(ids):
            raise HTTPException(422, detail="a thread id appears twice in this request")
        if svc.settings.encode_ahead_texts:  # not the snapshots the store holds a later revision of
            stale = await run_in_threadpool(svc.store.superseded, body.threads)
            fresh = [t for t in body.threads if t.id not in stale]
            if fresh:
                await run_in_threadpool(encode_before_write, svc, fresh)
        try:
            r = await run_in_threadpool(svc.store.upsert, body.threads)
        except StoreError as e:
            raise HTTPException(409, detail=str(e)) from None
        if r.inserted or r.updated:
            svc.nudge()
        return {"accepted": len(ids), "inserted": r.inserted, "updated": r.updated, "unchanged": r.unchanged,
                "superseded": r.superseded, "suppressed": r.suppressed, "answers_suppressed": r.answers_suppressed,
                "posts_anonymized": r.posts_anonymized, "taken_down": r.taken_down,
                "answers_taken_down": r.answers_taken_down, "note": change_note(svc.settings, "accepted and durable")}

    @app.post("/threads/{thread_id}/answers", response_model=AnswersOut, dependencies=[Depends(require_admin)],
              summary="Add or replace comments of a stored thread (admin); durable before the response")
    async def post_answers(thread_id: str, body: AnswersIn, response: Response, svc: Service = Depends(service),
                           if_match: str | None = Header(None, description=IF_MATCH)):
        """What a forum sends when a user posts or edits a comment: the comment alone, not the whole thread. A new
        comment goes after the thread's others (at its place in time where it and they carry ISO 8601 times); one
        whose id the thread holds is replaced in place. The thread is read and written in one transaction, so
        comments added to one thread at once by several requests, workers or processes are all kept (two
        whole-thread POST /threads sent out of order would keep only the later one's, unless each carries its
        revision)."""
        enforce_count_limit("answers", len(body.answers), svc.settings.max_candidates, "CQA_MAX_CANDIDATES")
        enforce_text_limit(svc.settings.max_text_chars,
                           ((f"answers.{j}.text", a.text) for j, a in enumerate(body.answers)))
        tags = conditional.etags(if_match)
        tagged = await run_in_threadpool(svc.store.get_tagged, thread_id)
        if tagged is None:
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}; POST /threads stores a new one")
        stored = conditional.met(thread_id, tagged, tags)  # a stale If-Match encodes nothing ahead
        if svc.settings.encode_ahead_texts:  # these comments only: the thread's question is indexed already
            await run_in_threadpool(encode_before_write, svc, [stored.model_copy(update={"answers": body.answers})])
        try:
            r = await run_in_threadpool(svc.store.upsert_answers, thread_id, body.answers, tags)
        except NotInStore as e:  # deleted since it was read
            raise HTTPException(404, detail=str(e)) from None
        except StoreError as e:
            raise HTTPException(409, detail=str(e)) from None
        if r.inserted or r.updated:
            svc.nudge()
        response.headers["ETag"] = conditional.quoted(r.etag)
        return {"thread_id": thread_id, "inserted": r.inserted, "updated": r.updated, "unchanged": r.unchanged,
                "answers": r.answers, "answers_suppressed": r.answers_suppressed, "posts_anonymized": r.posts_anonymized,
                "answers_taken_down": r.answers_taken_down, "note": change_note(svc.settings, "accepted and durable")}

    @app.patch("/threads/{thread_id}", response_model=EditedOut, dependencies=[Depends(require_admin)],
               summary="Edit a stored thread's question, its comments kept (admin); durable before the response")
    async def patch_thread(thread_id: str, body: QuestionEditIn, response: Response, svc: Service = Depends(service),
                           if_match: str | None = Header(None, description=IF_MATCH)):
        """What a forum sends when its user edits the question: the fields that changed, not the comments, so an edit
        never drops a comment another request added meanwhile (the thread is read and written in one transaction)."""
        fields, tags = body.fields(), conditional.etags(if_match)
        enforce_text_limit(svc.settings.max_text_chars,
                           ((name, fields[name]) for name in ("subject", "body") if name in fields))
        if svc.settings.encode_ahead_texts and {"subject", "body"} & set(fields):  # the question's new text only
            tagged = await run_in_threadpool(svc.store.get_tagged, thread_id)
            stored = tagged and conditional.met(thread_id, tagged, tags)  # a stale If-Match encodes nothing ahead
            text = stored and {"subject": stored.subject, "body": stored.body, **fields}
            if text and not (blank(text["subject"]) and blank(text["body"])):
                await run_in_threadpool(encode_before_write, svc, [
                    stored.model_copy(update={"subject": text["subject"], "body": text["body"], "answers": []})])
        try:
            edited = await run_in_threadpool(svc.store.update_question, thread_id, fields, tags)
        except NotInStore as e:
            raise HTTPException(404, detail=str(e)) from None
        except ValidationError as e:  # the thread it would make is not one: no subject and no body
            raise RequestValidationError(e.errors()) from None
        except StoreError as e:  # a new asker erased with their posts removed
            raise HTTPException(409, detail=str(e)) from None
        if edited.changed:
            svc.nudge()
        response.headers["ETag"] = conditional.quoted(edited.etag)
        return {"thread_id": thread_id, "changed": edited.changed,
                "note": change_note(svc.settings, "accepted and durable" if edited.changed else "nothing changed")}

    @app.delete("/threads/{thread_id}/answers/{answer_id}", response_model=DeletedOut,
                dependencies=[Depends(require_admin)], summary="Delete one comment of a thread (admin)")
    def delete_answer(thread_id: str, answer_id: str, response: Response, svc: Service = Depends(service),
                      if_match: str | None = Header(None, description=IF_MATCH),
                      purge: bool = Param(False, description=PURGE)):
        def remove() -> Erased:
            if purge:
                from indexing.erasure import take_down
                erased, etag = take_down(svc.store, thread_id, answer_id, conditional.etags(if_match))
            else:  # nothing more to read or write
                etag = svc.store.delete_answer(thread_id, answer_id, conditional.etags(if_match)).etag
                erased = Erased(threads_changed=[thread_id], answers_removed=1)
            response.headers["ETag"] = conditional.quoted(etag)
            return erased
        try:
            if purge:
                _, at_once, job = purged(svc, remove, svc.settings.erase_backups)
                return {"deleted": answer_id, "job": job.__dict__, "feedback_requests": at_once["feedback_requests"],
                        "feedback_searches": at_once["feedback_searches"], "note": PURGED_NOTE}
            remove()
        except NotInStore as e:
            raise HTTPException(404, detail=str(e)) from None
        svc.nudge()
        return {"deleted": answer_id, "note": removal_note(svc.settings)}

    @app.get("/threads/{thread_id}/answers", response_model=RerankOut, dependencies=[Depends(admitted)],
             summary="A stored thread's comments, most useful first: POST /rerank of the thread as the store holds it")
    async def ranked_answers(thread_id: str, svc: Service = Depends(service), keep: bool = Depends(logged)):
        """What a thread page asks to show its useful comments first, by the thread's id alone: the stored thread
        goes through POST /rerank's own code (the default ranker, $CQA_DEFAULT_RANKER) as a forum would send it (its
        subject and body, the asker, each comment's id, text, author and time, in the thread's order), so it ranks
        exactly as that request does. GET /threads/{id} lists them in the thread's order. Where the feedback log is
        on, the order shown is kept under ``search_id``: a reader's POST /feedback of a comment judges it, and GET
        /evaluation/feedback reports the MAP of the comments' order beside the thread's own (target comments)."""
        t = await run_in_threadpool(svc.store.get, thread_id)
        if t is None:
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}")
        if not t.answers:
            return {"results": [], "reranker": svc.reranker.name, "metadata": "none", "timings_ms": {"rerank": 0.0}}
        if len(t.answers) > svc.settings.max_thread_comments:
            raise HTTPException(422, detail=f"thread {thread_id!r} has {len(t.answers)} comments, more than "
                                f"CQA_MAX_THREAD_COMMENTS ({svc.settings.max_thread_comments}) ranks at once; POST "
                                "/rerank the ones to show")
        try:
            body = RerankIn.model_validate({
                "question": {"subject": t.subject, "body": t.body}, "asker_id": t.author_id, "thread_order": True,
                "candidates": [{"id": a.id, "text": a.text, "author_id": a.author_id, "created_at": a.created_at}
                               for a in t.answers]})
        except ValidationError as e:
            first = errors.field_errors(e.errors())[0]
            raise HTTPException(422, detail=f"thread {thread_id!r} cannot be ranked as stored: {first['field']}: "
                                f"{first['message']}") from None
        # the store's texts: what POST /threads or `cqa ingest` accepted; the order shown kept by the thread's id
        return await reranked(body, svc, COMMENTS_ENDPOINT, t.id if svc.settings.feedback_queries else None,
                              keep=keep)

    @app.get("/threads", response_model=ThreadListOut, summary="The stored threads in id order, a page at a time")
    def list_threads(after: str | None = Param(None, max_length=200, description="the last id of the page before "
                                               "(its `next`); none: from the first"),
                     limit: int = Param(100, ge=1, le=1000), svc: Service = Depends(service)):
        """Each thread's id, revision, ETag, subject and number of comments, without its texts: what a forum's sync
        job walks beside its own threads in id order, to send again what the service lacks or holds at an older
        revision (or another ETag) and to delete what the forum deleted."""
        rows = svc.store.listing(after, limit)
        return {"threads": [asdict(r) for r in rows], "next": rows[-1].id if len(rows) == limit else None}

    @app.get("/threads/{thread_id}", summary="One thread with its answers, and its ETag")
    def get_thread(thread_id: str, response: Response, svc: Service = Depends(service),
                   if_none_match: str | None = Header(None, description="the ETag read before: 304 while the thread "
                                                      "is still as it says")):
        """The thread as stored, in its order, with its revision where one was sent. The ``ETag`` header is what
        ``If-Match`` on the single-thread writes checks: a moderation tool that reads, edits and writes back sends
        it, and gets a 412 (nothing written) when another write came in between."""
        tagged = svc.store.get_tagged(thread_id)
        if tagged is None:
            down = [t for t in svc.store.takedowns(thread_id, limit=1) if t.answer_id is None]
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}" + (
                f"; it was taken down ({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(down[0].at))}), and what "
                f"the forum sends of it is left out until DELETE /takedowns/{thread_id} lifts that" if down else ""))
        t, etag = tagged
        tags = conditional.etags(if_none_match, weak=True)
        if tags is not None and etag_matches(etag, tags):
            return Response(status_code=304, headers={"ETag": conditional.quoted(etag)})
        response.headers["ETag"] = conditional.quoted(etag)
        return t.model_dump()

    @app.delete("/threads/{thread_id}", response_model=DeletedOut, summary="Delete a thread (admin)", dependencies=[Depends(require_admin)])
    def delete_thread(thread_id: str, svc: Service = Depends(service),
                      if_match: str | None = Header(None, description=IF_MATCH),
                      purge: bool = Param(False, description=PURGE)):
        def remove() -> Erased | None:
            if purge:
                from indexing.erasure import take_down
                done = take_down(svc.store, thread_id, if_match=conditional.etags(if_match))
                return done and done[0]
            gone = svc.store.delete(thread_id, conditional.etags(if_match))  # nothing more to read or write
            return gone and Erased(threads_deleted=[thread_id])
        if purge:
            erased, at_once, job = purged(svc, remove, svc.settings.erase_backups)
            if erased is None:
                raise HTTPException(404, detail=f"no thread with id {thread_id!r}")
            return {"deleted": thread_id, "job": job.__dict__, "feedback_requests": at_once["feedback_requests"],
                    "feedback_searches": at_once["feedback_searches"], "note": PURGED_NOTE}
        if remove() is None:
            raise HTTPException(404, detail=f"no thread with id {thread_id!r}")
        svc.nudge()
        return {"deleted": thread_id, "note": removal_note(svc.settings)}

    # --- jobs -----------------------------------------------------------------------------------
    @app.post("/reindex", status_code=202, response_model=JobSubmitted, summary="Rebuild the indexes as a job (admin)",
              dependencies=[Depends(require_admin)])
    def post_reindex(response: Response, svc: Service = Depends(service)):
        from indexing.reindex import reindex

        def run(progress):
            summary = reindex(svc.settings, progress=False, on_progress=progress)
            svc.follow_current()  # switch atomically; searches in flight finish on the old one
            return summary
        job, started = svc.jobs.submit("reindex", run)
        if not started:
            response.status_code = 409
        return {"job": job.__dict__, "started": started,
                "message": "reindex started" if started else "a reindex is already running"}

    # --- erasure ---------------------------------------------------------------------------------
    def purged(svc: Service, remove: Callable[[], Erased | None],
               backups: str) -> tuple[Erased | None, dict, Job | None]:
        """A removal whose derived data goes too (POST /erasures, a DELETE with ``purge``), under the erasure lock:
        409 (nothing removed) while an erasure job runs; else ``remove()``, the store's write (None: nothing was
        stored), the removed texts' cached vectors and the feedback log's kept requests that carry them deleted, and
        the job that looks at the log again, builds afresh and deletes the rest (``indexing.erasure.forget_derived``,
        rewriting the older backups when ``backups`` says so) submitted. Returns what was removed, what went at once (counts) and the
        job."""
        from indexing.erasure import forget_derived, forget_vectors
        from ranking.evaluation.feedback import KeptRequests, ShownPosts
        from ranking.rankers import memo_files
        with svc.erasing:
            running = svc.jobs.running("erasure")
            if running is not None:
                raise HTTPException(409, detail=f"an erasure is running (GET /jobs/{running.id}): nothing was removed; "
                                    "send this again once it is done")
            erased = remove()
            if erased is None:
                return None, {}, None
            try:  # at once; the job forgets again after its build, which waits for any build already running: one
                # that read the store before the removal may encode them again
                vectors = forget_vectors(svc.settings, erased)
            except (sqlite3.Error, OSError) as e:  # the store's part stands: the job tries again
                log.warning("erasure: the embedding cache's vectors were not forgotten yet (%s); the job retries", e)
                vectors = 0
            kept = KeptRequests(svc.settings.feedback_file)
            try:  # at once too, so a kill -9 after the answer leaves none; the job looks again at those logged since
                # (a search that carried a removed text, in flight as the erasure came) and clears the backups' copies
                requests, kept = kept.forget_now(erased)
            except (sqlite3.Error, OSError) as e:  # the store's part stands: the job tries again
                log.warning("erasure: the feedback log's kept requests were not dropped yet (%s); the job retries", e)
                requests = 0
            shown = ShownPosts(svc.settings.feedback_file)
            try:  # the removed posts' ids in the searches logged, likewise; the job looks again, for a search that
                # read the store before the removal and was logged after it
                searches = shown.forget(erased)
            except (sqlite3.Error, OSError) as e:
                log.warning("erasure: the feedback log's searches still name the removed posts (%s); the job retries",
                            e)
                searches = 0
            if requests or searches:
                svc.forget_reports()  # the next report reads the log as it is now (another worker's within its TTL)

            def run(progress):
                return forget_derived(svc.settings, erased, memo_files=memo_files(svc.settings),
                                      backups=svc.settings.backups_folder, rewrite_backups_too=backups == "rewrite",
                                      on_progress=progress,
                                      on_live=svc.follow_current, wait_s=max(60.0, 5 * svc.settings.generation_poll_s),
                                      holders=[kept, shown])
            job, _ = svc.jobs.submit("erasure", run)
        return erased, {"cache_vectors_deleted": vectors, "feedback_requests": requests,
                        "feedback_searches": searches}, job

    @app.post("/erasures", status_code=202, response_model=ErasureOut, dependencies=[Depends(require_admin)],
              summary="Erase forum users: their posts, or their ids, and what was derived from them (admin)")
    def post_erasure(body: ErasureIn, svc: Service = Depends(service)):
        """A right-to-erasure request (`cqa erase` from the service). Before the response, in one transaction, the
        store removes the users' comments and the threads they asked (`remove`), or their ids (`anonymize`); it
        overwrites what it deleted and empties its write-ahead log, and the embedding cache forgets the removed
        texts. The job then builds a generation from scratch, goes live on it, deletes every older generation once
        no process serves it, (remove) empties the shared score and vector memos, and writes the backups in
        CQA_BACKUP_DIR that began before the erasure again without it (`backups`: rewrite; keep names them). The
        store records the erasure (a keyed hash of each id), so their posts sent again later are left out or
        anonymized in the same way. One erasure at a time: while one runs, 409 and nothing
        is erased. An id that nothing stored carries changes nothing, and the job still runs (a retry after an
        interrupted one)."""
        def erase() -> Erased:
            erased = svc.store.erase_authors(body.author_ids, remove=body.content == "remove",
                                             meta_keys=svc.settings.erase_meta_keys + body.meta_keys)
            if body.vacuum:
                svc.store.vacuum()
            log.info("erasure of %d authors (%s): %s", len(body.author_ids), body.content, erased.summary())
            return erased
        backups = body.backups or svc.settings.erase_backups
        erased, at_once, job = purged(svc, erase, backups)
        return {"job": job.__dict__, "started": True, "erased": {**erased.summary(), **at_once,
                                                                  "vacuumed": body.vacuum, "backups": backups},
                "message": "erased in the store; the job rebuilds the indexes and deletes what was derived"}

    @app.get("/erasures/{author_id}", response_model=ErasureStatusOut, dependencies=[Depends(require_admin)],
             summary="Whether a forum user's erasure is on record, and what it does to their posts (admin)")
    def erasure_status(author_id: str = PathParam(..., min_length=1, max_length=1000),
                       svc: Service = Depends(service)):
        """The store's erasure ledger for one id: what an audit of an erasure request asks, and what any post of
        theirs sent later meets (left out with remove, stored without their id with anonymize). The ledger holds a
        keyed hash of each id, so it cannot list who was erased; it answers for an id one asks about."""
        rule = svc.store.erased([author_id]).get(author_id)
        return {"author_id": author_id, "erased": rule is not None,
                "content": None if rule is None else "remove" if rule.remove else "anonymize",
                "meta_keys": sorted(rule.meta_keys) if rule else []}

    @app.get("/takedowns", response_model=TakedownsOut, dependencies=[Depends(require_admin)],
             summary="The takedowns on record: threads and comments a forum's later sends do not bring back (admin)")
    def list_takedowns(thread_id: str | None = Param(None, min_length=1, max_length=1000,
                                                     description="only this thread's (itself and its comments)"),
                       after: str | None = Param(None, max_length=2001, description="the `next` of the page before"),
                       limit: int = Param(100, ge=1, le=1000), svc: Service = Depends(service)):
        """Every thread or comment deleted with ``purge`` (a takedown), by thread id, a thread's own before its
        comments'. The store keeps each on record in its ledger, so a forum that still holds the content and sends it
        again (POST /threads, POST /threads/{id}/answers, `cqa ingest` of an old export) does not bring it back: the
        write leaves it out and counts it (``taken_down``, ``answers_taken_down``). DELETE /takedowns/{thread_id}
        lifts one."""
        try:
            cursor = None if after is None else json.loads(after)
            if after is not None and not (isinstance(cursor, list) and len(cursor) == 2
                                           and all(isinstance(c, str) for c in cursor)):
                raise ValueError
        except (ValueError, RecursionError):  # RecursionError: nested too deep for the parser
            raise HTTPException(422, detail="after: not the `next` of a page of GET /takedowns") from None
        rows = svc.store.takedowns(thread_id, cursor and tuple(cursor), limit)
        last = rows[-1] if len(rows) == limit else None
        return {"takedowns": [r.__dict__ for r in rows],
                "next": None if last is None else json.dumps([last.thread_id, last.answer_id or ""])}

    @app.delete("/takedowns/{thread_id}", response_model=LiftedOut, dependencies=[Depends(require_admin)],
                summary="Lift a takedown, so the thread or comment may be sent again (admin)")
    def lift_takedown(thread_id: str = PathParam(..., min_length=1, max_length=1000),
                      answer_id: str | None = Param(None, min_length=1, max_length=1000,
                                                    description="a comment's takedown; none: the thread's own"),
                      svc: Service = Depends(service)):
        """The takedown comes off the record: what the forum sends of it later is stored again. Nothing is restored
        here; the forum sends it again. 404 when no such takedown is on record."""
        if not svc.store.lift_takedown(thread_id, answer_id):
            what = f"comment {answer_id!r} of thread {thread_id!r}" if answer_id else f"thread {thread_id!r}"
            raise HTTPException(404, detail=f"no takedown of {what} is on record (GET /takedowns)")
        return {"thread_id": thread_id, "answer_id": answer_id, "lifted": True}

    @app.get("/authors/{author_id}/posts", response_model=PostsOut, dependencies=[Depends(require_admin)],
             summary="Every question and comment one forum user wrote, as stored (admin)")
    def author_posts(author_id: str = PathParam(..., min_length=1, max_length=1000),
                     svc: Service = Depends(service)):
        """What a user's access request gets (`cqa export --author`): their questions, in the order they were
        stored, then their comments by thread and place, each with its thread's id, and nothing of other users' (not
        the comments others wrote under their questions). An id no post carries: no posts, not a 404 (the service
        cannot tell a user who never wrote from one it never heard of)."""
        posts = svc.store.posts_by([author_id])
        return {"author_id": author_id, "questions": sum(p.kind == "question" for p in posts),
                "comments": sum(p.kind == "comment" for p in posts), "posts": [p.as_json() for p in posts]}

    # --- imports ---------------------------------------------------------------------------------
    @app.post("/imports", status_code=202, response_model=ImportOut, dependencies=[Depends(require_admin)],
              summary="Send a thread file to be ingested, as a job (admin)",
              openapi_extra={"requestBody": {"required": True, "description": "the thread file itself", "content": {
                  media: {"schema": {"type": "string", "format": "binary"}}
                  for media in ("application/gzip", "application/x-ndjson", "application/xml",
                                "application/octet-stream")}}})
    async def post_import(request: Request, response: Response,
                          strict: bool = Param(False, description="`cqa ingest --strict`: the first bad record "
                                               "stops the file, nothing of it written"),
                          mirror: bool = Param(False, description="`cqa ingest --mirror`: the file is the whole "
                                               "forum; the stored threads it does not hold are then removed"),
                          max_remove: str | None = Param(None, description="with mirror: the most threads it may "
                                                         "remove, a count (25) or a share (10%, the default)"),
                          svc: Service = Depends(service)):
        """What `cqa ingest FILE` does, for an operator who reaches the service only over HTTP: the body is the file
        itself (JSONL, gzipped or not, as `cqa export` writes it; a StackExchange dump's Posts.xml; any content
        type), written to the data folder as it comes (never held in memory; at most $CQA_MAX_IMPORT_BYTES, else
        413) and kept until its ingest is done, so a service killed meanwhile ingests it at its next start. The job
        runs `cqa ingest` on it in a child process at the refresh's CPU priority, its texts encoded ahead, and its
        result is the command's summary (GET /jobs/{id}); the automatic refresh then makes the threads searchable.
        `strict`, `mirror` and `max_remove` are the command's flags. One import at a time per data folder: 409 while
        one runs."""
        from indexing.imports import ImportLock, ImportOptions, Upload, UploadError, imports_folder
        from indexing.ingest import RemovalLimit

        from .imports import run_imports
        if max_remove is not None:
            if not mirror:
                raise HTTPException(422, detail="max_remove limits mirror: send mirror=true with it")
            try:
                RemovalLimit.parse(max_remove)
            except ValueError as e:
                raise HTTPException(422, detail=f"max_remove: {e}") from None
        try:
            lock = ImportLock(imports_folder(svc.settings.data_dir))
        except OSError as e:
            raise HTTPException(507, detail=f"cannot write in {imports_folder(svc.settings.data_dir)}: {e}") from None
        if not lock.held:
            running = svc.jobs.running("import")
            raise HTTPException(409, detail="an import is running" + (f" (job {running.id}, GET /jobs/{running.id})"
                                                                       if running else " (another worker's)")
                                + "; send this file again once it has finished")
        upload = None
        try:
            upload = Upload(imports_folder(svc.settings.data_dir), svc.settings.max_import_bytes)
            held = bytearray()  # the body's chunks (64 KiB or less) written a MiB at a time, off the event loop
            async for chunk in request.stream():
                held += chunk
                if len(held) >= UPLOAD_WRITE_BYTES:
                    await run_in_threadpool(upload.write, bytes(held))
                    held.clear()
            if held:
                await run_in_threadpool(upload.write, bytes(held))
            path = await run_in_threadpool(upload.finish, ImportOptions(strict=strict, mirror=mirror,
                                                                      max_remove=max_remove))  # flushed
        except UploadError as e:
            upload.abort()
            lock.release()
            raise HTTPException(e.status, detail=e.message) from None
        except OSError as e:  # the data folder's disk full, most likely: nothing was acknowledged, nothing is kept
            if upload is not None:
                upload.abort()
            lock.release()
            raise HTTPException(507, detail=f"cannot write the upload in {imports_folder(svc.settings.data_dir)}: "
                                f"{e}; make room there, or ingest the file with `cqa ingest`") from None
        except BaseException:  # the client went away mid-way: nothing was acknowledged, nothing is kept
            if upload is not None:
                upload.abort()
            lock.release()
            raise
        job, started = svc.jobs.submit("import", partial(run_imports, svc.settings, lock))
        if not started:  # this worker runs one already (it cannot: the lock was free); the next start ingests it
            lock.release()
            response.status_code = 409
        return {"job": job.__dict__, "started": started, "upload": path.name, "bytes": upload.size,
                "message": "ingesting" if started else "an import is running; this file is kept and ingested at the "
                "next start"}

    # --- backups ---------------------------------------------------------------------------------
    @app.post("/backups", status_code=202, response_model=JobSubmitted, dependencies=[Depends(require_admin)],
              summary="Copy the store (or export every thread) into the backups folder, as a job (admin)")
    def post_backup(response: Response, body: BackupIn | None = None, svc: Service = Depends(service)):
        """What `cqa backup` (kind store) or `cqa export` (kind export) does, from the service: one consistent
        snapshot while writes go on, checked, flushed and named only when complete, in $CQA_BACKUP_DIR. The job's
        result is the command's summary; GET /backups/{name} then downloads the file. One backup job at a time.
        Once it is complete, the older backups of its kind beyond $CQA_BACKUP_KEEP are deleted, and so are the hidden
        half-written files of backups killed mid-way (untouched for 10 minutes); the result names them."""
        from indexing.backup import backup, dated_name, export, tidy
        from ranking.evaluation.feedback import carried_by_backups
        kind = (body or BackupIn()).kind
        folder = svc.settings.backups_folder

        def run(progress):
            dest = folder / dated_name(kind)
            progress(kind, 0.0)
            if kind == "store":
                summary = backup(svc.settings.store_path, dest, beside=carried_by_backups(svc.settings.feedback_file))
            else:
                summary = export(svc.settings.store_path, dest)
            # only once the new one is complete: the older ones beyond CQA_BACKUP_KEEP, and what killed runs left
            return {"name": dest.name, "kind": kind, **summary, **tidy(folder, kind, svc.settings.backup_keep)}
        job, started = svc.jobs.submit("backup", run)
        if not started:
            response.status_code = 409
        return {"job": job.__dict__, "started": started,
                "message": f"{kind} backup started" if started else "a backup is already running"}

    @app.get("/backups", response_model=BackupsOut, dependencies=[Depends(require_admin)],
             summary="The complete backups in the backups folder, newest first (admin)")
    def list_backups(svc: Service = Depends(service)):
        from dataclasses import asdict

        from indexing.backup import backups_in
        folder = svc.settings.backups_folder
        return {"folder": str(folder), "backups": [asdict(f) for f in backups_in(folder)]}

    def backup_or_404(svc: Service, name: str):
        from indexing.backup import backup_path
        path = backup_path(svc.settings.backups_folder, name)
        if path is None:
            raise HTTPException(404, detail=f"no backup named {name!r}; GET /backups lists them")
        return path

    @app.get("/backups/{name}", dependencies=[Depends(require_admin)], response_class=Response,
             summary="Download one backup (admin)")
    def get_backup(name: str, svc: Service = Depends(service)):
        from fastapi.responses import FileResponse

        from indexing.backup import backup_kind
        path = backup_or_404(svc, name)
        media = "application/vnd.sqlite3" if backup_kind(name) == "store" else "application/gzip"
        return FileResponse(path, media_type=media, filename=name)

    @app.delete("/backups/{name}", response_model=DeletedOut, dependencies=[Depends(require_admin)],
                summary="Delete one backup (admin)")
    def delete_backup(name: str, svc: Service = Depends(service)):
        backup_or_404(svc, name).unlink(missing_ok=True)
        return {"deleted": name, "note": f"removed from {svc.settings.backups_folder}"}

    @app.get("/jobs/{job_id}", response_model=JobOut, summary="State and progress of a job")
    def get_job(job_id: str, svc: Service = Depends(service)):
        job = svc.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, detail=f"no job with id {job_id!r}")
        return job.__dict__

    # --- evaluation -----------------------------------------------------------------------------
    @app.get("/evaluation", response_model=EvaluationOut,
             summary="MAP per benchmark: the figures shipped with this release, and the latest run here")
    def evaluation(svc: Service = Depends(service)):
        from ranking.evaluation.runner import latest_reports, shipped_figures
        return {"shipped": shipped_figures(), "benchmarks": latest_reports(svc.settings.reports_dir)}

    @app.get("/evaluation/feedback", response_model=FeedbackReportOut,
             summary="MAP on the forum's own traffic: the served searches its users judged (POST /feedback)")
    async def evaluation_feedback(days: float | None = Param(None, gt=0, le=36_500, description="only the searches "
                                                             "served in the last this many days (default: all kept)"),
                                  svc: Service = Depends(service)):
        """The judged searches' figures per endpoint, target and reranker, with the SemEval-2016 official scorer's
        arithmetic (``ranking.evaluation.feedback``): MAP over the first 10 ranks of the judged results in the order
        shown, its 95% interval, the same with unjudged results counted as not helpful, MRR, the share judged helpful
        at each rank, and the same results in the order the reranker was given them (what it adds, with the paired
        test). The same as `cqa evaluate --feedback`."""
        return await run_in_threadpool(svc.feedback_report, days)

    @app.post("/feedback", response_model=FeedbackOut, status_code=201,
              summary="A user's judgement of a search's results: which helped (the search's search_id)")
    async def feedback(body: FeedbackIn, svc: Service = Depends(service)):
        """Recorded (synced to disk) before the answer; a result judged again replaces its earlier judgement. 404 for
        a search_id the log does not hold (never served, served with CQA_FEEDBACK off, or not judged within
        CQA_FEEDBACK_DAYS and forgotten); 422 for a result the search did not show, nothing recorded; 503 where the
        log's file cannot be written, nothing recorded. A result the search showed that an erasure or a purge removed
        since is left out (``removed``), and the others are recorded."""
        if svc.feedback is None:
            raise HTTPException(404, detail="this service keeps no feedback (CQA_FEEDBACK=false)")
        judgements = [(j.result_id, j.helpful) for j in body.judgements]

        def unstored(ids: list[str]) -> set[str]:  # posts (threads or comments) the store no longer holds
            held = svc.store.held_posts(ids, ids)
            return set(ids) - held.questions.keys() - held.answers.keys()
        try:
            judged = await run_in_threadpool(svc.feedback.judge, body.search_id, judgements, unstored=unstored)
        except UnknownSearch:
            raise HTTPException(404, detail=f"no search {body.search_id} in the feedback log: a search_id is judged "
                                f"within {svc.settings.feedback_days:g} days of its search (CQA_FEEDBACK_DAYS)") from None
        except NotShown as e:
            raise HTTPException(422, detail=str(e)) from None
        except FeedbackUnavailable as e:
            svc.metrics.feedback_unrecorded.labels("judgement").inc()
            raise HTTPException(503, detail=str(e), headers={"Retry-After": "5"}) from None
        svc.forget_reports()  # a report asked for next includes it (another worker's within REPORT_TTL_S)
        for result, helpful in judgements:
            if result not in judged.removed:
                svc.metrics.feedback.labels(str(helpful).lower()).inc()
        return {"search_id": judged.search_id, "recorded": judged.recorded, "judged": judged.judged,
                "removed": list(judged.removed)}

    @app.post("/evaluation", status_code=202, response_model=JobSubmitted, summary="Run an offline evaluation as a job (admin)",
              dependencies=[Depends(require_admin)])
    def post_evaluation(body: EvaluationIn, response: Response, svc: Service = Depends(service)):
        from ranking.evaluation.benchmarks import BENCHMARKS
        from ranking.evaluation.duplicates import BENCHMARK as DUPLICATES
        from ranking.evaluation.duplicates import answers_benchmark
        from ranking.evaluation.forum_answers import BENCHMARKS as FORUM_ANSWERS
        from ranking.evaluation.forum_answers import JudgedBy
        from ranking.evaluation.replay import BENCHMARKS as REPLAYS
        from ranking.presets import PRESETS
        duplicate_answers = {answers_benchmark(j): j for j in JudgedBy}  # the answers searched for a duplicate
        if body.benchmark not in {*BENCHMARKS, DUPLICATES, *duplicate_answers, *FORUM_ANSWERS, *REPLAYS}:
            raise HTTPException(422, detail=f"unknown benchmark {body.benchmark!r}; known: {', '.join(BENCHMARKS)}, "
                                f"{DUPLICATES}, {', '.join(duplicate_answers)}, {', '.join(FORUM_ANSWERS)}, "
                                f"{', '.join(REPLAYS)}")
        if body.ranker and body.ranker.split("[", 1)[0] not in PRESETS:
            raise HTTPException(422, detail=f"unknown ranker {body.ranker!r}; known: {', '.join(sorted(PRESETS))}")
        if body.benchmark in REPLAYS:
            return submitted_replay(body, response, svc, REPLAYS[body.benchmark])
        if body.benchmark == DUPLICATES or body.benchmark in duplicate_answers:
            return submitted_duplicates(body, response, svc, duplicate_answers.get(body.benchmark))
        if body.benchmark in FORUM_ANSWERS:
            return submitted_forum_answers(body, response, svc)

        def run(progress):
            from ranking.evaluation.runner import run_named
            gen, pipeline = svc.snapshot()  # subtask B reads what it stores, as /rerank/questions does
            r = run_named(svc.settings, body.benchmark, body.ranker, gen.name if gen else None, progress=False,
                          indexed=pipeline)
            return {**{k: r[k] for k in ("benchmark", "ranker", "MAP", "MRR", "folder")},
                    "MAP_interval_95": r.get("MAP_interval_95")}  # none for the full corpus's first stage
        job, started = svc.jobs.submit(f"evaluation:{body.benchmark}", run)
        if not started:
            response.status_code = 409
        return {"job": job.__dict__, "started": started}

    def submitted_replay(body, response: Response, svc: Service, target: str) -> dict:
        """``cqa evaluate --feedback --ranker NAME`` as a job: the judged searches of ``target`` whose request the log
        kept (CQA_FEEDBACK_QUERIES) searched again with the ranker named beside the served one
        (``ranking.evaluation.replay``)."""
        from ranking.evaluation.replay import replay
        if not body.ranker:
            raise HTTPException(422, detail=f"{body.benchmark} searches the judged searches again with another "
                                "ranker: name it (ranker)")
        ready_generation(svc)

        def run(progress):
            r = replay(svc.settings, body.ranker, target, progress=False)
            return {k: r[k] for k in ("benchmark", "target", "searches", "without_request", "thread_gone", "given",
                                      "reproduced", "reproducible", "as_shown_MAP", "served", "candidate", "compare",
                                      "folder")}
        job, started = svc.jobs.submit(f"evaluation:{body.benchmark}", run)
        if not started:
            response.status_code = 409
        return {"job": job.__dict__, "started": started}

    def submitted_forum_answers(body, response: Response, svc: Service) -> dict:
        """``cqa evaluate --answers`` as a job: the forum's own threads, their comments sorted by this service's own
        ranker (or the preset named, checked by the caller) and generation as GET /threads/{id}/answers sorts them,
        judged by the forum's acceptance or votes (``ranking.evaluation.forum_answers``)."""
        from ranking.evaluation.forum_answers import BENCHMARKS as FORUM_ANSWERS
        from ranking.evaluation.forum_answers import run_forum_answers
        judged_by = FORUM_ANSWERS[body.benchmark]

        def run(progress):  # the served ranker, or the one named: what the endpoint would serve with it
            served = (svc.generation, svc.reranker, svc.arabic_reranker)
            r = run_forum_answers(svc.settings, judged_by, progress=False, served=served, ranker=body.ranker,
                                  on_progress=progress)
            return {**{k: r[k] for k in ("benchmark", "judged_by", "ranker", "MAP", "MRR", "questions", "comments",
                                         "passed_over", "MAP_interval_95", "folder")},
                    "compare": [{k: c[k] for k in ("run", "figures", "p_randomization")} for c in r["compare"]]}
        job, started = svc.jobs.submit(f"evaluation:{body.benchmark}", run)
        if not started:
            response.status_code = 409
        return {"job": job.__dict__, "started": started}

    def submitted_duplicates(body, response: Response, svc: Service, judged_by=None) -> dict:
        """``cqa evaluate --duplicates`` as a job: the forum's own duplicate links judge its similar-question search
        (or, ``judged_by``, its answer search by the answers of each duplicate's group), asked through this service's
        own pipeline (``ranking.evaluation.duplicates``)."""
        from ranking.evaluation.duplicates import run_duplicates
        if body.ranker:
            raise HTTPException(422, detail=f"{body.benchmark} measures the served search: no ranker")
        gen, pipeline = ready_generation(svc)

        def run(progress):
            r = run_duplicates(svc.settings, progress=False, served=(gen, pipeline), judged_by=judged_by,
                               target="questions" if judged_by is None else "answers", on_progress=progress)
            return {k: r[k] for k in ("benchmark", "target", "judged_by", "ranker", "MAP", "MRR", "P@1", "questions",
                                      "links", "links_to_unstored", "MAP_interval_95", "folder")}
        job, started = svc.jobs.submit(f"evaluation:{body.benchmark}", run)
        if not started:
            response.status_code = 409
        return {"job": job.__dict__, "started": started}

    return app
