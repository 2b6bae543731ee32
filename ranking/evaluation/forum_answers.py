"""How well a forum's own threads have their comments sorted, judged by the forum's own signals.

``GET /threads/{id}/answers`` sorts a stored thread's comments so the useful ones come first. A forum already says
which comments were useful: the answer its asker accepted, and the votes. ``cqa ingest`` of a StackExchange dump keeps
both (an answer's ``meta.accepted`` from its question's ``AcceptedAnswerId``, ``meta.score`` from its ``Score``), and
any forum can send them in JSONL. Judged by them (``JudgedBy``):

- ``accepted``: the answer the asker accepted is relevant, every other comment is not;
- ``votes``: an answer voted up (a score above 0) or accepted is relevant.

A thread is asked when its order can matter: it has two comments or more, at least one relevant and one not, and no
more than ``CQA_MAX_THREAD_COMMENTS`` (what the endpoint ranks at once). Each is ranked exactly as the endpoint ranks
it: POST /rerank's query of the stored thread (``candidates.stored_thread_query``) and the ranker the endpoint runs
(``$CQA_DEFAULT_RANKER``; Arabic threads the Arabic ranker where one is set, ``arabic.routed``). It is scored with the
SemEval-2016 official scorer's arithmetic (MAP and MRR over the first 10, AvgRec), beside the orders a forum has
without a ranker: the thread's own (oldest first) and, judged by acceptance, the votes' (highest score first, ties in
the thread's order: what a StackExchange site shows, though a new thread has no votes yet), each with the paired test
of the difference. The report folder holds the gold and each run in the official scorer's format.

Nothing here was trained or tuned on a forum's acceptance or votes: a figure measures the shipped ranker on that forum.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from indexing.models import Answer, Thread

log = logging.getLogger(__name__)


class JudgedBy(str, Enum):
    """What says a comment was useful: the asker's acceptance, or the votes (a score above 0, or accepted)."""
    ACCEPTED = "accepted"
    VOTES = "votes"

    @property
    def benchmark(self) -> str:
        """Its reports' folder under the reports folder, as GET /evaluation lists them (and POST /evaluation runs)."""
        return f"forum-answers-{self.value}"


BENCHMARKS = {j.benchmark: j for j in JudgedBy}
THREAD_ORDER, VOTE_ORDER = "thread-order", "votes"  # the orders a forum has without a ranker
ORDER_NAMES = {THREAD_ORDER: "the thread's order", VOTE_ORDER: "the votes' order"}
RANKED = "ranked"  # the run of the ranker measured (the served one, or --ranker)


def accepted(a: Answer) -> bool:
    return a.meta.get("accepted") is True


def score_of(a: Answer) -> int | None:
    """An answer's votes (``meta.score``), None where it has none (a bool or a float is not a score)."""
    v = a.meta.get("score")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def unreadable(a: Answer) -> bool:
    """Whether an answer carries a judgement this cannot read: a ``meta.score`` that is not a whole number (``"5"``,
    ``4.5``), or a ``meta.accepted`` that is not true or false. Such an answer counts as not judged useful."""
    return ("score" in a.meta and a.meta["score"] is not None and score_of(a) is None) or \
        ("accepted" in a.meta and a.meta["accepted"] is not None and not isinstance(a.meta["accepted"], bool))


def relevant(a: Answer, judged_by: JudgedBy) -> bool:
    if judged_by is JudgedBy.ACCEPTED:
        return accepted(a)
    return accepted(a) or (score_of(a) or 0) > 0


def passed_over(t: Thread, judged_by: JudgedBy, max_comments: int) -> str | None:
    """Why thread ``t`` is not asked (None: it is): its comments' order cannot matter, or the endpoint would not
    rank it at once."""
    if len(t.answers) < 2:
        return "fewer than two comments"
    if len(t.answers) > max_comments:
        return "more comments than CQA_MAX_THREAD_COMMENTS"
    judged = [relevant(a, judged_by) for a in t.answers]
    if not any(judged):
        return "no accepted answer" if judged_by is JudgedBy.ACCEPTED else "no answer voted up or accepted"
    if all(judged):
        return "every comment relevant"
    return None


@dataclass(frozen=True)
class Asked:
    """The threads of a store that are asked (their ids, in the store's order), and how many of the others were
    passed over and why."""
    ids: list[str]
    passed_over: Counter
    stored: int
    unreadable: int = 0  # answers whose meta.score or meta.accepted could not be read (``unreadable``)


