"""How far a benchmark's MAP can be trusted: a bootstrap over its questions. For each report folder (``cqa evaluate
--json`` writes one; its report.json keeps the official per-question AP), the official MAP, the 95% percentile
interval of MAP over 10,000 resamples of the questions (seeded), and with --target the share of resamples at or above
it: how often a set of questions drawn like these would put the same ranker at the target (the interval is the one
every report now carries, ``MAP_interval_95``: ranking.evaluation.measures.map_interval). With two folders of the
same benchmark (--paired), the interval of their difference, resampling the questions both share.

    python scripts/map_interval.py var/reports/semeval2016-test-C/RUN [...] [--target 0.580] [--paired]

JSON object last.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ranking.evaluation.measures import (  # noqa: E402
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    bootstrap_means,
    map_interval,
    paired_ap,
)


def per_question(folder: Path) -> tuple[str, dict[str, float], float]:
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    if "per_question_ap" not in report:
        raise SystemExit(f"{folder}: report.json has no per_question_ap (an older cqa evaluate wrote it)")
    return report["benchmark"], report["per_question_ap"], float(report["MAP"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="report folders (each holds report.json)")
    ap.add_argument("--target", type=float, help="the share of resamples whose MAP is at least this")
    ap.add_argument("--paired", action="store_true", help="two folders of one benchmark: the difference's interval")
    args = ap.parse_args()
    out = []
    for folder in args.folders:
        bench, ap_by_q, official = per_question(folder)
        row = {"folder": str(folder), "benchmark": bench, "questions": len(ap_by_q), "MAP": official,
               "mean_of_per_question_ap": float(np.mean(list(ap_by_q.values()))), "interval_95": map_interval(ap_by_q)}
        if args.target is not None:
            row["target"] = args.target
            row["share_at_or_above_target"] = float((bootstrap_means(list(ap_by_q.values())) >= args.target).mean())
        out.append(row)
        print(json.dumps(row))
    result = {"resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "runs": out}
    if args.paired:
        if len(args.folders) != 2:
            raise SystemExit("--paired takes two report folders")
        (ba, a, _), (bb, b, _) = (per_question(f) for f in args.folders)
        if ba != bb:
            raise SystemExit(f"--paired: two benchmarks ({ba}, {bb})")
        tests = paired_ap(a, b)  # the comparison every --compare gives, with the difference's interval
        result["difference"] = {"questions": tests["questions"],
                                "mean": float(np.mean([a[q] - b[q] for q in set(a) & set(b)])),
                                "interval_95": tests["difference_interval_95"],
                                "p_randomization": tests["p_randomization"], "p_ttest": tests["p_ttest"]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
