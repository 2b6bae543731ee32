"""Stored vectors by document row (indexing.rowvectors): what a build shares with the live generation (the base,
hard-linked), what it adds, and the older one-file layout."""
import os

import numpy as np
import pytest

from indexing.rowvectors import RowVectors


def vecs(n, dim=8, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def test_rows_read_as_one_matrix_with_zeros_where_none(tmp_path):
    x = vecs(4)
    v = RowVectors.build(6, [1, 2, 4, 5], x)  # rows 0 and 3: questions, no vector
    assert v.shape == (6, 8) and len(v) == 6 and v.n_vectors == 4 and v.dead == 0
    np.testing.assert_array_equal(v[2], x[1])
    assert not v[0].any() and not v[np.int64(3)].any()
    np.testing.assert_array_equal(v[[5, 0, 1]], np.stack([x[3], np.zeros(8), x[0]]))
    view = v[1:3]  # consecutive base rows: a view of the base, not a copy
    assert np.shares_memory(view, v.base) and np.array_equal(view, x[:2])
    np.testing.assert_array_equal(v[3:6], np.stack([np.zeros(8), x[2], x[3]]))
    assert v[:0].shape == (0, 8)
    np.testing.assert_array_equal(v.where([0, 1, 5, 6, -1]), [-1, 0, 3, -1, -1])
    v.save(tmp_path / "a")
    back = RowVectors.load(tmp_path / "a")
    assert isinstance(back.base, np.memmap) and not (tmp_path / "a" / "added.npy").exists()
    np.testing.assert_array_equal(back[list(range(6))], v[list(range(6))])
    with pytest.raises(ValueError, match="past the 4 stored vectors"):
        RowVectors(x, np.array([0, 4]))


def test_growing_links_the_base_copies_the_kept_added_rows_and_folds_past_its_limits(tmp_path):
    x = vecs(10)
    RowVectors.build(10, range(10), x).save(tmp_path / "g1")
    live = RowVectors.load(tmp_path / "g1")
    # the new documents: the live rows 0..9 with row 3 gone, one new document at the front, one at the end
    live_row = np.array([-1, 0, 1, 2, 4, 5, 6, 7, 8, 9, -1])
    new = vecs(2, seed=1)
    g2 = RowVectors.grown(live, live_row, range(11), [0, 10], new)
    assert g2.base_file == tmp_path / "g1" / "base.npy" and len(g2.added) == 2 and g2.dead == 1
    want = np.concatenate([new[:1], x[[0, 1, 2, 4, 5, 6, 7, 8, 9]], new[1:]])
    np.testing.assert_array_equal(g2[list(range(11))], want)
    g2.save(tmp_path / "g2")
    assert os.path.samefile(tmp_path / "g1" / "base.npy", tmp_path / "g2" / "base.npy")  # linked, not written
    live2 = RowVectors.load(tmp_path / "g2")
    np.testing.assert_array_equal(live2[list(range(11))], want)
    # again: the added rows kept are copied into the next generation's added ones
    g3 = RowVectors.grown(live2, np.arange(11), range(11), [], np.zeros((0, 8)))
    assert len(g3.added) == 2 and g3.base_file == live2.base_file
    np.testing.assert_array_equal(g3[list(range(11))], want)
    # past fold_at added vectors, or too many dead base rows: one compact base, written anew
    for folded in (RowVectors.grown(live2, np.arange(11), range(11), [], np.zeros((0, 8)), fold_at=1),
                   RowVectors.grown(live2, np.arange(11), range(11), [], np.zeros((0, 8)), max_dead=0.05),
                   g3.folded()):
        assert folded.base_file is None and len(folded.added) == 0 and folded.dead == 0
        np.testing.assert_array_equal(folded[list(range(11))], want)


def test_an_older_generations_one_file_loads_as_its_base(tmp_path):
    x = vecs(5)
    x[0] = 0  # a question's row
    np.save(tmp_path / "answer_vectors.npy", x)
    v = RowVectors.open(tmp_path / "answer_vectors")
    assert v.base_file == tmp_path / "answer_vectors.npy" and v.dim == 8
    np.testing.assert_array_equal(v[list(range(5))], x)
    assert RowVectors.open(tmp_path / "nothing") is None
