"""The search pipeline: first stage -> candidates with their thread's metadata -> duplicate collapse ->
reranking of the head -> explain. POST /search, ``cqa search`` and the end-to-end benchmarks all call
``SearchPipeline.search``, so what is measured is what is served."""
from __future__ import annotations

import json
import logging
import math
import re
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Mapping, Sequence
from copy import copy
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field

from indexing.documents import ANSWER, tags_of_value
from indexing.models import Thread, question_text
from indexing.searcher import Generation
from indexing.store import HeldPosts

from .candidates import (
    ANSWER_ENCODER,
    ANSWER_VECTOR,
    FORUM,
    VECTOR_ENCODER,
    Candidate,
    Query,
    answer_candidates,
    forum_marks,
    indexed_question_meta,
    question_candidate,
)
from .arabic import as_read_by_arabic_ranker, is_arabic_text
from .interleave import drawn, seed, team_draft
from .rankers import Ranker
from .retriever import Filters, Retrieval, Retriever, RetrieverConfig, TagSynonyms
from .settings import MAX_RESULTS
from .snippets import Snippet, snippets

log = logging.getLogger(__name__)

RERANKED_TARGETS = ("answers", "questions")  # targets with a reranker of their own
# A reranked threads search ranks threads by their questions: the questions search, its results as threads (the
# first stage grouped by thread, which is what a threads search without reranking lists, ranked the similar threads
# of 2016 dev 0.085 MAP@10 below it; docs/BENCHMARKS.md, "Round 9").
RANKED_AS = {"threads": "questions"}
COLLAPSE_JACCARD = 0.9  # word-shingle overlap at which two texts count as the same text
HELD_SLACK = 5  # groups checked past those a page needs, so a removed one seldom costs a second query
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class SearchRequest:
    text: str
    k: int = 10
    offset: int = 0  # the results from rank offset + 1 on, a later page; none past rank MAX_RESULTS
    target: str = "answers"  # answers, questions or threads
    filters: Filters | None = None
    expansion: str | None = None  # None: the retriever's tuned setting
    rerank: bool = True
    collapse: bool = True
    explain: bool = False
    snippets: bool = True  # each result's snippet (``ranking.snippets``)
    subject: str = ""
    body: str = ""

    @classmethod
    def asking(cls, subject: str, body: str, **settings) -> "SearchRequest":
        """A search for a question given as its subject and body (POST /search, cqa search, the benchmarks)."""
        return cls(question_text(subject, body), subject=subject, body=body, **settings)

    @classmethod
    def like_thread(cls, thread: Thread, filters: Filters | None = None, **settings) -> "SearchRequest":
        """What is most similar to a stored ``thread`` (GET /threads/{id}/similar, cqa search --like-thread): its
        question searched as a new one is, inside ``filters``, the thread itself left out (``Filters.exclude_threads``;
        its near-copies stay)."""
        filters = filters or Filters()
        filters = replace(filters, exclude_threads=tuple(dict.fromkeys((*filters.exclude_threads, thread.id))))
        return cls.asking(thread.subject, thread.body, filters=filters, **settings)

    def with_synonyms(self, synonyms: Callable[[], TagSynonyms]) -> "SearchRequest":
        """This request with each tag it filters by standing for its family (``Filters.with_synonyms``), as POST
        /search and the replay of a judged search both search it; ``synonyms`` is read only where a tag filters."""
        if self.filters is None or not self.filters.tagged():
            return self
        return replace(self, filters=self.filters.with_synonyms(synonyms()))

    def to_json(self, like_thread: str | None = None) -> str:
        """This request as JSON (``from_json`` reads it back equal): what the feedback log keeps of a search it may
        search again (``CQA_FEEDBACK_QUERIES``; ``ranking.evaluation.replay``). ``like_thread``: the stored thread
        whose question this request asks (``like_thread``), kept by its id instead of its text, so that a thread
        erased or taken down leaves no copy of its words here."""
        fields = asdict(self)
        if like_thread is not None:
            fields = {k: v for k, v in fields.items() if k not in ("text", "subject", "body")}
            fields["like_thread"] = like_thread
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, thread: Callable[[str], Thread | None] | None = None) -> "SearchRequest | None":
        """The request ``to_json`` wrote; one kept by its thread's id is asked again with the thread ``thread`` reads
        now (the store's), None where that thread is no longer there."""
        fields = json.loads(text)
        if (f := fields.get("filters")) is not None:  # JSON lists back to the tuples Filters holds
            fields["filters"] = Filters(**{k: tuple(tuple(g) for g in v) if k == "tag_groups" else
                                           tuple(v) if isinstance(v, list) else v for k, v in f.items()})
        if (thread_id := fields.pop("like_thread", None)) is not None:
            t = thread(thread_id) if thread is not None else None
            return None if t is None else cls.like_thread(t, **fields)
        return cls(**fields)


