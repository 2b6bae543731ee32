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


def rerank_model(name: str) -> str:
    """The name a MiniLM model of the rankers cleared for bf16 (the /rerank cascade) serves under here: a
    cross-encoder with ``[torch-bf16]`` on a CPU with bf16 instructions, where ``auto`` runs it in bf16
    (ranking.presets.RankerSpec.auto_bf16), else as is; a bi-encoder always as is (``auto`` runs it in fp32, the
    index's precision: ranking.neural.inference.resolve)."""
    from ranking.neural.inference import auto_bf16
    return name + ("[torch-bf16]" if auto_bf16("auto", "cpu") and not name.endswith("bi-encoder") else "")


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


def _files_under(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


@pytest.fixture(scope="session", autouse=True)
def explicit_reindex_only():
    """The services the tests start build a generation only when a test asks (POST /reindex, `cqa reindex`), so a
    test that writes threads decides when search sees them. The automatic refresh, on by default, has its own tests
    (tests/test_refresh.py), which turn it on with CQA_REFRESH_S."""
    os.environ["CQA_REFRESH_S"] = "0"
    os.environ["CQA_GC_FREEZE"] = "0"  # an app started in this process must not freeze the test run's objects
    yield


@pytest.fixture(scope="session", autouse=True)
def nothing_written_under_var(tmp_path_factory):
    """No test writes into the checkout's ./var (a developer's data folder): a Settings() that names no
    folder lands in a temporary one, and the run fails if ./var changed anyway."""
    var = ROOT / "var"
    before = _files_under(var)
    os.environ["CQA_DATA_DIR"] = str(tmp_path_factory.mktemp("default-data-dir"))
    yield
    after = _files_under(var)
    changed = sorted(p for p in after if before.get(p) != after[p]) + sorted(set(before) - set(after))
    assert not changed, f"tests wrote under {var}: {changed[:5]}"


class OverlapRanker:
    """The API tests' reranker: a candidate scores the question words it shares (fast, no model). The real
    rerankers are tested in their own modules (test_presets, test_pipeline, test_minilm)."""
    name = "stub-overlap"

    def score(self, queries):
        out = []
        for q in queries:
            words = set(q.text.lower().split())
            out.append([float(len(words & set(c.text.lower().split()))) for c in q.candidates])
        return out


class ReverseRanker(OverlapRanker):
    """The overlap stub's order upside down: a challenger or candidate that disagrees with the served one."""
    name = "stub-reverse"

    def score(self, queries):
        return [[-s for s in row] for row in super().score(queries)]


class BrokenRanker(OverlapRanker):
    """A ranker whose every call fails: a challenger that broke while serving."""
    name = "stub-broken"

    def score(self, queries):
        raise RuntimeError("the stub-broken ranker fails, as asked")


@pytest.fixture(scope="session", autouse=True)
def stub_ranker_preset():
    from ranking.presets import PRESETS, RankerSpec, register
    if "stub-overlap" not in PRESETS:
        register("stub-overlap", RankerSpec("factory", "tests: shared question words",
                                            options={"factory": lambda settings: OverlapRanker()}))
    if "stub-reverse" not in PRESETS:
        register("stub-reverse", RankerSpec("factory", "tests: the overlap's reverse",
                                            options={"factory": lambda settings: ReverseRanker()}))
    if "stub-broken" not in PRESETS:
        register("stub-broken", RankerSpec("factory", "tests: fails on every call",
                                           options={"factory": lambda settings: BrokenRanker()}))


STUB_RANKERS = {"default_ranker": "stub-overlap", "default_ranker_b": "stub-overlap", "default_ranker_c": "stub-overlap",
                "search_ranker_answers": "stub-overlap", "search_ranker_questions": "stub-overlap"}


@pytest.fixture(scope="session")
def fresh_corpus_dir(tmp_path_factory) -> Path:
    """One fresh data folder for the slow full-corpus tests: the 2016 corpus is embedded once per run."""
    return tmp_path_factory.mktemp("fresh-corpus") / "var"


@pytest.fixture(scope="session")
def demo_served(tmp_path_factory):
    """Settings of a data folder holding the demo corpus and a generation built by the real encoders (refresh off),
    for tests of the real app with the default rankers; once per run (per pytest-xdist worker)."""
    from app.settings import Settings
    from indexing.ingest import ingest_paths
    from indexing.reindex import reindex
    from indexing.store import ThreadStore
    settings = Settings(data_dir=tmp_path_factory.mktemp("demo-served") / "var", refresh_s=0)
    with ThreadStore(settings.store_path) as store:
        ingest_paths(store, [ROOT / "data/demo/threads.jsonl"], progress=False)
    reindex(settings, progress=False)
    return settings


def pytest_collection_modifyitems(config, items):
    """The tests of the fresh full-corpus folder live in one file: `make test-slow` runs them in one process, but
    `make test-all` (and any run on pytest-xdist workers) uses ``--dist loadfile``, which keeps a file's tests on one
    worker, so that folder (``fresh_corpus_dir``, a session fixture: one per worker) is built once. (``--dist loadgroup`` would group them by marker, but pytest-xdist
    3.8 marks the group on a node id that pytest 9 no longer reads.)"""
    files = {item.path.name for item in items if "fresh_corpus_dir" in getattr(item, "fixturenames", ())}
    if len(files) > 1:
        raise pytest.UsageError(f"the tests of fresh_corpus_dir must share one file, not {sorted(files)}")


TOKEN = "s3cret-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture()
def fast_encoder(monkeypatch):
    import indexing.encoder as enc

    from .test_indexes import fake_encode
    monkeypatch.setattr(enc, "encode", lambda texts, **kw: fake_encode(texts))


@pytest.fixture()
def client(settings, fast_encoder):
    """The real app over a small store, with the stub reranker: these tests are about HTTP, not ranking."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={"api_token": TOKEN, "max_request_bytes": 50_000, **STUB_RANKERS})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        yield c
