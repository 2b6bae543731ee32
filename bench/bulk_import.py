"""What a bulk import costs a served forum's own new posts: `cqa ingest FILE` into the data folder a real `cqa serve`
searches, with the automatic refresh ($CQA_REFRESH_S) taking it in, while the forum goes on.

Each side gets its own server over a fresh copy of the full 2016 corpus, side by side in one run:

- `--encode never` (what `cqa ingest` did before round 19): the import is written at once, and the first build that
  sees it encodes every one of its texts, with the build lock held;
- `--encode auto` (the default): into a served data folder the ingest puts the import's texts in the embedding cache
  first, then writes; the build that takes it in encodes nothing.

The import: --threads threads of the 2015 test file (not in the 2016 corpus) under new ids, each text tagged so that
no embedding cache holds it. --user-after seconds after the ingest starts, a user POSTs a new thread (a 2016 test
original question, as bench/freshness.py does). The bench times, from the ingest's start:

- the ingest command itself;
- until /search (target questions, first stage) shows the user's thread, and since its POST;
- until it shows the import's last thread.

Meanwhile one client sends a reranked POST /search (target answers) every 0.25 s; its latency is split by whether the
import was under way (from the ingest's start until its last thread shows). Prints a JSON object last.

    python bench/bulk_import.py --data-dir /tmp/cqa-full --threads 100 --user-after 10
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

from freshness import ADMIN, POLL_S, TOKEN, found, idle  # noqa: E402
from load import PacedClient, post_json, renamed, server, split_latency  # noqa: E402

MODES = ("never", "auto")


def import_file(threads, tag: str, path: Path) -> tuple[str, str, str]:
    """``threads`` under new ids with every text tagged, as JSONL at ``path``; returns the last one's id, subject and
    body (what the bench searches for)."""
    with path.open("w", encoding="utf-8") as f:
        for t in threads:
            t = renamed(t, tag)
            t = t.model_copy(update={"body": f"{t.body} [{tag}]", "answers": [
                a.model_copy(update={"text": f"{a.text} [{tag}]"}) for a in t.answers]})
            f.write(t.model_dump_json() + "\n")
    return t.id, t.subject, t.body


def run_mode(corpus: Path, mode: str, threads, user: tuple[str, str, str], user_after: float, refresh_s: float,
             load_questions: list[str], timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="cqa-bulk-") as tmp:
        folder = Path(tmp) / "data"
        shutil.copytree(corpus, folder)
        last = import_file(threads, f"import-{mode}", Path(tmp) / "import.jsonl")
        env = {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": str(refresh_s)}
        with server(folder, env) as (base, ready):
            post_json(base + "/search", {"question": {"body": "warm up"}, "target": "answers"})
            idle(base, refresh_s)

            def search(i):
                body = {"question": {"body": load_questions[i % len(load_questions)]}, "k": 10, "target": "answers"}
                return post_json(base + "/search", body)[0]
            searches = PacedClient(search, POLL_S)
            searches.start()
            cmd = [sys.executable, "-m", "app.cli", "--data-dir", str(folder), "ingest", "-q", "--encode", mode,
                   str(Path(tmp) / "import.jsonl")]
            w0, t0 = time.time(), time.perf_counter()
            ingest = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            at: dict[str, float] = {}
            try:
                while len(at) < 4:
                    now = time.perf_counter() - t0
                    if now > timeout:
                        raise SystemExit(f"{mode}: not within {timeout} s: {sorted(at)}")
                    if "ingest" not in at and ingest.poll() is not None:
                        at["ingest"] = now
                    if "user_posted" not in at and now >= user_after:
                        thread = {"id": user[0], "subject": user[1], "body": user[2], "answers": []}
                        status, out = post_json(base + "/threads", {"threads": [thread]}, headers=ADMIN)
                        if status != 200:
                            raise SystemExit(f"POST /threads answered {status}: {out}")
                        at["user_posted"] = time.perf_counter() - t0
                    if "user_posted" in at and "user_found" not in at and found(base, *user):
                        at["user_found"] = time.perf_counter() - t0
                    if "import_found" not in at and found(base, *last):
                        at["import_found"] = time.perf_counter() - t0
                    time.sleep(POLL_S)
                time.sleep(5)  # searches after the import, for the other side of the split
            finally:
                searches.stop.set()
                searches.join()
                ingest.wait()
            report = json.loads(ingest.stdout.read().strip().splitlines()[-1])
            window = [(w0, w0 + at["import_found"])]
            return {"mode": mode, "generation_at_start": ready["generation"],
                    "ingest": {k: report.get(k) for k in ("threads", "answers", "inserted", "encoded_ahead")},
                    "ingest_s": round(at["ingest"], 2),
                    "user_posted_at_s": round(at["user_posted"], 2),
                    "user_found_at_s": round(at["user_found"], 2),
                    "user_seconds_to_search": round(at["user_found"] - at["user_posted"], 2),
                    "import_found_at_s": round(at["import_found"], 2),
                    "search_latency": split_latency(searches.samples, window, "during_import", "after")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--threads", type=int, default=100, help="threads in the import")
    ap.add_argument("--user-after", type=float, default=10.0, help="seconds after the ingest starts that a user posts")
    ap.add_argument("--modes", default=",".join(MODES), help=f"`cqa ingest --encode` per server, of {MODES}")
    ap.add_argument("--refresh-s", type=float, default=None, help="CQA_REFRESH_S (default: the setting's default)")
    ap.add_argument("--timeout", type=float, default=1200, help="longest wait for one side, in seconds")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if not modes or set(modes) - set(MODES):
        raise SystemExit(f"--modes: comma-separated, each one of {MODES}")

    from app.settings import Settings
    from indexing.catalog import TEST_2015
    from indexing.loaders import load_semeval
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    from ranking.search_benchmark import qrels_for

    defaults = Settings.model_fields
    refresh_s = args.refresh_s if args.refresh_s is not None else defaults["refresh_s"].default
    settings = Settings(data_dir=args.data_dir)
    ensure_corpus(settings, progress=True)
    _, test = qrels_for(settings, "test", "questions")
    _, dev = qrels_for(settings, "dev", "questions")
    threads = load_semeval(settings.semeval_dir / TEST_2015, strict=True).threads[:args.threads]
    load_questions = [f"{subject} {body}" for subject, body in dev.values()]
    corpus = corpus_settings(settings).data_dir
    out = {"bench": "bulk_import", "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
           "refresh_s": refresh_s, "threads": len(threads), "comments": sum(len(t.answers) for t in threads),
           "user_after_s": args.user_after, "sides": []}
    for n, mode in enumerate(modes):
        qid, (subject, body) = list(test.items())[n]  # each side its own user thread
        side = run_mode(corpus, mode, threads, (f"user-{qid}", subject, body), args.user_after, refresh_s,
                        load_questions, args.timeout)
        print(json.dumps(side), file=sys.stderr, flush=True)
        out["sides"].append(side)
    by = {s["mode"]: s for s in out["sides"]}
    if {"never", "auto"} <= set(by):
        out["user_seconds_ratio_never_over_auto"] = round(
            by["never"]["user_seconds_to_search"] / by["auto"]["user_seconds_to_search"], 2)
        out["import_found_ratio_never_over_auto"] = round(
            by["never"]["import_found_at_s"] / by["auto"]["import_found_at_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
