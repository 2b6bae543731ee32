"""The forum's judged searches searched again with another ranker (round 61): does `cqa evaluate --feedback --ranker
NAME`, scored by the judgements users gave to what the served ranker showed, tell which ranker would serve them
better, and what does keeping each search's request (CQA_FEEDBACK_QUERIES) cost POST /search?

Real `cqa serve` processes over the full 2016 corpus's data folder, all started before the first request:
``queries`` (this tree, the log keeping requests), ``ids`` (this tree, the log as shipped: ids only, the reference of
the cost) and one per --candidates preset as the --target's reranker (``truth:NAME``, no log). Each 2016 --split
question of the --target /search benchmark (answers or questions, k 10, as a forum sends it) goes to every server in an
order that rotates, one request at a time, --rounds times: per side the p50 / p95 ms, and the p50's ratio of
``queries`` to ``ids``. In the first round a simulated user judges what ``queries`` showed by the benchmark's gold
(bench/feedback.py's user: a result or a copy collapsed into it judged relevant is helpful, one judged irrelevant is
not, one the gold does not judge is left unjudged; POST /feedback). With --judges K, the user judges only the first K
of those, in the order shown, as a real user judges one or two results of a page (round 62).

Then, for each candidate, the command a forum's operator runs, `cqa evaluate --feedback --ranker NAME --json`, on
the log ``queries`` wrote: its MAP of the served reranker and of the candidate, their paired test, and the share of
helpful results each page keeps. Beside it, the truth it estimates: each ranker's own first page as its server showed
it, every result judged by the gold (unjudged as not helpful; bench/interleave.py's own-list MAP), and the paired
test, over the questions whose search was judged (the ones the replay sees) and over all; and whether the replay's
difference has the truth's sign and lies in the bracket. The served reranker's replay must equal GET
/evaluation/feedback's MAP and show every search as served. Prints a JSON object last.

    python bench/replay.py [--data-dir var] [--split dev] [--target answers] [--candidates related-answers,bi-encoder,bm25]
        [--rounds 2] [--judges K]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from feedback import answer_searches, judgements_of  # noqa: E402
from interleave import ap_of  # noqa: E402
from load import (add_forum_arguments, get_json, judge, judged_forum, latency_of, post_json, run_header,  # noqa: E402
                  searches_in_turns, server)


def replayed(settings, log_file: Path, candidate: str, target: str) -> dict:
    """`cqa evaluate --feedback --ranker CANDIDATE --target TARGET --json` on the forum's folder with ``log_file`` as its
    log: the command's last line."""
    env = {**os.environ, "CQA_DATA_DIR": str(settings.data_dir), "CQA_FEEDBACK_STORE": str(log_file),
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
           "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
    out = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", "--feedback", "--ranker", candidate, "--target",
                          target, "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"cqa evaluate --feedback --ranker {candidate} failed: {out.stderr[-2000:]}")
    print("\n".join(out.stdout.strip().splitlines()[:-1]), file=sys.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


DEFAULT_CANDIDATES = {"answers": "related-answers,bi-encoder,bm25", "questions": "question-fusion,bi-encoder,bm25"}


def log_size(path: Path, recorded: int) -> dict:
    """The log file's bytes per search once its WAL is checkpointed into it, and its requests' mean length."""
    import sqlite3
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (request,) = db.execute("SELECT avg(length(request)) FROM served").fetchone()
    return {"searches_recorded": recorded, "bytes_per_search": round(path.stat().st_size / recorded),
            "request_chars_per_search": round(request) if request is not None else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.set_defaults(split="dev")
    ap.add_argument("--target", choices=["answers", "questions"], default="answers", help="what the searches ask for")
    ap.add_argument("--candidates", default=None, help="presets searched again as the target's reranker, "
                    "comma-separated (default: related-answers,bi-encoder,bm25 for answers, "
                    "question-fusion,bi-encoder,bm25 for questions)")
    ap.add_argument("--rounds", type=int, default=2, help="times each question is sent to every server")
    ap.add_argument("--judges", type=int, default=0, metavar="K",
                    help="the simulated user judges at most the first K results the gold judges, in the order shown "
                    "(a real user judges one or two; default 0: every one)")
    args = ap.parse_args()
    from app.settings import Settings
    from ranking.evaluation.measures import paired_randomization

    settings, qrels, questions = judged_forum(args, args.target)
    shipped = getattr(Settings(), f"search_ranker_{args.target}")
    candidates = [c for c in (args.candidates or DEFAULT_CANDIDATES[args.target]).split(",") if c]
    bodies = [(qid, {**body, "target": args.target}) for qid, body in answer_searches(questions)]
    out = {**run_header("replay"), "split": args.split, "target": args.target, "questions": len(bodies),
           "rounds": args.rounds, "judges": args.judges or None, "reranker": shipped, "candidates": candidates}
    ms: dict[str, list[float]] = {}
    truth: dict[str, dict[str, float]] = {}  # per side, each question's own-list AP by the gold (round 0)
    judged: list[str] = []  # the questions whose search the simulated user judged: those the replay searches again
    with tempfile.TemporaryDirectory(prefix="cqa-replay-") as tmp, contextlib.ExitStack() as stack:
        log_file, ids_file = Path(tmp) / "queries.sqlite3", Path(tmp) / "ids.sqlite3"
        common = {"CQA_REFRESH_S": "0", "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
        sides = {"queries": {"CQA_FEEDBACK_QUERIES": "true", "CQA_FEEDBACK_STORE": str(log_file)},
                 "ids": {"CQA_FEEDBACK_STORE": str(ids_file)},
                 **{f"truth:{c}": {f"CQA_SEARCH_RANKER_{args.target.upper()}": c, "CQA_FEEDBACK": "false"}
                    for c in candidates}}
        bases = {}
        for side, env in sides.items():
            bases[side], _ = stack.enter_context(server(settings.data_dir, {**common, **env}))
            post_json(bases[side] + "/search", bodies[0][1])  # its first request, before the clock
            ms[side], truth[side] = [], {}
        for rnd, qid, got in searches_in_turns(bases, bodies, args.rounds, ms):
            if rnd:
                continue
            for side, resp in got.items():
                truth[side][qid] = ap_of(resp["results"], qrels.get(qid, {}))
            shown = got["queries"]
            if sent := judgements_of(shown["results"], qrels.get(qid, {}))[:args.judges or None]:
                judge(bases["queries"], shown["search_id"], sent)
                judged.append(qid)
        status, reported = get_json(bases["queries"] + "/evaluation/feedback")
        if status != 200:
            raise SystemExit(f"GET /evaluation/feedback answered {status}: {reported}")
        recorded = {side: get_json(bases[side] + "/ready")[1]["feedback"]["recorded"] for side in ("queries", "ids")}
        stack.close()  # the servers stopped: the replays have the machine to themselves
        out["log"] = {side: log_size(f, recorded[side]) for side, f in (("queries", log_file), ("ids", ids_file))}
        (group,) = reported["groups"]
        out["reported"] = {k: group[k] for k in ("searches", "judgements", "MAP", "MAP_unjudged_not_helpful")}
        out["judged_searches"] = len(judged)
        out["candidates_replayed"] = {}
        for c in candidates:
            r = replayed(settings, log_file, c, args.target)
            served_truth, cand_truth = ([truth[side][q] for q in judged] for side in ("queries", f"truth:{c}"))
            truth_diff = (sum(cand_truth) - sum(served_truth)) / len(served_truth)
            everywhere = [sum(truth[side].values()) / len(truth[side]) for side in ("queries", f"truth:{c}")]
            out["candidates_replayed"][c] = {
                "replay": {"served_MAP": r["served"]["MAP"], "candidate_MAP": r["candidate"]["MAP"],
                           "difference": r["compare"]["MAP_difference"], "p": r["compare"]["p_randomization"],
                           "served_MAP_unjudged_not_helpful": r["served"]["MAP_unjudged_not_helpful"],
                           "candidate_MAP_unjudged_not_helpful": r["candidate"]["MAP_unjudged_not_helpful"],
                           "difference_unjudged_not_helpful": r["compare"]["MAP_unjudged_not_helpful_difference"],
                           "p_unjudged_not_helpful": r["compare"]["p_unjudged_not_helpful"],
                           "better": r["compare"]["better"], "worse": r["compare"]["worse"],
                           "served_helpful_found": r["served"]["helpful_found"],
                           "candidate_helpful_found": r["candidate"]["helpful_found"],
                           "helpful_found_p": r["compare"]["helpful_found_p"],
                           "searches": r["searches"], "reproduced": f"{r['reproduced']} of {r['reproducible']}",
                           "served_equals_report": r["served"]["MAP"] == group["MAP"] == r["as_shown_MAP"] and
                           r["served"]["MAP_unjudged_not_helpful"] == group["MAP_unjudged_not_helpful"],
                           "seconds": r["seconds"], "p50_ms": {k: r[k]["latency_ms"]["p50"]
                                                               for k in ("served", "candidate")}},
                "truth": {"served_MAP": round(float(np.mean(served_truth)), 4),
                          "candidate_MAP": round(float(np.mean(cand_truth)), 4), "difference": round(truth_diff, 4),
                          "p": paired_randomization(cand_truth, served_truth) if cand_truth != served_truth else 1.0,
                          # over every question, those whose served page held nothing the gold judges too (where
                          # only a candidate's results could be judged; no replay sees those)
                          "all_questions": {"served_MAP": round(everywhere[0], 4),
                                            "candidate_MAP": round(everywhere[1], 4),
                                            "difference": round(everywhere[1] - everywhere[0], 4)}},
                "verdict": r["compare"]["verdict"], "judgements_per_search": r["judgements_per_search"],
                "caution": r["compare"]["caution"],
                # the verdict names the ranker the truth favours (None: undecided, or the truth a tie)
                "verdict_right": None if r["compare"]["verdict"] == "undecided" or round(truth_diff, 4) == 0 else
                r["compare"]["verdict"].startswith("candidate") == (truth_diff > 0),
                "same_sign": bool(np.sign(round(truth_diff, 4)) == np.sign(r["compare"]["MAP_difference"])),
                "truth_within_bracket": bool(min(r["compare"]["MAP_difference"],
                                                 r["compare"]["MAP_unjudged_not_helpful_difference"])
                                             <= round(truth_diff, 4) <=
                                             max(r["compare"]["MAP_difference"],
                                                 r["compare"]["MAP_unjudged_not_helpful_difference"]))}
    out["sides"] = {s: latency_of(v) for s, v in ms.items()}
    out["queries_p50_over_ids"] = round(float(np.percentile(ms["queries"], 50) / np.percentile(ms["ids"], 50)), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
