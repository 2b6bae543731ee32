"""What the feedback log's kept requests (CQA_FEEDBACK_QUERIES) cost when they must go (round 62): an erasure's or a
takedown's scan for the requests that carry its removed posts (``ranking.evaluation.feedback.forget_requests``), what
a worker's search waits for meanwhile, which requests a real forum's erasure drops, and each worker's sweep of what is
past its period.

The log: --searches requests, each a question of the full 2016 corpus's store (its subject and body, as a forum's
"ask" page searches a draft before it is posted: real users' text), in turn, as `POST /search` keeps them
(``SearchRequest.to_json``), evenly over the 30 days back from now, in a real feedback log file. The erasures, each
of one user of that corpus with every post removed (their questions' subjects, bodies and both together, their comments):
``top``, the user with the most posts, and --typical users drawn (seeded) among those with the median count. For
each:
- ``forget_requests`` on the log: seconds, and the longest a search written meanwhile by another thread waited (a
  worker's ``FeedbackLog.record`` every 5 ms through the erasure, against the same loop with no erasure: p50 and max;
  in a log of ``APART_FROM`` bytes or more, about 10,000 requests, the scan runs in a process of its own, and the
  writer shares this one with the drop only);
- the reference beside it, on the first --reference-sample requests: the obvious scan with the same rule (every
  erased text of 5 words or more looked for in every request's words, and every request's in every text), its
  seconds scaled to the log, and whether both drop the same requests of the sample;
- which requests it dropped: ``planted``, those whose question is one the user asked (the draft searched before it
  was posted), of which those of fewer than 5 words are left by design (``planted_short``); and ``others``, requests
  of other users' questions that share a run of 5 words or more with one of the user's posts, with the share of the
  log they are.
And ``previous``: the same erasure's scan by the module as it was at --against (round 62's, by default), on another
copy of the log, timed beside it in the same run: its seconds, the ratio, and whether both drop the same requests.
Then the sweep (``FeedbackLog.forget``, each worker every minute where no search did): its ms on the log with nothing
past its period, and with a thirtieth of the requests past it (a day's worth of a 30-day period). Prints a JSON
object last.

    python bench/kept_requests.py [--data-dir var | --store PATH] [--searches 300000] [--typical 5]
        [--reference-sample 5000] [--against 3f3816a]
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

from load import reference_module, run_header  # noqa: E402

from indexing.backup import flushed  # noqa: E402
from indexing.models import question_text  # noqa: E402
from indexing.store import Snapshot  # noqa: E402
from ranking.evaluation.feedback import (MATCH_WORDS, SERVED_COLUMNS, ErasedTexts, FeedbackLog, Served,  # noqa: E402
                                         _words, forget_requests)
from ranking.pipeline import SearchRequest  # noqa: E402


def posts_by_author(store: Path) -> tuple[list[tuple[str, str, str]], dict[str, list[str]]]:
    """The store's questions (asker, subject, body) and, per author, the texts an erasure of them removes."""
    questions, texts = [], {}
    with Snapshot(store) as snap:
        for t in snap.threads():
            questions.append((t.author_id, t.subject, t.body))
            if t.author_id:
                texts.setdefault(t.author_id, []).extend([question_text(t.subject, t.body), t.subject, t.body])
            for a in t.answers:
                if a.author_id:
                    texts.setdefault(a.author_id, []).append(a.text)
    return questions, texts


DAY = 86400.0


