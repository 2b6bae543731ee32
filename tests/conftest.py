from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
SEMEVAL = ROOT.parent / "shared" / "data" / "semeval2016"
CQA = [sys.executable, "-m", "app.cli"]


@pytest.fixture(scope="session")
def semeval() -> Path:
    if not SEMEVAL.exists():
        pytest.fail(f"the SemEval data is expected at {SEMEVAL} (../shared/data beside the checkout)")
    return SEMEVAL


@pytest.fixture()
def settings(tmp_path):
    from app.settings import Settings
    return Settings(data_dir=tmp_path / "var", shared_data_dir=SEMEVAL.parent)


@pytest.fixture()
def cli_env(tmp_path) -> dict:
    env = dict(os.environ)
    env["CQA_DATA_DIR"] = str(tmp_path / "var")
    env["PYTHONPATH"] = str(ROOT)
    return env
