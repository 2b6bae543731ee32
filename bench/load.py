"""Load test of POST /search on a real uvicorn process over loopback: throughput and p50/p95/p99
latency at several concurrencies, per target, with reranking on and off (side by side in one run).
Bounded by request count and time.
Defaults to the SemEval full corpus built by the fullcorpus benchmark. Prints a JSON object last.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> tuple[int, float]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except Exception:
        status = 0
    return status, time.perf_counter() - t0


def run_level(url: str, questions: list[str], concurrency: int, rerank: bool, requests: int,
              max_seconds: float, target: str = "answers") -> dict:
    lat: list[float] = []
    failed = [0]
    lock = threading.Lock()
    counter = iter(range(requests))
    deadline = time.perf_counter() + max_seconds

    def worker():
        while time.perf_counter() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            status, dt = post(url, {"question": {"body": questions[i % len(questions)]}, "k": 10, "rerank": rerank,
                                    "target": target})
            with lock:
                if status == 200:
                    lat.append(dt)
                else:
                    failed[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    a = np.asarray(lat) * 1000 if lat else np.zeros(1)
    return {"target": target, "concurrency": concurrency, "rerank": rerank, "requests": len(lat), "failed": failed[0],
            "throughput_rps": round(len(lat) / wall, 2), "p50_ms": round(float(np.percentile(a, 50)), 1),
            "p95_ms": round(float(np.percentile(a, 95)), 1), "p99_ms": round(float(np.percentile(a, 99)), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016",
                    help="a data folder with a store and a live index generation")
    ap.add_argument("--requests", type=int, default=100, help="requests per level")
    ap.add_argument("--max-seconds", type=float, default=60, help="time cap per level")
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--targets", default="answers,questions", help="POST /search targets to load")
    args = ap.parse_args()
    from app.settings import Settings
    from ranking.fullcorpus import qrels_and_queries
    _, queries = qrels_and_queries(Settings(), "test")
    questions = list(queries.values())
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the server (finally below)
    port = free_port()
    env = {**os.environ, "CQA_DATA_DIR": str(args.data_dir), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--no-bootstrap", "--port", str(port)],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(base + "/ready", timeout=2) as r:
                    ready = json.loads(r.read())
                    break
            except Exception:
                time.sleep(1)
        else:
            raise SystemExit("server did not become ready")
        for rerank in (False, True):  # warm-up: load the encoder
            post(base + "/search", {"question": {"body": "warm up"}, "rerank": rerank})
        levels = []
        for target in args.targets.split(","):
            for rerank in (False, True):
                for c in (int(x) for x in args.levels.split(",")):
                    r = run_level(base + "/search", questions, c, rerank, args.requests, args.max_seconds, target)
                    print(json.dumps(r), file=sys.stderr, flush=True)
                    levels.append(r)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps({"documents": ready["sizes"]["documents"], "generation": ready["generation"],
                      "rerankers": ready["search_rerankers"], "levels": levels, "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
