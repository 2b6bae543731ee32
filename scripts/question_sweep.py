"""The subtask B question model's training recipe, swept over seeds and cross-validated (issue 16, round 35).

The shipped question bi-encoder (models/question-bi-encoder) is one run of one recipe: the cosine hinge loss from
all-MiniLM-L6-v2, a 3-epoch schedule stopped at the end of epoch 1, seed 13, 128 word pieces, one negative per
positive. dev-B has 50 questions, and one seed of one recipe says little. This script trains each recipe of
``RECIPES`` with several seeds, each as ``scripts/cv_question_model.py`` does: one model per fold of the 267
training questions (5 folds, seed 2016), scoring the fold it did not see, and one on all of them, scoring dev-B.
Then it judges every recipe, alone and in ``question-fusion`` with the shipped weights, on both, and also the
"soup" of a recipe's seeds (the mean of their weights, one model at serving: ``cqa train --average-of``).

Three steps; ``train`` and ``judge`` are what a GPU makes cheap (round 35 ran them on one H100):

    python scripts/question_sweep.py parts --out PARTS.json      # the untrained parts' scores (IR order, BM25, MiniLM)
    python scripts/question_sweep.py train --recipe NAME --out DIR [--seeds 13,14,15] [--device cuda]
    python scripts/question_sweep.py judge --parts PARTS.json --out DIR [--pack PACK_DIR]

``judge`` writes DIR/report.json and applies the rule written before the run (``RULE``): the winner, if any, and
the checkpoint that would ship (``--pack`` copies it there). Test is never read. JSON object last.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.measures import paired_ap  # noqa: E402
from ranking.evaluation.tuning import GoldMAP, folds_of, fused_scores  # noqa: E402
from ranking.neural.ranker import MiniLMRanker  # noqa: E402
from ranking.neural.train_minilm import (  # noqa: E402
    MiniLMTrainConfig,
    average_checkpoints,
    dev_set,
    question_groups,
    question_training_set,
    recorded_recipe,
    train_minilm,
)

UNTRAINED = ("ir-baseline", "bm25", "minilm-cosine")
MODEL = "question-bi-encoder"
FOLDS = 5


def shipped_weights() -> dict[str, float]:
    """The weights `question-fusion` ships with (ranking/question_fusion_defaults.json), over the parts this sweep
    scores; a clear error if they weigh any other."""
    from ranking.presets import PRESETS
    weights = {n: w for n, w in PRESETS["question-fusion"].params()["weights"].items() if w}
    if set(weights) - {*UNTRAINED, MODEL}:
        raise SystemExit(f"question-fusion weighs parts this sweep does not score: {weights}")
    return weights


# recipe -> what it changes in the shipped recipe; keep_epochs: where the 3-epoch schedule stops (the kept point is
# the best epoch end by dev-B up to there, as the shipped run kept epoch 1)
RECIPES: dict[str, dict] = {
    "shipped": {},
    "epochs2": {"keep_epochs": 2},
    "epochs3": {"keep_epochs": 3},
    "neg3": {"negatives": 3},
    "len256": {"max_length": 256},
    "lr5e-5": {"lr": 5e-5},
    # round 40's rule 25 (one seed, on the CPU): also the question pairs each fold's judgements imply
    "transitive": {"augment": "transitive"},
}
REFERENCE = "shipped seed 13"
RULE = ("A candidate is a recipe's seed-13 model or the soup of its seeds. Its cv figure: question-fusion with the "
        "shipped weights over the 267 training questions, the question model's scores out of fold; its dev figure: "
        "the same on dev-B with the model trained on every training question. It passes if both figures beat the "
        "shipped recipe's seed-13 model's (run in the same sweep) and the paired randomisation test of its cv "
        "figure's per-question AP against that model's over the 267 training questions gives p < 0.10. The winner "
        "is the passing candidate with the highest cv figure; ties and nothing passing ship nothing. Test is read "
        "once, after the winner's checkpoint is scored on dev-B on the CPU.")
# round 58: one candidate against the same recipe's soup without the implied pairs, over the same seeds
RULE_30 = ("One candidate, the soup of the `transitive` recipe's seeds, against the soup of the `shipped` recipe's "
           "same seeds (both trained in this sweep). It passes the sweep if its cv figure (question-fusion with the "
           "shipped weights over the 267 training questions, out of fold) is at least 0.004 above the reference "
           "soup's with the paired randomisation test over those questions at p < 0.05, the mean of its seeds' cv "
           "figures is above the mean of the reference seeds', and its dev figure is at least the reference soup's. "
           "Then, on the CPU, before test is read: dev-B question-fusion over its full model at least 0.7974 (the "
           "shipped model) and dev-C related-answers losing at most 0.005 against 0.4839.")
# rule -> its text, its reference candidate, and its judge over (candidates' figures, each recipe's mean over seeds)
RULES = {"11": (RULE, REFERENCE, lambda figures, means: rule_11(figures)),
         "30": (RULE_30, "shipped soup", lambda figures, means: rule_30(figures, means))}


def training_data(s: Settings):
    """The training threads, questions and gold, and dev-B's questions and gold."""
    return (*question_training_set(s.semeval_dir), *dev_set(s.semeval_dir, "B"))


