"""One client sending many searches at once beside a few users searching now and then: CQA_FAIR_SHARE against none
(the reference, as every release before round 56 served), one real `cqa serve` at a time over the full 2016 corpus's
data folder, CQA_MAX_IN_FLIGHT at its default (32).

The clients are real connections from different loopback addresses, as the server sees different users: the greedy
one (a scraper, a runaway script) from 127.0.0.2 with --greedy searches always in flight, each sent again as soon as
it is answered, or --retry-s after a refusal; each of --users users from its own address (127.0.0.10, .11, ...)
searches, reads the answer for --think-s, and searches again. All send POST /search of the 2016 test questions
(target answers, reranked, k 10), for --seconds. The sides, each with its own server, one after the other: the users
alone (what they get from an idle worker); beside the greedy client with fair share off and no run queue (the
reference, as before round 56); with fair share on but every request taken running at once (CQA_RUN_SLOTS=0, as
round 56 shipped); with --no-delay-side, that and each 429 answered at once (CQA_OVER_SHARE_DELAY_MS=0); one per
--slots value; one per --alone-slots value (CQA_RUN_SLOTS_ALONE, round 58); one per --rate-limit-per-min value (CQA_RATE_LIMIT_PER_MIN, round 58: the greedy client held to that
rate, each user far below it); and as shipped (fair share and CQA_RUN_SLOTS's default). With --bursts, instead of
searching for --seconds: the greedy client sends --greedy searches at once while alone in the worker, and one user
searches a moment into each burst (each user search's ms, and how long each burst took to be answered). Per side: the users' searches sent,
answered, refused 503 `overloaded` and 429 `over_share`, the answered ones' p50 / p95 ms, and the share answered; the
greedy client's answered per second and its refusals; /ready's admission at the end. Prints a JSON object last, with
the ratios of the shipped side over fair share off, and over round 56's (no run queue).

    python bench/fair_share.py [--data-dir var] [--greedy 48] [--users 4] [--seconds 30] [--slots 1 4]
                               [--rate-limit-per-min 120] [--bursts 6 --greedy 32]
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

from load import add_serve_arguments, get_json, post, run_header, served_forum, server  # noqa: E402

GREEDY = "127.0.0.2"


def user_address(i: int) -> str:
    return f"127.0.0.{10 + i}"


def clients(base: str, bodies: list[dict], greedy: int, users: int, seconds: float, think_s: float,
            retry_s: float) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(status, seconds) of each search the users sent, and of each the greedy client sent, over ``seconds``."""
    deadline = time.perf_counter() + seconds
    got_users: list[tuple[int, float]] = []
    got_greedy: list[tuple[int, float]] = []
    lock = threading.Lock()

    def greedy_loop(j: int) -> None:
        i = j
        while time.perf_counter() < deadline:
            status, took = post(base + "/search", bodies[i % len(bodies)], GREEDY)
            with lock:
                got_greedy.append((status, took))
            i += greedy
            if status != 200:
                time.sleep(retry_s)

    def user_loop(u: int) -> None:
        i = 7 * u
        time.sleep(think_s * u / max(1, users))  # the users do not start in step
        while time.perf_counter() < deadline:
            status, took = post(base + "/search", bodies[i % len(bodies)], user_address(u))
            with lock:
                got_users.append((status, took))
            i += 1
            time.sleep(think_s)
    threads = [threading.Thread(target=greedy_loop, args=(j,), daemon=True) for j in range(greedy)]
    threads += [threading.Thread(target=user_loop, args=(u,), daemon=True) for u in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 90)
    return got_users, got_greedy


def bursts(base: str, bodies: list[dict], greedy: int, rounds: int, gap_s: float,
           user_delay_s: float) -> tuple[list[tuple[int, float]], list[float]]:
    """The greedy client sending ``greedy`` searches at once, alone in the worker (no other client for ``gap_s`` >
    10 s), and one user's search ``user_delay_s`` into each burst, ``rounds`` times: the user's (status, seconds) and
    how long each burst took to be answered whole."""
    got_user: list[tuple[int, float]] = []
    took_burst: list[float] = []
    for r in range(rounds):
        t0 = time.perf_counter()
        sent = [threading.Thread(target=post, args=(base + "/search", bodies[(r * greedy + j) % len(bodies)], GREEDY),
                                 daemon=True) for j in range(greedy)]
        for t in sent:
            t.start()
        time.sleep(user_delay_s)
        got_user.append(post(base + "/search", bodies[(7 * r) % len(bodies)], user_address(0)))
        for t in sent:
            t.join(120)
        took_burst.append(time.perf_counter() - t0)
        time.sleep(max(0.0, gap_s - (time.perf_counter() - t0)))  # the user silent for gap_s: the greedy one alone
    return got_user, took_burst


