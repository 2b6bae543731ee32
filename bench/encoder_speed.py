"""Index encoder throughput (documents/s) of all-MiniLM-L6-v2 on real SemEval comments, CPU or CUDA:
the project's encoder (indexing/encoder.py, what reindex and /search run) and sentence-transformers (its
reference) side by side in one run, alternating, with the ratio and the largest difference between their
vectors. Prints a JSON object last.

    python bench/encoder_speed.py [--docs 2000] [--repeats 3]
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

from app.settings import Settings  # noqa: E402
from indexing.catalog import split_file  # noqa: E402
from indexing.encoder import encode, load_encoder, load_reference, resolve_device  # noqa: E402
from indexing.loaders import load  # noqa: E402
from ranking.neural.inference import cpu_flags  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=None, help="default: $CQA_EMBEDDING_BATCH_SIZE")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each (median)")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    s = Settings()
    bs = args.batch_size or s.embedding_batch_size
    texts = [a.text for t in load(s.semeval_dir / split_file("test")).threads for a in t.answers][: args.docs]
    dev = resolve_device(args.device)
    load_encoder(dev)
    ref_model = load_reference(dev)
    runs = {"encoder": lambda: encode(texts, batch_size=bs, device=dev),
            "sentence-transformers": lambda: ref_model.encode(texts, batch_size=bs, normalize_embeddings=True,
                                                              convert_to_numpy=True)}
    for run in runs.values():
        run()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in runs}
    vecs = {}
    for _ in range(args.repeats):
        for k, run in runs.items():
            t0 = time.perf_counter()
            vecs[k] = run()
            times[k].append(time.perf_counter() - t0)
    rate = {k: round(len(texts) / float(np.median(v)), 1) for k, v in times.items()}
    import torch
    print(json.dumps({"bench": "encoder_speed", "device": dev, "docs": len(texts), "batch_size": bs,
                      "docs_per_s": rate, "ratio": round(rate["encoder"] / rate["sentence-transformers"], 2),
                      "max_abs_diff": float(np.abs(vecs["encoder"] - vecs["sentence-transformers"]).max()),
                      "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
                      "cpu_flags": cpu_flags()}))


if __name__ == "__main__":
    main()