class SearchResult(BaseModel):
    id: str = Field(description="answer id, or thread id for questions and threads")
    kind: str = Field(description="answer, question or thread")
    thread_id: str
    text: str
    thread_title: str | None = None
    thread_tags: list[str] = Field(default_factory=list, exclude_if=lambda v: not v,
                                   description="its thread's tags as filters compare them (left out where none)")
    score: float = Field(description="the reranker's score in the reranked head, the first stage's below it")
    rank: int
    duplicates: list[str] = Field(default_factory=list,
                                  description="ids of identical or near-identical texts collapsed into this one")
    stages: dict[str, float | None] | None = Field(None, description="per-stage scores (explain only)",
                                                   exclude_if=lambda v: v is None)
    attention: list[tuple[str, float]] | None = Field(None, description="BiLSTM word weights (explain only)",
                                                      exclude_if=lambda v: v is None)
    snippet: Snippet | None = Field(None, description="the part of its text where the question's words are, those "
                                    "words marked (left out when the request asks for no snippets)",
                                    exclude_if=lambda v: v is None)
    votes: int | None = Field(None, description="its score in the forum, where the forum sends one (a StackExchange "
                              "post's votes up minus down: meta.score of the answer, or of the thread for a question "
                              "or thread); left out where none", exclude_if=lambda v: v is None)
    accepted: bool | None = Field(None, description="an answer: whether its asker accepted it; a question or thread: "
                                  "whether it has an accepted answer (meta.accepted, meta.accepted_answer_id); left "
                                  "out where the forum says nothing of acceptance", exclude_if=lambda v: v is None)
    first_stage_rank: int | None = Field(None, exclude=True, description="its place in the order the reranker was "
                                         "given (0 first): the feedback log's, never sent")
    team: str | None = Field(None, exclude=True, description="in an interleaved search, the ranker that put it here "
                             "(A: the reranker, B: the challenger; ranking.interleave): the feedback log's, never sent")


class SearchResponse(BaseModel):
    results: list[SearchResult]
    generation: str
    model: str | None = None
    target: str
    reranker: str | None = Field(None, description="the reranker of this target, or null when not reranked")
    interleaved_with: str | None = Field(None, description="where this search is one of those interleaved "
                                         "(CQA_INTERLEAVE_ANSWERS / _QUESTIONS): the challenger whose order was merged "
                                         "with the reranker's (the results come in the merged order, each score "
                                         "still the reranker's); left out otherwise", exclude_if=lambda v: v is None)
    reranked: int = Field(0, description="how many of the first-stage candidates the reranker scored")
    collapsed: int = Field(0, description="duplicates folded into other results")
    timings_ms: dict[str, float]
    expansion: dict | None = Field(None, description="the expansion terms (explain only)",
                                   exclude_if=lambda v: v is None)
    offset: int = Field(0, description="the results start at rank offset + 1")
    next_offset: int | None = Field(None, description="the offset of the next page of as many results, where there "
                                    "are more within MAX_RESULTS ranks; null at the last page")
    search_id: str | None = Field(None, description="this search's id in the feedback log: send it with a judgement of "
                                  "a result (POST /feedback); left out where it showed none, the request said "
                                  "feedback=false, or the service keeps no feedback (CQA_FEEDBACK)",
                                  exclude_if=lambda v: v is None)


@dataclass
class Retrieved:
    """The first stage's output for one request. ``candidates`` and ``doc_ids`` are aligned, in the order
    duplicates were collapsed: the first-stage hits that make the head, the comments of the most similar
    threads (target answers), then the other hits. ``groups`` index into them, each led by the candidate
    kept; the first ``n_head`` groups are what the reranker scores. ``first`` is each group's first-stage
    score (None for a thread comment the first stage did not return)."""
    retrieval: Retrieval
    candidates: list[Candidate]
    doc_ids: list[str]
    groups: list[list[int]]
    n_head: int
    first: list[float | None]
    timings_ms: dict[str, float]

    @property
    def kept(self) -> list[Candidate]:
        return [self.candidates[g[0]] for g in self.groups]


class Collapser:
    """Groups texts as they come: identical after normalising case, punctuation and spacing, or word-trigram
    sets that overlap by at least ``threshold`` (Jaccard; Broder 1997). Each group is led by its first text.
    ``threshold`` None groups only identical document ids."""

    def __init__(self, threshold: float | None = COLLAPSE_JACCARD):
        self.threshold = threshold
        self.groups: list[list[int]] = []
        self._exact: dict[str, int] = {}
        self._leaders: list[tuple[int, int, set[str]]] = []  # (shingle count, group, shingles), by count
        self._ids: dict[str, int] = {}
        self._keys: dict[str, tuple[str, set[str]]] = {}

    def match(self, text: str, doc_id: str | None = None) -> int | None:
        """The group a text would join, or None. Two sets overlap by ``threshold`` only if their sizes are within
        that ratio, so only leaders of such sizes are compared; of those that match, the first group wins."""
        if doc_id is not None and doc_id in self._ids:
            return self._ids[doc_id]
        if self.threshold is None:
            return None
        key, sh = self._shingles(text)
        if key in self._exact:
            return self._exact[key]
        n, t = len(sh), self.threshold
        lo = bisect_left(self._leaders, math.ceil(n * t - 1e-9), key=_count)
        hi = bisect_right(self._leaders, math.floor(n / t + 1e-9), key=_count)
        best = None
        for size, g, other in self._leaders[lo:hi]:
            if (best is None or g < best) and min(n, size) / max(n, size) >= t and \
                    len(sh & other) / len(sh | other) >= t:
                best = g
        return best

    def add(self, i: int, text: str, doc_id: str | None = None) -> int:
        """Put the i-th text in its group (a new one at the end if none matches); returns the group."""
        g = self.match(text, doc_id)
        if g is None:
            g = len(self.groups)
            self.groups.append([])
            if self.threshold is not None:
                key, sh = self._shingles(text)
                self._exact[key] = g
                insort(self._leaders, (len(sh), g, sh), key=_count)
        self.groups[g].append(i)
        if doc_id is not None:
            self._ids[doc_id] = g
        return g

    def _shingles(self, text: str) -> tuple[str, set[str]]:
        got = self._keys.get(text)
        if got is None:
            got = self._keys[text] = self._key(text)
        return got

    @staticmethod
    def _key(text: str) -> tuple[str, set[str]]:
        words = _WORD.findall(text.lower())
        # trigrams as strings, not tuples: tuples are objects the garbage collector tracks, and a search collapses
        # 155 texts; their allocations had it run full collections of the whole heap (235 ms) under load
        return " ".join(words), set(map(" ".join, zip(words, words[1:], words[2:]))) or {" ".join(words)}


