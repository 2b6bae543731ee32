"""What a long stored thread's page costs: `GET /threads/{id}/answers` on threads of 200 (POST /rerank's most,
`CQA_MAX_CANDIDATES`, the reference) to 1,000 comments (`CQA_MAX_THREAD_COMMENTS`), through a real server.

A copy of a data folder (the 2016 corpus's by default) is served by `cqa serve` with the automatic refresh off (no
build beside the views). For
each size one thread is posted: a corpus question with that many comments of other corpus threads (new ids, their
authors kept, in the order drawn), which the embedding cache already holds, as a forum's own texts are once indexed
(`--new-texts`: each text made new, so that nothing holds it).
Its page is asked for at once (a first view: no comment of it indexed yet, so each is encoded) and three times more
(the vector and score memos). Then `cqa reindex` indexes them, and a new server (empty memos, a vector store of its
own) asks for each page again: a first view of an indexed thread, whose comments come with their stored vectors,
and three more. Each view's results are checked: every comment once. Prints ms per size and each size's ratio to
200 comments; JSON object last.

    python bench/long_thread.py [--data-dir var/benchmarks/fullcorpus-2016] [--sizes 200,500,1000]
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from conditional_writes import call  # noqa: E402
from load import server  # noqa: E402

TOKEN = "bench-conditional"  # conditional_writes.call sends this one


def page_ms(base: str, tid: str, n: int) -> float:
    status, _, out, ms = call("GET", f"{base}/threads/{tid}/answers")
    assert status == 200 and len(out["results"]) == n == len({r["id"] for r in out["results"]}), (status, out)
    return round(ms, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016")
    ap.add_argument("--sizes", default="200,500,1000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-texts", action="store_true", help="each comment's text made one no cache holds (a number "
                    "appended), so a first view encodes every comment: a forum's new posts, the worst case")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    from indexing.store import ThreadStore
    with ThreadStore(args.data_dir / "threads.sqlite3") as store:
        threads = [t for t in store.iter_threads() if not t.id.startswith("long-")]
    rng = random.Random(2016)
    comments = [a for t in rng.sample(threads, len(threads)) for a in t.answers if a.text.strip()]
    if len(comments) < max(sizes):
        raise SystemExit(f"{args.data_dir} holds {len(comments)} comments, fewer than {max(sizes)}")
    questions = rng.sample([t for t in threads if t.subject.strip()], len(sizes))
    long_threads = {}
    for n, q in zip(sizes, questions):
        tid = f"long-{n}"
        picked = rng.sample(comments, n)
        long_threads[tid] = {"id": tid, "subject": q.subject, "body": q.body, "author_id": q.author_id,
                             "answers": [{"id": f"{tid}-c{i}", "author_id": a.author_id,
                                          "text": f"{a.text} ({tid} #{i})" if args.new_texts else a.text}
                                         for i, a in enumerate(picked)]}
    env = {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": "0"}
    result: dict[str, dict] = {str(n): {} for n in sizes}
    with tempfile.TemporaryDirectory(prefix="cqa-long-") as tmp:
        folder = Path(tmp) / "data"
        shutil.copytree(args.data_dir, folder, ignore=shutil.ignore_patterns("reports", "jobs"))
        with server(folder, env) as (base, ready):
            status, _, out, _ = call("POST", base + "/threads", {"threads": list(long_threads.values())})
            assert status == 200 and out["inserted"] == len(sizes), out
            for n in sizes:
                tid = f"long-{n}"
                result[str(n)]["not_indexed_first_ms"] = page_ms(base, tid, n)
                result[str(n)]["not_indexed_again_ms"] = statistics.median(
                    page_ms(base, tid, n) for _ in range(args.repeats))
                print(json.dumps({"size": n, **result[str(n)]}), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        built = subprocess.run([sys.executable, "-m", "app.cli", "reindex"], cwd=ROOT, capture_output=True, text=True,
                               env={**os.environ, "CQA_DATA_DIR": str(folder), "PYTHONPATH": str(ROOT)})
        assert built.returncode == 0, built.stderr[-2000:]
        reindex_s = round(time.perf_counter() - t0, 1)
        with server(folder, env) as (base, ready):  # empty memos, a vector store of its own
            for n in sizes:
                tid = f"long-{n}"
                result[str(n)]["indexed_first_ms"] = page_ms(base, tid, n)
                result[str(n)]["indexed_again_ms"] = statistics.median(page_ms(base, tid, n) for _ in range(args.repeats))
                print(json.dumps({"size": n, **result[str(n)]}), file=sys.stderr, flush=True)
    ref = result[str(sizes[0])]
    ratios = {str(n): {k: round(v / ref[k], 2) for k, v in result[str(n)].items()} for n in sizes[1:]}
    print(json.dumps({"bench": "long_thread", "data_dir": str(args.data_dir), "sizes": sizes, "new_texts": args.new_texts,
                      "reference_size": sizes[0], "ms": result, "reindex_s": reindex_s, "ratio_to_reference": ratios,
                      "generation": ready.get("generation"), "machine": platform.processor() or platform.machine(),
                      "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
