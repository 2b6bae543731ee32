"""Choose what the /search questions reranker gives a thread without comments, on 2016 dev, through the serving
pipeline. Its parts that read what answered a thread (answers-cosine-max, answers-cosine-top3) have nothing to read
for a forum's new question. As scored, such a thread gets their score for no comments and sinks; with ``missing`` c
(FusedRanker), it gets the normalised value c from them instead, its other candidates normalised among themselves
(0: no say; below 0: a penalty of that many standard deviations).

Each value of the grid is scored on two corpora in one run, with the same served reranker object (only ``missing``
changes between runs): the usual full corpus, where every judged thread has comments and the 1,901 without any are
unjudged, and a copy in which a seeded share of the answered threads lost their comments (ranking.fullcorpus
``unanswered_copy``, as bench/unanswered.py measures). The rule: the value with the highest MAP@10 on the copy among
those within --budget of the served reranker's MAP@10 on the usual corpus (ties to the lower value); it is adopted
only if it beats the served reranker on the copy. With --write, an adopted value goes into the reranker's parameters
file (ranking/search_questions_defaults.json, "missing"). Test is never read; --check scores other splits at the
chosen value (train-part2: not used for the choice).

    python scripts/tune_missing.py --data-dir /tmp/cqa-full --write
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.settings import Settings  # noqa: E402
from indexing.searcher import load_current  # noqa: E402
from indexing.store import ThreadStore  # noqa: E402
from ranking.candidate_rankers import FusedRanker  # noqa: E402
from ranking.fullcorpus import corpus_settings, ensure_corpus, figures_of, unanswered_copy  # noqa: E402
from ranking.pipeline import build_pipeline  # noqa: E402
from ranking.rankers import service_reranker, walk  # noqa: E402
from ranking.search_benchmark import RERANKED, qrels_for, search_run  # noqa: E402

GRID = (0.0, -0.25, -0.5, -0.75, -1.0, -1.25, -1.5, -2.0, -3.0)
DEFAULTS = ROOT / "ranking" / "search_questions_defaults.json"


def fusion_of(ranker) -> FusedRanker:
    """The FusedRanker inside a served /search questions reranker (the one whose ``missing`` is tuned)."""
    found = [r for r in walk([ranker]) if isinstance(r, FusedRanker)]
    if len(found) != 1:
        raise SystemExit(f"{ranker.name}: expected one fusion to tune, found {len(found)}")
    return found[0]


def label(c: float | None) -> str:
    return "as scored" if c is None else f"{c:g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses")
    ap.add_argument("--share", type=float, default=0.5, help="the share of answered threads that lose their comments")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--split", default="dev", help="the split the value is chosen on")
    ap.add_argument("--check", default="", help="other splits scored at the chosen value, comma-separated "
                    "(train-part2; never test for a choice)")
    ap.add_argument("--budget", type=float, default=0.005, help="the most MAP@10 the usual corpus may lose")
    ap.add_argument("--grid", default=",".join(f"{c:g}" for c in GRID), help="the values tried, comma-separated")
    ap.add_argument("--write", action="store_true", help="write an adopted value into " + DEFAULTS.name)
    args = ap.parse_args()

    settings = Settings(data_dir=args.data_dir)
    grid = [None] + [float(x) for x in args.grid.split(",")]
    t0 = time.perf_counter()
    usual_gen = ensure_corpus(settings, progress=True)
    # the served /search questions reranker, set up as search_rerankers sets it up (without the answers one)
    ranker = service_reranker(settings, {}, settings.search_ranker_questions)
    fusion = fusion_of(ranker)
    served = fusion.missing
    table: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="cqa-tune-missing-") as tmp:
        made = unanswered_copy(settings, Path(tmp) / "data", args.share, args.seed)
        copy_gen = load_current(made.settings.index_root, made.settings.device)
        with ThreadStore(corpus_settings(settings).store_path) as usual, \
                ThreadStore(made.settings.store_path) as stripped:
            pipes = {"usual": build_pipeline(settings, usual_gen, usual, {"questions": ranker}),
                     "unanswered": build_pipeline(made.settings, copy_gen, stripped, {"questions": ranker})}

            def score(c: float | None, split: str) -> dict[str, float]:
                fusion.missing = c
                qrels, questions = qrels_for(settings, split, "questions")
                return {corpus: round(figures_of(qrels, search_run(p, questions, "questions", RERANKED, qrels)[0])
                                      ["MAP@10"], 4) for corpus, p in pipes.items()}

            for c in grid:
                table[label(c)] = score(c, args.split)
                print(json.dumps({"missing": label(c), args.split: table[label(c)]}), file=sys.stderr, flush=True)
            base = table[label(served)]
            allowed = [c for c in grid[1:] if table[label(c)]["usual"] >= base["usual"] - args.budget - 1e-9]
            best = max(allowed, key=lambda c: (table[label(c)]["unanswered"], -c), default=None)
            adopted = best is not None and table[label(best)]["unanswered"] > base["unanswered"]
            chosen = best if adopted else served
            checks = {split: score(chosen, split) for split in filter(None, args.check.split(","))}
            fusion.missing = served
    out = {"tune": "missing", "split": args.split, "share": args.share, "seed": args.seed, "budget": args.budget,
           "threads_stripped": made.stripped, "threads_without_comments": made.without_comments,
           "served": label(served), "MAP@10": table, "best_within_budget": best,
           "adopted": adopted, "chosen": label(chosen), "checks": checks,
           "seconds": round(time.perf_counter() - t0, 1)}
    if args.write and adopted:
        d = json.loads(DEFAULTS.read_text(encoding="utf-8"))
        d["missing"] = chosen
        d["missing_tuned"] = {k: v for k, v in out.items() if k not in ("tune", "seconds")} | {
            "command": "python scripts/tune_missing.py " + " ".join(a for a in sys.argv[1:] if a != "--write")}
        DEFAULTS.write_text(json.dumps(d, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
