"""In-domain adaptation of all-MiniLM-L6-v2 before any task's fine-tuning (issue 16, round 42, rule 27): the
packaged model was trained on a billion pairs, StackExchange's (title, body) among them, but on no Qatar Living text.
This trains it once more with its own objective, in-batch negatives (multiple negatives ranking: each subject must
find its own body among the batch's bodies, cross-entropy over the scaled cosines), on the forum's own (subject,
body) pairs, and writes a bi-encoder checkpoint that `cqa train --init-from` and `scripts/cv_question_model.py
--init-from` start from.

The pairs come from the SemEval-2015 files only (train, dev and test, reformatted): threads with a subject and a
body of at least 20 characters, each pair once. Any pair whose subject or body is the subject or body of a 2016
question (the B training questions of the cross-validation, dev-B, test-B, original or related) is left out, so no
text a B figure is measured on is seen here. No label is read.

    python scripts/adapt_minilm.py --out var/r42/adapted [--epochs 1] [--batch-size 32] [--lr 2e-5]
    python scripts/adapt_minilm.py --score var/r42/adapted

JSON object last: pairs, steps, seconds, the mean loss of the first and last 20 steps. With ``--score``, nothing is
trained: the checkpoint's cosine alone, zero-shot, beside the package's (`minilm-cosine`), as MAP over the B training
questions (`question_training_set`) and dev-B.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from app.settings import Settings  # noqa: E402
from indexing.encoder import resolve_device  # noqa: E402
from indexing.loaders import load  # noqa: E402
from ranking.neural.minilm import MiniLMConfig, MiniLMRankerModel, collate, save, single_ids, word_pieces  # noqa: E402
from ranking.neural.train import optimizer_step, seed_everything  # noqa: E402

SOURCES = "train2015"
QUESTION_TAGS = ("OrgQSubject", "OrgQBody", "RelQSubject", "RelQBody")


def measured_texts(semeval_dir: Path) -> set[str]:
    """Every subject and body of a 2016 question (original or related) in the train, dev and test files."""
    out: set[str] = set()
    for f in [*sorted((semeval_dir / "train").glob("*.xml")), *sorted((semeval_dir / "dev").glob("*.xml")),
              *sorted((semeval_dir / "test").glob("*.xml"))]:
        for el in ET.parse(f).iter():
            if el.tag in QUESTION_TAGS and (el.text or "").strip():
                out.add(" ".join(el.text.split()))
    return out


def adaptation_pairs(semeval_dir: Path) -> tuple[list[tuple[str, str]], int]:
    """(subject, body) of each 2015 thread with both, once each, none of whose texts a 2016 question has; and how
    many were left out for that."""
    seen, left_out, pairs = set(), 0, []
    measured = measured_texts(semeval_dir)
    for f in sorted((semeval_dir / SOURCES).glob("*.xml")):
        for t in load(f).threads:
            subject, body = t.subject.strip(), t.body.strip()
            if not subject or len(body) < 20 or (subject, body) in seen:
                continue
            seen.add((subject, body))
            if " ".join(subject.split()) in measured or " ".join(body.split()) in measured:
                left_out += 1
                continue
            pairs.append((subject, body))
    return pairs, left_out


def zero_shot(checkpoint: Path, s: Settings) -> dict:
    """MAP of ``checkpoint``'s cosine and of `minilm-cosine` on the B training questions and on dev-B."""
    from ranking.evaluation.tuning import GoldMAP
    from ranking.neural.ranker import MiniLMRanker
    from ranking.neural.train_minilm import dev_set, question_training_set
    from ranking.rankers import get_ranker
    _, queries, gold = question_training_set(s.semeval_dir)
    dev_q, dev_gold = dev_set(s.semeval_dir, "B")
    rankers = {str(checkpoint): MiniLMRanker.from_checkpoint(checkpoint, s.device, name="adapted"),
               "minilm-cosine": get_ranker("minilm-cosine", s)}
    return {name: {"train_questions": GoldMAP(queries, gold)(r.score(queries)),
                   "dev_B": GoldMAP(dev_q, dev_gold)(r.score(dev_q))} for name, r in rankers.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="where to write the adapted checkpoint")
    ap.add_argument("--score", type=Path, metavar="CHECKPOINT", help="train nothing: score this checkpoint zero-shot")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--scale", type=float, default=20.0, help="the cosines' scale in the cross-entropy")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--max-steps", type=int, help="stop after this many steps (smoke runs)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args()
    s = Settings()
    if args.score:
        print(json.dumps(zero_shot(args.score, s)))
        return
    if args.out is None:
        ap.error("--out is required unless --score is given")
    pairs, left_out = adaptation_pairs(s.semeval_dir)
    seed_everything(args.seed)
    device = resolve_device(s.device)
    mc = MiniLMConfig(kind="bi-encoder", max_length=args.max_length, question_max_tokens=64)
    model = MiniLMRankerModel(mc).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    per_epoch = len(pairs) // args.batch_size  # the last short batch dropped: fewer negatives would make it easier
    total = max(1, args.epochs * per_epoch)
    warm = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min((k + 1) / warm, max(0.0, (total - k) / max(1, total - warm))))
    texts = sorted({x for p in pairs for x in p})
    ids = {t: single_ids(w, mc) for t, w in zip(texts, word_pieces(texts))}
    rng, losses, step, t0 = random.Random(args.seed), [], 0, time.perf_counter()
    model.train()
    for epoch in range(args.epochs):
        order = pairs[:]
        rng.shuffle(order)
        batches = [order[i: i + args.batch_size] for i in range(0, per_epoch * args.batch_size, args.batch_size)]
        for batch in tqdm(batches, desc=f"adapt epoch {epoch + 1}", unit="batch", disable=args.quiet):
            a = model.text_vector(*collate([ids[x] for x, _ in batch], device)[:2])
            b = model.text_vector(*collate([ids[y] for _, y in batch], device)[:2])
            logits = args.scale * a @ b.T
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch), device=device))
            losses.append(optimizer_step(loss, opt, params, 1.0, sched))
            step += 1
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break
    seconds = round(time.perf_counter() - t0, 1)
    metrics = {"pairs": len(pairs), "left_out_as_measured": left_out, "steps": step, "train_seconds": seconds,
               "loss_first_20": sum(losses[:20]) / max(1, len(losses[:20])),
               "loss_last_20": sum(losses[-20:]) / max(1, len(losses[-20:]))}
    save(args.out, model.eval(), {"train": {"kind": "bi-encoder", "task": "adapt", "objective": "in-batch negatives "
                                            "over (subject, body) of the SemEval-2015 files", **vars(args),
                                            "out": str(args.out), "device": device}}, metrics)
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
