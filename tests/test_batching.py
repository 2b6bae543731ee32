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
