"""Every ranker preset builds from its typed spec and scores; variants are fields, not names."""
from __future__ import annotations

import pytest

from ranking.candidates import Candidate, Query
from ranking.presets import (
    PRESETS,
    RankerSpec,
    UnknownRanker,
    build,
    build_label,
    retriever_config,
    spec_of,
)
from ranking.retriever import RetrieverConfig

QUERY = Query("q1", "How do I renew my residence permit in Doha?", (
    Candidate("a1", "Your company PRO renews the residence permit online; bring your passport.",
              {"thread_id": "t1", "position": 1, "author_id": "u2", "asker_id": "u1",
               "thread_question": "Residence permit renewal\nHow long does it take?"}),
    Candidate("a2", "lol", {"thread_id": "t1", "position": 2, "author_id": "u1", "asker_id": "u1",
                            "thread_question": "Residence permit renewal\nHow long does it take?"}),
    Candidate("a3", "Go to the immigration office at Al Gharafa early in the morning.",
              {"thread_id": "t2", "position": 1, "thread_question": "Immigration office hours?"}),
))


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    from app.settings import Settings
    from tests.conftest import SEMEVAL
    return Settings(data_dir=tmp_path_factory.mktemp("presets") / "var", shared_data_dir=SEMEVAL.parent)


# presets whose checkpoint the release does not ship (docs/BENCHMARKS.md: the question cross-encoder; round 29: the
# subtask C bi-encoder)
NOT_SHIPPED = {"question-cross-encoder", "related-bi-encoder", "adapted-cosine"}


@pytest.fixture(scope="module")
def built():
    return {}


@pytest.mark.parametrize("name", sorted(n for n, s in PRESETS.items() if s.kind not in ("retriever", "factory")))
def test_every_preset_builds_and_scores(name, settings, built):
    spec = PRESETS[name]
    if name in NOT_SHIPPED:  # a preset for a model the release does not ship: a clear error naming its setting
        assert not (getattr(settings, spec.checkpoint) / "config.json").exists()
        with pytest.raises(FileNotFoundError, match=f"no checkpoint at .*CQA_{spec.checkpoint.upper()}"):
            build(name, settings, built=built)
        return
    ranker = build(name, settings, built=built)
    scores = ranker.score([QUERY])
    assert len(scores) == 1 and len(scores[0]) == len(QUERY.candidates)
    assert all(isinstance(s, float) for s in scores[0])
    assert ranker.name == name
    # composite presets receive their built parts: each part once, shared through the cache (keyed by name,
    # variant, input length and, for a ranker auto runs in bf16 on a CPU with bf16 instructions, why)
    for part in PRESETS[name].part_names():
        assert any(r is v for k, v in built.items() if k[0] == part for r in getattr(ranker, "parts", []))


def test_retriever_presets_are_configs_not_rankers(settings):
    for name, spec in PRESETS.items():
        if spec.kind == "retriever":
            assert isinstance(retriever_config(name), RetrieverConfig)
            with pytest.raises(UnknownRanker, match="first-stage retriever"):
                build(name, settings)
    with pytest.raises(UnknownRanker, match="not a first-stage retriever"):
        retriever_config("bm25")
    with pytest.raises(UnknownRanker, match="unknown ranker 'nope'"):
        spec_of("nope")


def test_inference_is_a_field_that_reaches_every_minilm_part(settings):
    r = build("cross-encoder+signals", settings, inference="int8", built={})
    assert r.name == "cross-encoder+signals[onnx-int8]"
    minilm = [p for p in r.parts if PRESETS.get(p.name.split("[")[0], RankerSpec("x", "")).kind == "minilm"]
    assert {p.name for p in minilm} == {"cross-encoder[onnx-int8]", "bi-encoder[onnx-int8]"}
    assert {p.inference.label for p in minilm} == {"onnx-int8"}
    assert build_label("cross-encoder[int8][len96]", settings, built={}).name == "cross-encoder[onnx-int8][len96]"
    with pytest.raises(UnknownRanker, match="unknown inference variant 'fp8'"):
        build_label("cross-encoder[fp8]", settings, built={})
    fp32 = build("cross-encoder", settings, built={})
    assert fp32.cache_key != next(p for p in minilm if p.name.startswith("cross-encoder")).cache_key  # own cache
    plain = build("bm25", settings, inference="int8", built={})
    assert plain.name == "bm25"  # nothing to quantise: the name does not pretend


def test_cqa_serve_names_a_misnamed_ranker_before_it_starts(tmp_path, cli_env):
    """A ranker setting that names no preset, or an unknown variant, ends `cqa serve` at once with exit 2 and the
    variable's name, before any bootstrap or worker; the shipped settings name none wrongly."""
    import subprocess
    import sys

    from app.settings import Settings
    from ranking.presets import misnamed_rankers

    from .conftest import ROOT
    assert misnamed_rankers(Settings(data_dir=tmp_path / "var")) == []
    env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "var"), "CQA_INTERLEAVE_COMMENTS": "nonsense",
           "CQA_DEFAULT_RANKER": "cascade[bogus]"}
    out = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--port", "1"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "error: CQA_INTERLEAVE_COMMENTS: unknown ranker 'nonsense'" in out.stderr
    assert "error: CQA_DEFAULT_RANKER: in 'cascade[bogus]'" in out.stderr
    assert not (tmp_path / "var").exists()  # nothing bootstrapped
