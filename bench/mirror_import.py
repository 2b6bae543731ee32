"""A forum re-imported from its site's next data dump: `cqa ingest DUMP --mirror` beside `cqa ingest DUMP` (the
reference), each run as a user runs it into a copy of the same data folder that a real `cqa serve` (automatic refresh
on) is serving, and what that server's POST /search shows once its refresh took the change in.

The forum as served last week: the 2016 corpus (3,869 threads) written as a StackExchange dump
(scripts/make_stackexchange_dump.py), ingested into a copy of the corpus's data folder and built (`cqa reindex`, its
texts in the embedding cache already), plus --forum threads posted to the server through POST /threads after the dump
was made (dated now: the forum's own), and as many comments on other threads of the dump (POST
/threads/{id}/answers). The site's next dump: the same less --share of its questions (removed on the
site), with the first answer of as many other threads removed and as many other questions edited (seeded). Then, in
each copy:
- POST /search (target questions, k 10, first stage: what the live generation indexes) asked with each removed
  question's own subject and body, and with each forum thread's: how many it shows, before and after; each forum
  comment: whether GET /threads/{id} holds it, and whether POST /search (target answers) asked with its text shows it;
- the ingest's wall time, and the seconds from its end until the server's refresh has built what it wrote;
- each edited question asked by its new text alone after: how many it shows.
The two ingests' wall times are also taken without a server, --repeats times each in turn (the order alternating),
each into a fresh copy of last week's store alone; the fastest of each is kept. Prints a JSON object last.

    python bench/mirror_import.py [--data-dir var] [--share 0.01] [--forum 5] [--seed 13] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from freshness import ADMIN, TOKEN, answer_found, found, refresh_state, wait_for  # noqa: E402
from load import get_json, post_json, server  # noqa: E402

EDIT = "Edited: the form is now filed online through the ministry portal, not at the counter."


def next_dump(threads: list, share: float, seed: int, commented: int) -> tuple[list, dict[str, list]]:
    """The site's next dump's threads, and the threads removed, edited and cut (their first answer removed), and
    ``commented`` others (which the forum comments on after the dump was made)."""
    rng = random.Random(seed)
    n = max(1, round(share * len(threads)))
    picked = rng.sample(range(len(threads)), 3 * n + commented)
    removed, edited, cut = (set(picked[i * n:(i + 1) * n]) for i in range(3))
    out, changes = [], {"removed": [], "edited": [], "cut": [], "commented": [threads[i] for i in picked[3 * n:]]}
    for i, t in enumerate(threads):
        if i in removed:
            changes["removed"].append(t)
            continue
        if i in edited:
            t = t.model_copy(update={"body": f"{t.body}\n\n{EDIT}"})
            changes["edited"].append(t)
        elif i in cut and t.answers:
            t = t.model_copy(update={"answers": t.answers[1:]})
            changes["cut"].append(t)
        out.append(t)
    return out, changes


def caught_up(base: str, since: float) -> bool:
    """Whether the server's refresh has built (or found built) everything the store held at ``since``."""
    r = refresh_state(base)
    return (r["last_outcome"] in ("built", "skipped") and (r["last_finished_at"] or 0) > since
            and not (r["pending"] and r["behind"] == "store"))


def shown(base: str, threads: list) -> int:
    return sum(found(base, t.id, t.subject, t.body) for t in threads)


def ingest(folder: Path, dump: Path, mirror: bool) -> tuple[float, dict]:
    """`cqa ingest DUMP -q [--mirror]` into ``folder`` as a user runs it: wall seconds and its summary line."""
    cmd = [sys.executable, "-m", "app.cli", "ingest", str(dump), "-q"] + (["--mirror"] if mirror else [])
    t0 = time.perf_counter()
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "CQA_DATA_DIR": str(folder), "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:])} failed ({run.returncode}): {run.stderr[-2000:]}")
    return seconds, json.loads(run.stdout.strip().splitlines()[-1])


def last_week(corpus: Path, folder: Path, threads: list) -> float:
    """The corpus's folder copied, its threads ingested from a dump and built: the forum as a dump import serves it.
    Returns the build's seconds."""
    from scripts.make_stackexchange_dump import write_dump
    shutil.copytree(corpus, folder)
    write_dump(threads, folder.parent / "week1")
    seconds, summary = ingest(folder, folder.parent / "week1", mirror=False)
    print(json.dumps({"last week's dump": {k: summary[k] for k in ("threads", "updated", "unchanged")},
                      "seconds": round(seconds, 1)}), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "app.cli", "reindex", "-q"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "CQA_DATA_DIR": str(folder), "PYTHONPATH": str(ROOT)})
    return round(time.perf_counter() - t0, 1)


def timed(prepared: Path, tmp: Path, dump: Path, repeats: int) -> dict:
    """Both ingests, ``repeats`` times each in turn, each into a fresh copy of ``prepared``'s store alone."""
    runs: dict[str, list[float]] = {"plain": [], "mirror": []}
    for r in range(repeats):
        for mirror in ((False, True) if r % 2 == 0 else (True, False)):
            folder = tmp / f"timed-{r}-{int(mirror)}"
            folder.mkdir()
            for f in prepared.glob("threads.sqlite3*"):  # the store and its write-ahead log, if one is left
                shutil.copy2(f, folder / f.name)
            runs["mirror" if mirror else "plain"].append(ingest(folder, dump, mirror)[0])
            shutil.rmtree(folder)
    best = {k: round(min(v), 2) for k, v in runs.items()}
    return {"runs_s": {k: [round(x, 2) for x in v] for k, v in runs.items()}, "best_s": best,
            "ratio_mirror_vs_plain": round(best["mirror"] / best["plain"], 2)}


