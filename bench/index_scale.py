"""How index cost grows: build docs/s, bytes per document and query p50/p95 for BM25, LM and FAISS
at several synthetic corpus sizes. The dense part uses random unit vectors (the encoder's own
throughput is measured by bench/encoder_speed.py on real SemEval text). Prints a JSON object last.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import zipf_corpus, zipf_queries  # noqa: E402

from indexing.bm25 import BM25Index  # noqa: E402
from indexing.dense import DenseIndex, choose_kind  # noqa: E402
from indexing.lm import LMIndex  # noqa: E402
from indexing.termmatrix import TermMatrix  # noqa: E402


def folder_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def pct(xs: list[float]) -> dict:
    a = np.asarray(xs) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3)}


def measure(n: int, n_queries: int, tmp: Path) -> dict:
    corpus = zipf_corpus(n, seed=n)
    queries = zipf_queries(n_queries, seed=n + 1)
    ids = [str(i) for i in range(n)]
    out: dict = {"docs": n}
    t0 = time.perf_counter()
    terms = TermMatrix.build(corpus)
    t_terms = time.perf_counter() - t0
    del corpus
    terms.save(tmp / "terms")
    t0 = time.perf_counter()
    bm = BM25Index.build(terms)
    t_bm = time.perf_counter() - t0 + t_terms
    bm.save(tmp / "bm25")
    lm = LMIndex(terms)
    lm.save(tmp / "lm")
    terms_bytes = folder_bytes(tmp / "terms")
    for name, idx, build_s, extra in (("bm25", bm, t_bm, folder_bytes(tmp / "bm25")),
                                      ("lm", lm, t_terms, folder_bytes(tmp / "lm"))):
        lat = []
        for q in queries:
            t0 = time.perf_counter()
            idx.search_tokens(q, 10, ids)
            lat.append(time.perf_counter() - t0)
        out[name] = {"build_docs_per_s": round(n / build_s), "bytes_per_doc": round((terms_bytes + extra) / n, 1),
                     **pct(lat)}
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((n, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    kind = choose_kind(n)
    t0 = time.perf_counter()
    dense = DenseIndex.build(vecs, kind=kind)
    t_dense = time.perf_counter() - t0
    dense.save(tmp / "dense")
    qv = rng.standard_normal((n_queries, 384)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    lat = []
    for q in qv:
        t0 = time.perf_counter()
        dense.search_vectors(q, 10, ids)
        lat.append(time.perf_counter() - t0)
    out["dense"] = {"index": kind, "build_docs_per_s": round(n / t_dense),
                    "bytes_per_doc": round(folder_bytes(tmp / "dense") / n, 1), **pct(lat)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    results = []
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as d:
            r = measure(n, args.queries, Path(d))
        print(json.dumps(r), file=sys.stderr, flush=True)
        results.append(r)
    print(json.dumps({"sizes": results, "machine": platform.machine(), "python": platform.python_version()}))


if __name__ == "__main__":
    main()
