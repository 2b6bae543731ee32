"""A worker under more searches than it can answer: CQA_MAX_IN_FLIGHT's bound against none (the reference, as every
release before round 54 served), one real `cqa serve` at a time over the full 2016 corpus's data folder.

First the server's capacity: POST /search (target answers, reranked, 2016 test questions) from --clients clients one
request after another for --capacity-seconds; its throughput is the capacity. Then an open-loop burst: requests
sent at --overload times that rate, each on its own connection whatever the earlier ones are doing (as users of a
forum arrive), for --seconds, each with a 60 s timeout. Per side: requests sent, answered (200) and refused (503
`overloaded`), the answered ones' p50 / p95 / max latency and the p95 over the burst's last third (an unbounded queue's
waits grow through the burst), the refused ones' p50, and the share of all requests answered within 1 s. Each side
starts its own server, after the one before it has stopped; the unbounded one with no run queue (CQA_RUN_SLOTS=0), the
others with --run-slots or the service's default. Prints a JSON object last.

    python bench/overload.py [--data-dir var] [--limits 0,32] [--run-slots N] [--overload 1.5] [--seconds 30]
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import add_serve_arguments, post, run_header, run_level, served_forum, server  # noqa: E402


def burst(base: str, bodies: list[dict], rate: float, seconds: float) -> list[tuple[float, int, float]]:
    """Requests sent every 1 / ``rate`` s for ``seconds``, each in its own thread (open loop): (sent at, status,
    seconds) of each."""
    out: list[tuple[float, int, float]] = []
    lock, threads = threading.Lock(), []
    start = time.perf_counter()

    def one(i: int, at: float) -> None:
        status, took = post(base + "/search", bodies[i % len(bodies)])
        with lock:
            out.append((at, status, took))
    i = 0
    while (at := i / rate) < seconds:
        time.sleep(max(0.0, start + at - time.perf_counter()))
        t = threading.Thread(target=one, args=(i, at), daemon=True)
        t.start()
        threads.append(t)
        i += 1
    for t in threads:
        t.join(90)
    return out


def summary(samples: list[tuple[float, int, float]], seconds: float) -> dict:
    ok = np.asarray([took for _, s, took in samples if s == 200]) * 1000
    late = np.asarray([took for at, s, took in samples if s == 200 and at >= 2 * seconds / 3]) * 1000
    refused = np.asarray([took for _, s, took in samples if s == 503]) * 1000

    def pct(a: np.ndarray, q: float) -> float | None:
        return round(float(np.percentile(a, q)), 1) if a.size else None
    return {"sent": len(samples), "answered": int(ok.size), "refused": int(refused.size),
            "other": len(samples) - int(ok.size) - int(refused.size),
            "answered_p50_ms": pct(ok, 50), "answered_p95_ms": pct(ok, 95), "answered_max_ms": pct(ok, 100),
            "answered_p95_ms_last_third": pct(late, 95), "refused_p50_ms": pct(refused, 50),
            "answered_within_1s": round(float((ok < 1000).sum()) / max(1, len(samples)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(ap)
    ap.add_argument("--limits", default="0,32", help="CQA_MAX_IN_FLIGHT of each side, in turn (0: no bound, the "
                    "reference)")
    ap.add_argument("--run-slots", type=int, default=None, help="CQA_RUN_SLOTS of the bounded sides (default: the "
                    "service's; the unbounded reference runs with none, as before round 57)")
    ap.add_argument("--clients", type=int, default=4, help="closed-loop clients measuring the capacity")
    ap.add_argument("--capacity-seconds", type=float, default=15)
    ap.add_argument("--overload", type=float, default=1.5, help="the burst's rate over the measured capacity")
    ap.add_argument("--seconds", type=float, default=30, help="the burst's length")
    args = ap.parse_args()

    settings, questions = served_forum(args)
    bodies = [{"question": q, "k": 10} for q in questions]
    out = {**run_header("overload"), "run_slots": args.run_slots, "overload": args.overload, "seconds": args.seconds, "sides": {}}
    for limit in (int(x) for x in args.limits.split(",")):
        env = {"CQA_REFRESH_S": "0", "CQA_MAX_IN_FLIGHT": str(limit)}
        if not limit:
            env["CQA_RUN_SLOTS"] = "0"
        elif args.run_slots is not None:
            env["CQA_RUN_SLOTS"] = str(args.run_slots)
        with server(settings.data_dir, env) as (base, _):
            # closed loop: load.py's level, its throughput the capacity
            rate = run_level(base + "/search", bodies, args.clients, 10**9, args.capacity_seconds)["throughput_rps"]
            side = {"capacity_rps": round(rate, 2), "rate_rps": round(rate * args.overload, 2),
                    **summary(burst(base, bodies, rate * args.overload, args.seconds), args.seconds)}
        out["sides"][f"max_in_flight={limit}"] = side
        print(json.dumps({limit: side}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
