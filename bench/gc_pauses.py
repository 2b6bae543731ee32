"""How long Python's cyclic garbage collector stops a real `cqa serve` while it answers POST /search, with
$CQA_GC_FREEZE on (the default: the objects made while the models loaded are frozen, out of the collector's reach)
and off, side by side in one run: one server per level in turn over the same data folder, each sent the same reranked
searches (the 2016 test questions, target answers then questions, --requests each, at each --levels concurrency).
Reported per level: the latency (p50, p95, p99) and, from GET /metrics, the collections the searches caused by
generation: how many, their pause seconds, and how many stopped the process more than 25 ms (`cqa_gc_pause_seconds`,
the startup's own left out). A collection of generation 2 walks every tracked object; with the models loaded,
hundreds of thousands. Prints a JSON object last.

    python bench/gc_pauses.py --data-dir /tmp/cqa-full --requests 300
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import built_corpus, post, run_level, server  # noqa: E402


def gc_metrics(base: str) -> dict[tuple[str, str, str], float]:
    """``cqa_gc_pause_seconds`` of GET /metrics: {(series, generation, le): value}; and ``cqa_gc_frozen_objects``
    under ("frozen", "", "")."""
    out = {}
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("cqa_gc_frozen_objects "):
                out[("frozen", "", "")] = float(line.split()[1])
            elif line.startswith("cqa_gc_pause_seconds_"):
                name, value = line.rsplit(" ", 1)
                series, _, labels = name.partition("{")
                fields = dict(kv.split("=") for kv in labels.rstrip("}").split(","))
                out[(series, fields["generation"].strip('"'), fields.get("le", "").strip('"'))] = float(value)
    return out


def since(after: dict, before: dict) -> dict:
    """The collections a load caused, by generation: how many, their pause seconds, and how many stopped the
    process more than 25 ms."""
    def delta(series, g, le=""):
        return after[(series, g, le)] - before[(series, g, le)]
    return {g: {"collections": int(delta("cqa_gc_pause_seconds_count", g)),
                "pause_s": round(delta("cqa_gc_pause_seconds_sum", g), 4),
                "pauses_over_25ms": int(delta("cqa_gc_pause_seconds_count", g)
                                           - delta("cqa_gc_pause_seconds_bucket", g, "0.025"))}
            for g in ("0", "1", "2")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var",
                    help="the data folder cqa evaluate uses: serves its full 2016 corpus (built if missing)")
    ap.add_argument("--index-of", type=Path, default=None, help="serve this data folder's live generation instead")
    ap.add_argument("--freeze-levels", default="0,1", help="$CQA_GC_FREEZE values, one server each, in turn")
    ap.add_argument("--requests", type=int, default=300, help="searches per target and concurrency")
    ap.add_argument("--levels", default="1,4", help="concurrencies, comma-separated")
    ap.add_argument("--targets", default="answers,questions")
    ap.add_argument("--max-seconds", type=float, default=300, help="time cap per level")
    args = ap.parse_args()
    from app.settings import Settings
    from ranking.fullcorpus import qrels_and_queries
    folder = args.index_of or built_corpus(args.data_dir).data_dir
    _, queries = qrels_and_queries(Settings(), "test")
    questions = list(queries.values())
    runs = []
    for freeze in args.freeze_levels.split(","):
        with server(folder, {"CQA_GC_FREEZE": freeze, "CQA_REFRESH_S": "0"}) as (base, ready):
            for target in args.targets.split(","):  # warm-up: each target's models called once
                post(base + "/search", {"question": {"body": "warm up"}, "target": target})
            start = gc_metrics(base)
            levels = []
            for c in (int(x) for x in args.levels.split(",")):
                for target in args.targets.split(","):
                    bodies = [{"question": {"body": q}, "k": 10, "target": target} for q in questions]
                    before = gc_metrics(base)
                    r = run_level(base + "/search", bodies, c, args.requests, args.max_seconds, target=target)
                    r["gc"] = since(gc_metrics(base), before)
                    print(json.dumps({"gc_freeze": freeze, **r}), file=sys.stderr, flush=True)
                    levels.append(r)
            runs.append({"gc_freeze": freeze, "generation": ready["generation"], "levels": levels,
                         "frozen_objects": int(start[("frozen", "", "")]),
                         "gc_all_levels": since(gc_metrics(base), start)})
    out = {"bench": "gc_pauses", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
           "data_dir": str(folder), "requests": args.requests, "runs": runs}
    by = {r["gc_freeze"]: r for r in runs}
    if {"0", "1"} <= set(by):
        off, on = by["0"]["gc_all_levels"]["2"], by["1"]["gc_all_levels"]["2"]
        out["full_collection_pause_ratio"] = round(off["pause_s"] / on["pause_s"], 2) if on["pause_s"] else None
        for q in ("p95_ms", "p99_ms"):
            pairs = [(a[q], b[q]) for a, b in zip(by["0"]["levels"], by["1"]["levels"])]
            out[f"{q[:3]}_ratios"] = [round(a / b, 2) for a, b in pairs]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