def held_out(queries: list) -> list[list[str]]:
    """The question ids each fold holds out (``FOLDS`` folds, dealt as scripts/cv_question_model.py deals them)."""
    return [[queries[i].id for i in f] for f in folds_of(queries, FOLDS)]


def recipe_config(shipped_config: Path, recipe: str, seed: int, groups: list, device: str,
                  max_steps: int | None) -> MiniLMTrainConfig:
    """``recipe``'s training settings for ``groups``: the shipped model's (its ``config.json``) with what the recipe
    changes, and ``seed``."""
    change = dict(RECIPES[recipe])
    keep = change.pop("keep_epochs", 1)
    change.pop("augment", None)  # the data, not a training setting (``recipe_groups``)
    return recorded_recipe(shipped_config, groups, device, keep, max_steps, seed=seed, **change)


def recipe_groups(recipe: str, threads: list) -> list:
    """The training groups of ``recipe`` over ``threads``: with the pairs their judgements imply where the recipe
    says ``augment: transitive`` (``question_groups``)."""
    return question_groups(threads, RECIPES[recipe].get("augment"))


def cmd_parts(args) -> None:
    from ranking.rankers import get_ranker
    s = Settings()
    _, queries, _, dev_q, _ = training_data(s)
    out = {"train": {}, "dev": {}}
    for n in UNTRAINED:
        ranker = get_ranker(n, s)
        for key, qs in (("train", queries), ("dev", dev_q)):
            out[key][n] = {q.id: row for q, row in zip(qs, ranker.score(qs))}
    args.out.write_text(json.dumps(out))
    print(json.dumps({"parts": list(UNTRAINED), "train": len(queries), "dev": len(dev_q)}))


def cmd_train(args) -> None:
    s = Settings()
    threads, queries, gold, dev_q, dev_gold = training_data(s)
    folds = held_out(queries)
    for seed in args.seeds:
        base = args.out / args.recipe / f"seed-{seed}"
        record = {"recipe": args.recipe, "change": RECIPES[args.recipe], "seed": seed, "oof": {}, "folds": []}
        for k, held in [*enumerate(folds), ("full", [])]:
            held_set = set(held)
            groups = recipe_groups(args.recipe, [t for tid, t in threads.items() if tid not in held_set])
            cfg = recipe_config(args.shipped_config, args.recipe, seed, groups, args.device, args.max_steps)
            t0 = time.perf_counter()
            folder = base / (f"fold-{k}" if k != "full" else "full")
            metrics = train_minilm(groups, dev_q, dev_gold, folder, cfg,
                                   {"task": "B", "cv_fold": k, "held_out_questions": sorted(held), "sweep": args.recipe},
                                   False)
            ranker = MiniLMRanker.from_checkpoint(folder, args.device, name=f"{MODEL}-{args.recipe}-{seed}-{k}")
            if k == "full":
                record["dev"] = dict(zip([q.id for q in dev_q], ranker.score(dev_q)))
            else:
                fq = [q for q in queries if q.id in held_set]
                record["oof"].update(zip([q.id for q in fq], ranker.score(fq)))
            record["folds"].append({"fold": k, "steps": cfg.max_steps, "dev_B_MAP": metrics["dev_MAP"],
                                    "kept": metrics["best"], "seconds": round(time.perf_counter() - t0, 1)})
            print(json.dumps({"recipe": args.recipe, "seed": seed, **record["folds"][-1]}), flush=True)
        (base / "scores.json").write_text(json.dumps(record))


