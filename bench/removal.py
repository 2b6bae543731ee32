"""What POST /search shows between a post's removal and the build that drops it from the indexes (round 66).

A moderator deletes a comment or a thread (DELETE /threads/{id}/answers/{aid}, DELETE /threads/{id}), a takedown or
an erasure removes posts: the store no longer holds them at once, but the live index generation does until the next
build (the automatic refresh's, seconds to minutes on a large forum; a takedown's or an erasure's job, which builds
from scratch). Before round 66 a search in that window still showed them, with the text the generation holds; since,
each search checks the results it shows against the store (``SearchPipeline.held_groups``).

Two real `cqa serve` processes, each over its own copy of the full 2016 corpus's data folder, the automatic refresh
off (CQA_REFRESH_S=0) so that no build closes the window while it is measured: ``reference`` (the revision --against,
from a git worktree) and ``this`` (this tree). Both are asked the same requests in turns, one at a time, the order
rotating:

1. ``clean``: each 2016 --split question of the answers /search benchmark (target answers, reranked, k 10, as a forum
   sends it), --rounds times, before anything is removed: latency per side and the p50's ratio, and whether every
   question showed the same results (nothing removed: the check must change nothing).
2. ``removals``: for each of the first --trials questions, the question is searched, then changed the same way on
   both servers, in turn: the first result's comment deleted; the second result's whole thread deleted; the first
   result's comment edited (sent again with another text, as a moderator's edit: POST /threads/{id}/answers). Then
   the question is searched again. Per side:
   - how many of those searches still showed a post removed (by that trial or an earlier one: as a result or as a
     copy folded into one), and how many showed an edited comment with its text from before the edit;
   - their latency, and the server's own ``timings_ms``;
   - whether this tree's results were the reference's without the removed posts, in the same order (the later ones
     moved up, and a result whose shown post went led by its first copy still stored).

Prints a JSON object last.

    python bench/removal.py [--data-dir var] [--against c9aa8c9] [--rounds 2] [--trials 60] [--split test]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import (add_forum_arguments, beside_reference, get_json, judged_forum, post_json,  # noqa: E402
                  reference_checkout, run_header, searches_in_turns, server)

TOKEN = "removal-bench"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
KINDS = ("comment", "thread", "edit")  # what each trial removes (or edits), in turn
EDITED = "[edited by a moderator: a phone number taken out]"


def shown_ids(results: list[dict]) -> set[str]:
    """Every post a page shows: its results and the copies folded into them."""
    return {i for r in results for i in (r["id"], *r["duplicates"])}


def removal(kind: str, results: list[dict]) -> tuple[str, set[str] | None]:
    """The path of a trial's change to the page ``results`` shows, and the posts it removes where they are known here
    (a comment: itself; a thread: None, its comments are read from the answer; an edit of the first result's
    comment: none)."""
    r = results[0]
    if kind == "comment":
        return f"/threads/{r['thread_id']}/answers/{r['id']}", {r["id"]}
    if kind == "edit":
        return f"/threads/{r['thread_id']}/answers", set()
    return f"/threads/{results[1]['thread_id']}", None


def change(base: str, kind: str, path: str, results: list[dict]) -> None:
    """A trial's change: a DELETE, or the first result's comment sent again with ``EDITED`` as its text."""
    if kind == "edit":
        status, out = post_json(base + path, {"answers": [{"id": results[0]["id"], "text": EDITED}]}, headers=ADMIN)
    else:
        status, out = get_json(urllib.request.Request(base + path, method="DELETE", headers=ADMIN))
    if status != 200:
        raise SystemExit(f"{kind} {path} answered {status}: {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.add_argument("--against", default="c9aa8c9", help="the reference revision (default: round 65's last)")
    ap.add_argument("--rounds", type=int, default=2, help="times each question is sent to both servers, clean")
    ap.add_argument("--trials", type=int, default=60, help="removals, each with the question searched after it")
    args = ap.parse_args()

    settings, _, questions = judged_forum(args, "answers")
    bodies = [(qid, {"question": {"subject": s, "body": b}, "k": 10, "target": "answers"})
              for qid, (s, b) in questions.items()]
    out = {**run_header("removal"), "against": args.against, "split": args.split, "questions": len(bodies),
           "rounds": args.rounds}
    sides = ("reference", "this")
    clean: dict[str, list[float]] = {s: [] for s in sides}
    after: dict[str, list[float]] = {s: [] for s in sides}
    still_shown = {s: 0 for s in sides}
    differ = rest_equal = removed_posts = 0
    removed: set[str] = set()  # every post removed so far
    edited: dict[str, str] = {}  # every comment edited so far, and its text now
    old_text = {s: 0 for s in sides}
    stages: dict[str, dict[str, list[float]]] = {s: {} for s in sides}  # each side's timings_ms after a removal
    unlike: list[dict] = []  # the first few trials where this tree's page was not the reference's without them
    kinds = {k: 0 for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="cqa-removal-") as tmp, contextlib.ExitStack() as stack:
        ref = reference_checkout(stack, args.against, Path(tmp))
        bases = {}
        for side, root in (("reference", ref), ("this", ROOT)):
            folder = Path(tmp) / f"data-{side}"
            shutil.copytree(settings.data_dir, folder)
            env = {"CQA_REFRESH_S": "0", "CQA_API_TOKEN": TOKEN, "CQA_SHARED_DATA_DIR": str(settings.shared_data_dir)}
            bases[side], _ = stack.enter_context(server(folder, env, root=root))
        for side in sides:  # each side's first request, before the clock
            post_json(bases[side] + "/search", bodies[0][1])
        for _, _, got in searches_in_turns(bases, bodies, args.rounds, clean):
            differ += len({tuple((r["id"], tuple(r["duplicates"])) for r in resp["results"])
                           for resp in got.values()}) > 1
        t_removals = time.perf_counter()
        for trial, (qid, body) in enumerate(bodies[: args.trials]):
            kind = KINDS[trial % len(KINDS)]
            # asked of both, so that each has the same history (the question's vector cached); what to change is
            # chosen from this tree's page: the reference's may show a post an earlier trial removed
            pages = {side: post_json(bases[side] + "/search", body)[1] for side in sides}
            before = pages["this"]
            if len(before.get("results", [])) < 2:
                continue
            path, gone = removal(kind, before["results"])
            if gone is None:  # a whole thread: every comment of it, read before its removal
                status, thread = get_json(bases["this"] + path)
                if status != 200:
                    raise SystemExit(f"GET {path} answered {status}: {thread}")
                gone = {thread["id"], *(a["id"] for a in thread["answers"])}
            for side in sides[trial % 2:] + sides[: trial % 2]:
                change(bases[side], kind, path, before["results"])
            if kind == "edit":
                edited[before["results"][0]["id"]] = EDITED
            kinds[kind] += 1
            removed_posts += len(gone)
            removed |= gone  # what a later trial's page must not show either
            pages = {}
            for side in sides[trial % 2:] + sides[: trial % 2]:
                t0 = time.perf_counter()
                status, pages[side] = post_json(bases[side] + "/search", body)
                after[side].append(1000 * (time.perf_counter() - t0))
                if status != 200:
                    raise SystemExit(f"{side}: POST /search answered {status}: {pages[side]}")
                still_shown[side] += bool(shown_ids(pages[side]["results"]) & removed)
                old_text[side] += any(edited.get(r["id"], r["text"]) != r["text"] for r in pages[side]["results"])
                for stage, v in pages[side]["timings_ms"].items():
                    stages[side].setdefault(stage, []).append(v)
            # each result of the reference without the removed posts: gone where it and its copies all are, else its
            # first copy still stored in its place
            held = [[i for i in (r["id"], *r["duplicates"]) if i not in removed]
                    for r in pages["reference"]["results"]]
            kept = [(m[0], tuple(m[1:])) for m in held if m]
            mine = [(r["id"], tuple(r["duplicates"])) for r in pages["this"]["results"]]
            rest_equal += mine[: len(kept)] == kept
            if mine[: len(kept)] != kept and len(unlike) < 3:
                unlike.append({"question": qid, "removed": kind, "reference_without_them": kept, "this": mine})
        out["removals_seconds"] = round(time.perf_counter() - t_removals, 1)
    trials = sum(kinds.values())
    out["clean"] = {"sides": beside_reference(clean), "questions_shown_differently": differ}
    out["removals"] = {"trials": trials, **kinds, "posts_removed": removed_posts,
                       "searches_showing_a_removed_post": still_shown, "searches_showing_a_text_edited_since": old_text,
                       "this_equals_reference_without_them": rest_equal, "unlike": unlike,
                       "sides": beside_reference(after),
                       "server_ms_p50": {side: {k: round(float(np.percentile(v, 50)), 1) for k, v in st.items()}
                                         for side, st in stages.items()}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
