"""`cqa reindex --engine ray` builds the same generation as the local engine: lexical indexes byte for byte, dense
vectors and the answer encoder's comment vectors (encoded on the cluster too) within 1e-5, the manifest naming the
engine. The test starts its own local Ray cluster (two workers)
through the CLI, as an operator would, with the real encoder."""
from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from indexing.catalog import split_file
from indexing.config import IndexSettings
from indexing.generations import ANSWER_VECTORS, current_generation
from indexing.ingest import ingest_paths
from indexing.loaders import load
from indexing.reindex import reindex
from indexing.rowvectors import RowVectors
from indexing.store import ThreadStore

from .conftest import CQA, ROOT

LEXICAL = ("documents.bin", "terms", "bm25", "lm", "translation_qa")


def _generation(data_dir: Path) -> Path:
    root = data_dir / "indexes"
    return root / current_generation(root)


def _vectors(gen: Path) -> np.ndarray:
    import faiss
    index = faiss.read_index(str(gen / "dense" / "index.faiss"))
    return index.reconstruct_n(0, index.ntotal)


def assert_same_generation(local: Path, ray: Path) -> dict:
    """Every lexical file identical, dense and answer vectors within 1e-5, the answer vectors encoded by the Ray
    engine's workers; returns the ray manifest."""
    compared = 0
    for part in LEXICAL:
        files = [local / part] if (local / part).is_file() else sorted(p for p in (local / part).rglob("*") if p.is_file())
        assert files, f"the local generation has no {part}"
        for f in files:
            other = ray / f.relative_to(local)
            assert other.exists(), f"the Ray generation lacks {f.relative_to(local)}"
            assert filecmp.cmp(f, other, shallow=False), f"{f.relative_to(local)} differs between the engines"
            compared += 1
    assert compared >= 10
    a, b = _vectors(local), _vectors(ray)
    assert a.shape == b.shape and a.shape[0] > 0
    assert float(np.abs(a - b).max()) <= 1e-5
    a, b = (RowVectors.open(g / ANSWER_VECTORS) for g in (local, ray))
    assert a.shape == b.shape
    a, b = a[list(range(len(a)))], b[list(range(len(b)))]  # every document's row, zero for a question
    assert np.count_nonzero(np.abs(a).sum(axis=1)) > 0
    assert float(np.abs(a - b).max()) <= 1e-5
    m_local = json.loads((local / "manifest.json").read_text())
    m_ray = json.loads((ray / "manifest.json").read_text())
    assert m_local["engine"]["name"] == "local" and m_ray["engine"]["name"] == "ray"
    assert m_ray["documents"] == m_local["documents"] and m_ray["indexes"] == m_local["indexes"]
    assert m_ray["answer_encoder"] == m_local["answer_encoder"] and m_ray["answer_encoder"] is not None
    where = m_local["build"]["answer_vectors"]["engine"], m_ray["build"]["answer_vectors"]["engine"]
    assert where == ("local", "ray")
    # each data folder's cache started empty, so the cluster encoded every distinct comment the local engine did
    assert m_ray["build"]["answer_vectors"]["encoded"] == m_local["build"]["answer_vectors"]["encoded"] > 0
    return m_ray


def _ray_reindex(data_dir: Path, cli_env: dict, *extra: str) -> dict:
    p = subprocess.run(CQA + ["reindex", "-q", "--engine", "ray", "--ray-workers", "2", *extra],
                       env={**cli_env, "CQA_DATA_DIR": str(data_dir)}, capture_output=True, text=True, cwd=ROOT,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _two_stores(tmp_path: Path, source: Path) -> tuple[Path, Path]:
    """The same threads in two data folders, each with its own embedding cache (so both engines encode)."""
    dirs = tmp_path / "local", tmp_path / "ray"
    for d in dirs:
        with ThreadStore(IndexSettings(data_dir=d).store_path) as store:
            report = ingest_paths(store, [source], progress=False)
        assert report.threads > 0 and not report.errors
    return dirs


def test_ray_engine_builds_the_local_engines_generation(tmp_path, cli_env):
    local, ray = _two_stores(tmp_path, ROOT / "data" / "demo" / "threads.jsonl")
    reindex(IndexSettings(data_dir=local), progress=False)
    out = _ray_reindex(ray, cli_env)
    assert out["engine"] == "ray" and out["indexes"]["dense"]["encoded"] == out["documents"]["total"]
    manifest = assert_same_generation(_generation(local), _generation(ray))
    assert manifest["engine"]["workers"] == 2 and manifest["engine"]["address"] == "local"


def test_ray_engine_refuses_options_without_it(tmp_path, cli_env):
    p = subprocess.run(CQA + ["reindex", "--address", "auto"], env={**cli_env, "CQA_DATA_DIR": str(tmp_path)},
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "--engine ray" in p.stderr


DEV_THREADS = 250


@pytest.mark.slow
def test_ray_engine_on_the_dev_corpus(tmp_path, cli_env, semeval):
    """Half the 2016 dev corpus (its first 250 of 500 threads, about 2,500 distinct texts), each engine encoding every
    text itself: forum text in many blocks (3 of analysis, 10 of embedding), where the demo corpus fits in one. Half,
    not the whole, since each engine encodes everything and the test's time is the encoding (311 s for the whole)."""
    threads = load(semeval / split_file("dev"), strict=True).threads
    assert len(threads) == 2 * DEV_THREADS
    source = tmp_path / "dev-half.jsonl"
    source.write_text("".join(t.model_dump_json() + "\n" for t in threads[:DEV_THREADS]), encoding="utf-8")
    local, ray = _two_stores(tmp_path, source)
    reindex(IndexSettings(data_dir=local), progress=False)
    out = _ray_reindex(ray, cli_env)
    engine = assert_same_generation(_generation(local), _generation(ray))["engine"]
    assert out["documents"]["total"] > 2 * engine["block_size"]
    assert out["indexes"]["dense"]["encoded"] > 9 * engine["embed_batch"]
