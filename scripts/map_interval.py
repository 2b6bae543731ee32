"""How far a benchmark's MAP can be trusted: a bootstrap over its questions. For each report folder (``cqa evaluate
--json`` writes one; its report.json keeps the official per-question AP), the official MAP, the 95% percentile
interval of MAP over 10,000 resamples of the questions (seeded), and with --target the share of resamples at or above
it: how often a set of questions drawn like these would put the same ranker at the target. With two folders of the
same benchmark (--paired), the interval of their difference, resampling the questions both share.

    python scripts/map_interval.py var/reports/semeval2016-test-C/RUN [...] [--target 0.580] [--paired]

JSON object last.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

RESAMPLES = 10_000
SEED = 2016


def per_question(folder: Path) -> tuple[str, dict[str, float], float]:
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    if "per_question_ap" not in report:
        raise SystemExit(f"{folder}: report.json has no per_question_ap (an older cqa evaluate wrote it)")
    return report["benchmark"], report["per_question_ap"], float(report["MAP"])


def interval(values: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, list[float]]:
    """The resampled means of ``values`` (a row per resample) and their 2.5th and 97.5th percentiles."""
    means = values[rng.integers(0, len(values), size=(RESAMPLES, len(values)))].mean(axis=1)
    return means, [float(v) for v in np.percentile(means, [2.5, 97.5])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="report folders (each holds report.json)")
    ap.add_argument("--target", type=float, help="the share of resamples whose MAP is at least this")
    ap.add_argument("--paired", action="store_true", help="two folders of one benchmark: the difference's interval")
    args = ap.parse_args()
    out = []
    for folder in args.folders:
        bench, ap_by_q, official = per_question(folder)
        values = np.asarray(list(ap_by_q.values()), dtype=float)
        means, (lo, hi) = interval(values, np.random.default_rng(SEED))
        row = {"folder": str(folder), "benchmark": bench, "questions": len(values), "MAP": official,
               "mean_of_per_question_ap": float(values.mean()), "interval_95": [lo, hi]}
        if args.target is not None:
            row["target"] = args.target
            row["share_at_or_above_target"] = float((means >= args.target).mean())
        out.append(row)
        print(json.dumps(row))
    result = {"resamples": RESAMPLES, "seed": SEED, "runs": out}
    if args.paired:
        if len(args.folders) != 2:
            raise SystemExit("--paired takes two report folders")
        (ba, a, _), (bb, b, _) = (per_question(f) for f in args.folders)
        if ba != bb:
            raise SystemExit(f"--paired: two benchmarks ({ba}, {bb})")
        shared = sorted(set(a) & set(b))
        diff = np.asarray([a[q] - b[q] for q in shared], dtype=float)
        _, (lo, hi) = interval(diff, np.random.default_rng(SEED))
        result["difference"] = {"questions": len(shared), "mean": float(diff.mean()), "interval_95": [lo, hi]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
