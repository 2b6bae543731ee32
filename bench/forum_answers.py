"""`cqa evaluate --answers` on a forum whose votes are known, beside what a real server's `GET /threads/{id}/answers`
gives for the same threads and beside the official SemEval scorer on the same threads, in one run: the evaluation an
operator runs on their own forum must measure the endpoint their users get, and must agree with the official figure
where the two judge alike.

The forum: the threads a SemEval-2016 subtask A file (dev or test) judges, written as a StackExchange dump
(`scripts/make_stackexchange_dump.py --votes-from-labels`): each comment's label is its votes (Good 1,
PotentiallyUseful 0, Bad -1), so an answer voted up is exactly a comment the SemEval judges found Good. Then, in a
scratch data folder:
- `cqa ingest DUMP` and `cqa reindex`, as an operator imports a site;
- `cqa evaluate --answers --judged-by votes --json` (what an operator runs; it asks the threads with a Good comment and
  one not, and reports the thread order beside them), once before the reindex (no generation: every comment encoded
  as it is ranked) and once after (the comments' stored vectors read, as the service reads them);
- `GET /threads/{id}/answers` of a real `cqa serve` for each thread it asked, scored with the same judgements;
- the reference: the official scorer's per-question AP of the default ranker on the SemEval file itself (the same
  code as `cqa evaluate --benchmark semeval2016-{split}-A`: the official gold, the file's own metadata), over the
  same threads.
Each pair is compared thread by thread. Prints a JSON object last.

    python bench/forum_answers.py [--split test] [--limit N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import server  # noqa: E402


def cqa(args: list[str], env: dict) -> tuple[str, float]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cqa {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout, round(time.perf_counter() - t0, 1)


def official_ap(split: str, threads: set[str]) -> tuple[dict[str, float], str]:
    """The official scorer's AP of each of ``threads`` as the default ranker ranks the SemEval file's own thread
    (``run_benchmark``'s steps, on those threads alone), and that ranker's name."""
    from app.settings import Settings
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    from ranking.evaluation.runner import align_to_gold, default_ranker, predictions
    from ranking.evaluation.scorer import per_question_ap, read_lines
    from ranking.presets import build_label
    settings = Settings(data_dir=Path(tempfile.gettempdir()) / "cqa-forum-answers-unused")
    xml, gold_path = BENCHMARKS[f"semeval2016-{split}-A"].paths(settings.semeval_dir)
    queries = [q for q in queries_for(xml, "A") if q.id in threads]
    gold = [g for g in read_lines(gold_path) if g.qid in threads]
    ranker = build_label(default_ranker("A", settings), settings)
    return per_question_ap(gold, align_to_gold(predictions(queries, ranker), gold)), ranker.name


def served_ap(base: str, threads: list[str], good: dict[str, set[str]]) -> tuple[dict[str, float], list[float], set]:
    """Each thread's AP as a real server's GET /threads/{id}/answers orders it, the milliseconds of each request,
    and the rankers that answered."""
    from ranking.evaluation.scorer import average_precision
    ap, ms, rankers = {}, [], set()
    for tid in threads:
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{base}/threads/{tid}/answers", timeout=120) as r:
            body = json.loads(r.read())
        ms.append(1000 * (time.perf_counter() - t0))
        ap[tid] = average_precision([x["id"] in good[tid] for x in body["results"]])
        rankers.add(body["reranker"])
    return ap, ms, rankers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=("dev", "test"), default="test", help="whose subtask A file")
    ap.add_argument("--limit", type=int, default=0, help="only the file's first N threads (0: all)")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.loaders import load
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    from ranking.search_benchmark import latency
    from scripts.make_stackexchange_dump import votes_from_labels, write_dump

    xml, _ = BENCHMARKS[f"semeval2016-{args.split}-A"].paths(Settings().semeval_dir)
    judged = {q.id for q in queries_for(xml, "A")}  # the threads subtask A judges (not those it skips as copies)
    threads = [votes_from_labels(t) for t in load(xml).threads if t.id in judged]
    threads = threads[: args.limit] if args.limit else threads
    good = {t.id: {a.id for a in t.answers if a.label == "Good"} for t in threads}
    out: dict = {"bench": "forum_answers", "split": args.split, "date": time.strftime("%Y-%m-%d"),
                 "threads_in_file": len(threads), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="cqa-forum-answers-") as tmp:
        folder = Path(tmp) / "var"
        write_dump(threads, Path(tmp) / "dump")
        env = {**os.environ, "CQA_DATA_DIR": str(folder), "PYTHONPATH": str(ROOT)}
        _, out["ingest_s"] = cqa(["ingest", str(Path(tmp) / "dump"), "-q"], env)
        stdout, _ = cqa(["evaluate", "--answers", "--judged-by", "votes", "--json"], env)  # no generation yet
        unindexed = json.loads(stdout.strip().splitlines()[-1])
        unindexed_ap = json.loads((Path(unindexed["report"]) / "report.json").read_text())["per_question_ap"]
        _, out["reindex_s"] = cqa(["reindex", "-q"], env)
        stdout, seconds = cqa(["evaluate", "--answers", "--judged-by", "votes", "--json"], env)
        evaluated = json.loads(stdout.strip().splitlines()[-1])
        report = json.loads((Path(evaluated["report"]) / "report.json").read_text())
        asked = list(report["per_question_ap"])
        thread_order = evaluated["compare"][0]
        out["cqa_evaluate_answers"] = {
            "seconds": seconds, "threads": evaluated["threads"], "passed_over": evaluated["passed_over"],
            "ranker": evaluated["ranker"], **{m: evaluated[m] for m in ("MAP", "AvgRec", "MRR", "P@1")},
            "MAP_interval_95": [round(v, 4) for v in evaluated["MAP_interval_95"]],
            "thread_order": thread_order["figures"], "p_vs_thread_order": thread_order["p_randomization"],
            "latency_ms": evaluated["latency_ms"]}
        print(json.dumps({"cqa evaluate --answers": out["cqa_evaluate_answers"]}), file=sys.stderr, flush=True)
        with server(folder, {}) as (base, _ready):
            served, ms, rankers = served_ap(base, asked, good)
        out["served_answers"] = {"threads": len(served), "MAP": round(statistics.fmean(served.values()), 4),
                                 "rankers": sorted(rankers), "latency_ms": latency(ms)}
    reference, name = official_ap(args.split, set(asked))
    out["official_scorer_same_threads"] = {"threads": len(reference), "ranker": name,
                                           "MAP": round(statistics.fmean(reference.values()), 4)}
    ours = report["per_question_ap"]
    out["cqa_evaluate_answers_before_the_index"] = {"threads": unindexed["threads"], "MAP": unindexed["MAP"]}
    out["threads_scored_differently"] = {
        "cqa_evaluate_vs_served": sum(abs(ours[t] - served[t]) > 1e-9 for t in asked),
        "cqa_evaluate_vs_official": sum(abs(ours[t] - reference[t]) > 1e-9 for t in asked),
        # the official run reads no generation: its MiniLM parts encode every comment, where the indexed forum's
        # bi-encoder reads the vectors the reindex stored (fp32, as auto runs a bi-encoder everywhere since round 53)
        "cqa_evaluate_before_the_index_vs_official": sum(abs(unindexed_ap[t] - reference[t]) > 1e-9 for t in asked)}
    out["MAP_over_thread_order"] = round(out["cqa_evaluate_answers"]["MAP"] / thread_order["figures"]["MAP"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
