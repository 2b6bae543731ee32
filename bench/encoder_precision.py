"""all-MiniLM-L6-v2 on the CPU at each precision torch offers here, side by side in one run: fp32 (the reference,
what reindex and the service use), bf16 autocast, bf16 weights, and torch's dynamic int8. For each: documents/s
over real 2016 test comments, and the cosine of its embeddings with fp32's (min and mean), with the CPU
features that decide whether bf16 and int8 have hardware behind them. Prints a JSON object last.

    python bench/encoder_precision.py [--docs 256] [--repeats 3]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.catalog import split_file  # noqa: E402
from indexing.encoder import load_reference  # noqa: E402
from indexing.loaders import load  # noqa: E402
from ranking.neural.inference import cpu_flags  # noqa: E402  (what `auto` reads too)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per precision (median)")
    args = ap.parse_args()
    import torch
    warnings.filterwarnings("ignore")
    s = Settings()
    texts = [a.text for t in load(s.semeval_dir / split_file("test")).threads for a in t.answers][: args.docs]
    base = load_reference("cpu")

    def run(model, ctx=contextlib.nullcontext):
        times = []
        for _ in range(args.repeats):
            with ctx():
                t0 = time.perf_counter()
                e = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
                times.append(time.perf_counter() - t0)
        return float(np.median(times)), np.asarray(e, dtype=np.float32)

    variants = {
        "fp32": lambda: run(base),
        "bf16-autocast": lambda: run(base, lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
        "bf16-weights": lambda: run(copy.deepcopy(base).to(torch.bfloat16)),
        "int8-dynamic (torch.ao, deprecated)": lambda: run(torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(base), {torch.nn.Linear}, dtype=torch.qint8)),
    }
    run(base)  # warm-up
    out = {"bench": "encoder_precision", "machine": platform.machine(), "processor": platform.processor(),
           "cpu_flags": cpu_flags(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "docs": len(texts), "batch_size": 64, "variants": {}}
    ref = None
    for name, fn in variants.items():
        secs, emb = fn()
        ref = emb if ref is None else ref
        cos = (emb * ref).sum(1)
        out["variants"][name] = {"docs_per_s": round(len(texts) / secs, 1),
                                 "cos_min": round(float(cos.min()), 5), "cos_mean": round(float(cos.mean()), 5)}
        print(json.dumps({name: out["variants"][name]}), file=sys.stderr, flush=True)
    fp32 = out["variants"]["fp32"]["docs_per_s"]
    for v in out["variants"].values():
        v["vs_fp32"] = round(v["docs_per_s"] / fp32, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
