"""BM25 top-10 retrieval: our sparse precomputed index vs rank_bm25's BM25Okapi, side by side.

Same synthetic tokens, same k1 and b, same queries. Prints a JSON object last, with ``ratio``
(rank_bm25 time / ours) and ``parity`` (every top-10 identical, scores within 1e-6 relative).
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import zipf_corpus, zipf_queries  # noqa: E402

from indexing.bm25 import BM25Index  # noqa: E402
from indexing.termmatrix import TermMatrix  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    from rank_bm25 import BM25Okapi

    corpus = zipf_corpus(args.docs)
    queries = zipf_queries(args.queries)
    t0 = time.perf_counter()
    ours = BM25Index.build(TermMatrix.build(corpus), k1=1.5, b=0.75, idf="okapi")
    build_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = BM25Okapi(corpus, k1=1.5, b=0.75)
    build_ref = time.perf_counter() - t0
    ids = [str(i) for i in range(len(corpus))]

    t0 = time.perf_counter()
    ours_top = [[h.doc_id for h in ours.search_tokens(q, args.k, ids)] for q in queries]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref_scores = [ref.get_scores(q) for q in queries]
    ref_top = [[str(i) for i in np.argsort(-s, kind="stable")[: args.k]] for s in ref_scores]
    t_ref = time.perf_counter() - t0

    # A top-10 matches when it is the reference's top-10 up to exact ties: the reference's own scores
    # of our ids equal its best ten scores, position by position (ties differ only by float rounding).
    matches = [np.allclose(s[[int(i) for i in mine]], np.sort(s)[::-1][: args.k], rtol=1e-9, atol=1e-12)
               for s, mine in zip(ref_scores, ours_top)]
    scores_close = all(np.allclose(ours.scores(q), s, rtol=1e-6, atol=1e-9)
                       for q, s in zip(queries[:20], ref_scores[:20]))
    parity = all(matches) and scores_close
    result = {
        "docs": args.docs, "queries": args.queries, "k": args.k,
        "ours_query_ms": round(1000 * t_ours / len(queries), 3),
        "rank_bm25_query_ms": round(1000 * t_ref / len(queries), 3),
        "ratio": round(t_ref / t_ours, 1), "parity": bool(parity),
        "top10_identical_order": sum(a == b for a, b in zip(ours_top, ref_top)),
        "ours_build_s": round(build_ours, 2), "rank_bm25_build_s": round(build_ref, 2),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "python": platform.python_version(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
