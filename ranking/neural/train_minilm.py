"""Fine-tuning the MiniLM rankers on (question, good answer, bad answer) triplets of subtask A.

cross-encoder: pairwise hinge loss on raw scores (``--loss hinge``) or BCE (``--loss bce``);
bi-encoder: the cosine hinge loss on cos(q, a). AdamW with linear warm-up and decay; dev MAP
(official scorer) at every evaluation point; the best point is kept as a checkpoint directory.
"""
from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from indexing.encoder import resolve_device

from ..candidates import Query
from ..evaluation.scorer import Line
from .data import DEV_BENCHMARK, Group, groups_from_threads, triplets
from .losses import CosineHingeLoss, PairBCELoss, PairwiseHingeLoss
from indexing.catalog import HELD_OUT_FILE

from .minilm import MiniLMConfig, MiniLMRankerModel, collate, load, pair_ids, save, single_ids, word_pieces
from .checkpoint import read_metrics
from .ranker import MiniLMRanker
from .train import append_log, dev_map, optimizer_step, seed_everything

log = logging.getLogger(__name__)

# The cross-encoder trains on these; the 2015 test file is held out so the learned combination over
# its scores and the forum signals trains on scores of unseen threads (ranking/combination.py).



@dataclass
class MiniLMTrainConfig:
    kind: str = "cross-encoder"
    task: str = "A"             # A: (question, good comment, bad comment); B: (question, related, unrelated question);
    #                             C: (new question, good comment of a related thread, bad one)
    loss: str = "hinge"         # cross-encoder: hinge | bce; the bi-encoder always uses the cosine hinge
    margin: float | None = None  # hinge margin; default 1.0 on raw scores, 0.2 on cosines
    epochs: int = 1
    lr: float = 3e-5
    head_lr: float = 1e-3
    warmup: float = 0.1
    batch_size: int = 16        # triplets per step
    negatives: int = 1
    max_pairs: int | None = None  # cap on triplets per epoch (CPU budget); None: all
    eval_every: int | None = None  # steps between dev evaluations besides each epoch's end
    max_length: int = 128
    question_max_tokens: int = 64
    seed: int = 13
    device: str = "auto"
    max_steps: int | None = None  # stop early (tests, smoke runs)
    init_from: str | None = None  # start from this checkpoint of the same kind instead of all-MiniLM-L6-v2


def _initial_model(cfg: MiniLMTrainConfig, device: str) -> tuple[MiniLMRankerModel, dict]:
    """all-MiniLM-L6-v2, or a checkpoint of the same kind (a further epoch with new negatives and a new
    learning-rate cycle, or a model trained on one task as the start of the other), with what the new
    checkpoint records of its start: how that was trained and where it stood on dev."""
    mc = MiniLMConfig(kind=cfg.kind, max_length=cfg.max_length, question_max_tokens=cfg.question_max_tokens)
    if not cfg.init_from:
        return MiniLMRankerModel(mc).to(device), {}
    model, config = load(Path(cfg.init_from), device)
    if model.config.kind != cfg.kind:
        raise ValueError(f"--init-from {cfg.init_from} is a {model.config.kind}, not a {cfg.kind}")
    model.config = mc
    return model, {"init": _provenance(Path(cfg.init_from), config)}


def _provenance(folder: Path, config: dict) -> dict:
    """What a new checkpoint records of one it was made from (its start, or an averaged ingredient): where it
    was, how it was trained and from what, its code version and its dev MAP."""
    record = {"from": str(folder), "train": config.get("train"), "init": config.get("init"),
              "code_version": config.get("code_version"), "dev_MAP": read_metrics(folder).get("dev_MAP")}
    return {k: v for k, v in record.items() if v is not None}


def _task_of(config: dict) -> str:
    """The task a MiniLM checkpoint was trained for (A unless its training settings say B or C)."""
    return (config.get("train") or {}).get("task", "A")


def _loss_fn(cfg: MiniLMTrainConfig):
    if cfg.kind == "bi-encoder":
        return CosineHingeLoss(0.2 if cfg.margin is None else cfg.margin)
    if cfg.loss == "hinge":
        return PairwiseHingeLoss(1.0 if cfg.margin is None else cfg.margin)
    if cfg.loss == "bce":
        return PairBCELoss()
    raise ValueError(f"loss must be hinge or bce, not {cfg.loss!r}")


