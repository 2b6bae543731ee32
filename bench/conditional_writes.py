"""What the write conditions cost a forum's write, through a real server: a whole thread sent with its revision
against the same write without one, a comment sent with `If-Match` against one without, and what the refusals
(a superseded snapshot, a 412) take, side by side in one run.

A copy of a data folder (the 2016 corpus's, DATA/benchmarks/fullcorpus-2016, by default) is served by `cqa serve`
with the automatic refresh off (`CQA_REFRESH_S=0`, so no build runs beside the writes; everything else as it ships,
encoding ahead included). Four stored threads of the same length (`--comments`, 10 by default: the longest test
threads) are written in rounds; in each round, in turn:

- `snapshot`: `POST /threads` of thread 1 with one more comment, no revision (the reference);
- `snapshot+revision`: `POST /threads` of thread 2 with one more comment and the round's revision;
- `superseded`: `POST /threads` of thread 2 with an older revision (not written, listed in `superseded`);
- `comment`: `POST /threads/{3}/answers` of one new comment (the reference);
- `comment+if-match`: `POST /threads/{4}/answers` of one new comment with `If-Match` of the ETag its last write gave;
- `stale-if-match`: `PATCH /threads/{4}` with the ETag thread 4 had before this round's comment (412).

One untimed round first warms the server up. Each comment's text is new, so each write encodes the same number of
texts ahead in both arms. Then the whole store is walked with `GET /threads` in pages of 1,000, as a sync job walks
it. Prints per kind the p50 / p95 in ms and each condition's ratio to its reference; JSON object last.

    python bench/conditional_writes.py [--data-dir var/benchmarks/fullcorpus-2016] [--rounds 40]
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import server  # noqa: E402

TOKEN = "bench-conditional"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def call(method: str, url: str, body: dict | None = None, headers: dict | None = None) -> tuple[int, dict, dict, float]:
    """One request: its status, response headers, JSON and milliseconds."""
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json", **ADMIN, **(headers or {})})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, head, raw = r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        status, head, raw = e.code, dict(e.headers), e.read()
    return status, {k.lower(): v for k, v in head.items()}, json.loads(raw or b"{}"), 1000 * (time.perf_counter() - t0)


def quantiles(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016",
                    help="a data folder with a live generation (copied; the copy is served)")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--comments", type=int, default=10, help="comments of each written thread at the start")
    args = ap.parse_args()
    if not (args.data_dir / "threads.sqlite3").is_file():
        raise SystemExit(f"{args.data_dir}: no store; python bench/rerank_quality.py builds the 2016 corpus's folder")
    times: dict[str, list[float]] = {k: [] for k in ("snapshot", "snapshot+revision", "superseded", "comment",
                                                     "comment+if-match", "stale-if-match")}
    with tempfile.TemporaryDirectory(prefix="cqa-cond-") as tmp:
        folder = Path(tmp) / "data"
        shutil.copytree(args.data_dir, folder, ignore=shutil.ignore_patterns("reports", "jobs"))
        with server(folder, {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": "0"}) as (base, ready):
            ids = [f"bench-cond-{k}" for k in range(1, 5)]
            threads = {tid: {"id": tid, "subject": f"Where can I renew my {tid} permit?",
                             "body": "The office near the souq is closed this week.",
                             "answers": [{"id": f"{tid}-c{i}", "text": f"try the office at gate {i} of {tid}"}
                                         for i in range(args.comments)]} for tid in ids}
            status, _, out, _ = call("POST", base + "/threads", {"threads": list(threads.values())})
            assert status == 200 and out["inserted"] == 4, out
            etag = call("GET", f"{base}/threads/{ids[3]}")[1]["etag"]
            for i in range(args.rounds + 1):  # round 0 warms up (the first write loads the encoders): not timed
                def grown(tid: str) -> dict:
                    threads[tid]["answers"].append({"id": f"{tid}-n{i}", "text": f"round {i}: {tid} renewal hint"})
                    return threads[tid]
                s, _, out, ms = call("POST", base + "/threads", {"threads": [grown(ids[0])]})
                assert s == 200 and out["updated"] == 1, out
                times["snapshot"].append(ms)
                s, _, out, ms = call("POST", base + "/threads", {"threads": [{**grown(ids[1]), "revision": i + 1}]})
                assert s == 200 and out["updated"] == 1, out
                times["snapshot+revision"].append(ms)
                older = {**threads[ids[1]], "answers": threads[ids[1]]["answers"][:-1], "revision": i}  # before it
                s, _, out, ms = call("POST", base + "/threads", {"threads": [older]})
                assert s == 200 and out["superseded"] == [ids[1]], out
                times["superseded"].append(ms)
                new = {"answers": [{"id": f"{ids[2]}-a{i}", "text": f"round {i}: a comment alone on {ids[2]}"}]}
                s, _, out, ms = call("POST", f"{base}/threads/{ids[2]}/answers", new)
                assert s == 200 and out["inserted"] == 1, out
                times["comment"].append(ms)
                before = etag
                new = {"answers": [{"id": f"{ids[3]}-a{i}", "text": f"round {i}: a comment alone on {ids[3]}"}]}
                s, head, out, ms = call("POST", f"{base}/threads/{ids[3]}/answers", new, {"If-Match": etag})
                assert s == 200 and out["inserted"] == 1, out
                etag = head["etag"]
                times["comment+if-match"].append(ms)
                s, head, out, ms = call("PATCH", f"{base}/threads/{ids[3]}", {"subject": "stale"}, {"If-Match": before})
                assert s == 412 and head["etag"] == etag, (s, out)
                times["stale-if-match"].append(ms)
            times = {k: v[1:] for k, v in times.items()}
            # what a sync job's walk over the whole store costs: GET /threads in pages of 1000
            walk_t0, pages, after, listed = time.perf_counter(), [], None, 0
            while True:
                q = "?limit=1000" + (f"&after={urllib.parse.quote(after)}" if after else "")
                s, _, page, ms = call("GET", base + "/threads" + q)
                assert s == 200, page
                pages.append(ms)
                listed += len(page["threads"])
                if page["next"] is None:
                    break
                after = page["next"]
            listing = {"threads": listed, "pages": len(pages),
                       "walk_ms": round(1000 * (time.perf_counter() - walk_t0), 1),
                       "page_p50_ms": round(statistics.median(pages), 2)}
            final = {tid: call("GET", f"{base}/threads/{tid}")[2] for tid in ids}
    assert final[ids[1]]["revision"] == args.rounds + 1 and all(
        len(t["answers"]) == args.comments + args.rounds + 1 for t in final.values()), "a write was lost"
    by_kind = {k: quantiles(v) for k, v in times.items()}
    ratio = {"snapshot+revision / snapshot": round(by_kind["snapshot+revision"]["p50_ms"]
                                                   / by_kind["snapshot"]["p50_ms"], 3),
             "comment+if-match / comment": round(by_kind["comment+if-match"]["p50_ms"]
                                                 / by_kind["comment"]["p50_ms"], 3)}
    for k, v in by_kind.items():
        print(f"{k:20s} p50 {v['p50_ms']:8.2f} ms  p95 {v['p95_ms']:8.2f} ms", file=sys.stderr)
    print(json.dumps({"bench": "conditional_writes", "data_dir": str(args.data_dir), "rounds": args.rounds,
                      "comments_at_start": args.comments, "generation": ready.get("generation"),
                      "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d"), "kinds": by_kind, "p50_ratio": ratio, "listing": listing,
                      "writes_kept": True}))


if __name__ == "__main__":
    main()
