"""Argument parsing and output for ``cqa evaluate`` and ``cqa predict``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..neural.inference import ALIASES, VARIANTS
from ..presets import PRESETS, UnknownRanker, build, build_label
from .benchmarks import BENCHMARKS, BenchmarkError, queries_for
from .forum_answers import JudgedBy
from .measures import paired_ap
from .runner import default_ranker
from .scorer import ScoringError, score_files


def _default_help() -> str:
    """Each subtask's default ranker setting and its default value, read from the settings (never written twice)."""
    from ..settings import RankingSettings
    fields = RankingSettings.model_fields
    return "default: " + ", ".join(f"${'CQA_' + name.upper()} ({fields[name].default}) for {task}" for name, task in
                                   (("default_ranker", "A"), ("default_ranker_b", "B"),
                                    ("default_ranker_c", "C"), ("arabic_ranker", "D")))


DEFAULT_HELP = _default_help()


def _build(label: str, settings, args: argparse.Namespace):
    """A preset, by name or with its variants (``NAME[int8]``), and --inference / --max-length on top."""
    if args.inference or args.max_length:
        return build(label, settings, args.inference, args.max_length)
    return build_label(label, settings)


def add_evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gold", type=Path, help="official gold file (.relevancy)")
    p.add_argument("--pred", type=Path, help="prediction file in the official format")
    p.add_argument("--compare-pred", type=Path, metavar="FILE",
                   help="with --gold and --pred: also score this prediction file and test the difference in "
                        "per-question AP (paired randomisation and paired t-test), e.g. two runs' predictions.txt")
    p.add_argument("--benchmark", choices=sorted(BENCHMARKS), metavar="NAME",
                   help="run a ranker on a named benchmark (see --list)")
    p.add_argument("--ranker", default=None, metavar="NAME",
                   help=f"ranker configuration ({DEFAULT_HELP}; see --list); with --feedback: search the judged "
                        "searches again (those whose request the log kept, CQA_FEEDBACK_QUERIES=true) with this "
                        "ranker as their target's reranker, beside the reranker serving, both scored by the users' "
                        "judgements (MAP, the share of helpful results found, the paired test)")
    p.add_argument("--compare", metavar="NAME",
                   help="also run this ranker and test the difference in per-question AP "
                        "(paired randomisation and paired t-test); on the search benchmarks: first-stage "
                        "(the same searches without reranking), no-collapse or first-stage-no-collapse")
    p.add_argument("--inference", choices=VARIANTS + tuple(ALIASES), default=None, metavar="VARIANT",
                   help=f"run the ranker's MiniLM parts as VARIANT ({', '.join(VARIANTS)}; int8 = onnx-int8); "
                        "default: $CQA_INFERENCE (auto)")
    p.add_argument("--max-length", type=int, default=None, metavar="N",
                   help="the ranker's MiniLM parts read at most N word pieces per input")
    p.add_argument("--duplicates", action="store_true",
                   help="judge the data folder's own similar-question search by the forum's duplicate links "
                        "(meta.duplicate_of, which `cqa ingest` of a StackExchange dump takes from its PostLinks.xml): "
                        "each question linked as a duplicate asked for its similar questions as GET "
                        "/threads/{id}/similar asks, reranked and not (the paired test), scored by the other "
                        "questions of its duplicate group (MAP@10, P@1, MRR, nDCG@10, Recall@10)")
    p.add_argument("--target", choices=["questions", "threads", "answers", "comments"], default=None,
                   help="with --duplicates: what the similar search lists (default: questions); answers: each "
                        "linked question asks for answers, and should find those of its group's other questions that "
                        "the forum judged useful (--judged-by); with --feedback --ranker: which searches are searched "
                        "again, answers (the default), questions (with the threads searches) or comments (the "
                        "threads whose comments GET /threads/{id}/answers sorted, ranked again with NAME as the "
                        "default ranker)")
    p.add_argument("--answers", action="store_true",
                   help="judge how the data folder's own threads have their comments sorted (GET "
                        "/threads/{id}/answers, the default ranker) by the forum's own signals: the answer the asker "
                        "accepted, or the votes (--judged-by; `cqa ingest` of a StackExchange dump keeps both as "
                        "meta.accepted and meta.score), beside the thread's own order and the votes' order (the "
                        "paired test), with the official scorer's MAP, AvgRec and MRR; only threads whose order can "
                        "matter (a relevant comment and one not) are asked. --ranker ranks with another preset (what "
                        "the endpoint would serve with it as $CQA_DEFAULT_RANKER), --compare adds one beside it")
    p.add_argument("--judged-by", choices=[j.value for j in JudgedBy], default=None,
                   help="with --answers, or --duplicates --target answers: accepted (the asker's accepted answer "
                        "is relevant; the default) or votes (an answer voted up or accepted is relevant)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="with --duplicates: only the first N linked questions; with --answers, the first N threads "
                        "asked; in the store's order (0: all)")
    p.add_argument("--feedback", action="store_true",
                   help="MAP on the forum's own traffic: the searches this data folder's service served (POST /search, "
                        "GET /threads/{id}/similar) and the threads whose comments it sorted (GET "
                        "/threads/{id}/answers) that its users judged (POST /feedback, the search page's Helpful? "
                        "buttons), per endpoint, target and reranker, with the official scorer's arithmetic over the "
                        "first 10 ranks of the judged results, beside the same results in the order the reranker was "
                        "given them (a thread's comments: the thread's own order) with the paired test; as GET "
                        "/evaluation/feedback reports it")
    p.add_argument("--days", type=float, default=None, metavar="N",
                   help="with --feedback: only the searches served in the last N days (default: all kept)")
    p.add_argument("--list", action="store_true", help="list benchmarks and ranker presets")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line last")


