"""Rules 23 and 24 (issue 16, round 40): the B and C rankers' MiniLM models pulled back toward their zero-shot start.

WiSE-FT (Wortsman et al. 2022, "Robust fine-tuning of zero-shot models"): a * fine-tuned + (1 - a) * zero-shot,
weight by weight, one model at serving (`cqa train --average-of CHECKPOINT base --mix a,1-a`). Nothing is trained.

    python scripts/wise_ft.py questions --out var/r40   # rule 23: the question model, cross-validated and on dev-B
    python scripts/wise_ft.py answers --out var/r40     # rule 24: the C ranker's answer model on dev-C

``questions`` mixes each fold model of scripts/cv_question_model.py (``--folds-dir``; each held out a fifth of the 267
B training questions) at each a and scores its held-out fold with it: the cv figure is `question-fusion` with its
shipped weights over those out-of-fold scores, against the unmixed folds' (a = 1) with the paired tests. It mixes the
shipped question model too and scores dev-B the same way. ``answers`` mixes the subtask A bi-encoder at each a and
runs `cqa evaluate --benchmark semeval2016-dev-C --ranker related-answers --json` with it as the C ranker's answer
ranker (``CQA_BI_ENCODER_CHECKPOINT``), and on dev-C-nometa-shuffled, with each half of dev-C's questions. Test is
never read. Each writes OUT/<step>.json and prints a JSON object last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.measures import paired_ap  # noqa: E402
from ranking.evaluation.tuning import GoldMAP, folds_of, fused_scores  # noqa: E402

ALPHAS = (0.75, 0.5, 0.25)  # the fine-tuned model's share; 1 is the model as shipped
MODEL = "question-bi-encoder"


def mixed(source: Path, a: float, out: Path, task: str) -> Path:
    """``source`` mixed with the packaged start at share ``a`` (written once; not scored on dev here)."""
    from ranking.neural.train_minilm import BASE, average_checkpoints
    if a == 1.0:
        return source
    if not (out / "model.safetensors").is_file():
        held = json.loads((source / "config.json").read_text()).get("held_out_questions")  # a fold model's record
        average_checkpoints([source, BASE], [], [], out, {"task": task, "wise_ft": a, "held_out_questions": held},
                            task=task, kind="bi-encoder", mix=[a, 1 - a])
    return out


def cmd_questions(args) -> None:
    from ranking.neural.ranker import MiniLMRanker
    from ranking.neural.train_minilm import dev_set, held_out_scores, question_training_set
    from ranking.presets import PRESETS
    from ranking.rankers import get_ranker
    s = Settings()
    _, queries, gold = question_training_set(s.semeval_dir)
    dev_q, dev_gold = dev_set(s.semeval_dir, "B")
    weights = {n: w for n, w in PRESETS["question-fusion"].params()["weights"].items() if w}
    others = [n for n in weights if n != MODEL]
    parts = {n: get_ranker(n, s).score(queries) for n in others}
    dev_parts = {n: get_ranker(n, s).score(dev_q) for n in others}
    train_map, dev_map = GoldMAP(queries, gold), GoldMAP(dev_q, dev_gold)
    folds = [[queries[i].id for i in f] for f in folds_of(queries, 5)]

    def fusion(model_rows: list, others_rows: dict) -> list:
        return fused_scores({**{n: others_rows[n] for n in others}, MODEL: model_rows}, weights)

    runs, per_q = {}, {}
    for a in (1.0, *ALPHAS):
        oof = held_out_scores([mixed(args.folds_dir / f"fold-{k}", a, args.out / "questions" / f"a{a}" / f"fold-{k}",
                                     "B") for k in range(len(folds))], folds, queries, s.device, f"{MODEL}-a{a}")
        rows = [oof[q.id] for q in queries]
        full = mixed(s.question_bi_encoder_checkpoint, a, args.out / "questions" / f"a{a}" / "full", "B")
        dev_rows = MiniLMRanker.from_checkpoint(full, s.device, name=f"{MODEL}-a{a}").score(dev_q)
        per_q[a] = train_map.per_question(fusion(rows, parts))
        runs[a] = {"cv_fusion": train_map(fusion(rows, parts)), "cv_alone": train_map(rows),
                   "dev_fusion": dev_map(fusion(dev_rows, dev_parts)), "dev_alone": dev_map(dev_rows),
                   "checkpoint": str(full)}
        if a != 1.0:
            runs[a]["cv_fusion_against_unmixed"] = paired_ap(per_q[a], per_q[1.0])
        print(json.dumps({"a": a, **runs[a]}), file=sys.stderr, flush=True)
    best = max(ALPHAS, key=lambda a: runs[a]["cv_fusion"])
    cand = runs[best]
    report = {"rule": 23, "weights": weights, "alphas": {str(a): r for a, r in runs.items()}, "candidate": best,
              "condition_1": cand["cv_fusion"] > runs[1.0]["cv_fusion"]
              and cand["cv_fusion_against_unmixed"]["p_randomization"] < 0.05,
              "condition_2_in_process": cand["dev_fusion"] >= runs[1.0]["dev_fusion"],  # the shipped dev-B
              "command": "python scripts/wise_ft.py " + " ".join(sys.argv[1:])}
    (args.out / "questions.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("candidate", "condition_1", "condition_2_in_process")}
                     | {"cv": {str(a): round(r["cv_fusion"], 4) for a, r in runs.items()},
                        "dev": {str(a): round(r["dev_fusion"], 4) for a, r in runs.items()}}))


def evaluate(benchmark: str, ranker: str, env: dict) -> dict:
    """`cqa evaluate --benchmark B --ranker R --json` in a child process with ``env`` added: its report."""
    cqa = str(Path(sys.executable).with_name("cqa"))
    p = subprocess.run([cqa, "evaluate", "--benchmark", benchmark, "--ranker", ranker, "--json"],
                       env={**os.environ, **env}, capture_output=True, text=True, check=True)
    last = json.loads(p.stdout.strip().splitlines()[-1])
    return json.loads((Path(last["report"]) / "report.json").read_text())


def halves(report: dict, gold_file: Path) -> list[float]:
    """MAP over the first and the last half of the questions, in the gold file's order."""
    from ranking.evaluation.scorer import read_lines
    order = list(dict.fromkeys(line.qid for line in read_lines(gold_file)))
    ap = report["per_question_ap"]
    half = len(order) // 2
    return [sum(ap[q] for q in part) / len(part) for part in (order[:half], order[half:])]


