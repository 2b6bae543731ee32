"""Embedding cache keyed by sha256(model name, text): a reindex embeds only new or changed texts."""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np

from .store import opened_while_others_open


def text_key(model: str, text: str) -> bytes:
    return hashlib.sha256(f"{model}\x00{text}".encode("utf-8")).digest()


class EmbeddingCache:
    def __init__(self, path: Path, model: str, dim: int = 384):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.model, self.dim = model, dim
        self._conn = sqlite3.connect(path, isolation_level=None)
        opened_while_others_open(self._conn, self._setup)  # other processes may open a new cache at the same moment

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS emb (key BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        # the encoders whose vectors it holds: what ``indexing.erasure.forget`` keys a text under (a cache written
        # before this table names each encoder once one opens it again)
        conn.execute("CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY)")
        conn.execute("INSERT OR IGNORE INTO models VALUES (?)", (self.model,))

    def close(self) -> None:
        self._conn.close()

    def get_many(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        out: dict[bytes, np.ndarray] = {}
        for i in range(0, len(keys), 900):
            chunk = keys[i:i + 900]
            marks = ",".join("?" * len(chunk))
            for k, v in self._conn.execute(f"SELECT key, vec FROM emb WHERE key IN ({marks})", chunk):
                out[k] = np.frombuffer(v, dtype=np.float32)
        return out

    def put_many(self, keys: list[bytes], vecs: np.ndarray) -> None:
        self._conn.execute("BEGIN")
        self._conn.executemany("INSERT OR REPLACE INTO emb VALUES (?, ?)",
                               [(k, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in zip(keys, vecs)])
        self._conn.execute("COMMIT")


def embed_with_cache(texts: list[str], cache: EmbeddingCache, embed, progress=None) -> tuple[np.ndarray, int]:
    """Rows for ``texts``: cached ones read back, the rest embedded by ``embed`` (an engine's: distinct missing
    texts -> (positions, vectors) batches in any order) and stored as each batch arrives, so a killed reindex
    keeps what it had embedded.

    Returns the matrix and how many texts were encoded."""
    keys = [text_key(cache.model, t) for t in texts]
    found = cache.get_many(list(set(keys)))
    out = np.zeros((len(texts), cache.dim), dtype=np.float32)
    missing: dict[bytes, list[int]] = {}
    for i, k in enumerate(keys):
        if k in found:
            out[i] = found[k]
        else:
            missing.setdefault(k, []).append(i)
    # longest first: each block the engine encodes holds texts of similar length (less padding), and the
    # slowest blocks come first, so the progress bar's estimate only gets better
    todo = sorted(missing, key=lambda k: -len(texts[missing[k][0]]))
    done = 0
    for pos, vecs in embed([texts[missing[k][0]] for k in todo]):
        chunk = [todo[int(p)] for p in pos]
        cache.put_many(chunk, vecs)
        for k, v in zip(chunk, vecs):
            out[missing[k]] = v
        done += len(chunk)
        if progress is not None:
            progress(len(chunk))
    if done != len(todo):
        raise RuntimeError(f"the encoder returned {done} of {len(todo)} embeddings")
    return out, len(todo)
