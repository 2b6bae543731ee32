"""Team-draft interleaving of a thread's comments through the served path (round 65): does the readers' verdict on
interleaved comment orders (CQA_INTERLEAVE_COMMENTS) pick the ranker whose own orders have the higher official MAP,
and what does an interleaved GET /threads/{id}/answers cost?

Three real `cqa serve` processes over the full 2016 corpus's data folder, all started before the first request:
``reranker`` (as shipped: $CQA_DEFAULT_RANKER), ``challenger`` (the --challenger preset as the default ranker) and
``interleaved`` (as shipped, with CQA_INTERLEAVE_COMMENTS=--challenger and CQA_INTERLEAVE_SHARE=1: every thread
interleaved, the feedback log on in a file of its own). Each thread of the 2016 --split subtask A file (its related
threads, 10 comments each) is asked of the three by GET /threads/{id}/answers in an order that rotates, one request
at a time, --rounds times: per side the p50 / p95 ms and the p50's ratio to the reranker's, of the first round (each
thread's first view) and of the later ones (its scores memoised).

In the first round a simulated reader reads the first --read comments the interleaved server showed and judges each by
the official gold (Good helpful; PotentiallyUseful and Bad not: the official scorer's reading), one POST /feedback per
thread. The other two servers' orders are scored here with the official scorer (every comment judged). Then GET
/evaluation/feedback gives the interleaving's verdict (wins of each ranker, ties, the sign test) beside the two orders'
MAPs and their paired test, and per thread whether the interleaving's winner is the ranker whose own order had the
higher AP (the log's teams, read back from its file); ``preferred`` names a side only where its test is significant
(p < 0.05). Each interleaved order must hold the thread's comments, each once. Prints a JSON object last.

    python bench/comment_interleave.py [--data-dir var] [--challenger bilstm+signals] [--read 10] [--rounds 2]
        [--split test] [--limit 0]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import urllib.parse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from comment_feedback import judged_threads, official_map  # noqa: E402
from load import (beside_reference, forum_settings, get_json, in_turns, interleaving_agreement, judge,  # noqa: E402
                  preferred, run_header, server)

SIDES = ("reranker", "challenger", "interleaved")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder under which the full 2016 "
                    "corpus's is (built if missing)")
    ap.add_argument("--forum-dir", type=Path, help="the data folder the servers serve as it is (a test's small one, "
                    "holding the --split threads asked); default: the full 2016 corpus's under --data-dir")
    ap.add_argument("--challenger", default="bilstm+signals", help="the preset interleaved with the default ranker")
    ap.add_argument("--read", type=int, default=10, help="comments the simulated reader reads and judges, from the "
                    "first shown (10: a SemEval thread's every comment)")
    ap.add_argument("--rounds", type=int, default=2, help="times each thread is asked of every server")
    ap.add_argument("--split", choices=["dev", "test"], default="test")
    ap.add_argument("--limit", type=int, default=0, help="only the first N threads of the file (0: all)")
    args = ap.parse_args()
    from ranking.evaluation.feedback import FeedbackLog
    from ranking.evaluation.measures import paired_randomization

    settings = forum_settings(args)
    gold = judged_threads(settings, args.split, args.limit)
    items = [(t, t) for t in gold]
    out = {**run_header("comment_interleave"), "split": args.split, "threads": len(items), "rounds": args.rounds,
           "read": args.read, "challenger": args.challenger}
    first: dict[str, list[float]] = {s: [] for s in SIDES}
    later: dict[str, list[float]] = {s: [] for s in SIDES}
    orders: dict[str, dict[str, list[str]]] = {"reranker": {}, "challenger": {}}
    ids: dict[str, str] = {}  # thread -> its interleaved order's search_id
    not_interleaved = malformed = 0
    with tempfile.TemporaryDirectory(prefix="cqa-comment-interleave-") as tmp, contextlib.ExitStack() as stack:
        log_file = Path(tmp) / "feedback.sqlite3"
        common = {"CQA_REFRESH_S": "0", "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir), "CQA_FEEDBACK": "false"}
        envs = {"reranker": {}, "challenger": {"CQA_DEFAULT_RANKER": args.challenger},
                "interleaved": {"CQA_FEEDBACK": "true", "CQA_FEEDBACK_STORE": str(log_file),
                                "CQA_INTERLEAVE_COMMENTS": args.challenger, "CQA_INTERLEAVE_SHARE": "1"}}
        bases = {}
        for side in SIDES:
            bases[side], ready = stack.enter_context(server(settings.data_dir, {**common, **envs[side]}))
            if side == "interleaved" and ready.get("comments_challenger") != args.challenger:
                raise SystemExit(f"the interleaved server has no comments challenger: {ready.get('comments_challenger')}")
        out["reranker"] = ready["reranker"]

        def ask(base: str, thread: str):
            return get_json(f"{base}/threads/{urllib.parse.quote(thread, safe='')}/answers")
        for rnd, thread, got in in_turns(bases, items, args.rounds, first, ask, "GET /threads/{id}/answers"):
            if rnd:
                continue
            for side in orders:
                orders[side][thread] = [r["id"] for r in got[side]["results"]]
            mixed = got["interleaved"]
            shown = [r["id"] for r in mixed["results"]]
            if mixed.get("interleaved_with") != args.challenger:
                not_interleaved += 1
                continue
            malformed += sorted(shown) != sorted(orders["reranker"][thread])
            read = shown[:args.read]
            judge(bases["interleaved"], mixed["search_id"], [{"result_id": c, "helpful": gold[thread].get(c, False)}
                                                             for c in read])
            ids[thread] = mixed["search_id"]
        status, reported = get_json(bases["interleaved"] + "/evaluation/feedback")
        if status != 200:
            raise SystemExit(f"GET /evaluation/feedback answered {status}: {reported}")
        logged = {s["id"]: s for s in FeedbackLog(log_file).judged_searches()}
    # in_turns timed every round into ``first``: the first len(items) of each side are the first views
    n = len(items)
    for side in SIDES:
        first[side], later[side] = first[side][:n], first[side][n:]
    out["first_view"] = beside_reference(first, "reranker")
    if args.rounds > 1:
        out["again"] = beside_reference(later, "reranker")
    out["not_interleaved"], out["orders_not_the_threads_comments"] = not_interleaved, malformed
    aps = {side: official_map(orders[side], gold)[1] for side in orders}
    threads = sorted(gold)
    a, b = [aps["reranker"][t] for t in threads], [aps["challenger"][t] for t in threads]
    out["own_orders"] = {"MAP_reranker": round(float(np.mean(a)), 4), "MAP_challenger": round(float(np.mean(b)), 4),
                         "p": paired_randomization(a, b) if a != b else 1.0,
                         "threads_reranker_better": sum(x > y for x, y in zip(a, b)),
                         "threads_challenger_better": sum(y > x for x, y in zip(a, b))}
    groups = [g for g in reported["groups"] if g.get("interleaving")]
    if len(groups) != 1:
        raise SystemExit(f"the report has {len(groups)} interleaved groups: {reported['groups']}")
    out["interleaving"] = groups[0]["interleaving"]
    out["report_MAP_shown"] = groups[0].get("MAP")
    out["per_thread"] = interleaving_agreement(logged, ids, aps, args.challenger)
    it = out["interleaving"]

    own = out["own_orders"]
    out["preferred"] = {"by_own_orders_MAP": preferred(own["MAP_reranker"], own["MAP_challenger"], own["p"]),
                        "by_interleaving": preferred(it["reranker_wins"], it["challenger_wins"], it["p"])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
