"""Word vectors and tokenisation from the packaged all-MiniLM-L6-v2: its WordPiece vocabulary and
its token embedding matrix (30522 x 384), read at load time so checkpoints never store them."""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

EMBEDDING_KEY = "embeddings.word_embeddings.weight"
PAD_ID = 0


@lru_cache(maxsize=1)
def token_embeddings() -> np.ndarray:
    from safetensors import safe_open

    from indexing.encoder import model_path
    with safe_open(os.path.join(model_path(), "model.safetensors"), "np") as f:
        return f.get_tensor(EMBEDDING_KEY)


@lru_cache(maxsize=1)
def tokenizer():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    from indexing.encoder import model_path
    return AutoTokenizer.from_pretrained(model_path())


def encode_texts(texts: list[str], max_len: int) -> list[list[int]]:
    """WordPiece ids without [CLS]/[SEP], truncated; an empty text becomes one [UNK]."""
    tok = tokenizer()
    ids = tok(list(texts), add_special_tokens=False, truncation=True, max_length=max_len)["input_ids"]
    return [x if x else [tok.unk_token_id] for x in ids]


def id_to_token(ids: list[int]) -> list[str]:
    return tokenizer().convert_ids_to_tokens(ids)
