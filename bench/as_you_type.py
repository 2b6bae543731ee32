"""The search page's "Asked before" panel, as a user typing a new question's subject meets it, through a real `cqa
serve` over the full 2016 corpus: what it costs per request and what it finds.

Each original question of the 2016 --split /search questions benchmark has its subject typed word by word. From the
second word on, the page sends `POST /search?feedback=false` with the subject typed so far (target questions, k = 5,
no snippets), as it does 300 ms after the last key: nothing of it is kept in the feedback log (round 65). Each request
is timed (p50 and p95). Beside each, in turns, the same request kept in the log as the page sent it before round 65
(``kept``: its p50, the ratio, and the log's rows it wrote, read from GET /ready, against none for the page's).

What the panel shows is scored with the benchmark's judgements (the related questions the SemEval judges found
relevant to it; a collapsed result by the copy judged relevant), at each number of words typed:
- the share of questions with a relevant question among the 5 shown;
- P@1.

Beside it, the same for the whole question (subject and body) at k = 5: what the panel sends and shows once the body
is written too (since round 56), with its p50. Prints a JSON object last.

    python bench/as_you_type.py [--data-dir var] [--split test] [--words 6]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import add_forum_arguments, get_json, judged_forum, post_json, server  # noqa: E402

SHOWN = 5  # what the panel lists
PAGE = "/search?feedback=false"  # as the page sends it: nothing kept in the feedback log (round 65)
PAGE_AND_KEPT = (PAGE, "/search")


def judged_top(results: list[dict], judged: dict[str, int]) -> list[int]:
    """The relevance of each result shown, a collapsed one by the copy judged relevant if any."""
    from ranking.search_benchmark import scored_id
    return [judged.get(scored_id([r["id"], *r["duplicates"]], judged), 0) for r in results[:SHOWN]]


def figures(rows: list[list[int]]) -> dict:
    return {"questions": len(rows), "relevant_in_5": round(float(np.mean([any(r) for r in rows])), 3),
            "P@1": round(float(np.mean([bool(r and r[0]) for r in rows])), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.add_argument("--words", type=int, default=6, help="report the panel after 2 to N words typed (and the whole "
                    "subject)")
    args = ap.parse_args()

    corpus, qrels, questions = judged_forum(args, "questions")
    ms: list[float] = []
    at_words: dict[int, list[list[int]]] = {n: [] for n in range(2, args.words + 1)}
    whole_subject, whole_question, body_ms = [], [], []
    kept_ms: list[float] = []
    with server(corpus.data_dir, {}) as (base, _):
        post_json(base + PAGE, {"question": {"body": "warm up"}})
        recorded = get_json(base + "/ready")[1]["feedback"]["recorded"]
        for qid, (subject, body) in questions.items():
            words = subject.split()
            judged = qrels.get(qid, {})
            last = None
            for n in range(2, len(words) + 1):
                ask = {"question": {"subject": " ".join(words[:n])}, "target": "questions", "k": SHOWN,
                       "snippets": False}
                for path in PAGE_AND_KEPT if len(ms) % 2 == 0 else PAGE_AND_KEPT[::-1]:  # in turns
                    t0 = time.perf_counter()
                    status, got = post_json(base + path, ask)
                    (ms if path == PAGE else kept_ms).append(1000 * (time.perf_counter() - t0))
                    if status != 200:
                        raise SystemExit(f"POST {path} answered {status} for {qid}: {got}")
                    if path == PAGE:
                        last = got
                if n in at_words:
                    at_words[n].append(judged_top(last["results"], judged))
            if last is not None:
                whole_subject.append(judged_top(last["results"], judged))
                t0 = time.perf_counter()  # as the page sends it once the body is written (round 56)
                status, full = post_json(base + PAGE, {"question": {"subject": subject, "body": body},
                                                            "target": "questions", "k": SHOWN, "snippets": False})
                body_ms.append(1000 * (time.perf_counter() - t0))
                if status != 200:
                    raise SystemExit(f"POST /search answered {status} for {qid}: {full}")
                whole_question.append(judged_top(full["results"], judged))
        rows = get_json(base + "/ready")[1]["feedback"]["recorded"] - recorded
    lat = np.asarray(ms)
    out = {"bench": "as_you_type", "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d"), "split": args.split, "questions": len(questions),
           "requests": len(ms), "p50_ms": round(float(np.percentile(lat, 50)), 1),
           "p95_ms": round(float(np.percentile(lat, 95)), 1),
           "after_words": {n: figures(rows) for n, rows in at_words.items() if rows},
           "whole_subject": figures(whole_subject), "subject_and_body": figures(whole_question),
           "subject_and_body_p50_ms": round(float(np.percentile(body_ms, 50)), 1) if body_ms else None,
           "questions_with_a_one_word_subject": len(questions) - len(whole_subject),
           "kept": {"requests": len(kept_ms), "p50_ms": round(float(np.percentile(kept_ms, 50)), 1),
                    "page_p50_over_kept": round(float(np.percentile(lat, 50) / np.percentile(kept_ms, 50)), 3),
                    "log_rows_written": rows, "log_rows_the_page_wrote": rows - len(kept_ms)}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
