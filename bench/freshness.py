"""How soon a forum's new thread is found by POST /search, and a deleted one no longer, with the automatic refresh
($CQA_REFRESH_S) and nothing else: no POST /reindex, no `cqa reindex`. A real `cqa serve` over a copy of the full 2016
corpus; each new thread is a 2016 test original question (not in the corpus), POSTed to /threads, then searched for
with its own text every 0.25 s until the first stage shows it (target questions, k 10, "rerank": false: what the live
generation indexes; a result or folded into one), and then once reranked, as /search shows it by default
(`reranked_shows`: a new thread has no comments yet, which the reranker weighs). Three kinds of change:

- quiet: the store has been quiet for $CQA_REFRESH_S since the last build, so the refresh starts at once;
- right after: posted as soon as the previous build ended, so it waits for the gap first (``gap_after_s`` of the
  previous trial: $CQA_REFRESH_S, or less while builds are short, $CQA_REFRESH_DUTY);
- answer: a new comment (a 2015 test comment, which the 2016 corpus does not hold) added to a thread posted before
  (POST /threads with the thread and its comments), searched for with its own text (target answers, "rerank": false)
  until it shows: a new comment changes IBM Model 1's training pairs, so its build keeps the live translation table
  (while at most $CQA_TRANSLATION_RETRAIN_CHANGED of them changed since it was trained) or trains it again;
- delete: DELETE /threads/{id} of a thread found before, searched for until it no longer shows.

With --answer-via thread,answers each new comment is sent both ways in turn, side by side on one server: "thread"
POSTs the whole thread to /threads, "answers" POSTs the comment alone to /threads/{id}/answers. With
--answered-comments K the comments go to a thread that already has K (posted and indexed before the trials, untimed):
a long thread, whose whole-thread POST holds more texts than $CQA_ENCODE_AHEAD_TEXTS, so its build encodes them.

Meanwhile one client sends POST /search (target answers, reranked: the heaviest search) one after another, 0.25 s
apart, and its latency is reported split by whether an automatic build was running (the jobs' start and end, GET
/jobs/{id}), side by side in one run. With --nice-levels each level ($CQA_REFRESH_NICE), and with
--encode-ahead-levels each $CQA_ENCODE_AHEAD_TEXTS (0: POST /threads leaves every text to the build, which then loads
the encoders), and with --translation-later-levels each $CQA_REFRESH_TRANSLATION_LATER (1: a build whose
question-answer pairs changed goes live before it trains the translation table, then publishes again with it; 0: one
generation, after training), and with --retrain-levels each $CQA_TRANSLATION_RETRAIN_CHANGED (0: a build trains the
table whenever a pair changed), and with --duty-levels each $CQA_REFRESH_DUTY (0: a change right after a build waits
out $CQA_REFRESH_S; 0.2: four times the last build's length, at most that), and with --prestart-levels each
$CQA_REFRESH_PRESTART (1: the next build's process waits started, its imports done; 0: started when a build is due),
gets its own server in turn, side by side
in one run. Each trial says how many texts its
build encoded, and whether and when it went live before the translation table was trained. Prints a JSON object last.

    python bench/freshness.py --data-dir /tmp/cqa-full --quiet 3 --right-after 1 --answers 2 --encode-ahead-levels 32,0
    python bench/freshness.py --data-dir /tmp/cqa-full --quiet 1 --right-after 0 --answers 3 --translation-later-levels 1,0
    python bench/freshness.py --data-dir /tmp/cqa-full --quiet 1 --right-after 0 --answers 3 --no-delete \
        --answer-via thread,answers --answered-comments 30

--data-dir is the data folder `cqa evaluate` uses: its corpus (DATA/benchmarks/fullcorpus-2016, built if missing) is
copied to a temporary folder for each server; the corpus itself is not changed.

With --copies N the servers serve a forum N times the corpus's size: a copy of its store grown by N - 1 copies of
itself under new ids (as bench/store_scale.py grows it), built once by a full `reindex` (above
$CQA_DENSE_EXACT_MAX_DOCS documents its dense index is HNSW) and copied for each server. With --grow-levels each
$CQA_DENSE_GROW (1: a build grows the live HNSW index; 0: builds it anew) gets its own server:

    python bench/freshness.py --data-dir /tmp/cqa-full --copies 10 --quiet 1 --right-after 0 --answers 2 --grow-levels 1,0
"""
from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import PacedClient, get_json, post_json, renamed, server, split_latency  # noqa: E402
from similar_quality import shows  # noqa: E402

