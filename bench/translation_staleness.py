"""What a translation table that has not seen the newest question-answer pairs costs `expand: "translation"`: the
question -> answer IBM Model 1 table a build trains, trained without the last F of the store's pairs (the newest
comments, in store order), swapped into the full 2016 corpus's generation, and each original question of the 2016
/search benchmarks searched with `expand: "translation"` through the pipeline that serves POST /search (first stage,
and reranked as a request gets it by default), side by side with the table trained on every pair (F = 0, what the
generation holds). This is what a build that carries the live table while few pairs changed
(`CQA_TRANSLATION_RETRAIN_CHANGED`) serves. Prints a JSON object last.

    python bench/translation_staleness.py --data-dir /tmp/cqa-full --split dev --fractions 0,0.01,0.02,0.05,0.1

Per fraction and target: MAP@10 (and its difference from F = 0, with a paired randomisation test over the
questions' AP@10), the questions whose first 10 differ from F = 0's, and the expansion terms that differ (over the
questions, the share of terms not in F = 0's expansion of the same question).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TARGETS = ("answers", "questions")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var",
                    help="the data folder cqa evaluate uses (the corpus is built under it if it is not there)")
    ap.add_argument("--split", choices=("dev", "test"), default="dev", help="whose /search questions (select on dev)")
    ap.add_argument("--fractions", default="0,0.01,0.02,0.05,0.1",
                    help="shares of the newest pairs left out of the table, comma-separated; the first must be 0")
    ap.add_argument("--no-rerank", action="store_true", help="the first stage only (the table changes only it)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions of each target (0: all)")
    args = ap.parse_args()
    fractions = [float(f) for f in args.fractions.split(",")]
    if fractions[0] != 0 or not all(0 <= f < 1 for f in fractions):
        raise SystemExit("--fractions: from 0 (the table on every pair, the reference) to below 1")

    import numpy as np

    from app.settings import Settings
    from build_parts import same_table
    from indexing.models import question_text
    from indexing.reindex import translation_pairs
    from indexing.store import ThreadStore
    from indexing.translation import TranslationTable
    from ranking.evaluation.measures import paired_randomization, per_query
    from ranking.expansion import translation_expansion
    from ranking.fullcorpus import corpus_settings, ensure_corpus, figures_of
    from ranking.pipeline import build_pipeline
    from ranking.search_benchmark import SearchRun, qrels_for, search_run

    settings = Settings(data_dir=args.data_dir)
    gen = ensure_corpus(settings, progress=True)
    t0 = time.perf_counter()
    tokens = [gen.analyzer(t) for t in gen.docs.texts]
    pairs = translation_pairs(gen.docs, tokens)
    analyse_s = time.perf_counter() - t0
    sets = {}
    for target in TARGETS:
        qrels, questions = qrels_for(settings, args.split, target)
        if args.limit:
            questions = dict(list(questions.items())[: args.limit])
            qrels = {q: qrels[q] for q in questions}
        sets[target] = (qrels, questions)
    runs = [SearchRun("first-stage", rerank=False, expansion="translation")]
    if not args.no_rerank:
        runs.append(SearchRun("reranked", expansion="translation"))

    served_table = gen.translation_qa
    tables: dict[float, TranslationTable] = {}
    results: list[dict] = []
    reference: dict[tuple[str, str], tuple[dict, dict]] = {}
    ref_terms: dict[str, list[str]] = {}
    with ThreadStore(corpus_settings(settings).store_path) as store:
        pipe = build_pipeline(settings, gen, store)
        try:
            for f in fractions:
                kept = len(pairs) - round(f * len(pairs))
                t0 = time.perf_counter()
                table = tables[f] = TranslationTable.train(pairs[:kept])
                train_s = time.perf_counter() - t0
                gen.translation_qa = table  # what the pipeline's expansion reads for each request
                row = {"fraction": f, "pairs_left_out": len(pairs) - kept, "train_s": round(train_s, 2),
                       "source_terms": len(table.src_vocab), "targets": {}}
                for target, (qrels, questions) in sets.items():
                    terms = {q: [w for w, _ in translation_expansion(table, gen.analyzer(question_text(s, b))).terms]
                             for q, (s, b) in questions.items()}
                    if f == 0:
                        ref_terms.update({f"{target}:{q}": t for q, t in terms.items()})
                    new = [sum(w not in ref_terms[f"{target}:{q}"] for w in t) / max(len(t), 1)
                           for q, t in terms.items()]
                    fig: dict[str, dict] = {"expansion_terms_not_in_reference": round(float(np.mean(new)), 4)}
                    for run in runs:
                        ranked, ms = search_run(pipe, questions, target, run, qrels)
                        ap = per_query(qrels, ranked, "AP@10")
                        if f == 0:
                            reference[(target, run.label)] = (ranked, ap)
                        ref_ranked, ref_ap = reference[(target, run.label)]
                        qs = sorted(ref_ap)
                        fig[run.label] = {
                            "MAP@10": round(figures_of(qrels, ranked)["MAP@10"], 4),
                            "difference": round(float(np.mean([ap.get(q, 0.0) - ref_ap[q] for q in qs])), 4),
                            "p_randomisation": round(paired_randomization([ap.get(q, 0.0) for q in qs],
                                                                          [ref_ap[q] for q in qs]), 4),
                            "questions_ranked_differently": sum(list(ranked[q])[:10] != list(ref_ranked[q])[:10]
                                                                for q in questions),
                            "p50_ms": round(float(np.percentile(ms, 50)), 1)}
                    row["targets"][target] = fig
                results.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            gen.translation_qa = served_table
    with tempfile.TemporaryDirectory() as tmp:  # as a build saves it: float32
        tables[0.0].save(Path(tmp))
        same = served_table is not None and same_table(TranslationTable.load(Path(tmp)), served_table)
    print(json.dumps({
        "bench": "translation_staleness", "machine": f"{platform.processor() or platform.machine()}, "
        f"{platform.system()}", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "split": args.split,
        "generation": gen.name, "pairs": len(pairs), "analyse_s": round(analyse_s, 2),
        "questions": {t: len(q) for t, (_, q) in sets.items()},
        "reference_is_the_generations_table": same, "fractions": results}))


if __name__ == "__main__":
    main()
