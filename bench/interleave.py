"""Team-draft interleaving through the served path (round 60): does the users' verdict on interleaved searches
pick the ranker that the same users' judgements of each ranker's own lists pick, and what does an interleaved search
cost?

Three real `cqa serve` processes over the full 2016 corpus's data folder, all started before the first request:
``reranker`` (as shipped: $CQA_SEARCH_RANKER_ANSWERS), ``challenger`` (the --challenger preset as the answers
reranker) and ``interleaved`` (as shipped, with CQA_INTERLEAVE_ANSWERS=--challenger and CQA_INTERLEAVE_SHARE=1: every
question interleaved). Each 2016 --split question of the answers /search benchmark (target answers, k 10, as a forum
sends it) goes to the three in an order that rotates, one request at a time, --rounds times (p50 / p95 ms per
server). In the first round a simulated user judges what each server showed by the benchmark's gold (a result, or a
copy collapsed into it, judged relevant is helpful, one judged irrelevant is not, one the gold does not judge is left
unjudged): the interleaved server's judgements go to its POST /feedback, and the other two lists are scored here with
the official scorer's arithmetic (MAP over the first 10, unjudged results not helpful). Then GET
/evaluation/feedback gives the interleaving's verdict (wins of each ranker, ties, the sign test) beside the two lists'
MAPs and their paired test, and per question whether the interleaving's winner is the ranker whose own list had the
higher AP; ``preferred`` names a side only where its test is significant (p < 0.05; since round 65). Prints a JSON
object last.

    python bench/interleave.py [--data-dir var] [--challenger bm25] [--rounds 2] [--split test] [--limit 0]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from feedback import answer_searches, judgements_of  # noqa: E402
from load import (add_forum_arguments, get_json, interleaving_agreement, judge, judged_forum, latency_of,  # noqa: E402
                  post_json, preferred, run_header, searches_in_turns, server)


def ap_of(results: list[dict], judged: dict[str, int]) -> float:
    """The official scorer's AP over the first 10 of ``results``, judged by the gold as the simulated user judges."""
    from ranking.evaluation.scorer import average_precision
    helpful = {j["result_id"]: j["helpful"] for j in judgements_of(results, judged)}
    return average_precision([helpful.get(r["id"], False) for r in results])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.add_argument("--challenger", default="bm25", help="the preset interleaved with the answers reranker")
    ap.add_argument("--rounds", type=int, default=2, help="times each question is sent to every server")
    args = ap.parse_args()
    from app.settings import Settings
    from ranking.evaluation.measures import paired_randomization

    settings, qrels, questions = judged_forum(args, "answers")
    shipped = Settings().search_ranker_answers
    bodies = answer_searches(questions)
    out = {**run_header("interleave"), "split": args.split, "questions": len(bodies), "rounds": args.rounds,
           "reranker": shipped, "challenger": args.challenger}
    sides = ("reranker", "challenger", "interleaved")
    ms: dict[str, list[float]] = {s: [] for s in sides}
    aps: dict[str, dict[str, float]] = {"reranker": {}, "challenger": {}}
    interleaved_ids: dict[str, str] = {}  # question -> its interleaved search's id
    with tempfile.TemporaryDirectory(prefix="cqa-interleave-") as tmp, contextlib.ExitStack() as stack:
        common = {"CQA_REFRESH_S": "0", "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir), "CQA_FEEDBACK": "false"}
        envs = {"reranker": {}, "challenger": {"CQA_SEARCH_RANKER_ANSWERS": args.challenger},
                "interleaved": {"CQA_FEEDBACK": "true", "CQA_FEEDBACK_STORE": str(Path(tmp) / "feedback.sqlite3"),
                                "CQA_INTERLEAVE_ANSWERS": args.challenger, "CQA_INTERLEAVE_SHARE": "1"}}
        bases = {}
        for side in sides:
            bases[side], ready = stack.enter_context(server(settings.data_dir, {**common, **envs[side]}))
            if side == "interleaved" and ready["search_challengers"] != {"answers": args.challenger}:
                raise SystemExit(f"the interleaved server has no challenger: {ready['search_challengers']}")
        for side in sides:  # each side's first request, before the clock
            post_json(bases[side] + "/search", bodies[0][1])
        for rnd, qid, got in searches_in_turns(bases, bodies, args.rounds, ms):
            if rnd:
                continue
            judged = qrels.get(qid, {})
            for side in aps:
                aps[side][qid] = ap_of(got[side]["results"], judged)
            mixed = got["interleaved"]
            if mixed.get("interleaved_with") != args.challenger:
                raise SystemExit(f"{qid}: not interleaved: {mixed.get('interleaved_with')}")
            sent = judgements_of(mixed["results"], judged)
            if sent:
                judge(bases["interleaved"], mixed["search_id"], sent)
                interleaved_ids[qid] = mixed["search_id"]
        status, reported = get_json(bases["interleaved"] + "/evaluation/feedback")
        if status != 200:
            raise SystemExit(f"GET /evaluation/feedback answered {status}: {reported}")
        from ranking.evaluation.feedback import FeedbackLog
        logged = {s["id"]: s for s in FeedbackLog(Path(tmp) / "feedback.sqlite3").judged_searches()}
    out["sides"] = {s: latency_of(v) for s, v in ms.items()}
    out["interleaved_p50_over_reranker"] = round(out["sides"]["interleaved"]["p50_ms"] /
                                                 out["sides"]["reranker"]["p50_ms"], 3)
    qids = sorted(aps["reranker"])
    a, b = [aps["reranker"][q] for q in qids], [aps["challenger"][q] for q in qids]
    out["own_lists"] = {"MAP_reranker": round(float(np.mean(a)), 4), "MAP_challenger": round(float(np.mean(b)), 4),
                        "p": paired_randomization(a, b) if a != b else 1.0,
                        "questions_reranker_better": sum(x > y for x, y in zip(a, b)),
                        "questions_challenger_better": sum(y > x for x, y in zip(a, b))}
    (group,) = [g for g in reported["groups"] if g.get("interleaving")]
    out["interleaving"] = group["interleaving"]
    out["per_question"] = interleaving_agreement(logged, interleaved_ids, aps, args.challenger)
    it, own = group["interleaving"], out["own_lists"]
    out["preferred"] = {"by_own_lists_MAP": preferred(own["MAP_reranker"], own["MAP_challenger"], own["p"]),
                        "by_interleaving": preferred(it["reranker_wins"], it["challenger_wins"], it["p"])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
