"""bf16 padding: does a MiniLM model's score depend on what it is scored beside? Each model of the ``/rerank``
cascade (the cross-encoder and the bi-encoder) runs torch-bf16 twice, side by side in one run: padded as before
round 23 (each batch to its longest input, the reference) and as it runs now (each input to the next multiple of
``ranking.neural.ranker.BF16_PAD_MULTIPLE``). Both go through ``MiniLMRanker.score_pairs``, the code the service
scores new pairs with. On the first ``--threads`` threads of a SemEval file, each pair is scored three ways:

- with its own thread (one ``POST /rerank`` request);
- alone;
- with every other thread's pairs in one call (requests the micro-batcher merges).

It reports the largest score difference between those, how many threads would come back in another order, and
the time per thread (the models take turns on each thread, ``--rounds`` times). And, for the cross-encoder, what
moves a score (``cause``): on the first ``--cause-pairs`` pairs, the width a pair is padded to, or the other rows of
its batch at one width. Without bf16 instructions the
variant runs fp32 (said in ``inference``). Prints a JSON object last.

    python bench/bf16_padding.py --benchmark semeval2016-dev-A --threads 60 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.neural.inference import cpu_flags, has_bf16  # noqa: E402
from ranking.neural.ranker import MiniLMRanker  # noqa: E402
from ranking.settings import RankingSettings  # noqa: E402


def order_changes(a: list[list[float]], b: list[list[float]]) -> int:
    """Threads whose candidates come back in another order under scores ``b`` than under ``a``."""
    return sum(list(np.argsort(-np.asarray(x), kind="stable")) != list(np.argsort(-np.asarray(y), kind="stable"))
               for x, y in zip(a, b))


def largest(a: list[list[float]], b: list[list[float]]) -> float:
    return round(max((abs(x - y) for s, t in zip(a, b) for x, y in zip(s, t)), default=0.0), 6)


def split(flat: list[float], threads: list[list]) -> list[list[float]]:
    out, at = [], 0
    for t in threads:
        out.append(flat[at: at + len(t)])
        at += len(t)
    return out


def cause(ranker: MiniLMRanker, pairs: list[tuple[str, str]]) -> dict:
    """What moves a cross-encoder's score, each pair scored through the model with ``collate`` as ``score_pairs``
    does: the width it is padded to (alone at its own length against alone at the model's longest input), or the other
    rows of its batch (alone against in batches of 8, all at that longest width)."""
    import torch

    from ranking.neural.minilm import collate, pair_ids, word_pieces
    cfg = ranker.model.config
    seqs = [pair_ids(q, a, cfg) for q, a in zip(word_pieces([q for q, _ in pairs]), word_pieces([a for _, a in pairs]))]

    def run(idx, width=None):
        with torch.no_grad(), ranker._autocast():
            return ranker.model.pair_score(*collate([seqs[i][0] for i in idx], "cpu", [seqs[i][1] for i in idx],
                                                    width=width)).float().tolist()
    own = [run([i])[0] for i in range(len(seqs))]
    widest = [run([i], cfg.max_length)[0] for i in range(len(seqs))]
    batched = [v for s in range(0, len(seqs), 8) for v in run(list(range(s, min(s + 8, len(seqs)))), cfg.max_length)]
    return {"pairs": len(seqs), "width_moves_score_by": round(max(abs(x - y) for x, y in zip(own, widest)), 6),
            "batch_rows_move_score_by": round(max(abs(x - y) for x, y in zip(widest, batched)), 6)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="semeval2016-dev-A", help="a subtask A benchmark (its threads' pairs)")
    ap.add_argument("--threads", type=int, default=60, help="how many of its threads (default 60)")
    ap.add_argument("--rounds", type=int, default=2, help="timed passes over the threads (default 2)")
    ap.add_argument("--models", default="cross-encoder,bi-encoder", help="the cascade's MiniLM models to run")
    ap.add_argument("--cause-pairs", type=int, default=40, help="pairs the cross-encoder's cause probe scores (40)")
    args = ap.parse_args(argv)
    bench = BENCHMARKS[args.benchmark]
    if bench.subtask != "A":
        ap.error(f"{args.benchmark} is subtask {bench.subtask}; this bench reads subtask A threads")
    settings = RankingSettings()
    xml, _ = bench.paths(settings.semeval_dir)
    queries = queries_for(xml, bench.subtask, bench.variant)[: args.threads]
    threads = [[(q.text, c.text) for c in q.candidates] for q in queries if q.candidates]
    flat = [p for t in threads for p in t]
    out: dict = {"benchmark": args.benchmark, "threads": len(threads), "pairs": len(flat),
                 "machine": f"{platform.machine()}, bf16 instructions: {has_bf16(cpu_flags())}", "models": {}}
    for name in args.models.split(","):
        folder = getattr(settings, name.replace("-", "_") + "_checkpoint")
        now = MiniLMRanker.from_checkpoint(folder, "cpu", inference="torch-bf16")
        before = MiniLMRanker.from_checkpoint(folder, "cpu", inference="torch-bf16")
        before.pad_multiple = 0  # the reference: each batch padded to its longest input
        variants = {"batch_padding": before, f"padded_to_{now.pad_multiple}": now}
        for r in variants.values():
            r.score_pairs(threads[0])  # warm-up
        times: dict[str, list[float]] = {k: [] for k in variants}
        per_thread: dict[str, list[list[float]]] = {}
        for _ in range(args.rounds):
            per_thread = {k: [] for k in variants}  # the last round's scores
            for t in threads:
                for k, r in variants.items():  # in turn on each thread
                    t0 = time.perf_counter()
                    per_thread[k].append(r.score_pairs(t))
                    times[k].append(time.perf_counter() - t0)
        res = {"inference": now.inference.label, "note": now.note, "pad_multiple_now": now.pad_multiple}
        if now.model.config.kind == "cross-encoder":
            res["cause"] = cause(now, flat[: args.cause_pairs])
        for k, r in variants.items():
            alone = split([r.score_pairs([p])[0] for p in flat], threads)
            merged = split(r.score_pairs(flat), threads)
            own = per_thread[k]
            res[k] = {"p50_ms_per_thread": round(float(np.percentile(times[k], 50)) * 1000, 1),
                      "mean_ms_per_thread": round(float(np.mean(times[k])) * 1000, 1),
                      "largest_difference_alone_vs_thread": largest(alone, own),
                      "largest_difference_merged_vs_thread": largest(merged, own),
                      "threads_reordered_alone_vs_thread": order_changes(own, alone),
                      "threads_reordered_merged_vs_thread": order_changes(own, merged)}
        k_now = f"padded_to_{now.pad_multiple}"
        res["p50_ratio_before_over_now"] = round(res["batch_padding"]["p50_ms_per_thread"]
                                                 / res[k_now]["p50_ms_per_thread"], 3)
        out["models"][name] = res
        print(json.dumps({name: res}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
