"""Time from ``cqa serve`` on an empty data folder to ``GET /ready``: ingesting the default corpus (SemEval 2016
when ../shared/data is there), building the first index generation (almost all of it encoding the texts) and
loading the rerankers, as a newcomer's first ``make serve`` does; then until the service serves a generation with
the answer encoder's comment vectors (a big corpus's first build leaves them to a background reindex). Prints a
JSON object last.

    python bench/first_start.py [--data-dir /tmp/cqa-first-start]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from load import server  # noqa: E402  (bench/, beside this file)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=None, help="an empty folder (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="cqa-first-start-"))
    if data.exists() and any(data.iterdir()):
        raise SystemExit(f"{data} is not empty")
    from indexing.searcher import manifest_of, stored_answer_encoder
    t0 = time.perf_counter()
    with server(data, {}, bootstrap=True, timeout=args.timeout) as (base, ready):
        seconds = time.perf_counter() - t0
        first = manifest_of(data / "indexes")
        # a big corpus's first build leaves the answer vectors to a background reindex: wait until the service
        # serves a generation that has them
        vectors, m = None, first
        while time.perf_counter() - t0 < args.timeout:
            with urllib.request.urlopen(base + "/ready", timeout=5) as r:
                live = json.loads(r.read())["generation"]
            m = json.loads((data / "indexes" / live / "manifest.json").read_text())
            if stored_answer_encoder(m):
                vectors = time.perf_counter() - t0
                break
            time.sleep(2)
    print(json.dumps({"bench": "first_start", "seconds_to_ready": round(seconds, 1),
                      "seconds_to_answer_vectors_served": vectors and round(vectors, 1),
                      "documents": ready["sizes"]["documents"],
                      "reindex_seconds": {k: v.get("seconds") for k, v in first.get("build", {}).items()},
                      "background_reindex_seconds": {k: v.get("seconds") for k, v in m.get("build", {}).items()}
                      if m.get("generation") != first.get("generation") else None,
                      "cpus": os.cpu_count()}))
    if args.data_dir is None:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
