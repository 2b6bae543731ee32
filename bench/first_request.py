"""What the first requests to a freshly started `cqa serve` cost against the ones after them, this tree's code against a
reference revision's, side by side in one run (and this tree with its warm-up off, CQA_WARM_UP=false): a real server
over the full 2016 corpus's data folder (refresh off, each server with empty score and vector stores of its own), timed
from its start to GET /ready (asked every 0.1 s), then one request of each kind in turn, --next rounds more of the same
kinds with other inputs, one request at a time:

- POST /search, target answers and target questions (2016 dev questions, reranked as served);
- POST /rerank (a 2016 test-A thread's comments), /rerank/questions (a dev-B question's related questions) and
  /rerank/answers (a dev-C question's related threads), as bench/rerank_quality.py sends them;
- GET /threads/{id}/answers and GET /threads/{id}/similar (stored threads with five comments or more).

Each request's latency is the client's (loopback). Per side and kind: the first request's milliseconds (the median
over --repeats servers), the median of the requests after it, and their ratio; serve-to-ready; and each server's
resident memory (GET /metrics) once ready and after its requests. Both sides get the
same inputs, and what each request answered (ids in order, scores) is compared between the sides. Prints a JSON object
last.

    python bench/first_request.py [--data-dir var] [--against bcbdd79] [--repeats 3] [--next 5]
    python bench/first_request.py --serve-dir DATA --against '' --repeats 1 --next 1  # any served folder, this tree
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import get_json, post_json, resident_mb, server, subtask_bodies, thread_bodies  # noqa: E402

KINDS = ("POST /search answers", "POST /search questions", "POST /rerank", "POST /rerank/questions",
         "POST /rerank/answers", "GET /threads/{id}/answers", "GET /threads/{id}/similar")


def inputs(settings, folder: Path, rounds: int) -> dict[str, list]:
    """``rounds`` inputs of each kind, all different; the stored threads are those of the data folder ``folder``."""
    from indexing.store import ThreadStore
    from ranking.search_benchmark import qrels_for
    _, dev = qrels_for(settings, "dev", "answers")
    questions = [{"subject": s, "body": b} for s, b in dev.values()]
    with ThreadStore(settings.model_copy(update={"data_dir": folder}).store_path) as store:
        stored = [t.id for t in store.iter_threads() if len(t.answers) >= 5]
    need = {"questions": 2 * rounds, "threads": 2 * rounds}
    if len(questions) < need["questions"] or len(stored) < need["threads"]:
        raise SystemExit(f"not enough inputs for {rounds} rounds")
    return {"POST /search answers": [{"question": q, "target": "answers"} for q in questions[:rounds]],
            "POST /search questions": [{"question": q, "target": "questions"} for q in questions[rounds:2 * rounds]],
            "POST /rerank": thread_bodies(settings)[:rounds],
            "POST /rerank/questions": subtask_bodies(settings, "semeval2016-dev-B")[:rounds],
            "POST /rerank/answers": subtask_bodies(settings, "semeval2016-dev-C")[:rounds],
            "GET /threads/{id}/answers": stored[:rounds],
            "GET /threads/{id}/similar": stored[rounds:2 * rounds]}


def send(base: str, kind: str, given) -> tuple[float, list]:
    """One request of ``kind``: its milliseconds and what it answered (each result's id and score, in order)."""
    t0 = time.perf_counter()
    if kind.startswith("GET"):
        status, out = get_json(base + kind.split()[1].replace("{id}", given))
    else:
        status, out = post_json(base + kind.split()[1], given)
    ms = 1000 * (time.perf_counter() - t0)
    if status != 200:
        raise SystemExit(f"{kind} answered {status}: {json.dumps(out)[:300]}")
    return ms, [(r["id"], r["score"]) for r in out["results"]]


def run_side(folder: Path, side: str, root: Path, given: dict[str, list], repeats: int,
             env: dict[str, str] | None = None) -> tuple[dict, list]:
    first: dict[str, list[float]] = {k: [] for k in KINDS}
    after: dict[str, list[float]] = {k: [] for k in KINDS}
    ready_s, answers, mb = [], [], {"at_ready": [], "after_requests": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        with server(folder, {"CQA_REFRESH_S": "0", **(env or {})}, root=root, poll_s=0.1) as (base, ready):
            ready_s.append(round(time.perf_counter() - t0, 2))
            mb["at_ready"].append(resident_mb(base))
            for i in range(len(given[KINDS[0]])):
                for kind in KINDS:
                    ms, results = send(base, kind, given[kind][i])
                    (first if i == 0 else after)[kind].append(ms)
                    answers.append(results)
            mb["after_requests"].append(resident_mb(base))
            warm = ready.get("warm_up_ms")
    out = {"side": side, "serve_to_ready_s": ready_s, "serve_to_ready_median_s": statistics.median(ready_s),
           "warm_up_ms": warm, "resident_mb": mb, "kinds": {}}
    for kind in KINDS:
        f, a = statistics.median(first[kind]), statistics.median(after[kind])
        out["kinds"][kind] = {"first_ms": [round(x, 1) for x in first[kind]], "first_median_ms": round(f, 1),
                              "after_median_ms": round(a, 1), "first_over_after": round(f / a, 2)}
    return out, answers


def same(a: list, b: list, tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all([i for i, _ in x] == [i for i, _ in y] and
                                    all(abs(s - t) <= tol for (_, s), (_, t) in zip(x, y)) for x, y in zip(a, b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--against", default="bcbdd79", help="the reference revision (default: round 50's last); "
                    "'': this tree alone")
    ap.add_argument("--serve-dir", type=Path, help="the data folder the servers serve (default: the full 2016 "
                    "corpus's, built in --data-dir if missing)")
    ap.add_argument("--repeats", type=int, default=3, help="servers started per side")
    ap.add_argument("--next", type=int, default=5, help="requests of each kind after the first, per server")
    args = ap.parse_args()

    from app.settings import Settings
    from ranking.fullcorpus import corpus_settings, ensure_corpus

    settings = Settings(data_dir=args.data_dir)
    if args.serve_dir is None:
        ensure_corpus(settings, progress=True)
    folder = args.serve_dir or corpus_settings(settings).data_dir
    given = inputs(settings, folder, 1 + args.next)
    out = {"bench": "first_request", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(), "against": args.against,
           "repeats": args.repeats, "next": args.next, "sides": []}
    answered = {}
    with tempfile.TemporaryDirectory(prefix="cqa-first-") as tmp:
        ref = Path(tmp) / "reference"
        if args.against:
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(ref), args.against], cwd=ROOT, check=True)
        try:
            sides = [("reference", ref, {}), ("this_tree_no_warm_up", ROOT, {"CQA_WARM_UP": "false"}),
                     ("this_tree", ROOT, {})][0 if args.against else 2:]
            for side, root, env in sides:
                result, answered[side] = run_side(folder, side, root, given, args.repeats, env)
                print(json.dumps(result), file=sys.stderr, flush=True)
                out["sides"].append(result)
        finally:
            if args.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(ref)], cwd=ROOT, check=False)
    by = {s["side"]: s for s in out["sides"]}
    if not args.against:
        print(json.dumps(out))
        return
    out["same_results"] = all(same(answered["reference"], answered[side]) for side in answered)
    for side in ("this_tree", "this_tree_no_warm_up"):
        out[f"first_ms_{side}_over_reference"] = {
            kind: round(by[side]["kinds"][kind]["first_median_ms"] / by["reference"]["kinds"][kind]["first_median_ms"],
                        2) for kind in KINDS}
        out[f"first_ms_sum_{side}_over_reference"] = round(
            sum(by[side]["kinds"][k]["first_median_ms"] for k in KINDS) /
            sum(by["reference"]["kinds"][k]["first_median_ms"] for k in KINDS), 2)
        out[f"serve_to_ready_{side}_over_reference"] = round(by[side]["serve_to_ready_median_s"] /
                                                             by["reference"]["serve_to_ready_median_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
