"""What a results page shows of each result, and what the snippets cost, through a real `cqa serve` over the full 2016
corpus, side by side in one run: `POST /search` with snippets (the default) and with `"snippets": false`.

Each original question of the 2016 --split /search answers benchmark is sent as a forum sends it (subject and body,
k = 10, target answers), in both arms, over --rounds rounds, the order alternating. Reported:
- each arm's p50 and p95 in ms, their ratio, and the server's own `snippets` stage time;
- for the results longer than a snippet (300 characters), what a reader sees of each:
  - the snippet;
  - the one window of 300 characters a snippet was before round 57 (computed here from the same result);
  - the text's first 300 characters (the same room);
  - its first 600 (what the page showed before round 55);
  - the whole text (all a reader could see).

  For each, the share of results showing at least one of the question's words, and the mean number of distinct ones
  shown, counted as the snippets mark them (the index's analyser: same stem; stop words not). Both are also given for
  the comments the SemEval judges found Good for the question. And how many snippets are in two parts (round 57).

Prints a JSON object last.

    python bench/snippets.py [--data-dir var | --forum-dir FOLDER] [--split test] [--rounds 3]
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

from load import add_forum_arguments, judged_forum, post_json, server  # noqa: E402


def shown_words(text: str, question: str, analyzer) -> int:
    """How many distinct words of the question ``text`` shows, as a snippet marks them."""
    from ranking.snippets import snippet
    s = snippet(text, question, analyzer, width=max(len(text), 1))
    return len({analyzer(s.text[a:b])[0] for a, b in s.highlights})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from indexing.text import INDEX_ANALYZER
    from ranking.snippets import SNIPPET_CHARS

    corpus, qrels, questions = judged_forum(args, "answers")
    ms = {True: [], False: []}
    stage: list[float] = []
    seen: list[dict] = []
    with server(corpus.data_dir, {}) as (base, _):
        post_json(base + "/search", {"question": {"body": "warm up"}})
        for r in range(args.rounds):
            for n, (qid, (subject, body)) in enumerate(questions.items()):
                for on in ((True, False) if (r + n) % 2 == 0 else (False, True)):
                    ask = {"question": {"subject": subject, "body": body}, "k": 10, "snippets": on}
                    t0 = time.perf_counter()
                    status, resp = post_json(base + "/search", ask)
                    ms[on].append(1000 * (time.perf_counter() - t0))
                    if status != 200:
                        raise SystemExit(f"POST /search answered {status} for {qid}: {resp}")
                    if on:
                        stage.append(resp["timings_ms"]["snippets"])
                        if r == 0:
                            seen += [{"qid": qid, "question": f"{subject}\n{body}", **x} for x in resp["results"]]
    long = [x for x in seen if len(x["text"]) > SNIPPET_CHARS]
    from ranking.snippets import snippet
    views = {"snippet": lambda x: x["snippet"]["text"],
             "one_window": lambda x: snippet(x["text"], x["question"], INDEX_ANALYZER, max_parts=1).text,
             "first_300": lambda x: x["text"][:SNIPPET_CHARS],
             "first_600": lambda x: x["text"][:600], "whole_text": lambda x: x["text"]}

    def read(rows):
        out = {}
        for name, view in views.items():
            counts = [shown_words(view(x), x["question"], INDEX_ANALYZER) for x in rows]
            out[name] = {"with_a_question_word": round(float(np.mean([c > 0 for c in counts])), 3) if counts else None,
                         "mean_distinct_words": round(float(np.mean(counts)), 2) if counts else None}
        return out

    good = [x for x in long if qrels.get(x["qid"], {}).get(x["id"]) == 1]
    p50 = {on: float(np.percentile(v, 50)) for on, v in ms.items()}
    out = {"bench": "snippets", "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d"), "questions": len(questions), "rounds": args.rounds,
           "latency": {"snippets_p50_ms": round(p50[True], 1), "none_p50_ms": round(p50[False], 1),
                       "snippets_p95_ms": round(float(np.percentile(ms[True], 95)), 1),
                       "none_p95_ms": round(float(np.percentile(ms[False], 95)), 1),
                       "p50_ratio": round(p50[True] / p50[False], 3), "requests_per_arm": len(ms[True]),
                       "stage_p50_ms": round(float(np.median(stage)), 2),
                       "stage_p95_ms": round(float(np.percentile(stage, 95)), 2)},
           "results": len(seen), "longer_than_a_snippet": len(long),
           "in_two_parts": sum(1 for x in long if len(x["snippet"].get("parts", [])) == 2), "shown": read(long),
           "good_longer_than_a_snippet": len(good), "good_shown": read(good)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
