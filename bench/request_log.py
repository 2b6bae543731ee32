"""What each request's id and the service's own access log (app/access.py) cost, against a reference revision's
server (uvicorn's access log, no request id), side by side in one run: real `cqa serve` processes over the full 2016
corpus's data folder (refresh off), all started before the first request, their standard output and error written
to files as a deployment keeps them. The requests take turns: each round sends one request of each kind to every
server, in an order that rotates, one request at a time, so that the machine's noise falls on every side alike.

Sides: ``reference`` (the revision --against, run from a git worktree), ``this_tree`` (text access log), ``json``
(CQA_LOG_FORMAT=json) and ``no_access_log`` (CQA_ACCESS_LOG=false). Kinds: GET /health (the fixed cost of a request
made visible), GET /threads/{id} (a store read) and POST /search of a 2016 test question (target answers, reranked:
what a user waits for). Per side and kind: p50 / p95 ms and the p50's ratio to the reference; each side's log bytes
per request; and whether every side answered each search with the same results. Prints a JSON object last.

    python bench/request_log.py [--data-dir var] [--against 1fd6add] [--rounds 200]
    python bench/request_log.py --serve-dir DATA --against HEAD --rounds 2   # any served folder
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import (add_serve_arguments, get_json, post_json, reference_checkout, run_header,  # noqa: E402
                  served_forum, server)

SIDES = {"reference": {}, "this_tree": {}, "json": {"CQA_LOG_FORMAT": "json"},
         "no_access_log": {"CQA_ACCESS_LOG": "false"}}
KINDS = ("GET /health", "GET /threads/{id}", "POST /search")


def timed(send) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = send()
    return 1000 * (time.perf_counter() - t0), out


def request(base: str, kind: str, i: int, thread_ids: list[str], questions: list[str]):
    """One request of ``kind`` (its ``i``-th input); what it answered, to compare the sides."""
    if kind == "GET /health":
        with urllib.request.urlopen(base + "/health", timeout=30) as r:
            return r.status
    if kind == "GET /threads/{id}":
        status, body = get_json(f"{base}/threads/{thread_ids[i % len(thread_ids)]}", timeout=30)
        return status, len(body.get("answers", ()))
    status, body = post_json(base + "/search", {"question": questions[i % len(questions)], "k": 10})
    return status, [r["id"] for r in body.get("results", ())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(ap)
    ap.add_argument("--against", default="1fd6add", help="the reference revision (default: round 53's last, before "
                    "request ids)")
    ap.add_argument("--rounds", type=int, default=200, help="requests of each kind per side")
    args = ap.parse_args()

    from indexing.store import Snapshot
    settings, questions = served_forum(args)
    with Snapshot(settings.store_path) as snap:
        thread_ids = [t.id for _, t in zip(range(500), snap.threads())]
    out = {**run_header("request_log"), "against": args.against, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="cqa-request-log-") as tmp, contextlib.ExitStack() as stack:
        ref = reference_checkout(stack, args.against, Path(tmp))
        bases, logs = {}, {}
        for side, env in SIDES.items():
            logs[side] = Path(tmp) / f"logs-{side}"
            logs[side].mkdir()
            bases[side], _ready = stack.enter_context(server(
                settings.data_dir, {"CQA_REFRESH_S": "0", **env}, root=ref if side == "reference" else ROOT,
                logs=logs[side]))
        sizes = {side: sum(f.stat().st_size for f in logs[side].iterdir()) for side in SIDES}  # before the requests
        ms = {side: {kind: [] for kind in KINDS} for side in SIDES}
        answered = {side: {kind: [] for kind in KINDS} for side in SIDES}
        order = list(SIDES)
        for i in range(args.rounds):
            for kind in KINDS:
                for side in order[i % len(order):] + order[:i % len(order)]:
                    took, got = timed(lambda: request(bases[side], kind, i, thread_ids, questions))
                    ms[side][kind].append(took)
                    answered[side][kind].append(got)
            if (i + 1) % 50 == 0:
                print(f"{i + 1} rounds", file=sys.stderr, flush=True)
        time.sleep(0.5)  # the last access lines written
        written = {side: sum(f.stat().st_size for f in logs[side].iterdir()) - sizes[side] for side in SIDES}
    out["sides"] = {side: {kind: {"p50_ms": round(float(np.percentile(v, 50)), 2),
                                  "p95_ms": round(float(np.percentile(v, 95)), 2)} for kind, v in ms[side].items()}
                    for side in SIDES}
    for side in SIDES:
        out["sides"][side]["log_bytes_per_request"] = round(written[side] / (args.rounds * len(KINDS)), 1)
    out["p50_over_reference"] = {side: {kind: round(out["sides"][side][kind]["p50_ms"] /
                                                    out["sides"]["reference"][kind]["p50_ms"], 3) for kind in KINDS}
                                 for side in SIDES if side != "reference"}
    out["same_answers"] = all(answered[side] == answered["reference"] for side in SIDES)
    out["all_ok"] = all((got == 200 if kind == "GET /health" else got[0] == 200)
                        for side in SIDES for kind in KINDS for got in answered[side][kind])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