TOKEN = "freshness-bench"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
POLL_S = 0.25


def refresh_state(base: str) -> dict:
    return get_json(base + "/ready")[1]["refresh"]


def wait_for(predicate, timeout: float) -> float:
    """Seconds until ``predicate()`` holds, polled every POLL_S; raises after ``timeout``."""
    t0 = time.perf_counter()
    while not predicate():
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(f"not within {timeout} s")
        time.sleep(POLL_S)
    return time.perf_counter() - t0


def found(base: str, thread_id: str, subject: str, body: str, rerank: bool = False) -> bool:
    """Whether /search (target questions, k 10) shows the thread, a result or folded into one: by the first stage
    (what the live generation indexes), or with ``rerank`` as shown by default."""
    status, out = post_json(base + "/search", {"question": {"subject": subject, "body": body}, "k": 10,
                                               "target": "questions", "rerank": rerank})
    if status != 200:
        raise SystemExit(f"POST /search answered {status}: {out}")
    return shows(out["results"], thread_id)


def idle(base: str, interval: float) -> None:
    """Until no automatic build runs and the last ended at least ``interval`` s ago."""
    def quiet():
        r = refresh_state(base)
        return r["last_outcome"] != "running" and time.time() - (r["last_finished_at"] or 0) >= interval
    wait_for(quiet, 3 * interval + 600)


def answer_found(base: str, answer_id: str, text: str, rerank: bool = False) -> bool:
    """Whether /search (target answers, k 10) asked with a comment's own text shows that comment: by the first stage,
    or with ``rerank`` as shown by default."""
    status, out = post_json(base + "/search", {"question": {"body": text}, "k": 10, "target": "answers",
                                               "rerank": rerank})
    if status != 200:
        raise SystemExit(f"POST /search answered {status}: {out}")
    return any(answer_id in (r["id"], *r["duplicates"]) for r in out["results"])


def trial(base: str, kind: str, thread_id: str, subject: str, body: str, timeout: float,
          answers: list[dict] | None = None, via: str = "thread") -> dict:
    """One change: how long its request took, and the seconds from its acknowledgement until /search shows it (or,
    deleted, no longer). An "answer" trial sends ``answers``' last, the new one: ``via`` "thread" posts the thread with
    all of them to /threads, "answers" posts it alone to /threads/{id}/answers."""
    before = refresh_state(base)["last_job"]
    t0 = time.perf_counter()
    if kind == "delete":
        req = urllib.request.Request(f"{base}/threads/{thread_id}", method="DELETE", headers=ADMIN)
        status, out = get_json(req)
    elif kind == "answer" and via == "answers":
        status, out = post_json(f"{base}/threads/{thread_id}/answers", {"answers": answers[-1:]}, headers=ADMIN)
    else:
        thread = {"id": thread_id, "subject": subject, "body": body, "answers": answers or []}
        status, out = post_json(base + "/threads", {"threads": [thread]}, headers=ADMIN)
    request_ms = 1000 * (time.perf_counter() - t0)
    if status != 200:
        raise SystemExit(f"{kind} of {thread_id} answered {status}: {out}")
    if kind == "answer":
        seconds = wait_for(lambda: answer_found(base, answers[-1]["id"], answers[-1]["text"]), timeout)
    else:
        seconds = wait_for(lambda: found(base, thread_id, subject, body) == (kind != "delete"), timeout)
    def built() -> bool:  # the build the change started has ended (a deleted post leaves /search before it starts)
        r = refresh_state(base)
        return r["last_job"] != before and r["last_outcome"] != "running"
    wait_for(built, timeout)
    state = refresh_state(base)
    job_id, gap_after = state["last_job"], state["gap_s"]
    job = get_json(f"{base}/jobs/{job_id}")[1]
    result = job.get("result") or {}
    table = result.get("indexes", {}).get("translation") or {}
    return {"kind": kind, "thread": thread_id, "request_ms": round(request_ms, 1),
            **({"via": via, "thread_comments": len(answers) - 1} if kind == "answer" else {}),
            "seconds_to_search": round(seconds, 2),
            "reranked_shows": (answer_found(base, answers[-1]["id"], answers[-1]["text"], rerank=True)
                               if kind == "answer" else found(base, thread_id, subject, body, rerank=True)),
            "job": job_id,
            "job_started_at": job["started_at"], "job_finished_at": job["finished_at"],
            "job_seconds": round(job["finished_at"] - job["started_at"], 2), "build_seconds": result.get("seconds"),
            "gap_after_s": gap_after,
            "encoded": (result.get("indexes", {}).get("dense") or {}).get("encoded"),
            "dense": {k: v for k, v in (result.get("indexes", {}).get("dense") or {}).items()
                      if k in ("built", "grown_from", "added", "removed_rows", "seconds")},
            "answers_encoded": (result.get("indexes", {}).get("answer_vectors") or {}).get("encoded"),
            "answer_vectors": {k: v for k, v in (result.get("indexes", {}).get("answer_vectors") or {}).items()
                               if k in ("base", "added", "dead", "seconds")},
            "translation": ("copied" if "reused_from" in table
                            else "trained after going live" if "trained_after" in table
                            else "kept" if "carried_from" in table else "trained"),
            "translation_changed_pairs": table.get("changed_pairs"),
            "live_before_translation_s": (result.get("live_before_translation") or {}).get("seconds"),
            "served_before_translation": result.get("served_before_translation") is not None,
            "child": result.get("child"), "outcome": job["state"]}


