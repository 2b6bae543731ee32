import asyncio

from app.batching import MicroBatcher
from ranking.candidates import Candidate, Query


class RecordingRanker:
    name = "recording"

    def __init__(self, fail: bool = False):
        self.batches: list[int] = []
        self.fail = fail

    def score(self, queries):
        self.batches.append(len(queries))
        if self.fail:
            raise RuntimeError("model broke")
        return [[float(len(c.text)) for c in q.candidates] for q in queries]


def q(i: int) -> Query:
    return Query(f"q{i}", "question", (Candidate("a", "x" * i), Candidate("b", "y")))


def test_concurrent_requests_share_one_model_call():
    ranker = RecordingRanker()

    async def main():
        b = MicroBatcher(ranker, max_batch=16, max_wait_ms=50)
        b.start()
        results = await asyncio.gather(*(b.score(q(i)) for i in range(1, 9)))
        await b.stop()
        return results

    results = asyncio.run(main())
    assert results == [[float(i), 1.0] for i in range(1, 9)]  # each request gets its own scores back
    assert ranker.batches == [8]


def test_batch_size_is_bounded_and_errors_reach_every_caller():
    ranker = RecordingRanker()

    async def bounded():
        b = MicroBatcher(ranker, max_batch=3, max_wait_ms=50)
        b.start()
        await asyncio.gather(*(b.score(q(i)) for i in range(1, 8)))
        await b.stop()

    asyncio.run(bounded())
    assert max(ranker.batches) <= 3 and sum(ranker.batches) == 7

    broken = RecordingRanker(fail=True)

    async def failing():
        b = MicroBatcher(broken, max_batch=4, max_wait_ms=20)
        b.start()
        out = await asyncio.gather(*(b.score(q(i)) for i in range(1, 4)), return_exceptions=True)
        broken.fail = False  # the loop survives a failed batch and serves the next one
        after = await asyncio.wait_for(b.score(q(2)), 5)
        await b.stop()
        return out, after

    out, after = asyncio.run(failing())
    assert after == [2.0, 1.0]
    assert all(isinstance(e, RuntimeError) and "model broke" in str(e) for e in out)


def test_a_request_alone_in_the_worker_is_scored_without_waiting_for_others():
    """``in_flight`` (round 59): with nothing else in flight a batch of one starts at once, not after ``max_wait_ms``
    (its wait, reported to the request, far under it); with other requests in flight it waits for them as before and
    they share the call; without ``in_flight`` it always waits."""
    from app.access import batch_waits

    async def one(in_flight, others: int = 0):
        ranker = RecordingRanker()
        b = MicroBatcher(ranker, max_batch=16, max_wait_ms=300, in_flight=in_flight)
        b.start()
        batch_waits.set(waits := [])

        async def late(i):  # the other requests in flight reach the batcher a moment later
            await asyncio.sleep(0.05)
            return await b.score(q(i))
        await asyncio.gather(b.score(q(1)), *(late(i) for i in range(2, 2 + others)))
        await b.stop()
        return waits[0], ranker.batches

    waited, batches = asyncio.run(one(lambda: 1))
    assert waited < 0.1 and batches == [1]
    waited, batches = asyncio.run(one(lambda: 3, others=2))
    assert 0.04 < waited < 0.3 and batches == [3]  # it waited for the two others, which joined its call
    waited, batches = asyncio.run(one(None))
    assert waited >= 0.29 and batches == [1]  # no count of requests in flight: the whole wait, as before
