import json

import pytest
import torch

from indexing.config import PROJECT_ROOT
from indexing.loaders import load
from ranking.candidates import Candidate, Query
from ranking.evaluation.scorer import Line
from ranking.neural.bilstm import BiLSTMConfig
from ranking.neural.checkpoint import CheckpointError
from ranking.neural.checkpoint import load as load_checkpoint
from ranking.neural.data import groups_from_threads
from ranking.neural.losses import CosineHingeLoss
from ranking.neural.ranker import BiLSTMRanker
from ranking.neural.train import TrainConfig, train_bilstm
from ranking.neural.vocab import encode_texts


def test_cosine_hinge_loss_by_hand():
    q = torch.tensor([[1.0, 0.0]])
    pos = torch.tensor([[0.6, 0.8]])  # cos = 0.6
    neg = torch.tensor([[0.8, 0.6]])  # cos = 0.8
    cp = torch.nn.functional.cosine_similarity(q, pos)
    cn = torch.nn.functional.cosine_similarity(q, neg)
    assert CosineHingeLoss(0.2)(cp, cn).item() == pytest.approx(0.2 - 0.6 + 0.8)
    assert CosineHingeLoss(0.1)(cn, cp).item() == pytest.approx(0.0)  # margin met: no loss
    both = CosineHingeLoss(0.3)(torch.tensor([0.9, 0.1]), torch.tensor([0.1, 0.5]))
    assert both.item() == pytest.approx((0.0 + 0.7) / 2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:12]
    cfg = BiLSTMConfig(hidden=16, dropout=0.0, max_question_len=24, max_answer_len=24)
    groups = groups_from_threads(threads, encode_texts, cfg.max_question_len, cfg.max_answer_len)
    queries = [Query(t.id, t.question_text, tuple(Candidate(a.id, a.text) for a in t.answers)) for t in threads[:4]]
    gold = [Line(q.id, c.id, 0.0, a.label == "Good") for q, t in zip(queries, threads) for c, a in zip(q.candidates, t.answers)]
    out = tmp_path_factory.mktemp("ckpt")
    metrics = train_bilstm(groups, queries, gold, out, TrainConfig(epochs=6, lr=1e-2, batch_size=8, negatives=2,
                                                                   seed=3, device="cpu"), cfg, progress=False)
    return out, metrics, queries


def test_tiny_training_loss_falls(tiny):
    out, metrics, _ = tiny
    epochs = metrics["epochs"]
    assert len(epochs) == 6 and epochs[-1]["loss"] < epochs[0]["loss"] * 0.7
    logged = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in logged] == [1, 2, 3, 4, 5, 6] and all(0 <= e["dev_MAP"] <= 1 for e in logged)
    assert metrics["best_epoch"] == max(epochs, key=lambda e: e["dev_MAP"])["epoch"]


def test_checkpoint_directory_round_trip(tiny):
    out, metrics, queries = tiny
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "training_log.jsonl", "metrics.json"}
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["hidden"] == 16 and config["train"]["margin"] == 0.2
    assert (out / "model.safetensors").stat().st_size < 1_000_000  # no embedding matrix inside
    a = BiLSTMRanker.from_checkpoint(out, "cpu")
    b = BiLSTMRanker.from_checkpoint(out, "cpu")
    s1, att = a.score_with_attention(queries)
    s2 = b.score(queries)
    assert s1 == s2 and all(-1 <= x <= 1 for row in s1 for x in row)
    tokens, weights = zip(*att[0][0])
    assert abs(sum(weights) - 1.0) < 1e-5 and all(isinstance(t, str) for t in tokens)


def test_unknown_checkpoint_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"kind": "bilstm-attention", "format_version": 99}))
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(tmp_path)


def test_shipped_checkpoint_loads_and_scores():
    from app.settings import Settings
    s = Settings()
    config = json.loads((s.bilstm_checkpoint / "config.json").read_text())
    assert config["kind"] == "bilstm-attention" and config["dev"] == "semeval2016-dev-A"
    assert all("2016" not in f or "train" in f for f in config["data"])  # never 2016 dev or test
    assert (s.bilstm_checkpoint / "model.safetensors").stat().st_size < 5_000_000
    r = BiLSTMRanker.from_checkpoint(s.bilstm_checkpoint, "cpu")
    q = Query("q", "How can I renew my residence permit?", (
        Candidate("a", "Your company PRO renews the residence permit online; bring your passport."),
        Candidate("b", "lol this country is so hot")))
    good, bad = r.score([q])[0]
    assert good > bad


@pytest.mark.slow
def test_bilstm_on_test_a(cli_env):
    import subprocess

    from .conftest import CQA
    p = subprocess.run(CQA + ["evaluate", "--benchmark", "semeval2016-test-A", "--ranker", "bilstm", "--json"],
                       env=cli_env, capture_output=True, text=True, check=True)
    assert json.loads(p.stdout.strip().splitlines()[-1])["MAP"] == pytest.approx(0.7324, abs=0.005)  # documented


def test_training_is_reproducible_on_cpu(tmp_path):
    from safetensors.torch import load_file
    threads = load(PROJECT_ROOT / "data/demo/threads.jsonl").threads[:6]
    cfg = BiLSTMConfig(hidden=8, dropout=0.5, max_question_len=16, max_answer_len=16)
    groups = groups_from_threads(threads, encode_texts, cfg.max_question_len, cfg.max_answer_len)
    runs = []
    for name in ("a", "b"):
        m = train_bilstm(groups, [], [], tmp_path / name, TrainConfig(epochs=1, batch_size=4, seed=5, device="cpu"),
                         cfg, progress=False)
        runs.append((m["epochs"][0]["loss"], load_file(str(tmp_path / name / "model.safetensors"))))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(runs[0][1][k], runs[1][1][k]) for k in runs[0][1])
