"""Reranking speed per ranker: latency to rerank 10, 30 and 100 candidates of one question, and
pairs/s, on real SemEval 2016 test subtask C candidates (CPU, or CUDA when present and asked for).
Every ranker runs as the service runs it (no score cache), each request a first view of its thread: no pair score
or text vector is known from an earlier request. A model ranker runs without the serving memos; ``service`` (the
/rerank reranker) runs with them, in memory and emptied before each request, and without the stores behind them, so
its parts share within a request what they share when served (the learned layers read the bi-encoder's vectors of
the same texts) and nothing across requests; ``service[no-memos]`` runs it without any memo (what ``service`` measured
before round 58). They take turns on each request. Each row also counts the torch MiniLM forward passes a request
makes (``model_calls_per_request``). Prints a JSON object last.

    python bench/rerank_speed.py --sizes 10,30 --rankers cross-encoder[torch-fp32],cross-encoder[onnx-int8],...
"""
from __future__ import annotations

import argparse
import copy
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
from ranking.neural.inference import cpu_flags  # noqa: E402
from ranking.presets import build_label  # noqa: E402
from ranking.rankers import for_serving, service_reranker, walk  # noqa: E402


def torch_ao_int8(label: str, settings):
    """The int8 path this project used before ONNX Runtime, kept here as the reference it is compared with:
    torch's deprecated dynamic quantisation of the linear layers (``MODEL[torch-ao-int8]``)."""
    import warnings

    import torch

    from ranking.neural.ranker import MiniLMRanker
    name = label.split("[")[0]
    r = MiniLMRanker.from_checkpoint(getattr(settings, name.replace("-", "_") + "_checkpoint"), "cpu",
                                     name=label, inference="torch-fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r.model = torch.ao.quantization.quantize_dynamic(r.model, {torch.nn.Linear}, dtype=torch.qint8)
    return r


class FirstView:
    """``ranker`` (set up for serving, with memos) with every score and vector memo of its parts emptied before each
    request: what a thread no earlier request showed costs, as served."""

    def __init__(self, ranker) -> None:
        self.ranker, self.name = ranker, getattr(ranker, "name", "service")
        memos = [m for r in walk([ranker]) for m in (getattr(r, "memo", None), getattr(r, "vector_memo", None)) if m]
        self.memos = list({id(m): m for m in memos}.values())  # a model two parts share keeps one memo

    def score(self, queries: list[Query]) -> list[list[float]]:
        for m in self.memos:
            m.clear()
        return self.ranker.score(queries)


MODEL_CALLS = [0]  # MiniLM forward passes in torch so far (``count_model_calls``); an ONNX variant's are not counted


def count_model_calls() -> None:
    """Count every torch MiniLM forward pass (``MiniLMRankerModel.embed``: a cross-encoder's batch or a bi-encoder's
    batch of texts), so each ranker's row says how many model calls a request makes (a GPU's cost follows them)."""
    from ranking.neural.minilm import MiniLMRankerModel
    embed = MiniLMRankerModel.embed

    def counted(self, *args, **kwargs):
        MODEL_CALLS[0] += 1
        return embed(self, *args, **kwargs)
    MiniLMRankerModel.embed = counted


def latencies(rankers: list, queries: list[Query], size: int, repeats: int) -> list[dict]:
    """p50/p95 ms, pairs/s and torch MiniLM forward passes per request of each ranker on one request of ``size``
    candidates at a time. The rankers take turns on the same request, so a noisy moment of the machine costs them
    all alike."""
    qs = [Query(q.id, q.text, q.candidates[:size], q.meta) for q in queries]
    for r in rankers:
        r.score(qs[:1])  # warm-up: loads models
    lat = [[] for _ in rankers]
    calls = [0] * len(rankers)
    for i in range(repeats):
        q = qs[i % len(qs)]
        for j, r in enumerate(rankers):
            before = MODEL_CALLS[0]
            t0 = time.perf_counter()
            r.score([q])
            lat[j].append(time.perf_counter() - t0)
            calls[j] += MODEL_CALLS[0] - before
    out = []
    for a, n in zip(lat, calls):
        ms = np.asarray(a) * 1000
        out.append({"p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
                    "pairs_per_s": round(size / float(np.median(a)), 1), "model_calls_per_request": round(n / repeats, 2)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rankers", default="bm25,bilstm,bi-encoder,cross-encoder,cross-encoder[onnx-int8],"
                                         "cross-encoder[torch-ao-int8],service",
                    help="presets, with variants as NAME[VARIANT] (onnx-int8, onnx-fp32, torch-fp32, torch-bf16) or "
                         "NAME[lenN]; MODEL[torch-ao-int8]: torch's deprecated dynamic int8, for comparison; "
                         "service: the /rerank reranker, a first view as served; service[no-memos]: without memos")
    ap.add_argument("--sizes", default="10,30,100")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--batch-sizes", default="",
                    help="also run each MiniLM ranker with these inputs per model call (e.g. 32,8); "
                         "default: as the service runs it")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    count_model_calls()
    settings = Settings(device=args.device)
    xml, _ = BENCHMARKS["semeval2016-test-C"].paths(settings.semeval_dir)
    queries = queries_for(xml, "C")
    import torch
    out = {"device": args.device, "machine": platform.machine(), "torch_threads": torch.get_num_threads(),
           "default_ranker": settings.default_ranker, "inference": settings.inference, "cpu_flags": cpu_flags(),
           "rankers": {}}
    rankers = []
    for name in args.rankers.split(","):
        if name.endswith("[torch-ao-int8]"):
            ranker = torch_ao_int8(name, settings)
        elif name == "service":  # the served memos, in memory only, emptied before each request
            ranker = FirstView(service_reranker(settings.model_copy(update={"score_store_pairs": 0,
                                                                            "vector_store_texts": 0})))
        elif name == "service[no-memos]":
            ranker = service_reranker(settings.model_copy(update={"score_memo_pairs": 0, "vector_memo_texts": 0}))
        else:
            ranker = for_serving(build_label(name, settings))
        label = getattr(ranker, "name", name) + ("[no-memos]" if name == "service[no-memos]" else "")
        rankers.append((label, ranker))
        for b in filter(None, args.batch_sizes.split(",")):
            if hasattr(ranker, "batch_size") and hasattr(ranker, "inference"):
                rankers.append((f"{ranker.name}@batch{b}", copy.copy(ranker)))
                rankers[-1][1].batch_size = int(b)
    for n in (int(x) for x in args.sizes.split(",")):
        for (label, _), row in zip(rankers, latencies([r for _, r in rankers], queries, n, args.repeats)):
            out["rankers"].setdefault(label, {})[n] = row
            print(json.dumps({label: {n: row}}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
