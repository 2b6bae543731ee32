"""Reindex throughput per stage: the local engine against the Ray engine with 1 and 2 workers, side by side in
one run, on the same threads, each run from an empty embedding cache (every text encoded, and every comment again
by the answer encoder, $CQA_ANSWER_ENCODER, on the engine's workers).

Each run is a real `reindex` (the code `cqa reindex` runs) into its own data folder. The Ray runs share one
local cluster, started once (its start-up time is reported apart). Also reports the on-disk bytes per document
of each index, which docs/scale-out.md scales to 10M and 100M comments. Prints a JSON object last.

    python bench/reindex_scale.py                      # 2016 dev corpus, first 200 threads
    python bench/reindex_scale.py --max-threads 0      # the whole dev corpus (about 5,500 texts)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexing.catalog import split_file  # noqa: E402
from indexing.config import IndexSettings  # noqa: E402
from indexing.generations import current_generation  # noqa: E402
from indexing.loaders import load  # noqa: E402
from indexing.reindex import ray_engine, reindex  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402

STAGES = ("documents", "analyse", "terms", "bm25", "lm", "translation", "dense", "answer_vectors")


def _store(folder: Path, threads) -> IndexSettings:
    s = IndexSettings(data_dir=folder)
    with ThreadStore(s.store_path) as store:
        store.upsert(threads)
    return s


def _sizes(gen: Path, n_docs: int) -> dict:
    out = {}
    for part in ("documents.bin", "terms", "bm25", "lm", "translation_qa", "dense", "answer_vectors"):
        files = [gen / part] if (gen / part).is_file() else [p for p in (gen / part).rglob("*") if p.is_file()]
        b = sum(p.stat().st_size for p in files)
        out[part] = {"bytes": b, "bytes_per_doc": round(b / n_docs, 1)}
    return out


def _run(label: str, settings: IndexSettings, engine=None) -> dict:
    t0 = time.perf_counter()
    summary = reindex(settings, progress=False, engine=engine)
    wall = time.perf_counter() - t0
    gen = settings.index_root / current_generation(settings.index_root)
    n = summary["documents"]["total"]
    row = {"engine": label, "documents": n, "wall_s": round(wall, 2), "docs_per_s": round(n / wall, 1),
           "stages": {k: summary["indexes"][k] for k in STAGES if k in summary["indexes"]},
           "index_sizes": _sizes(gen, n)}
    print(json.dumps({label: {"wall_s": row["wall_s"], "docs_per_s": row["docs_per_s"],
                              **{k: v["docs_per_s"] for k, v in row["stages"].items()}}}), file=sys.stderr, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-threads", type=int, default=200, help="threads of the dev file to index (0: all)")
    ap.add_argument("--workers", default="1,2", help="Ray worker counts to run")
    ap.add_argument("--cpus-per-worker", type=float, default=0.5)
    ap.add_argument("--keep", action="store_true", help="keep the data folders (printed) for inspection")
    args = ap.parse_args()
    base = IndexSettings()
    threads = load(base.semeval_dir / split_file("dev")).threads
    if args.max_threads:
        threads = threads[: args.max_threads]
    work = Path(tempfile.mkdtemp(prefix="cqa-reindex-scale-"))
    import torch
    out = {"bench": "reindex_scale", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "machine": platform.machine(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
           "threads": len(threads), "runs": []}
    try:
        out["runs"].append(_run("local", _store(work / "local", threads)))
        from indexing.engines import RayOptions
        import ray
        t0 = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        out["ray_cluster_start_s"] = round(time.perf_counter() - t0, 2)
        out["ray_version"] = ray.__version__
        try:
            for w in (int(x) for x in args.workers.split(",")):
                engine = ray_engine(base, RayOptions(workers=w, cpus_per_worker=args.cpus_per_worker))
                out["runs"].append(_run(f"ray-{w}", _store(work / f"ray-{w}", threads), engine))
        finally:
            ray.shutdown()
        local = out["runs"][0]
        for r in out["runs"]:
            r["embed_speedup_vs_local"] = round(r["stages"]["dense"]["docs_per_s"]
                                                / local["stages"]["dense"]["docs_per_s"], 2)
            if "answer_vectors" in local["stages"]:
                r["answer_vectors_speedup_vs_local"] = round(r["stages"]["answer_vectors"]["docs_per_s"]
                                                             / local["stages"]["answer_vectors"]["docs_per_s"], 2)
            r["wall_speedup_vs_local"] = round(local["wall_s"] / r["wall_s"], 2)
    finally:
        if args.keep:
            print(f"data folders kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