def _count(leader: tuple[int, int, set[str]]) -> int:
    return leader[0]


@dataclass
class ShownGroups:
    """What a search shows (``SearchPipeline.held_groups``): its groups from the first rank to the page's last, each
    as (group, its members still stored, the first shown; its interleaving team or None); how many groups there are
    to show as far as it looked (one past the page where more remain: what ``next_page`` reads); each post's text and
    each thread's title as the store holds them now (empty without a store)."""
    groups: list[tuple[int, list[int], str | None]]
    found: int
    texts: dict[str, str] = field(default_factory=dict)  # doc id -> its text now
    titles: dict[str, str] = field(default_factory=dict)  # thread id -> its title now


def next_page(req: SearchRequest, found: int) -> int | None:
    """The offset of the page after ``req``'s, where one holds results: ``found`` ranked (after the collapse), within
    the MAX_RESULTS ranks a search ranks. Pages never overlap or leave a gap: whatever the k, a search's first depth
    and its collapse are the same (``SearchPipeline.fetch_depth``), so its first n results are a prefix of its first
    n + m."""
    after = req.offset + req.k
    return after if after < min(found, MAX_RESULTS) else None


def rerank_order(head_scores, n: int) -> list[int]:
    """Indices of n candidates: the head by descending score (ties keep first-stage order), then the rest."""
    head = sorted(range(len(head_scores)), key=lambda i: -head_scores[i])
    return head + list(range(len(head_scores), n))


