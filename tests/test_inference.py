"""Inference variants of the MiniLM rankers (ranking/neural/inference.py): what ``auto`` resolves to on
which hardware, the fallbacks, and every variant's scores against torch fp32 on fixed inputs with the
shipped weights."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from app.settings import Settings
from ranking.neural import inference as inf
from ranking.neural.inference import CPU_DEFAULT, Inference, InferenceError, resolve
from ranking.neural.ranker import MiniLMRanker, checkpoint_digest, score_cache_key

ROOT = Path(__file__).resolve().parent.parent
NO_BF16 = {"avx2": True, "avx512f": True, "avx512_vnni": True, "avx512_bf16": False, "amx_bf16": False}
AMX = {**NO_BF16, "amx_tile": True, "amx_bf16": True, "amx_int8": True}


def test_auto_follows_the_hardware():
    assert resolve("auto", "cpu", NO_BF16).inference.label == CPU_DEFAULT == "torch-fp32"
    # bf16 instructions make torch-bf16 faster, but it lost 0.0098 dev-C MAP: not every ranker's default (only
    # the rankers cleared on dev take it, ranking.presets.RankerSpec.auto_bf16; the next test)
    assert resolve("auto", "cpu", AMX).inference.label == "torch-fp32"
    assert inf.auto_bf16("auto", "cpu", {"avx512_bf16": True})
    # on an AMX CPU oneDNN keeps to its AVX512-BF16 kernels (scores that do not move with the batch), slower than fp32
    assert not inf.auto_bf16("auto", "cpu", AMX) and not inf.auto_bf16("auto", "cpu", {**AMX, "avx512_bf16": True})
    import os
    assert os.environ["ONEDNN_MAX_CPU_ISA"]  # set on importing indexing (the operator's own value kept)
    assert not inf.auto_bf16("auto", "cpu", NO_BF16)
    assert not inf.auto_bf16("torch-fp32", "cpu", AMX) and not inf.auto_bf16("auto", "cuda", AMX)
    assert resolve("auto", "cpu", {"avx512_bf16": True}).inference.label == "torch-fp32"
    assert resolve("torch-bf16", "cpu", {"avx512_bf16": True}).inference.label == "torch-bf16"
    assert resolve("auto", "cuda", NO_BF16).inference.label == "torch-bf16"


def test_a_variant_the_machine_cannot_run_falls_back_and_says_why(monkeypatch):
    r = resolve("torch-bf16", "cpu", NO_BF16)
    assert r.inference.label == "torch-fp32" and "no bf16 instructions" in r.note
    assert resolve("torch-bf16", "cpu", AMX).note == ""
    r = resolve("onnx-int8", "cuda", NO_BF16)
    assert r.inference.label == "torch-bf16" and "CPU variant" in r.note
    monkeypatch.setattr(inf, "onnx_available", lambda: False)
    r = resolve("onnx-int8", "cpu", AMX)
    assert r.inference.label == "torch-fp32" and "onnxruntime" in r.note


def test_unknown_variants_are_refused_with_the_known_ones():
    with pytest.raises(InferenceError, match="known: auto, torch-fp32"):
        Inference.parse("fp8")
    with pytest.raises(InferenceError):
        Inference("onnx", "bf16")
    assert Inference.parse("int8").label == "onnx-int8" and Inference.parse("bf16").label == "torch-bf16"
    with pytest.raises(ValidationError, match="unknown inference variant"):
        Settings(inference="fp8")
    assert Settings(inference="int8").inference == "onnx-int8"


@pytest.fixture(scope="module")
def pairs():
    """Fixed inputs: three 2016 dev questions and their comments."""
    from indexing.catalog import split_file
    from indexing.loaders import load
    from ranking.candidates import Candidate, Query
    threads = load(Settings().semeval_dir / split_file("dev")).threads[:3]
    return [Query(t.id, t.question_text, tuple(Candidate(a.id, a.text) for a in t.answers)) for t in threads]


def _variants(kind: str, tmp: Path) -> dict[str, MiniLMRanker]:
    folder = ROOT / "models" / kind
    fp32 = MiniLMRanker.from_checkpoint(folder, "cpu", inference="torch-fp32")
    out = {"torch-fp32": fp32,
           # bf16 numerics are checked whatever the CPU: the ranker is built directly, without the fallback
           "torch-bf16": MiniLMRanker(fp32.model, "cpu", inference=Inference("torch", "bf16"))}
    for v in ("onnx-fp32", "onnx-int8"):
        out[v] = MiniLMRanker.from_checkpoint(folder, "cpu", inference=v, export_dir=tmp)
    return out


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.mark.parametrize("kind", ["cross-encoder", "bi-encoder"])
def test_every_variant_scores_like_fp32(kind, pairs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("onnx")
    rankers = _variants(kind, tmp)
    assert {v: r.inference.label for v, r in rankers.items()} == {v: v for v in rankers}
    ref_rows = rankers["torch-fp32"].score(pairs)
    ref = np.concatenate([np.asarray(s) for s in ref_rows])
    assert len(ref) >= 20
    # how close each variant must be: onnx-fp32 is the same arithmetic; bf16 and int8 round
    bounds = {"onnx-fp32": (1e-3, 0.9999), "torch-bf16": (0.15, 0.97), "onnx-int8": (0.5, 0.95)}
    if kind == "bi-encoder":  # cosines, in [-1, 1]
        bounds = {"onnx-fp32": (1e-4, 0.9999), "torch-bf16": (0.03, 0.97), "onnx-int8": (0.08, 0.95)}
    for v, (max_diff, min_rho) in bounds.items():
        got = rankers[v].score(pairs)
        flat = np.concatenate([np.asarray(s) for s in got])
        assert [len(s) for s in got] == [len(q.candidates) for q in pairs]
        diff = float(np.abs(flat - ref).max())
        assert diff <= max_diff, f"{kind} {v}: max |score - fp32| = {diff}"
        # Rank correlation per question (10 comments each): on average at least min_rho, and no question below
        # min_rho - 0.05. One int8 rounding that swaps two near-tied comments two places apart costs a 10-comment
        # question 0.048, and dynamic int8 quantizes activations per batch, so a single question's figure moves
        # with what it is batched with; the benchmarks measure the effect on MAP (docs/BENCHMARKS.md, int8 rows).
        rhos = [_spearman(np.asarray(g), np.asarray(r)) for g, r in zip(got, ref_rows)]
        assert np.mean(rhos) >= min_rho and min(rhos) >= min_rho - 0.05, f"{kind} {v}: rank correlations with fp32 {rhos}"
    assert not np.allclose(np.concatenate([np.asarray(s) for s in rankers["onnx-int8"].score(pairs)]), ref,
                           atol=1e-6)  # int8 really ran


def test_bf16_pads_each_input_to_a_multiple_whatever_its_batch_mates(pairs):
    """A bf16 score moves with the width its input is padded to. So torch-bf16 on a CPU pads each input to the next
    multiple of 32 tokens and scores only inputs of one width together, and a pair scores the same alone, with its
    thread, or beside other threads (the micro-batcher's merged requests). fp32 keeps batch padding."""
    from ranking.neural import ranker as R
    from ranking.neural.minilm import collate
    fp32 = MiniLMRanker.from_checkpoint(ROOT / "models" / "cross-encoder", "cpu", inference="torch-fp32")
    assert fp32.pad_multiple == 0 and R.pad_multiple(Inference("torch", "bf16"), "cpu") == R.BF16_PAD_MULTIPLE == 32
    assert R.pad_multiple(Inference("torch", "bf16"), "cuda") == 0 and R.pad_multiple(Inference("onnx", "int8"), "cpu") == 0
    assert [R.padded_width(n, 32) for n in (1, 32, 33, 192)] == [32, 32, 64, 192] and R.padded_width(7, 0) == 0
    ids, mask, types = collate([[101, 7, 102], [101, 102]], "cpu", [[0, 0, 0], [0, 0]], width=32)
    assert ids.shape == (2, 32) and mask.sum().item() == 5 and types.shape == (2, 32)
    # the batches: at most batch_size inputs, one width each, every input once
    lengths = [40, 3, 64, 65, 33, 31, 100, 5, 6, 7]
    widths = [R.padded_width(n, 32) for n in lengths]
    batches = R._batches(sorted(range(10), key=lambda i: (widths[i], lengths[i])), widths, 3)
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert all(len(b) <= 3 and len({widths[i] for i in b}) == 1 for b in batches)
    # the scores: a bf16 ranker built directly (as the service builds it where the CPU has bf16 instructions)
    bf16 = MiniLMRanker(fp32.model, "cpu", inference=Inference("torch", "bf16"), pad_multiple=R.BF16_PAD_MULTIPLE)
    flat = [(q.text, c.text) for q in pairs for c in q.candidates]
    merged = bf16.score_pairs(flat)
    per_thread = [s for q in pairs for s in bf16.score_pairs([(q.text, c.text) for c in q.candidates])]
    alone = [bf16.score_pairs([p])[0] for p in flat[:12]]
    assert merged != fp32.score_pairs(flat)  # bf16 really ran
    if inf.has_bf16(inf.cpu_flags()):  # where bf16 runs (elsewhere torch-bf16 falls back to fp32): exactly equal
        assert merged == per_thread and alone == merged[:12]
    else:  # bf16 emulated: this CPU's kernels were not measured
        assert np.allclose(merged, per_thread, atol=0.02) and np.allclose(alone, merged[:12], atol=0.02)
    assert score_cache_key(ROOT / "models" / "cross-encoder", "cpu", 192, Inference("torch", "bf16")) != \
        score_cache_key(ROOT / "models" / "cross-encoder", "cuda", 192, Inference("torch", "bf16"))


def test_onnx_exports_are_made_once_per_checkpoint_and_variant(tmp_path):
    folder = ROOT / "models" / "bi-encoder"
    MiniLMRanker.from_checkpoint(folder, "cpu", inference="onnx-int8", export_dir=tmp_path)
    files = sorted((tmp_path / "onnx").glob("*.onnx"))
    assert len(files) == 1 and checkpoint_digest(folder) in files[0].name and "int8" in files[0].name
    stamp = files[0].stat().st_mtime_ns
    again = MiniLMRanker.from_checkpoint(folder, "cpu", inference="onnx-int8", export_dir=tmp_path)
    assert files[0].stat().st_mtime_ns == stamp and again.model.path == files[0]  # read, not exported again
    assert not list((tmp_path / "onnx").glob("tmp*"))  # no half-written export left behind


def test_each_variant_has_its_own_score_cache_and_fp32_keeps_its_old_key():
    import hashlib

    from indexing.loaders import file_digest
    folder = ROOT / "models" / "cross-encoder"
    keys = {v: score_cache_key(folder, "cpu", 192, Inference.parse(v)) for v in inf.VARIANTS}
    assert len(set(keys.values())) == len(keys)
    legacy = [file_digest(folder / "model.safetensors"), file_digest(folder / "config.json"), "code2", "cpu",
              "fp32", "len192"]  # the key before there were variants: fp32 caches stay valid
    assert keys["torch-fp32"] == hashlib.sha256("|".join(legacy).encode()).hexdigest()[:24]


def test_the_service_reports_how_each_model_runs(tmp_path, monkeypatch):
    """GET /ready lists every MiniLM model of the rerankers once, with its variant and the reason for a fallback."""
    from ranking.presets import build
    from ranking.rankers import inference_report
    from tests.conftest import SEMEVAL
    monkeypatch.setattr(inf, "cpu_flags", lambda: NO_BF16)
    s = Settings(data_dir=tmp_path / "var", shared_data_dir=SEMEVAL.parent, inference="torch-bf16", device="cpu")
    built: dict = {}
    report = inference_report([build("cascade", s, built=built), build("cross-encoder+signals", s, built=built)])
    assert sorted(r["model"] for r in report) == ["bi-encoder", "cross-encoder"]
    assert all(r["variant"] == "torch-fp32" and "no bf16 instructions" in r["note"] for r in report)


def test_auto_runs_only_the_rankers_cleared_on_dev_in_bf16(tmp_path, monkeypatch):
    """On a CPU with bf16 instructions ``auto`` runs the cross-encoders of the subtask A and C defaults (cleared in
    rounds 22 and 23: at most 0.005 MAP lost on dev, faster through a real server) in torch-bf16, under their own
    names, and says why in each model's note; their bi-encoders stay torch-fp32, the index's precision (round 53), one
    ranker with the plain preset's; every other ranker stays torch-fp32, those sharing their models included. Without
    bf16 instructions, or with a variant set, nothing changes. Rankers running the same weights in two variants share
    one torch module."""
    from ranking.neural.inference import VECTORS_NOTE
    from ranking.presets import AUTO_BF16_NOTE, PRESETS, build
    from ranking.rankers import inference_report, walk
    from tests.conftest import SEMEVAL

    def variants(ranker):
        return {r["model"]: (r["variant"], r["note"]) for r in inference_report([ranker])}

    assert {n for n, s in PRESETS.items() if s.auto_bf16} == {"cascade"}
    s = Settings(data_dir=tmp_path / "var", shared_data_dir=SEMEVAL.parent, device="cpu")
    monkeypatch.setattr(inf, "cpu_flags", lambda: {"avx512_bf16": True})
    built: dict = {}
    a, b, c = (build(n, s, built=built) for n in ("cascade", "question-fusion", "related-answers"))
    assert (a.name, b.name, c.name) == ("cascade", "question-fusion", "related-answers")
    got = variants(a)
    assert got == {"cross-encoder[torch-bf16]": ("torch-bf16", AUTO_BF16_NOTE), "bi-encoder": ("torch-fp32", VECTORS_NOTE)}
    assert "(cascade), but for their bi-encoders" in AUTO_BF16_NOTE
    assert variants(b) == {"question-bi-encoder": ("torch-fp32", VECTORS_NOTE)}  # the B default: not cleared
    # the C default (cleared in round 23, no longer: it has no MiniLM model but bi-encoders) runs them in torch-fp32;
    # the A bi-encoder it shares with the cascade is one ranker, with one memo, and so is the B fusion's
    assert variants(c) == {"bi-encoder": ("torch-fp32", VECTORS_NOTE), "question-bi-encoder": ("torch-fp32", VECTORS_NOTE)}
    for name in ("bi-encoder", "question-bi-encoder"):
        assert len({id(r) for r in walk([a, b, c]) if r.name == name}) == 1
    assert variants(build("cross-encoder+signals", s, built=built)) == {
        "cross-encoder": ("torch-fp32", ""), "bi-encoder": ("torch-fp32", VECTORS_NOTE)}  # A's others: not cleared
    modules = {}
    for r in walk([a, b, c, build("cross-encoder+signals", s, built=built)]):
        if hasattr(r, "inference"):
            modules.setdefault(r.name.partition("[")[0], set()).add(id(r.model))
    assert all(len(ids) == 1 for ids in modules.values()), modules  # one copy of each checkpoint's weights
    # the cross-encoder in both variants on the same pairs: bf16 really runs, and stays close to fp32
    ce = {r.inference.label: r for r in walk([a, build("cross-encoder+signals", s, built=built)])
          if r.name.partition("[")[0] == "cross-encoder"}
    pairs = [("Where can I renew my visa in Doha?", "Go to the immigration office with your passport."),
             ("Where can I renew my visa in Doha?", "The beaches near Doha are lovely in winter.")]
    half, full = (np.asarray(ce[v].score_pairs(pairs)) for v in ("torch-bf16", "torch-fp32"))
    assert not np.array_equal(half, full) and np.allclose(half, full, atol=0.05), (half, full)

    monkeypatch.setattr(inf, "cpu_flags", lambda: NO_BF16)  # no bf16 instructions: auto is fp32 everywhere
    fp32 = {"cross-encoder": ("torch-fp32", ""), "bi-encoder": ("torch-fp32", "")}
    assert variants(build("cascade", s)) == fp32
    monkeypatch.setattr(inf, "cpu_flags", lambda: {"avx512_bf16": True})
    pinned = Settings(data_dir=tmp_path / "var", shared_data_dir=SEMEVAL.parent, device="cpu", inference="torch-fp32")
    assert variants(build("cascade", pinned)) == fp32  # a variant set by the operator is what runs


def test_a_bi_encoder_runs_the_index_precision_under_auto_and_names_any_other():
    """A reindex stores comments' and questions' vectors in fp32 (indexing.encoder.TextEncoder). ``auto`` runs a
    bi-encoder in torch-fp32 on every device, CUDA included, so what it encodes is what the index stored; a variant
    set by the operator runs as asked, and its vectors then carry an id no stored vector has."""
    from indexing.encoder import bi_encoder_id
    from ranking.neural.ranker import vectors_id
    bf16 = {"avx512_bf16": True}
    for device in ("cpu", "cuda"):
        assert resolve("auto", device, bf16, vectors=True).inference.label == "torch-fp32"
    assert resolve("auto", "cuda", bf16).inference.label == "torch-bf16"  # a cross-encoder: as before
    assert resolve("torch-bf16", "cpu", bf16, vectors=True).inference.label == "torch-bf16"
    assert resolve("torch-bf16", "cpu", NO_BF16, vectors=True).inference.label == "torch-fp32"  # the usual fallback
    same = bi_encoder_id("d" * 24, 128)
    assert vectors_id("d" * 24, 128, Inference("torch", "fp32")) == vectors_id("d" * 24, 128, Inference("onnx", "fp32")) == same
    others = {vectors_id("d" * 24, 128, Inference.parse(v)) for v in ("torch-bf16", "onnx-int8")}
    assert len(others) == 2 and same not in others and all(o.startswith(same) for o in others)
    folder = ROOT / "models" / "bi-encoder"
    keys = {score_cache_key(folder, "cuda", 128, Inference("torch", p)) for p in ("fp32", "bf16")}
    assert len(keys | {score_cache_key(folder, "cpu", 128, Inference("torch", "fp32"))}) == 3  # never one another's


def test_a_thread_scores_the_same_whether_the_index_holds_its_comments_or_not(tmp_path, monkeypatch):
    """Round 52 found that on a CPU where ``auto`` runs the cascade in bf16, a thread's comments scored differently
    once the index held them: the bi-encoder read the index's fp32 vectors of those, and encoded in bf16 what it did
    not hold (and every comment of a benchmark run). Now the cascade scores a thread the same either way, and a
    bi-encoder run in bf16 by the operator's choice never reads the fp32 vectors (it encodes every text itself)."""
    from indexing.encoder import encode, encoder_spec
    from ranking.candidates import ANSWER_ENCODER, ANSWER_VECTOR, Candidate, Query
    from ranking.presets import build
    from ranking.rankers import walk
    from tests.conftest import SEMEVAL
    monkeypatch.setattr(inf, "cpu_flags", lambda: {"avx512_bf16": True})  # bf16 is emulated where the CPU lacks it
    s = Settings(data_dir=tmp_path / "var", shared_data_dir=SEMEVAL.parent, device="cpu")
    question = "Which bank gives the best rate for a car loan in Doha?"
    comments = ["QNB gave me 3.5% last month, ask for the expat package.", "Try the Commercial Bank, their rates are "
                "lower if your salary is transferred to them.", "no idea", "Don't take a loan for a car here, buy "
                "a used one with cash.", "Doha Bank was the cheapest for me, 3.2% flat, but check the fees."]
    spec = encoder_spec(str(ROOT / "models" / "bi-encoder"))
    stored = encode(comments, device="cpu", spec=spec)  # what a reindex stores with the A bi-encoder as answer encoder

    def thread(carried: bool, encoder: str = spec.id) -> Query:
        meta = lambda i: {ANSWER_VECTOR: stored[i], ANSWER_ENCODER: encoder} if carried else {}  # noqa: E731
        return Query("q", question, tuple(Candidate(f"c{i}", t, meta(i)) for i, t in enumerate(comments)))

    cascade = build("cascade", s, built={})
    assert {r.name for r in walk([cascade])} >= {"cross-encoder[torch-bf16]", "bi-encoder"}
    indexed, not_indexed = (cascade.score([thread(carried)])[0] for carried in (True, False))
    assert np.allclose(indexed, not_indexed, atol=1e-5), (indexed, not_indexed)
    assert np.argsort(indexed).tolist() == np.argsort(not_indexed).tolist()

    half = MiniLMRanker.from_checkpoint(ROOT / "models" / "bi-encoder", device="cpu", inference="torch-bf16")
    assert half.inference.label == "torch-bf16" and half.vector_id != spec.id
    own = half.score([thread(False)])[0]
    # handed fp32 vectors under the index's id, it does not read them: its scores are its own encodings'
    assert half.score([thread(True)])[0] == own
    assert half.score([thread(True, half.vector_id)])[0] != own  # under its own id it would (nothing stores that)
