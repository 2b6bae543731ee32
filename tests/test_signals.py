import numpy as np

from indexing.config import Settings
from ranking.candidates import Candidate, Query
from ranking.combination import load_combination
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
    comb = load_combination(Settings())
    assert comb.info["parts"] == ["bilstm", "bm25", "ir-baseline"] and len(comb.coef) == 3 + len(NAMES)
    q = Query("q", "How can I renew my residence permit?", (
        Candidate("x", "lol"), Candidate("y", "Your company PRO renews the residence permit online with your passport.")))
    s = comb.score([q])[0]
    assert s[1] > s[0]
