"""CQA_RATE_LIMIT_PER_MIN with several workers: the rate counted in one file the workers share (round 59) against
each worker counting its own (the reference revision --against, round 58's, run from a git worktree).

First what a take costs the event loop: ``RateLimiter.take`` --takes times over --clients clients, the reference
revision's (in the process's memory) and this tree's (in the shared SQLite file), one process alone, then two
processes taking from one file at once (the workers' contention); microseconds per take and the ratio.

Then a real `cqa serve --workers N` per side over the full 2016 corpus's data folder (CQA_RATE_LIMIT_PER_MIN
--per-min, its burst the default ten seconds' worth; JSON logs, to see which worker answered what), one after the
other. A scraper from 127.0.0.2 sends POST /search (the 2016 test questions, not reranked, k 10) from --threads
threads, each request on a new connection, for --seconds; a user from 127.0.0.10 searches once a second beside it.
Per side: the scraper's requests answered and refused 429 `rate_limited`, its answered against what the rate allows
(the burst plus the rate over the seconds: 1.0 is the limit kept, N with N workers each keeping their own), which
workers answered it, and the user's answered share and p50 ms. With --workers 1 both sides keep the limit; what is
left to see there is what the file costs a request. Prints a JSON object last.

    python bench/rate_limit.py [--data-dir var] [--against 52bb560] [--workers 2] [--per-min 120] [--seconds 30]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import (add_serve_arguments, every_worker_up, post, reference_checkout, reference_module,  # noqa: E402
                  run_header, served_forum, server)

SCRAPER, USER = "127.0.0.2", "127.0.0.10"


def take_cost(limiter, takes: int, clients: int) -> tuple[float, int]:
    """Microseconds per ``limiter.take`` (refusals included) over ``clients`` clients, and the takes let through
    because the file was locked for longer than the limiter waits (``store_errors``; none for the reference's)."""
    from app.errors import RateLimited
    t0 = time.perf_counter()
    for i in range(takes):
        try:
            limiter.take(f"203.0.113.{i % clients}")
        except RateLimited:
            pass
    return 1e6 * (time.perf_counter() - t0) / takes, getattr(limiter, "store_errors", 0)


def _contended(path: str, takes: int, clients: int, per_min: int, start, out) -> None:
    from app.limits import RateLimiter
    start.wait()
    out.put(take_cost(RateLimiter(per_min, Path(path)), takes, clients))


def take_costs(rev: str, folder: Path, takes: int, clients: int, per_min: int) -> dict:
    from app.limits import RateLimiter
    reference = reference_module(rev, "app/limits.py", folder).RateLimiter
    if "path" in {f.name for f in dataclasses.fields(reference)}:  # a revision since round 59: its own file
        memory, _ = take_cost(reference(per_min, folder / "reference.sqlite3"), takes, clients)
    else:  # round 58's: the process's memory
        memory, _ = take_cost(reference(per_min), takes, clients)
    shared, errors = take_cost(RateLimiter(per_min, folder / "alone.sqlite3"), takes, clients)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_contended, args=(str(folder / "two.sqlite3"), takes, clients, per_min, start, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    two = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return {"takes": takes, "clients": clients, "memory_us": round(memory, 2), "shared_us": round(shared, 2),
            "shared_store_errors": errors, "shared_two_processes_us": [round(t, 2) for t, _ in two],
            # two processes taking back to back without a pause (each worker's takes are a request apart in service):
            # the worst case of the file's lock, where one may wait past the limiter's patience and let a take through
            "shared_two_processes_store_errors": [e for _, e in two], "shared_over_memory": round(shared / memory, 2)}


def scrape(base: str, bodies: list[dict], threads: int,
           seconds: float) -> tuple[list[tuple[str, int]], list[tuple[int, float]]]:
    """(request id, status) of each scraper request, and (status, seconds) of each of the user's, over ``seconds``."""
    import http.client
    import urllib.parse
    parts = urllib.parse.urlsplit(base)
    deadline = time.perf_counter() + seconds
    got: list[tuple[str, int]] = []
    lock = threading.Lock()

    def send(rid: str, body: dict) -> int:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60, source_address=(SCRAPER, 0))
        try:
            conn.request("POST", "/search", body=json.dumps(body),
                         headers={"Content-Type": "application/json", "X-Request-ID": rid})
            r = conn.getresponse()
            r.read()
            return r.status
        except Exception:
            return 0
        finally:
            conn.close()

    def loop(j: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            rid = f"scrape-{j}-{i}"
            status = send(rid, bodies[(j * 997 + i) % len(bodies)])
            with lock:
                got.append((rid, status))
            i += 1

    user: list[tuple[int, float]] = []

    def user_loop() -> None:
        i = 0
        while time.perf_counter() < deadline:
            user.append(post(base + "/search", bodies[i % len(bodies)], USER))
            i += 1
            time.sleep(1.0)
    workers = [threading.Thread(target=loop, args=(j,)) for j in range(threads)] + [threading.Thread(target=user_loop)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return got, user


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(ap)
    ap.add_argument("--against", default="52bb560", help="the reference revision (default: round 58's last, each "
                    "worker counting its own rate)")
    ap.add_argument("--workers", type=int, default=2, help="`cqa serve --workers`")
    ap.add_argument("--per-min", type=int, default=120, help="CQA_RATE_LIMIT_PER_MIN")
    ap.add_argument("--threads", type=int, default=4, help="the scraper's requests in flight")
    ap.add_argument("--seconds", type=float, default=30, help="each side's length")
    ap.add_argument("--takes", type=int, default=20000, help="takes of the cost measure")
    ap.add_argument("--clients", type=int, default=1000, help="clients of the cost measure")
    args = ap.parse_args()

    settings, questions = served_forum(args)
    bodies = [{"question": q, "k": 10, "rerank": False} for q in questions]
    burst = max(1, args.per_min // 6)
    allowed = burst + args.per_min / 60 * args.seconds
    out = {**run_header("rate_limit"), "against": args.against, "workers": args.workers, "per_min": args.per_min,
           "burst": burst, "seconds": args.seconds, "threads": args.threads, "allowed": round(allowed, 1)}
    with tempfile.TemporaryDirectory(prefix="cqa-rate-limit-") as tmp, contextlib.ExitStack() as stack:
        tmp = Path(tmp)
        out["take_cost"] = take_costs(args.against, tmp, args.takes, args.clients, args.per_min)
        print(json.dumps({"take_cost": out["take_cost"]}), file=sys.stderr, flush=True)
        ref = reference_checkout(stack, args.against, tmp)
        out["sides"] = {}
        for side, root in (("reference", ref), ("this_tree", ROOT)):
            logs = tmp / f"logs-{side}"
            logs.mkdir()
            env = {"CQA_REFRESH_S": "0", "CQA_WORKERS": str(args.workers), "CQA_LOG_FORMAT": "json",
                   "CQA_RATE_LIMIT_PER_MIN": str(args.per_min),
                   "CQA_RATE_LIMIT_STORE": str(tmp / f"rate-{side}.sqlite3"),  # a fresh file, unknown to round 58
                   "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
            with server(settings.data_dir, env, root=root, logs=logs) as (base, _):
                every_worker_up(base, args.workers)  # before the clock starts
                got, user = scrape(base, bodies, args.threads, args.seconds)
                time.sleep(1.0)  # the last access lines written
            pid_of = {}
            for line in (logs / "stdout.log").read_text().splitlines():
                with contextlib.suppress(ValueError):
                    a = json.loads(line)
                    if a.get("request_id", "").startswith("scrape-"):
                        pid_of[a["request_id"]] = a["pid"]
            statuses = Counter(s for _, s in got)
            answered = statuses.get(200, 0)
            out["sides"][side] = {
                "scraper_sent": len(got), "scraper_answered": answered, "scraper_rate_limited": statuses.get(429, 0),
                "scraper_other": {str(k): v for k, v in statuses.items() if k not in (200, 429)},
                "answered_over_allowed": round(answered / allowed, 2),
                "answered_per_worker": sorted(Counter(pid_of.get(rid) for rid, s in got if s == 200).values()),
                "user_sent": len(user),
                "user_answered_share": round(sum(s == 200 for s, _ in user) / max(1, len(user)), 3),
                "user_p50_ms": round(1000 * float(np.median([t for s, t in user if s == 200])), 1)}
            print(json.dumps({side: out["sides"][side]}), file=sys.stderr, flush=True)
    out["answered_this_over_reference"] = round(out["sides"]["this_tree"]["scraper_answered"] /
                                                max(1, out["sides"]["reference"]["scraper_answered"]), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
