"""A thread's comments judged by its readers, through the served path (round 64): what keeping the order GET
/threads/{id}/answers showed costs that endpoint, whether GET /evaluation/feedback gives back the official figure of
what was shown, and whether the replay of the judged orders (`cqa evaluate --feedback --ranker NAME --target
comments`) gives back the official figure of another ranker.

Two real `cqa serve` processes over the full 2016 corpus's data folder, both started before the first request:
``reference`` (the revision --against, from a git worktree: its endpoint keeps nothing) and ``on`` (this tree, the
feedback log on in a file of its own, with CQA_FEEDBACK_QUERIES=true as a forum that replays keeps it). Each thread of
the 2016 --split subtask A file (its related threads, 10 comments each) is asked of both by GET /threads/{id}/answers
in an order that rotates, one request at a time, --rounds times: per side the p50 / p95 ms and the p50's ratio to the
reference, of the first round (each thread's first view) and of the later ones (its scores memoised), and whether
both showed the same order. In the first round a simulated reader judges every comment
``on`` showed by the official gold (Good helpful; PotentiallyUseful and Bad not: the official scorer's reading),
one POST /feedback per thread, timed. Beside it, what keeping an order costs in process (``order_cost``: µs a
record, bytes an order).

Then, the figures that must agree, each beside its reference:
- GET /evaluation/feedback's comments group: its MAP and its first stage's (the thread's own order) against the
  official scorer's arithmetic (``ranking.evaluation.scorer.score``) on the orders shown and on the thread order, and
  the thread order's against the task's published IR baseline (chronological, 0.5953 on test);
- the same MAP against `cqa evaluate --benchmark semeval2016-{split}-A` (the default ranker on the SemEval file with
  its own metadata), thread by thread;
- the replay with --candidate (default bilstm+signals, the cascade's first stage): its served MAP against the report,
  its candidate's against `cqa evaluate --benchmark semeval2016-{split}-A --ranker CANDIDATE`. (A plain lexical
  candidate, bm25 or lm, differs there by design: `cqa evaluate` draws its term statistics from the whole file's
  comments, the service, and so the replay, from each thread's own.)
- each question of the --split subtask B and C files sent as a forum sends it to /rerank/questions and
  /rerank/answers of both servers in turns (once: first views), every candidate ``on`` showed judged by the gold:
  per endpoint the latency beside the reference's, and the report's MAP and its first stage's (the order given: the
  task's search engine's) against the official scorer on the same orders and the task's published IR baseline
  (--no-given leaves this part out).
Prints a JSON object last.

    python bench/comment_feedback.py [--data-dir var] [--against 0ea4ef1] [--rounds 2] [--split test] [--limit 0]
        [--candidate bilstm+signals]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import (beside_reference, forum_settings, get_json, in_turns, judge, latency_of, post_json,  # noqa: E402
                  reference_checkout, run_header, server, subtask_bodies)

# the /rerank endpoints that gained a search_id this round, by the subtask file whose questions they are sent
GIVEN = {"B": "/rerank/questions", "C": "/rerank/answers"}


def judged_by_question(gold_file: Path) -> dict[str, dict[str, bool]]:
    """An official gold file's judgements: each question's candidates (id -> relevant), in file order."""
    from ranking.evaluation.scorer import read_lines
    gold: dict[str, dict[str, bool]] = {}
    for line in read_lines(gold_file):
        gold.setdefault(line.qid, {})[line.cid] = line.label
    return gold


def judged_threads(settings, split: str, limit: int) -> dict[str, dict[str, bool]]:
    """Each thread of the 2016 ``split`` subtask A file: its comments' official judgements (id -> Good), file order."""
    from ranking.evaluation.benchmarks import BENCHMARKS
    _, gold_file = BENCHMARKS[f"semeval2016-{split}-A"].paths(settings.semeval_dir)
    threads = judged_by_question(gold_file)
    return dict(list(threads.items())[:limit]) if limit else threads


