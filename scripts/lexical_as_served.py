"""The lexical presets on the 2016 subtask A, B and C files two ways: their term statistics pooled over the whole
file's candidates (what `cqa evaluate` measured until round 64) and per question, as the /rerank endpoints score
(``ranking.rankers.per_request``; what `cqa evaluate` measures since). Prints each figure, then one JSON object.

    python scripts/lexical_as_served.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import json  # noqa: E402
import time  # noqa: E402

from app.settings import Settings  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.runner import align_to_gold, predictions  # noqa: E402
from ranking.evaluation.scorer import read_lines, score  # noqa: E402
from ranking.presets import build_label  # noqa: E402
from ranking.rankers import per_request  # noqa: E402


RUNS = [(f"semeval2016-{split}-{sub}", ("bm25", "lm") if sub == "C" else ("bm25", "lm", "fusion"))
        for sub in "ABC" for split in ("dev", "test")]


def main() -> None:
    s = Settings()
    out = {}
    for name, rankers in RUNS:
        b = BENCHMARKS[name]
        xml, gold = b.paths(s.semeval_dir)
        qs = queries_for(xml, b.subtask, b.variant)
        g = read_lines(gold)
        for r in rankers:
            t0 = time.perf_counter()
            pooled = score(g, align_to_gold(predictions(qs, build_label(r, s)), g)).MAP
            served = score(g, align_to_gold(predictions(qs, per_request(build_label(r, s))), g)).MAP
            out[f"{name} {r}"] = {"pooled": round(pooled, 4), "per_request": round(served, 4),
                                  "seconds": round(time.perf_counter() - t0, 1)}
            print(name, r, out[f"{name} {r}"], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
