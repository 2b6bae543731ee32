"""POST /search over an Arabic forum, as a user gets it: a real `cqa serve` over the 2016 subtask D dev pairs as the
forum (each pair a thread: its question, and its answer as the one comment), and each dev-D original question sent
to it (its text as the body, k 10), targets answers and questions, with the served reranker and with "rerank": false
(the first stage alone), side by side in one run, on two servers: CQA_ARABIC_RANKER empty (off: Arabic searched as
any text, the dense index and the English rerankers included) and the defaults (on: a question in Arabic leaves the
dense index out and has its head reranked by $CQA_ARABIC_RANKER). Each reranked run is also run in process through
the same pipeline (the reference). Judged relevant: a question's own pairs that the dev-D gold marks
true (the pair's answer for target answers, its thread for target questions); every other pair of the forum counts
as not relevant, as in the English /search benchmarks. Measures: MAP@10, P@1, nDCG@10 (ranking.fullcorpus); paired
randomisation of reranked against first stage, and of on against off. Prints a JSON object last.

    python bench/arabic_search.py --data-dir DFORUM

DFORUM: a data folder holding the dev-D file and a generation (`CQA_DATA_DIR=DFORUM cqa ingest
../shared/data/semeval2016/arabic/SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.gz`, then `cqa reindex`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import post_json, server  # noqa: E402
from search_quality import shown  # noqa: E402


def dev_d_qrels(settings, target: str) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Per dev-D original question, its pairs' judgements by the id /search returns for the target, and its text."""
    from indexing.loaders import load_semeval
    from ranking.evaluation.benchmarks import BENCHMARKS
    from ranking.evaluation.scorer import read_lines
    xml, gold_path = BENCHMARKS["semeval2016-dev-D"].paths(settings.semeval_dir)
    doc = load_semeval(xml, strict=True)
    good = {(g.qid, g.cid): g.label for g in read_lines(gold_path)}
    qrels: dict[str, dict[str, int]] = {}
    for t in doc.threads:
        q = t.meta["orgq_id"]
        ids = [t.id] if target == "questions" else [a.id for a in t.answers]
        for i in ids:
            qrels.setdefault(q, {})[i] = int(good[(q, t.meta["qaid"])])
    qrels = {q: j for q, j in qrels.items() if any(j.values())}
    return qrels, {q.id: q.body for q in doc.org_questions.values() if q.id in qrels}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, required=True, help="the dev-D forum's data folder")
    ap.add_argument("--targets", default="answers,questions")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
    args = ap.parse_args()

    import numpy as np

    from app.settings import Settings
    from indexing.searcher import load_current
    from indexing.store import ThreadStore
    from ranking.evaluation.measures import paired_randomization, per_query
    from ranking.fullcorpus import figures_of
    from ranking.pipeline import build_pipeline
    from ranking.search_benchmark import RERANKED, search_run

    settings = Settings(data_dir=args.data_dir)
    gen = load_current(settings.index_root, settings.device)
    sets = {}
    for target in args.targets.split(","):
        qrels, questions = dev_d_qrels(settings, target)
        if args.limit:
            questions = dict(list(questions.items())[: args.limit])
            qrels = {q: qrels[q] for q in questions}
        sets[target] = (qrels, questions)

    def figures(qrels, run) -> dict:
        f = figures_of(qrels, run)
        return {m: round(f[m], 4) for m in ("MAP@10", "P@1", "nDCG@10")}
    out: dict = {"bench": "arabic_search", "forum": str(args.data_dir), "generation": gen.name, "k": 10, "configs": {}}
    served_runs: dict = {}
    for config, env in (("off", {"CQA_ARABIC_RANKER": ""}), ("on", {})):
        out["configs"][config] = {"env": env, "targets": {}}
        with server(args.data_dir, env) as (base, ready):
            out["configs"][config]["served_rerankers"] = ready["search_rerankers"]
            post_json(base + "/search", {"question": {"body": "warm up"}})
            for target, (qrels, questions) in sets.items():
                res = out["configs"][config]["targets"][target] = {"questions": len(questions)}
                for label, rerank in (("first stage", False), ("reranked", True)):
                    run, ms, names = {}, [], set()
                    for qid, body in questions.items():
                        t0 = time.perf_counter()
                        status, resp = post_json(base + "/search", {"question": {"body": body}, "k": 10,
                                                                    "target": target, "rerank": rerank})
                        ms.append(1000 * (time.perf_counter() - t0))
                        if status != 200:
                            raise SystemExit(f"POST /search answered {status} for question {qid}: {resp}")
                        run[qid] = shown(resp["results"], qrels.get(qid, {}))
                        names.add(resp["reranker"])
                    served_runs[(config, target, label)] = run
                    res[label] = {**figures(qrels, run), "reranker": sorted(map(str, names)),
                                  "p50_ms": round(float(np.percentile(ms, 50)), 1),
                                  "p95_ms": round(float(np.percentile(ms, 95)), 1)}
        # the reference: the same questions through the pipeline in process, with the server's settings
        with ThreadStore(settings.store_path) as store:
            pipe = build_pipeline(settings.model_copy(update={"arabic_ranker": env.get("CQA_ARABIC_RANKER",
                                                                                        settings.arabic_ranker)}),
                                  gen, store)
            for target, (qrels, questions) in sets.items():
                local, _ = search_run(pipe, {q: ("", b) for q, b in questions.items()}, target, RERANKED, qrels)
                local = {q: dict(list(r.items())[:10]) for q, r in local.items()}
                served = served_runs[(config, target, "reranked")]
                res = out["configs"][config]["targets"][target]
                res["reranked"]["in_process_MAP@10"] = figures(qrels, local)["MAP@10"]
                res["reranked"]["questions_ranked_differently"] = sum(list(served[q]) != list(local[q])
                                                                      for q in questions)
                a, b = (per_query(qrels, served_runs[(config, target, k)], "AP@10") for k in ("reranked", "first stage"))
                res["p_reranked_vs_first_stage"] = round(paired_randomization(
                    [a.get(q, 0.0) for q in sorted(qrels)], [b.get(q, 0.0) for q in sorted(qrels)]), 4)
                print(json.dumps({config: {target: res}}), file=sys.stderr, flush=True)
    for target, (qrels, _) in sets.items():  # what a user gets now against before: the served defaults, on and off
        a, b = (per_query(qrels, served_runs[(c, target, "reranked")], "AP@10") for c in ("on", "off"))
        out.setdefault("p_on_vs_off", {})[target] = round(paired_randomization(
            [a.get(q, 0.0) for q in sorted(qrels)], [b.get(q, 0.0) for q in sorted(qrels)]), 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
