"""Full reindex vs reindex after adding 1% new threads (the embedding cache makes the second cheap).

Uses a store in --data-dir; the first (full) reindex runs with an empty embedding cache.
Prints a JSON object last.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.loaders import load  # noqa: E402
from indexing.reindex import reindex  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--base", default="test/SemEval2016-Task3-CQA-QL-test.xml")
    ap.add_argument("--extra", default="dev/SemEval2016-Task3-CQA-QL-dev.xml")
    ap.add_argument("--fraction", type=float, default=0.01)
    args = ap.parse_args()
    s = Settings(data_dir=args.data_dir)
    shutil.rmtree(s.data_dir, ignore_errors=True)
    base = load(s.semeval_dir / args.base).threads
    with ThreadStore(s.store_path) as st:
        st.upsert(base)
    full = reindex(s, progress=False)
    n_new = max(1, int(len(base) * args.fraction))
    with ThreadStore(s.store_path) as st:
        st.upsert(load(s.semeval_dir / args.extra).threads[:n_new])
    inc = reindex(s, progress=False)
    print(json.dumps({"threads": len(base), "new_threads": n_new, "full_s": full["seconds"], "incremental_s": inc["seconds"],
                      "fraction_of_full": round(inc["seconds"] / full["seconds"], 3),
                      "full_encoded": full["indexes"]["dense"]["encoded"],
                      "incremental_encoded": inc["indexes"]["dense"]["encoded"]}))


if __name__ == "__main__":
    main()
