"""Reranking speed per ranker: latency to rerank 10, 30 and 100 candidates of one question, and
pairs/s, on real SemEval 2016 test subtask C candidates (CPU, or CUDA when present and asked for).
Every ranker runs as the service runs it (no score cache). Prints a JSON object last."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.candidates import Query  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.presets import build_label  # noqa: E402
from ranking.rankers import for_serving, service_reranker  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rankers", default="bm25,minilm-cosine,bilstm,bi-encoder,cross-encoder,cross-encoder[len96],"
                                         "cross-encoder[int8],service",
                    help="presets, with variants as NAME[int8] or NAME[lenN]; service: the /rerank reranker")
    ap.add_argument("--sizes", default="10,30,100")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    settings = Settings(device=args.device)
    xml, _ = BENCHMARKS["semeval2016-test-C"].paths(settings.semeval_dir)
    queries = queries_for(xml, "C")
    import torch
    out = {"device": args.device, "machine": platform.machine(), "torch_threads": torch.get_num_threads(),
           "default_ranker": settings.default_ranker, "rankers": {}}
    for name in args.rankers.split(","):
        ranker = service_reranker(settings) if name == "service" else for_serving(build_label(name, settings))
        rows = {}
        for n in (int(x) for x in args.sizes.split(",")):
            qs = [Query(q.id, q.text, q.candidates[:n]) for q in queries]
            ranker.score(qs[:1])  # warm-up: loads models
            lat = []
            for i in range(args.repeats):
                q = qs[i % len(qs)]
                t0 = time.perf_counter()
                ranker.score([q])
                lat.append(time.perf_counter() - t0)
            a = np.asarray(lat) * 1000
            rows[n] = {"p50_ms": round(float(np.percentile(a, 50)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2),
                       "pairs_per_s": round(n / float(np.median(lat)), 1)}
        out["rankers"][getattr(ranker, "name", name)] = rows
        print(json.dumps({name: rows}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