def _fused_map(model_scores: dict[str, list[float]], parts: dict, qs: list, gold_map: GoldMAP,
               weights: dict[str, float]) -> float:
    every = {**parts, MODEL: model_scores}
    return gold_map(fused_scores({n: [every[n][q.id] for q in qs] for n in weights}, weights))


def cmd_judge(args) -> None:
    s = Settings()
    _, queries, gold, dev_q, dev_gold = training_data(s)
    parts = json.loads(args.parts.read_text())
    train_map, dev_map_ = GoldMAP(queries, gold), GoldMAP(dev_q, dev_gold)
    alone, shipped = {MODEL: 1.0}, shipped_weights()

    def figures(oof: dict, dev: dict) -> dict:
        return {"cv_fusion": _fused_map(oof, parts["train"], queries, train_map, shipped),
                "dev_fusion": _fused_map(dev, parts["dev"], dev_q, dev_map_, shipped),
                "cv_alone": _fused_map(oof, {}, queries, train_map, alone),
                "dev_alone": _fused_map(dev, {}, dev_q, dev_map_, alone)}

    runs = {}
    for path in sorted(args.out.glob("*/seed-*/scores.json")):
        r = json.loads(path.read_text())
        runs.setdefault(r["recipe"], {})[r["seed"]] = r
    seeds = sorted(set.intersection(*(set(v) for v in runs.values())))  # the seeds every recipe finished
    folds = held_out(queries)
    rule_text, reference, judge = RULES[args.rule]
    report = {"rule": rule_text, "seeds": seeds, "recipes": {}, "untrained": {
        n: {"cv": _fused_map(parts["train"][n], {}, queries, train_map, alone),
            "dev": _fused_map(parts["dev"][n], {}, dev_q, dev_map_, alone)} for n in UNTRAINED}}
    candidates = {}
    for recipe, by_seed in runs.items():
        per_seed = {seed: figures(by_seed[seed]["oof"], by_seed[seed]["dev"]) for seed in seeds}
        mean = {k: sum(f[k] for f in per_seed.values()) / len(per_seed) for k in next(iter(per_seed.values()))}
        # the mean of the seeds' z-scored cosines (an ensemble: several models at serving; for comparison only)
        even = dict.fromkeys(seeds, 1 / len(seeds))
        ens_oof, ens_dev = ({q: fused_scores({sd: [by_seed[sd][key][q]] for sd in seeds}, even)[0]
                             for q in by_seed[seeds[0]][key]} for key in ("oof", "dev"))
        entry = {"per_seed": per_seed, "mean_over_seeds": mean, "score_ensemble": figures(ens_oof, ens_dev),
                 "folds": {sd: by_seed[sd]["folds"] for sd in seeds}}
        if 13 in per_seed:
            candidates[f"{recipe} seed 13"] = (per_seed[13], args.out / recipe / "seed-13" / "full",
                                               by_seed[13]["oof"])
        if len(seeds) > 1:
            soup_dir = args.out / recipe / "soup"
            oof, dev = {}, {}
            for k, held in [*enumerate(folds), ("full", [])]:
                name = f"fold-{k}" if k != "full" else "full"
                average_checkpoints([args.out / recipe / f"seed-{sd}" / name for sd in seeds], dev_q, dev_gold,
                                    soup_dir / name, {"task": "B", "sweep": recipe}, task="B", kind="bi-encoder")
                ranker = MiniLMRanker.from_checkpoint(soup_dir / name, args.device, name=f"{MODEL}-{recipe}-soup-{k}")
                if k == "full":
                    dev = dict(zip([q.id for q in dev_q], ranker.score(dev_q)))
                else:
                    fq = [q for q in queries if q.id in set(held)]
                    oof.update(zip([q.id for q in fq], ranker.score(fq)))
            entry["soup"] = figures(oof, dev)
            candidates[f"{recipe} soup"] = (entry["soup"], soup_dir / "full", oof)
            (soup_dir / "scores.json").write_text(json.dumps({"recipe": recipe, "seeds": seeds, "oof": oof, "dev": dev}))
        report["recipes"][recipe] = entry
        print(json.dumps({"recipe": recipe, "mean_over_seeds": mean, "soup": entry.get("soup")}), flush=True)
    ref = candidates.get(reference)

    def per_question(oof: dict) -> dict[str, float]:
        every = {**parts["train"], MODEL: oof}
        return train_map.per_question(fused_scores({n: [every[n][q.id] for q in queries] for n in shipped}, shipped))
    if ref is not None:
        for n, c in candidates.items():
            c[0]["cv_fusion_against_shipped"] = paired_ap(per_question(c[2]), per_question(ref[2]))
    report["reference"] = reference
    report["candidates"] = {n: c[0] for n, c in candidates.items()}
    passing, name = judge(report["candidates"], {r: e["mean_over_seeds"] for r, e in report["recipes"].items()})
    ranked = [(n, candidates[n]) for n in passing]
    report["passing"] = {n: candidates[n][0] for n in passing}
    report["winner"] = None if name is None else {"name": name, **candidates[name][0],
                                                  "checkpoint": str(candidates[name][1])}
    if args.pack:
        args.pack.mkdir(parents=True, exist_ok=True)
        named = [(n, candidates[n]) for n in [args.pack_candidate] if n in candidates and n not in passing]
        for n, (_, folder, _) in ranked[:2] + named:  # the winner and the runner-up (and one named), for the CPU checks
            shutil.copytree(folder, args.pack / n.replace(" ", "-"), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("training_log.jsonl"))
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"seeds": seeds, "winner": report["winner"], "passing": list(report["passing"]),
                      reference: None if ref is None else ref[0]}))


