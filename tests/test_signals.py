import numpy as np
import pytest

from app.settings import Settings
from ranking.candidates import Candidate, Query
from ranking.presets import build
from ranking.signals import NAMES, features, matrix


def test_signals_with_and_without_metadata():
    q = Query("q", "where to buy a car?", (), {"author_id": "U1"})
    asker = Candidate("a", "Thanks! but what about Toyota?", {"author_id": "U1", "position": 3})
    other = Candidate("b", "Call 5555 1234 or see www.cars.qa, mail me at x@y.com", {"author_id": "U2", "position": 1})
    f = dict(zip(NAMES, features(q, asker, 2)))
    assert f["by_asker"] == 1 and f["asker_unknown"] == 0 and f["thanks"] == 1 and f["question_mark"] == 1
    assert f["position"] == np.log(3)
    g = dict(zip(NAMES, features(q, other, 0)))
    assert g["by_asker"] == 0 and g["has_url"] == 1 and g["has_email"] == 1 and g["has_phone"] == 1
    blind = dict(zip(NAMES, features(Query("q", "x", ()), Candidate("c", "some answer"), 4)))
    assert blind["by_asker"] == 0 and blind["asker_unknown"] == 1 and blind["position"] == np.log(5)
    assert matrix(Query("q", "x", (asker, other), {"author_id": "U1"})).shape == (2, len(NAMES))


def test_learned_combination_ranks_without_metadata():
    comb = build("bilstm+signals", Settings())
    assert comb.info["parts"] == ["bilstm", "bm25", "ir-baseline"] and len(comb.coef) == 3 + len(NAMES)
    q = Query("q", "How can I renew my residence permit?", (
        Candidate("x", "lol"), Candidate("y", "Your company PRO renews the residence permit online with your passport.")))
    s = comb.score([q])[0]
    assert s[1] > s[0]


def test_thread_signals_follow_the_dialogue():
    from ranking.signals import ALL_NAMES, THREAD_NAMES, thread_features
    meta = lambda author, pos: {"author_id": author, "position": pos, "thread_id": "T"}  # noqa: E731
    cands = (Candidate("c1", "Try the souq near the corniche.", meta("U2", 1)),
             Candidate("c2", "Thanks a lot, will do", meta("U1", 2)),
             Candidate("c3", "me too", meta("U3", 3)),
             Candidate("c4", "and bring cash", meta("U2", 4)))
    q = Query("q", "where to buy a cheap bike?", cands, {"author_id": "U1"})
    f = thread_features(q)
    assert f.shape == (4, len(THREAD_NAMES))
    assert f[0].tolist() == [np.log(2), 1.0, 1.0]  # U2 wrote twice; the asker answered next, with thanks
    assert f[2].tolist() == [0.0, 0.0, 0.0] and f[3, 1] == 0.0  # nobody answered c3 or the last comment
    assert f[1, 1] == 0.0  # the asker's own comment is not "answered by the asker"
    full = matrix(q, ALL_NAMES)
    assert full.shape == (4, len(ALL_NAMES)) and np.allclose(full[:, len(NAMES):], f)
    assert np.allclose(matrix(q), full[:, : len(NAMES)])  # the base signals are unchanged
    bare = Query("q", "x", tuple(Candidate(c.id, c.text) for c in cands))
    assert not thread_features(bare).any()  # no metadata: every thread signal is 0


def test_metadata_regime_of_a_question():
    from ranking.combination import in_thread_order, regime_of
    c = lambda i, author=None, at=None: Candidate(f"c{i}", "text", {"author_id": author, "created_at": at})  # noqa: E731
    timed = (c(1, "u1", "2016-01-01 10:00"), c(2, "u2", "2016-01-01 10:00"), c(3, "u1", "2016-01-02 09:00"))
    assert regime_of(Query("q", "x", timed, {"author_id": "u0"})) == "full"  # ties do not go back in time
    # in another order with their times: put back in the thread's order (ranking.combination.in_time_order)
    assert regime_of(Query("q", "x", timed[::-1], {"author_id": "u0"})) == "full"
    untimed = timed[::-1][:2] + (c(1, "u1"),)  # one without a time: the order cannot be recovered
    assert regime_of(Query("q", "x", untimed, {"author_id": "u0"})) == "no-order"
    assert regime_of(Query("q", "x", timed)) == "no-users"
    assert regime_of(Query("q", "x", (c(1), c(2)))) == "none"
    assert regime_of(Query("q", "x", (c(1), c(2)), {"thread_order": True})) == "no-users"
    assert not in_thread_order(Query("q", "x", timed, {"thread_order": False}))  # the caller's word wins
    # times compared as times: 08:00 UTC comes before 09:00, though its text sorts after
    zoned = (c(1, "u1", "2016-01-01T10:00:00+02:00"), c(2, "u2", "2016-01-01 09:00:00"))
    assert in_thread_order(Query("q", "x", zoned))
    half = (c(1, "u1", "2016-01-01"), c(2, None, "2016-01-02"))
    assert regime_of(Query("q", "x", half, {"author_id": "u0"})) == "no-users"  # one author missing


