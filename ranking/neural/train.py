"""Training loop shared by the neural rankers: batches of triplets, the cosine hinge loss, Adam,
dev MAP (official scorer) after every epoch, the best epoch kept as a checkpoint directory."""
from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from indexing.encoder import resolve_device

from ..candidates import Query
from ..evaluation.runner import align_to_gold, predictions
from ..evaluation.scorer import Line, score
from .bilstm import BiLSTMAttention, BiLSTMConfig, pad
from .checkpoint import save
from .data import Group, triplets
from .losses import CosineHingeLoss
from .ranker import BiLSTMRanker
from .vocab import token_embeddings

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    epochs: int = 4
    margin: float = 0.2
    lr: float = 1e-3
    batch_size: int = 64
    negatives: int = 2
    seed: int = 13
    device: str = "auto"
    max_steps: int | None = None  # stop early (tests, smoke runs)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def get_batch(items, device):
    q, ql = pad([t[0] for t in items], device)
    p, pl = pad([t[1] for t in items], device)
    n, nl = pad([t[2] for t in items], device)
    return q, ql, p, pl, n, nl


def dev_map(ranker, queries: list[Query], gold: list[Line]) -> float:
    """Official MAP of a ranker on the dev questions (the selection criterion of every neural ranker)."""
    with torch.no_grad():
        return score(gold, align_to_gold(predictions(queries, ranker), gold)).MAP


def optimizer_step(loss: torch.Tensor, opt, params, clip: float, scheduler=None) -> float:
    """Backward, clip, step (and the scheduler's step); the loss as a float."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()


def interrupt(signum, frame) -> None:
    """The SIGTERM handler of a training run (``stop_on_sigterm``): what Ctrl-C raises."""
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_sigterm() -> None:
    """From now on SIGTERM (a scheduler's or `timeout`'s limit) stops a training run as Ctrl-C does: the MiniLM
    trainer catches the KeyboardInterrupt and keeps its best evaluation point so far (`cqa train`,
    scripts/crossfit_A.py)."""
    import signal
    signal.signal(signal.SIGTERM, interrupt)


def append_log(path: Path, record: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def train_bilstm(groups: list[Group], dev_queries: list[Query], dev_gold: list[Line], out: Path,
                 cfg: TrainConfig, model_cfg: BiLSTMConfig | None = None, meta: dict | None = None,
                 progress: bool = True) -> dict:
    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    model_cfg = model_cfg or BiLSTMConfig()
    model = BiLSTMAttention(model_cfg, torch.from_numpy(token_embeddings().copy())).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    loss_fn = CosineHingeLoss(cfg.margin)
    use_amp = device == "cuda"
    rng = random.Random(cfg.seed)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "training_log.jsonl"
    log_path.write_text("")
    best = {"dev_MAP": -1.0, "epoch": None, "state": None}
    history, step = [], 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        data = triplets(groups, rng, cfg.negatives)
        t0, losses = time.perf_counter(), []
        bar = tqdm(range(0, len(data), cfg.batch_size), desc=f"epoch {epoch}", unit="batch", disable=not progress)
        for s in bar:
            q, ql, p, pl, n, nl = get_batch(data[s: s + cfg.batch_size], device)
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_amp):
                o_q = model.question_vector(q, ql)
                pos, _ = model.answer_vector(p, pl, o_q)
                neg, _ = model.answer_vector(n, nl, o_q)
                cos_pos = torch.nn.functional.cosine_similarity(o_q, pos, dim=-1)
                cos_neg = torch.nn.functional.cosine_similarity(o_q, neg, dim=-1)
                loss = loss_fn(cos_pos.float(), cos_neg.float())
            losses.append(optimizer_step(loss, opt, params, 5.0))
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
            step += 1
            if cfg.max_steps and step >= cfg.max_steps:
                break
        seconds = time.perf_counter() - t0
        m = dev_map(BiLSTMRanker(model, device), dev_queries, dev_gold) if dev_queries else float("nan")
        rec = {"epoch": epoch, "loss": float(np.mean(losses)), "first_loss": losses[0], "last_loss": losses[-1],
               "dev_MAP": m, "seconds": round(seconds, 1), "triplets": len(data), "device": device}
        history.append(rec)
        append_log(log_path, rec)
        log.info("epoch %d: loss %.4f, dev MAP %.4f, %.0f s", epoch, rec["loss"], m, seconds)
        if m > best["dev_MAP"] or best["state"] is None:
            best = {"dev_MAP": m, "epoch": epoch,
                    "state": {k: v.detach().clone() for k, v in model.own_state_dict().items()}}
        if cfg.max_steps and step >= cfg.max_steps:
            break
    model.load_state_dict(best["state"], strict=False)
    metrics = {"best_epoch": best["epoch"], "dev_MAP": best["dev_MAP"], "epochs": history}
    save(out, model.eval(), {"train": cfg.__dict__, **(meta or {})}, metrics)
    return metrics


def train_from_semeval(semeval_dir: Path, out: Path, cfg: TrainConfig, progress: bool = True) -> dict:
    from indexing.loaders import file_digest, load

    from ..evaluation.benchmarks import BENCHMARKS, queries_for
    from ..evaluation.scorer import read_lines
    from indexing.catalog import NEURAL_TRAIN_FILES as TRAIN_FILES

    from .data import DEV_BENCHMARK, groups_from_threads
    from .vocab import encode_texts
    model_cfg = BiLSTMConfig()
    threads = [t for f in TRAIN_FILES for t in load(semeval_dir / f).threads]
    groups = groups_from_threads(threads, encode_texts, model_cfg.max_question_len, model_cfg.max_answer_len)
    dev_xml, dev_gold = BENCHMARKS[DEV_BENCHMARK].paths(semeval_dir)
    meta = {"data": {f: file_digest(semeval_dir / f) for f in TRAIN_FILES}, "dev": DEV_BENCHMARK,
            "groups": len(groups)}
    return train_bilstm(groups, queries_for(dev_xml, "A"), read_lines(dev_gold), out, cfg, model_cfg, meta, progress)
