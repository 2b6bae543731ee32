"""Run a ranker on a benchmark, score it officially, and keep a report folder."""
from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from ..candidates import Query
from ..rankers import Ranker, labels_from_scores
from .benchmarks import PUBLISHED, Benchmark, BenchmarkError, queries_for
from .measures import ir_figures, map_interval, write_trec_qrels, write_trec_run
from .scorer import Line, per_question_ap, read_lines, score

log = logging.getLogger(__name__)


def predictions(queries: list[Query], ranker: Ranker) -> list[Line]:
    """Official-format lines for every candidate, in the queries' own order."""
    all_scores = ranker.score(queries)
    lines = []
    for q, scores in zip(queries, all_scores):
        if len(scores) != len(q.candidates):
            raise RuntimeError(f"ranker {ranker.name} gave {len(scores)} scores for {len(q.candidates)} candidates")
        for c, s, lab in zip(q.candidates, scores, labels_from_scores(scores)):
            lines.append(Line(q.id, c.id, float(s), lab))
    return lines


def as_served(ranker: Ranker, subtask: str) -> Ranker:
    """``ranker`` as the /rerank endpoints rank a subtask A, B or C question: its lexical statistics from each
    question's own candidates (``per_request``), never from the rest of the file; a subtask D ranker as it is (its
    statistics are the file's pairs by design)."""
    from ..rankers import per_request
    return per_request(ranker) if subtask in ("A", "B", "C") else ranker


def align_to_gold(pred: list[Line], gold: list[Line]) -> list[Line]:
    by_id = {(p.qid, p.cid): p for p in pred}
    out = []
    for g in gold:
        p = by_id.get((g.qid, g.cid))
        if p is None:
            raise BenchmarkError(f"the ranker produced no score for gold candidate ({g.qid}, {g.cid})")
        out.append(p)
    return out


def write_predictions(lines: list[Line], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ranks: dict[str, int] = {}
    with open(path, "w", encoding="utf-8") as fh:
        for ln in lines:
            ranks[ln.qid] = ranks.get(ln.qid, 0) + 1
            fh.write(f"{ln.qid}\t{ln.cid}\t{ranks[ln.qid]}\t{ln.score:.8f}\t{'true' if ln.label else 'false'}\n")


def _atomic_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=list), encoding="utf-8")
    os.replace(tmp, path)


def run_benchmark(bench: Benchmark, ranker: Ranker, semeval_dir: Path, reports_dir: Path,
                  generation: str | None = None, indexed=None) -> dict:
    """``bench`` ranked by ``ranker`` as the /rerank endpoints rank (lexical statistics per question, ``per_request``)
    and scored. ``indexed``: the pipeline of a live generation (``indexed_by``), which gives a subtask B file's
    candidates what it stores for them, as POST /rerank/questions does."""
    if bench.subtask == "fullcorpus":
        raise BenchmarkError("use run_fullcorpus for the full-corpus benchmark")
    ranker = as_served(ranker, bench.subtask)
    xml, gold_path = bench.paths(semeval_dir)
    t0 = time.perf_counter()
    queries = queries_for(xml, bench.subtask, bench.variant)
    if bench.subtask == "B" and indexed is not None:
        from ..pipeline import as_given_to
        queries = as_given_to(indexed, queries)
        generation = generation or indexed.gen.name
    gold = read_lines(gold_path)
    pred = align_to_gold(predictions(queries, ranker), gold)
    seconds = time.perf_counter() - t0
    official = score(gold, pred, pred_name=f"{ranker.name} on {bench.name}")
    qrels = {}
    for g in gold:
        qrels.setdefault(g.qid, {})[g.cid] = int(g.label)
    run = {}
    for p in pred:
        run.setdefault(p.qid, {})[p.cid] = p.score
    figures = {**official.official(), **ir_figures(qrels, run)}
    ap = per_question_ap(gold, pred)
    from ..rankers import inference_report
    out, stamp = report_folder(reports_dir, bench.name, ranker.name)
    write_predictions(pred, out / "predictions.txt")
    write_trec_run(run, out / "run.trec", ranker.name)
    write_trec_qrels(qrels, out / "qrels.trec")
    # subtask B: how many candidates came with their comments' stored vectors (what the default B ranker routes by)
    stored = ({"candidates_with_stored_comments": sum(1 for q in queries for c in q.candidates
                                                      if "comment_answer_vectors" in c.meta)}
              if bench.subtask == "B" else {})
    report = {"benchmark": bench.name, "subtask": bench.subtask, "ranker": ranker.name,
              "generation": generation, **stored, "created_at": stamp.isoformat(), "seconds": round(seconds, 2),
              "questions": official.questions, "lines": official.lines, "figures": figures,
              "MAP": figures["MAP"], "MRR": figures["MRR"], "P@1": figures.get("P@1"),
              "MAP_interval_95": map_interval(ap), "per_question_ap": ap, "folder": str(out),
              # how each MiniLM model in it ran: the same preset runs torch-bf16 or torch-fp32 by the CPU (auto)
              "inference": {r["model"]: r["variant"] for r in inference_report([ranker])}}
    finish_report(out, report, PUBLISHED.get(bench.subtask) if bench.split == "test" else None)
    return report


