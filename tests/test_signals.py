import numpy as np

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