def add_predict_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--subtask", choices=["A", "B", "C", "D"], required=True,
                   help="A: a thread's comments; B: related questions; C: related threads' comments; D: Arabic "
                        "question-answer pairs (the 2016 subtask D format; its term statistics come from the "
                        "file's pairs, as `cqa evaluate --benchmark semeval2016-dev-D` reports bm25)")
    p.add_argument("--input", type=Path, required=True, help="SemEval-format XML, or .xml.gz (labels optional)")
    p.add_argument("--output", type=Path, required=True, help="where to write the predictions")
    p.add_argument("--ranker", default=None, metavar="NAME", help=f"ranker ({DEFAULT_HELP})")
    p.add_argument("--inference", choices=VARIANTS + tuple(ALIASES), default=None, metavar="VARIANT",
                   help=f"MiniLM parts run as VARIANT ({', '.join(VARIANTS)}); default: $CQA_INFERENCE (auto)")
    p.add_argument("--max-length", type=int, default=None, metavar="N", help="MiniLM word pieces per input")


def evaluate_command(args: argparse.Namespace, settings, emit) -> int:
    if args.list:
        print("benchmarks:")
        for name, b in BENCHMARKS.items():
            what = f"/search end to end, target {b.search_target}" if b.search_target else f"subtask {b.subtask}"
            print(f"  {name:36s} {what}, 2016 {b.split}")
        print("the forum's own judgements, on this data folder's store (POST /evaluation runs them by these names):")
        from .duplicates import BENCHMARK as DUPLICATES
        from .duplicates import answers_benchmark
        print(f"  {DUPLICATES:36s} --duplicates: similar questions, judged by its duplicate links")
        for j in JudgedBy:
            print(f"  {answers_benchmark(j):36s} --duplicates --target answers --judged-by {j.value}: answers for a "
                  "duplicate, judged by its group's")
        for j in JudgedBy:
            print(f"  {j.benchmark:36s} --answers --judged-by {j.value}: a thread's comments, judged by "
                  f"{'the accepted answer' if j is JudgedBy.ACCEPTED else 'the answers voted up or accepted'}")
        from .replay import BENCHMARKS as REPLAYS
        for name, target in REPLAYS.items():
            if target == "comments":
                print(f"  {name:36s} --feedback --ranker NAME --target comments: the threads whose comments readers "
                      "judged, ranked again with NAME beside the default ranker")
                continue
            print(f"  {name:36s} --feedback --ranker NAME{' --target questions' if target == 'questions' else ''}: "
                  f"the judged {target} searches searched again with NAME beside the served reranker")
        for title, retriever in (("rankers (presets: kind, weights, parts):", False),
                                 ("first-stage retrievers (the fullcorpus benchmarks):", True)):
            print(title)
            for name, spec in sorted(PRESETS.items()):
                if (spec.kind == "retriever") == retriever:
                    print(f"  {name:30s} {spec.summary()}\n  {'':30s} {spec.description}")
        return 0
    try:
        if args.days is not None and not args.feedback:
            raise ScoringError("--days goes with --feedback")
        if args.feedback:
            others = [f"--{k.replace('_', '-')}" for k in ("gold", "pred", "compare_pred", "benchmark", "compare",
                                                           "inference", "max_length", "judged_by", "limit")
                      if getattr(args, k)]
            if args.duplicates or args.answers or others:
                raise ScoringError("--feedback is its own evaluation (of the searches served): without "
                                   f"{', '.join(others or ['--duplicates', '--answers'])} (--ranker searches the "
                                   "judged searches again with another ranker, beside the one serving)")
            if args.days is not None and args.days <= 0:
                raise ScoringError(f"--days {args.days:g}: a number of days above 0")
            if args.target and not args.ranker:
                raise ScoringError("--target goes with --feedback --ranker (which searches to search again)")
            if args.target == "threads":
                raise ScoringError("--target threads: a threads search is searched again as the questions search "
                                   "it ranks by (--target questions)")
            return _replay(args, settings, emit) if args.ranker else _feedback(args, settings, emit)
        if args.duplicates and args.answers:
            raise ScoringError("--duplicates and --answers are two evaluations: one at a time")
        if args.target and not args.duplicates:
            raise ScoringError("--target goes with --duplicates, or with --feedback --ranker")
        if args.target == "comments":
            raise ScoringError("--target comments goes with --feedback --ranker (the threads whose comments readers "
                               "judged); --answers judges a thread's comments by the forum's own signals")
        if args.judged_by and not (args.answers or (args.duplicates and args.target == "answers")):
            raise ScoringError("--judged-by goes with --answers, or with --duplicates --target answers")
        if args.limit is not None and not (args.duplicates or args.answers):
            raise ScoringError("--limit goes with --duplicates or --answers")
        if args.answers:
            if args.gold or args.pred or args.benchmark or args.compare_pred or args.inference or args.max_length:
                raise ScoringError("--answers is its own evaluation: without --gold, --pred, --benchmark, "
                                   "--compare-pred, --inference or --max-length (a ranker's variant goes in its "
                                   "name: --ranker 'NAME[int8]')")
            return _forum_answers(args, settings, emit)
        if args.duplicates:
            if args.gold or args.pred or args.benchmark or args.compare or args.compare_pred:
                raise ScoringError("--duplicates is its own evaluation: without --gold, --pred, --benchmark or "
                                   "--compare")
            return _duplicates(args, settings, emit)
        if args.gold or args.pred:
            if not (args.gold and args.pred):
                raise ScoringError("--gold and --pred go together")
            s = score_files(args.gold, args.pred)
            fig = s.official()
            print(f"MAP    {fig['MAP']:.4f}\nAvgRec {fig['AvgRec']:.4f}\nMRR    {fig['MRR']:.2f}\n"
                  f"P      {fig['P']:.4f}\nR      {fig['R']:.4f}\nF1     {fig['F1']:.4f}\nAcc    {fig['Acc']:.4f}")
            out = {k: round(v, 4) for k, v in fig.items()}
            if args.compare_pred:
                out["compare"] = compare_files(args.gold, args.pred, args.compare_pred)
                _print_compare(str(args.compare_pred), out["compare"])
            if args.json:
                emit(out)
            return 0
        if args.compare_pred:
            raise ScoringError("--compare-pred goes with --gold and --pred")
        if not args.benchmark:
            raise ScoringError("say what to evaluate: --gold and --pred, or --benchmark NAME (see --list)")
        from .runner import indexed_by, run_benchmark, run_named
        bench = BENCHMARKS[args.benchmark]
        if args.compare and bench.subtask in ("fullcorpus", "D"):
            raise ScoringError("--compare works on the A, B and C benchmarks and the search benchmarks")
        if bench.search_target:
            return _search_benchmark(args, settings, bench, emit)
        indexed = indexed_by(settings, bench.subtask)  # B: the candidates as /rerank/questions gives them, both runs
        if bench.subtask == "fullcorpus" or not (args.inference or args.max_length):
            report = run_named(settings, bench.name, args.ranker, indexed=indexed)
        else:
            ranker = _build(args.ranker or default_ranker(bench.subtask, settings), settings, args)
            report = run_benchmark(bench, ranker, settings.semeval_dir, settings.reports_dir, indexed=indexed)
        out = {"benchmark": bench.name, "ranker": report["ranker"], **report["figures"],
               "report": report["folder"]}
        if bench.subtask == "D":
            for name, r in report["rankers"].items():
                p = "" if r["p_vs_ir_baseline"] is None else f"   p vs ir-baseline {r['p_vs_ir_baseline']:.4g}"
                lo, hi = r["MAP_interval_95"]
                print(f"{name:16s} MAP {r['MAP']:.4f} (95% {lo:.4f}-{hi:.4f})   MRR {r['MRR']:.2f}{p}")
            print(f"({report['protocol']}; {report['note']})")
            out["rankers"] = report["rankers"]
        if args.compare:
            other = _build(args.compare, settings, args)
            r2 = run_benchmark(bench, other, settings.semeval_dir, settings.reports_dir, indexed=indexed)
            out["compare"] = {"ranker": other.name, "MAP": r2["MAP"],
                              **paired_ap(report["per_question_ap"], r2["per_question_ap"])}
        for k, v in out.items():
            if isinstance(v, float):
                print(f"{k:12s} {v:.4f}")
        _with_interval(out, report)
        if "compare" in out:
            _print_compare(out["compare"]["ranker"], out["compare"])
        print(f"report: {report['folder']}")
        if args.json:
            emit(out)
        return 0
    except (ScoringError, BenchmarkError, UnknownRanker, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _feedback(args: argparse.Namespace, settings, emit) -> int:
    from .feedback import FeedbackLog, feedback_report
    r = feedback_report(FeedbackLog.of(settings), args.days)
    window = f"the last {args.days:g} days" if args.days is not None else "all kept"
    print(f"feedback log {settings.feedback_file}: {r['searches_judged']} judged searches ({window})")
    for g in r["groups"]:
        replayable = f"; {g['replayable']} can be searched again (--ranker NAME)" if g["replayable"] else ""
        print(f"{g['endpoint']} {g['target']}, reranker {g['reranker'] or 'none'}: {g['searches']} searches, "
              f"{g['judgements']} judgements ({g['judgements_later_pages']} more on later pages){replayable}")
        if g.get("MAP") is not None:
            lo, hi = g["MAP_interval_95"]
            print(f"  MAP {g['MAP']:.4f} (95% {lo:.4f}-{hi:.4f})   unjudged as not helpful {g['MAP_unjudged_not_helpful']:.4f}"
                  f"   MRR {g['MRR']:.2f}   helpful {100 * g['helpful_share']:.1f}%")
        if g.get("interleaving"):
            it = g["interleaving"]
            needed = it.get("searches_for_a_verdict")
            print(f"  interleaved with {it['challenger']}: {it['searches']} searches, the reranker preferred in "
                  f"{it['reranker_wins']}, the challenger in {it['challenger_wins']}, {it['ties']} ties "
                  f"(sign test p = {it['p']:.4g}; "
                  + (f"about {needed} searches for a verdict at this split)" if needed else "neither leads)"))
        if g.get("first_stage"):
            f = g["first_stage"]
            before = {"thread": "in the thread's own order", "given": "in the order sent"}.get(f["order"],
                                                                                               "before the reranker")
            print(f"  {before}: MAP {f['MAP']:.4f}   reranker's gain {f['reranker_gain']:+.4f} (p = {f['p']:.4g})")
    if not r["groups"]:
        print("nothing judged yet: searches carry a search_id; POST /feedback judges their results")
    print(f"({r['note']})")
    if args.json:
        emit(r)
    return 0


def _replay(args: argparse.Namespace, settings, emit) -> int:
    """The judged searches searched again with --ranker beside the served reranker (``replay.replay``)."""
    from indexing.generations import IndexFormatError
    from .replay import replay
    target = args.target or "answers"
    try:
        r = replay(settings, args.ranker, target, args.days)
    except IndexFormatError as e:
        raise ScoringError(str(e)) from None
    said = {"without_request": "without request", "not_reranked": "not reranked", "thread_gone": "thread gone",
            "given": "sent to /rerank (never kept)"}
    skipped = ", ".join(f"{r[k]} {words}" for k, words in said.items() if r[k])
    what = "threads' comment orders ranked" if target == "comments" else f"{target} searches searched"
    print(f"feedback log {settings.feedback_file}: {r['searches']} judged {what} again in "
          f"generation {r['generation']}{f' (left out: {skipped})' if skipped else ''}; {r['other_generation']} "
          f"served by another generation, {r['other_reranker']} by another reranker than {r['served']['reranker']}; "
          f"{r['reproduced']} of {r['reproducible']} shown again as served")
    print(f"as shown        MAP {r['as_shown_MAP']:.4f}")
    for name in ("served", "candidate"):
        f = r[name]
        lo, hi = f["MAP_interval_95"]
        kept = f"   helpful found {100 * f['helpful_found']:.1f}%" if f["helpful_found"] is not None else ""
        print(f"{name:9s} {f['reranker'] or 'none':>20s}: MAP {f['MAP']:.4f} (95% {lo:.4f}-{hi:.4f})   unjudged as "
              f"not helpful {f['MAP_unjudged_not_helpful']:.4f}   MRR {f['MRR']:.2f}{kept}   p50 "
              f"{f['latency_ms']['p50']} ms")
    c = r["compare"]
    lo, hi = c["difference_interval_95"]
    print(f"candidate - served: MAP {c['MAP_difference']:+.4f} (95% {lo:+.4f} to {hi:+.4f}), paired randomisation "
          f"p={c['p_randomization']:.4g}, t-test p={c['p_ttest']:.4g}; better on {c['better']}, worse on "
          f"{c['worse']} of {c['questions']} searches; unjudged as not helpful "
          f"{c['MAP_unjudged_not_helpful_difference']:+.4f} (p={c['p_unjudged_not_helpful']:.4g})")
    if c["helpful_found_difference"] is not None:
        print(f"helpful found: {c['helpful_found_difference']:+.4f} (p={c['helpful_found_p']:.4g})")
    print(f"verdict: {c['verdict']}" + (" (the two MAPs disagree: interleave it to know)"
                                        if c["verdict"] == "undecided" else " (by both MAPs)"))
    if c["caution"]:
        print(f"caution: {c['caution']}")
    print(f"({r['note']})\nreport: {r['folder']}")
    if args.json:
        emit(r)
    return 0


def _with_interval(out: dict, report: dict) -> None:
    """The run's MAP interval (``MAP_interval_95``: a bootstrap over its questions) into ``out`` and printed, where
    the run has one."""
    if report.get("MAP_interval_95"):
        lo, hi = out["MAP_interval_95"] = report["MAP_interval_95"]
        print(f"MAP 95%      {lo:.4f}-{hi:.4f} (a bootstrap over the {report['questions']} questions)")


def _print_compare(label: str, c: dict) -> None:
    print(f"vs {label}: MAP {c['MAP']:.4f}, paired randomisation p={c['p_randomization']:.4g}, "
          f"paired t-test p={c['p_ttest']:.4g} over {c['questions']} questions{_difference(c)}")


def _difference(c: dict) -> str:
    """The difference's 95% interval (``paired_ap``), as a clause of the comparison's line."""
    if not c.get("difference_interval_95"):
        return ""
    lo, hi = c["difference_interval_95"]
    return f"; the difference's 95% interval {lo:+.4f} to {hi:+.4f}"


def compare_files(gold: Path, pred: Path, other: Path) -> dict:
    """The other prediction file's MAP, and the paired tests of per-question AP (pred against other). Each file
    must list the gold's candidates in the gold's order, as the official scorer requires."""
    from .scorer import per_question_ap, read_lines, score
    g = read_lines(gold)
    preds = [read_lines(f) for f in (pred, other)]
    figures = [score(g, x, pred_name=str(f)) for x, f in zip(preds, (pred, other))]  # checks the alignment
    return {"pred": str(other), "MAP": figures[1].MAP, **paired_ap(*(per_question_ap(g, x) for x in preds))}


COMPARED = ("run", "figures", "p_randomization", "p_ttest", "questions", "difference_interval_95")  # a run beside


def _forum_run(run, args: argparse.Namespace, **kw) -> dict:
    """An evaluation of the forum's own judgements (``run``, given the data folder's settings first) with --limit
    checked, a generation it cannot read an error of the command."""
    from indexing.generations import IndexFormatError
    limit = args.limit or 0
    if limit < 0:
        raise ScoringError("--limit: 0 (all) or more")
    try:
        return run(limit=limit, **kw)
    except IndexFormatError as e:
        raise ScoringError(str(e)) from None


def _ended(out: dict, report: dict, per: str, args: argparse.Namespace, emit) -> int:
    """A forum evaluation's last lines: its latency ``per`` question or thread, its report folder, and ``out``."""
    print(f"latency      p50 {report['latency_ms']['p50']} ms, p95 {report['latency_ms']['p95']} ms per {per}")
    print(f"report: {report['folder']}")
    if args.json:
        emit(out)
    return 0


def _duplicates(args: argparse.Namespace, settings, emit) -> int:
    """The forum's own duplicates, found by its similar-question search (``duplicates.run_duplicates``)."""
    from .duplicates import run_duplicates
    target = args.target or "questions"
    report = _forum_run(lambda **kw: run_duplicates(settings, **kw), args, target=target, judged_by=args.judged_by)
    judged = (f", judged by the {report['judged_by']} answers of their groups' other questions "
              f"({report['linked_without_a_judged_answer']} linked questions without one not asked)"
              if report["judged_by"] else "")
    print(f"{report['questions']} questions linked as duplicates ({report['links']} links, "
          f"{report['links_to_unstored']} to questions not stored), similar {target} from generation "
          f"{report['generation']} (reranker: {report['ranker'] or 'none'}){judged}")
    for k, v in report["figures"].items():
        print(f"{k:12s} {v:.4f}")
    out = {"benchmark": report["benchmark"], "target": target, "judged_by": report["judged_by"],
           "ranker": report["ranker"],
           "questions": report["questions"], "links": report["links"],
           "links_to_unstored": report["links_to_unstored"], **report["figures"], "latency_ms": report["latency_ms"],
           "report": report["folder"]}
    _with_interval(out, report)
    c = report["compare"]
    out["compare"] = {k: c[k] for k in COMPARED}
    print(f"vs first-stage: MAP@10 {c['figures']['MAP@10']:.4f}, P@1 {c['figures']['P@1']:.4f}, paired "
          f"randomisation p={c['p_randomization']:.4g}, paired t-test p={c['p_ttest']:.4g} over {c['questions']} "
          f"questions{_difference(c)}")
    return _ended(out, report, "search", args, emit)


def _forum_answers(args: argparse.Namespace, settings, emit) -> int:
    """The forum's own threads, their comments sorted as GET /threads/{id}/answers sorts them, judged by its
    acceptance or votes (``forum_answers.run_forum_answers``)."""
    from .forum_answers import reasons, run_forum_answers
    judged_by = JudgedBy(args.judged_by or JudgedBy.ACCEPTED.value)
    report = _forum_run(lambda **kw: run_forum_answers(settings, judged_by, **kw), args, ranker=args.ranker,
                        compare=args.compare)
    passed = reasons(report["passed_over"])
    print(f"{report['questions']} threads judged by {judged_by.value} ({report['comments']} comments, "
          f"{report['relevant']} relevant) of {report['threads_stored']} stored (passed over: {passed}); ranker "
          f"{report['ranker']}, generation {report['generation'] or 'none'}")
    for k, v in report["figures"].items():
        print(f"{k:12s} {v:.4f}" if k != "MRR" else f"{k:12s} {v:.2f}")
    out = {"benchmark": report["benchmark"], "judged_by": judged_by.value, "ranker": report["ranker"],
           "threads": report["questions"], "comments": report["comments"], "relevant": report["relevant"],
           "passed_over": report["passed_over"], "unreadable_judgements": report["unreadable_judgements"],
           **report["figures"], "latency_ms": report["latency_ms"], "report": report["folder"]}
    if report["unreadable_judgements"]:
        print(f"note: {report['unreadable_judgements']} answers carry a meta.score or meta.accepted that cannot be "
              "read (a score is a whole number, accepted is true or false); they count as not judged useful")
    _with_interval(out, report)
    out["compare"] = [{k: c[k] for k in COMPARED} for c in report["compare"]]
    for c in report["compare"]:
        print(f"vs {c['run']}: MAP {c['figures']['MAP']:.4f}, MRR {c['figures']['MRR']:.2f}, P@1 "
              f"{c['figures']['P@1']:.4f}, paired randomisation p={c['p_randomization']:.4g}, paired t-test "
              f"p={c['p_ttest']:.4g} over {c['questions']} threads{_difference(c)}")
    print("(the report folder's gold.relevancy and each run's file are in the official scorer's format)")
    return _ended(out, report, "thread", args, emit)


def _search_benchmark(args: argparse.Namespace, settings, bench, emit) -> int:
    """The /search pipeline end to end; --ranker replaces the target's reranker, --compare names another run."""
    from .runner import run_named
    report = run_named(settings, bench.name, args.ranker, search_compare=args.compare)
    out = {"benchmark": bench.name, "ranker": report["ranker"], **report["figures"],
           "latency_ms": report["latency_ms"], "report": report["folder"]}
    for k, v in report["figures"].items():
        print(f"{k:12s} {v:.4f}")
    _with_interval(out, report)
    print(f"latency      p50 {report['latency_ms']['p50']} ms, p95 {report['latency_ms']['p95']} ms per search")
    if "compare" in report:
        c = report["compare"]
        out["compare"] = {k: c[k] for k in ("run", "figures", "latency_ms", "p_randomization", "p_ttest", "questions",
                                            "difference_interval_95")}
        print(f"vs {c['run']['label']}: MAP@10 {c['MAP']:.4f}, P@1 {c['figures']['P@1']:.4f}, paired randomisation "
              f"p={c['p_randomization']:.4g}, paired t-test p={c['p_ttest']:.4g} over {c['questions']} "
              f"questions{_difference(c)}")
    print(f"report: {report['folder']}")
    if args.json:
        emit(out)
    return 0


def predict_command(args: argparse.Namespace, settings, emit) -> int:
    from indexing.loaders import LoadError
    from ..pipeline import as_given_to
    from .runner import as_served, indexed_by, predictions, write_predictions
    try:
        ranker = as_served(_build(args.ranker or default_ranker(args.subtask, settings), settings, args), args.subtask)
        # subtask B: the candidates with what the data folder's live generation stores for them, as /rerank/questions
        queries = as_given_to(indexed_by(settings, args.subtask), queries_for(args.input, args.subtask))
        lines = predictions(queries, ranker)
        if args.subtask == "D":  # the D gold files list each question's pairs by QAID
            from ..arabic import in_gold_order
            lines = in_gold_order(lines)
        write_predictions(lines, args.output)
    except (LoadError, BenchmarkError, UnknownRanker) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    emit({"ranker": ranker.name, "subtask": args.subtask, "queries": len(queries), "lines": len(lines),
          "output": str(args.output)})
    return 0