def given_orders(bases: dict[str, str], settings, split: str, limit: int = 0) -> dict:
    """Each question of the 2016 ``split`` subtask B and C files sent as a forum sends it (``subtask_bodies``) to
    /rerank/questions and /rerank/answers of every server, in turns, once; the one ``on`` answered judged by the
    official gold, every candidate. Per endpoint: each side's latency and p50 ratio, and the figures GET
    /evaluation/feedback must give (the official scorer on the orders shown, and on the order given: the task's
    search engine's, whose MAP is the published IR baseline)."""
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    out = {}
    for sub, endpoint in GIVEN.items():
        bench = BENCHMARKS[f"semeval2016-{split}-{sub}"]
        xml, gold_file = bench.paths(settings.semeval_dir)
        gold = judged_by_question(gold_file)
        items = [(q.id, body) for q, body in zip(queries_for(xml, sub), subtask_bodies(settings, bench.name))]
        items = items[:limit] if limit else items
        bodies = dict(items)
        ms: dict[str, list[float]] = {side: [] for side in bases}
        shown, given = {}, {}
        for _, qid, got in in_turns(bases, items, 1, ms, lambda base, body: post_json(base + endpoint, body),
                                    endpoint):
            on = got["on"]
            if "search_id" not in on:
                raise SystemExit(f"{endpoint} gave no search_id")
            shown[qid] = [r["id"] for r in on["results"]]
            body = bodies[qid]
            given[qid] = ([c["id"] for c in body["candidates"]] if sub == "B" else
                          [c["id"] for t in body["threads"] for c in t["comments"]])
            judge(bases["on"], on["search_id"], [{"result_id": c, "helpful": gold[qid].get(c, False)}
                                                 for c in shown[qid]])
        out[endpoint] = {"questions": len(items), **beside_reference(ms),
                         "official": {"shown_MAP": official_map(shown, gold)[0],
                                      "given_MAP": official_map(given, gold)[0]}}
    return out


def order_cost(shown: dict[str, list[str]], thread_order: dict[str, list[str]], n: int = 20000) -> dict:
    """What keeping an order costs in process: ``n`` of the bench's own orders (``shown``, beside ``thread_order``)
    written to a fresh log (µs each), and the file's bytes per order once its WAL is checkpointed."""
    from ranking.evaluation.feedback import FeedbackLog, served_order
    threads = list(shown)
    with tempfile.TemporaryDirectory(prefix="cqa-order-cost-") as tmp:
        log = FeedbackLog(Path(tmp) / "f.sqlite3")
        orders = [served_order(shown[t], thread_order[t], "cascade", "gen-x", thread_id=t) for t in threads]
        t0 = time.perf_counter()
        for i in range(n):
            log.record(orders[i % len(orders)])
        record_us = 1e6 * (time.perf_counter() - t0) / n
        log.close()  # the last connection's close checkpoints the WAL into the file: the file holds everything
        size = (Path(tmp) / "f.sqlite3").stat().st_size
    return {"orders": n, "record_us": round(record_us, 1), "file_bytes_per_order": round(size / n),
            "kept_as": "GET /threads/{id}/answers with CQA_FEEDBACK_QUERIES (the thread's id kept)"}


def official_map(orders: dict[str, list[str]], gold: dict[str, dict[str, bool]]) -> tuple[float, dict[str, float]]:
    """The official scorer's MAP (and per-thread AP) of ``orders`` (thread -> comment ids, best first)."""
    from ranking.evaluation.scorer import Line, per_question_ap, score
    g = [Line(t, c, 0.0, gold[t][c]) for t in orders for c in orders[t]]
    p = [Line(t, c, float(len(orders[t]) - i), False) for t in orders for i, c in enumerate(orders[t])]
    return round(score(g, p).MAP, 4), per_question_ap(g, p)


def offline(settings, split: str, ranker: str | None, threads: list[str], whole: bool) -> dict:
    """`cqa evaluate --benchmark semeval2016-{split}-A [--ranker R]`: with ``whole``, that command's run over the
    whole file (``file_MAP``); else its code (the file's queries, ``predictions``, the official scorer) over
    ``threads`` only. Its MAP and per-thread AP over ``threads``, to compare with."""
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    from ranking.evaluation.runner import align_to_gold, predictions, run_named
    from ranking.evaluation.scorer import per_question_ap, read_lines
    from ranking.presets import build_label
    name = f"semeval2016-{split}-A"
    t0 = time.perf_counter()
    if whole:
        r = run_named(settings, name, ranker, progress=False)
        label, per_thread, file_map = r["ranker"], r["per_question_ap"], round(r["MAP"], 4)
    else:
        built = build_label(ranker or settings.default_ranker, settings)
        xml, gold_file = BENCHMARKS[name].paths(settings.semeval_dir)
        wanted = set(threads)
        gold = [g for g in read_lines(gold_file) if g.qid in wanted]
        queries = [q for q in queries_for(xml, "A") if q.id in wanted]
        label, file_map = built.name, None
        per_thread = per_question_ap(gold, align_to_gold(predictions(queries, built), gold))
    ap = {t: per_thread[t] for t in threads}
    return {"ranker": label, "MAP": round(sum(ap.values()) / len(ap), 4), "file_MAP": file_map,
            "seconds": round(time.perf_counter() - t0, 1), "ap": ap}


