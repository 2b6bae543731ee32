"""Compare two report folders of the same benchmark question by question: the mean of a measure in each and
the paired randomization test of the difference (10,000 sign flips), for the official MAP (from each
report.json's per-question AP, when both have it) and the ir_measures of --measures. For runs that ``--compare`` cannot pair
because they need different data folders or settings, e.g. /search over generations built with two dense
encoders (each report folder keeps its run.trec and qrels.trec).

    python scripts/compare_reports.py var/reports/semeval2016-test-search-answers/A var/reports/.../B
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ranking.evaluation.measures import (  # noqa: E402
    paired_randomization,
    per_query,
    read_trec_qrels,
    read_trec_run,
)


def read(folder: Path) -> tuple[dict, dict]:
    return read_trec_qrels(folder / "qrels.trec"), read_trec_run(folder / "run.trec")


def paired(a: list[float], b: list[float]) -> dict:
    """Both means, their difference and its paired randomization p, over per-question values in one order."""
    return {"a": round(sum(a) / len(a), 4), "b": round(sum(b) / len(b), 4),
            "b_minus_a": round((sum(b) - sum(a)) / len(a), 4), "p": paired_randomization(b, a)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="report folder A")
    ap.add_argument("b", type=Path, help="report folder B")
    ap.add_argument("--measures", default="AP@10,P@1,nDCG@10,R@100", help="ir_measures names, comma-separated")
    args = ap.parse_args()
    (qa, ra), (qb, rb) = read(args.a), read(args.b)
    if qa != qb:
        print("error: the two reports were judged against different qrels; not the same benchmark", file=sys.stderr)
        return 2
    out = {"a": str(args.a), "b": str(args.b), "questions": len(qa), "measures": {}}
    official = [json.loads((f / "report.json").read_text()).get("per_question_ap") if (f / "report.json").exists()
                else None for f in (args.a, args.b)]
    if all(official) and set(official[0]) == set(official[1]):
        # the official scorer's per-question AP (report.json): its MAP normalises by the relevant candidates
        # found in the top 10, which trec AP@10 does not, so on subtask C the two can disagree
        out["measures"]["official_MAP"] = paired(*([o[q] for q in official[0]] for o in official))
    for m in filter(None, args.measures.split(",")):
        pa, pb = per_query(qa, ra, m), per_query(qa, rb, m)
        out["measures"][m] = paired([pa[q] for q in qa], [pb[q] for q in qa])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
