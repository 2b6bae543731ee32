"""Default retriever settings, tuned on dev data and stored with the numbers that chose them."""
from __future__ import annotations

import json
from pathlib import Path

from .retriever import RetrieverConfig

DEFAULTS_FILE = Path(__file__).with_name("retriever_defaults.json")


def load_retriever_defaults(path: Path = DEFAULTS_FILE) -> RetrieverConfig:
    if not path.exists():
        return RetrieverConfig()
    d = json.loads(path.read_text(encoding="utf-8"))["config"]
    return RetrieverConfig(sources=tuple(d["sources"]), fusion=d["fusion"],
                           weights=tuple(d["weights"]) if d.get("weights") else None,
                           expansion=d.get("expansion", "none"), depth=d.get("depth", 100))
