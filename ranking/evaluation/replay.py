"""The forum's judged searches searched again: another ranker scored by the forum's own judgements before it serves.

GET /evaluation/feedback scores the rankers that served. To choose the next one on the forum's own traffic (as a
ranker is chosen on dev data, then confirmed online by interleaving), ``replay`` takes each judged first page of a
target whose request the log kept (CQA_FEEDBACK_QUERIES) and searches it again through the live generation's
pipeline, the path POST /search runs: once with the target's reranker as the settings name it (what serves now) and
once with the candidate. Each new first page is scored by the judgements the users gave to what they were shown:

- ``MAP``: the judged results in the new order (a result judged under a copy now collapsed into another counts as
  that one), the official scorer's arithmetic over the first 10 ranks, as the feedback report's MAP: a search
  searched again as it was shown scores what the report gave it;
- ``MAP_unjudged_not_helpful``: the same with the page's unjudged results counted not helpful (the report's figure of
  that name, for a search searched again as shown);
- ``helpful_found``: the share of the results judged helpful that the new first page holds, over the searches with
  one at least. MAP reads the order of the judged results a page holds; a ranker that leaves a helpful result off
  its page loses here;
- against the served reranker: both MAPs, the paired randomisation and t-tests, and on how many searches the
  candidate is better and worse; the paired randomisation test of ``helpful_found``.

What the users judged is what the served ranker showed, so a result only the candidate shows is unjudged. ``MAP``
leaves it out: the candidate's judged results move up past it, which favours the candidate. ``MAP_unjudged_not_helpful``
counts it not helpful, which favours the served ranker. The two differences bracket the one a full judgement would
give where the candidate reorders what was shown; interleaving, online, is the fair test of a ranker that brings
other results (docs/BENCHMARKS.md, "Round 61", measured how far each lies from the truth). ``verdict``: the ranker
both differences favour (significant where both paired tests are under 0.05), or undecided where they disagree.

A thread's comments sorted by GET /threads/{id}/answers (target ``comments``) are ranked again as that endpoint
ranks them (``ranking.evaluation.forum_answers``: the thread as the store holds it now, the live generation's
vectors where there is one, an Arabic thread by $CQA_ARABIC_RANKER), with the default ranker and with the candidate
as $CQA_DEFAULT_RANKER. Both order the same comments, so no result is unjudged for one and shown by the other: the two
MAPs differ only where a reader judged a comment the thread no longer holds, or one the new order puts past rank 10.

A thread's similar search (GET /threads/{id}/similar) is kept by the thread's id and asks its question as the store
holds it now; one whose thread is gone (deleted, erased, taken down) is not searched again (``thread_gone``).
Searches served by another generation than the live one are searched in the live one (``other_generation`` counts
them), and those served by another reranker than the one serving now with it (``other_reranker``). ``reproduced``:
of the searches neither interleaved nor of another generation or reranker, those whose served reranker shows again
exactly what was shown (all of them where nothing changed but the clock)."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from .feedback import COMMENTS, GIVEN, FeedbackLog, comments_request, judgements_in_order

# a threads search is replayed as the questions search it ranks by; comments: the threads whose comments GET
# /threads/{id}/answers sorted, each ranked again as that endpoint ranks it
REPLAYED_TARGETS = ("answers", "questions", COMMENTS)
BENCHMARKS = {f"feedback-replay-{t}": t for t in REPLAYED_TARGETS}  # their names in POST /evaluation and reports


@dataclass(frozen=True)
class Shown:
    """One comment of a thread's order ranked again: its id, standing for no copies (a search's results may)."""
    id: str
    duplicates: tuple[str, ...] = ()


def judged_in(results, judged: dict[str, bool], condensed: bool = True) -> list[bool]:
    """The judgements of a page's ``results`` (``SearchResult``s) in their order, its unjudged results left out
    (``condensed``) or counted not helpful; a result stands for the copies collapsed into it: helpful where one of
    them was judged so."""
    out = []
    for r in results:
        seen = [judged[i] for i in (r.id, *r.duplicates) if i in judged]
        if seen or not condensed:
            out.append(any(seen))
    return out


def found(results, judged: dict[str, bool]) -> float | None:
    """The share of the results judged helpful that ``results`` hold (themselves or as a copy); None where none was
    judged helpful."""
    helpful = {i for i, h in judged.items() if h}
    if not helpful:
        return None
    held = {i for r in results for i in (r.id, *r.duplicates)}
    return len(helpful & held) / len(helpful)


def verdict(condensed: float, unjudged: float, p_condensed: float, p_unjudged: float, level: float = 0.05) -> str:
    """What the bracket says (module docstring): ``candidate`` or ``served`` where both differences (candidate minus
    served) point that way, with `` (significant)`` where both tests are under ``level``; else ``undecided``, a
    question for interleaving."""
    if condensed > 0 and unjudged > 0:
        better = "candidate"
    elif condensed < 0 and unjudged < 0:
        better = "served"
    else:
        return "undecided"
    return f"{better} (significant)" if max(p_condensed, p_unjudged) < level else better


# below this many judgements a search, a verdict that is not significant leans to the served ranker: each page's few
# judged results are the ones it put on top. Chosen on the 2016 dev questions (docs/BENCHMARKS.md, "Round 62"): its
# one wrong verdict (related-answers on answers, truly a tie) came with one, two and three judgements a search, and
# not with round 61's 4-8 (undecided there); no significant verdict erred with any number
SPARSE_JUDGEMENTS = 4.0


def caution(judgements_per_search: float, said: str) -> str | None:
    """What to tell beside the verdict ``said``: none where it is significant or undecided; else that it is a lean,
    and, below ``SPARSE_JUDGEMENTS`` a search, which way it leans."""
    if said == "undecided" or said.endswith("(significant)"):
        return None
    out = "not significant: a lean, not a decision; interleave before acting on it"
    if judgements_per_search < SPARSE_JUDGEMENTS:
        out += (f" (with {judgements_per_search:.1f} judgements a search it leans to the served ranker, whose top "
                "results are the ones judged)")
    return out


def replay(settings, ranker: str, target: str = "answers", days: float | None = None, progress: bool = True,
           now: float | None = None) -> dict:
    """The judged first pages of ``target`` (answers, or questions with the threads searches; or comments, the
    threads' comment orders) served in the last ``days`` (None: all kept) searched again with the target's served
    reranker and with ``ranker`` (a preset name, a variant allowed: NAME[int8]); the figures of the module docstring,
    and a report folder (``report.json``, and each run and the judgements in TREC format)."""
    from indexing.searcher import load_current
    from indexing.store import ThreadStore

    from ..pipeline import RANKED_AS, SearchRequest, build_pipeline
    from ..rankers import search_rerankers
    from ..retriever import TagSynonyms
    from ..search_benchmark import latency
    from .measures import against_shipped, map_interval, paired_randomization, write_trec_qrels, write_trec_run
    from .runner import _atomic_json, report_folder
    from .scorer import average_precision, reciprocal_rank
    if target not in REPLAYED_TARGETS:
        raise ValueError(f"target {target!r}: answers, questions (a threads search is replayed as questions) or "
                         f"{COMMENTS} (a thread's comments, GET /threads/{{id}}/answers)")
    if not Path(settings.feedback_file).exists():
        raise FileNotFoundError(f"no feedback log at {settings.feedback_file}: nothing served has been judged yet")
    if not Path(settings.store_path).exists():
        raise FileNotFoundError(f"no store at {settings.store_path}: ingest the forum first")
    started = time.perf_counter()
    now = time.time() if now is None else now
    since = now - days * 86400.0 if days is not None else None
    pages = [s for s in FeedbackLog.of(settings).judged_searches(since, now)
             if s["offset"] == 0 and RANKED_AS.get(s["target"], s["target"]) == target]
    # what a forum sent to the /rerank endpoints is its own and never kept: counted apart, never ranked again
    skipped = Counter("given" if s["endpoint"] in GIVEN else "without_request" if s["request"] is None else
                      "not_reranked" for s in pages if s["request"] is None or s["ranker"] is None)
    pages = [s for s in pages if s["request"] is not None and s["ranker"] is not None]
    with ThreadStore(settings.store_path) as store:  # a thread's similar search asks its question as stored now
        requests = {s["id"]: store.get(comments_request(s["request"])) if target == COMMENTS else
                    SearchRequest.from_json(s["request"], store.get) for s in pages}
    skipped["thread_gone"] = sum(r is None for r in requests.values())
    pages = [s for s in pages if requests[s["id"]] is not None]
    if not pages:
        raise ValueError(f"no judged {target} search to search again ({skipped['without_request']} judged without "
                         f"their request, {skipped['not_reranked']} not reranked, {skipped['thread_gone']} of threads "
                         f"no longer stored, {skipped['given']} of candidates a forum sent to /rerank, never kept): "
                         "searches keep their request where CQA_FEEDBACK_QUERIES=true")
    if target == COMMENTS:
        from ..presets import build_label
        from .forum_answers import endpoint_rankers
        gen, served_ranker, arabic = endpoint_rankers(settings)
        served_name = settings.default_ranker
        runs = {"served": served_ranker, "candidate": build_label(ranker, settings)}
    else:
        gen = load_current(settings.index_root, settings.device)
        built: dict = {}  # the rankers both runs share load once
        key = f"search_ranker_{target}"
        served_name = getattr(settings, key)
        runs = {"served": search_rerankers(settings, built),
                "candidate": search_rerankers(settings.model_copy(update={key: ranker}), built)}
    ap: dict[str, dict[str, float]] = {name: {} for name in runs}
    ap_full: dict[str, dict[str, float]] = {name: {} for name in runs}  # unjudged as not helpful
    rr: dict[str, list[float]] = {name: [] for name in runs}
    helpful_found: dict[str, dict[str, float]] = {name: {} for name in runs}
    trec: dict[str, dict[str, dict[str, float]]] = {name: {} for name in runs}
    ms: dict[str, list[float]] = {name: [] for name in runs}
    as_shown, reproducible, reproduced, other_generation, other_reranker = [], 0, 0, 0, 0
    names: dict[str, str | None] = {}
    gen_name = gen.name if gen is not None else "none"  # a thread's comments are ranked without a generation too
    with ThreadStore(settings.store_path) as store:
        synonyms = TagSynonyms.of(store.tag_synonyms())
        if target == COMMENTS:
            searchers = {name: _comments_ranker(gen, main, arabic, requests) for name, main in runs.items()}
        else:
            searchers = {name: _search_ranker(build_pipeline(settings, gen, store, rerankers), requests, synonyms)
                         for name, rerankers in runs.items()}
        for s in tqdm(pages, desc=f"replay ({target})", disable=not progress):
            judged = s["judged"]
            as_shown.append(average_precision(judgements_in_order(s, None, condensed=True)))  # the feedback report's figure
            other_generation += s["generation"] != gen_name
            for name, searched in searchers.items():
                t0 = time.perf_counter()
                results, reranker = searched(s["id"])
                ms[name].append(1000 * (time.perf_counter() - t0))
                names[name] = reranker
                ranked = judged_in(results, judged)
                ap[name][s["id"]] = average_precision(ranked)
                ap_full[name][s["id"]] = average_precision(judged_in(results, judged, condensed=False))
                rr[name].append(reciprocal_rank(ranked))
                if (share := found(results, judged)) is not None:
                    helpful_found[name][s["id"]] = share
                trec[name][s["id"]] = {r.id: float(len(results) - i) for i, r in enumerate(results)}
                if name == "served":
                    other_reranker += s["ranker"] != reranker
                    if s["challenger"] is None and s["generation"] == gen_name and s["ranker"] == reranker:
                        reproducible += 1
                        reproduced += [r.id for r in results] == s["results"]

    def figures(name: str) -> dict:
        a, f = ap[name], helpful_found[name]
        return {"reranker": names[name], "MAP": round(sum(a.values()) / len(a), 4),
                "MAP_interval_95": [round(v, 4) for v in map_interval(a)],
                "MAP_unjudged_not_helpful": round(sum(ap_full[name].values()) / len(a), 4),
                "MRR": round(100.0 * sum(rr[name]) / len(rr[name]), 2),
                "helpful_found": round(sum(f.values()) / len(f), 4) if f else None,
                "latency_ms": latency(ms[name])}
    versus = against_shipped(ap["candidate"], ap["served"])
    full = [[ap_full[n][q] for q in ap_full["served"]] for n in ("candidate", "served")]
    both = sorted(set(helpful_found["candidate"]) & set(helpful_found["served"]))
    x, y = ([helpful_found[n][q] for q in both] for n in ("candidate", "served"))
    name = next(b for b, t in BENCHMARKS.items() if t == target)
    folder, stamp = report_folder(settings.reports_dir, name, names["candidate"] or ranker)
    for side, run in trec.items():
        write_trec_run(run, folder / f"run-{side}.trec", names[side] or side)
    write_trec_qrels({s["id"]: {i: int(h) for i, h in s["judged"].items()} for s in pages}, folder / "qrels.trec")
    condensed, unjudged = round(versus["MAP"] - versus["shipped_MAP"], 4), round((sum(full[0]) - sum(full[1]))
                                                                                  / len(pages), 4)
    p_unjudged = paired_randomization(*full) if full[0] != full[1] else 1.0
    said = verdict(condensed, unjudged, versus["p_randomization"], p_unjudged)
    per_search = round(sum(len(s["judged"]) for s in pages) / len(pages), 2)
    report = {"benchmark": name, "target": target, "days": days, "generation": gen_name,
              "created_at": stamp.isoformat(), "searches": len(pages), **{k: skipped[k] for k in
                                                                           ("without_request", "not_reranked",
                                                                            "thread_gone", "given")},
              "other_generation": other_generation, "other_reranker": other_reranker, "reproducible": reproducible,
              "reproduced": reproduced,
              "endpoints": dict(Counter(s["endpoint"] for s in pages)),
              "served_as": served_name, "as_shown_MAP": round(sum(as_shown) / len(as_shown), 4),
              "served": figures("served"), "candidate": figures("candidate"),
              "judgements_per_search": per_search,
              "compare": {"verdict": said, "caution": caution(per_search, said),
                          "MAP_difference": condensed,
                          **{k: versus[k] for k in ("questions", "p_randomization", "p_ttest", "better", "worse")},
                          "difference_interval_95": [round(v, 4) for v in versus["difference_interval_95"]],
                          "MAP_unjudged_not_helpful_difference": unjudged, "p_unjudged_not_helpful": p_unjudged,
                          "helpful_found_difference": round((sum(x) - sum(y)) / len(both), 4) if both else None,
                          "helpful_found_p": (paired_randomization(x, y) if x != y else 1.0) if both else None},
              "seconds": round(time.perf_counter() - started, 2), "folder": str(folder),
              "note": "the users judged what the served ranker showed: a result only the candidate shows is "
                      "unjudged; MAP leaves it out (in the candidate's favour), MAP_unjudged_not_helpful counts it not "
                      "helpful (in the served ranker's); interleaving is the fair test of a ranker that brings other "
                      "results"}
    _atomic_json(folder / "report.json", report)
    return report


def _search_ranker(pipeline, requests: dict, synonyms):
    """A judged search's id to (its first page searched again through ``pipeline``, the reranker that ranked it):
    its request (``requests``) from offset 0, with the tag synonyms as they are now, as served."""
    def searched(search_id: str):
        req = replace(requests[search_id], offset=0, explain=False, snippets=False).with_synonyms(lambda: synonyms)
        resp = pipeline.search(req)
        return resp.results, resp.reranker
    return searched


def _comments_ranker(gen, main, arabic, threads: dict):
    """A judged comment order's id to (its thread's comments, ``threads``, ranked as GET /threads/{id}/answers ranks
    them with ``main`` as the default ranker: ties in the thread's order; the ranker that ranked them)."""
    from .forum_answers import endpoint_scores

    def searched(search_id: str):
        t = threads[search_id]
        if not t.answers:  # every comment removed since
            return [], main.name
        chosen, scores = endpoint_scores(t, gen, main, arabic)
        order = sorted(range(len(t.answers)), key=lambda i: -scores[i])
        return [Shown(t.answers[i].id) for i in order], chosen.name
    return searched