class SearchPipeline:
    """One generation's search. ``rerankers`` maps a target (answers, questions) to its reranker;
    ``threads`` looks up a stored thread by id (the store), so candidates carry their real metadata.
    ``depth``: first-stage results reranked; ``thread_depth``: for target answers, the most similar threads
    (a question search) whose comments join the reranked head, at most ``thread_comments`` each."""

    def __init__(self, retriever: Retriever, rerankers: Mapping[str, Ranker],
                 threads: Callable[[str], Thread | None] | None = None, depth: int = 30, attention=None,
                 thread_depth: int = 10, thread_comments: int = 20, arabic: Ranker | None = None,
                 challengers: Mapping[str, Ranker] | None = None, interleave_share: float = 0.0,
                 held: Callable[[Sequence[str], Sequence[str]], HeldPosts] | None = None):
        self.retriever, self.rerankers, self.threads = retriever, dict(rerankers), threads
        # which of some thread and comment ids the store holds now, and what they say (``ThreadStore.held_posts``): a
        # result deleted or taken down since this generation was built is not shown, an edited one is shown as it is
        # now; None (a benchmark without a store): each as the generation has it
        self.held = held
        # a target's challenger, whose order is merged with its reranker's for ``interleave_share`` of the questions
        # (ranking.interleave): the service's only, never a benchmark's
        self.challengers, self.interleave_share = dict(challengers or {}), interleave_share
        self.depth, self.attention = depth, attention
        self.thread_depth, self.thread_comments = thread_depth, thread_comments
        # A question mostly in Arabic script: its first stage leaves out the dense index (an English encoder's
        # vectors), and ``arabic`` ($CQA_ARABIC_RANKER) reranks its head instead of the target's reranker; dev-D over
        # an Arabic forum, docs/BENCHMARKS.md "Round 24". None: Arabic is searched as any text.
        self.arabic = arabic
        self.arabic_config = without_source(retriever.config, "dense")

    @property
    def gen(self) -> Generation:
        return self.retriever.gen

    def reranker_of(self, target: str) -> Ranker | None:
        """The reranker a reranked search of this target runs (threads: the questions')."""
        return self.rerankers.get(RANKED_AS.get(target, target))

    def search(self, req: SearchRequest, interleave: bool = True) -> SearchResponse:
        """``req``'s results; ``interleave``: where its question is drawn (``interleave_share``), its head is its
        reranker's and its challenger's orders merged (the service passes False where the results are not kept in the
        feedback log, so nobody could judge them: the reranker's order alone)."""
        as_target = RANKED_AS.get(req.target)
        if req.rerank and as_target in self.rerankers:
            out = self.search(replace(req, target=as_target), interleave)
            for r in out.results:
                r.kind = "thread"
            out.target = req.target
            return out
        t_all = time.perf_counter()
        arabic = self.arabic is not None and is_arabic_text(req.text)
        ranker = self.rerankers.get(req.target) if req.rerank else None
        if arabic and ranker is not None:
            ranker = self.arabic
        challenger = self.challengers.get(req.target) if ranker is not None and not arabic and interleave else None
        if challenger is not None and not drawn(req.text, req.target, self.interleave_share):
            challenger = None
        teams: list[str | None] = []
        got = self.retrieve(req, self.arabic_config if arabic else None)
        groups, timings = got.groups, got.timings_ms
        floor = min((f for f in got.first if f is not None), default=0.0)
        first = [f if f is not None else floor for f in got.first]
        order, scores, n_head = list(range(len(groups))), list(first), 0
        if ranker is not None and got.n_head:
            t0 = time.perf_counter()
            q = self.head_query(req, got, question_vector=not arabic)
            if arabic:  # the forum's statistics, from this generation; a comment after its thread's question
                q = as_read_by_arabic_ranker(q, self.gen, thread_question=req.target == "answers")
            n_head = len(q.candidates)
            head_scores = ranker.score([q])[0]
            order = rerank_order(head_scores, len(groups))
            scores = [float(s) for s in head_scores] + first[n_head:]
            timings["rerank"] = _ms(t0)
            if challenger is not None:  # both rankers' orders of the head merged, each result with its team
                t0 = time.perf_counter()
                try:
                    theirs = rerank_order(challenger.score([q])[0], n_head)
                except Exception:  # an experiment's failure costs the experiment, not the search
                    log.warning("challenger %s failed: this search is served by its reranker alone",
                                challenger.name, exc_info=True)
                else:
                    merged, teams = team_draft(order[:n_head], theirs, seed(req.text, req.target))
                    order = merged + order[n_head:]
                    timings["interleave"] = _ms(t0)
        r = got.retrieval
        results = []
        forum = _ForumMarks(self.threads)
        t0 = time.perf_counter()
        shown = self.held_groups(got, order, teams, min(req.offset + req.k, MAX_RESULTS))
        if self.held is not None:
            timings["store_check"] = _ms(t0)
        for rank, (i, members, team) in enumerate(shown.groups[req.offset:], req.offset + 1):
            lead = members[0]
            c, did = got.candidates[lead], got.doc_ids[lead]
            tid = c.meta["thread_id"]
            stages = None
            if req.explain:
                stages = {name: st.get(did) for name, st in r.stages.items()}
                stages["first_stage"] = got.first[i]
                if i < n_head:
                    stages["rerank"] = scores[i]
            kind = _kind(did, self.gen)
            results.append(SearchResult(
                id=c.id, kind=kind, thread_id=tid, text=shown.texts.get(did, c.text),
                thread_title=shown.titles.get(tid, c.meta.get("thread_title")), thread_tags=_tags(self.gen, tid),
                score=scores[i], rank=rank,
                duplicates=[got.candidates[j].id for j in members[1:]], stages=stages, first_stage_rank=i, team=team,
                **forum.marks(c, kind)))
        if req.explain and self.attention is not None and results:
            t0 = time.perf_counter()
            q = Query("explain", req.text, tuple(Candidate(x.id, x.text) for x in results))
            att_scores, att = self.attention.score_with_attention([q])
            for x, s, a in zip(results, att_scores[0], att[0]):
                x.stages["bilstm"] = s
                x.attention = [(tok, round(w, 4)) for tok, w in a]
            timings["explain"] = _ms(t0)
        if req.snippets and results:
            t0 = time.perf_counter()
            for x, snip in zip(results, snippets([x.text for x in results], req.text, self.gen.analyzer)):
                x.snippet = snip
            timings["snippets"] = _ms(t0)
        timings["total"] = _ms(t_all)
        return SearchResponse(
            results=results, generation=self.gen.name, model=self.gen.manifest.get("model"), target=req.target,
            reranker=ranker.name if ranker is not None else None, reranked=n_head,
            interleaved_with=challenger.name if challenger is not None and teams else None,
            collapsed=len(got.candidates) - len(groups), timings_ms=timings, offset=req.offset,
            next_offset=next_page(req, shown.found),
            expansion=({"method": r.expansion.method, "terms": r.expansion.terms}
                       if req.explain and r.expansion else None))

    def held_groups(self, got: Retrieved, order: list[int], teams: Sequence[str | None],
                    upto: int) -> "ShownGroups":
        """The first ``upto`` groups of ``order`` that the store still holds a member of, and one more where there is
        one (``ShownGroups``), with what their posts say now. A post deleted or taken down after this generation was
        built (``held``) is left out at once, not at the next build: a group whose shown member is gone shows its
        first copy still held, and one with none left is skipped, the later ones moving up; an edited post is shown
        as the store holds it (ranked, until the next build, by what the generation indexed). Checked in batches of
        ids, one query each, usually one a search; without ``held`` (a benchmark without a store) every group as
        the generation has it."""
        groups = got.groups
        if self.held is None:
            return ShownGroups([(i, groups[i], teams[p] if p < len(teams) else None)
                                for p, i in enumerate(order[:upto])], len(order))
        out = ShownGroups([], 0)
        p = 0
        while len(out.groups) <= upto and p < len(order):
            batch = range(p, min(len(order), p + upto + 1 - len(out.groups) + HELD_SLACK))
            ids = [got.doc_ids[j] for q in batch for j in groups[order[q]]]
            held = self.held([d[2:] for d in ids if not d.startswith("a:")], [d[2:] for d in ids if d.startswith("a:")])
            for d in ids:
                if d.startswith("a:"):
                    now = held.answers[d[2:]][0] if d[2:] in held.answers else None
                else:
                    now = held.question(d[2:])
                if now is not None:
                    out.texts[d] = now
            out.titles.update((tid, _title_of(question_text(*q))) for tid, q in held.questions.items())
            for q in batch:
                members = [j for j in groups[order[q]] if got.doc_ids[j] in out.texts]
                if members:
                    out.groups.append((order[q], members, teams[q] if q < len(teams) else None))
                if len(out.groups) > upto:
                    break
            p = batch.stop
        out.found = len(out.groups)
        del out.groups[upto:]
        return out

    def fetch_depth(self, req: SearchRequest) -> int:
        """First-stage hits fetched: as many for every k, the number the largest k needs (MAX_RESULTS, with room
        for duplicates when collapsing). Which hits exist decides which comments of the similar threads join the
        head and which copies a result collapses, so a depth that followed k would give a k = 10 search another
        first page than a k = 100 one; with one depth the first k results are a prefix of the first k + n."""
        rerank = req.rerank and req.target in RERANKED_TARGETS
        fetch = max(MAX_RESULTS, 2 * self.depth if rerank else 0)
        return min(fetch + (MAX_RESULTS // 2 + 5 if req.collapse else 0), 200)

    def retrieve(self, req: SearchRequest, config: RetrieverConfig | None = None) -> Retrieved:
        """The first stage (``config``: other sources than the retriever's), its hits as candidates with their
        metadata, the comments of the most similar threads (answers, when reranking), and the duplicate collapse.
        Nothing here depends on k (``fetch_depth``)."""
        if not 1 <= req.k <= MAX_RESULTS:
            raise ValueError(f"k must be from 1 to {MAX_RESULTS}, got {req.k}")
        if not 0 <= req.offset < MAX_RESULTS:
            raise ValueError(f"offset must be from 0 to {MAX_RESULTS - 1} (a search ranks {MAX_RESULTS} results), got "
                             f"{req.offset}")
        rerank = req.rerank and req.target in RERANKED_TARGETS
        fetch = self.fetch_depth(req)
        r = self.retriever.search(req.text, fetch, req.target, req.filters, req.expansion, config)
        timings = dict(r.timings_ms)
        hit_ids = [h.doc_id for h in r.hits]
        thread_ranks: dict[str, int] = {}  # thread id -> its rank among the similar threads
        similar_ids: list[str] = []  # their comments, by thread rank, then in thread order
        if rerank and req.target == "answers" and self.thread_depth:
            t0 = time.perf_counter()
            similar = self.retriever.search(req.text, self.thread_depth, "questions", req.filters, req.expansion,
                                            config)
            rows = self._thread_answer_rows()
            for h in similar.hits:
                tid = h.doc_id.split(":", 1)[1]
                thread_ranks[tid] = len(thread_ranks) + 1
                similar_ids += [self.gen.docs.ids[j] for j in rows.get(tid, [])[: self.thread_comments]]
            timings["similar_threads"] = _ms(t0)
        t0 = time.perf_counter()
        col = Collapser(COLLAPSE_JACCARD if req.collapse else None)
        doc_ids: list[str] = []  # in the order they are collapsed

        def add(d: str) -> None:
            col.add(len(doc_ids), self._text(d), d)
            doc_ids.append(d)

        n_hits, j = len(hit_ids), 0
        head_groups = self.depth if rerank else 0
        # the head: hits until it holds ``depth`` groups, and the later hits that duplicate one of them
        while j < n_hits and (len(col.groups) < head_groups or
                              (head_groups and col.match(self._text(hit_ids[j]), hit_ids[j]) is not None)):
            add(hit_ids[j])
            j += 1
        # then the similar threads' comments the first stage did not return (one it returned keeps its place;
        # letting those below the head join it too was tried: dev MAP@10 +0.004, under the +0.005 asked)
        hits = set(hit_ids)
        for d in similar_ids:
            if d not in hits:
                add(d)
        n_head = len(col.groups) if rerank else 0
        for d in hit_ids[j:]:
            add(d)
        scores = {h.doc_id: h.score for h in r.hits}
        first = [scores.get(doc_ids[g[0]]) for g in col.groups]  # before a questions group gets another leader
        if req.target == "questions":  # every group, reranked or not: the copy shown is the one with answers
            self._answered_copies_lead(col.groups, doc_ids)
        timings["collapse"] = _ms(t0)

        # Only what the reranker reads gets the store's metadata and stored vectors; the rest is listed as
        # the generation has it.
        t0 = time.perf_counter()
        leaders = [g[0] for g in col.groups[:n_head]]
        for d in doc_ids:  # threads not among the similar ones: ranked by first appearance
            if not d.startswith("t:"):
                thread_ranks.setdefault(self.gen.docs.thread_ids[self.gen.row[d]], len(thread_ranks) + 1)
        full = dict(zip(leaders, self.candidates([doc_ids[i] for i in leaders], req.target, thread_ranks)))
        candidates = [full.get(i) or self._light(d) for i, d in enumerate(doc_ids)]
        timings["candidates"] = _ms(t0)
        return Retrieved(r, candidates, doc_ids, col.groups, n_head, first, timings)

    def _answered_copies_lead(self, groups: list[list[int]], doc_ids: list[str]) -> None:
        """Each group of near-identical questions led by the copy whose thread has the most comments (ties: the first
        stage's order), in place: the reranker reads that copy's comments, and a reposted question with none does not
        sink the original it folds into (docs/BENCHMARKS.md, "Round 47, rule 29"). Below the head, and in a search
        that is not reranked, the leader is the copy shown, the others listed as its duplicates; a group keeps its
        first-stage score and place, and a benchmark scores it by any copy judged relevant, so no figure moves."""
        rows = self._thread_answer_rows()
        for g in groups:
            if len(g) > 1:
                g.sort(key=lambda i: -len(rows.get(doc_ids[i].split(":", 1)[1], ())))

    def head_query(self, req: SearchRequest, got: Retrieved, question_vector: bool = True) -> Query:
        """What the reranker scores: the first ``depth`` groups of first-stage hits after collapse and, for
        answers, the comments of the most similar threads. Below them the first stage's order stands. With
        ``question_vector``, the question's dense vector too (the first stage's, from its cache), where the first
        stage has a dense source; an Arabic search, whose first stage leaves it out and whose ranker reads no vector,
        goes without."""
        r = got.retrieval
        out, rank = [], 0
        for g, first in zip(got.groups[: got.n_head], got.first):
            did = got.doc_ids[g[0]]
            retrieved = first is not None
            rank += retrieved
            stages = {n: st.get(did) for n, st in r.stages.items()} | {"fused": first}
            out.append(_for_reranking(got.candidates[g[0]], rank if retrieved else self.depth + 1, stages))
        meta = {"subject": req.subject, "body": req.body}
        if question_vector and self.gen.dense is not None and "dense" in self.retriever.config.sources:
            meta["vector"] = self.gen.dense.embed(req.text)  # the first stage's, from its cache
            meta[VECTOR_ENCODER] = self.gen.dense.encoder
        return Query("search", req.text, tuple(out), meta)

    def prepare(self) -> "SearchPipeline":
        """Build now what searches of this generation would build when first needed: each thread's rows and its
        comments' rows (ranges from the question rows: 0.02 s at 235k documents; a pass over every document took 0.3
        s of the first reranked /search answers before round 22, bench/generation_switch.py). The service calls it
        while it loads a generation, before it serves it, so no request pays it. So does the Arabic ranker's
        (``prepare``: ``ArabicBM25``'s forum statistics, which POST /rerank reads too), and so is the encoder of the
        generation's dense index, which its first search would load (once per process and encoder: a generation built
        by the encoder served until now finds it loaded; bench/first_request.py, its warm-up-off arm). So are the
        threads' tags, coded for a tag filter and GET /tags (1M rows of 145k distinct sets of tags: about 0.74 s,
        bench/tag_filter.py's in-process part)."""
        self._thread_answer_rows()
        self.retriever.prepare()  # each row's tags coded, each tag's sets, the tags by name: a tag filter's, GET /tags
        if hasattr(self.arabic, "prepare"):
            self.arabic.prepare(self.gen)
        if self.gen.dense is not None:
            from indexing.encoder import load_encoder
            try:
                load_encoder(self.gen.dense.device, self.gen.dense.encoder)
            except Exception as e:  # what the first search would meet, and report: not a reason to serve no generation
                log.warning("the dense index's encoder %s did not load: %s", self.gen.dense.encoder.id, e)
        return self

    def reranked_by(self, rerankers: Mapping[str, Ranker], depth: int | None = None,
                    thread_depth: int | None = None, thread_comments: int | None = None) -> "SearchPipeline":
        """This pipeline (the same first stage, store and generation) with other rerankers, e.g. the service's own
        without their micro-batchers, and fewer candidates where given (its warm-up); never interleaved."""
        twin = copy(self)
        twin.rerankers, twin.challengers = dict(rerankers), {}
        twin.depth = self.depth if depth is None else depth
        twin.thread_depth = self.thread_depth if thread_depth is None else thread_depth
        twin.thread_comments = self.thread_comments if thread_comments is None else thread_comments
        return twin

    def _thread_answer_rows(self) -> dict[str, Sequence[int]]:
        """thread id -> its comments' rows in the generation, in thread order (built once per generation)."""
        return self.retriever.thread_answer_rows

    def candidates(self, doc_ids: list[str], target: str,
                   thread_ranks: dict[str, int] | None = None) -> list[Candidate]:
        """Questions or answers as reranker candidates, each with its thread's metadata from the store (position,
        author, asker, thread question, category, dialogue signals) as the benchmark loaders give it, plus where the
        search put it (``thread_rank``: its thread's rank among the similar threads, else in order of first
        appearance after them) and the stored embeddings of it and of its thread's question."""
        gen = self.gen
        stored: dict[str, dict[str, Candidate]] = {}
        thread_rank = dict(thread_ranks or {})
        out = []
        for i, did in enumerate(doc_ids, 1):
            row = gen.row[did]
            tid = gen.docs.thread_ids[row]
            rank = thread_rank.setdefault(tid, len(thread_rank) + 1)
            if tid not in stored:
                stored[tid] = self._stored(tid, rank, target)
            c = stored[tid].get(did)
            if c is None:  # the store changed after this generation was built: what the generation knows
                c = self._from_generation(did, row, tid, rank)
            qrow = gen.row.get(f"q:{tid}")
            meta = {**c.meta, "retrieval_rank": i, "thread_title": _title(gen, tid), "vector": gen.dense_vector(row),
                    "thread_vector": gen.dense_vector(qrow) if qrow is not None else None}
            if gen.dense is not None:
                meta[VECTOR_ENCODER] = gen.dense.encoder
            if gen.answer_vectors is not None and gen.docs.kinds[row] == ANSWER:
                meta[ANSWER_VECTOR] = np.asarray(gen.answer_vectors[row])
                meta[ANSWER_ENCODER] = gen.answer_encoder.id
            if "comments" in meta:  # a question: its comments' stored embeddings
                meta.update(self.comment_meta(tid, meta["comments"]))
            out.append(Candidate(c.id, c.text, meta))
        return out

    def question_meta(self, thread_id: str, text: str, comments) -> dict[str, Any]:
        """What a given candidate question (POST /rerank/questions, a subtask B file) carries from this generation:
        its stored vector where the generation indexes thread ``thread_id`` with that question text
        (``indexed_question_meta``), its comments' where with exactly those ``comments`` (``comment_meta``)."""
        return {**(self.comment_meta(thread_id, comments) if comments else {}),
                **indexed_question_meta(self.gen, thread_id, text)}

    def comment_meta(self, thread_id: str, comments) -> dict[str, Any]:
        """What a question candidate carries for its thread's ``comments`` (texts, in thread order) when this
        generation indexes thread ``thread_id`` with exactly those comments: their stored embeddings, the dense
        index's (meta "comment_vectors") and the answer encoder's (meta "comment_answer_vectors", read by
        ``answers-model-*``), so the rankers that read them encode only the new question; else nothing."""
        gen = self.gen
        if gen.dense is None and gen.answer_vectors is None:
            return {}
        rows = self._thread_answer_rows().get(thread_id)
        if rows is None or [gen.docs.texts[j] for j in rows] != list(comments):
            return {}
        meta: dict[str, Any] = {}
        if gen.dense is not None:
            meta["comment_vectors"] = [gen.dense_vector(j) for j in rows]
        if gen.answer_vectors is not None:
            # a thread's comments are consecutive rows (Documents.from_threads): where they are consecutive in the
            # stored file too, a view of it, read only if a ranker uses it
            meta["comment_answer_vectors"] = (gen.answer_vectors[rows[0]:rows[-1] + 1] if rows
                                              else gen.answer_vectors[:0])
            meta[ANSWER_ENCODER] = gen.answer_encoder.id
        return meta

    def _stored(self, tid: str, rank: int, target: str) -> dict[str, Candidate]:
        t = self.threads(tid) if self.threads is not None else None
        if t is None:
            return {}
        if target == "questions":
            return {f"q:{tid}": question_candidate(t, rank)}
        return {f"a:{c.id}": c for c in answer_candidates(t, rank)} | {f"q:{tid}": question_candidate(t, rank)}

    def _text(self, did: str) -> str:
        """A document's text as this generation indexed it (a thread: its question)."""
        row = self.gen.row.get(f"q:{did[2:]}" if did.startswith("t:") else did)
        return self.gen.docs.texts[row] if row is not None else ""

    def _light(self, did: str) -> Candidate:
        """A result the reranker does not read: its id, text, thread and title, from the generation."""
        tid = did[2:] if did.startswith("t:") else self.gen.docs.thread_ids[self.gen.row[did]]
        return Candidate(did.split(":", 1)[1], self._text(did),
                         {"thread_id": tid, "thread_title": _title(self.gen, tid)})

    def _from_generation(self, did: str, row: int, tid: str, rank: int) -> Candidate:
        """A reranker candidate whose thread the store no longer has as indexed: what the generation knows."""
        gen, light = self.gen, self._light(did)
        meta = {**light.meta, "category": gen.docs.categories[row], "thread_rank": rank,
                "created_at": gen.docs.created_at[row]}
        if gen.docs.kinds[row] == ANSWER:
            meta["thread_question"] = self._text(f"t:{tid}")
        return Candidate(light.id, light.text, meta)


class _ForumMarks:
    """What the forum says of a page's results (``votes``, ``accepted``, ``candidates.forum_marks``): carried by a
    reranked candidate, whose thread the search read already; for the others read from the store's threads
    (``threads``: the pipeline's reader, None in benchmarks without a store), each thread once per page."""

    def __init__(self, threads) -> None:
        self.threads, self._read = threads, {}

    def marks(self, c: Candidate, kind: str) -> dict[str, Any]:
        if FORUM in c.meta:
            return c.meta[FORUM]
        if self.threads is None:
            return {}
        tid = c.meta["thread_id"]
        if tid not in self._read:
            self._read[tid] = self.threads(tid)
        t = self._read[tid]
        if t is None:  # taken down or deleted since the generation was built
            return {}
        if kind != ANSWER:
            return forum_marks(t)
        answer = next((a for a in t.answers if a.id == c.id), None)
        return forum_marks(t, answer) if answer is not None else {}


def default_config(gen: Generation) -> RetrieverConfig:
    """The tuned first stage (ranking/retriever_defaults.json), without the dense source where the generation
    has none."""
    from .config import load_retriever_defaults
    cfg = load_retriever_defaults()
    return without_source(cfg, "dense") if gen.dense is None else cfg


def without_source(cfg: RetrieverConfig, name: str) -> RetrieverConfig:
    """``cfg`` without one of its sources, its fusion weight left out with it."""
    if name not in cfg.sources:
        return cfg
    keep = [i for i, s in enumerate(cfg.sources) if s != name]
    return replace(cfg, sources=tuple(cfg.sources[i] for i in keep),
                   weights=None if cfg.weights is None else tuple(cfg.weights[i] for i in keep))


@runtime_checkable
class StoredThreads(Protocol):
    """What a pipeline reads of the store (``indexing.store.ThreadStore``): a thread by id, and which posts it still
    holds."""

    def get(self, thread_id: str) -> Thread | None: ...

    def held_posts(self, thread_ids: Sequence[str], answer_ids: Sequence[str]) -> HeldPosts: ...


def build_pipeline(settings, gen: Generation, threads: StoredThreads | Callable[[str], Thread | None] | None,
                   rerankers: Mapping[str, Ranker] | None = None, attention=None,
                   arabic: Ranker | None | str = "settings",
                   challengers: Mapping[str, Ranker] | None = None) -> SearchPipeline:
    """The pipeline the service serves a generation with: ``threads``, the store (its threads' metadata, and no
    result it no longer holds shown), or a lookup of threads alone; the tuned first stage, each target's reranker
    (``search_rerankers`` unless given, e.g. behind the service's micro-batchers), the reranker of a question in
    Arabic (``arabic``: $CQA_ARABIC_RANKER unless given; None: none), $CQA_RERANK_DEPTH and
    $CQA_SEARCH_THREAD_DEPTH. ``challengers``: the service's (``rankers.challenger_rerankers``), interleaved with their
    target's reranker for $CQA_INTERLEAVE_SHARE of the questions; none unless given, so a benchmark never
    interleaves."""
    from .rankers import arabic_reranker, search_rerankers
    return SearchPipeline(Retriever(gen, default_config(gen)),
                          search_rerankers(settings) if rerankers is None else rerankers,
                          threads.get if isinstance(threads, StoredThreads) else threads, settings.rerank_depth,
                          attention, settings.search_thread_depth,
                          arabic=arabic_reranker(settings) if arabic == "settings" else arabic,
                          challengers=challengers, interleave_share=settings.interleave_share,
                          held=threads.held_posts if isinstance(threads, StoredThreads) else None)


def as_given_to(pipeline: SearchPipeline | None, queries: list[Query]) -> list[Query]:
    """Subtask B ``queries`` as POST /rerank/questions hands them to its ranker when ``pipeline`` serves the live
    generation: each candidate with what the generation stores for it (``SearchPipeline.question_meta``); as they are
    without one."""
    if pipeline is None:
        return queries
    return [replace(q, candidates=tuple(
        Candidate(c.id, c.text, {**c.meta, **pipeline.question_meta(c.id, c.text, c.meta.get("comments", ()))})
        for c in q.candidates)) for q in queries]


def collapse_duplicates(texts: list[str], threshold: float = COLLAPSE_JACCARD) -> list[list[int]]:
    """Groups of indices of identical or near-identical texts (see ``Collapser``), in order of their leaders."""
    col = Collapser(threshold)
    for i, t in enumerate(texts):
        col.add(i, t)
    return col.groups


def _for_reranking(c: Candidate, rank: int, stages: dict[str, float | None]) -> Candidate:
    """The candidate in the reranked head: its retrieval rank after collapse, and its first-stage scores
    (each source's over the whole corpus, None where a source did not return it, and the fused one)."""
    return Candidate(c.id, c.text, {**c.meta, "retrieval_rank": rank, "first_stage": stages})


def _kind(doc_id: str, gen: Generation) -> str:
    return "thread" if doc_id.startswith("t:") else gen.docs.kinds[gen.row[doc_id]]


def _title(gen: Generation, tid: str) -> str | None:
    qrow = gen.row.get(f"q:{tid}")
    return _title_of(gen.docs.texts[qrow]) if qrow is not None else None


def _title_of(question: str) -> str:
    """A thread's title: its question's first line (its subject, where it has one), at most 200 characters."""
    return question.split("\n", 1)[0][:200]


def _tags(gen: Generation, tid: str) -> list[str]:
    """The thread's tags as this generation holds them (sorted, as filters compare them)."""
    qrow = gen.row.get(f"q:{tid}")
    return sorted(tags_of_value(gen.docs.tags[qrow])) if qrow is not None else []


def _ms(t0: float) -> float:
    return round(1000 * (time.perf_counter() - t0), 3)
