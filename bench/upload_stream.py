"""What receiving a large file costs a serving `cqa serve` (`POST /imports`, from the upload's first byte to its 202,
then its job), this tree's code against a reference revision's, side by side in one run: each a real server over its
own copy of the full 2016 corpus's data folder.

The file: the corpus's own export (`cqa export`) repeated --copies times, plain JSONL. The threads are the ones the
store holds, so the ingest after the upload changes and encodes nothing, and the copies after the first are records
the file holds twice (each skipped): the upload is what is measured, and the job is the same work on both sides. For
each side the bench measures:

- the upload: seconds from its first byte to the 202, and MB/s;
- meanwhile, GET /health every 5 ms (the event loop's reply time: a request waits behind whatever runs on the loop)
  and a first-stage POST /search every 0.1 s, each split by whether the upload was under way;
- the job until GET /jobs/{id} says it is done (polled every 0.25 s), and the distinct progress it showed.

Both stores are then compared by `cqa export`'s fingerprint with the store before. Prints a JSON object last.

    python bench/upload_stream.py [--data-dir var] [--copies 20] [--against 7c4afab]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from freshness import POLL_S, TOKEN  # noqa: E402
from http_import import upload  # noqa: E402
from load import PacedClient, get_json, post_json, server, split_latency  # noqa: E402


def run_side(corpus: Path, side: str, root: Path, file: Path, questions: list[str], timeout: float) -> tuple[dict, Path]:
    tmp = Path(tempfile.mkdtemp(prefix=f"cqa-upload-{side}-"))
    folder = tmp / "data"
    shutil.copytree(corpus, folder)
    with server(folder, {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": "0"}, root=root) as (base, _):
        post_json(base + "/search", {"question": {"body": "warm up"}, "rerank": False})

        def health(i):
            return get_json(base + "/health")[0]

        def search(i):
            return post_json(base + "/search", {"question": {"body": questions[i % len(questions)]}, "k": 10,
                                                "rerank": False})[0]
        probes, searches = PacedClient(health, 0.005), PacedClient(search, 0.1)
        probes.start()
        searches.start()
        time.sleep(3)  # the probes' figures without an upload
        w0, t0 = time.time(), time.perf_counter()
        try:
            status, sent = upload(base, file, "application/x-ndjson", timeout=1200)
            w1, upload_s = time.time(), time.perf_counter() - t0
            time.sleep(3)
        finally:
            probes.stop.set()
            searches.stop.set()
            probes.join()
            searches.join()
        if status != 202:
            raise SystemExit(f"{side}: POST /imports answered {status}: {sent}")
        seen: list[tuple[str | None, float]] = []
        while True:
            _, job = get_json(f"{base}/jobs/{sent['job']['id']}")
            if not seen or seen[-1] != (job["stage"], job["progress"]):
                seen.append((job["stage"], job["progress"]))
            if job["state"] in ("succeeded", "failed"):
                break
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"{side}: the import job did not finish within {timeout} s")
            time.sleep(POLL_S)
        done_s = time.perf_counter() - t0
        if job["state"] != "succeeded":
            raise SystemExit(f"{side}: the import job failed: {job['error']}")
        summary = job["result"]["imports"][0]["summary"]
        mb = file.stat().st_size / 2**20
        out = {"side": side, "upload_s": round(upload_s, 2), "upload_mb_per_s": round(mb / upload_s, 1),
               "done_s": round(done_s, 2),
               "ingest": {k: summary.get(k) for k in ("threads", "inserted", "updated", "unchanged", "skipped")},
               "progress_seen": len(seen), "last_progress": seen[-2] if len(seen) > 1 else seen[-1],
               "health": split_latency(probes.samples, [(w0, w1)], "during_upload", "else"),
               "search": split_latency(searches.samples, [(w0, w1)], "during_upload", "else")}
    return out, tmp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--copies", type=int, default=20, help="times the corpus's export is repeated in the file")
    ap.add_argument("--against", default="7c4afab", help="the reference revision (default: round 49's)")
    ap.add_argument("--timeout", type=float, default=1200, help="longest wait for one side, in seconds")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.backup import export
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    from ranking.search_benchmark import qrels_for

    settings = Settings(data_dir=args.data_dir)
    ensure_corpus(settings, progress=True)
    _, dev = qrels_for(settings, "dev", "questions")
    questions = [f"{subject} {body}" for subject, body in dev.values()]
    corpus = corpus_settings(settings).data_dir
    with tempfile.TemporaryDirectory(prefix="cqa-upload-") as tmp:
        tmp = Path(tmp)
        made = export(corpus / "threads.sqlite3", tmp / "one.jsonl", with_ledger=False)
        one = (tmp / "one.jsonl").read_bytes()
        file = tmp / "upload.jsonl"
        with file.open("wb") as f:
            for _ in range(args.copies):
                f.write(one)
        ref = tmp / "reference"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(ref), args.against], cwd=ROOT, check=True)
        out = {"bench": "upload_stream", "machine": f"{platform.processor() or platform.machine()}, "
               f"{platform.system()}", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "cpus": os.cpu_count(), "against": args.against, "copies": args.copies, "threads": made["threads"],
               "file_mb": round(file.stat().st_size / 2**20, 1), "sides": []}
        folders = []
        try:
            for side, root in (("reference", ref), ("this_tree", ROOT)):
                result, folder = run_side(corpus, side, root, file, questions, args.timeout)
                print(json.dumps(result), file=sys.stderr, flush=True)
                out["sides"].append(result)
                folders.append(folder)
            prints = [export(f / "data" / "threads.sqlite3", f / "out.jsonl")["fingerprint"] for f in folders]
            out["same_store"] = len(set(prints)) == 1 and prints[0] == made["fingerprint"]
        finally:
            for f in folders:
                shutil.rmtree(f, ignore_errors=True)
            subprocess.run(["git", "worktree", "remove", "--force", str(ref)], cwd=ROOT, check=False)
    by = {s["side"]: s for s in out["sides"]}
    out["upload_ratio_this_over_reference"] = round(by["this_tree"]["upload_s"] / by["reference"]["upload_s"], 2)
    for probe in ("health", "search"):
        p50 = {side: by[side][probe]["during_upload"]["p50_ms"] for side in by}
        if all(p50.values()):
            out[f"{probe}_p50_during_upload_ratio"] = round(p50["this_tree"] / p50["reference"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
