"""Tune the default retriever on 2016 dev only (semeval2016-dev-fullcorpus) and store the winner,
with the numbers that chose it, in ranking/retriever_defaults.json.

Grid: expansion of the lexical sources (none, rm3, translation) x fusion (rrf, combsum, combmnz)
x source weights in {0, 0.5, 1, 2}^3. Selection by dev MAP@10; ties go to the simpler setting.
Usage: python scripts/tune_fusion.py [--data-dir var]   (prints a JSON object last)
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from ranking.config import DEFAULTS_FILE  # noqa: E402
from ranking.fullcorpus import DEPTH, ensure_corpus, figures_of, qrels_and_queries  # noqa: E402
from ranking.fusion import FUSIONS  # noqa: E402
from ranking.retriever import Retriever, RetrieverConfig  # noqa: E402

SOURCES = ("bm25", "lm", "dense")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=DEFAULTS_FILE)
    args = ap.parse_args()
    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    gen = ensure_corpus(settings)
    qrels, queries = qrels_and_queries(settings, "dev")
    runs: dict[tuple[str, str], dict[str, list]] = {}
    for exp in ("none", "rm3", "translation"):
        for src in SOURCES:
            if src == "dense" and exp != "none":
                runs[(src, exp)] = runs[(src, "none")]
                continue
            r = Retriever(gen, RetrieverConfig((src,), expansion=exp, depth=DEPTH))
            runs[(src, exp)] = {q: r.search(t, DEPTH, "all").hits for q, t in queries.items()}
            print(f"searched {src} expansion={exp}", file=sys.stderr, flush=True)
    results = []
    grid = [w for w in itertools.product((0.0, 0.5, 1.0, 2.0), repeat=3) if any(w)]
    for exp, fusion, w in itertools.product(("none", "rm3", "translation"), ("rrf", "combsum", "combmnz"), grid):
        used = [(s, x) for s, x in zip(SOURCES, w) if x > 0]
        run = {}
        for q in queries:
            lists = [runs[(s, exp)][q] for s, _ in used]
            hits = lists[0] if len(lists) == 1 else FUSIONS[fusion](lists, weights=[x for _, x in used])
            run[q] = {h.doc_id: h.score for h in hits[:DEPTH]}
        fig = figures_of(qrels, run)
        results.append({"expansion": exp, "fusion": fusion, "sources": [s for s, _ in used],
                        "weights": [x for _, x in used], "dev": fig})
    complexity = {"none": 0, "rm3": 1, "translation": 1}
    results.sort(key=lambda r: (-round(r["dev"]["MAP@10"], 6), complexity[r["expansion"]], len(r["sources"])))
    best = results[0]
    single = {s: next(r for r in results if r["sources"] == [s] and r["expansion"] == "none") for s in SOURCES}
    record = {
        "config": {"sources": best["sources"], "fusion": best["fusion"], "weights": best["weights"],
                   "expansion": best["expansion"], "depth": DEPTH},
        "chosen_by": "highest MAP@10 on semeval2016-dev-fullcorpus (50 dev original questions, whole 2016 corpus)",
        "dev": best["dev"],
        "dev_single_sources": {s: r["dev"] for s, r in single.items()},
        "top10": results[:10],
        "grid_size": len(results),
        "generation": gen.name,
        "tuned_at": datetime.now(timezone.utc).isoformat(),
        "command": "python scripts/tune_fusion.py",
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"best": record["config"], "dev": best["dev"],
                      "best_single_dev_MAP@10": max(r["dev"]["MAP@10"] for r in single.values())}))


if __name__ == "__main__":
    main()