def comments_held(base: str, comments: dict[str, dict]) -> int:
    """How many of the forum's ``comments`` (by thread id) GET /threads/{id} holds."""
    held = 0
    for tid, c in comments.items():
        status, t = get_json(f"{base}/threads/{tid}")
        held += status == 200 and any(a["id"] == c["id"] for a in t["answers"])
    return held


def comments_shown(base: str, comments: dict[str, dict]) -> int:
    """How many of the forum's ``comments`` POST /search (target answers, k 10, first stage) shows, asked with its
    text."""
    return sum(answer_found(base, c["id"], c["text"]) for c in comments.values())


def one_copy(corpus: Path, folder: Path, dump: Path, changes: dict, forum: list, comments: dict[str, dict],
             mirror: bool) -> dict:
    """A copy of ``corpus`` served; the forum's threads and comments posted; the dump ingested (with ``mirror`` or
    not); what /search shows before and after."""
    shutil.copytree(corpus, folder)
    env = {"CQA_API_TOKEN": TOKEN, "CQA_REFRESH_S": "2", "CQA_GENERATION_POLL_S": "0.5"}
    out: dict = {"mirror": mirror}
    with server(folder, env) as (base, _ready):
        status, body = post_json(base + "/threads", {"threads": [t.model_dump() for t in forum]}, headers=ADMIN)
        if status != 200:
            raise SystemExit(f"POST /threads answered {status}: {body}")
        for tid, c in comments.items():
            status, body = post_json(f"{base}/threads/{tid}/answers", {"answers": [c]}, headers=ADMIN)
            if status != 200:
                raise SystemExit(f"POST /threads/{tid}/answers answered {status}: {body}")
        posted = time.time()
        wait_for(lambda: caught_up(base, posted) and shown(base, forum[:1]) == 1, 600)
        out["before"] = {"removed_shown": shown(base, changes["removed"]), "forum_shown": shown(base, forum),
                         "forum_comments_held": comments_held(base, comments),
                         "forum_comments_shown": comments_shown(base, comments)}
        seconds, summary = ingest(folder, dump, mirror)
        out["ingest_seconds"] = round(seconds, 2)
        done = time.time()
        out["ingest"] = {k: summary.get(k) for k in ("threads", "answers", "inserted", "updated", "unchanged", "mirror")
                         if k in summary}
        out["ingest"]["store"] = summary["store"]
        out["seconds_to_searchable"] = round(wait_for(lambda: caught_up(base, done), 600), 2)
        edited_alone = [t.model_copy(update={"subject": "", "body": EDIT + " " + t.subject}) for t in changes["edited"]]
        out["after"] = {"removed_shown": shown(base, changes["removed"]), "forum_shown": shown(base, forum),
                        "forum_comments_held": comments_held(base, comments),
                        "forum_comments_shown": comments_shown(base, comments),
                        "edited_shown_by_new_text": shown(base, edited_alone)}
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="where the 2016 corpus's folder is (built "
                    "if missing)")
    ap.add_argument("--share", type=float, default=0.01, help="the share of questions removed (and of questions "
                    "edited, and of threads that lose an answer) in the next dump")
    ap.add_argument("--forum", type=int, default=5, help="threads the forum got after the dump was made")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each ingest without a server")
    args = ap.parse_args()

    from app.settings import Settings
    from indexing.models import Answer, Thread
    from indexing.store import Snapshot
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    from scripts.make_stackexchange_dump import write_dump

    settings = Settings(data_dir=args.data_dir)
    ensure_corpus(settings, progress=True)
    corpus = corpus_settings(settings).data_dir
    with Snapshot(corpus / "threads.sqlite3") as snap:
        threads = list(snap.threads())
    dumped, changes = next_dump(threads, args.share, args.seed, args.forum)
    now = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    forum = [Thread(id=f"forum-{i}", subject=f"Night bus {i} from the airport to Al Sadd after midnight",
                    body=f"Does route {i} still run after midnight, and where does it stop near Al Sadd?",
                    created_at=now, answers=[Answer(id=f"forum-{i}_c1", text="Yes, every 40 minutes.", created_at=now)])
             for i in range(1, args.forum + 1)]
    comments = {t.id: {"id": f"forum-reply-{i}", "text": f"An update on {t.subject.strip()[:80]!r}: since this "
                       "month it is done online, and the office near the Corniche no longer takes the papers.",
                       "created_at": now}
                for i, t in enumerate(changes["commented"], start=1)}
    out: dict = {"bench": "mirror_import", "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or
                 platform.machine(), "cpus": os.cpu_count(), "threads": len(threads), "next_dump": {
                     "threads": len(dumped), **{k: len(v) for k, v in changes.items() if k != "commented"}},
                 "forum_threads": len(forum), "forum_comments": len(comments)}
    with tempfile.TemporaryDirectory(prefix="cqa-mirror-") as tmp:
        prepared = Path(tmp) / "last-week" / "data"
        out["last_week_build_seconds"] = last_week(corpus, prepared, threads)
        dump = Path(tmp) / "dump"
        write_dump(dumped, dump)
        out["timed"] = timed(prepared, Path(tmp), dump, args.repeats)
        print(json.dumps({"timed": out["timed"]}), file=sys.stderr, flush=True)
        out["cqa_ingest"] = one_copy(prepared, Path(tmp) / "plain", dump, changes, forum, comments, mirror=False)
        out["cqa_ingest_mirror"] = one_copy(prepared, Path(tmp) / "mirrored", dump, changes, forum, comments,
                                            mirror=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