def fill_log(path: Path, questions: list[tuple[str, str, str]], n: int,
             now: float) -> list[tuple[str, str, bool]]:
    """``n`` searches in a new log at ``path``, each asking a question in turn, evenly over the 30 days back from
    ``now`` (CQA_FEEDBACK_QUERY_DAYS's default); returns each one's id, asker, and whether none of its question's
    parts is long enough to be looked for (``MATCH_WORDS``)."""
    log = FeedbackLog(path)
    log._served()  # the schema, as a worker makes it
    log.close()
    rows, asked = [], []
    for i in range(n):
        author, subject, body = questions[i % len(questions)]
        sid = f"s{i:08d}"
        request = SearchRequest.asking(subject, body)
        rows.append((sid, now - 30 * DAY * (i + 1) / (n + 1), "/search", "answers", "r", "g", 0, '["a"]', "[0]",
                     None, None, request.to_json()))
        short = all(len(_words(p)) < MATCH_WORDS for p in (request.text, subject, body))
        asked.append((sid, author, short))
    with sqlite3.connect(path) as db:
        db.executemany(f"INSERT INTO served ({', '.join(SERVED_COLUMNS)}) VALUES "
                       f"({', '.join('?' * len(SERVED_COLUMNS))})", rows)
    return asked


def reference_drops(texts: list[str], requests: list[tuple[str, str]]) -> set[str]:
    """The same rule as ``ErasedTexts``, by brute force: each erased text of ``MATCH_WORDS`` words or more looked for
    in each part of each request, and each part in each text, as strings of words."""
    erased = [" " + " ".join(w) + " " for w in {_words(t) for t in texts} if len(w) >= MATCH_WORDS]
    out = set()
    for sid, request in requests:
        fields = json.loads(request)
        for part in {fields.get("text") or "", fields.get("subject") or "", fields.get("body") or ""}:
            w = _words(part)
            if len(w) < MATCH_WORDS:
                continue
            p = " " + " ".join(w) + " "
            if any(e in p or p in e for e in erased):
                out.add(sid)
                break
    return out


