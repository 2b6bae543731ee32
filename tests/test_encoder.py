"""The index encoder (indexing/encoder.py) against sentence-transformers, its reference: same vectors."""
from __future__ import annotations

import numpy as np
import pytest

from indexing.encoder import encode, load_encoder, load_reference


@pytest.fixture(scope="module")
def texts():
    from app.settings import Settings
    from indexing.catalog import split_file
    from indexing.loaders import load
    comments = [a.text for t in load(Settings().semeval_dir / split_file("dev")).threads[:6] for a in t.answers]
    long = " ".join(comments) * 3  # far past the 256 word pieces the model reads
    return comments + [long, "", "?", "Où est le souk? مرحبا 你好 🙂"]


def test_the_encoder_gives_sentence_transformers_vectors(texts):
    ref = load_reference("cpu").encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    got = encode(texts, device="cpu")
    assert got.shape == ref.shape == (len(texts), 384) and got.dtype == np.float32
    assert float(np.abs(got - ref).max()) < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batching_and_order_do_not_change_a_vector(texts):
    enc = load_encoder("cpu")
    one = enc.encode(texts, batch_size=1)
    many = enc.encode(texts[::-1], batch_size=64)[::-1]
    assert float(np.abs(one - many).max()) < 1e-5
    assert encode([], device="cpu").shape == (0, 384)
