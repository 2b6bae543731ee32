"""The MiniLM cross-encoder and bi-encoder: pair building, losses, training, compact checkpoints, the
score cache, the committed checkpoints' quality on a dev slice, and the subtask C ranker."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.settings import Settings
from indexing.config import PROJECT_ROOT
from indexing.loaders import load
from ranking.candidates import Candidate, Query
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
from ranking.evaluation.runner import align_to_gold, predictions
from ranking.evaluation.scorer import Line, read_lines, score
from ranking.neural.checkpoint import CheckpointError
from ranking.neural.data import groups_from_threads
from ranking.neural.losses import PairBCELoss, PairwiseHingeLoss
from ranking.neural.minilm import FROZEN, MiniLMConfig, pair_ids, word_pieces
from ranking.neural.minilm import load as load_minilm
from ranking.neural.ranker import MiniLMRanker
from ranking.neural.train_minilm import MiniLMTrainConfig, average_checkpoints, length_batches, train_minilm
from ranking.rankers import IRBaseline, get_ranker, service_reranker, walk
from ranking.presets import PRESETS
from ranking.related import FEATURES, RelatedAnswersRanker, feature_columns


def test_pair_ids_keep_the_question_head_and_fill_with_the_answer():
    cfg = MiniLMConfig(max_length=32, question_max_tokens=10)
    q, a = list(range(1000, 1040)), list(range(2000, 2040))
    ids, types = pair_ids(q, a, cfg)
    assert len(ids) == len(types) == 32
    assert ids[1:11] == q[:10] and ids[12:31] == a[:19]  # question cut at its share, answer fills the rest
    assert types == [0] * 12 + [1] * 20
    short_a = list(range(2000, 2005))
    ids, _ = pair_ids(q, short_a, cfg)  # a short answer leaves the question more room
    assert ids[1:25] == q[:24] and ids[26:31] == short_a and len(ids) == 32
    ids, _ = pair_ids(q[:3], a[:4], cfg)
    assert len(ids) == 3 + 4 + 3  # nothing padded or cut when it fits


def test_pairwise_losses_by_hand():
    pos, neg = torch.tensor([2.0, 0.2]), torch.tensor([0.5, 0.7])
    assert PairwiseHingeLoss(1.0)(pos, neg).item() == pytest.approx((0.0 + 1.5) / 2)
    assert PairwiseHingeLoss(1.0)(torch.tensor([3.0]), torch.tensor([1.0])).item() == 0.0
    bce = PairBCELoss()(pos, neg).item()
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor([2.0, 0.2, 0.5, 0.7]), torch.tensor([1.0, 1.0, 0.0, 0.0])).item()
    assert bce == pytest.approx(expected)


def test_length_batches_group_similar_lengths_and_keep_everything():
    import random
    data = [([1] * n, [2], [3]) for n in random.Random(1).sample(range(1, 400), 200)]
    batches = length_batches(data, 10, random.Random(2), pool=20)
    assert sorted(len(t[0]) for b in batches for t in b) == sorted(len(t[0]) for t in data)
    spread = max(max(len(t[0]) for t in b) - min(len(t[0]) for t in b) for b in batches)
    assert spread < 100  # sorted within the pool: a batch spans a tenth of the range, not all of it


@pytest.fixture(scope="module")
def tiny_cross(tmp_path_factory):
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:10]
    groups = groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 48, 48)
    queries = [Query(t.id, t.question_text, tuple(Candidate(a.id, a.text) for a in t.answers)) for t in threads[:3]]
    gold = [Line(q.id, c.id, 0.0, a.label == "Good") for q, t in zip(queries, threads) for c, a in zip(q.candidates, t.answers)]
    out = tmp_path_factory.mktemp("cross")
    metrics = train_minilm(groups, queries, gold, out, MiniLMTrainConfig(
        max_steps=4, eval_every=2, batch_size=4, max_length=64, device="cpu"), progress=False)
    return out, metrics, queries


def test_training_writes_a_dev_selected_compact_checkpoint(tiny_cross):
    out, metrics, queries = tiny_cross
    logged = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in logged] == [2, 4] and all(0 <= e["dev_MAP"] <= 1 for e in logged)
    best = max(logged, key=lambda e: e["dev_MAP"])
    assert metrics["dev_MAP"] == best["dev_MAP"] and metrics["best"]["step"] == best["step"]
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert FROZEN not in keys and "head.weight" in keys  # the token embeddings are read from the package
        assert all(f.get_tensor(k).dtype == torch.float16 for k in keys)
    assert (out / "model.safetensors").stat().st_size < 25_000_000
    config = json.loads((out / "config.json").read_text())
    assert config["kind"] == "cross-encoder" and config["model"]["max_length"] == 64


@pytest.mark.parametrize("stop_at_call,evaluated", [(3, [2]), (1, [0])])
def test_an_interrupted_run_keeps_its_best_evaluation_point(stop_at_call, evaluated, tmp_path, monkeypatch):
    """Ctrl-C, or SIGTERM under `cqa train` (a job's time limit), ends training early with a checkpoint of the best
    point evaluated so far; interrupted before any evaluation, the model as it stands is evaluated and kept."""
    import signal

    import ranking.neural.train_minilm as tm
    from ranking.neural.train import interrupt
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:4]
    groups = groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 48, 48)
    queries = [Query(t.id, t.question_text, tuple(Candidate(a.id, a.text) for a in t.answers)) for t in threads[:2]]
    gold = [Line(q.id, c.id, 0.0, a.label == "Good") for q, t in zip(queries, threads) for c, a in zip(q.candidates, t.answers)]
    calls, step = [], tm.optimizer_step

    def stepping(*args):
        calls.append(1)
        if len(calls) == stop_at_call:
            interrupt(signal.SIGTERM, None)  # what the handler `cqa train` installs does on SIGTERM
        return step(*args)
    monkeypatch.setattr(tm, "optimizer_step", stepping)
    out = tmp_path / "stopped"
    metrics = train_minilm(groups, queries, gold, out, MiniLMTrainConfig(
        max_steps=10, eval_every=2, batch_size=2, max_length=64, device="cpu"), progress=False)
    assert metrics["interrupted_at"] == {"epoch": 1, "step": stop_at_call - 1}
    logged = [json.loads(line)["step"] for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert logged == evaluated and metrics["best"]["step"] == evaluated[-1]
    assert json.loads((out / "metrics.json").read_text())["interrupted_at"] == metrics["interrupted_at"]
    assert MiniLMRanker.from_checkpoint(out, "cpu").score(queries)  # a whole checkpoint, loadable


def test_subtask_C_training_pairs_are_each_original_question_with_its_related_comments_judged_for_it(semeval):
    """`cqa train --task C`: the new question is the original question (as the C benchmarks give it), its answers the
    comments of all its related threads, Good only when judged Good against the original question (not against
    their own thread's question, subtask A's label), from 2016 train part 2 alone."""
    import xml.etree.ElementTree as ET
    from indexing.catalog import TRAIN_PART2
    from ranking.neural.train_minilm import related_comments_as_threads
    threads = related_comments_as_threads(semeval)
    root = ET.parse(semeval / TRAIN_PART2).getroot()
    judged = {}
    for oq in root.iter("OrgQuestion"):
        for c in oq.iter("RelComment"):
            judged.setdefault(oq.get("ORGQ_ID"), {})[c.get("RELC_ID")] = c.get("RELC_RELEVANCE2ORGQ")
    assert {t.id for t in threads} == set(judged) and len(threads) == 67
    by_question = {q.id: q.text for q in queries_for(semeval / TRAIN_PART2, "C")}
    for t in threads:
        assert t.question_text == by_question[t.id]
        assert {a.id: a.label for a in t.answers} == {
            c: "Good" if rel == "Good" else "Bad" for c, rel in judged[t.id].items()}
    labels = [a.label for t in threads for a in t.answers]
    assert (labels.count("Good"), len(labels)) == (849, 6700)
    # a comment can be Good for its own thread and Bad for the new question: the A label is not what C trains on
    own = {c.get("RELC_ID"): c.get("RELC_RELEVANCE2RELQ") for c in root.iter("RelComment")}
    assert any(own[a.id] == "Good" and a.label == "Bad" for t in threads for a in t.answers)
    # the same pairs as a benchmark (scripts/cv_related.py): the C benchmark's queries, gold true where Good
    from ranking.neural.train_minilm import related_training_set
    queries, gold = related_training_set(semeval)
    assert [q.id for q in queries] == [q.id for q in queries_for(semeval / TRAIN_PART2, "C")] and len(queries) == 67
    assert all(c.meta.get("thread_question") and c.meta.get("thread_rank") for q in queries for c in q.candidates)
    assert [(g.qid, g.cid) for g in gold] == [(q.id, c.id) for q in queries for c in q.candidates]
    assert {(g.qid, g.cid) for g in gold if g.label} == {(t.id, a.id) for t in threads for a in t.answers
                                                          if a.label == "Good"}
    from app.cli import _minilm_checkpoint
    assert _minilm_checkpoint(Settings(), "bi-encoder", "C") == Settings().related_bi_encoder_checkpoint
    with pytest.raises(ValueError, match="cross-encoder of task C; give --out"):
        _minilm_checkpoint(Settings(), "cross-encoder", "C")


def test_checkpoint_round_trip_scores_like_the_trained_model(tiny_cross):
    out, _, queries = tiny_cross
    model, _ = load_minilm(out, "cpu")
    a = MiniLMRanker(model).score(queries)
    b = MiniLMRanker.from_checkpoint(out, "cpu", inference="torch-fp32").score(queries)  # as MiniLMRanker(model) runs
    assert a == b and len(a[0]) == len(queries[0].candidates)
    int8 = MiniLMRanker.from_checkpoint(out, "cpu", inference="onnx-int8", export_dir=out.parent / "x").score(queries)
    assert int8 != a and all(abs(x - y) < 0.5 for qa, qb in zip(a, int8) for x, y in zip(qa, qb))


def test_training_can_start_from_a_checkpoint_of_the_same_kind(tiny_cross, tmp_path):
    out, _, queries = tiny_cross
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:4]
    groups = groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 48, 48)
    gold = [Line(q.id, c.id, 0.0, True) for q in queries for c in q.candidates]
    # lr 0: one step changes nothing, so the new checkpoint must score exactly as the one it started from
    cfg = MiniLMTrainConfig(max_steps=1, batch_size=2, max_length=64, device="cpu", lr=0.0, head_lr=0.0,
                            init_from=str(out))
    train_minilm(groups, queries, gold, tmp_path / "next", cfg, progress=False)
    assert MiniLMRanker.from_checkpoint(tmp_path / "next", "cpu").score(queries) == \
        MiniLMRanker.from_checkpoint(out, "cpu").score(queries)
    written = json.loads((tmp_path / "next" / "config.json").read_text())
    assert written["train"]["init_from"] == str(out)
    assert written["init"]["train"]["kind"] == "cross-encoder" and written["init"]["dev_MAP"] == tiny_cross[1]["dev_MAP"]
    with pytest.raises(ValueError, match="is a cross-encoder, not a bi-encoder"):
        train_minilm(groups, queries, gold, tmp_path / "bi", MiniLMTrainConfig(
            kind="bi-encoder", max_steps=1, max_length=64, device="cpu", init_from=str(out)), progress=False)
    with pytest.raises(ValueError, match="the same directory"):
        train_minilm(groups, queries, gold, out, cfg, progress=False)
    assert MiniLMRanker.from_checkpoint(out, "cpu").score(queries)  # the refused run left its start intact


def test_like_checkpoints_average_into_one_scored_on_dev(tiny_cross, tmp_path):
    import shutil
    import subprocess

    from safetensors.torch import load_file

    from ranking.neural.train import dev_map

    from .conftest import CQA
    out, metrics, queries = tiny_cross
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:4]
    groups = groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 48, 48)
    gold = [Line(q.id, c.id, 0.0, i % 3 == 0) for q in queries for i, c in enumerate(q.candidates)]
    other = tmp_path / "other"  # one step on from the same start: a like model with other weights
    train_minilm(groups, queries, gold, other, MiniLMTrainConfig(max_steps=1, batch_size=2, max_length=64, device="cpu",
                                                                 lr=1e-3, init_from=str(out)), progress=False)
    soup = tmp_path / "soup"
    m = average_checkpoints([out, other], queries, gold, soup, kind="cross-encoder")
    a, b, s = (load_file(str(p / "model.safetensors")) for p in (out, other, soup))
    assert set(s) == set(a) and any(not torch.equal(a[k], b[k]) for k in a)
    assert all(torch.allclose(s[k].float(), (a[k].float() + b[k].float()) / 2, atol=2e-3) for k in a)
    assert m["dev_MAP"] == dev_map(MiniLMRanker.from_checkpoint(soup, "cpu"), queries, gold)  # the saved model's figure
    config = json.loads((soup / "config.json").read_text())
    assert [i["from"] for i in config["average_of"]] == [str(out), str(other)]
    assert [i["dev_MAP"] for i in config["average_of"]] == m["ingredients_dev_MAP"] and m["ingredients_dev_MAP"][0] == \
        metrics["dev_MAP"] and config["average_of"][1]["init"]["from"] == str(out)
    with pytest.raises(ValueError, match="at least two"):
        average_checkpoints([out], queries, gold, tmp_path / "one")
    with pytest.raises(ValueError, match="is one of the checkpoints"):
        average_checkpoints([out, other], queries, gold, other)
    with pytest.raises(ValueError, match="not a bi-encoder"):
        average_checkpoints([out, other], queries, gold, tmp_path / "x", kind="bi-encoder")
    shorter = tmp_path / "shorter"
    shutil.copytree(out, shorter)
    cfg = json.loads((shorter / "config.json").read_text())
    cfg["model"]["max_length"] = 32
    (shorter / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="only like models average"):
        average_checkpoints([out, shorter], queries, gold, tmp_path / "x")
    assert not (tmp_path / "x").exists() and not (tmp_path / "one").exists()
    # the CLI: a clear message and exit code 2, before any dev set is scored
    p = subprocess.run(CQA + ["train", "--model", "bi-encoder", "--average-of", str(out), str(other), "--out",
                              str(tmp_path / "cli")], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert p.returncode == 2 and "is a cross-encoder, not a bi-encoder" in p.stderr
    p = subprocess.run(CQA + ["train", "--model", "bilstm", "--average-of", str(out), str(other)], capture_output=True,
                       text=True, cwd=PROJECT_ROOT)
    assert p.returncode == 2 and "--average-of are for the MiniLM models" in p.stderr
    p = subprocess.run(CQA + ["train", "--model", "cross-encoder", "--average-of", str(out), str(other), "--epochs", "2",
                              "--out", str(tmp_path / "cli")], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert p.returncode == 2 and "--epochs would be ignored" in p.stderr and not (tmp_path / "cli").exists()


def test_a_bi_encoder_mixed_with_the_packaged_start_is_wise_ft(tmp_path):
    """`--average-of CHECKPOINT base --mix a,1-a`: each weight a * fine-tuned + (1 - a) * zero-shot, in the fp16 the
    checkpoint stores; shares that are not one per checkpoint, negative or not summing to 1 are refused, and so is
    the packaged start beside a cross-encoder or first in the list."""
    import subprocess

    from safetensors.torch import load_file

    from ranking.neural.minilm import MiniLMRankerModel
    from ranking.neural.train_minilm import BASE

    from .conftest import CQA
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:4]
    groups = groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 48, 48)
    queries = [Query(t.id, t.question_text, tuple(Candidate(a.id, a.text) for a in t.answers)) for t in threads[:2]]
    gold = [Line(q.id, c.id, 0.0, i % 2 == 0) for q in queries for i, c in enumerate(q.candidates)]
    tuned = tmp_path / "tuned"  # a few steps at a high rate: weights well away from the start
    train_minilm(groups, queries, gold, tuned, MiniLMTrainConfig(kind="bi-encoder", max_steps=3, batch_size=2,
                                                                 max_length=64, device="cpu", lr=1e-3), progress=False)
    base = {k: v.half().float() for k, v in MiniLMRankerModel(MiniLMConfig(kind="bi-encoder", max_length=64),
                                                               pretrained=True).own_state_dict().items()}
    ft = {k: v.float() for k, v in load_file(str(tuned / "model.safetensors")).items()}
    assert set(ft) == set(base) and any(not torch.equal(ft[k], base[k]) for k in ft)
    m = average_checkpoints([tuned, BASE], queries, gold, tmp_path / "wise", kind="bi-encoder", mix=[0.25, 0.75])
    mixed = {k: v.float() for k, v in load_file(str(tmp_path / "wise" / "model.safetensors")).items()}
    # within the fp16 rounding of the mix itself, and far from the even mean
    assert all(torch.allclose(mixed[k], 0.25 * ft[k] + 0.75 * base[k], atol=1e-5, rtol=1e-3) for k in ft)
    off = {k: (mixed[k] - (0.25 * ft[k] + 0.75 * base[k])).abs().sum() for k in ft}
    even = {k: (mixed[k] - (ft[k] + base[k]) / 2).abs().sum() for k in ft}
    assert sum(even.values()) > 10 * sum(off.values())
    config = json.loads((tmp_path / "wise" / "config.json").read_text())
    assert [i["share"] for i in config["average_of"]] == m["mix"] == [0.25, 0.75]
    assert config["average_of"][0]["from"] == str(tuned) and "zero-shot" in config["average_of"][1]["base"]
    assert m["dev_MAP"] == dev_map_of(tmp_path / "wise", queries, gold)
    whole = average_checkpoints([tuned, BASE], queries, gold, tmp_path / "whole", mix=[1.0, 0.0])
    assert whole["dev_MAP"] == dev_map_of(tuned, queries, gold)  # all of the tuned model is the tuned model
    for bad in ([0.5], [1.5, -0.5], [0.5, 0.4]):
        with pytest.raises(ValueError, match="one share per checkpoint"):
            average_checkpoints([tuned, BASE], queries, gold, tmp_path / "x", mix=bad)
    with pytest.raises(ValueError, match="mixes only with bi-encoder checkpoints, and not first"):
        average_checkpoints([BASE, tuned], queries, gold, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    p = subprocess.run(CQA + ["train", "--model", "bi-encoder", "--mix", "0.5,0.5", "--out", str(tmp_path / "cli")],
                       capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert p.returncode == 2 and "--mix weighs the checkpoints of --average-of" in p.stderr
    p = subprocess.run(CQA + ["train", "--model", "bi-encoder", "--average-of", str(tuned), "base", "--mix", "a,b"],
                       capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert p.returncode == 2 and "not a comma-separated list of numbers" in p.stderr
    assert not (tmp_path / "cli").exists()


def dev_map_of(folder: Path, queries, gold) -> float:
    from ranking.neural.train import dev_map
    return dev_map(MiniLMRanker.from_checkpoint(folder, "cpu"), queries, gold)


def test_transitive_question_pairs_take_two_questions_relevant_to_one_as_relevant_to_each_other():
    from indexing.models import Answer, Thread
    from ranking.neural.train_minilm import transitive_question_pairs

    def related(labels):
        return [Answer(id=f"r{i}", text=f"related {i}", label=label) for i, label in enumerate(labels)]
    threads = [Thread(id="Q1", subject="original", answers=related(["Bad", "Good", "Bad", "Good", "Good"])),
               Thread(id="Q2", subject="one relevant", answers=related(["Good", "Bad"])),
               Thread(id="Q3", subject="all relevant", answers=related(["Good", "Good"])),
               Thread(id="Q4", subject="none relevant", answers=related(["Bad", "Bad"]))]
    (t,) = transitive_question_pairs(threads)  # Q2-Q4 imply nothing with both kinds
    assert t.id == "Q1>r1" and t.question_text == "related 1"  # the first relevant one in search order asks
    assert [(a.id, a.label) for a in t.answers] == [("r0", "Bad"), ("r2", "Bad"), ("r3", "Good"), ("r4", "Good")]


def test_held_out_scores_come_from_the_fold_model_that_held_each_question_out(tiny_cross, tmp_path):
    import shutil

    from ranking.neural.train_minilm import held_out_scores
    out, _, queries = tiny_cross
    fold = tmp_path / "fold-0"
    shutil.copytree(out, fold)
    held = [queries[1].id, queries[0].id]
    config = json.loads((fold / "config.json").read_text())
    (fold / "config.json").write_text(json.dumps({**config, "held_out_questions": sorted(held)}))
    got = held_out_scores([fold], [held], queries, "cpu", "fold")
    assert set(got) == set(held)  # only the fold's questions, each by the model that held it out
    alone = MiniLMRanker.from_checkpoint(out, "cpu").score(queries[:2])
    assert [list(got[q.id]) for q in queries[:2]] == [list(r) for r in alone]
    with pytest.raises(ValueError, match="did not hold out fold 0's questions"):
        held_out_scores([out], [held], queries, "cpu", "fold")  # a model with no such record scores nothing


def test_a_missing_or_foreign_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_minilm(tmp_path)
    with pytest.raises(CheckpointError, match="not a checkpoint"):  # not the weights file's bare FileNotFoundError
        MiniLMRanker.from_checkpoint(tmp_path, "cpu")
    assert issubclass(CheckpointError, ValueError)  # what every command reports as a one-line error
    (tmp_path / "config.json").write_text(json.dumps({"kind": "bilstm-attention", "format_version": 1}))
    with pytest.raises(CheckpointError, match="not a MiniLM ranker checkpoint"):
        load_minilm(tmp_path)


def test_score_cache_answers_repeats_without_the_model(tiny_cross, tmp_path):
    out, _, queries = tiny_cross
    ranker = MiniLMRanker.from_checkpoint(out, "cpu", cache_dir=tmp_path)
    first = ranker.score(queries)
    calls = []
    original = ranker.score_pairs
    ranker.score_pairs = lambda pairs: calls.append(len(pairs)) or original(pairs)
    assert ranker.score(queries) == first and calls == []
    extra = Query("new", "a question never seen", (Candidate("x", "an answer never seen"),))
    assert ranker.score(queries + [extra])[:-1] == first and calls == [1]  # only the new pair is scored


def _dev_slice(n=24):
    s = Settings()
    xml, gold_path = BENCHMARKS["semeval2016-dev-A"].paths(s.semeval_dir)
    queries = queries_for(xml, "A")[:n]
    ids = {q.id for q in queries}
    return queries, [g for g in read_lines(gold_path) if g.qid in ids]


@pytest.mark.parametrize("name", ["cross-encoder", "bi-encoder"])
def test_committed_checkpoint_beats_the_given_order_on_a_dev_slice(name, semeval, tmp_path):
    queries, gold = _dev_slice()
    ranker = get_ranker(name, Settings(data_dir=tmp_path))
    ours = score(gold, align_to_gold(predictions(queries, ranker), gold)).MAP
    base = score(gold, align_to_gold(predictions(queries, IRBaseline()), gold)).MAP
    assert ours > base + 0.03, (ours, base)


def test_score_cache_misses_when_config_code_device_or_precision_change(tiny_cross, tmp_path, monkeypatch):
    import shutil

    from ranking.neural import ranker as R
    from ranking.neural.inference import Inference
    out, _, queries = tiny_cross
    fp32, int8 = Inference(), Inference("onnx", "int8")
    base = R.score_cache_key(out, "cpu", 128, fp32)
    assert base == R.score_cache_key(out, "cpu", 128, fp32)
    assert len({base, R.score_cache_key(out, "cuda", 128, fp32), R.score_cache_key(out, "cpu", 96, fp32),
                R.score_cache_key(out, "cpu", 128, int8)}) == 4
    changed = tmp_path / "changed"
    shutil.copytree(out, changed)
    cfg = json.loads((changed / "config.json").read_text())
    cfg["note"] = "same weights, another config"
    (changed / "config.json").write_text(json.dumps(cfg))
    assert R.score_cache_key(changed, "cpu", 128, fp32) != base
    monkeypatch.setattr(R, "SCORING_CODE_VERSION", R.SCORING_CODE_VERSION + 1)
    assert R.score_cache_key(out, "cpu", 128, fp32) != base
    # a new code version reads no score the old one cached
    monkeypatch.undo()
    MiniLMRanker.from_checkpoint(out, "cpu", cache_dir=tmp_path / "c").score(queries)
    monkeypatch.setattr(R, "SCORING_CODE_VERSION", R.SCORING_CODE_VERSION + 1)
    again = MiniLMRanker.from_checkpoint(out, "cpu", cache_dir=tmp_path / "c")
    calls = []
    original = again.score_pairs
    again.score_pairs = lambda pairs: calls.append(len(pairs)) or original(pairs)
    again.score(queries)
    assert calls == [sum(len(q.candidates) for q in queries)]


def test_service_reranker_is_the_default_without_a_cache_and_with_per_request_statistics(semeval, tmp_path):
    s = Settings(data_dir=tmp_path)
    ranker = service_reranker(s)
    assert ranker.name == s.default_ranker == "cascade"
    parts = list(walk(ranker.parts))  # every part, parts of parts included
    # (a MiniLM part's name says its variant where auto chose one: cross-encoder[torch-bf16] on a CPU with bf16)
    assert {p.name.partition("[")[0] for p in parts} >= {"bilstm+signals", "cross-encoder+signals", "cross-encoder",
                                                         "bi-encoder", "bm25"}
    assert all(getattr(p, "cache_dir", None) is None for p in parts)
    assert all(p.per_query for p in parts if hasattr(p, "per_query"))


def test_score_memo_scores_only_new_pairs_once_and_drops_the_least_recent():
    from ranking.neural.memo import ScoreMemo
    seen = []

    def model(pairs):
        seen.append(list(pairs))
        return [float(len(q) + 10 * len(a)) for q, a in pairs]

    memo = ScoreMemo(capacity=3)
    assert memo.scores([("q", "a"), ("q", "bb"), ("q", "a")], model) == [11.0, 21.0, 11.0]
    assert seen == [[("q", "a"), ("q", "bb")]]  # a pair asked twice in one call is scored once
    assert memo.scores([("q", "bb"), ("q", "a")], model) == [21.0, 11.0] and len(seen) == 1
    assert memo.stats() == {"pairs": 2, "capacity": 3, "hits": 3, "shared_hits": 0, "misses": 2}
    memo.scores([("q", "ccc"), ("qq", "a")], model)  # 4 pairs for 3 places: ("q", "bb"), used least lately, goes
    assert memo.stats()["pairs"] == 3 and seen[-1] == [("q", "ccc"), ("qq", "a")]
    memo.scores([("q", "a"), ("q", "bb")], model)
    assert seen[-1] == [("q", "bb")]
    assert memo.scores([("q\0", "a"), ("q", "\0a")], model) == [12.0, 21.0]  # where the question ends counts
    counted = memo.stats()
    memo.clear()  # nothing kept, so the next call scores again; the counts stay
    assert memo.stats() == {**counted, "pairs": 0}
    memo.scores([("q", "a")], model)
    assert seen[-1] == [("q", "a")]
    with pytest.raises(ValueError, match="at least one pair"):
        ScoreMemo(capacity=0)


def test_score_store_shares_scores_between_processes_by_model_and_keeps_the_newest(tmp_path):
    """Two stores on one file stand for two serving processes: what one memo's model scored, another memo of the
    same model finds without a model call; a memo of another model does not; the file keeps the newest pairs."""
    from ranking.neural.memo import ScoreMemo, ScoreStore
    calls = []

    def model(pairs):
        calls.append(list(pairs))
        return [float(len(a)) for _, a in pairs]

    path = tmp_path / "cache" / "score-store.sqlite3"
    one = ScoreMemo(10, model="m1", store=ScoreStore(path, capacity=4))
    assert one.scores([("q", "a"), ("q", "bb")], model) == [1.0, 2.0]
    one.store.flush()
    assert one.store.stats()["written"] == 2 and one.store.stats()["error"] == ""
    other_process = ScoreStore(path, capacity=4)
    two = ScoreMemo(10, model="m1", store=other_process)
    assert two.scores([("q", "bb"), ("q", "a"), ("q", "ccc")], model) == [2.0, 1.0, 3.0]
    assert calls[-1] == [("q", "ccc")]  # only the pair neither process had scored
    assert two.stats() == {"pairs": 3, "capacity": 10, "hits": 2, "shared_hits": 2, "misses": 1}
    two.scores([("q", "bb")], model)  # now in its own memory: no store read counted
    assert two.stats()["shared_hits"] == 2 and two.stats()["hits"] == 3
    retrained = ScoreMemo(10, model="m2", store=other_process)
    retrained.scores([("q", "a")], model)
    assert calls[-1] == [("q", "a")] and retrained.stats()["shared_hits"] == 0  # another model's scores are never read
    for i in range(6):
        two.scores([("new", "x" * (i + 1))], model)
    other_process.flush()
    import sqlite3
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM scores").fetchone()[0] <= 4
    fresh = ScoreMemo(10, model="m1", store=ScoreStore(path, capacity=4))
    fresh.scores([("new", "xxxxxx"), ("q", "a")], model)
    assert fresh.stats()["shared_hits"] == 1 and calls[-1] == [("q", "a")]  # the oldest went first
    with pytest.raises(ValueError, match="model's identity"):
        ScoreMemo(10, store=other_process)


def test_vector_store_gives_another_process_the_exact_vectors_an_encoder_made(tmp_path):
    """Two vector stores on one file stand for two serving processes: the texts one encoder's memo encoded, the
    other process's memo of the same encoder reads back bit for bit (float32 or float64), encoding only the texts
    neither had; a memo keyed by another encoder's identity reads none of them; the file keeps the newest."""
    from ranking.neural.memo import ScoreMemo, ScoreStore, VectorStore, memo_vectors
    calls = []

    def encode(dtype):
        def run(texts):
            calls.append(list(texts))
            return np.stack([np.linspace(len(t), 1 / 3, 4, dtype=dtype) for t in texts])
        return run

    path = tmp_path / "cache" / "vector-store.sqlite3"
    one = ScoreMemo(10, model="m1", store=VectorStore(path, capacity=4))
    made = memo_vectors(one, ["a", "bb"], "enc", encode(np.float32))
    one.store.flush()
    assert one.store.stats()["written"] == 2
    two = ScoreMemo(10, model="m1", store=VectorStore(path, capacity=4))
    got = memo_vectors(two, ["bb", "a", "ccc"], "enc", encode(np.float32))
    assert calls[-1] == ["ccc"] and two.stats()["shared_hits"] == 2
    assert all(g.dtype == np.float32 and np.array_equal(g, m) for g, m in zip(got, [made[1], made[0]]))
    assert all(v.base is None for v in two._scores.values())  # a kept row keeps nothing else alive
    assert memo_vectors(ScoreMemo(10, model="m2", store=two.store), ["a"], "enc", encode(np.float32))
    assert calls[-1] == ["a"]  # another encoder identity: encoded again
    wide = memo_vectors(ScoreMemo(10, model="m3", store=two.store), ["dddd"], "enc", encode(np.float64))[0]
    two.store.flush()
    encoded = len(calls)
    back = memo_vectors(ScoreMemo(10, model="m3", store=VectorStore(path, capacity=4)), ["dddd"], "enc",
                        encode(np.float64))[0]
    assert back.dtype == np.float64 and np.array_equal(back, wide) and len(calls) == encoded
    import sqlite3
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM vectors").fetchone()[0] <= 4
    assert VectorStore.at(path, 4) is VectorStore.at(path, 4)  # one per process and file
    assert ScoreStore.at(tmp_path / "other.sqlite3", 4) is not VectorStore.at(tmp_path / "other.sqlite3", 4)


def test_score_store_that_cannot_be_read_or_written_never_costs_a_score(tmp_path, caplog):
    """A damaged file is moved aside and the store starts again; a folder that cannot hold it turns the store off,
    says why, and the memo scores with the model as without a store."""
    from ranking.neural.memo import ScoreMemo, ScoreStore
    path = tmp_path / "score-store.sqlite3"
    path.write_bytes(b"not a database " * 100)
    store = ScoreStore(path, capacity=10)
    assert store.stats()["error"] == "" and (tmp_path / "score-store.sqlite3.unreadable").exists()
    memo = ScoreMemo(10, model="m", store=store)
    assert memo.scores([("q", "a")], lambda pairs: [7.0] * len(pairs)) == [7.0]
    store.flush()
    assert store.stats()["written"] == 1
    (tmp_path / "blocker").write_text("a file where the store's folder should be")
    off = ScoreStore(tmp_path / "blocker" / "score-store.sqlite3", capacity=10)
    assert off.stats()["error"] and "off" in caplog.text
    memo = ScoreMemo(10, model="m", store=off)
    assert memo.scores([("q", "a"), ("q", "b")], lambda pairs: [5.0] * len(pairs)) == [5.0, 5.0]
    off.flush()  # nothing queued, nothing waited for
    assert memo.stats()["misses"] == 2 and off.stats()["written"] == 0


def test_serving_reranker_rescoring_a_thread_costs_the_models_only_its_new_comments(semeval, tmp_path):
    """The service's /rerank ranker remembers the pairs its MiniLM models scored: the same thread again costs
    them nothing and gives the same scores; the thread with one more comment costs at most that comment, and
    scores as a ranker without the memo does. A first view costs each model one pair per comment; the bi-encoder's
    pairs are read twice, by its part of the layer and by closest-comment-margin (round 31), the second time from
    the memo."""
    s = Settings(data_dir=tmp_path, inference="torch-fp32")
    ranker = service_reranker(s)
    memos = {r.name: r.memo for r in walk([ranker]) if getattr(r, "memo", None) is not None}
    assert set(memos) == {"cross-encoder", "bi-encoder", "bilstm"}
    assert all(m.capacity == s.score_memo_pairs for m in memos.values())
    queries, _ = _dev_slice(2)
    thread, other = queries
    first = ranker.score([thread])
    cold = {n: m.stats() for n, m in memos.items()}
    assert all(st["misses"] == len(thread.candidates) for st in cold.values()), cold
    assert {n: st["hits"] for n, st in cold.items()} == {"cross-encoder": 0, "bilstm": 0,
                                                         "bi-encoder": len(thread.candidates)}, cold
    assert ranker.score([thread]) == first
    assert all(m.stats()["misses"] == cold[n]["misses"] for n, m in memos.items())  # no model call
    grown = Query(thread.id, thread.text, thread.candidates + other.candidates[:1], thread.meta)
    got = ranker.score([grown])[0]
    assert all(m.stats()["misses"] - cold[n]["misses"] <= 1 for n, m in memos.items())
    plain = service_reranker(s.model_copy(update={"score_memo_pairs": 0}))
    assert all(getattr(r, "memo", None) is None for r in walk([plain]))
    np.testing.assert_allclose(got, plain.score([grown])[0], atol=1e-4)


def test_served_reranker_scores_a_thread_as_the_evaluated_ranker_does(semeval, tmp_path):
    """The path a user touches is the path we measure: POST /rerank's ranker, given one thread at a time, gives the
    scores `cqa evaluate` computes for the same threads scored together (the learned layers' BM25 takes its term
    statistics from each thread's own comments in both; once the evaluation pooled them over the whole file)."""
    s = Settings(data_dir=tmp_path, inference="torch-fp32")
    queries, _ = _dev_slice(3)
    evaluated = get_ranker(s.default_ranker, s).score(queries)
    served = service_reranker(s.model_copy(update={"score_memo_pairs": 0}))
    for q, want in zip(queries, evaluated):
        np.testing.assert_allclose(served.score([q])[0], want, atol=1e-4)


class _Lookup:
    """An answer ranker that scores a candidate by a table keyed by (question, candidate id)."""
    name = "lookup"

    def __init__(self, table):
        self.table = table

    def score(self, queries):
        return [[self.table.get((q.text, c.id), 0.0) for c in q.candidates] for q in queries]


def test_related_answers_combines_new_question_own_question_and_thread_relevance():
    cands = (Candidate("c1", "x", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c2", "y", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c3", "z", {"thread_question": "t2", "thread_rank": 5, "thread_id": "T2"}))
    q = Query("q", "new", cands)
    table = {("new", "c1"): 0.0, ("new", "c2"): 1.0, ("new", "c3"): 2.0,
             ("t1", "c1"): 3.0, ("t1", "c2"): -3.0, ("t2", "c3"): 0.0,
             ("new", "T1"): 0.0, ("new", "T2"): 5.0}  # the thread ranker finds thread T2 the most similar

    def run(weights, query=q, thread=True):
        return RelatedAnswersRanker(_Lookup(table), weights, thread_ranker=_Lookup(table) if thread else None).score([query])[0]

    alone = run((1.0, 0, 0, 0, 0))
    assert alone.index(max(alone)) == 2  # the new question alone prefers c3
    own = run((1.0, 2.0, 0, 0, 0))
    assert own.index(max(own)) == 0  # c1 answers its own thread's question best
    ranked = run((0.0, 0, 3.0, 0, 0))
    assert ranked[2] < ranked[0] == ranked[1]  # c3's thread ranked 5th pulls it down
    similar = run((0.0, 0, 0, 1.0, 0))
    assert similar[2] > similar[0] == similar[1]  # ... but its question is the most similar
    assert run((0.0, 0, 0, 1.0, 0), thread=False) == [0.0, 0.0, 0.0]  # no thread ranker: no similarity term
    bare = Query("q", "new", tuple(Candidate(c.id, c.text) for c in cands))  # no thread metadata at all
    assert run((1.0, 2.0, 3.0, 1.0, 1.0), bare) == pytest.approx([-1.2247, 0, 1.2247], abs=1e-3)


def test_related_answers_without_a_search_order_weighs_no_rank_and_says_so_to_its_thread_ranker():
    """Threads in no search order (meta search_order false, POST /rerank/answers' field): the thread's rank and the
    place of a comment count 0, and the thread ranker gets the query's metadata, so a subtask B fusion ranks the
    thread questions by its unordered weights."""
    cands = (Candidate("c1", "x", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c2", "y", {"thread_question": "t2", "thread_rank": 5, "thread_id": "T2"}))
    ordered, unordered = Query("q", "new", cands), Query("q", "new", cands, {"search_order": False})
    said = []

    class Threads(_Lookup):
        def score(self, queries):
            said.extend(q.meta.get("search_order") for q in queries)
            return super().score(queries)
    orders = [FEATURES.index("thread_rank"), FEATURES.index("retrieval_rank")]
    with_order, without = (feature_columns([x], _Lookup({}), Threads({}))[0] for x in (ordered, unordered))
    assert said == [None, False] and with_order[:, orders].any() and not without[:, orders].any()
    table = {("new", "c1"): 1.0, ("new", "c2"): 0.0, ("t1", "c1"): 0.0, ("t2", "c2"): 1.0}
    ranker = RelatedAnswersRanker(_Lookup(table), (1.0,), unordered_weights=(0.0, 1.0))  # own thread's question only
    (a,), (b,) = ranker.score([ordered]), ranker.score([unordered])
    assert a[0] > a[1] and b[1] > b[0]  # the unordered weights rank only the query that says so
    assert RelatedAnswersRanker(_Lookup(table), (1.0,)).score([unordered]) == [a]  # without them: the same weights


def test_thread_answered_is_the_threads_best_new_question_score_and_quality_x_similarity_a_product():
    """thread_answered (rule 15, weight 0 as shipped): each comment gets its thread's best answer-ranker score against
    the new question, z-scored per question; a comment that comes without its thread gets 0 before the z-score."""
    cands = (Candidate("c1", "x", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c2", "y", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c3", "z", {"thread_question": "t2", "thread_rank": 2, "thread_id": "T2"}),
             Candidate("c4", "w", {}))
    table = {("new", "c1"): 1.0, ("new", "c2"): 3.0, ("new", "c3"): 2.0, ("new", "c4"): 5.0}
    col = FEATURES.index("thread_answered")
    X = feature_columns([Query("q", "new", cands)], _Lookup(table))[0]
    raw = np.asarray([3.0, 3.0, 2.0, 0.0])
    assert X[:, col] == pytest.approx((raw - raw.mean()) / raw.std())
    assert not any(PRESETS["related-answers"].params()["weights"][col:])  # rules 15-17 refused it and the next
    # quality_x_similarity: own_quality's z-score times the thread similarity's above its minimum, z-scored
    quality = type("Quality", (), {"score": lambda self, qs: [[{"c1": 1.0, "c2": 3.0, "c3": 2.0}[c.id]
                                                              for c in x.candidates] for x in qs]})()
    threads = type("Threads", (), {"score": lambda self, qs: [[{"t1": 2.0, "t2": 1.0}[c.text] for c in x.candidates]
                                                             for x in qs]})()
    X = feature_columns([Query("q", "new", cands[:3])], _Lookup(table), threads, quality)[0]
    qz, sz = X[:, FEATURES.index("own_quality")], X[:, FEATURES.index("thread_similarity")]
    prod = qz * (sz - sz.min())
    assert X[:, FEATURES.index("quality_x_similarity")] == pytest.approx((prod - prod.mean()) / prod.std())


def test_related_answers_weighs_each_comment_within_its_own_thread_by_a_quality_ranker():
    """own_quality: the quality ranker scores each thread's comments as one query (the thread's question, its
    comments in the given order), and a file that names it builds it as a part."""
    cands = (Candidate("c1", "x", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c2", "y", {"thread_question": "t1", "thread_rank": 1, "thread_id": "T1"}),
             Candidate("c3", "z", {"thread_question": "t2", "thread_rank": 2, "thread_id": "T2"}))
    q = Query("q", "new", cands)
    seen = []

    class Quality:
        def score(self, queries):
            seen.extend((x.text, tuple(c.id for c in x.candidates)) for x in queries)
            return [[{"c1": 1.0, "c2": 3.0, "c3": 2.0}[c.id] for c in x.candidates] for x in queries]

    flat = _Lookup({})
    col = FEATURES.index("own_quality")
    X = feature_columns([q], flat, None, Quality())[0]
    assert seen == [("t1", ("c1", "c2")), ("t2", ("c3",))]
    assert X[:, col] == pytest.approx(np.asarray([-1.2247, 1.2247, 0.0]), abs=1e-3)
    assert not feature_columns([q], flat)[0][:, col].any()  # no quality ranker: the column is 0
    weights = [0.0] * (col + 1)
    weights[col] = 1.0
    scores = RelatedAnswersRanker(flat, tuple(weights), quality_ranker=Quality()).score([q])[0]
    assert scores.index(max(scores)) == 1
    shipped = PRESETS["related-answers"].params()
    if shipped.get("quality_ranker"):  # the shipped file names its parts, and each is built in its place
        ranker = get_ranker("related-answers", Settings())
        assert ranker.quality_ranker.name == shipped["quality_ranker"]
        assert ranker.thread_ranker.name == shipped["thread_ranker"] and ranker.parts[-1] is ranker.quality_ranker


@pytest.fixture(scope="module")
def winners_data_dir(tmp_path_factory) -> Path:
    """The data folder of the default rankers' CLI runs: empty when the first of them starts. The metadata-free A test
    scores in it afterwards, so the pair scores and the bi-encoder's text vectors test-A's run stored (keyed by weights,
    settings and texts: the same scores as scoring anew) are read, not computed twice."""
    return tmp_path_factory.mktemp("winners") / "var"


@pytest.mark.slow
@pytest.mark.parametrize("benchmark,target,documented", [("semeval2016-test-A", 0.800, 0.8307),
                                                         ("semeval2016-test-B", 0.770, 0.7947),
                                                         ("semeval2016-test-C", 0.560, 0.5755)])
def test_default_rankers_beat_the_2016_winners(benchmark, target, documented, cli_env, winners_data_dir):
    """The shipped default of each subtask, run by the CLI from a fresh data folder (test-A's run, the first, starts
    with no score store; B and C score other pairs with other models). A: the round-26
    cross-encoder under round 31's layer, which weighs each comment's closest neighbour in its thread (0.8315 before;
    0.8271 before round 26, 0.8272 in bf16; on a CPU with bf16 instructions, where auto runs the cascade's
    cross-encoder in bf16, 0.8307 too, round 53). C runs torch-fp32 everywhere since round 53 (only bi-encoders; it gave
    0.5747 where auto ran them in bf16, rounds 23-52)."""
    import subprocess

    from .conftest import CQA
    p = subprocess.run(CQA + ["evaluate", "--benchmark", benchmark, "--json"],
                       env={**cli_env, "CQA_DATA_DIR": str(winners_data_dir)}, capture_output=True, text=True, check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["MAP"] >= target and out["MAP"] == pytest.approx(documented, abs=0.002), out


@pytest.mark.slow
def test_default_A_ranker_holds_up_without_metadata(winners_data_dir):
    """On test-A without user ids and in a shuffled order, with no comment's time from which to recover the thread's
    order (``-nodates``: the variant that was ``-nometa-shuffled`` before round 30 recovered the order from the times),
    the default subtask A ranker stays above each of its neural parts alone and reproduces the documented figure
    (docs/BENCHMARKS.md, robustness table), and so the documented loss against the full-metadata file: 0.0086 MAP since
    round 31 (0.8307 -> 0.8221; 0.0091 on dev, where the layer was chosen), within the 0.01 issue 16 allows, the layer
    weighing each comment's closest neighbour in its thread (closest-comment, closest-comment-margin); rounds 26-30 lost
    0.0111 (0.8315 -> 0.8204), round 8 0.0104 (0.8271 -> 0.8167; in bf16 0.0103-0.0105), round 3 0.0101 (0.8253 ->
    0.8152), round 2 0.0081 (0.8115 -> 0.8034). Scored in the default rankers' data folder: after their test-A run,
    the cascade's cross-encoder pairs are in its score store and the bi-encoder's vectors of the texts (which its
    closest-comment parts read) in its vector store (the same texts without the metadata)."""
    from ranking.evaluation.runner import run_named
    from tests.conftest import SEMEVAL
    settings = Settings(data_dir=winners_data_dir, shared_data_dir=SEMEVAL.parent)
    bench = "semeval2016-test-A-nometa-shuffled-nodates"
    default = run_named(settings, bench, progress=False)
    parts = {r: run_named(settings, bench, r, progress=False)["MAP"] for r in ("cross-encoder", "bi-encoder")}
    assert default["ranker"] == "cascade"
    assert default["MAP"] > max(parts.values()), (default["MAP"], parts)
    assert default["MAP"] == pytest.approx(0.8221, abs=0.002)
    assert parts == pytest.approx({"cross-encoder": 0.7794, "bi-encoder": 0.8009}, abs=0.002)
    full = run_named(settings, "semeval2016-test-A", progress=False)["MAP"]
    assert full - default["MAP"] == pytest.approx(0.0086, abs=0.002), (full, default["MAP"])


@pytest.mark.slow
def test_default_B_ranker_holds_up_without_a_search_order(settings):
    """On test-B with the related questions in another order, said so (search_order false, as POST
    /rerank/questions takes it), the default subtask B ranker uses its unordered weights (chosen on
    dev-B-unordered) and stays at or above its best neural part alone, and reproduces the documented figure
    (docs/BENCHMARKS.md, round 12: 0.7766; 0.7553 when the order was weighed anyway)."""
    from ranking.evaluation.runner import run_named
    bench = "semeval2016-test-B-unordered"
    default = run_named(settings, bench, progress=False)
    alone = run_named(settings, bench, "question-bi-encoder", progress=False)["MAP"]
    assert default["ranker"] == "question-answers-fusion-indexed" and default["MAP"] >= alone - 1e-9, \
        (default["MAP"], alone)
    assert default["candidates_with_stored_comments"] == 0  # no generation: the router's question-fusion ranked it
    assert default["MAP"] == pytest.approx(0.7766, abs=0.002)


def test_question_answers_fusion_reads_the_comments_where_the_candidates_carry_them(settings):
    """`question-answers-fusion` (rule 12, not the default): a new question whose candidate questions carry their
    threads' comments is ranked by `question-fusion+answers`, which weighs how well the comments answer it (the subtask
    A bi-encoder's best cosine); one whose candidates carry none by `question-fusion`, unchanged. One call, mixed."""
    from dataclasses import replace
    xml, _ = BENCHMARKS["semeval2016-dev-B"].paths(settings.semeval_dir)
    given = queries_for(xml, "B")[:6]
    assert all(c.meta["comments"] for q in given for c in q.candidates)
    bare = [replace(q, id=q.id + "-bare", candidates=tuple(
        replace(c, meta={k: v for k, v in c.meta.items() if k != "comments"}) for c in q.candidates)) for q in given]
    routed = get_ranker("question-answers-fusion", settings).score([x for pair in zip(given, bare) for x in pair])
    with_comments = get_ranker("question-fusion+answers", settings).score(given)
    plain = get_ranker("question-fusion", settings).score(bare)
    assert np.allclose(routed[0::2], with_comments) and np.allclose(routed[1::2], plain)
    # the comments change the ranking: the fusion with them is not the plain one
    assert not np.allclose(with_comments, get_ranker("question-fusion", settings).score(given))
    weights = PRESETS["question-fusion+answers"].params()["weights"]
    assert weights["answers-model-max"] > 0 and weights["question-bi-encoder"] > 0


def test_the_indexed_router_reads_the_comments_only_where_the_live_generation_stores_their_vectors(settings):
    """`question-answers-fusion-indexed` (rule 14): where the data folder's live generation indexes every related thread
    of a dev-B question with the comments given, `cqa evaluate` hands the candidates their stored vectors (as
    /rerank/questions does) and the question is ranked by `question-fusion+answers` (the texts' scores); a question
    whose threads the forum does not index, or given without the generation, by `question-fusion`."""
    from indexing.loaders import load_semeval
    from indexing.reindex import reindex
    from indexing.store import ThreadStore
    from ranking.evaluation.benchmarks import related_threads
    from ranking.evaluation.runner import indexed_by, run_named
    from ranking.pipeline import as_given_to
    from ranking.rankers import reads_comments
    bench = BENCHMARKS["semeval2016-dev-B"]
    xml, _ = bench.paths(settings.semeval_dir)
    queries = queries_for(xml, "B")[:2]
    assert indexed_by(settings, "B") is None  # no generation yet: the candidates as the file gives them
    with ThreadStore(settings.store_path) as store:
        store.upsert(related_threads(load_semeval(xml, strict=True))[queries[0].id])
    reindex(settings.model_copy(update={"dense_encoder": "base"}), progress=False)
    given = as_given_to(indexed_by(settings, "B"), queries)
    stored = [["comment_answer_vectors" in c.meta for c in q.candidates if c.meta["comments"]] for q in given]
    assert stored[0] and all(stored[0]) and not any(stored[1])
    router = get_ranker("question-answers-fusion-indexed", settings)
    answers, plain = get_ranker("question-fusion+answers", settings), get_ranker("question-fusion", settings)
    scores = router.score(given)
    assert np.allclose(scores[0], answers.score(queries[:1])[0], atol=1e-4)
    assert np.allclose(scores[1], plain.score(queries[1:])[0], atol=1e-4)
    assert not np.allclose(scores[0], plain.score(queries[:1])[0], atol=1e-3)  # the comments count
    assert [reads_comments(router, q) for q in given] == [True, False]
    assert router.route(queries[0]).name == "question-fusion" and not reads_comments(router, queries[0])  # not stored
    assert not reads_comments(plain, given[0]) and reads_comments(answers, queries[0])
    report = run_named(settings, bench.name, "question-answers-fusion-indexed", progress=False)
    assert report["candidates_with_stored_comments"] == len(stored[0]) and report["generation"]


def test_the_C_ranker_hands_its_thread_ranker_each_thread_with_its_comments_as_given():
    """A thread ranker that weighs what answered a thread (question-fusion+answers) gets each related thread with the
    texts of its comments in the request, in the threads' search order."""
    seen = []

    class Spy(_Lookup):
        def score(self, queries):
            seen.extend(queries)
            return super().score(queries)
    cands = (Candidate("c1", "x", {"thread_question": "t1", "thread_rank": 2, "thread_id": "T1"}),
             Candidate("c2", "y", {"thread_question": "t2", "thread_rank": 1, "thread_id": "T2"}),
             Candidate("c3", "z", {"thread_question": "t1", "thread_rank": 2, "thread_id": "T1"}))
    RelatedAnswersRanker(_Lookup({}), (1.0, 0, 0, 1.0, 0), thread_ranker=Spy({})).score([Query("q", "new", cands)])
    assert [(c.id, c.text, c.meta["comments"], c.meta["thread_rank"]) for c in seen[0].candidates] == [
        ("T2", "t2", ("y",), 1), ("T1", "t1", ("x", "z"), 2)]


def test_the_forum_adaptation_reads_no_2016_question_and_writes_a_start_for_the_bi_encoder(semeval, tmp_path, cli_env):
    """scripts/adapt_minilm.py (rule 27): its (subject, body) pairs come from the 2015 files only, none with a text of
    a 2016 question (the B figures' questions, original or related), each once; its checkpoint is a bi-encoder that
    training starts from (``init_from``) and that scores as it was saved."""
    import subprocess
    import sys

    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    from adapt_minilm import adaptation_pairs, measured_texts
    pairs, left_out = adaptation_pairs(semeval)
    measured = measured_texts(semeval)
    assert len(pairs) > 2000 and left_out > 0 and len(set(pairs)) == len(pairs)
    assert not any(" ".join(x.split()) in measured for p in pairs for x in p)
    b_train = load(semeval / "train" / "SemEval2016-Task3-CQA-QL-train-part2.xml").threads
    assert {" ".join(t.body.split()) for t in b_train if t.body.strip()} <= measured  # the guard sees the B questions
    out = tmp_path / "adapted"
    p = subprocess.run([sys.executable, "scripts/adapt_minilm.py", "--out", str(out), "--max-steps", "1",
                        "--batch-size", "4", "-q"], cwd=PROJECT_ROOT, env=cli_env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["steps"] == 1
    p = subprocess.run([sys.executable, "scripts/adapt_minilm.py"], cwd=PROJECT_ROOT, env=cli_env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 2 and "--out is required unless --score is given" in p.stderr
    model, config = load_minilm(out)
    assert model.config.kind == "bi-encoder" and config["train"]["task"] == "adapt"
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:3]
    groups = groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 48, 48)
    queries = [Query(t.id, t.question_text, tuple(Candidate(a.id, a.text) for a in t.answers)) for t in threads]
    gold = [Line(q.id, c.id, 0.0, True) for q in queries for c in q.candidates]
    cfg = MiniLMTrainConfig(kind="bi-encoder", max_steps=1, batch_size=2, max_length=64, device="cpu", lr=0.0,
                            init_from=str(out))
    train_minilm(groups, queries, gold, tmp_path / "next", cfg, progress=False)
    assert MiniLMRanker.from_checkpoint(tmp_path / "next", "cpu").score(queries) == \
        MiniLMRanker.from_checkpoint(out, "cpu").score(queries)