def summary(samples: list[tuple[int, float]], seconds: float) -> dict:
    ok = np.asarray([took for s, took in samples if s == 200]) * 1000

    def pct(q: float) -> float | None:
        return round(float(np.percentile(ok, q)), 1) if ok.size else None
    return {"sent": len(samples), "answered": int(ok.size),
            "refused_503": sum(1 for s, _ in samples if s == 503), "refused_429": sum(1 for s, _ in samples if s == 429),
            "other": sum(1 for s, _ in samples if s not in (200, 429, 503)),
            "answered_share": round(ok.size / max(1, len(samples)), 3), "answered_rps": round(ok.size / seconds, 2),
            "answered_p50_ms": pct(50), "answered_p95_ms": pct(95)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(ap)
    ap.add_argument("--greedy", type=int, default=48, help="searches the greedy client keeps in flight")
    ap.add_argument("--users", type=int, default=4, help="users searching now and then, each from its own address")
    ap.add_argument("--think-s", type=float, default=1.0, help="a user's pause after each answer")
    ap.add_argument("--retry-s", type=float, default=0.1, help="the greedy client's pause after a refusal")
    ap.add_argument("--seconds", type=float, default=30, help="each side's length")
    ap.add_argument("--max-in-flight", type=int, default=32, help="CQA_MAX_IN_FLIGHT of every side")
    ap.add_argument("--slots", type=int, nargs="*", default=[], help="more sides, each with this CQA_RUN_SLOTS")
    ap.add_argument("--no-delay-side", action="store_true", help="a side with CQA_OVER_SHARE_DELAY_MS=0 too (round 56)")
    ap.add_argument("--bursts", type=int, default=0, help="instead: the greedy client sends --greedy searches at once, "
                    "alone in the worker, and one user searches --burst-user-delay-s into each burst, this many times "
                    "(round 58: a user arriving while a client alone has filled the slots)")
    ap.add_argument("--burst-gap-s", type=float, default=12.0, help="from one burst to the next (over 10 s: alone again)")
    ap.add_argument("--burst-user-delay-s", type=float, default=0.2, help="how far into a burst the user searches")
    ap.add_argument("--alone-slots", type=int, nargs="*", default=[],
                    help="more sides, each as shipped with this CQA_RUN_SLOTS_ALONE (round 58)")
    ap.add_argument("--rate-limit-per-min", type=int, nargs="*", default=[],
                    help="more sides, each as shipped with this CQA_RATE_LIMIT_PER_MIN (round 58)")
    ap.add_argument("--only", nargs="*", default=None, help="run only the sides of these names (the ratios need "
                    "theirs)")
    args = ap.parse_args()

    settings, questions = served_forum(args)
    bodies = [{"question": q, "k": 10} for q in questions]
    out = {**run_header("fair_share"), "max_in_flight": args.max_in_flight, "greedy": args.greedy, "users": args.users, "think_s": args.think_s,
           "retry_s": args.retry_s, "seconds": args.seconds, "sides": {}}
    sides = [("users alone", {}, 0), ("fair_share=false", {"CQA_FAIR_SHARE": "false", "CQA_RUN_SLOTS": "0"}, args.greedy),
             ("fair_share=true, run_slots=0", {"CQA_RUN_SLOTS": "0"}, args.greedy)]
    if args.no_delay_side:
        sides.append(("fair_share=true, run_slots=0, over_share_delay_ms=0",
                      {"CQA_RUN_SLOTS": "0", "CQA_OVER_SHARE_DELAY_MS": "0"}, args.greedy))
    sides += [(f"fair_share=true, run_slots={n}", {"CQA_RUN_SLOTS": str(n)}, args.greedy) for n in args.slots]
    sides += [(f"fair_share=true, run_slots_alone={n}", {"CQA_RUN_SLOTS_ALONE": str(n)}, args.greedy)
              for n in args.alone_slots]
    sides += [(f"fair_share=true, rate_limit_per_min={n}", {"CQA_RATE_LIMIT_PER_MIN": str(n)}, args.greedy)
              for n in args.rate_limit_per_min]
    sides.append(("fair_share=true", {}, args.greedy))
    if args.only is not None:
        sides = [side for side in sides if side[0] in args.only]
    for name, extra, greedy in sides:
        env = {"CQA_REFRESH_S": "0", "CQA_MAX_IN_FLIGHT": str(args.max_in_flight), **extra}
        with server(settings.data_dir, env) as (base, _):
            if args.bursts:
                users, took = bursts(base, bodies, greedy, args.bursts, args.burst_gap_s, args.burst_user_delay_s)
            else:
                users, hog = clients(base, bodies, greedy, args.users, args.seconds, args.think_s, args.retry_s)
            admission = get_json(base + "/ready", timeout=30)[1].get("admission")
        side = {"users": summary(users, args.seconds), "admission": admission}
        if args.bursts:
            side["users"]["each_ms"] = [round(1000 * t, 1) for _, t in users]
            side["burst_answered_s"] = {"p50": round(float(np.median(took)), 2), "each": [round(t, 2) for t in took]}
        elif greedy:
            side["greedy"] = summary(hog, args.seconds)
        out["sides"][name] = side
        print(json.dumps({name: side}), file=sys.stderr, flush=True)
    if args.bursts or not {"fair_share=true", "fair_share=false", "fair_share=true, run_slots=0"} <= set(out["sides"]):
        print(json.dumps(out))
        return
    on, off = out["sides"]["fair_share=true"], out["sides"]["fair_share=false"]
    unqueued = out["sides"]["fair_share=true, run_slots=0"]

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None
    out["ratios_on_over_off"] = {
        "users_answered_share": ratio(on["users"]["answered_share"], off["users"]["answered_share"]),
        "users_answered_p50_ms": ratio(on["users"]["answered_p50_ms"], off["users"]["answered_p50_ms"]),
        "greedy_answered_rps": ratio(on["greedy"]["answered_rps"], off["greedy"]["answered_rps"])}
    out["ratios_queued_over_not"] = {  # the shipped run slots over every request taken running at once (round 56)
        "users_answered_p50_ms": ratio(on["users"]["answered_p50_ms"], unqueued["users"]["answered_p50_ms"]),
        "users_answered_p95_ms": ratio(on["users"]["answered_p95_ms"], unqueued["users"]["answered_p95_ms"]),
        "greedy_answered_rps": ratio(on["greedy"]["answered_rps"], unqueued["greedy"]["answered_rps"])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