def long_thread(base: str, new: tuple[str, str, str], comments: list[str], n: int, added: list[dict],
                timeout: float) -> tuple[str, str, str]:
    """A new thread with ``n`` comments (``comments``' first, recorded in ``added``), posted and waited for until its
    last comment shows: the thread the answer trials then add to. Untimed."""
    thread_id, subject, body = new
    added.extend({"id": f"{thread_id}_C{i + 1}", "text": comments[i]} for i in range(n))
    status, out = post_json(base + "/threads", {"threads": [{"id": thread_id, "subject": subject, "body": body,
                                                             "answers": added}]}, headers=ADMIN)
    if status != 200:
        raise SystemExit(f"the long thread {thread_id} answered {status}: {out}")
    wait_for(lambda: answer_found(base, added[-1]["id"], added[-1]["text"]), timeout)
    return new


def grown_corpus(corpus: Path, copies: int, folder: Path) -> dict:
    """The corpus's data folder copied to ``folder``, its store grown to ``copies`` times its threads (whole copies
    under new ids) and built into a generation (the only one kept). Returns the build's summary."""
    from app.settings import Settings
    from indexing.generations import prune
    from indexing.reindex import reindex
    from indexing.store import ThreadStore
    shutil.copytree(corpus, folder)
    with ThreadStore(folder / "threads.sqlite3") as store:
        originals = list(store.iter_threads())
        for k in range(1, copies):
            store.upsert(renamed(t, str(k)) for t in originals)
    settings = Settings(data_dir=folder)
    built = reindex(settings, progress=True)
    prune(settings.index_root, 1)
    return built


@dataclass(frozen=True)
class Levels:
    """One server's settings among those compared side by side (each a ``LEVEL_OPTIONS`` entry)."""
    refresh_nice: int
    encode_ahead_texts: int
    refresh_translation_later: bool
    dense_grow: bool
    translation_retrain_changed: float
    refresh_duty: float
    refresh_prestart: bool

    def env(self) -> dict[str, str]:
        return {f"CQA_{name.upper()}": str(int(v) if isinstance(v, bool) else v) for name, v in asdict(self).items()}


# option -> the setting (a Levels field) whose values it lists, and how to read one
LEVEL_OPTIONS = {"nice_levels": ("refresh_nice", int), "encode_ahead_levels": ("encode_ahead_texts", int),
                 "translation_later_levels": ("refresh_translation_later", lambda x: bool(int(x))),
                 "grow_levels": ("dense_grow", lambda x: bool(int(x))),
                 "retrain_levels": ("translation_retrain_changed", float),
                 "duty_levels": ("refresh_duty", float),
                 "prestart_levels": ("refresh_prestart", lambda x: bool(int(x)))}


