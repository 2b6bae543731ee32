"""Erasing a forum user, through a real server, and what the store's zeroing of deleted values costs each write.

1. **Writes with and without `secure_delete`, side by side.** Two copies of the data folder's store, one opened as
   the service opens it (`secure_delete` on), one with it turned off (as before this change). The same writes go to
   both in turn, `--writes` rounds of three: a new comment (`upsert_answers`), the whole thread sent again with an
   edited body (`upsert`), and the new comment deleted (`delete_answer`). Prints the p50 of each, and the ratio.
2. **`VACUUM`** of a copy of the store (`POST /erasures` with `vacuum`, `cqa erase --vacuum`): its seconds.
3. **`POST /erasures` through `cqa serve`** on a copy of the data folder (the 2016 corpus's by default), as it
   ships, with the automatic refresh on. `--remove` names the user whose posts are removed (default: the one with the
   most comments whose count is at most 200, a heavy but ordinary user), and `--anonymize` the one anonymized after
   (default: the next). Before: each of up to 30 of the removed user's comments is sent as a `/search` answers
   question, and how many come back in their own top 10 is counted. Then, while a client searches without pause:
   - the erasure's response time;
   - its job to the end: the build from scratch, the older generations deleted;
   - the searches' p50 before and during the job, and their failures.

   Then a moderator's takedown: `DELETE /threads/{id}?purge=true` of a thread (`--takedown`; by default the one with
   the most comments no other post repeats), its job timed, and the thread sent again through `POST /threads` (the
   takedown on record leaves it out). After: the same questions again (none of the removed
   comments may come back), and no file under the data folder (the feedback log as the job left it: the searches
   after are new ones, which it keeps) may hold the text of a removed comment or of the thread
   taken down (of 40 characters or more), but those another user's post holds (the SemEval files hold one comment in
   several threads under several user ids, and a comment may quote another: the store keeps those). The data
   folder's backups folder is part of that: a store backup and an export are made through `POST /backups` before
   the erasure, and its job writes them again (`CQA_ERASE_BACKUPS=rewrite`, the default); the export is read unzipped.
4. **The ledger in action:** after the erasures, every thread the removed user wrote in is sent again through
   `POST /threads`, as a forum's sync would: what it stored and left out, and the user's posts after (none).

5. **`--kept-requests N`**: the copy's feedback log holds N searches' requests first (`CQA_FEEDBACK_QUERIES` on;
   `bench/kept_requests.py`'s log: the corpus's questions as the "ask" page searches them, over 30 days), so the
   erasure's answer includes its scan of them (`feedback_requests` in each 202). With `--against REV` too, the removal
   alone is sent to this tree's server and to one run from REV's code, each on a fresh copy of the same folder and
   log, one after the other, a client searching each without pause as in step 3: the answer's ms of each and their
   ratio, and the searches' ms before, while the answer was awaited, and through the job.

The writes of step 1 go to a third copy too, with `--erased-on-record` erasures and as many takedowns in its ledger,
and a fourth kind: a batch of 20 whole threads in one `upsert` (an import, a sync). `p50_ratio_ledger_on` is the
ledger's cost.

    python bench/erasure.py [--data-dir var/benchmarks/fullcorpus-2016] [--writes 60] [--remove U268] [--takedown ID]
        [--kept-requests 300000 [--against 3f3816a]]
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import platform
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from conditional_writes import TOKEN, call, quantiles  # noqa: E402
from kept_requests import fill_log  # noqa: E402
from load import reference_checkout, server  # noqa: E402

from indexing.ledger import record_takedown  # noqa: E402
from indexing.models import Answer  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402


ARMS = ("on", "off", "ledger")


def writes_side_by_side(store_file: Path, rounds: int, erased: int) -> dict:
    """The same writes to three copies of the store: ``on``, as shipped (``secure_delete`` on, no erasure on record);
    ``off``, with ``secure_delete`` off; ``ledger``, as shipped with ``erased`` users' erasures and ``erased``
    takedowns on record (ids no post carries, so every write looks its authors, thread and comments up in the ledger
    and finds nothing to change)."""
    with tempfile.TemporaryDirectory(prefix="cqa-erase-w-") as tmp:
        stores = {}
        for arm in ARMS:
            shutil.copy(store_file, Path(tmp) / f"{arm}.sqlite3")
            stores[arm] = ThreadStore(Path(tmp) / f"{arm}.sqlite3")
        stores["off"]._conn.execute("PRAGMA secure_delete=OFF")
        stores["ledger"].erase_authors([f"bench-erased-{i}" for i in range(erased)], remove=True)
        with stores["ledger"]._transaction() as cur:  # and as many takedowns, of threads and comments
            for i in range(erased):
                record_takedown(cur, f"bench-down-{i}", None if i % 2 else f"bench-down-c{i}", time.time())
        assert stores["on"]._conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
        ids = [r[0] for r in stores["on"]._conn.execute(
            "SELECT thread_id FROM answers GROUP BY thread_id HAVING COUNT(*) = 10 ORDER BY thread_id LIMIT ?",
            (rounds + 1,))]
        times = {f"{kind}/{arm}": [] for kind in KINDS for arm in ARMS}
        batch = [stores["on"].get(tid) for tid in ids[:BATCH]]  # what an import or a sync sends: threads at once
        for i, tid in enumerate(ids):
            for arm in ARMS[i % 3:] + ARMS[:i % 3]:  # each arm first every third round
                s = stores[arm]
                t0 = time.perf_counter()
                s.upsert_answers(tid, [Answer(id=f"bench-erase-{i}", text=f"round {i}: one more hint on {tid}")])
                t1 = time.perf_counter()
                thread = s.get(tid)
                t2 = time.perf_counter()
                s.upsert([thread.model_copy(update={"body": thread.body + f" (edited {i})"})])
                t3 = time.perf_counter()
                s.delete_answer(tid, f"bench-erase-{i}")
                t4 = time.perf_counter()
                s.upsert([t.model_copy(update={"body": t.body + f" (batch {i})"}) for t in batch])
                t5 = time.perf_counter()
                if i:  # the first round warms them up
                    times[f"comment/{arm}"].append(1000 * (t1 - t0))
                    times[f"thread/{arm}"].append(1000 * (t3 - t2))
                    times[f"delete/{arm}"].append(1000 * (t4 - t3))
                    times[f"batch/{arm}"].append(1000 * (t5 - t4))
        sizes = {arm: (Path(tmp) / f"{arm}.sqlite3").stat().st_size for arm in ARMS}
        for s in stores.values():
            s.close()
        copy = Path(tmp) / "vacuum.sqlite3"
        shutil.copy(store_file, copy)
        with ThreadStore(copy) as s:
            t0 = time.perf_counter()
            s.vacuum()
            vacuum_s = time.perf_counter() - t0
        sizes["vacuumed"] = copy.stat().st_size
    by = {k: quantiles(v) for k, v in times.items()}
    ratio = {kind: round(by[f"{kind}/on"]["p50_ms"] / by[f"{kind}/off"]["p50_ms"], 3) for kind in KINDS}
    ledger = {kind: round(by[f"{kind}/ledger"]["p50_ms"] / by[f"{kind}/on"]["p50_ms"], 3) for kind in KINDS}
    return {"rounds": len(ids) - 1, "batch_threads": BATCH, "erased_on_record": erased, "kinds": by,
            "p50_ratio_on_off": ratio, "p50_ratio_ledger_on": ledger, "bytes": sizes, "vacuum_s": round(vacuum_s, 2)}


KINDS = ("comment", "thread", "delete", "batch")
BATCH = 20  # threads in one ``upsert`` of the batch kind


def heaviest(store_file: Path, at_most: int, skip: set[str]) -> str:
    """The author of the most comments, at most ``at_most`` of them, not in ``skip``."""
    with sqlite3.connect(store_file) as c:
        rows = c.execute("SELECT author_id, COUNT(*) n FROM answers WHERE author_id IS NOT NULL GROUP BY author_id "
                         "HAVING n <= ? ORDER BY n DESC, author_id", (at_most,)).fetchall()
    return next(a for a, _ in rows if a not in skip)


def found(base: str, comments: list[tuple[str, str]]) -> int:
    """How many of the (id, text) comments come back in the top 10 of a /search for answers to their own text."""
    n = 0
    for cid, text in comments:
        s, _, out, _ = call("POST", base + "/search", {"question": {"body": text[:2000]}, "k": 10,
                                                        "target": "answers"})
        assert s == 200, out
        n += cid in {r["id"] for r in out["results"]}
    return n


def finished(base: str, job_id: str) -> dict:
    """The job ``job_id`` once it has ended, polled every 0.2 s."""
    while True:
        s, _, job, _ = call("GET", f"{base}/jobs/{job_id}")
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.2)


def held_elsewhere(store_file: Path, texts: list[str]) -> set[str]:
    """Those of ``texts`` some post the store at ``store_file`` still holds contains (another user's copy or
    quote): what an erasure or a takedown leaves in place."""
    with sqlite3.connect(store_file) as c:
        return {t for t in texts if c.execute(
            "SELECT 1 FROM answers WHERE instr(text, ?) > 0 UNION ALL SELECT 1 FROM threads "
            "WHERE instr(subject, ?) > 0 OR instr(body, ?) > 0 LIMIT 1", (t, t, t)).fetchone()}


def with_kept_requests(folder: Path, store_file: Path, n: int) -> None:
    """``n`` kept requests in ``folder``'s feedback log (``bench/kept_requests.py``'s ``fill_log``), the store's
    questions in turn."""
    with ThreadStore(store_file) as store:
        questions = [(t.author_id, t.subject, t.body) for t in store.iter_threads()]
    fill_log(folder / "feedback.sqlite3", questions, n, time.time())


class Searching:
    """A client searching ``base`` without pause from a thread while the block runs, each search's ms and failure
    filed under the ``phase`` it is in; entered once its first search has answered, so each phase the block sets
    after a pause finds one before it (on a loaded machine a search can take longer than the pause)."""

    def __init__(self, base: str, phase: str = "before"):
        self.phase = phase
        self.ms: dict[str, list[float]] = {}
        self.failed: dict[str, int] = {}
        self._stop = threading.Event()
        self._answered = threading.Event()
        self._thread = threading.Thread(target=self._search, args=(base,), daemon=True)

    def _search(self, base: str) -> None:
        q = {"question": {"body": "Where can I renew my residence permit and how long does it take?"}, "k": 10,
             "target": "answers"}
        while not self._stop.is_set():
            s, _, _, ms = call("POST", base + "/search", q)
            self.ms.setdefault(self.phase, []).append(ms)
            self.failed[self.phase] = self.failed.get(self.phase, 0) + (s != 200)
            self._answered.set()

    def __enter__(self) -> "Searching":
        self._thread.start()
        if not self._answered.wait(120):
            raise RuntimeError("the searching client's first search had no answer within 120 s")
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def figures(self) -> dict:
        return {k: {**quantiles(v), "failed": self.failed[k]} for k, v in self.ms.items() if v}


def removal_answer(folder: Path, env: dict[str, str], user: str, root: Path = ROOT, before_s: float = 3.0) -> dict:
    """``user``'s removal sent to a server run from the code at ``root`` on ``folder`` while a client searches it
    without pause (``Searching``): the 202's ms and what it reports, the job's seconds, and the searches' ms before,
    while the answer was awaited (``answer``) and through the job."""
    with server(folder, env, root=root) as (base, _), Searching(base) as client:
        time.sleep(before_s)
        client.phase = "answer"
        s, _, out, ms = call("POST", base + "/erasures", {"author_ids": [user], "content": "remove"})
        client.phase = "job"
        assert s == 202, out
        job = finished(base, out["job"]["id"])
        assert job["state"] == "succeeded", job
    return {"response_ms": round(ms, 1), "feedback_requests": out["erased"].get("feedback_requests"),
            "job_s": round(job["finished_at"] - job["started_at"], 2), "searches": client.figures()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016",
                    help="a data folder with a live generation (copied; the copy is served)")
    ap.add_argument("--writes", type=int, default=60, help="rounds of writes to each store copy")
    ap.add_argument("--erased-on-record", type=int, default=1000, help="erasures in the ledger arm's store")
    ap.add_argument("--remove", help="the author whose posts are removed (default: see above)")
    ap.add_argument("--anonymize", help="the author anonymized after (default: see above)")
    ap.add_argument("--before-s", type=float, default=10.0, help="seconds of searches timed before the erasure")
    ap.add_argument("--takedown", help="the thread deleted with purge at the end (default: of those the erased "
                    "users did not ask, the one with the most comments no other post repeats)")
    ap.add_argument("--kept-requests", type=int, default=0, help="searches' requests in the feedback log first")
    ap.add_argument("--against", help="with --kept-requests: the revision whose removal answer is timed beside")
    args = ap.parse_args()
    store_file = args.data_dir / "threads.sqlite3"
    if not store_file.is_file():
        raise SystemExit(f"{args.data_dir}: no store; python bench/rerank_quality.py builds the 2016 corpus's folder")
    writes = writes_side_by_side(store_file, args.writes, args.erased_on_record)
    for k, v in writes["kinds"].items():
        print(f"{k:14s} p50 {v['p50_ms']:7.2f} ms  p95 {v['p95_ms']:7.2f} ms", file=sys.stderr)
    removed_user = args.remove or heaviest(store_file, 200, set())
    anonymized_user = args.anonymize or heaviest(store_file, 200, {removed_user})
    with sqlite3.connect(store_file) as c:
        theirs = c.execute("SELECT id, text FROM answers WHERE author_id=? ORDER BY id", (removed_user,)).fetchall()
        asked = c.execute("SELECT COUNT(*) FROM threads WHERE author_id=?", (removed_user,)).fetchone()[0]
    with ThreadStore(store_file) as store:  # every thread they wrote in, as the forum still holds it
        resend = [json.loads(t.model_dump_json()) for t in store.iter_threads()
                  if removed_user in {t.author_id, *(a.author_id for a in t.answers)}]
    probe = theirs[:: max(1, len(theirs) // 30)][:30]
    if args.takedown is None:
        with sqlite3.connect(store_file) as c:
            args.takedown = c.execute(  # the thread with the most comments no other post repeats word for word
                "SELECT t.id FROM threads t JOIN answers a ON a.thread_id = t.id WHERE (t.author_id IS NULL OR "
                "t.author_id NOT IN (?, ?)) AND a.text IN (SELECT text FROM answers GROUP BY text HAVING COUNT(*) = 1) "
                "GROUP BY t.id ORDER BY COUNT(*) DESC, t.id LIMIT 1", (removed_user, anonymized_user)).fetchone()[0]
    env = {"CQA_API_TOKEN": TOKEN, **({"CQA_FEEDBACK_QUERIES": "true"} if args.kept_requests else {})}
    with tempfile.TemporaryDirectory(prefix="cqa-erase-") as tmp:
        folder = Path(tmp) / "data"
        shutil.copytree(args.data_dir, folder, ignore=shutil.ignore_patterns("reports", "jobs", "feedback.sqlite3*"))
        if args.kept_requests:
            with_kept_requests(folder, store_file, args.kept_requests)
        side_by_side = {}
        if args.kept_requests and args.against:
            with contextlib.ExitStack() as stack:
                sides = {"this_tree": ROOT, "reference": reference_checkout(stack, args.against, Path(tmp))}
                for side, root in sides.items():
                    fresh = Path(tmp) / f"{side}-data"
                    shutil.copytree(folder, fresh)
                    side_by_side[side] = removal_answer(fresh, env, removed_user, root, args.before_s)
                    shutil.rmtree(fresh)
            side_by_side["response_ratio"] = round(side_by_side["this_tree"]["response_ms"]
                                                   / side_by_side["reference"]["response_ms"], 3)
            side_by_side["job_ratio"] = round(side_by_side["this_tree"]["job_s"]
                                              / max(side_by_side["reference"]["job_s"], 0.01), 3)
            print(json.dumps(side_by_side), file=sys.stderr)
        with server(folder, env) as (base, ready):
            before_found = found(base, probe)
            backups = {}
            for kind in ("store", "export"):  # what the erasure's job writes again
                s, _, made, _ = call("POST", base + "/backups", {"kind": kind})
                assert s == 202, made
                backups[kind] = finished(base, made["job"]["id"])["result"]
            time.sleep(0.01)
            with Searching(base) as client:
                time.sleep(args.before_s)
                client.phase = "during"
                s, _, out, post_ms = call("POST", base + "/erasures", {"author_ids": [removed_user],
                                                                       "content": "remove"})
                assert s == 202, out
                t0 = time.perf_counter()
                job = finished(base, out["job"]["id"])
                job_s = time.perf_counter() - t0
            assert job["state"] == "succeeded", job
            # the feedback log as the job left it: the searches of the removed comments just below are new ones,
            # which it keeps (CQA_FEEDBACK_QUERIES); the takedown's texts are looked for in it at the end
            log_files_after_job = {p.name: p.read_bytes() for p in folder.glob("feedback.sqlite3*") if p.is_file()}
            log_after_job = b"".join(log_files_after_job.values())
            with sqlite3.connect(folder / "feedback.sqlite3") as c:  # what the log's rows still carry, as SQL reads it
                live_requests = [r for (r,) in c.execute("SELECT request FROM served WHERE request IS NOT NULL")]
            after_found = found(base, probe)
            s, _, anon, anon_ms = call("POST", base + "/erasures", {"author_ids": [anonymized_user],
                                                                     "content": "anonymize"})
            assert s == 202, anon
            anon_job = finished(base, anon["job"]["id"])
            assert anon_job["state"] == "succeeded", anon_job
            # the forum's sync sends every thread the removed user wrote in again, as the forum still holds them
            s, _, sync, sync_ms = call("POST", base + "/threads", {"threads": resend})
            assert s == 200, sync
            s, _, posts, _ = call("GET", f"{base}/authors/{removed_user}/posts")
            assert s == 200 and posts["posts"] == [], posts
            # a moderator's takedown of one whole thread: DELETE with purge
            s, _, thread, _ = call("GET", f"{base}/threads/{args.takedown}")
            assert s == 200, thread
            s, _, gone, takedown_ms = call("DELETE", f"{base}/threads/{args.takedown}?purge=true")
            assert s == 200, gone
            takedown_job = finished(base, gone["job"]["id"])
            assert takedown_job["state"] == "succeeded", takedown_job
            # the forum, which still holds the thread, sends it again: the takedown on record leaves it out
            s, _, again, again_ms = call("POST", base + "/threads", {"threads": [thread]})
            assert s == 200 and again["taken_down"] == [args.takedown] and again["inserted"] == 0, again
            s, _, _, _ = call("GET", f"{base}/threads/{args.takedown}")
            assert s == 404, s
        files = {p: gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
                 for p in folder.rglob("*") if p.is_file()}  # the backups folder's exports unzipped
        on_disk = b"".join(files.values())
        but_the_log = b"".join(v for p, v in files.items() if not p.name.startswith("feedback.sqlite3"))
        elsewhere = held_elsewhere(folder / "threads.sqlite3", [t for _, t in theirs])
        leaked = sum(text.encode() in but_the_log or text.encode() in log_after_job for _, text in theirs
                     if text not in elsewhere and len(text) >= 40)  # long enough not to be part of another text
        thread_texts = [thread["body"], *(a["text"] for a in thread["answers"])]
        held = held_elsewhere(folder / "threads.sqlite3", thread_texts)
        taken_down = [t for t in thread_texts if t not in held and len(t) >= 40]
        takedown_left = sum(t.encode() in on_disk for t in taken_down)
    assert after_found == 0, f"{after_found} removed comments still found"
    assert leaked == 0, f"{leaked} removed comments' texts are still on disk: " + repr(
        [(t[:80], [p.name for p, v in files.items() if t.encode() in v],
          {"log after the job": [(n, v.find(t.encode()) // 4096) for n, v in log_files_after_job.items()
                                 if t.encode() in v],  # (file, page)
           "in a row's request": any(json.dumps(t)[1:-1] in r for r in live_requests)})
         for _, t in theirs if t not in elsewhere and len(t) >= 40
         and (t.encode() in but_the_log or t.encode() in log_after_job)])
    assert takedown_left == 0, f"{takedown_left} texts of the thread taken down are still on disk"
    erasure = {"kept_requests": args.kept_requests, "against": args.against, "side_by_side": side_by_side,
               "removed": {"comments": len(theirs), "threads_asked": asked, "response_ms": round(post_ms, 1),
                           "erased": out["erased"], "job_s": round(job_s, 2), "job": job["result"],
                           "probe": len(probe), "found_before": before_found, "found_after": after_found,
                           "held_by_other_comments": len(elsewhere), "texts_on_disk_after": leaked,
                           "backups_made_before": {k: {"bytes": v["bytes"], "seconds": v["seconds"]}
                                                   for k, v in backups.items()}},
               "sync_again": {"threads": len(resend), "response_ms": round(sync_ms, 1),
                              **{k: sync[k] for k in ("inserted", "updated", "unchanged")},
                              "suppressed": len(sync["suppressed"]), "answers_suppressed": sync["answers_suppressed"],
                              "posts_left": len(posts["posts"])},
               "anonymized": {"response_ms": round(anon_ms, 1), "erased": anon["erased"],
                              "job_s": round(anon_job["finished_at"] - anon_job["started_at"], 2)},
               "takedown": {"thread": args.takedown, "comments": len(thread["answers"]), "response_ms":
                            round(takedown_ms, 1), "feedback_requests": gone.get("feedback_requests"),
                            "job_s": round(takedown_job["finished_at"]
                                                                  - takedown_job["started_at"], 2),
                            "texts_checked": len(taken_down), "texts_on_disk_after": takedown_left,
                            "sent_again": {"response_ms": round(again_ms, 1), "taken_down": len(again["taken_down"]),
                                           "inserted": again["inserted"]}},
               "searches": client.figures()}
    print(json.dumps(erasure["searches"]), file=sys.stderr)
    print(json.dumps({"bench": "erasure", "data_dir": str(args.data_dir), "generation": ready.get("generation"),
                      "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d"), "writes": writes, **erasure}))


if __name__ == "__main__":
    main()
