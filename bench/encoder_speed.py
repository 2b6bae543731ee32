"""Encoder throughput (documents/s) of all-MiniLM-L6-v2 on real SemEval comments, CPU or CUDA.
Prints a JSON object last."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.encoder import encode, load_encoder, resolve_device  # noqa: E402
from indexing.loaders import load  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    s = Settings()
    texts = [a.text for t in load(s.semeval_dir / "test/SemEval2016-Task3-CQA-QL-test.xml").threads
             for a in t.answers][: args.docs]
    load_encoder(args.device)
    encode(texts[:64], device=args.device)  # warm-up
    t0 = time.perf_counter()
    encode(texts, batch_size=args.batch_size, device=args.device)
    dt = time.perf_counter() - t0
    import torch
    print(json.dumps({"device": resolve_device(args.device), "docs": len(texts), "batch_size": args.batch_size,
                      "docs_per_s": round(len(texts) / dt, 1), "seconds": round(dt, 2),
                      "torch_threads": torch.get_num_threads(), "machine": platform.machine()}))


if __name__ == "__main__":
    main()