def rule_11(figures: dict[str, dict], reference: str = REFERENCE) -> tuple[list[str], str | None]:
    """``RULE`` over each candidate's figures (``cv_fusion``, ``dev_fusion`` and ``cv_fusion_against_shipped``, its
    paired test against ``reference``): the passing candidates, best cv figure first, and the winner (None when
    nothing passes or the best two tie)."""
    ref = figures.get(reference)
    if ref is None:
        return [], None
    passing = sorted((n for n, f in figures.items()
                      if f["cv_fusion"] > ref["cv_fusion"] and f["dev_fusion"] > ref["dev_fusion"]
                      and f["cv_fusion_against_shipped"]["p_randomization"] < 0.10),
                     key=lambda n: -figures[n]["cv_fusion"])
    tie = len(passing) > 1 and figures[passing[0]]["cv_fusion"] == figures[passing[1]]["cv_fusion"]
    return passing, (passing[0] if passing and not tie else None)


def rule_30(figures: dict[str, dict], means: dict[str, dict], candidate: str = "transitive",
            reference: str = "shipped") -> tuple[list[str], str | None]:
    """``RULE_30`` over the recipes' soups' figures and each recipe's mean over its seeds: ``([its soup], its
    soup)`` when the ``candidate`` recipe's soup passes the sweep's part of the rule, else ``([], None)``."""
    c, r = figures.get(f"{candidate} soup"), figures.get(f"{reference} soup")
    if c is None or r is None:
        return [], None
    ok = (c["cv_fusion"] - r["cv_fusion"] >= 0.004 and c["cv_fusion_against_shipped"]["p_randomization"] < 0.05
          and means[candidate]["cv_fusion"] > means[reference]["cv_fusion"] and c["dev_fusion"] >= r["dev_fusion"])
    return ([f"{candidate} soup"], f"{candidate} soup") if ok else ([], None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("parts", help="the untrained parts' scores on the training questions and dev-B")
    p.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("train", help="one recipe, each seed: a model per fold and one on every training question")
    t.add_argument("--recipe", choices=list(RECIPES), required=True)
    t.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=[13, 14, 15])
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--device", default="auto")
    t.add_argument("--max-steps", type=int, help="cap every model's steps (smoke runs)")
    t.add_argument("--shipped-config", type=Path, default=Path("models/question-bi-encoder/config.json"),
                   help="the shipped model's config.json, whose `train` section is the shipped recipe")
    j = sub.add_parser("judge", help="every recipe's figures, the soups of its seeds, and the rule's winner")
    j.add_argument("--parts", type=Path, required=True)
    j.add_argument("--out", type=Path, required=True)
    j.add_argument("--device", default="auto")
    j.add_argument("--pack", type=Path, help="copy the winner's and the runner-up's checkpoints here")
    j.add_argument("--rule", choices=list(RULES), default="11",
                   help="11: round 35's (every recipe's seed 13 and soup against shipped seed 13); 30: round 58's "
                        "(the transitive soup against the shipped soup)")
    j.add_argument("--pack-candidate", help="with --pack: also copy this candidate's checkpoint, passing or not")
    args = ap.parse_args()
    {"parts": cmd_parts, "train": cmd_train, "judge": cmd_judge}[args.cmd](args)


if __name__ == "__main__":
    main()
