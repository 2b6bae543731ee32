"""GET /metrics with `cqa serve --workers N`: every worker's counts added up (round 59) against each worker answering
with its own (the reference revision --against, round 58's, run from a git worktree), side by side, one real server
after the other over the full 2016 corpus's data folder.

Per side: --requests POST /search (2016 test questions, not reranked) each on a new connection, then --scrapes scrapes
of GET /metrics, each on a new connection as Prometheus sends them. From each scrape: the searches it counts
(``cqa_requests_total`` of /search, 200), how many workers' own memory it lists, and how long it took. A scraper's
``rate()`` over a counter is right only if every scrape gives the total sent: ``scrapes_with_the_total`` says how many
did, ``counts_seen`` what the scrapes said. Prints a JSON object last.

    python bench/worker_metrics.py [--data-dir var] [--against 52bb560] [--workers 2] [--requests 60] [--scrapes 40]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import (add_serve_arguments, every_worker_up, post, reference_checkout, run_header,  # noqa: E402
                  served_forum, server)

SEARCHES = re.compile(r'^cqa_requests_total\{endpoint="/search",method="POST",status="200"\} ([0-9.e+]+)$', re.M)
RESIDENT = re.compile(r'^process_resident_memory_bytes(\{pid="\d+"\})? ', re.M)


def scrape(base: str) -> tuple[float, int, float]:
    """(the /search 200s counted, the workers whose own memory is listed, seconds) of one GET /metrics."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    took = time.perf_counter() - t0
    found = SEARCHES.search(text)
    return (float(found.group(1)) if found else 0.0), len(RESIDENT.findall(text)), took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(ap)
    ap.add_argument("--against", default="52bb560", help="the reference revision (default: round 58's last, each "
                    "worker answering /metrics with its own counts)")
    ap.add_argument("--workers", type=int, default=2, help="`cqa serve --workers`")
    ap.add_argument("--requests", type=int, default=60, help="searches sent before the scrapes")
    ap.add_argument("--scrapes", type=int, default=40, help="GET /metrics per side")
    args = ap.parse_args()

    settings, questions = served_forum(args)
    bodies = [{"question": q, "k": 10, "rerank": False} for q in questions]
    out = {**run_header("worker_metrics"), "against": args.against, "workers": args.workers,
           "requests": args.requests, "scrapes": args.scrapes, "sides": {}}
    with tempfile.TemporaryDirectory(prefix="cqa-worker-metrics-") as tmp, contextlib.ExitStack() as stack:
        ref = reference_checkout(stack, args.against, Path(tmp))
        for side, root in (("reference", ref), ("this_tree", ROOT)):
            env = {"CQA_REFRESH_S": "0", "CQA_WORKERS": str(args.workers),
                   "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
            with server(settings.data_dir, env, root=root) as (base, _):
                every_worker_up(base, args.workers)
                sent = Counter(post(base + "/search", bodies[i % len(bodies)])[0] for i in range(args.requests))
                time.sleep(0.5)
                got = [scrape(base) for _ in range(args.scrapes)]
            counts = [c for c, _, _ in got]
            out["sides"][side] = {
                "searches_answered": sent.get(200, 0), "counts_seen": dict(sorted(Counter(counts).items())),
                "scrapes_with_the_total": sum(c == sent.get(200, 0) for c in counts),
                "workers_listed": dict(sorted(Counter(w for _, w, _ in got).items())),
                "scrape_p50_ms": round(1000 * float(np.median([t for _, _, t in got])), 2),
                "scrape_p95_ms": round(1000 * float(np.percentile([t for _, _, t in got], 95)), 2)}
            print(json.dumps({side: out["sides"][side]}), file=sys.stderr, flush=True)
    out["scrape_p50_this_over_reference"] = round(out["sides"]["this_tree"]["scrape_p50_ms"] /
                                                  out["sides"]["reference"]["scrape_p50_ms"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