def asked_threads(threads, judged_by: JudgedBy, max_comments: int, limit: int = 0) -> Asked:
    """The threads asked among ``threads`` (in the store's order; the first ``limit`` where it is not 0). Only their
    ids are kept: a forum of millions of threads is read one at a time."""
    out: list[str] = []
    why: Counter = Counter()
    stored = bad = 0
    for t in threads:
        stored += 1
        bad += sum(unreadable(a) for a in t.answers)
        if limit and len(out) >= limit:
            continue
        reason = passed_over(t, judged_by, max_comments)
        if reason is None:
            out.append(t.id)
        else:
            why[reason] += 1
    return Asked(out, why, stored, bad)


def baseline_scores(t: Thread, run: str) -> list[float]:
    """Each comment's score in an order a forum has without a ranker: its place in the thread (first highest), or
    its votes (a comment without a score counts 0; a stable sort keeps ties in the thread's order)."""
    if run == THREAD_ORDER:
        return [-float(i) for i in range(len(t.answers))]
    return [float(score_of(a) or 0) for a in t.answers]


def run_forum_answers(settings, judged_by: JudgedBy | str = JudgedBy.ACCEPTED, limit: int = 0, progress: bool = True,
                      served=None, ranker: str | None = None, compare: str | None = None,
                      on_progress: Callable[[str, float], None] | None = None) -> dict:
    """Every asked thread of the data folder's store ranked as GET /threads/{id}/answers ranks it, scored by the
    forum's own judgement ``judged_by``, beside the thread's order (and, judged by acceptance, the votes') with the
    paired tests; a report folder. ``served``: a running service's (generation, ranker, Arabic ranker or None), which
    it then asks, as its endpoint does; else the data folder's live generation (if any) with the rankers the settings
    name, as the service would load them. ``ranker``: a preset that ranks instead (what the endpoint would serve with
    it as ``$CQA_DEFAULT_RANKER``); ``compare``: a preset ranked beside it, with the paired test, as an operator
    chooses a ranker on their own forum. ``on_progress`` (a job's) is told each stage and how far it is."""
    from indexing.store import Snapshot, ThreadStore

    from ..search_benchmark import latency
    from .measures import map_interval, paired_ap
    from .runner import finish_report, report_folder, write_predictions
    from .scorer import TOP, Line, average_precision, ranked_by_question, score
    judged_by = JudgedBy(judged_by)
    if compare and compare == (ranker or settings.default_ranker):
        raise ValueError(f"--compare {compare}: the ranker itself")
    if not Path(settings.store_path).exists():
        raise FileNotFoundError(f"no store at {settings.store_path}: ingest the forum first")
    started = time.perf_counter()
    told = on_progress or (lambda stage, frac: None)
    told("reading the store", 0.0)
    with Snapshot(settings.store_path) as snap:
        asked = asked_threads(snap.threads(), judged_by, settings.max_thread_comments, limit)
    bad = (f"{asked.unreadable} answers carry a meta.score or meta.accepted that cannot be read (a score is a whole "
           "number, accepted is true or false)") if asked.unreadable else ""
    if bad:
        log.warning("forum answers: %s; they count as not judged useful", bad)
    if not asked.ids:
        raise ValueError(f"none of the store's {asked.stored} threads can be judged by {judged_by.value} "
                         f"({reasons(asked.passed_over)}{'; ' + bad if bad else ''}): ingest a StackExchange dump, "
                         "or send answers with meta.accepted (true) or meta.score (votes, a whole number)")
    from ..presets import build_label
    gen, main, arabic = served if served is not None else endpoint_rankers(settings, ranker)
    main = build_label(ranker, settings) if ranker and served is not None else main
    ranking = {RANKED: main, **({compare: build_label(compare, settings)} if compare else {})}
    runs = [*ranking, THREAD_ORDER] + ([VOTE_ORDER] if judged_by is JudgedBy.ACCEPTED else [])
    gold: list[Line] = []
    preds: dict[str, list[Line]] = {r: [] for r in runs}
    ms: list[float] = []
    rankers: Counter = Counter()
    changed = 0  # asked, then deleted or changed so that its order no longer matters before its turn came
    with ThreadStore(settings.store_path) as store:
        for n, tid in enumerate(tqdm(asked.ids, desc=f"threads judged by {judged_by.value}", disable=not progress)):
            told("ranking", n / len(asked.ids))
            t = store.get(tid)  # as the endpoint reads it, when its turn comes
            if t is None or passed_over(t, judged_by, settings.max_thread_comments) is not None:
                changed += 1
                continue
            ms.append(_ranked_into(t, judged_by, gen, ranking, arabic, runs, gold, preds, rankers))
    if not gold:
        raise ValueError(f"the {len(asked.ids)} threads asked were all deleted or changed meanwhile")
    figures, ap = {}, {}
    for run in runs:
        s = score(gold, preds[run], run)
        ranked = ranked_by_question(gold, preds[run])
        ap[run] = {q: average_precision(r) for q, r in ranked.items()}
        figures[run] = {"MAP": round(s.MAP, 4), "AvgRec": round(s.AvgRec, 4), "MRR": round(s.MRR, 2),
                        "P@1": round(sum(r[0] for r in ranked.values()) / len(ranked), 4)}
    name = main.name
    folder, stamp = report_folder(settings.reports_dir, judged_by.benchmark, name)
    write_predictions(gold, folder / "gold.relevancy")  # the official scorer's format, as a SemEval run's files
    for run in runs:
        write_predictions(preds[run], folder / f"{'predictions' if run == RANKED else run}.txt")
    comments = len(gold)
    report = {"benchmark": judged_by.benchmark, "judged_by": judged_by.value, "ranker": name,
              "rankers_answered": dict(rankers), "generation": gen.name if gen is not None else None,
              "created_at": stamp.isoformat(), "questions": len(asked.ids) - changed, "comments": comments,
              "relevant": sum(g.label for g in gold), "threads_stored": asked.stored,
              "passed_over": dict(asked.passed_over), "changed_meanwhile": changed,
              "unreadable_judgements": asked.unreadable, "top": TOP,
              "seconds": round(time.perf_counter() - started, 2),
              "figures": figures[RANKED], "MAP": figures[RANKED]["MAP"], "MRR": figures[RANKED]["MRR"],
              "P@1": figures[RANKED]["P@1"],
              "MAP_interval_95": map_interval(ap[RANKED]), "per_question_ap": ap[RANKED],
              "latency_ms": latency(ms), "folder": str(folder),
              "compare": [{"run": run, "figures": figures[run], "MAP_interval_95": map_interval(ap[run]),
                           **paired_ap(ap[RANKED], ap[run])} for run in runs[1:]]}
    finish_report(folder, report, xlabel=f"MAP of the forum's own judgement ({judged_by.value})",
                  references={ORDER_NAMES[run]: figures[run]["MAP"] for run in runs if run not in ranking})
    return report


