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

With `--target answers` the same duplicates judge the forum's answer search. Each linked related question's comments
get their SemEval label as votes (`scripts/make_stackexchange_dump.py`'s `votes_from_labels`: Good 1, PotentiallyUseful
0, Bad -1), so an added question should find the comments voted up in its group. Then `cqa evaluate --duplicates
--target answers --judged-by votes --json` beside `GET /threads/{id}/similar?target=answers` of a real server, scored
with the same judgements; and, for the same served lists, the SemEval /search answers judgements (comments Good for the
original question itself: `cqa evaluate --benchmark semeval2016-{split}-search-answers`'s).

    python bench/forum_duplicates.py [--data-dir var] [--split test] [--target questions|answers] [--limit N]
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


def evaluate(folder: Path, *options: str) -> tuple[dict, dict]:
    """`cqa evaluate --duplicates OPTIONS --json` on the data folder ``folder``, as an operator runs it: its figures
    as this bench reports them (also on standard error, as soon as they are known), and its JSON line."""
    env = {**os.environ, "CQA_DATA_DIR": str(folder), "PYTHONPATH": str(ROOT)}
    command = ["evaluate", "--duplicates", *options, "--json"]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", *command], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cqa {' '.join(command)} failed: {done.stderr[-2000:]}")
    evaluated = json.loads(done.stdout.strip().splitlines()[-1])
    figures = {"seconds": round(time.perf_counter() - t0, 1), "questions": evaluated["questions"],
               "ranker": evaluated["ranker"],
               **{m: evaluated[m] for m in ("MAP@10", "P@1", "nDCG@10", "MRR", "Recall@10")},
               "MAP_interval_95": [round(v, 4) for v in evaluated["MAP_interval_95"]],
               "first_stage": evaluated["compare"]["figures"],
               "p_vs_first_stage": evaluated["compare"]["p_randomization"], "latency_ms": evaluated["latency_ms"]}
    print(json.dumps({f"cqa {' '.join(command)}": figures}), file=sys.stderr, flush=True)
    return figures, evaluated


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--split", choices=("dev", "test"), default="test", help="whose original questions")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
    ap.add_argument("--target", choices=("questions", "answers"), default="questions",
                    help="what the duplicates search for: similar questions, or answers judged by votes")
    args = ap.parse_args()
    if args.target == "answers":
        return answers(args)

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
        out["cqa_evaluate_duplicates"], evaluated = evaluate(folder)
        renamed = {OWN + q: j for q, j in qrels.items()}  # the report's questions are the added threads' ids
        assert set(renamed) >= set(json.loads((Path(evaluated["report"]) / "report.json").read_text())[
            "per_question_ap"]), "the evaluation judged questions this bench did not add"
        with server(folder, {}) as (base, _ready):
            served = score_split(base, qrels, questions, "questions")
        out["served_similar"] = {"questions": served["questions"], **served["similar"],
                                 "p50_ms": served["similar_p50_ms"]}
        out["difference_MAP@10"] = round(out["cqa_evaluate_duplicates"]["MAP@10"] - served["similar"]["MAP@10"], 4)
    print(json.dumps(out))


def answers(args) -> None:
    """``--target answers``: each added question linked to its relevant related questions, their comments voted by
    their labels; the forum's judgement of its answer search through `cqa evaluate` and a real server."""
    from app.settings import Settings
    from indexing.models import Thread
    from indexing.store import ThreadStore
    from ranking.evaluation.measures import per_query
    from ranking.fullcorpus import corpus_settings, ensure_corpus, figures_of
    from ranking.search_benchmark import qrels_for
    from scripts.make_stackexchange_dump import votes_from_labels
    from search_quality import SHOWN, shown
    from load import get_json

    settings = Settings(data_dir=args.data_dir)
    qrels, questions = qrels_for(settings, args.split, "questions")
    semeval, _ = qrels_for(settings, args.split, "answers")  # comments Good for the original question itself
    if args.limit:
        questions = dict(list(questions.items())[: args.limit])
    links = {qid: sorted(d for d, rel in qrels[qid].items() if rel) for qid in questions}
    ensure_corpus(settings, progress=True)
    with ThreadStore(corpus_settings(settings).store_path) as store:
        linked = {x: store.get(x) for x in sorted({x for xs in links.values() for x in xs})}
    voted = [votes_from_labels(t) for t in linked.values() if t is not None]
    judged = {OWN + qid: {a.id: 1 for x in xs if linked.get(x) for a in linked[x].answers if a.label == "Good"}
              for qid, xs in links.items()}
    judged = {q: j for q, j in judged.items() if j}
    added = [Thread(id=OWN + qid, subject=subject, body=body, meta={"duplicate_of": links[qid]})
             for qid, (subject, body) in questions.items()]
    out: dict = {"bench": "forum_duplicates", "target": "answers", "split": args.split,
                 "date": time.strftime("%Y-%m-%d"), "links": sum(len(v) for v in links.values()),
                 "questions_with_a_voted_answer_in_their_group": len(judged)}
    with corpus_with(settings, added + voted) as (folder, _):
        out["cqa_evaluate_duplicates_answers"], evaluated = evaluate(folder, "--target", "answers", "--judged-by",
                                                                     "votes")
        report = json.loads((Path(evaluated["report"]) / "report.json").read_text())
        runs: dict[str, dict] = {"votes": {}, "semeval": {}}
        with server(folder, {}) as (base, _ready):
            for q in judged:
                status, body = get_json(f"{base}/threads/{q}/similar?k={SHOWN}&target=answers")
                if status != 200:
                    raise SystemExit(f"GET /threads/{q}/similar answered {status}: {body}")
                runs["votes"][q] = shown(body["results"], judged[q])
                runs["semeval"][q] = shown(body["results"], semeval.get(q[len(OWN):], {}))
        figures = figures_of(judged, runs["votes"])
        served_ap = per_query(judged, runs["votes"], "AP@10")
        out["served_similar_answers"] = {"questions": len(judged), "MAP@10": round(figures["MAP@10"], 4),
                                         "P@1": round(figures["P@1"], 4)}
        out["threads_scored_differently"] = sum(abs(served_ap[q] - report["per_question_ap"][q]) > 1e-9
                                                for q in judged)
        orgq = {q[len(OWN):]: run for q, run in runs["semeval"].items() if semeval.get(q[len(OWN):])}
        out["same_lists_judged_by_semeval"] = {
            "questions": len(orgq),
            "MAP@10": round(figures_of({q: semeval[q] for q in orgq}, orgq)["MAP@10"], 4)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