def length_batches(data: list, batch_size: int, rng: random.Random, pool: int = 32) -> list[list]:
    """Batches of similar length (padding is most of the cost on a CPU): sorted within pools of
    ``pool`` batches of the shuffled data, then the batches shuffled."""
    out = []
    for s in range(0, len(data), batch_size * pool):
        chunk = sorted(data[s: s + batch_size * pool], key=lambda t: sum(map(len, t)))
        out += [chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(out)
    return out


def _step_scores(model: MiniLMRankerModel, batch, device: str):
    mc = model.config
    if mc.kind == "cross-encoder":
        pos = [pair_ids(q, p, mc) for q, p, _ in batch]
        neg = [pair_ids(q, n, mc) for q, _, n in batch]
        both = pos + neg
        s = model.pair_score(*collate([b[0] for b in both], device, [b[1] for b in both]))
        return s[: len(batch)], s[len(batch):]
    seqs = [single_ids(t, mc) for trip in batch for t in trip]
    v = model.text_vector(*collate(seqs, device)[:2]).view(len(batch), 3, -1)
    return (v[:, 0] * v[:, 1]).sum(-1), (v[:, 0] * v[:, 2]).sum(-1)


def train_minilm(groups: list[Group], dev_queries: list[Query], dev_gold: list[Line], out: Path,
                 cfg: MiniLMTrainConfig, meta: dict | None = None, progress: bool = True) -> dict:
    if cfg.init_from and Path(cfg.init_from).resolve() == out.resolve():
        raise ValueError(f"--init-from and --out are the same directory ({out}); write to another and copy it over")
    seed_everything(cfg.seed)
    device = resolve_device(cfg.device)
    model, start = _initial_model(cfg, device)
    head = [p for n, p in model.named_parameters() if n.startswith("head.") and p.requires_grad]
    body = [p for n, p in model.named_parameters() if not n.startswith("head.") and p.requires_grad]
    opt = torch.optim.AdamW([{"params": body, "lr": cfg.lr}] + ([{"params": head, "lr": cfg.head_lr}] if head else []),
                            weight_decay=0.01)
    rng = random.Random(cfg.seed)
    per_epoch = min(sum(len(g.good) for g in groups) * cfg.negatives, cfg.max_pairs or 10**12)
    total = max(1, cfg.epochs * -(-per_epoch // cfg.batch_size))
    warm = max(1, int(cfg.warmup * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    loss_fn = _loss_fn(cfg)
    use_amp = device == "cuda"
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "training_log.jsonl"
    log_path.write_text("")
    best = {"dev_MAP": -1.0, "at": None, "state": None}
    history, step, t_start = [], 0, time.perf_counter()

    def checkpoint(epoch: int, losses: list[float]) -> None:
        nonlocal best
        m = dev_map(MiniLMRanker(model, device, batch_size=64), dev_queries, dev_gold) if dev_queries else float("nan")
        model.train()
        rec = {"epoch": epoch, "step": step, "loss": float(np.mean(losses[-200:])) if losses else None,
               "dev_MAP": m, "seconds": round(time.perf_counter() - t_start, 1), "device": device}
        history.append(rec)
        append_log(log_path, rec)
        log.info("epoch %d step %d: loss %s, dev MAP %.4f", epoch, step, rec["loss"], m)
        if m > best["dev_MAP"] or best["state"] is None:
            best = {"dev_MAP": m, "at": {"epoch": epoch, "step": step},
                    "state": {k: v.detach().clone() for k, v in model.own_state_dict().items()}}

    model.train()
    interrupted_at = None
    epoch, losses = 1, []
    try:
        for epoch in range(1, cfg.epochs + 1):
            batches = length_batches(triplets(groups, rng, cfg.negatives)[:per_epoch], cfg.batch_size, rng)
            losses = []
            bar = tqdm(batches, desc=f"{cfg.kind} epoch {epoch}", unit="batch", disable=not progress)
            for bi, batch in enumerate(bar):
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_amp):
                    pos, neg = _step_scores(model, batch, device)
                    loss = loss_fn(pos.float(), neg.float())
                losses.append(optimizer_step(loss, opt, body + head, 1.0, sched))
                bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
                step += 1
                if cfg.max_steps and step >= cfg.max_steps:
                    break
                if cfg.eval_every and step % cfg.eval_every == 0 and bi + 1 < len(batches):
                    checkpoint(epoch, losses)
            checkpoint(epoch, losses)
            if cfg.max_steps and step >= cfg.max_steps:
                break
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM under `cqa train` (a job's time limit): keep the best point so far
        interrupted_at = {"epoch": epoch, "step": step}
        log.warning("interrupted at epoch %d step %d; keeping the best evaluation point so far", epoch, step)
        if best["state"] is None:  # nothing evaluated yet: the model as it stands is the only point there is
            checkpoint(epoch, losses)
    model.load_state_dict(best["state"], strict=False)
    metrics = {"best": best["at"], "dev_MAP": best["dev_MAP"], "evaluations": history,
               "train_seconds": round(time.perf_counter() - t_start, 1),
               **({"interrupted_at": interrupted_at} if interrupted_at else {})}
    save(out, model.eval(), {"train": cfg.__dict__, **start, **(meta or {})}, metrics)
    return metrics


BASE = "base"  # an ingredient of a mix: the packaged all-MiniLM-L6-v2, the start every MiniLM model is tuned from


def _ingredient(source, like: MiniLMConfig | None) -> tuple[MiniLMRankerModel, dict]:
    """A checkpoint folder loaded, or ``BASE``: the packaged weights in a bi-encoder shaped as ``like``."""
    if str(source) != BASE:
        return load(Path(source))
    if like is None or like.kind != "bi-encoder":
        raise ValueError(f"{BASE!r} (the packaged all-MiniLM-L6-v2) mixes only with bi-encoder checkpoints, and "
                         "not first: a cross-encoder's scoring head has no zero-shot start")
    return MiniLMRankerModel(like, pretrained=True).eval(), {"base": "all-MiniLM-L6-v2, zero-shot"}


def average_checkpoints(sources: list, dev_queries: list[Query], dev_gold: list[Line], out: Path,
                        meta: dict | None = None, task: str | None = None, kind: str | None = None,
                        mix: list[float] | None = None) -> dict:
    """One checkpoint whose weights are the mean of the ``sources``' (a "model soup", Wortsman et al. 2022):
    MiniLM checkpoints of one kind, shape and task, fine-tuned from the same start (the fold models of a
    cross-validation beside the model trained on every fold, or the links of an --init-from chain). ``mix``
    weighs them (summing to 1; an even mean without it), and ``BASE`` names the packaged start itself, so
    ``[model, BASE]`` with ``mix=[a, 1 - a]`` is WiSE-FT (Wortsman et al. 2022, "Robust fine-tuning of
    zero-shot models": a * fine-tuned + (1 - a) * zero-shot). It is scored on dev as a training run's
    evaluation points are, and serves at the cost of one model. Each ingredient's training settings, start,
    dev MAP and share are recorded under ``average_of``."""
    if len(sources) < 2:
        raise ValueError("--average-of needs at least two checkpoints")
    even = mix is None
    mix = [1 / len(sources)] * len(sources) if even else [float(w) for w in mix]
    if len(mix) != len(sources) or any(w < 0 for w in mix) or abs(sum(mix) - 1) > 1e-6:
        raise ValueError(f"--mix needs one share per checkpoint ({len(sources)}), none negative, summing to 1; "
                         f"got {mix}")
    if any(str(s) != BASE and Path(s).resolve() == out.resolve() for s in sources):
        raise ValueError(f"--out {out} is one of the checkpoints to average; write to another and copy it over")
    t_start = time.perf_counter()
    loaded = []
    for s in sources:
        loaded.append(_ingredient(s, loaded[0][0].config if loaded else None))
    model, config = loaded[0]
    task = task or _task_of(config)
    if kind and model.config.kind != kind:
        raise ValueError(f"{sources[0]} is a {model.config.kind}, not a {kind}")
    for s, (m, c) in zip(sources, loaded):
        if m.config != model.config or (str(s) != BASE and _task_of(c) != task):
            raise ValueError(f"{s} ({m.config}, task {_task_of(c)}) is not the same kind of model as {sources[0]} "
                             f"({model.config}, task {task}); only like models average")
    states = [m.own_state_dict() for m, _ in loaded]
    shares = torch.tensor(mix)

    def combined(stacked: torch.Tensor) -> torch.Tensor:
        return stacked.mean(0) if even else torch.tensordot(shares, stacked, dims=1)
    # rounded to the fp16 the checkpoint stores, so the dev MAP recorded is the saved model's
    model.load_state_dict({k: combined(torch.stack([st[k].float() for st in states])).half().float()
                           for k in states[0]}, strict=False)
    device = resolve_device("auto")
    model.to(device).eval()
    dev = dev_map(MiniLMRanker(model, device, batch_size=64), dev_queries, dev_gold) if dev_queries else float("nan")
    ingredients = [{**(c if str(s) == BASE else _provenance(Path(s), c)), "share": w}
                   for s, (_, c), w in zip(sources, loaded, mix)]
    metrics = {"dev_MAP": dev, "ingredients_dev_MAP": [i.get("dev_MAP") for i in ingredients], "mix": mix,
               "seconds": round(time.perf_counter() - t_start, 1)}
    save(out, model, {"train": config.get("train"), "average_of": ingredients, **(meta or {})}, metrics)
    log.info("average of %d checkpoints (shares %s): dev MAP %.4f (ingredients %s)", len(sources), mix, dev,
             ", ".join(f"{x:.4f}" for x in metrics["ingredients_dev_MAP"] if x is not None))
    return metrics


def minilm_groups(threads: list) -> list[Group]:
    """Training groups of threads (question, good and bad answers) in MiniLM word pieces, cut at collation."""
    return groups_from_threads(threads, lambda texts, n: [w[:n] for w in word_pieces(texts)], 512, 512)


def _per_original_question(path: Path, answers_of) -> list:
    """A subtask B/C training file in the shape of subtask A threads: each original question (as the B and C
    benchmarks give it) with ``answers_of(its related threads)`` as its answers; questions with none left out."""
    from indexing.loaders import load_semeval
    from indexing.models import Thread

    from ..evaluation.benchmarks import related_threads
    doc = load_semeval(path, strict=True)
    related = related_threads(doc)
    out = [Thread(id=oq.id, subject=oq.subject, body=oq.body, answers=answers_of(related[oq.id]))
           for oq in doc.org_questions.values()]
    return [t for t in out if t.answers]


def question_pairs_as_threads(semeval_dir: Path) -> list:
    """Subtask B training data: each original question of 2016 train (part 2 and the recovered part 1) with its
    related questions as "answers", Good when judged PerfectMatch or Relevant, Bad when Irrelevant."""
    from indexing.catalog import TRAIN_PART1_B, TRAIN_PART2
    from indexing.models import Answer

    def related_questions(threads):
        return [Answer(id=t.id, text=t.question_text,
                       label="Good" if t.meta.get("relevance2orgq") in ("PerfectMatch", "Relevant") else "Bad")
                for t in threads]
    return [t for f in (TRAIN_PART2, TRAIN_PART1_B) for t in _per_original_question(semeval_dir / f, related_questions)]


def held_out_scores(folders: list[Path], folds: list[list[str]], queries: list[Query], device: str,
                    name: str) -> dict[str, list[float]]:
    """Question id -> its candidates' scores by the fold model that held it out: ``folders[k]`` scores the
    ``queries`` of ``folds[k]``, once its ``config.json`` shows it held out exactly those (the fold models of
    scripts/cv_question_model.py, or a mix of one that keeps its record); so every question is scored by a model
    that never saw it."""
    out = {}
    for k, (folder, held) in enumerate(zip(folders, folds)):
        recorded = json.loads((Path(folder) / "config.json").read_text()).get("held_out_questions")
        if recorded != sorted(held):
            raise ValueError(f"{folder} did not hold out fold {k}'s questions; train the folds with "
                             "scripts/cv_question_model.py (the same --folds)")
        fq = [q for q in queries if q.id in set(held)]
        ranker = MiniLMRanker.from_checkpoint(Path(folder), device, name=f"{name}-fold{k}")
        out.update(zip([q.id for q in fq], ranker.score(fq)))
    return out


def transitive_question_pairs(threads: list) -> list:
    """More subtask B training data from the same judgements (round 40, rule 25): two questions judged relevant to
    one original question are taken as relevant to each other. For each original question (a thread of
    ``question_pairs_as_threads``) with two or more related questions judged relevant and one or more judged
    irrelevant, one more thread: its question is the first relevant related question in search order, its Good
    answers the other relevant ones, its Bad answers the irrelevant ones (retrieved for the same question, so near
    in topic)."""
    from indexing.models import Thread
    out = []
    for t in threads:
        good = [a for a in t.answers if a.label == "Good"]
        if len(good) < 2 or len(good) == len(t.answers):
            continue
        out.append(Thread(id=f"{t.id}>{good[0].id}", subject=good[0].text, answers=[a for a in t.answers
                                                                                  if a is not good[0]]))
    return out


def question_groups(threads: list, augment: str | None = None) -> list[Group]:
    """``minilm_groups`` of subtask B training threads, with ``augment="transitive"`` also of the pairs their
    judgements imply (``transitive_question_pairs``): what scripts/cv_question_model.py and question_sweep.py train
    the question model on."""
    if augment not in (None, "transitive"):
        raise ValueError(f"no such augmentation: {augment!r}")
    return minilm_groups(threads + (transitive_question_pairs(threads) if augment else []))


def related_comments_as_threads(semeval_dir: Path) -> list:
    """Subtask C training data: each original question of 2016 train part 2 (the one training file with comments
    judged against the original question; the recovered part 1 has none) with the comments of its related threads
    as answers, Good when judged Good for the original question, Bad when PotentiallyUseful or Bad
    (RELC_RELEVANCE2ORGQ)."""
    from indexing.catalog import TRAIN_PART2

    def judged_comments(threads):
        return [a.model_copy(update={"label": "Good" if a.meta["relevance2orgq"] == "Good" else "Bad"})
                for t in threads for a in t.answers if a.meta.get("relevance2orgq")]
    return _per_original_question(semeval_dir / TRAIN_PART2, judged_comments)


# task -> the benchmark a MiniLM model of that task is selected on
DEV_BENCHMARKS = {"A": DEV_BENCHMARK, "B": "semeval2016-dev-B", "C": "semeval2016-dev-C"}


def dev_set(semeval_dir: Path, task: str) -> tuple[list[Query], list[Line]]:
    """The dev questions and gold a MiniLM model of ``task`` is selected on (DEV_BENCHMARKS)."""
    from ..evaluation.benchmarks import BENCHMARKS, queries_for
    from ..evaluation.scorer import read_lines
    dev_xml, dev_gold = BENCHMARKS[DEV_BENCHMARKS[task]].paths(semeval_dir)
    return queries_for(dev_xml, task), read_lines(dev_gold)


def question_training_set(semeval_dir: Path) -> tuple[dict[str, object], list[Query], list[Line]]:
    """Subtask B's training questions as a benchmark: each original question of 2016 train (part 2 and the
    recovered part 1) with its related questions as candidates (the B benchmark's shape), their gold (Good: judged
    PerfectMatch or Relevant), and the training threads they come from (``question_pairs_as_threads``) by id, for
    the cross-validations over them (scripts/cv_question_model.py, scripts/question_sweep.py)."""
    from indexing.catalog import TRAIN_PART1_B, TRAIN_PART2

    from ..evaluation.benchmarks import queries_for
    threads = {t.id: t for t in question_pairs_as_threads(semeval_dir)}
    queries = [q for f in (TRAIN_PART2, TRAIN_PART1_B) for q in queries_for(semeval_dir / f, "B") if q.id in threads]
    good = {(tid, a.id): a.label == "Good" for tid, t in threads.items() for a in t.answers}
    return threads, queries, [Line(q.id, c.id, 0.0, good[(q.id, c.id)]) for q in queries for c in q.candidates]


def related_training_set(semeval_dir: Path) -> tuple[list[Query], list[Line]]:
    """Subtask C's training questions as a benchmark: each original question of 2016 train part 2 with the comments
    of its related threads as candidates, in the C benchmark's shape (``queries_for``: thread ranks, thread questions,
    positions), and their gold (``related_comments_as_threads``: Good when judged Good for the original question), for
    the cross-validation over them (scripts/cv_related.py)."""
    from indexing.catalog import TRAIN_PART2

    from ..evaluation.benchmarks import queries_for
    good = {(t.id, a.id): a.label == "Good" for t in related_comments_as_threads(semeval_dir) for a in t.answers}
    queries = [q for q in queries_for(semeval_dir / TRAIN_PART2, "C") if any((q.id, c.id) in good for c in q.candidates)]
    return queries, [Line(q.id, c.id, 0.0, good.get((q.id, c.id), False)) for q in queries for c in q.candidates]


def recorded_recipe(config_path: Path, groups: list[Group], device: str, epochs_kept: int = 1,
                    max_steps: int | None = None, **changes) -> MiniLMTrainConfig:
    """The training settings a checkpoint's ``config.json`` records (its ``train`` section) with ``changes``, for
    ``groups``: its schedule stopped at the end of epoch ``epochs_kept`` (or after ``max_steps``, if fewer), no
    evaluation between epoch ends, on ``device``."""
    train = json.loads(config_path.read_text())["train"]
    fields = MiniLMTrainConfig.__dataclass_fields__
    if set(changes) - set(fields):
        raise ValueError(f"not training settings: {sorted(set(changes) - set(fields))}")
    cfg = MiniLMTrainConfig(**{k: v for k, v in train.items() if k in fields})
    for k, v in changes.items():
        setattr(cfg, k, v)
    kept = epochs_kept * math.ceil(sum(len(g.good) for g in groups) * cfg.negatives / cfg.batch_size)
    cfg.eval_every, cfg.device, cfg.max_steps = None, device, min(kept, max_steps or kept)
    return cfg


def a_training_threads(semeval_dir: Path) -> dict[str, list]:
    """File -> its threads, for the subtask A MiniLM models' training files (every neural training file but the
    one held out for the learned layer)."""
    from indexing.catalog import NEURAL_TRAIN_FILES
    from indexing.loaders import load
    return {f: load(semeval_dir / f).threads for f in NEURAL_TRAIN_FILES if f != HELD_OUT_FILE}


def train_minilm_from_semeval(semeval_dir: Path, out: Path, cfg: MiniLMTrainConfig, progress: bool = True,
                              threads: dict[str, list] | None = None, meta: dict | None = None) -> dict:
    """A MiniLM model of ``cfg.task``, selected on that task's dev set. Subtask A trains on ``threads`` (file ->
    threads; default ``a_training_threads``: a cross-fitting fold model is given the other folds' threads), and
    ``meta`` adds to what its checkpoint records."""
    from indexing.loaders import file_digest
    if cfg.task in ("B", "C"):
        if threads is not None or meta:
            raise ValueError(f"threads and meta are for subtask A models; subtask {cfg.task} trains on its own pairs")
        return _train_on_2016_pairs(semeval_dir, out, cfg, progress)
    threads = a_training_threads(semeval_dir) if threads is None else threads
    groups = minilm_groups([t for ts in threads.values() for t in ts])
    record = {"data": {f: file_digest(semeval_dir / f) for f in threads}, "held_out": HELD_OUT_FILE,
              "dev": DEV_BENCHMARKS["A"], "groups": len(groups), **(meta or {})}
    return train_minilm(groups, *dev_set(semeval_dir, "A"), out, cfg, record, progress)


def _train_on_2016_pairs(semeval_dir: Path, out: Path, cfg: MiniLMTrainConfig, progress: bool) -> dict:
    """Subtask B (question-question similarity; 2016 train part 2 and the recovered part 1) or C (new question and
    a related thread's comment; 2016 train part 2), selected on that subtask's 2016 dev set."""
    from indexing.catalog import TRAIN_PART1_B, TRAIN_PART2
    from indexing.loaders import file_digest

    threads, files = ((question_pairs_as_threads(semeval_dir), (TRAIN_PART2, TRAIN_PART1_B)) if cfg.task == "B"
                      else (related_comments_as_threads(semeval_dir), (TRAIN_PART2,)))
    groups = minilm_groups(threads)
    meta = {"task": cfg.task, "data": {f: file_digest(semeval_dir / f) for f in files},
            "dev": DEV_BENCHMARKS[cfg.task], "groups": len(groups)}
    return train_minilm(groups, *dev_set(semeval_dir, cfg.task), out, cfg, meta, progress)


def average_from_semeval(semeval_dir: Path, sources: list, out: Path, task: str, kind: str,
                         mix: list[float] | None = None) -> dict:
    """`cqa train --average-of [--mix]`: the (weighted) mean of like checkpoints of ``task``, scored on that task's
    dev set."""
    return average_checkpoints(sources, *dev_set(semeval_dir, task), out, {"dev": DEV_BENCHMARKS[task]},
                               task=task, kind=kind, mix=mix)
