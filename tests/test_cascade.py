"""The cascade (ranking/cascade.py): the expensive ranker sees only the cheap ranker's head, with what the
whole list told about each candidate, and its order leads the result."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from ranking.candidates import Candidate, Query
from ranking.cascade import Cascade, head_query


@dataclass
class ByMeta:
    """Scores a candidate by one of its metadata fields, and records the queries it was given."""
    key: str
    name: str = "by-meta"
    seen: list = field(default_factory=list)

    def score(self, queries):
        self.seen += queries
        return [[float(c.meta[self.key]) for c in q.candidates] for q in queries]


def query(n: int = 8, seed: int = 0) -> Query:
    rng = np.random.default_rng(seed)
    cheap, good = rng.permutation(n), rng.permutation(n)
    authors = ["u1", "u2", "asker", "u1", "u3", "asker", "u2", "u4"]
    return Query("q", "question", tuple(
        Candidate(f"c{i}", "thanks a lot" if authors[i % 8] == "asker" else f"comment {i}",
                  {"cheap": int(cheap[i]), "good": int(good[i]), "author_id": authors[i % 8], "asker_id": "asker",
                   "thread_id": "t"})
        for i in range(n)), {})


@pytest.mark.parametrize("top", [0, 1, 3, 8, 20])
def test_the_head_is_the_expensive_order_and_the_rest_the_cheap_order(top):
    q = query()
    cheap, expensive = ByMeta("cheap"), ByMeta("good")
    scores = Cascade([cheap, expensive], top).score([q])[0]
    order = sorted(range(8), key=lambda i: -scores[i])
    by_cheap = sorted(range(8), key=lambda i: -q.candidates[i].meta["cheap"])
    head = set(by_cheap[:top])
    assert set(order[: len(head)]) == head
    assert order[: len(head)] == sorted(head, key=lambda i: -q.candidates[i].meta["good"])
    assert order[len(head):] == by_cheap[len(head):]
    # the expensive ranker scored the head only (nothing at all with top 0)
    assert [len(s.candidates) for s in expensive.seen] == ([min(top, 8)] if top else [])


def test_with_the_whole_list_as_head_the_cascade_is_the_expensive_ranker():
    q = query()
    full = ByMeta("good").score([q])[0]
    got = Cascade([ByMeta("cheap"), ByMeta("good")], 8).score([q])[0]
    assert np.argsort(got).tolist() == np.argsort(full).tolist()


def test_the_head_keeps_positions_dialogue_and_order():
    from ranking.combination import in_thread_order
    from ranking.signals import matrix, thread_features
    q = query()
    q = Query(q.id, q.text, q.candidates, {"thread_order": True})
    h = head_query(q, [1, 4, 6])
    assert [c.id for c in h.candidates] == ["c1", "c4", "c6"]
    assert [c.meta["position"] for c in h.candidates] == [2, 5, 7]
    assert in_thread_order(h)
    # the signals of a head candidate are those it had in the whole list
    full = matrix(q, ("position", "author_comments", "asker_next"))
    assert np.allclose(matrix(h, ("position", "author_comments", "asker_next")), full[[1, 4, 6]])
    assert thread_features(h).tolist() == thread_features(q)[[1, 4, 6]].tolist()
    # a list in a foreign order stays one in the head
    assert not in_thread_order(head_query(Query(q.id, q.text, q.candidates, {"thread_order": False}), [0, 1]))


def test_the_cascade_preset_reads_its_depth_from_the_settings(tmp_path):
    from app.settings import Settings
    from ranking.presets import build
    from tests.conftest import SEMEVAL
    s = Settings(data_dir=tmp_path / "var", shared_data_dir=SEMEVAL.parent, cascade_top=3)
    r = build("cascade", s, built={})
    assert r.top == 3 and [p.name for p in r.parts] == ["bilstm+signals", "cross-encoder+signals"]


def test_the_cascade_cuts_its_head_from_the_threads_order_its_times_give():
    """Comments of one thread in another order with their times: the cascade puts them back in the thread's order
    before the cheap ranker, so the head keeps each comment's place in the thread, and the scores come back in the
    order given."""
    q = query()
    timed = tuple(Candidate(c.id, c.text, {**c.meta, "created_at": f"2016-01-{i + 1:02d} 10:00:00"})
                  for i, c in enumerate(q.candidates))
    thread = Query(q.id, q.text, timed, {})
    order = [5, 2, 7, 0, 3, 6, 1, 4]
    given = Query(q.id, q.text, tuple(timed[i] for i in order), {"thread_order": False})
    cheap, expensive = ByMeta("cheap"), ByMeta("good")
    want = dict(zip([c.id for c in timed], Cascade([cheap, expensive], 3).score([thread])[0]))
    got = dict(zip([c.id for c in given.candidates], Cascade([cheap, expensive], 3).score([given])[0]))
    assert got == want
    head = expensive.seen[-1]
    assert [c.meta["position"] for c in head.candidates] == sorted(c.meta["position"] for c in head.candidates)
    assert [int(c.id[1:]) + 1 for c in head.candidates] == [c.meta["position"] for c in head.candidates]
    assert cheap.seen[-1].meta["thread_order"] is True
