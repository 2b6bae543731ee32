"""The thread store as it grows: what `cqa ingest` and POST /threads pay per write, and what a reindex pays to read
it, on a store 1 to N times the size of the 2016 corpus, side by side with the store as it was before its index on
the insertion order (`threads_seq`, round 16), in one run.

Each variant starts from a copy of the full corpus's store (DATA/benchmarks/fullcorpus-2016, built if missing; the
reference with the index dropped) and grows by whole copies of the corpus under new ids, each copy one
`ThreadStore.upsert` (one transaction, as `cqa ingest` writes a file's batch). After each copy: one more new thread
upserted alone, as a POST /threads of one thread writes it. At the end: `iter_threads` over the whole store (what a
reindex reads) and `fingerprint` (what the refresh compares). Prints a JSON object last.

    python bench/store_scale.py --data-dir /tmp/cqa-full --copies 10
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from indexing.store import ThreadStore  # noqa: E402
from load import built_corpus, renamed  # noqa: E402


def grow(path: Path, copies: int, with_index: bool) -> dict:
    with ThreadStore(path) as store:
        if not with_index:
            store._conn.execute("DROP INDEX IF EXISTS threads_seq")  # the store before round 16
        originals = list(store.iter_threads())
        steps = []
        for k in range(1, copies):
            t0 = time.perf_counter()
            store.upsert(renamed(t, str(k)) for t in originals)
            batch_s = time.perf_counter() - t0
            one = originals[k % len(originals)]
            t0 = time.perf_counter()
            store.upsert([renamed(one, f"single{k}")])
            steps.append({"threads_before": len(originals) * k, "batch_s": round(batch_s, 4),
                          "batch_threads_per_s": round(len(originals) / batch_s, 1),
                          "one_thread_ms": round(1000 * (time.perf_counter() - t0), 3)})
            print(json.dumps({"index": with_index, **steps[-1]}), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        n = sum(1 for _ in store.iter_threads())
        read_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.fingerprint()
        fingerprint_ms = 1000 * (time.perf_counter() - t0)
        return {"threads": n, "steps": steps, "grow_s": round(sum(s["batch_s"] for s in steps), 4),
                "read_all_s": round(read_s, 4), "fingerprint_ms": round(fingerprint_ms, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--store", type=Path, default=None, help="a threads.sqlite3 to start from instead of the corpus's")
    ap.add_argument("--copies", type=int, default=10, help="grow to this many times the starting store")
    args = ap.parse_args()
    source = args.store or built_corpus(args.data_dir).store_path
    out = {"bench": "store_scale", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
           "copies": args.copies}
    with tempfile.TemporaryDirectory(prefix="cqa-store-") as tmp:
        for label, with_index in (("indexed", True), ("reference_no_seq_index", False)):
            path = Path(tmp) / f"{label}.sqlite3"
            shutil.copy(source, path)
            out[label] = grow(path, args.copies, with_index)
    new, old = out["indexed"], out["reference_no_seq_index"]
    out["ratios"] = {
        "grow": round(old["grow_s"] / new["grow_s"], 2),
        "last_batch": round(old["steps"][-1]["batch_s"] / new["steps"][-1]["batch_s"], 2) if new["steps"] else None,
        "last_one_thread": (round(old["steps"][-1]["one_thread_ms"] / new["steps"][-1]["one_thread_ms"], 2)
                            if new["steps"] else None),
        "read_all": round(old["read_all_s"] / new["read_all_s"], 2),
        "fingerprint": round(old["fingerprint_ms"] / new["fingerprint_ms"], 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
