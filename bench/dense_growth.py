"""The dense index grown build after build ($CQA_DENSE_GROW, round 17) against one built anew on the same documents:
recall@10 against exact search, search latency and build time, side by side in one run.

Vectors: every document vector of the full 2016 corpus's live generation (DATA/benchmarks/fullcorpus-2016, built if
missing; its encoder, real text). Queries: the 2016 dev and test original questions, encoded as POST /search encodes
a question (the generation's DenseSource); nothing is tuned on them. The index starts as an HNSW index built on the
first --start fraction of the documents; then --steps builds each add the next documents and remove random held ones
(what new and deleted threads do to a forum between refreshes), through ``DenseIndex.grown``, the code a rebuild
runs: once keeping the added vectors beside the FAISS index until $CQA_DENSE_GROW_FOLD_DOCS (the default), once
adding them to it at every step. At the end both grown indexes and an index built anew on the same final documents
are each searched as /search searches them (``search_vectors``, top 10) and compared with exact (flat) search. Prints
a JSON object last.

    python bench/dense_growth.py --data-dir /tmp/cqa-full
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from indexing.dense import DenseIndex  # noqa: E402
from indexing.searcher import load_current  # noqa: E402
from load import built_corpus  # noqa: E402


def searched(index: DenseIndex, queries: np.ndarray, ids: list[str]) -> tuple[list[set[str]], list[float]]:
    tops, seconds = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = index.search_vectors(q, 10, ids)
        seconds.append(time.perf_counter() - t0)
        tops.append({h.doc_id for h in hits})
    return tops, seconds


def latency(seconds: list[float]) -> dict:
    a = 1000 * np.asarray(seconds)
    return {"p50_ms": round(float(np.percentile(a, 50)), 3), "p95_ms": round(float(np.percentile(a, 95)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--start", type=float, default=0.8, help="fraction of the documents the first build holds")
    ap.add_argument("--steps", type=int, default=20, help="growth steps (rebuilds) after the first build")
    ap.add_argument("--remove", type=float, default=0.004,
                    help="fraction of the held documents each step removes (20 steps of 0.004: about 8%% of the "
                    "rows marked removed, under $CQA_DENSE_GROW_MAX_REMOVED)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--fold-at", type=int, default=None, help="$CQA_DENSE_GROW_FOLD_DOCS of the grown side (default: "
                    "the setting's default); the other grown side folds at every step (0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index-of", type=Path, help="take the vectors from this data folder's live generation instead "
                    "of the corpus's (the tests' small run)")
    args = ap.parse_args()

    from app.settings import Settings
    from ranking.search_benchmark import qrels_for
    settings = Settings(data_dir=args.data_dir)
    if args.fold_at is None:
        args.fold_at = Settings.model_fields["dense_grow_fold_docs"].default
    g = load_current((Settings(data_dir=args.index_of) if args.index_of else built_corpus(args.data_dir)).index_root,
                     "cpu")
    n = g.dense.index.index.ntotal
    vectors = g.dense.index.index.reconstruct_n(0, n)
    asked = [q for split in ("dev", "test") for q in qrels_for(settings, split, "questions")[1].values()]
    texts = [f"{s} {b}" for s, b in asked[:args.queries]]
    queries = np.stack([g.dense.embed(t) for t in texts])

    def grow(fold_at: int) -> tuple[DenseIndex, list[int], dict]:
        """The first build and the growth steps, the same documents for each ``fold_at`` (the same seed)."""
        rng = np.random.default_rng(args.seed)
        held = list(range(int(n * args.start)))  # corpus rows, in document order
        nxt = len(held)
        per_step = (n - nxt) // args.steps
        t0 = time.perf_counter()
        index = DenseIndex.build(vectors[held], kind="hnsw", model=g.dense.encoder.id)
        first_s = time.perf_counter() - t0
        grow_s = []
        for step in range(args.steps):
            gone = set(rng.choice(len(held), int(len(held) * args.remove), replace=False).tolist())
            new_docs = [r for i, r in enumerate(held) if i not in gone]
            added = list(range(nxt, nxt + per_step if step < args.steps - 1 else n))
            nxt += len(added)
            position = {r: i for i, r in enumerate(new_docs)}  # corpus row -> new document row
            now_row = np.asarray([position.get(r, -1) for r in held], dtype=np.int64)  # old document row -> new
            t0 = time.perf_counter()
            index = DenseIndex.grown(index, now_row, np.arange(len(new_docs), len(new_docs) + len(added)),
                                     vectors[added], fold_at)
            grow_s.append(time.perf_counter() - t0)
            held = new_docs + added
        return index, held, {"rows": index.index.ntotal, "delta": len(index.delta), "removed_rows": index.removed,
                             "first_build_s": round(first_s, 3), "step_s_median": round(float(np.median(grow_s)), 4),
                             "steps_total_s": round(sum(grow_s), 3)}

    grown, held, grown_out = grow(args.fold_at)
    folded, held_too, folded_out = grow(0)
    assert held == held_too
    ids = [f"d{r}" for r in held]
    t0 = time.perf_counter()
    fresh = DenseIndex.build(vectors[held], kind="hnsw", model=g.dense.encoder.id)
    fresh_s = time.perf_counter() - t0
    exact = DenseIndex.build(vectors[held], kind="flat", model=g.dense.encoder.id)

    want, exact_s = searched(exact, queries, ids)
    out = {"bench": "dense_growth", "machine": platform.processor() or platform.machine(), "documents": len(held),
           "corpus_rows": n, "steps": args.steps, "queries": len(queries), "fold_at": args.fold_at,
           "grown": grown_out, "grown_folded": folded_out,
           "built_anew": {"build_s": round(fresh_s, 3)}, "exact": latency(exact_s)}
    for name, idx in (("grown", grown), ("grown_folded", folded), ("built_anew", fresh)):
        tops, secs = searched(idx, queries, ids)
        assert all(len(t) == 10 for t in tops), f"{name}: a search returned fewer than 10"
        out[name].update({"recall_at_10": round(float(np.mean([len(a & b) / 10 for a, b in zip(tops, want)])), 4),
                          **latency(secs)})
    for name in ("grown", "grown_folded"):
        out[f"{name}_recall_ratio"] = round(out[name]["recall_at_10"] / out["built_anew"]["recall_at_10"], 4)
        out[f"{name}_p50_ratio"] = round(out[name]["p50_ms"] / out["built_anew"]["p50_ms"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