def test_shipped_regimes_weigh_nothing_they_lack_and_ignore_a_foreign_order():
    """The default subtask A ranker: each regime's weights are zero on the features it lacks, and with neither user
    ids nor thread order a question's candidates score the same whatever order they come in."""
    from ranking.combination import NEEDS, REGIMES, regime_mask
    comb = build("cross-encoder+signals", Settings())
    features = comb.info["features"]
    assert set(comb.regimes) == set(REGIMES) - {"full"}
    for regime, (w, _) in comb.regimes.items():
        lacks = [f for f, m in zip(features, regime_mask(features, regime)) if not m]
        assert lacks and all(w[features.index(f)] == 0 for f in lacks), regime
        assert any(w[features.index(f)] != 0 for f in features if f not in NEEDS)
    texts = ["Go to the immigration office in Al Rayyan with your passport.", "lol", "Me too, any news?",
             "Your sponsor's PRO renews it online; it takes two days.", "Thanks!"]
    cands = tuple(Candidate(f"c{i}", t, {"position": i + 1}) for i, t in enumerate(texts))
    q = Query("q", "How do I renew my residence permit?", cands)
    order = [3, 0, 4, 1, 2]
    shuffled = Query("q", q.text, tuple(Candidate(cands[i].id, cands[i].text, {"position": p + 1})
                                        for p, i in enumerate(order)))
    a = dict(zip([c.id for c in cands], comb.score([q])[0]))
    b = dict(zip([c.id for c in shuffled.candidates], comb.score([shuffled])[0]))
    assert a == pytest.approx(b, abs=1e-9)
    assert max(a, key=a.get) in ("c0", "c3")
    said = Query("q", q.text, cands, {"thread_order": True})  # the same candidates, said to be in thread order
    assert comb.score([said])[0] != pytest.approx(comb.score([q])[0])


def test_a_thread_in_another_order_with_its_times_is_ranked_in_the_threads_order():
    """A forum that sends a thread's comments newest first (or by votes) with their times: the A layers put them back
    in the thread's order by those times, so each comment scores as in that order (its place in the thread, the
    dialogue around it), the scores coming back in the order given. Without every time, with times that are not ISO
    8601, or with comments of several threads, the order given stays a foreign one."""
    from ranking.combination import in_time_order, regime_of, time_order
    comb = build("bilstm+signals", Settings())
    texts = ["Go to the immigration office with your passport.", "Thanks, will do!", "lol",
             "Your sponsor's PRO renews it online; it takes two days.", "me too, any news?"]
    authors = ["u1", "asker", "u2", "u3", "u1"]
    times = ["2016-01-01 10:00:00", "2016-01-01T11:00:00", "2016-01-02 09:30:00", "2016-01-02T08:45:00-01:00",
             "2016-01-03 08:00:00"]  # ISO 8601 in two spellings; the fourth is 09:45 UTC, after the third
    cands = tuple(Candidate(f"c{i}", t, {"author_id": a, "created_at": w})
                  for i, (t, a, w) in enumerate(zip(texts, authors, times)))
    thread = Query("q", "How do I renew my residence permit?", cands, {"author_id": "asker"})
    want = dict(zip([c.id for c in cands], comb.score([thread])[0]))
    for order in ([4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        given = tuple(cands[i] for i in order)
        for meta in ({"author_id": "asker"}, {"author_id": "asker", "thread_order": False}):
            q = Query("q", thread.text, given, meta)
            assert time_order(q) == sorted(range(5), key=lambda j: order[j])
            assert regime_of(q) == "full"
            got = dict(zip([c.id for c in given], comb.score([q])[0]))
            assert got == pytest.approx(want, abs=1e-12)
            back, _ = in_time_order(q)
            assert [c.id for c in back.candidates] == [c.id for c in cands]
            assert [c.meta["position"] for c in back.candidates] == [1, 2, 3, 4, 5]
    reversed_ = tuple(reversed(cands))
    foreign = Query("q", thread.text, reversed_, {"author_id": "asker", "thread_order": False})
    blind = [c.meta for c in reversed_]
    for change in ({"created_at": None}, {"created_at": "03/01/2016"}, {"thread_id": "another"}):
        cs = tuple(Candidate(c.id, c.text, {**m, **(change if i == 0 else {})}) for i, (c, m) in
                   enumerate(zip(reversed_, blind)))
        q = Query("q", thread.text, cs, foreign.meta)
        assert time_order(q) is None and in_time_order(q)[0] is q and regime_of(q) == "no-order", change
    said = Query("q", thread.text, reversed_, {"author_id": "asker", "thread_order": True})
    assert time_order(said) is None  # the caller's word that this is the thread's order wins
