"""What replacing an erased user's post ids in the feedback log costs an erasure (round 66,
``ranking.evaluation.feedback.forget_posts``), beside the step an erasure already took there (``forget_requests``).

The log: --searches searches in a real feedback log file, as a worker writes them over 30 days: each showed 10 posts
of the full 2016 corpus's store (a run of comment ids of one thread after another, drawn seeded from the whole
store, so a post is shown as often as any other), one in --judged-every judged (its first and third results), and
each kept its request (CQA_FEEDBACK_QUERIES: a question of the store, as the "ask" page searches a draft). The
erasures, each of one user of that corpus with every post removed (their threads with every comment, their
comments): ``top``, the user with the most posts, and the user with the most posts of 200 at most (a heavy but
ordinary one, as bench/erasure.py takes). For each, on its own copy of the log:

- ``forget_requests`` (the texts) and then ``forget_posts`` (the ids): the seconds of each, their ratio, and how many
  searches each changed;
- meanwhile another thread records a search every 5 ms, as a worker does: its p50 and its longest wait during each
  step, and the same loop with neither running;
- that no removed id is left in the log's results or judgements, and that the report's MAP is the same before and
  after.

Prints a JSON object last.

    python bench/shown_posts.py [--data-dir var | --store PATH] [--searches 300000] [--judged-every 20]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import run_header  # noqa: E402

from indexing.models import question_text  # noqa: E402
from indexing.store import Snapshot  # noqa: E402
from ranking.evaluation.feedback import (SERVED_COLUMNS, FeedbackLog, Served, feedback_report,  # noqa: E402
                                         forget_posts, forget_requests)
from ranking.pipeline import SearchRequest  # noqa: E402

DAY = 86400.0


def read_forum(store: Path) -> tuple[list[list[str]], list[tuple[str, str]], dict[str, tuple[list[str], list[str]]]]:
    """The store's threads' comment ids (thread order), its questions (subject, body), and per author what an
    erasure of them removes: (post ids: each thread they asked with its comments, each comment of theirs; texts)."""
    threads, questions, by_author = [], [], {}
    with Snapshot(store) as snap:
        for t in snap.threads():
            threads.append([a.id for a in t.answers])
            questions.append((t.subject, t.body))
            if t.author_id:
                ids, texts = by_author.setdefault(t.author_id, ([], []))
                ids += [t.id, *(a.id for a in t.answers)]
                texts += [question_text(t.subject, t.body), t.subject, t.body, *(a.text for a in t.answers)]
            for a in t.answers:
                if a.author_id:
                    ids, texts = by_author.setdefault(a.author_id, ([], []))
                    ids.append(a.id)
                    texts.append(a.text)
    return threads, questions, by_author


def fill_log(path: Path, threads: list[list[str]], questions: list[tuple[str, str]], n: int, judged_every: int,
             now: float, seed: int = 7) -> None:
    """``n`` searches of 10 results each (the module docstring), written as a worker writes them."""
    rng = random.Random(seed)
    ids = [i for t in threads for i in t]
    log = FeedbackLog(path)
    log._served()  # the schema, as a worker makes it
    log.close()
    rows, judged = [], []
    for i in range(n):
        start = rng.randrange(len(ids) - 10)
        shown = ids[start:start + 10]
        subject, body = questions[i % len(questions)]
        sid = f"s{i:08d}"
        rows.append((sid, now - 30 * DAY * (i + 1) / (n + 1), "/search", "answers", "r", "g", 0, json.dumps(shown),
                     json.dumps(list(range(10))), None, None, SearchRequest.asking(subject, body).to_json()))
        if i % judged_every == 0:
            judged += [(sid, shown[0], 1, now), (sid, shown[2], 0, now)]
    with sqlite3.connect(path) as db:
        db.executemany(f"INSERT INTO served ({', '.join(SERVED_COLUMNS)}) VALUES "
                       f"({', '.join('?' * len(SERVED_COLUMNS))})", rows)
        db.executemany("INSERT INTO judged VALUES (?, ?, ?, ?)", judged)


def timed(f, *args, **kw) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = f(*args, **kw)
    return out, time.perf_counter() - t0


def writer_waits(path: Path, work) -> tuple[object, dict]:
    """``work()`` run while another thread records a search every 5 ms in the log at ``path``: its result, and the
    recording's p50 and longest ms."""
    waits: list[float] = []
    stop = threading.Event()

    def write() -> None:
        log = FeedbackLog(path)
        while not stop.is_set():
            t0 = time.perf_counter()
            log.record(Served("/search", "answers", "w", "g", 0, ("x",), (0,)))
            waits.append(1000 * (time.perf_counter() - t0))
            stop.wait(0.005)
        log.close()
    th = threading.Thread(target=write)
    th.start()
    time.sleep(0.05)
    try:
        out = work()
    finally:
        stop.set()
        th.join()
    return out, {"records": len(waits), "p50_ms": round(statistics.median(waits), 3), "max_ms": round(max(waits), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--store", type=Path, help="this store instead of the full 2016 corpus's")
    ap.add_argument("--searches", type=int, default=300_000)
    ap.add_argument("--judged-every", type=int, default=20)
    args = ap.parse_args()
    if args.store is None:
        from load import built_corpus
        args.store = built_corpus(args.data_dir).store_path
    threads, questions, by_author = read_forum(args.store)
    sized = sorted(by_author, key=lambda a: (-len(by_author[a][0]), a))
    users = {"top": sized[0], "ordinary": next(a for a in sized[1:] if len(by_author[a][0]) <= 200)}
    out = {**run_header("shown_posts"), "searches": args.searches, "judged_every": args.judged_every, "erasures": {}}
    with tempfile.TemporaryDirectory(prefix="cqa-shown-posts-") as tmp:
        base = Path(tmp) / "base.sqlite3"
        fill_log(base, threads, questions, args.searches, args.judged_every, time.time())
        out["log_bytes"] = base.stat().st_size
        _, out["no_erasure"] = writer_waits(base, lambda: time.sleep(2.0))
        before = feedback_report(FeedbackLog(base))["groups"]
        for name, user in users.items():
            posts, texts = by_author[user]
            path = Path(tmp) / f"{name}.sqlite3"
            shutil.copy(base, path)
            (requests, req_s), req_waits = writer_waits(path, lambda: timed(forget_requests, path, texts, settle=True))
            (searches, post_s), post_waits = writer_waits(path, lambda: timed(forget_posts, path, posts))
            gone = set(posts)
            with sqlite3.connect(path) as db:
                left = sum(bool(gone & set(json.loads(r))) for (r,) in db.execute("SELECT results FROM served")) + \
                    sum(r in gone for (r,) in db.execute("SELECT result FROM judged"))
            after = feedback_report(FeedbackLog(path))["groups"]
            out["erasures"][name] = {
                "posts": len(posts), "texts": len(texts),
                "forget_requests": {"seconds": round(req_s, 3), "requests_dropped": requests, "writer": req_waits},
                "forget_posts": {"seconds": round(post_s, 3), "searches_changed": searches, "writer": post_waits},
                "posts_over_requests": round(post_s / req_s, 3),
                "removed_ids_left": left,
                "map_unchanged": [(g["searches"], g["judgements"], g["MAP"]) for g in after] ==
                [(g["searches"], g["judgements"], g["MAP"]) for g in before]}
            print(json.dumps({name: out["erasures"][name]}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
