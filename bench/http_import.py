"""What an import sent over HTTP (`POST /imports`, for an operator who reaches the service only that way) costs
against `cqa ingest FILE` run on the service's machine (the reference), side by side in one run: each into a copy of
the full 2016 corpus's data folder that a real `cqa serve` searches, with the automatic refresh taking it in.

The import: --threads threads of the 2015 test file (not in the 2016 corpus) under new ids, each text tagged so that
no embedding cache holds it, as gzipped JSONL (what `cqa export -o X.jsonl.gz` writes). For each side the bench times,
from the start of the command (or of the upload):

- the command itself, or the upload until its 202 and the job until GET /jobs/{id} says it is done;
- until /search (target questions, first stage) shows the import's last thread;
- the server's resident memory (GET /metrics) before, at most while the import runs, and after: the upload is written
  to disk as it comes, and the ingest runs in a child process, so the server should not grow with the file.

Meanwhile one client sends a reranked POST /search (target answers) every 0.25 s; its latency is split by whether the
import was under way. Then both stores are compared by `cqa export`'s fingerprint. Prints a JSON object last.

    python bench/http_import.py [--data-dir var] [--threads 100]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bulk_import import import_file  # noqa: E402
from freshness import ADMIN, POLL_S, TOKEN, found, idle  # noqa: E402
from load import PacedClient, get_json, post_json, resident_mb, server, split_latency  # noqa: E402

SIDES = ("cli", "http")


def upload(base: str, path: Path, content_type: str = "application/gzip", timeout: float = 600) -> tuple[int, dict]:
    """POST /imports with the file as the body, streamed from disk."""
    with path.open("rb") as body:
        req = urllib.request.Request(base + "/imports", data=body, method="POST", headers={
            **ADMIN, "Content-Type": content_type, "Content-Length": str(path.stat().st_size)})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


class RssSampler(threading.Thread):
    """The server's resident memory every 0.25 s until stopped: the most seen."""

    def __init__(self, base: str):
        super().__init__(daemon=True)
        self.base, self.peak, self.stop = base, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, resident_mb(self.base) or 0.0)
            except OSError:
                pass
            self.stop.wait(0.25)


def run_side(corpus: Path, side: str, file: Path, last: tuple[str, str, str], refresh_s: float,
             load_questions: list[str], timeout: float) -> tuple[dict, Path]:
    tmp = Path(tempfile.mkdtemp(prefix=f"cqa-http-import-{side}-"))
    folder = tmp / "data"
    shutil.copytree(corpus, folder)
    env = {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": str(refresh_s)}
    with server(folder, env) as (base, ready):
        post_json(base + "/search", {"question": {"body": "warm up"}, "target": "answers"})
        idle(base, refresh_s)
        before = resident_mb(base)

        def search(i):
            body = {"question": {"body": load_questions[i % len(load_questions)]}, "k": 10, "target": "answers"}
            return post_json(base + "/search", body)[0]
        searches, rss = PacedClient(search, POLL_S), RssSampler(base)
        searches.start()
        rss.start()
        w0, t0 = time.time(), time.perf_counter()
        at: dict[str, float] = {}
        try:
            if side == "cli":
                done = subprocess.run([sys.executable, "-m", "app.cli", "--data-dir", str(folder), "ingest", "-q",
                                       str(file)], cwd=ROOT, capture_output=True, text=True,
                                      env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
                if done.returncode != 0:
                    raise SystemExit(f"cqa ingest failed ({done.returncode}): {done.stderr[-2000:]}")
                summary = json.loads(done.stdout.strip().splitlines()[-1])
            else:
                status, sent = upload(base, file)
                if status != 202:
                    raise SystemExit(f"POST /imports answered {status}: {sent}")
                at["upload"] = time.perf_counter() - t0
                while True:
                    _, job = get_json(f"{base}/jobs/{sent['job']['id']}")
                    if job["state"] in ("succeeded", "failed"):
                        break
                    if time.perf_counter() - t0 > timeout:
                        raise SystemExit(f"the import job did not finish within {timeout} s")
                    time.sleep(POLL_S)
                if job["state"] != "succeeded":
                    raise SystemExit(f"the import job failed: {job['error']}")
                summary = job["result"]["imports"][0]["summary"]
            at["done"] = time.perf_counter() - t0
            while not found(base, *last):
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit(f"{side}: the import's last thread not searchable within {timeout} s")
                time.sleep(POLL_S)
            at["found"] = time.perf_counter() - t0
            time.sleep(3)  # searches after the import, for the other side of the split
        finally:
            searches.stop.set()
            rss.stop.set()
            searches.join()
            rss.join()
        out = {"side": side, "generation_at_start": ready["generation"],
               "ingest": {k: summary.get(k) for k in ("threads", "answers", "inserted", "skipped", "encoded_ahead")},
               **({"upload_s": round(at["upload"], 2)} if "upload" in at else {}),
               "done_s": round(at["done"], 2), "searchable_s": round(at["found"], 2),
               "server_rss_mb": {"before": before, "peak_during": round(rss.peak, 1), "after": resident_mb(base)},
               "search_latency": split_latency(searches.samples, [(w0, w0 + at["found"])], "during_import", "after")}
    return out, tmp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--threads", type=int, default=100, help="threads in the import")
    ap.add_argument("--refresh-s", type=float, default=None, help="CQA_REFRESH_S (default: the setting's default)")
    ap.add_argument("--timeout", type=float, default=1200, help="longest wait for one side, in seconds")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.backup import export
    from indexing.catalog import TEST_2015
    from indexing.loaders import load_semeval
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    from ranking.search_benchmark import qrels_for

    refresh_s = args.refresh_s if args.refresh_s is not None else Settings.model_fields["refresh_s"].default
    settings = Settings(data_dir=args.data_dir)
    ensure_corpus(settings, progress=True)
    _, dev = qrels_for(settings, "dev", "questions")
    threads = load_semeval(settings.semeval_dir / TEST_2015, strict=True).threads[:args.threads]
    load_questions = [f"{subject} {body}" for subject, body in dev.values()]
    corpus = corpus_settings(settings).data_dir
    with tempfile.TemporaryDirectory(prefix="cqa-http-import-") as tmp:
        plain = Path(tmp) / "import.jsonl"
        last = import_file(threads, "http-import", plain)
        gz = Path(tmp) / "import.jsonl.gz"
        gz.write_bytes(gzip.compress(plain.read_bytes()))
        out = {"bench": "http_import", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
               "refresh_s": refresh_s, "threads": len(threads), "comments": sum(len(t.answers) for t in threads),
               "bytes_gz": gz.stat().st_size, "sides": []}
        folders = []
        try:
            for side in SIDES:
                result, folder = run_side(corpus, side, gz, last, refresh_s, load_questions, args.timeout)
                print(json.dumps(result), file=sys.stderr, flush=True)
                out["sides"].append(result)
                folders.append(folder)
            prints = [export(f / "data" / "threads.sqlite3", f / "out.jsonl")["fingerprint"] for f in folders]
            out["same_store"] = len(set(prints)) == 1
        finally:
            for f in folders:
                shutil.rmtree(f, ignore_errors=True)
    by = {s["side"]: s for s in out["sides"]}
    out["searchable_ratio_http_over_cli"] = round(by["http"]["searchable_s"] / by["cli"]["searchable_s"], 2)
    out["done_ratio_http_over_cli"] = round(by["http"]["done_s"] / by["cli"]["done_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
