"""Where subtask C's errors are: the shipped C ranker (ranking/related_defaults.json) on a dev C benchmark, then the
same scores with the gold of another subtask added, as if a part were perfect: the thread's relevance to the new
question (the subtask B gold of the same file) and the comment's quality in its own thread (its subtask A label,
RELC_RELEVANCE2RELQ Good, read from the XML), each z-scored per question and added at weight W to the shipped score.
A diagnostic on dev data only: what each part could give at best, not a ranker.

    python scripts/oracle_related.py [--benchmark semeval2016-dev-C] [--weights 0.5,1,2,5]

JSON object last.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.loaders import load_semeval  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.scorer import read_lines  # noqa: E402
from ranking.evaluation.tuning import GoldMAP  # noqa: E402
from ranking.fusion import zscore  # noqa: E402
from ranking.presets import PRESETS  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", default="semeval2016-dev-C")
    ap.add_argument("--weights", default="0.5,1,2,5", help="the weights W the gold columns are tried at")
    args = ap.parse_args()
    bench = BENCHMARKS[args.benchmark]
    if bench.split != "dev" or bench.subtask != "C" or bench.variant:
        raise SystemExit("a diagnostic of dev data: give a dev subtask C benchmark without a variant")
    s = Settings()
    xml, gold_path = bench.paths(s.semeval_dir)
    queries = queries_for(xml, "C")
    dev_map = GoldMAP(queries, read_lines(gold_path))
    relevant_thread = {line.cid: line.label for line in read_lines(f"{xml}.subtaskB.relevancy")}  # B's gold
    good_in_thread = {a.id: a.label == "Good" for t in load_semeval(xml).threads for a in t.answers}  # A's labels
    shipped = get_ranker("related-answers", s).score(queries)
    base = [np.asarray(row, dtype=float) for row in shipped]
    thread = [zscore(np.array([float(relevant_thread[c.meta["thread_id"]]) for c in q.candidates])) for q in queries]
    good = [zscore(np.array([float(good_in_thread[c.id]) for c in q.candidates])) for q in queries]
    out = {"benchmark": bench.name, "shipped": dev_map(base), "file": PRESETS["related-answers"].file, "oracle": []}
    for w in (float(v) for v in args.weights.split(",")):
        row = {"weight": w,
               "thread_relevant (B gold)": dev_map([b + w * t for b, t in zip(base, thread)]),
               "good_in_own_thread (A label)": dev_map([b + w * g for b, g in zip(base, good)]),
               "both": dev_map([b + w * (t + g) for b, t, g in zip(base, thread, good)])}
        out["oracle"].append(row)
        print(json.dumps(row), file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
