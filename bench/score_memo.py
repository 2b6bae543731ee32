"""What the serving score memos (ranking/neural/memo.py, CQA_SCORE_MEMO_PAIRS) cost: memory per remembered pair and
the time to find a request's pairs, against a plain dict of the same pairs as the reference. No model runs: the
scores are made up, since only the memo's own cost is measured. Prints a JSON object last.

    python bench/score_memo.py --pairs 100000 --lookup 30
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranking.neural.memo import ScoreMemo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=100_000, help="pairs to remember (the default capacity)")
    ap.add_argument("--lookup", type=int, default=30, help="pairs per request to find (a 30-comment thread)")
    ap.add_argument("--repeats", type=int, default=200)
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
    print(json.dumps({"bench": "score_memo", "pairs": args.pairs, "bytes_per_pair": round(memo_bytes / args.pairs, 1),
                      "lookup_pairs": args.lookup, "lookup_p50_ms": round(p50, 4), "dict_lookup_p50_ms": round(ref50, 4),
                      "ratio_to_dict": round(p50 / ref50, 1), "misses": memo.stats()["misses"]}))


if __name__ == "__main__":
    main()