def cmd_answers(args) -> None:
    from ranking.evaluation.benchmarks import BENCHMARKS
    from ranking.presets import PRESETS
    s = Settings()
    gold_file = BENCHMARKS["semeval2016-dev-C"].paths(s.semeval_dir)[1]
    a_alone = PRESETS["related-answers"].params()["answer_ranker_alone_dev_MAP"]  # the A bi-encoder alone on dev-C
    runs = {}
    for a in (1.0, *ALPHAS):
        folder = mixed(s.bi_encoder_checkpoint, a, args.out / "answers" / f"a{a}", "A")
        env = {"CQA_BI_ENCODER_CHECKPOINT": str(folder.resolve())}
        dev = evaluate("semeval2016-dev-C", "related-answers", env)
        runs[a] = {"dev_C": dev["MAP"], "halves": halves(dev, gold_file), "report": dev["folder"],
                   "checkpoint": str(folder)}
        print(json.dumps({"a": a, **runs[a]}), file=sys.stderr, flush=True)
    best = max(ALPHAS, key=lambda a: runs[a]["dev_C"])
    cand = runs[best]
    folder = Path(cand["checkpoint"]).resolve()
    nometa = evaluate("semeval2016-dev-C-nometa-shuffled", "related-answers", {"CQA_BI_ENCODER_CHECKPOINT": str(folder)})
    cand["dev_C_nometa_shuffled"] = nometa["MAP"]
    report = {"rule": 24, "alphas": {str(a): r for a, r in runs.items()}, "candidate": best,
              "condition_1": cand["dev_C"] >= runs[1.0]["dev_C"] + 0.005,  # the shipped dev-C, plus 0.005
              "condition_2": all(c >= u for c, u in zip(cand["halves"], runs[1.0]["halves"])),
              "condition_3": cand["dev_C"] - nometa["MAP"] <= 0.01 and nometa["MAP"] > a_alone,
              "command": "python scripts/wise_ft.py " + " ".join(sys.argv[1:])}
    (args.out / "answers.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("candidate", "condition_1", "condition_2", "condition_3")}
                     | {"dev_C": {str(a): round(r["dev_C"], 4) for a, r in runs.items()},
                        "nometa": round(nometa["MAP"], 4)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("questions", help="rule 23: the question model mixed, cross-validated and on dev-B")
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--folds-dir", type=Path, default=Path("var/reports/cv-question-model"),
                   help="scripts/cv_question_model.py's output folder, holding fold-0 ... fold-4")
    c = sub.add_parser("answers", help="rule 24: the C ranker's answer model mixed, on dev-C")
    c.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    {"questions": cmd_questions, "answers": cmd_answers}[args.cmd](args)


if __name__ == "__main__":
    main()
