import numpy as np
import pytest

from indexing.hits import Hit
from ranking.fusion import comb, minmax, rrf, zscore


def test_rrf_by_hand():
    a = [Hit("x", 9.0), Hit("y", 1.0)]
    b = [Hit("y", 0.5)]
    out = rrf([a, b], k=60)
    assert [h.doc_id for h in out] == ["y", "x"]
    assert out[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_edges_and_no_mutation():
    assert rrf([]) == [] and comb([[], []]) == []
    one = [Hit("x", 3.0)]
    assert comb([one]) == [Hit("x", 1.0)]  # a single hit: max == min, no division by zero
    equal = [Hit("a", 2.0), Hit("b", 2.0)]
    assert [h.score for h in comb([equal], norm="zscore")] == [0.0, 0.0]
    before = list(equal)
    comb([equal, one], method="mnz")
    assert equal == before
    np.testing.assert_allclose(minmax(np.array([1.0, 3.0])), [0, 1])
    np.testing.assert_allclose(zscore(np.array([5.0, 5.0])), [0, 0])


def test_combmnz_rewards_agreement():
    a = [Hit("x", 1.0), Hit("y", 0.0)]
    b = [Hit("x", 1.0), Hit("z", 0.0)]
    out = comb([a, b], method="mnz")
    assert out[0] == Hit("x", 4.0)
    with pytest.raises(ValueError, match="unknown comb method"):
        comb([a], method="max")


def test_zscore_leaves_numerically_equal_scores_equal():
    """Ten identical comments (2016 test-A thread Q382_R3) get BM25 scores that differ by float rounding only (a
    spread of 5.6e-17); z-scoring them must not stretch that to +-1, or the rounding orders them."""
    same = np.full(10, 0.4826451622120133) + np.array([0, 5.551115123125783e-17 * 3] * 5)
    assert same.std() > 0 and not zscore(same).any()
    assert not zscore(np.array([0.84419107] * 9 + [0.84419107 + 1.2e-7])).any()  # a BiLSTM's rounding
    assert not zscore(np.array([1e6, 1e6 + 0.5])).any()  # the tolerance is relative to the scores' size
    assert zscore(np.array([0.0, 1e-3])) == pytest.approx([-1.0, 1.0])  # a small real difference still counts
    assert zscore(np.array([12.0, 14.0, 13.0])) == pytest.approx([-1.2247, 1.2247, 0.0], abs=1e-4)
    assert zscore(np.array([])).shape == (0,)


def test_minmax_leaves_numerically_equal_scores_equal():
    """min-max (CombSUM / CombMNZ's normaliser, a fusion's `minmax` method) treats a list that holds one value up to
    float rounding as constant, as zscore does, instead of stretching the rounding to [0, 1]."""
    same = np.full(10, 0.4826451622120133) + np.array([0, 5.551115123125783e-17 * 3] * 5)
    assert same.max() > same.min() and (minmax(same) == 1.0).all()
    assert (minmax(np.array([1e6, 1e6 + 0.5])) == 1.0).all()  # relative to the scores' size
    np.testing.assert_allclose(minmax(np.array([0.0, 1e-3, 5e-4])), [0, 1, 0.5])  # a small real difference counts
    assert minmax(np.array([])).shape == (0,)
    noisy = [Hit("a", 2.0), Hit("b", 2.0 + 4e-16)]  # rounding must not put b first by a whole point
    assert [h.score for h in comb([noisy, [Hit("a", 1.0), Hit("b", 0.0)]])] == [2.0, 1.0]