def endpoint_scores(t: Thread, gen, main, arabic) -> tuple:
    """(the ranker that ranked it, its scores of ``t``'s comments in the thread's order): thread ``t`` ranked as GET
    /threads/{id}/answers ranks it with ``main`` as its default ranker (an Arabic thread by ``arabic``, where set)."""
    from ..arabic import routed
    from ..candidates import stored_thread_query
    chosen, q = routed(stored_thread_query(t, gen), main, arabic, gen)
    return chosen, chosen.score([q])[0]


def _ranked_into(t: Thread, judged_by: JudgedBy, gen, ranking: dict, arabic, runs: list[str], gold: list,
                 preds: dict, rankers: Counter) -> float:
    """Thread ``t`` ranked as GET /threads/{id}/answers ranks it by each ranker of ``ranking`` (its run's name to
    it) and by each other order in ``runs``: its comments' judgements onto ``gold``, each run's scores onto
    ``preds``, the ranker that ranked the ``RANKED`` run counted; the milliseconds that ranking took."""
    from .scorer import Line
    scores, ms = {}, 0.0
    for run in runs:
        if run not in ranking:
            scores[run] = baseline_scores(t, run)
            continue
        t0 = time.perf_counter()
        chosen, scores[run] = endpoint_scores(t, gen, ranking[run], arabic)
        if run == RANKED:
            ms = 1000 * (time.perf_counter() - t0)
            rankers[chosen.name] += 1
    for i, a in enumerate(t.answers):
        gold.append(Line(t.id, a.id, 0.0, relevant(a, judged_by)))
        for run in runs:
            preds[run].append(Line(t.id, a.id, float(scores[run][i]), False))
    return ms


def reasons(why: dict[str, int]) -> str:
    """How many threads were passed over for each reason, most first (``Asked.passed_over``, or a report's)."""
    return ", ".join(f"{n} {reason}" for reason, n in Counter(why).most_common()) or "none"


def endpoint_rankers(settings, ranker: str | None = None):
    """The live generation (None where there is none yet) and the rankers GET /threads/{id}/answers would run: the
    default one (``ranker``, a preset, in its place) and the Arabic one (None where none is set)."""
    from indexing.generations import current_generation
    from indexing.searcher import load_current

    from ..presets import build_label
    gen = load_current(settings.index_root, settings.device) if current_generation(settings.index_root) else None
    main = build_label(ranker or settings.default_ranker, settings)
    arabic = build_label(settings.arabic_ranker, settings) if settings.arabic_ranker else None
    return gen, main, arabic


__all__ = ["Asked", "BENCHMARKS", "JudgedBy", "asked_threads", "baseline_scores", "endpoint_rankers", "endpoint_scores",
           "passed_over", "relevant", "run_forum_answers", "unreadable"]
