"""Standard IR measures through ir_measures, TREC export, and paired significance tests."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


def ir_figures(qrels: Qrels, run: Run, cutoffs: tuple[int, ...] = (10, 100)) -> dict[str, float]:
    """MAP, nDCG@10, P@1, RR and Recall@k over the questions in ``qrels`` (ir_measures)."""
    import ir_measures
    from ir_measures import AP, P, R, RR, nDCG
    measures = [AP, AP @ 10, nDCG @ 10, P @ 1, RR] + [R @ k for k in cutoffs]
    agg = ir_measures.calc_aggregate(measures, qrels, run)
    # ir_measures' AP divides by every relevant judged candidate, not only those in the top 10 as
    # SemEval's MAP does, so it is named apart from the official figure.
    return {("trec_" + str(m) if str(m).startswith("AP") else str(m)): float(v) for m, v in agg.items()}


def per_query(qrels: Qrels, run: Run, measure: str = "AP@10") -> dict[str, float]:
    """One measure per question of ``qrels`` (0 where the run has nothing for it), for paired tests."""
    import ir_measures
    m = ir_measures.parse_measure(measure)
    out = {q: 0.0 for q in qrels}
    for r in ir_measures.iter_calc([m], qrels, run):
        out[r.query_id] = float(r.value)
    return out


def write_trec_run(run: Run, path: Path, tag: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for qid, docs in run.items():
            ranked = sorted(docs.items(), key=lambda kv: kv[1], reverse=True)
            for rank, (did, s) in enumerate(ranked, 1):
                fh.write(f"{qid} Q0 {did} {rank} {s:.6f} {tag}\n")


def write_trec_qrels(qrels: Qrels, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for qid, docs in qrels.items():
            for did, rel in docs.items():
                fh.write(f"{qid} 0 {did} {rel}\n")


def read_trec_run(path: Path) -> Run:
    """What write_trec_run wrote."""
    import ir_measures
    run: Run = {}
    for r in ir_measures.read_trec_run(str(path)):
        run.setdefault(r.query_id, {})[r.doc_id] = float(r.score)
    return run


def read_trec_qrels(path: Path) -> Qrels:
    """What write_trec_qrels wrote."""
    import ir_measures
    qrels: Qrels = {}
    for q in ir_measures.read_trec_qrels(str(path)):
        qrels.setdefault(q.query_id, {})[q.doc_id] = int(q.relevance)
    return qrels


def paired_randomization(a: list[float], b: list[float], trials: int = 10000, seed: int = 0) -> float:
    """Two-sided p-value of mean(a - b) under random sign flips (Smucker, Allan and Carterette 2007)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size == 0:
        raise ValueError("no paired questions to compare")
    observed = abs(d.mean())
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(trials, d.size))
    means = np.abs((signs * d).mean(axis=1))
    return float((np.sum(means >= observed - 1e-12) + 1) / (trials + 1))


def paired_t(a: list[float], b: list[float]) -> float:
    from scipy import stats
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if np.allclose(d, 0):
        return 1.0
    if np.allclose(d, d[0]):  # a constant, non-zero difference: no variance, certainly different
        return 0.0
    p = stats.ttest_rel(a, b).pvalue
    return float(p) if not math.isnan(p) else 1.0


def paired_ap(a: dict[str, float], b: dict[str, float]) -> dict:
    """The paired tests of two runs' per-question AP over the questions both have: how many, the paired
    randomisation p and the paired t-test p (a against b), and the 95% interval of the difference in MAP (a - b)."""
    qs = sorted(set(a) & set(b))
    x, y = [a[q] for q in qs], [b[q] for q in qs]
    return {"questions": len(qs), "p_randomization": paired_randomization(x, y), "p_ttest": paired_t(x, y),
            # how big the difference may be, beside whether it is 0: a bootstrap over the same questions
            "difference_interval_95": map_interval({q: a[q] - b[q] for q in qs})}


def against_shipped(a: dict[str, float], b: dict[str, float]) -> dict:
    """A candidate's per-question AP ``a`` against the shipped setting's ``b`` on the same questions (the
    cross-validation scripts' judgement): both MAPs, the paired tests (``paired_ap``) and on how many questions the
    candidate is better and worse."""
    return {"MAP": sum(a.values()) / len(a), "shipped_MAP": sum(b.values()) / len(b), **paired_ap(a, b),
            "better": sum(a[q] > b[q] for q in a), "worse": sum(a[q] < b[q] for q in a)}


BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 2016


def bootstrap_means(values, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """The mean of ``values`` over ``resamples`` draws of as many values with replacement (seeded: the same values
    give the same means), drawn a thousand resamples at a time to bound the memory."""
    x = np.asarray(values, dtype=float)
    if not len(x):
        return np.zeros(0)
    rng, out = np.random.default_rng(seed), []
    for start in range(0, resamples, 1000):
        out.append(x[rng.integers(0, len(x), size=(min(1000, resamples - start), len(x)))].mean(axis=1))
    return np.concatenate(out)


def normal_interval(values, level: float = 0.95) -> list[float] | None:
    """The ``level`` interval of a mean by the normal approximation (mean +- z * sd / sqrt(n)): for thousands of
    questions, where it agrees with the bootstrap's and costs none of its resamples. None without values."""
    from statistics import NormalDist
    x = np.asarray(list(values), dtype=float)
    if not len(x):
        return None
    half = NormalDist().inv_cdf(0.5 + level / 2) * (x.std(ddof=1) if len(x) > 1 else 0.0) / math.sqrt(len(x))
    return [float(x.mean() - half), float(x.mean() + half)]


def map_interval(per_question: dict[str, float], level: float = 0.95) -> list[float] | None:
    """The ``level`` percentile interval of MAP over bootstrap resamples of the questions (``bootstrap_means`` of
    their AP): how far the figure would move with another draw of as many questions like these. None without
    questions."""
    means = bootstrap_means(list(per_question.values()))
    if not len(means):
        return None
    tail = (1 - level) / 2 * 100
    return [float(v) for v in np.percentile(means, [tail, 100 - tail])]
