"""What the serving score memos (ranking/neural/memo.py, CQA_SCORE_MEMO_PAIRS) cost: memory per remembered pair and
the time to find a request's pairs, against a plain dict of the same pairs as the reference. With --store-pairs, the
shared score store behind them too (CQA_SCORE_STORE_PAIRS): bytes per pair on disk, the time its writer takes per
pair, and the time to find a request's pairs there (what a worker pays for pairs its own memory lacks). No model
runs: the scores are made up, since only the memo's own cost is measured. With --vector-texts, the encoders' vector
memos too (CQA_VECTOR_MEMO_TEXTS): memory per remembered text, filled as serving fills them (batches of 384-float
vectors, each kept row copied out of its batch), against the vectors' own bytes. With --vector-store-texts, the
vector store behind them (CQA_VECTOR_STORE_TEXTS), measured as the score store is, 100 texts (a C request's
comments) per lookup. Prints a JSON object last.

    python bench/score_memo.py --pairs 100000 --lookup 30 --store-pairs 1000000 --vector-texts 10000 \
        --vector-store-texts 100000
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranking.neural.memo import ScoreMemo, ScoreStore, VectorStore, pair_key  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100_000, help="pairs to remember (the default capacity)")
    ap.add_argument("--lookup", type=int, default=30, help="pairs per request to find (a 30-comment thread)")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--store-pairs", type=int, default=0, help="pairs to write to a score store in a temporary "
                    "folder and look up there (0: the memory memo only)")
    ap.add_argument("--vector-texts", type=int, default=0, help="texts whose vectors to remember in an encoder's "
                    "vector memo (0: none)")
    ap.add_argument("--vector-store-texts", type=int, default=0, help="text vectors to write to a vector store in a "
                    "temporary folder and look up there, 100 at a time (0: none)")
    args = ap.parse_args()
    pairs = [(f"question {i // 10} " * 8, f"comment {i} " * 20) for i in range(args.pairs)]
    memo = ScoreMemo(args.pairs)
    tracemalloc.start()
    memo.scores(pairs, lambda todo: [float(i) for i in range(len(todo))])
    memo_bytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    request = pairs[-args.lookup:]
    reference = {p: 0.0 for p in pairs}
    lat, ref = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        memo.scores(request, lambda todo: [0.0] * len(todo))
        lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        [reference[p] for p in request]
        ref.append(time.perf_counter() - t0)
    lat.sort(), ref.sort()
    p50, ref50 = lat[len(lat) // 2] * 1000, ref[len(ref) // 2] * 1000
    out = {"bench": "score_memo", "pairs": args.pairs, "bytes_per_pair": round(memo_bytes / args.pairs, 1),
           "lookup_pairs": args.lookup, "lookup_p50_ms": round(p50, 4), "dict_lookup_p50_ms": round(ref50, 4),
           "ratio_to_dict": round(p50 / ref50, 1), "misses": memo.stats()["misses"]}
    if args.store_pairs:
        out["store"] = store_cost(ScoreStore, args.store_pairs, args.lookup, args.repeats, float)
    if args.vector_store_texts:  # a C request: 100 comments, 384-float vectors
        rng = np.random.default_rng(0)
        out["vector_store"] = store_cost(VectorStore, args.vector_store_texts, 100, args.repeats,
                                         lambda i: rng.standard_normal(384, dtype=np.float32))
    if args.vector_texts:
        out["vectors"] = vector_cost(args.vector_texts)
    print(json.dumps(out))


def vector_cost(texts: int, dim: int = 384, batch: int = 100) -> dict:
    """Bytes per text of a full vector memo, filled in batches of ``batch`` texts as a serving encoder fills it, and
    what it still holds once every text has been replaced by a new one (nothing of the old batches may remain)."""
    from ranking.neural.memo import memo_vectors
    rng = np.random.default_rng(0)
    memo = ScoreMemo(texts)
    encode = lambda todo: rng.standard_normal((len(todo), dim), dtype=np.float32)  # noqa: E731
    tracemalloc.start()
    for s in range(0, texts, batch):
        memo_vectors(memo, [f"comment {i} " * 20 for i in range(s, min(s + batch, texts))], "encoder", encode)
    full, _ = tracemalloc.get_traced_memory()
    for s in range(texts, 2 * texts, batch):  # a second set of texts replaces the first, one batch at a time
        memo_vectors(memo, [f"comment {i} " * 20 for i in range(s, min(s + batch, 2 * texts))], "encoder", encode)
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"texts": texts, "dim": dim, "bytes_per_text": round(full / texts, 1), "vector_bytes": dim * 4,
            "ratio_to_vector": round(full / texts / (dim * 4), 2), "bytes_per_text_after_replacement":
            round(after / texts, 1), "held": memo.stats()["pairs"]}


def store_cost(kind, entries: int, lookup: int, repeats: int, value) -> dict:
    """Write ``entries`` values (``value(i)``) through a store of ``kind`` (ScoreStore: pair scores, VectorStore:
    text vectors) in batches of a 30-comment thread, then look up ``lookup`` of them at a time from a second store
    on the file (another worker)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite3"
        store = kind(path, entries)
        keys = [pair_key(f"question {i // 30}", f"comment {i}", "model") for i in range(entries)]
        t0 = time.perf_counter()
        for s in range(0, len(keys), 30):
            store.put({k: value(i) for i, k in enumerate(keys[s: s + 30], s)})
        store.flush()
        write_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
        reader = kind(path, entries)
        lat = []
        step = max(1, len(keys) // repeats)
        for r in range(repeats):
            at = (r * step) % max(1, len(keys) - lookup)
            want = keys[at: at + lookup]
            t0 = time.perf_counter()
            found = reader.get(want)
            lat.append(time.perf_counter() - t0)
            assert len(found) == len(want)
        lat.sort()
        return {"entries": entries, "bytes_per_entry_on_disk": round(size / entries, 1),
                "write_us_per_entry": round(write_s / entries * 1e6, 2), "written": store.stats()["written"],
                "lookup": lookup, "lookup_p50_ms": round(lat[len(lat) // 2] * 1000, 4),
                "lookup_p95_ms": round(lat[int(len(lat) * 0.95)] * 1000, 4)}


if __name__ == "__main__":
    main()
