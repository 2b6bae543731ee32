"""The feedback log through the served path (round 60): what keeping each search under a ``search_id`` costs POST
/search, what a judgement (POST /feedback, synced to disk) takes, and whether GET /evaluation/feedback gives back
the MAP of what was served and judged.

Three real `cqa serve` processes over the full 2016 corpus's data folder, all started before the first request:
``reference`` (the revision --against, from a git worktree: no feedback log), ``on`` (this tree, the log on, as
shipped) and ``off`` (this tree, CQA_FEEDBACK=false). Each 2016 --split question of the answers /search benchmark
(target answers, reranked, k 10, as a forum sends it) goes to every server in an order that rotates, one request at
a time, --rounds times: per side the p50 / p95 ms and the p50's ratio to the reference, and whether every side
showed the same results. In the first round, a simulated user judges what ``on`` showed by the benchmark's gold: a
result (or a copy collapsed into it) judged relevant is helpful, one judged irrelevant is not, one the gold does not
judge is left unjudged (POST /feedback, timed). Then GET /evaluation/feedback: its MAP, MAP with unjudged results
counted as not helpful, and the order before the reranker; beside them, the same figures computed here from the
responses and the judgements sent (they must be equal). Prints a JSON object last.

    python bench/feedback.py [--data-dir var] [--against e7fb6ee] [--rounds 3] [--split test] [--limit 0]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import (add_forum_arguments, beside_reference, get_json, judge, judged_forum, latency_of,  # noqa: E402
                  post_json, reference_checkout, run_header, searches_in_turns, server)


def judgements_of(results: list[dict], judged: dict[str, int]) -> list[dict]:
    """The simulated user's judgements of the shown ``results`` by the gold ``judged`` (id -> relevance): a result
    helpful if it or a copy collapsed into it is relevant, not helpful if judged and none is, else not judged."""
    out = []
    for r in results:
        ids = [r["id"], *r["duplicates"]]
        if any(judged.get(i, 0) > 0 for i in ids):
            out.append({"result_id": r["id"], "helpful": True})
        elif any(i in judged for i in ids):
            out.append({"result_id": r["id"], "helpful": False})
    return out


def answer_searches(questions: dict[str, tuple[str, str]]) -> list[tuple[str, dict]]:
    """Each question as a forum sends it for answers: (its id, the POST /search body: subject and body, k 10)."""
    return [(qid, {"question": {"subject": s, "body": b}, "k": 10, "target": "answers"})
            for qid, (s, b) in questions.items()]


def expected(pages: list[tuple[list[dict], list[dict]]]) -> dict:
    """MAP (judged results only, in the order shown) and MAP with unjudged as not helpful, computed here from the
    responses and the judgements sent: what GET /evaluation/feedback must give."""
    from ranking.evaluation.scorer import average_precision
    condensed, full = [], []
    for results, sent in pages:
        helpful = {j["result_id"]: j["helpful"] for j in sent}
        condensed.append(average_precision([helpful[r["id"]] for r in results if r["id"] in helpful]))
        full.append(average_precision([helpful.get(r["id"], False) for r in results]))
    return {"MAP": round(sum(condensed) / len(condensed), 4),
            "MAP_unjudged_not_helpful": round(sum(full) / len(full), 4), "searches": len(pages)}


def in_process_cost(pages, n: int = 5000) -> dict:
    """What writing a search and a judgement costs in process (µs each, a fresh file), with the bench's own pages as
    what is written: the part of the served path's cost that is the log's."""
    from ranking.evaluation.feedback import FeedbackLog, Served
    with tempfile.TemporaryDirectory(prefix="cqa-feedback-cost-") as tmp:
        log = FeedbackLog(Path(tmp) / "f.sqlite3")
        shown = [Served("/search", "answers", "r", "g", 0, tuple(r["id"] for r in results), tuple(range(len(results))))
                 for results, _ in pages]
        t0 = time.perf_counter()
        ids = [log.record(shown[i % len(shown)]) for i in range(n)]
        record_us = 1e6 * (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for i, sid in enumerate(ids[:200]):
            log.judge(sid, [(j["result_id"], j["helpful"]) for j in pages[i % len(pages)][1]])
        judge_us = 1e6 * (time.perf_counter() - t0) / 200
        t0 = time.perf_counter()
        from ranking.evaluation.feedback import feedback_report
        feedback_report(log)
        report_ms = 1000 * (time.perf_counter() - t0)
        log.close()  # the last connection's close checkpoints the WAL into the file: the file holds everything
        size = (Path(tmp) / "f.sqlite3").stat().st_size
    return {"searches": n, "record_us": round(record_us, 1), "judge_us": round(judge_us, 1),
            "report_ms_200_judged": round(report_ms, 1), "file_bytes_per_search": round(size / n)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.add_argument("--against", default="e7fb6ee", help="the reference revision (default: round 59's last)")
    ap.add_argument("--rounds", type=int, default=3, help="times each question is sent to every server")
    args = ap.parse_args()

    settings, qrels, questions = judged_forum(args, "answers")
    bodies = answer_searches(questions)
    out = {**run_header("feedback"), "against": args.against, "split": args.split, "questions": len(bodies),
           "rounds": args.rounds}
    sides = ("reference", "on", "off")
    ms: dict[str, list[float]] = {s: [] for s in sides}
    feedback_ms: list[float] = []
    differ, pages = 0, []
    with tempfile.TemporaryDirectory(prefix="cqa-feedback-") as tmp, contextlib.ExitStack() as stack:
        ref = reference_checkout(stack, args.against, Path(tmp))
        common = {"CQA_REFRESH_S": "0", "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
        bases = {}
        for side, root, env in (("reference", ref, {}),
                                ("on", ROOT, {"CQA_FEEDBACK_STORE": str(Path(tmp) / "feedback.sqlite3")}),
                                ("off", ROOT, {"CQA_FEEDBACK": "false"})):
            bases[side], _ = stack.enter_context(server(settings.data_dir, {**common, **env}, root=root))
        for side in sides:  # each side's first request, before the clock
            post_json(bases[side] + "/search", bodies[0][1])
        for rnd, qid, got in searches_in_turns(bases, bodies, args.rounds, ms):
            differ += len({tuple(r["id"] for r in resp["results"]) for resp in got.values()}) > 1
            on = got["on"]
            if "search_id" not in on:
                raise SystemExit("the feedback log's server gave no search_id")
            sent = judgements_of(on["results"], qrels.get(qid, {}))
            if rnd == 0 and sent:
                judge(bases["on"], on["search_id"], sent, feedback_ms)
                pages.append((on["results"], sent))
        status, reported = get_json(bases["on"] + "/evaluation/feedback")
        if status != 200:
            raise SystemExit(f"GET /evaluation/feedback answered {status}: {reported}")
        status, ready = get_json(bases["on"] + "/ready")
        log_file = Path(tmp) / "feedback.sqlite3"
        out["log"] = {"searches_recorded": ready["feedback"]["recorded"],  # the file and its WAL, as served
                      "bytes_with_wal": sum(f.stat().st_size for f in log_file.parent.glob(log_file.name + "*"))}
    out["log"]["in_process"] = in_process_cost(pages)
    out["sides"] = beside_reference(ms)
    out["questions_shown_differently"] = differ
    out["feedback_post"] = {**latency_of(feedback_ms), "judgements": sum(len(s) for _, s in pages)}
    (group,) = reported["groups"]
    out["reported"] = {k: group.get(k) for k in ("reranker", "searches", "judgements", "MAP", "MAP_interval_95",
                                                 "MAP_unjudged_not_helpful", "MRR", "helpful_share", "first_stage")}
    out["computed_here"] = expected(pages)
    out["report_equals_computed"] = all(out["computed_here"][k] == group[k] for k in ("MAP", "MAP_unjudged_not_helpful")) \
        and group["searches"] == len(pages)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
