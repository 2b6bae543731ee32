"""What the serving score memos (ranking/neural/memo.py, CQA_SCORE_MEMO_PAIRS) cost: memory per remembered pair and
the time to find a request's pairs, against a plain dict of the same pairs as the reference. With --store-pairs, the
shared score store behind them too (CQA_SCORE_STORE_PAIRS): bytes per pair on disk, the time its writer takes per
pair, and the time to find a request's pairs there (what a worker pays for pairs its own memory lacks). No model
runs: the scores are made up, since only the memo's own cost is measured. With --vector-texts, the encoders' vector
memos too (CQA_VECTOR_MEMO_TEXTS): memory per remembered text, filled as serving fills them (batches of 384-float
vectors, each kept row copied out of its batch), against the vectors' own bytes. Prints a JSON object last.

    python bench/score_memo.py --pairs 100000 --lookup 30 --store-pairs 1000000 --vector-texts 10000
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranking.neural.memo import ScoreMemo, ScoreStore, pair_key  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100_000, help="pairs to remember (the default capacity)")
    ap.add_argument("--lookup", type=int, default=30, help="pairs per request to find (a 30-comment thread)")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--store-pairs", type=int, default=0, help="pairs to write to a score store in a temporary "
                    "folder and look up there (0: the memory memo only)")
    ap.add_argument("--vector-texts", type=int, default=0, help="texts whose vectors to remember in an encoder's "
                    "vector memo (0: none)")
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
        out["store"] = store_cost(args)
    if args.vector_texts:
        out["vectors"] = vector_cost(args.vector_texts)
    print(json.dumps(out))


def vector_cost(texts: int, dim: int = 384, batch: int = 100) -> dict:
    """Bytes per text of a full vector memo, filled in batches of ``batch`` texts as a serving encoder fills it, and
    what it still holds once every text has been replaced by a new one (nothing of the old batches may remain)."""
    import numpy as np

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


def store_cost(args) -> dict:
    """Write ``--store-pairs`` pairs through a ScoreStore in batches of a 30-comment thread, then look up
    ``--lookup`` of them at a time from a second store on the file (another worker), against the memory memo."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "score-store.sqlite3"
        store = ScoreStore(path, args.store_pairs)
        keys = [pair_key(f"question {i // 30}", f"comment {i}", "model") for i in range(args.store_pairs)]
        t0 = time.perf_counter()
        for s in range(0, len(keys), 30):
            store.put({k: float(i) for i, k in enumerate(keys[s: s + 30], s)})
        store.flush()
        write_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
        reader = ScoreStore(path, args.store_pairs)
        lat = []
        step = max(1, len(keys) // args.repeats)
        for r in range(args.repeats):
            at = (r * step) % max(1, len(keys) - args.lookup)
            want = keys[at: at + args.lookup]
            t0 = time.perf_counter()
            found = reader.get(want)
            lat.append(time.perf_counter() - t0)
            assert len(found) == len(want)
        lat.sort()
        return {"pairs": args.store_pairs, "bytes_per_pair_on_disk": round(size / args.store_pairs, 1),
                "write_us_per_pair": round(write_s / args.store_pairs * 1e6, 2), "written": store.stats()["written"],
                "lookup_pairs": args.lookup, "lookup_p50_ms": round(lat[len(lat) // 2] * 1000, 4),
                "lookup_p95_ms": round(lat[int(len(lat) * 0.95)] * 1000, 4)}


if __name__ == "__main__":
    main()
