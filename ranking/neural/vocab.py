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
    """The package's WordPiece tokenizer (indexing.bert.WordPieceTokenizer: transformers' ids, without its import)."""
    from indexing.bert import WordPieceTokenizer
    from indexing.encoder import model_path
    return WordPieceTokenizer(model_path())


def encode_texts(texts: list[str], max_len: int) -> list[list[int]]:
    """WordPiece ids without [CLS]/[SEP], truncated; an empty text becomes one [UNK]."""
    tok = tokenizer()
    ids = tok.ids(list(texts), max_len)
    return [x if x else [tok.unk_token_id] for x in ids]


def id_to_token(ids: list[int]) -> list[str]:
    return tokenizer().convert_ids_to_tokens(ids)
