"""Dynamic micro-batching for the reranker: concurrent requests that arrive within a short wait are
scored in one model call (one encoder batch), off the event loop."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ranking.candidates import Query

from .access import batch_waits
from .errors import ShuttingDown

log = logging.getLogger(__name__)


@dataclass
class _Item:
    query: Query
    future: asyncio.Future
    enqueued: float  # the loop's time when it joined the queue


class MicroBatcher:
    """``in_flight``: how many ranking requests the worker holds now (``Admission.in_flight``). A batch waits up to
    ``max_wait_ms`` for more requests to join only while more are in flight than it holds: a request alone in the
    worker is scored at once, not after a wait nobody can fill (5 ms of a 65 ms search, docs/BENCHMARKS.md "Round
    59"). None: always wait."""

    def __init__(self, ranker, max_batch: int = 16, max_wait_ms: float = 5.0, metrics=None,
                 in_flight: Callable[[], int] | None = None):
        self.ranker, self.max_batch, self.max_wait = ranker, max_batch, max_wait_ms / 1000.0
        self.metrics, self.in_flight = metrics, in_flight
        self._queue: asyncio.Queue[_Item] | None = None
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._loop(), name="rerank-batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def score(self, query: Query) -> list[float]:
        """``query``'s scores, from the model call of the batch it joins. How long it waited for that call to begin
        (the batch gathered, the batch before it scored) is added to the request's ``batch_waits`` (its access line,
        /search's ``timings_ms["batch_wait"]``) and to ``cqa_rerank_batch_wait_seconds``."""
        if self._queue is None:
            raise RuntimeError("the batcher is not started")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        await self._queue.put(_Item(query, fut, loop.time()))
        scores, waited = await fut
        if (waits := batch_waits.get()) is not None:
            waits.append(waited)
        return scores

    async def _loop(self) -> None:
        batch: list[_Item] = []
        try:
            await self._batches(batch)
        except asyncio.CancelledError:  # stopped: the requests waiting for a score are answered, not left hanging
            assert self._queue is not None
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for it in batch:
                if not it.future.done():
                    it.future.set_exception(ShuttingDown())
            raise

    async def _batches(self, batch: list[_Item]) -> None:
        """Forever: the next batch into ``batch`` (cleared first), scored, its requests answered."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch.clear()
            batch.append(await self._queue.get())
            deadline = loop.time() + self.max_wait
            while len(batch) < self.max_batch and (self.in_flight is None or self.in_flight() > len(batch)
                                                   or not self._queue.empty()):
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), timeout))
                except asyncio.TimeoutError:
                    break
            began = loop.time()
            if self.metrics is not None:
                self.metrics.batch_size.observe(len(batch))
                for it in batch:
                    self.metrics.batch_wait.observe(began - it.enqueued)
            try:
                scores = await asyncio.to_thread(self.ranker.score, [it.query for it in batch])
                for it, s in zip(batch, scores):
                    if not it.future.done():
                        it.future.set_result((s, began - it.enqueued))
            except Exception as e:  # the error goes to every waiting request, the loop lives on
                log.exception("reranker batch failed")
                for it in batch:
                    if not it.future.done():
                        it.future.set_exception(e)


class ThreadBatched:
    """A ranker behind a micro-batcher, for code that runs in a worker thread (the search pipeline): each
    query joins the event loop's batches and the thread waits for its scores."""

    def __init__(self, batcher: MicroBatcher, loop: asyncio.AbstractEventLoop):
        self.batcher, self.loop = batcher, loop
        self.name = batcher.ranker.name

    def score(self, queries: list[Query]) -> list[list[float]]:
        futures = [asyncio.run_coroutine_threadsafe(self.batcher.score(q), self.loop) for q in queries]
        return [f.result() for f in futures]