def same_aps(a: dict[str, float], b: dict[str, float]) -> dict:
    """How many threads two runs give the same AP (to 1e-9), and the largest difference."""
    diff = [abs(a[t] - b[t]) for t in a]
    return {"threads": len(diff), "same": sum(d < 1e-9 for d in diff), "max_difference": round(max(diff), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder under which the full 2016 "
                    "corpus's is (built if missing)")
    ap.add_argument("--against", default="0ea4ef1", help="the reference revision (default: round 63's last)")
    ap.add_argument("--rounds", type=int, default=2, help="times each thread is asked of every server")
    ap.add_argument("--split", choices=["dev", "test"], default="test")
    ap.add_argument("--limit", type=int, default=0, help="only the first N threads of the file, and the first N "
                    "questions of the B and C files (0: all); the offline figures then run `cqa evaluate`'s code on "
                    "those threads only")
    ap.add_argument("--forum-dir", type=Path, help="the data folder the servers serve as it is (a test's small one, "
                    "holding the --split threads asked); default: the full 2016 corpus's under --data-dir")
    ap.add_argument("--no-given", dest="given", action="store_false", help="leave out the /rerank/questions and "
                    "/rerank/answers part (the --split B and C files' questions)")
    ap.add_argument("--candidate", default="bilstm+signals", help="the preset the judged orders are ranked again "
                    "with (the replay), beside the default ranker")
    args = ap.parse_args()

    from ranking.evaluation.benchmarks import PUBLISHED
    from ranking.evaluation.replay import replay
    settings = forum_settings(args)
    gold = judged_threads(settings, args.split, args.limit)
    items = [(t, t) for t in gold]
    out = {**run_header("comment_feedback"), "against": args.against, "split": args.split, "threads": len(items),
           "rounds": args.rounds}
    sides = ("reference", "on")
    ms: dict[str, list[float]] = {s: [] for s in sides}
    feedback_ms: list[float] = []
    shown: dict[str, list[str]] = {}
    thread_order: dict[str, list[str]] = {}
    differ = 0

    def ask(base: str, thread_id: str):
        return get_json(f"{base}/threads/{urllib.parse.quote(thread_id, safe='')}/answers")

    with tempfile.TemporaryDirectory(prefix="cqa-comment-feedback-") as tmp:
        log_file = Path(tmp) / "feedback.sqlite3"
        with contextlib.ExitStack() as stack:
            ref = reference_checkout(stack, args.against, Path(tmp))
            common = {"CQA_REFRESH_S": "0", "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
            bases = {}
            for side, root, env in (("reference", ref, {}),
                                    ("on", ROOT, {"CQA_FEEDBACK_STORE": str(log_file),
                                                  "CQA_FEEDBACK_QUERIES": "true"})):
                bases[side], _ = stack.enter_context(server(settings.data_dir, {**common, **env}, root=root))
            for side in sides:  # each side's first request, before the clock
                ask(bases[side], items[0][0])
            for rnd, tid, got in in_turns(bases, items, args.rounds, ms, ask, "GET /threads/{id}/answers"):
                differ += len({tuple(r["id"] for r in resp["results"]) for resp in got.values()}) > 1
                on = got["on"]
                if rnd:
                    continue
                if "search_id" not in on:
                    raise SystemExit("the feedback log's server gave no search_id")
                shown[tid] = [r["id"] for r in on["results"]]
                judge(bases["on"], on["search_id"], [{"result_id": c, "helpful": gold[tid][c]} for c in shown[tid]],
                      feedback_ms)
            for tid, _ in items:
                _, stored = get_json(f"{bases['on']}/threads/{urllib.parse.quote(tid, safe='')}")
                thread_order[tid] = [a["id"] for a in stored["answers"]]
            given = given_orders(bases, settings, args.split, args.limit) if args.given else {}
            status, reported = get_json(bases["on"] + "/evaluation/feedback")
            if status != 200:
                raise SystemExit(f"GET /evaluation/feedback answered {status}: {reported}")
        n = len(items)  # the first round: each thread's first view; the later ones: its scores memoised
        for part, cut in (("first_view", slice(0, n)), ("again", slice(n, None))):
            if ms["reference"][cut]:
                out[part] = beside_reference({s: v[cut] for s, v in ms.items()})
        out["threads_shown_differently"] = differ
        out["feedback_post"] = {**latency_of(feedback_ms), "judgements": sum(map(len, shown.values()))}
        (group,) = [g for g in reported["groups"] if g["target"] == "comments"]
        out["reported"] = {k: group.get(k) for k in ("endpoint", "reranker", "searches", "judgements", "replayable",
                                                     "MAP", "MAP_interval_95", "MRR", "first_stage")}
        shown_map, shown_ap = official_map(shown, gold)
        order_map, _ = official_map(thread_order, gold)
        published = PUBLISHED["A"]["IR baseline"] if args.split == "test" and not args.limit else None
        out["official"] = {"shown_MAP": shown_map, "thread_order_MAP": order_map,
                           "published_IR_baseline": published}
        out["log"] = order_cost(shown, thread_order)
        out["report_equals_official"] = (group["MAP"] == shown_map and group["first_stage"]["MAP"] == order_map
                                         and group["searches"] == len(shown))
        by_endpoint = {g["endpoint"]: g for g in reported["groups"]}
        for sub, endpoint in GIVEN.items():
            if endpoint not in given:
                continue
            g, o = by_endpoint[endpoint], given[endpoint]["official"]
            o["published_IR_baseline"] = PUBLISHED[sub]["IR baseline"] if args.split == "test" else None
            given[endpoint]["reported"] = {"MAP": g["MAP"], "given_MAP": g["first_stage"]["MAP"],
                                           "order": g["first_stage"]["order"], "searches": g["searches"]}
            given[endpoint]["report_equals_official"] = (g["MAP"] == o["shown_MAP"] and g["first_stage"]["MAP"]
                                                         == o["given_MAP"]
                                                         and g["searches"] == given[endpoint]["questions"])
        out["given"] = given
        # the judged orders ranked again, in this process, from the log the server wrote
        served_settings = settings.model_copy(update={"feedback_store": log_file, "feedback_queries": True})
        t0 = time.perf_counter()
        again = replay(served_settings, args.candidate, "comments", progress=False)
        out["replay"] = {"seconds": round(time.perf_counter() - t0, 1),
                         **{k: again[k] for k in ("searches", "reproduced", "reproducible", "as_shown_MAP")},
                         "served": {k: again["served"][k] for k in ("reranker", "MAP", "latency_ms")},
                         "candidate": {k: again["candidate"][k] for k in ("reranker", "MAP", "latency_ms")},
                         "compare": {k: again["compare"][k] for k in ("verdict", "MAP_difference", "p_randomization",
                                                                      "better", "worse")}}
    # the offline benchmark, the SemEval file as given (its own metadata), for both rankers
    served_offline = offline(settings, args.split, None, list(gold), not args.limit)
    candidate_offline = offline(settings, args.split, args.candidate, list(gold), not args.limit)
    out["offline"] = {"default": {k: served_offline[k] for k in ("ranker", "MAP", "file_MAP", "seconds")},
                      "candidate": {k: candidate_offline[k] for k in ("ranker", "MAP", "file_MAP", "seconds")},
                      "endpoint_vs_offline": same_aps(shown_ap, served_offline["ap"]),
                      "candidate_difference": round(candidate_offline["MAP"] - served_offline["MAP"], 4)}
    out["replay_equals_offline"] = (again["served"]["MAP"] == shown_map == served_offline["MAP"]
                                    and again["candidate"]["MAP"] == candidate_offline["MAP"])
    out["replay"]["served_equals_report"] = again["served"]["MAP"] == group["MAP"] == again["as_shown_MAP"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
