"""`cqa evaluate --duplicates` on a forum whose duplicate links are known, beside what a real server's
`GET /threads/{id}/similar` gives for the same questions, in one run: the evaluation an operator runs on their own
forum must measure the endpoint their users get.

The forum: the full 2016 corpus with each original question of the 2016 dev or test /search benchmark added as a thread
of its own (as `bench/similar_quality.py` builds it), linked as a duplicate (`meta.duplicate_of`) of each related
question the SemEval judges found relevant to it. Those links are what a StackExchange site's PostLinks.xml holds for
a question closed as a duplicate. Then:
- `cqa evaluate --duplicates --json` over the copy, as a subprocess (what an operator runs), reranked and first stage;
- `GET /threads/{id}/similar` of a real `cqa serve` on the same copy, scored with the same judgements
  (`bench/similar_quality.py`'s `score_split`).
Both must give the same MAP@10, P@1 and nDCG@10. Prints a JSON object last.

    python bench/forum_duplicates.py [--data-dir var] [--split test] [--limit N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import server  # noqa: E402
from similar_quality import OWN, corpus_with, score_split  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--split", choices=("dev", "test"), default="test", help="whose original questions")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.models import Thread
    from ranking.search_benchmark import qrels_for

    settings = Settings(data_dir=args.data_dir)
    qrels, questions = qrels_for(settings, args.split, "questions")
    if args.limit:
        questions = dict(list(questions.items())[: args.limit])
        qrels = {q: qrels[q] for q in questions}
    out: dict = {"bench": "forum_duplicates", "split": args.split, "date": time.strftime("%Y-%m-%d")}
    added = [Thread(id=OWN + qid, subject=subject, body=body,
                    meta={"duplicate_of": sorted(d for d, rel in qrels[qid].items() if rel)})
             for qid, (subject, body) in questions.items()]
    with corpus_with(settings, added) as (folder, _):
        out["links"] = sum(len(t.meta["duplicate_of"]) for t in added)
        env = {**os.environ, "CQA_DATA_DIR": str(folder), "PYTHONPATH": str(ROOT)}
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", "--duplicates", "--json"], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"cqa evaluate --duplicates failed: {done.stderr[-2000:]}")
        evaluated = json.loads(done.stdout.strip().splitlines()[-1])
        out["cqa_evaluate_duplicates"] = {
            "seconds": round(time.perf_counter() - t0, 1), "questions": evaluated["questions"],
            **{m: evaluated[m] for m in ("MAP@10", "P@1", "nDCG@10", "MRR", "Recall@10")},
            "MAP_interval_95": [round(v, 4) for v in evaluated["MAP_interval_95"]],
            "first_stage": evaluated["compare"]["figures"], "p_vs_first_stage": evaluated["compare"]["p_randomization"],
            "latency_ms": evaluated["latency_ms"]}
        print(json.dumps({"cqa evaluate --duplicates": out["cqa_evaluate_duplicates"]}), file=sys.stderr, flush=True)
        renamed = {OWN + q: j for q, j in qrels.items()}  # the report's questions are the added threads' ids
        assert set(renamed) >= set(json.loads((Path(evaluated["report"]) / "report.json").read_text())[
            "per_question_ap"]), "the evaluation judged questions this bench did not add"
        with server(folder, {}) as (base, _ready):
            served = score_split(base, qrels, questions, "questions")
        out["served_similar"] = {"questions": served["questions"], **served["similar"],
                                 "p50_ms": served["similar_p50_ms"]}
        out["difference_MAP@10"] = round(out["cqa_evaluate_duplicates"]["MAP@10"] - served["similar"]["MAP@10"], 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