def default_ranker(subtask: str, settings) -> str:
    """The ranker used when none is named: configurable per subtask (CQA_DEFAULT_RANKER[_B|_C]; D, Arabic:
    CQA_ARABIC_RANKER, or bm25-arabic where it is empty)."""
    return {"B": settings.default_ranker_b, "C": settings.default_ranker_c,
            "D": settings.arabic_ranker or "bm25-arabic"}.get(subtask, settings.default_ranker)


def indexed_by(settings, subtask: str):
    """For subtask B, the pipeline of the data folder's live generation (what the service would serve;
    no reranker), whose stored vectors of the candidates' questions and comments the B rankers read as
    /rerank/questions gives them; None for other benchmarks or without a live generation."""
    from indexing.generations import current_generation
    if subtask != "B" or current_generation(settings.index_root) is None:
        return None
    from indexing.searcher import load_current

    from ..pipeline import build_pipeline
    gen = load_current(settings.index_root, settings.device)
    log.info("subtask B candidates read against generation %s, as /rerank/questions reads them", gen.name)
    return build_pipeline(settings, gen, None, rerankers={}, arabic=None).prepare()


def run_named(settings, benchmark: str, ranker: str | None = None, generation: str | None = None,
              progress: bool = True, search_compare: str | None = None, indexed=None) -> dict:
    """Run any named benchmark with its default ranker unless one is named, as ``cqa evaluate`` and
    POST /evaluation do: given candidates (A, B, C, official scorer), the first stage over the whole corpus,
    or the /search pipeline end to end (``ranker`` replaces the target's reranker; ``search_compare`` names
    another run of the same searches to test against, see search_benchmark.COMPARE_RUNS)."""
    from ..presets import build_label, spec_of
    from .benchmarks import BENCHMARKS
    if benchmark not in BENCHMARKS:
        raise BenchmarkError(f"unknown benchmark {benchmark!r}; known: {', '.join(BENCHMARKS)}")
    bench = BENCHMARKS[benchmark]
    if ranker:
        spec_of(ranker.split("[", 1)[0])  # an unknown name is refused before any work
    if bench.search_target:
        from ..search_benchmark import COMPARE_RUNS, run_search_benchmark
        if search_compare and search_compare not in COMPARE_RUNS:
            raise BenchmarkError(f"--compare on a search benchmark takes one of: {', '.join(COMPARE_RUNS)}")
        if ranker:  # a reranked threads search runs the questions reranker (pipeline.RANKED_AS)
            from ..pipeline import RANKED_AS
            target = RANKED_AS.get(bench.search_target, bench.search_target)
            settings = settings.model_copy(update={f"search_ranker_{target}": ranker})
        return run_search_benchmark(settings, bench.split, bench.search_target,
                                    compare=COMPARE_RUNS.get(search_compare), progress=progress)
    if bench.subtask == "fullcorpus":
        from ..fullcorpus import run_fullcorpus
        return run_fullcorpus(settings, ranker or "first-stage", split=bench.split, progress=progress)
    if bench.subtask == "D":
        if ranker:
            raise BenchmarkError(f"{benchmark} runs every Arabic ranker by cross-validation; it takes no --ranker")
        return run_arabic(settings, bench, progress)
    return run_benchmark(bench, build_label(ranker or default_ranker(bench.subtask, settings), settings),
                         settings.semeval_dir, settings.reports_dir, generation=generation,
                         indexed=indexed if indexed is not None else indexed_by(settings, bench.subtask))


def run_arabic(settings, bench: Benchmark, progress: bool = True) -> dict:
    """Subtask D by 5-fold cross-validation (ranking/arabic.py); the report carries every ranker's figures, and
    its headline figures are the best ranker's by cross-validated MAP."""
    from ..arabic import run_cross_validation
    xml, gold = bench.paths(settings.semeval_dir)
    t0 = time.perf_counter()
    cv = run_cross_validation(xml, gold, progress=progress)
    best = max(cv["rankers"], key=lambda n: cv["rankers"][n]["MAP"])
    out, stamp = report_folder(settings.reports_dir, bench.name, "cross-validation")
    figures = {k: v for k, v in cv["rankers"][best].items() if k not in ("p_vs_ir_baseline", "MAP_interval_95")}
    report = {**cv, "ranker": best, "created_at": stamp.isoformat(), "seconds": round(time.perf_counter() - t0, 2),
              "figures": figures, "MAP": figures["MAP"], "MAP_interval_95": cv["rankers"][best]["MAP_interval_95"],
              "folder": str(out)}
    _atomic_json(out / "report.json", report)
    _atomic_json(out.parent / "latest.json", report)
    return report


