"""The ablation table: named rankers on one benchmark with the official scorer, sorted by MAP, and a
paired significance test (randomisation and t-test over per-question AP) of the best against the next.
An entry LABEL=CHECKPOINT runs a MiniLM checkpoint directory that is not the configured one (e.g. the
BCE cross-encoder); its kind comes from its config.json. Scores are cached (var/cache/scores), so re-runs are quick.
Usage: python scripts/ablation.py --benchmark semeval2016-test-A --rankers ir-baseline,bm25,...
Prints a Markdown table, then one JSON object last."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS  # noqa: E402
from ranking.evaluation.measures import paired_randomization, paired_t  # noqa: E402
from ranking.evaluation.runner import run_benchmark  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402


def build(entry: str, settings):
    if "=" not in entry:
        return entry, get_ranker(entry, settings)
    from ranking.neural.ranker import MiniLMRanker
    label, folder = entry.split("=", 1)
    return label, MiniLMRanker.from_checkpoint(Path(folder), settings.device, name=label, inference=settings.inference,
                                               cache_dir=settings.cache_dir / "scores", export_dir=settings.cache_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benchmark", required=True, choices=sorted(b for b in BENCHMARKS if "fullcorpus" not in b))
    ap.add_argument("--rankers", required=True, help="comma-separated names or LABEL=CHECKPOINT")
    args = ap.parse_args()
    settings = Settings()
    bench = BENCHMARKS[args.benchmark]
    rows = []
    for entry in args.rankers.split(","):
        label, ranker = build(entry, settings)
        r = run_benchmark(bench, ranker, settings.semeval_dir, settings.reports_dir)
        rows.append({"ranker": label, "MAP": r["MAP"], "MRR": r["figures"]["MRR"], "ap": r["per_question_ap"]})
        print(json.dumps({"ranker": label, "MAP": round(r["MAP"], 4)}), file=sys.stderr, flush=True)
    rows.sort(key=lambda r: -r["MAP"])
    test = None
    if len(rows) > 1:
        best, nxt = rows[0], rows[1]
        qs = sorted(set(best["ap"]) & set(nxt["ap"]))
        a, b = [best["ap"][q] for q in qs], [nxt["ap"][q] for q in qs]
        test = {"best": best["ranker"], "next": nxt["ranker"], "questions": len(qs),
                "p_randomization": paired_randomization(a, b), "p_ttest": paired_t(a, b)}
    print(f"| ranker | {bench.name} MAP | MRR |\n|---|---|---|")
    for r in rows:
        print(f"| {r['ranker']} | {r['MAP']:.4f} | {r['MRR']:.2f} |")
    if test:
        print(f"\n{test['best']} vs {test['next']}: paired randomisation p = {test['p_randomization']:.4g}, "
              f"paired t-test p = {test['p_ttest']:.4g} ({test['questions']} questions)")
    print(json.dumps({"benchmark": bench.name, "MAP": {r["ranker"]: round(r["MAP"], 4) for r in rows},
                      "significance": test}))


if __name__ == "__main__":
    main()