def waits_while(path: Path, during) -> tuple[float, list[float]]:
    """``during()`` run while another thread records a search every 5 ms in the log at ``path`` (a worker's
    ``FeedbackLog.record``); its seconds, and each record's ms."""
    log = FeedbackLog(path, keep_days=36_500, keep_request_days=36_500)  # its writes forget none of the log's
    waits: list[float] = []
    stop = threading.Event()

    def worker():
        while not stop.is_set():
            t0 = time.perf_counter()
            log.record(Served("/search", "answers", "r", "g", 0, ("a",), (0,)))
            waits.append(1000 * (time.perf_counter() - t0))
            time.sleep(0.005)
    th = threading.Thread(target=worker)
    th.start()
    try:
        time.sleep(0.2)
        t0 = time.perf_counter()
        during()
        seconds = time.perf_counter() - t0
        time.sleep(0.2)
    finally:  # a failure in ``during`` ends the run instead of leaving the worker writing
        stop.set()
        th.join()
        log.close()
    return seconds, waits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var")
    ap.add_argument("--store", type=Path, default=None,
                    help="the store whose users and questions are used (default: the full 2016 corpus's under "
                    "--data-dir)")
    ap.add_argument("--searches", type=int, default=300_000, help="requests in the log (30 days of 10,000 a day)")
    ap.add_argument("--typical", type=int, default=5, help="users with the median count of posts erased, one each")
    ap.add_argument("--reference-sample", type=int, default=5000, help="requests the reference scans")
    ap.add_argument("--seed", type=int, default=62)
    ap.add_argument("--against", default="3f3816a", help="the revision whose scan is timed beside (default: round "
                    "62's last)")
    args = ap.parse_args()
    store = args.store or args.data_dir / "benchmarks" / "fullcorpus-2016" / "threads.sqlite3"
    if not store.exists():
        sys.exit(f"no full-corpus store at {store}: run `cqa evaluate --benchmark semeval2016-dev-search-answers` "
                 "once to build it")
    questions, texts = posts_by_author(store)
    counts = {a: len(t) for a, t in texts.items()}
    top = max(counts, key=counts.get)
    median = statistics.median_low(counts.values())
    medians = sorted(a for a, c in counts.items() if c == median)
    typical = random.Random(args.seed).sample(medians, min(args.typical, len(medians)))
    out = {**run_header("kept_requests"), "against": args.against, "searches": args.searches,
           "questions": len(questions), "authors": len(counts), "erasures": []}
    now = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        previous = reference_module(args.against, "ranking/evaluation/feedback.py", Path(tmp))
        pristine = Path(tmp) / "pristine.sqlite3"
        t0 = time.perf_counter()
        asked = fill_log(pristine, questions, args.searches, now)
        out["fill_seconds"] = round(time.perf_counter() - t0, 1)
        out["log_bytes"] = pristine.stat().st_size
        flushed(pristine)
        with sqlite3.connect(pristine) as db:
            sample = db.execute("SELECT id, request FROM served ORDER BY id LIMIT ?",
                                (args.reference_sample,)).fetchall()
        asker = {sid: author for sid, author, _ in asked}
        short = {sid: too_short for sid, _, too_short in asked}
        _, idle_waits = waits_while(pristine, lambda: time.sleep(1.0))
        out["record_ms_no_erasure"] = {"p50": round(statistics.median(idle_waits), 3),
                                       "max": round(max(idle_waits), 3)}
        for name, author in [("top", top)] + [(f"typical-{i}", a) for i, a in enumerate(typical)]:
            log = Path(tmp) / f"{name}.sqlite3"
            shutil.copyfile(pristine, log)
            flushed(log)  # on disk before the timing: a worker's checkpoint would otherwise flush the copy's pages
            theirs = texts[author]
            with sqlite3.connect(log) as db:
                before = {r[0] for r in db.execute("SELECT id FROM served WHERE request IS NOT NULL")}
            dropped = [0]
            seconds, waits = waits_while(log, lambda: dropped.__setitem__(0, forget_requests(log, theirs)))
            with sqlite3.connect(log) as db:
                gone = before - {r[0] for r in db.execute("SELECT id FROM served WHERE request IS NOT NULL")}
            log = Path(tmp) / f"{name}-previous.sqlite3"  # the previous module's scan, a worker writing as above
            shutil.copyfile(pristine, log)
            flushed(log)
            previous_s, _ = waits_while(log, lambda: previous.forget_requests(log, theirs))
            with sqlite3.connect(log) as db:
                previous_gone = before - {r[0] for r in db.execute("SELECT id FROM served WHERE request IS NOT NULL")}
            planted = {sid for sid, a, _ in asked if a == author}
            t0 = time.perf_counter()
            ref = reference_drops(theirs, sample)
            ref_s = time.perf_counter() - t0
            scaled = ref_s * args.searches / len(sample)
            kept_planted = planted - gone
            out["erasures"].append({
                "erasure": name, "posts": counts[author], "texts_searched_for": len(ErasedTexts(theirs).texts),
                "dropped": dropped[0], "seconds": round(seconds, 3),
                "record_ms_meanwhile": {"p50": round(statistics.median(waits), 3), "max": round(max(waits), 3),
                                        "records": len(waits)},
                "previous": {"seconds": round(previous_s, 3),
                             "ratio": round(seconds / previous_s, 3) if previous_s else None,
                             "same_drops": previous_gone == gone},
                "reference_seconds_scaled": round(scaled, 1), "speedup": round(scaled / seconds, 1),
                "same_as_reference_on_sample": ref == {sid for sid, _ in sample} & gone, "sample_dropped": len(ref),
                "planted": len(planted), "planted_dropped": len(planted & gone),
                "planted_kept_short": sum(short[sid] for sid in kept_planted),
                "planted_kept_long": sum(not short[sid] for sid in kept_planted),
                "others": len(gone - planted), "others_share": round(len(gone - planted) / args.searches, 6),
                "others_askers": len({asker[s] for s in gone - planted})})
        # the sweep: nothing due, then a day of a 30-day period due (the searches nobody judged and the requests)
        log = FeedbackLog(pristine, keep_days=30, keep_request_days=30)
        ms = []
        for _ in range(5):
            t0 = time.perf_counter()
            log.forget(now)
            ms.append(1000 * (time.perf_counter() - t0))
        t0 = time.perf_counter()
        done = log.forget(now + DAY)
        out["sweep"] = {"nothing_due_ms": round(statistics.median(ms), 3),
                        "day_due_ms": round(1000 * (time.perf_counter() - t0), 1), "day_due": done}
        log.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
