"""The cascade's MAP against its latency, for each N (how many of bilstm+signals' top candidates
cross-encoder+signals rescores) and each inference variant: MAP on a subtask A benchmark through
``run_benchmark`` (what ``cqa evaluate`` runs), and latency as POST /rerank runs the ranker (serving set-up,
no score cache), one question at a time, with its first 10 and 30 candidates of 2016 test C, every
configuration taking its turn on each request. The full cross-encoder+signals runs beside it as the
reference. Draws the curve (--plot) and prints a JSON object last.

    python bench/cascade.py --benchmark semeval2016-dev-A --tops 0,1,2,3,4,5,6,8,10 \\
        --inference torch-fp32,onnx-int8 --plot docs/cascade-dev-A.png
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.cascade import Cascade  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.runner import run_benchmark  # noqa: E402
from ranking.neural.inference import cpu_flags  # noqa: E402
from ranking.presets import build  # noqa: E402
from ranking.rankers import for_serving  # noqa: E402
from rerank_speed import latencies  # noqa: E402  (bench/, beside this file)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="semeval2016-dev-A", choices=sorted(b for b in BENCHMARKS if "-A" in b))
    ap.add_argument("--tops", default="0,1,2,3,4,5,6,8,10")
    ap.add_argument("--inference", default="torch-fp32,onnx-int8", help="comma-separated inference variants")
    ap.add_argument("--sizes", default="10,30", help="candidates per request for the latency")
    ap.add_argument("--repeats", type=int, default=20, help="timed requests per configuration and size")
    ap.add_argument("--plot", type=Path, help="write the MAP-against-latency curve here (PNG)")
    args = ap.parse_args()
    settings = Settings(device="cpu")
    bench = BENCHMARKS[args.benchmark]
    xml, _ = BENCHMARKS["semeval2016-test-C"].paths(settings.semeval_dir)
    requests = queries_for(xml, "C")
    sizes = [int(x) for x in args.sizes.split(",")]
    tops = [int(x) for x in args.tops.split(",")]
    import torch
    out = {"bench": "cascade", "benchmark": args.benchmark, "machine": platform.machine(), "cpu_flags": cpu_flags(),
           "torch_threads": torch.get_num_threads(), "rows": []}
    served_rankers = []
    for variant in args.inference.split(","):
        # two sets of rankers: evaluation's (score cache, corpus statistics) and the service's (neither)
        evaluated, served = {}, {}
        for kind, built in (("eval", evaluated), ("serve", served)):
            cache: dict = {}
            built["cheap"] = build("bilstm+signals", settings, variant, built=cache)
            built["full"] = build("cross-encoder+signals", settings, variant, built=cache)
            if kind == "serve":
                for r in built.values():
                    for_serving(r)
        for top in ["full", *tops]:
            pair = [b["full"] if top == "full" else Cascade([b["cheap"], b["full"]], top, f"cascade[{variant}][top{top}]")
                    for b in (evaluated, served)]
            report = run_benchmark(bench, pair[0], settings.semeval_dir, settings.reports_dir)
            out["rows"].append({"inference": variant, "top": top, "ranker": pair[0].name, "MAP": round(report["MAP"], 4)})
            served_rankers.append(pair[1])
            print(json.dumps(out["rows"][-1]), file=sys.stderr, flush=True)
    for n in sizes:
        for row, lat in zip(out["rows"], latencies(served_rankers, requests, n, args.repeats)):
            row.setdefault("latency", {})[n] = lat
    for row in out["rows"]:
        print(json.dumps(row), file=sys.stderr, flush=True)
    if args.plot:
        plot(out, args.plot, max(sizes))
        out["plot"] = str(args.plot)
    print(json.dumps(out))


def plot(out: dict, path: Path, size: int) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant in dict.fromkeys(r["inference"] for r in out["rows"]):
        rows = [r for r in out["rows"] if r["inference"] == variant and r["top"] != "full"]
        xs = [r["latency"][size]["p50_ms"] for r in rows]
        ys = [r["MAP"] for r in rows]
        line, = ax.plot(xs, ys, marker="o", label=f"cascade, {variant}")
        for r, x, y in zip(rows, xs, ys):
            ax.annotate(f"N={r['top']}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
        full = next(r for r in out["rows"] if r["inference"] == variant and r["top"] == "full")
        ax.plot([full["latency"][size]["p50_ms"]], [full["MAP"]], marker="*", markersize=12, color=line.get_color(),
                linestyle="none", label=f"cross-encoder+signals, {variant}")
    ax.set_xlabel(f"POST /rerank ranker latency, p50 ms ({size} candidates, 2 CPU threads)")
    ax.set_ylabel(f"MAP, {out['benchmark']}")
    ax.set_title("Cascade: cross-encoder+signals over the top N of bilstm+signals")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
