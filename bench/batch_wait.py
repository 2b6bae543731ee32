"""Where a reranked search's time goes under load, as the server reports it (round 59): of POST /search's
``timings_ms``, the wait for a run slot (``queued``), the rerank stage and, of it, the wait for the reranker batch's
model call to begin (``batch_wait``: the model busy with other requests' batches), beside the latency the client
sees. Side by side with the reference revision --against (round 58's, from a git worktree, which reports no
``batch_wait``), one real `cqa serve` after the other over the full 2016 corpus's data folder, to show that counting
the wait costs the requests nothing.

Per side and concurrency level (--levels): --requests searches (2016 test questions, target answers, reranked, k 10)
from that many clients at once, each on a new connection; the client's p50 / p95 ms, and the p50 of each timing the
server reported. Prints a JSON object last.

    python bench/batch_wait.py [--data-dir var] [--against 52bb560] [--levels 1,4,8] [--requests 48]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import add_serve_arguments, post_json, reference_checkout, run_header, served_forum, server  # noqa: E402

def level(base: str, bodies: list[dict], clients: int, requests: int) -> dict:
    """``requests`` searches from ``clients`` threads at once: the client's latency and the server's timings."""
    got: list[tuple[int, float, dict]] = []
    lock, next_i = threading.Lock(), [0]

    def client() -> None:
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= requests:
                return
            t0 = time.perf_counter()
            status, out = post_json(base + "/search", bodies[i % len(bodies)])
            took = time.perf_counter() - t0
            with lock:
                got.append((status, took, out.get("timings_ms", {}) if status == 200 else {}))
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [(took, timings) for status, took, timings in got if status == 200]
    row = {"answered": len(ok), "failed": len(got) - len(ok),
           "client_p50_ms": round(1000 * float(np.median([t for t, _ in ok])), 1),
           "client_p95_ms": round(1000 * float(np.percentile([t for t, _ in ok], 95)), 1)}
    names = sorted({name for _, timings in ok for name in timings})
    row["server_p50_ms"] = {name: round(float(np.median([t[name] for _, t in ok if name in t])), 1) for name in names}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(ap)
    ap.add_argument("--against", default="52bb560", help="the reference revision (default: round 58's last)")
    ap.add_argument("--levels", default="1,4,8", help="clients at once, comma-separated")
    ap.add_argument("--requests", type=int, default=48, help="searches per level")
    args = ap.parse_args()

    settings, questions = served_forum(args)
    bodies = [{"question": q, "k": 10} for q in questions]
    levels = [int(n) for n in args.levels.split(",")]
    out = {**run_header("batch_wait"), "against": args.against, "requests": args.requests, "sides": {}}
    with tempfile.TemporaryDirectory(prefix="cqa-batch-wait-") as tmp, contextlib.ExitStack() as stack:
        ref = reference_checkout(stack, args.against, Path(tmp))
        for side, root in (("reference", ref), ("this_tree", ROOT)):
            env = {"CQA_REFRESH_S": "0", "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
            with server(settings.data_dir, env, root=root) as (base, _):
                level(base, bodies, 2, 8)  # each kind of request once before the clock
                out["sides"][side] = {str(n): level(base, bodies, n, args.requests) for n in levels}
            print(json.dumps({side: out["sides"][side]}), file=sys.stderr, flush=True)
    out["client_p50_this_over_reference"] = {
        str(n): round(out["sides"]["this_tree"][str(n)]["client_p50_ms"] /
                      out["sides"]["reference"][str(n)]["client_p50_ms"], 3) for n in levels}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