def report_folder(reports_dir: Path, benchmark: str, ranker: str) -> tuple[Path, datetime]:
    """A new, time-stamped folder for one evaluation run; kept, never overwritten."""
    stamp = datetime.now(timezone.utc)
    out = reports_dir / benchmark / f"{stamp:%Y%m%dT%H%M%S%fZ}-{ranker}"
    out.mkdir(parents=True, exist_ok=True)
    return out, stamp


def finish_report(out: Path, report: dict, published: dict | None = None,
                  xlabel: str = "MAP (official SemEval scorer)", references: dict[str, float] | None = None) -> None:
    """report.json, report.md and chart.png beside the other rankers' latest runs (and ``references``: other orders
    of the same run, in grey), then latest.json: what the API serves for this benchmark."""
    _atomic_json(out / "report.json", report)
    systems = latest_per_ranker(out.parent)
    _write_markdown(out / "report.md", report, systems)
    write_chart(out / "chart.png", report["benchmark"], {n: r["MAP"] for n, r in systems.items()}, published, xlabel,
                references)
    _atomic_json(out.parent / "latest.json", {k: v for k, v in report.items() if k != "per_question_ap"})


def latest_per_ranker(bench_dir: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for rj in sorted(bench_dir.glob("*/report.json")):
        try:
            r = json.loads(rj.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        out[r["ranker"]] = r  # sorted by time stamp, so the last one wins
    return out


SHIPPED_FILE = Path(__file__).resolve().parent.parent / "shipped_figures.json"


def shipped_figures(path: Path = SHIPPED_FILE) -> list[dict]:
    """The figures measured for this release (benchmark, ranker, figures, command, date, machine), written
    by scripts/ship_figures.py from real report folders: what a fresh install shows before any run."""
    if not path.exists():
        return []
    figures = json.loads(path.read_text(encoding="utf-8"))["figures"]
    for f in figures:  # figures shipped before reports recorded how the MiniLM models ran: not recorded (None)
        f.setdefault("inference", None)
        f.setdefault("data_folder", None)  # any data folder gives the figure
        f.setdefault("MAP_interval_95", None)  # shipped before reports carried the interval
    return figures


def latest_reports(reports_dir: Path) -> dict[str, dict]:
    """The latest report per benchmark: what the API serves as its MAP."""
    out = {}
    if not reports_dir.exists():
        return out
    for lj in sorted(reports_dir.glob("*/latest.json")):
        try:
            out[lj.parent.name] = json.loads(lj.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
    return out


def _write_markdown(path: Path, report: dict, systems: dict[str, dict]) -> None:
    f = report["figures"]
    lines = [f"# {report['benchmark']}: {report['ranker']}", "",
             f"{report['created_at']} · {report['questions']} questions · {report['seconds']} s", ""]
    if report.get("MAP_interval_95"):
        lo, hi = report["MAP_interval_95"]
        lines += [f"MAP {report['MAP']:.4f}, 95% interval {lo:.4f}-{hi:.4f} (a bootstrap over the questions: where "
                  "another draw of as many questions like these would put it)", ""]
    lines += ["| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v:.4f} |" for k, v in f.items()]
    lines += ["", "## Latest run of each ranker on this benchmark", "", "| ranker | MAP | MRR | when |", "|---|---|---|---|"]
    for name, r in sorted(systems.items(), key=lambda kv: -kv[1]["MAP"]):
        lines.append(f"| {name} | {r['MAP']:.4f} | {r['MRR']:.2f} | {r['created_at'][:19]} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_chart(path: Path, title: str, systems: dict[str, float], published: dict | None = None,
                xlabel: str = "MAP (official SemEval scorer)", references: dict[str, float] | None = None) -> None:
    """MAP per system as horizontal bars, beside the official IR baseline and the best 2016 system (``published``)
    or other ``references``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted(systems, key=systems.get)
    values = [systems[n] for n in names]
    colors = ["#3b6ea5"] * len(names)
    if published:
        names = ["IR baseline (official)", f"{published['best'][0]} (best 2016)"] + names
        values = [published["IR baseline"], published["best"][1]] + values
        colors = ["#999999", "#d08c2b"] + colors
    for name, value in (references or {}).items():
        names, values, colors = [name] + names, [value] + values, ["#999999"] + colors
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(names) + 1.2))
    ax.barh(names, values, color=colors)
    for y, v in enumerate(values):
        ax.text(v + 0.005, y, f"{v:.4f}", va="center", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
