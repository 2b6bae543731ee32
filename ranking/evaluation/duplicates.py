"""How well similar-question search finds a forum's own duplicates, judged by the forum's duplicate links.

A forum whose moderators close questions as duplicates of others (a StackExchange site: ``PostLinks.xml``, which
``cqa ingest`` of its dump keeps as each question's ``meta.duplicate_of``; any forum: the same field in JSONL) holds
its own judgements of what a thread page's related questions should show. Each stored question with a duplicate link
to a stored question is asked for its similar questions exactly as ``GET /threads/{id}/similar`` and ``cqa search
--like-thread`` ask (``SearchRequest.like_thread``, through the pipeline the live generation is served with); what it
should find is every other question of its duplicate group (the questions joined by links, either way). A result that
folds several near-identical copies counts as found when any copy is in the group, as the SemEval /search benchmarks
count it. Side by side, the same searches without reranking (the first stage), with the paired test of the difference.

The same links judge the forum's answer search: a question closed as a duplicate is answered by the answers its
group's other questions got. Asked for answers (target ``answers``, its own thread left out), it should find those the
forum judged useful: the accepted ones, or those voted up or accepted (``forum_answers.JudgedBy``).

Nothing here was trained or tuned on the forum's links: a figure on them measures the shipped rankers on that forum.
"""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from indexing.models import Thread

LINK_FIELD = "duplicate_of"
BENCHMARK = "forum-duplicates"  # its reports' folder under the reports folder, as GET /evaluation lists them


@dataclass(frozen=True)
class DuplicateGroups:
    """The forum's duplicate links among stored questions: each linking question (a query) with the other questions
    of its group (what it should find), and the links that name a question the store does not hold."""
    judged: dict[str, dict[str, int]]
    links: int = 0
    unstored: int = 0
    malformed: list[str] = field(default_factory=list)  # threads whose duplicate_of is not a list of ids


def linked(meta: dict) -> list[str] | None:
    """A thread's duplicate links (``meta.duplicate_of``: a list of thread ids, or one id); None where it has none,
    and a ValueError where the field holds something else."""
    value = meta.get(LINK_FIELD)
    if value is None:
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise ValueError(f"{LINK_FIELD} is {type(value).__name__}, not a list of thread ids")


def duplicate_groups(threads: Iterable[Thread]) -> DuplicateGroups:
    """The groups the links make among ``threads`` (union-find: a link either way joins two questions)."""
    stored: set[str] = set()
    pairs: list[tuple[str, str]] = []
    malformed: list[str] = []
    for t in threads:
        stored.add(t.id)
        try:
            targets = linked(t.meta)
        except ValueError:
            malformed.append(t.id)
            continue
        pairs += [(t.id, d) for d in targets or () if d != t.id]
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    kept = [(a, b) for a, b in pairs if b in stored]
    for a, b in kept:
        parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for x in parent:
        groups.setdefault(root(x), set()).add(x)
    queries = dict.fromkeys(a for a, _ in kept)  # the linking questions, in the store's order
    judged = {q: {x: 1 for x in sorted(groups[root(q)]) if x != q} for q in queries}
    return DuplicateGroups(judged, links=len(pairs), unstored=len(pairs) - len(kept), malformed=malformed)


def answers_benchmark(judged_by) -> str:
    """The report folder of the answers searched for a forum's duplicates, judged by ``judged_by`` (a JudgedBy)."""
    return f"{BENCHMARK}-answers-{judged_by.value}"


