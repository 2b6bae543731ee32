"""Ranking quality of POST /search as a user gets it: each original question of the 2016 dev or test /search
benchmarks sent to a real `cqa serve` over the full 2016 corpus as a forum sends it (its subject and body, and the
API's default k = 10 unless --k says otherwise), the results scored with the benchmark's measures (MAP@10, P@1,
nDCG@10; a collapsed result by the copy judged relevant, if any), side by side with the reference: the same
questions through the pipeline in process, as `cqa evaluate --benchmark semeval2016-SPLIT-search-TARGET` runs them
(k = 100). Their difference is what the served path, and a user's k, add or lose. Prints a JSON object last.

    python bench/search_quality.py --data-dir var --benchmarks semeval2016-test-search-answers --k 10

--data-dir is the data folder `cqa evaluate` uses: the corpus is built under DATA/benchmarks/fullcorpus-2016 if it
is not there yet, and the server serves that folder. Only the first 10 results are scored on both sides.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import parse_configs, post_json, server  # noqa: E402

SHOWN = 10  # results scored: MAP@10, P@1 and nDCG@10 read no further


def shown(results, judged: dict[str, int]) -> dict[str, float]:
    """The first SHOWN results as a run (scores from ranks), each by the id it is scored by."""
    from ranking.search_benchmark import K, scored_id
    return {scored_id([r["id"], *r["duplicates"]], judged): float(K + 1 - r["rank"]) for r in results[:SHOWN]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var",
                    help="the data folder cqa evaluate uses; the server serves DATA/benchmarks/fullcorpus-2016")
    ap.add_argument("--benchmarks", default=",".join(f"semeval2016-{s}-search-{t}" for s in ("dev", "test")
                                                     for t in ("answers", "questions", "threads")),
                    help="/search benchmarks (cqa evaluate --list), comma-separated")
    ap.add_argument("--k", type=int, default=10, help="results each request asks for (the API's default: 10)")
    ap.add_argument("--config", default="default", help="the server's settings, as one bench/load.py "
                    "--rerank-configs entry (label=RANKER@INFERENCE;VAR=VALUE); the reference reads the same")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions of each benchmark (0: all)")
    args = ap.parse_args()
    from ranking.settings import MAX_RESULTS
    if not SHOWN <= args.k <= MAX_RESULTS:
        raise SystemExit(f"--k: from {SHOWN} (the figures read the first {SHOWN}) to {MAX_RESULTS}")

    import numpy as np

    from app.settings import Settings
    from indexing.store import ThreadStore
    from ranking.evaluation.benchmarks import BENCHMARKS
    from ranking.evaluation.measures import paired_randomization, per_query
    from ranking.fullcorpus import corpus_settings, ensure_corpus, figures_of
    from ranking.pipeline import build_pipeline
    from ranking.search_benchmark import RERANKED, qrels_for, search_run

    (label, env), = parse_configs(args.config)
    os.environ.update(env)  # the reference reads the server's settings: the same rerankers and depths
    settings = Settings(data_dir=args.data_dir)
    gen = ensure_corpus(settings, progress=True)
    folder = corpus_settings(settings).data_dir
    sets = {}
    for name in args.benchmarks.split(","):
        bench = BENCHMARKS[name]
        if bench.search_target is None:
            raise SystemExit(f"{name}: not a /search benchmark (semeval2016-SPLIT-search-TARGET)")
        qrels, questions = qrels_for(settings, bench.split, bench.search_target)
        if args.limit:  # the measures average over the judged questions: keep the judgements of those asked only
            questions = dict(list(questions.items())[: args.limit])
            qrels = {q: qrels[q] for q in questions}
        sets[name] = (bench.search_target, qrels, questions)

    def measures(qrels, run):
        f = figures_of(qrels, run)
        return {m: round(f[m], 4) for m in ("MAP@10", "P@1", "nDCG@10")}

    out = {"bench": "search_quality", "config": label, "env": env, "k": args.k, "generation": gen.name,
           "benchmarks": {}}
    served: dict[str, tuple[dict, list[float], dict[str, list[float]]]] = {}
    with server(folder, env) as (base, ready):
        out["served_rerankers"] = ready["search_rerankers"]
        post_json(base + "/search", {"question": {"body": "warm up"}})
        for name, (target, qrels, questions) in sets.items():
            run, ms, stages = {}, [], {}
            for qid, (subject, body) in questions.items():
                t0 = time.perf_counter()
                status, resp = post_json(base + "/search", {"question": {"subject": subject, "body": body},
                                                            "k": args.k, "target": target})
                ms.append(1000 * (time.perf_counter() - t0))
                if status != 200:
                    raise SystemExit(f"POST /search answered {status} for question {qid}: {resp}")
                run[qid] = shown(resp["results"], qrels.get(qid, {}))
                for stage, t in resp["timings_ms"].items():
                    stages.setdefault(stage, []).append(t)
            served[name] = (run, ms, stages)
    with ThreadStore(corpus_settings(settings).store_path) as store:
        pipe = build_pipeline(settings, gen, store)
        for name, (target, qrels, questions) in sets.items():
            t0 = time.perf_counter()
            local, _ = search_run(pipe, questions, target, RERANKED, qrels)
            local_s = time.perf_counter() - t0
            local = {q: dict(list(r.items())[:SHOWN]) for q, r in local.items()}
            run, ms, stages = served[name]
            ap_served, ap_local = per_query(qrels, run, "AP@10"), per_query(qrels, local, "AP@10")
            qids = sorted(set(ap_served) | set(ap_local))
            a, b = [ap_served.get(q, 0.0) for q in qids], [ap_local.get(q, 0.0) for q in qids]
            s_fig, l_fig = measures(qrels, run), measures(qrels, local)
            lat = np.asarray(ms)
            out["benchmarks"][name] = {
                "questions": len(questions), "served": s_fig, "in_process": l_fig,
                "difference": round(s_fig["MAP@10"] - l_fig["MAP@10"], 4),
                "p_randomisation": round(paired_randomization(a, b), 4),
                "questions_ranked_differently": sum(list(run[q]) != list(local[q]) for q in questions),
                "served_p50_ms": round(float(np.percentile(lat, 50)), 1),
                "served_p95_ms": round(float(np.percentile(lat, 95)), 1),
                "served_stage_p50_ms": {k: round(float(np.median(v)), 1) for k, v in stages.items()},
                "in_process_seconds": round(local_s, 1)}
            print(json.dumps({name: out["benchmarks"][name]}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