def server_levels(args, defaults) -> list[Levels]:
    """Every combination of the levels the options list, each option's setting at its default when not given."""
    values = {field: [read(x) for x in getattr(args, option).split(",")] if getattr(args, option)
              else [defaults[field].default] for option, (field, read) in LEVEL_OPTIONS.items()}
    return [Levels(**dict(zip(values, combo))) for combo in itertools.product(*values.values())]


def run_server(corpus: Path, levels: Levels, refresh_s: float, plan: list[str], news: list[tuple[str, str, str]],
               comments: list[str], load_questions: list[str], timeout: float, vias: list[str] = ("thread",),
               answered_comments: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="cqa-fresh-") as tmp:
        folder = Path(tmp) / "data"
        shutil.copytree(corpus, folder)
        env = {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": str(refresh_s), **levels.env()}
        with server(folder, env) as (base, ready):
            post_json(base + "/search", {"question": {"body": "warm up"}, "target": "answers"})
            def search(i):
                body = {"question": {"body": load_questions[i % len(load_questions)]}, "k": 10, "target": "answers"}
                return post_json(base + "/search", body)[0]
            searches = PacedClient(search, POLL_S)
            searches.start()
            trials, posted, added, via = [], iter(news), [], itertools.cycle(vias)
            first = last = answered = None
            try:
                for kind in plan:
                    if kind == "answer" and answered is None:
                        # the latest new thread, so the delete's thread stays unanswered; or a long one, posted now
                        answered = last if not answered_comments else long_thread(base, news[-1], comments,
                                                                                  answered_comments, added, timeout)
                    if kind != "right-after":
                        idle(base, refresh_s)
                    if kind == "delete":
                        t = trial(base, kind, *first, timeout)
                    elif kind == "answer":
                        added.append({"id": f"{answered[0]}_C{len(added) + 1}", "text": comments[len(added)]})
                        t = trial(base, kind, *answered, timeout, answers=added, via=next(via))
                    else:
                        last = next(posted)
                        first = first or last
                        t = trial(base, kind, *last, timeout)
                    trials.append(t)
                    print(json.dumps({**asdict(levels), **t}), file=sys.stderr, flush=True)
                time.sleep(5)  # searches after the last build, for the no-build side
            finally:
                searches.stop.set()
                searches.join()
            builds = [(t["job_started_at"], t["job_finished_at"]) for t in trials]
            return {**asdict(levels), "refresh_s": refresh_s, "generation_at_start": ready["generation"],
                    "documents_at_start": ready.get("sizes", {}).get("documents"),
                    "trials": trials,
                    "search_latency": split_latency(searches.samples, builds, "during_build", "no_build")}


def summary(trials: list[dict]) -> dict:
    import numpy as np
    out = {}
    for kind in ("quiet", "right-after", "answer", "delete"):
        for via in ((None, "thread", "answers") if kind == "answer" else (None,)):
            some = [t for t in trials if t["kind"] == kind and via in (None, t.get("via"))]
            s = [t["seconds_to_search"] for t in some]
            if s:
                out[kind if via is None else f"answer via {via}"] = {
                    "n": len(s), "p50_s": round(float(np.percentile(s, 50)), 2), "max_s": max(s),
                    "request_ms_p50": round(float(np.percentile([t["request_ms"] for t in some], 50)), 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--quiet", type=int, default=3, help="new threads posted to a quiet store")
    ap.add_argument("--right-after", type=int, default=1, help="new threads posted right after a build ended")
    ap.add_argument("--answers", type=int, default=2, help="new comments added, one by one, to a thread posted before")
    ap.add_argument("--no-delete", action="store_true", help="skip the delete trial")
    ap.add_argument("--answer-via", default="thread", help="how each new comment is sent, comma-separated, in turn: "
                    "thread (POST /threads with the whole thread), answers (POST /threads/{id}/answers, the comment "
                    "alone); --answers comments each way")
    ap.add_argument("--answered-comments", type=int, default=0, help="the comments go to a thread that already has "
                    "this many, posted and indexed before the trials (0: the latest new thread, with none)")
    ap.add_argument("--refresh-s", type=float, default=None, help="CQA_REFRESH_S (default: the setting's default)")
    ap.add_argument("--nice-levels", default=None, help="CQA_REFRESH_NICE per server, comma-separated (default: the "
                    "setting's default)")
    ap.add_argument("--encode-ahead-levels", default=None, help="CQA_ENCODE_AHEAD_TEXTS per server, comma-separated "
                    "(default: the setting's default); each with each nice level")
    ap.add_argument("--translation-later-levels", default=None, help="CQA_REFRESH_TRANSLATION_LATER per server, "
                    "comma-separated 1 or 0 (default: the setting's default); each with each other level")
    ap.add_argument("--grow-levels", default=None, help="CQA_DENSE_GROW per server, comma-separated 1 or 0 "
                    "(default: the setting's default); each with each other level")
    ap.add_argument("--retrain-levels", default=None, help="CQA_TRANSLATION_RETRAIN_CHANGED per server, "
                    "comma-separated (default: the setting's default); each with each other level")
    ap.add_argument("--duty-levels", default=None, help="CQA_REFRESH_DUTY per server, comma-separated (0: a change "
                    "right after a build waits the whole interval)")
    ap.add_argument("--prestart-levels", default=None, help="CQA_REFRESH_PRESTART per server, comma-separated 1 or "
                    "0 (0: each build's process started when the build is due)")
    ap.add_argument("--copies", type=int, default=1, help="serve a store this many times the corpus's (whole copies "
                    "under new ids), built once before the servers start")
    ap.add_argument("--timeout", type=float, default=900, help="longest wait for one change, in seconds")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.catalog import TEST_2015
    from indexing.loaders import load_semeval
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    from ranking.search_benchmark import qrels_for

    defaults = Settings.model_fields
    refresh_s = args.refresh_s if args.refresh_s is not None else defaults["refresh_s"].default
    servers = server_levels(args, defaults)
    settings = Settings(data_dir=args.data_dir)
    ensure_corpus(settings, progress=True)
    _, test = qrels_for(settings, "test", "questions")
    _, dev = qrels_for(settings, "dev", "questions")
    if args.answers and not args.quiet:
        raise SystemExit("--answers needs a thread to answer: --quiet 1 or more")
    vias = args.answer_via.split(",")
    if not set(vias) <= {"thread", "answers"}:
        raise SystemExit(f"--answer-via: thread or answers, not {args.answer_via!r}")
    plan = (["quiet"] * args.quiet + ["right-after"] * args.right_after + ["answer"] * (args.answers * len(vias))
            + ([] if args.no_delete else ["delete"]))
    need = args.quiet + args.right_after + (1 if args.answered_comments else 0)
    per_server = args.answered_comments + args.answers * len(vias)
    comments = [a.text for t in load_semeval(settings.semeval_dir / TEST_2015, strict=True).threads for a in t.answers
                if len(a.text) >= 80]
    out = {"bench": "freshness", "refresh_s": refresh_s, "plan": plan, "copies": args.copies,
           "answer_via": vias, "answered_comments": args.answered_comments, "servers": []}
    corpus = corpus_settings(settings).data_dir
    with tempfile.TemporaryDirectory(prefix="cqa-fresh-grown-") as grown:  # removed even when a server fails
        if args.copies > 1:
            built = grown_corpus(corpus, args.copies, Path(grown) / "data")
            corpus = Path(grown) / "data"
            out["grown_build"] = {"threads": built["threads"], "documents": built["documents"],
                                  "seconds": built["seconds"], "dense": built["indexes"]["dense"]}
        for n, levels in enumerate(servers):
            # each server its own new threads and comments, so none is found because an earlier server's copy held it
            news = [(f"fresh-{qid}", subject, body)
                    for qid, (subject, body) in list(test.items())[n * need:(n + 1) * need]]
            load_questions = [f"{subject} {body}" for subject, body in dev.values()]
            result = run_server(corpus, levels, refresh_s, plan, news,
                                comments[n * per_server:(n + 1) * per_server], load_questions, args.timeout, vias,
                                args.answered_comments)
            result["summary"] = summary(result["trials"])
            out["servers"].append(result)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