def run_duplicates(settings, k: int = 10, target: str = "questions", limit: int = 0, compare: bool = True,
                   progress: bool = True, served=None, judged_by=None, on_progress=None) -> dict:
    """Every linking question of the data folder's store asked for its similar questions through the live
    generation's pipeline, reranked (as served) and, with ``compare``, not; their figures (MAP@10, P@1, MRR, nDCG@10,
    Recall@10, each question's AP@10), the paired test, the latency, and a report folder. ``served``: a running
    service's (generation, pipeline), whose rerankers it then asks, as its endpoint does; else the live generation is
    loaded with the rerankers the settings name.

    With ``target`` "answers", each linking question asks for answers instead (``GET /threads/{id}/similar?target=
    answers``: its own thread left out, as a question closed as a duplicate had no answers of its own), and what it
    should find is every answer of the other questions of its group that the forum judged useful (``judged_by``, a
    ``forum_answers.JudgedBy``: the accepted answers, or those voted up or accepted); a linking question whose group
    holds none is not asked. ``on_progress`` (a job's) is told each stage and how far it is."""
    from indexing.searcher import load_current
    from indexing.store import Snapshot, ThreadStore

    from ..fullcorpus import figures_of
    from ..pipeline import SearchRequest, build_pipeline
    from ..search_benchmark import as_run, latency
    from .measures import map_interval, paired_ap, per_query, write_trec_qrels, write_trec_run
    from .runner import finish_report, report_folder
    from .forum_answers import JudgedBy, relevant
    if target not in ("questions", "threads", "answers"):
        raise ValueError(f"target {target!r}: questions, threads, or answers")
    if judged_by is not None and target != "answers":
        raise ValueError("a judgement of answers (accepted or votes) goes with the answers target")
    judged_by = JudgedBy(judged_by or JudgedBy.ACCEPTED) if target == "answers" else None
    if not Path(settings.store_path).exists():
        raise FileNotFoundError(f"no store at {settings.store_path}: ingest the forum first")
    started = time.perf_counter()
    told = on_progress or (lambda stage, frac: None)
    told("reading the store", 0.0)
    linking: dict[str, Thread] = {}  # the questions asked: kept as the snapshot read them, not read again
    useful: dict[str, list[str]] = {}  # target answers: each thread's answers judged useful (ids only)

    def kept(threads: Iterable[Thread]) -> Iterable[Thread]:
        for t in threads:
            if LINK_FIELD in t.meta:
                linking[t.id] = t
            if judged_by is not None and (ids := [a.id for a in t.answers if relevant(a, judged_by)]):
                useful[t.id] = ids
            yield t
    with Snapshot(settings.store_path) as snap:
        groups = duplicate_groups(kept(snap.threads()))
    if not groups.judged:
        raise ValueError(f"the store holds no duplicate links between stored questions ({groups.links} links, "
                         f"{groups.unstored} naming questions it does not hold): ingest a StackExchange dump with "
                         f"its PostLinks.xml, or send threads with meta.{LINK_FIELD}")
    judged = groups.judged
    if judged_by is not None:  # what each should find: the useful answers of the other questions of its group
        judged = {q: {a: 1 for x in others for a in useful.get(x, ())} for q, others in groups.judged.items()}
        judged = {q: answers for q, answers in judged.items() if answers}
        if not judged:
            raise ValueError(f"no question linked as a duplicate has another question of its group with an answer "
                             f"judged by {judged_by.value} ({len(groups.judged)} linked): ingest a StackExchange "
                             "dump, or send answers with meta.accepted (true) or meta.score (votes)")
    queries = list(judged)[:limit] if limit else list(judged)
    qrels = {q: judged[q] for q in queries}
    gen, pipeline = served if served is not None else (load_current(settings.index_root, settings.device), None)
    runs = {"reranked": True, **({"first-stage": False} if compare else {})}
    out: dict[str, dict] = {name: {} for name in runs}
    ms: dict[str, list[float]] = {name: [] for name in runs}
    with ThreadStore(settings.store_path) as store:
        pipelines = {name: pipeline if rerank and pipeline is not None else
                     build_pipeline(settings, gen, store, None if rerank else {}) for name, rerank in runs.items()}
        reranker = None
        for n, qid in enumerate(tqdm(queries, desc=f"duplicates ({target})", disable=not progress)):
            told("searching", n / len(queries))
            for name, rerank in runs.items():
                t0 = time.perf_counter()
                resp = pipelines[name].search(SearchRequest.like_thread(linking[qid], k=k, target=target,
                                                                        rerank=rerank))
                ms[name].append(1000 * (time.perf_counter() - t0))
                out[name][qid] = as_run(resp.results, qrels[qid], k)
                reranker = resp.reranker if rerank else reranker
    figures = {name: {m: round(v, 4) for m, v in figures_of(qrels, run, recall_at=k).items()}
               for name, run in out.items()}
    ap = {name: per_query(qrels, run, "AP@10") for name, run in out.items()}
    name = BENCHMARK if judged_by is None else answers_benchmark(judged_by)
    folder, stamp = report_folder(settings.reports_dir, name, reranker or "first-stage")
    for label, run in out.items():
        write_trec_run(run, folder / f"run-{label}.trec", label)
    write_trec_qrels(qrels, folder / "qrels.trec")
    report = {"benchmark": name, "target": target, "k": k, "ranker": reranker, "generation": gen.name,
              "judged_by": judged_by.value if judged_by is not None else None,
              "linked_without_a_judged_answer": len(groups.judged) - len(judged),
              "created_at": stamp.isoformat(), "questions": len(out["reranked"]), "links": groups.links,
              "links_to_unstored": groups.unstored, "malformed_links": len(groups.malformed),
              "seconds": round(time.perf_counter() - started, 2),
              "figures": figures["reranked"], "MAP": figures["reranked"]["MAP@10"], "MRR": figures["reranked"]["MRR"],
              "P@1": figures["reranked"]["P@1"],
              "MAP_interval_95": map_interval(ap["reranked"]), "per_question_ap": ap["reranked"],
              "latency_ms": latency(ms["reranked"]),
              "folder": str(folder)}
    if compare:
        report["compare"] = {"run": "first-stage", "figures": figures["first-stage"],
                             **paired_ap(ap["reranked"], ap["first-stage"])}
    finish_report(folder, report, xlabel="MAP@10 of the forum's own duplicates" if judged_by is None else
                  f"MAP@10 of the answers of the forum's own duplicates ({judged_by.value})")
    return report


__all__ = ["DuplicateGroups", "answers_benchmark", "duplicate_groups", "linked", "run_duplicates"]
