"""Two parts of every build (`cqa reindex`, and so every automatic refresh) against what they replaced, side by side
in one run, on the same documents:

- analysis of every document: the compiled Snowball stemmers (PyStemmer, what snowballstemmer hands out when it is
  installed) against snowballstemmer's pure-Python ones, each from an empty stem cache as a build's child process
  starts; the tokens must be identical;
- the IBM Model 1 translation table (question -> answer pairs, as a build trains it): the stable-sort
  ``unique_inverse`` against ``np.unique``; the tables must be identical, bit for bit;
- reading the store's documents: ``ThreadStore.documents`` (one query in one transaction, round 16) against
  ``Documents.from_threads(iter_threads())`` (thread objects, batch by batch); the documents must be identical.

Rounds alternate the two sides. The documents are a data folder's store (default: the full 2016 corpus `cqa evaluate`
builds under --data-dir), or --store. Prints a JSON object last.

    python bench/build_parts.py --data-dir /tmp/cqa-full --rounds 3
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

import indexing.text as text  # noqa: E402
import indexing.translation as translation  # noqa: E402
from indexing.documents import Documents  # noqa: E402
from indexing.reindex import translation_pairs  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402
from indexing.text import Analyzer  # noqa: E402
from load import built_corpus  # noqa: E402


def analyse(texts: list[str], pure: bool) -> tuple[float, list[list[str]]]:
    """Seconds to analyse ``texts`` with a fresh analyzer and an empty stem cache, and the tokens."""
    analyzer = Analyzer()
    if pure:
        from snowballstemmer.english_stemmer import EnglishStemmer
        analyzer.__dict__["_stem"] = EnglishStemmer()  # what snowballstemmer gives without PyStemmer
    text._STEMS.clear()
    t0 = time.perf_counter()
    tokens = [analyzer(t) for t in texts]
    return time.perf_counter() - t0, tokens


def train(pairs, reference: bool) -> tuple[float, translation.TranslationTable]:
    fast = translation.unique_inverse
    if reference:
        translation.unique_inverse = lambda key: np.unique(key, return_inverse=True)
    try:
        t0 = time.perf_counter()
        table = translation.TranslationTable.train(pairs)
        return time.perf_counter() - t0, table
    finally:
        translation.unique_inverse = fast


def same_table(a: translation.TranslationTable, b: translation.TranslationTable) -> bool:
    return (a.src_vocab == b.src_vocab and a.tgt_vocab == b.tgt_vocab and a.params == b.params
            and all(np.array_equal(getattr(a.table, f), getattr(b.table, f)) for f in ("data", "indices", "indptr")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--store", type=Path, default=None, help="a threads.sqlite3 to read instead of the full corpus")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    store = args.store or built_corpus(args.data_dir).store_path
    with ThreadStore(store) as st:
        docs = Documents.from_threads(st.iter_threads())
    times: dict[str, list[float]] = {"analyse_compiled": [], "analyse_pure_python": [], "translation_stable_sort": [],
                                     "translation_np_unique": [], "read_one_query": [], "read_thread_objects": []}
    same_tokens = same_tables = same_documents = True
    for _ in range(args.rounds):
        with ThreadStore(store) as st:
            t0 = time.perf_counter()
            fast = st.documents()[0]
            times["read_one_query"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            slow = Documents.from_threads(st.iter_threads())
            times["read_thread_objects"].append(time.perf_counter() - t0)
        same_documents &= fast.__dict__ == slow.__dict__ == docs.__dict__
        s_c, tok_c = analyse(docs.texts, pure=False)
        s_p, tok_p = analyse(docs.texts, pure=True)
        same_tokens &= tok_c == tok_p
        times["analyse_compiled"].append(s_c)
        times["analyse_pure_python"].append(s_p)
        pairs = translation_pairs(docs, tok_c)
        s_r, ref = train(pairs, reference=True)
        s_f, fast = train(pairs, reference=False)
        same_tables &= same_table(ref, fast)
        times["translation_np_unique"].append(s_r)
        times["translation_stable_sort"].append(s_f)
    best = {k: round(min(v), 4) for k, v in times.items()}
    print(json.dumps({
        "bench": "build_parts", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
        "documents": len(docs), "pairs": len(pairs), "rounds": args.rounds,
        "seconds": {k: [round(x, 4) for x in v] for k, v in times.items()}, "best_s": best,
        "analyse_ratio": round(best["analyse_pure_python"] / best["analyse_compiled"], 2),
        "translation_ratio": round(best["translation_np_unique"] / best["translation_stable_sort"], 2),
        "read_ratio": round(best["read_thread_objects"] / best["read_one_query"], 2),
        "same_tokens": same_tokens, "same_tables": same_tables, "same_documents": same_documents}))


if __name__ == "__main__":
    main()
