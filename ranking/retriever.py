"""The first-stage retriever: expand the question, search every source, fuse, filter, and group.

Filters (category, tags, date range, threads left out) and the target (answers, questions, threads) become a set of
allowed rows that every source searches inside, so a filter never empties a top-k after the fact.
"""
from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import cached_property, reduce
from typing import Mapping, Sequence

import numpy as np

from indexing.documents import ANSWER, TAGS_SINCE, tags_of_value
from indexing.models import tag_key
from indexing.hits import Hit
from indexing.searcher import Generation

from .expansion import EXPANSIONS, Expanded
from .fusion import FUSIONS

log = logging.getLogger(__name__)

_NONE = np.zeros(0, dtype=np.int32)  # the sets of tags that hold a tag no thread carries
TARGETS = ("answers", "questions", "threads", "all")


@dataclass(frozen=True)
class Filters:
    category: str | None = None
    since: str | None = None  # ISO date or date-time, inclusive
    until: str | None = None  # inclusive; a bare date covers that whole day
    exclude_threads: tuple[str, ...] = ()  # threads whose question and comments never come back (the page's own)
    tags: tuple[str, ...] = ()  # only threads that carry every one of these tags (``meta.tags``; ``tag_key``)
    exclude_tags: tuple[str, ...] = ()  # no thread that carries any of these tags
    any_tags: tuple[str, ...] = ()  # only threads that carry at least one of these tags (StackExchange's [a] or [b])
    tag_groups: tuple[tuple[str, ...], ...] = ()  # and of each group, at least one: (a or b) and (c or d)

    def tagged(self) -> bool:
        """Whether any tag filters (the synonyms and the tags' index have something to do)."""
        return bool(self.tags or self.exclude_tags or self.alternatives())

    def alternatives(self) -> list[tuple[str, ...]]:
        """The groups of tags of which a thread must carry one at least: ``any_tags``, then each of ``tag_groups``."""
        return [g for g in (self.any_tags, *self.tag_groups) if g]

    def with_synonyms(self, synonyms: "TagSynonyms") -> "Filters":
        """These filters with each tag standing for its family (``TagSynonyms.family``): a tag asked becomes a group
        of its family (a thread carries one of them), a tag left out leaves out every one of them, an alternative
        stands for all of them: a search within ``js`` finds the threads tagged ``javascript`` too."""
        if not synonyms.targets or not self.tagged():
            return self
        family = synonyms.family

        def each(tags) -> tuple[str, ...]:
            return tuple(dict.fromkeys(member for t in tags for member in family(t)))
        alone = tuple(dict.fromkeys(family(t)[0] for t in self.tags if len(family(t)) == 1))
        grouped = tuple(dict.fromkeys(family(t) for t in self.tags if len(family(t)) > 1))
        return replace(self, tags=alone, exclude_tags=each(self.exclude_tags), any_tags=each(self.any_tags),
                       tag_groups=grouped + tuple(each(g) for g in self.tag_groups))


@dataclass(frozen=True)
class TagSynonyms:
    """A forum's tag synonyms (the store's, ``ThreadStore.tag_synonyms``): each synonym's target, by synonym, both as
    ``tag_key`` compares them, and each target's family, made once per change of them, not per search."""
    targets: Mapping[str, str] = field(default_factory=dict)
    families: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, targets: Mapping[str, str]) -> "TagSynonyms":
        families: dict[str, list[str]] = {}
        for source, target in sorted(targets.items()):
            families.setdefault(target, [target]).append(source)
        return cls(dict(targets), {t: tuple(f) for t, f in families.items()})

    def family(self, tag: str) -> tuple[str, ...]:
        """The tags ``tag`` stands for: its target (or itself) first, then the target's synonyms."""
        key = tag_key(tag)
        head = self.targets.get(key, key)
        return self.families.get(head, (head,))


def tag_rows(retriever: "Retriever", listed: list[tuple[str, int]], synonyms: TagSynonyms) -> list[dict]:
    """Tags as GET /tags and `cqa tags` list them: each with its thread count, and where it has synonyms, the threads
    its family carries (``with_synonyms``: what a search within it finds)."""
    rows = []
    for tag, n in listed:
        family = synonyms.family(tag)
        rows.append({"tag": tag, "threads": n, **({"with_synonyms": retriever.threads_carrying_any(family)}
                                                   if len(family) > 1 else {})})
    return rows


class TagsNotIndexed(Exception):
    """A tag filter on a generation whose documents were made before they carried their thread's tags (round 55):
    it would match nothing whatever the store holds, so it is refused with what to run."""

    def __init__(self, generation: str):
        super().__init__(f"the live index generation {generation} was built by an earlier release, before tag "
                         "filters: the automatic refresh builds a new one (or run `cqa reindex`), then search again")
        self.generation = generation


@dataclass(frozen=True)
class RetrieverConfig:
    sources: tuple[str, ...] = ("bm25", "lm", "dense")
    fusion: str = "rrf"
    weights: tuple[float, ...] | None = None
    expansion: str = "none"
    depth: int = 100


@dataclass
class Retrieval:
    hits: list[Hit]
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    expansion: Expanded | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)


class Retriever:
    def __init__(self, gen: Generation, config: RetrieverConfig = RetrieverConfig()):
        unknown = [s for s in config.sources if s not in gen.sources]
        if unknown:
            raise ValueError(f"sources {unknown} are not in generation {gen.name}; it has {sorted(gen.sources)}")
        if config.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {config.fusion!r}; known: {', '.join(FUSIONS)}")
        if config.expansion not in EXPANSIONS:
            raise ValueError(f"unknown expansion {config.expansion!r}; known: {', '.join(EXPANSIONS)}")
        self.gen, self.config = gen, config
        self._kinds = np.array([k == ANSWER for k in gen.docs.kinds], dtype=bool)
        self._dates = np.array([d or "" for d in gen.docs.created_at], dtype=object)
        # each row's category as a code into the distinct ones: a filter compares integers, not strings (1M rows:
        # about 1 ms against 40 ms for an array of strings, bench/tag_filter.py)
        self._cat_index, self._cat_codes = _coded(gen.docs.categories)
        self.knows_tags = gen.manifest.get("documents_made", 0) >= TAGS_SINCE
        self._families: OrderedDict[frozenset[str], int] = OrderedDict()  # threads_carrying_any's counts, kept
        self._families_lock = threading.Lock()  # GET /tags runs in the server's threads

    @property
    def thread_rows(self) -> dict[str, Sequence[int]]:
        """Each thread's rows in the generation (its question, then its comments in thread order), built once, when
        first asked for (a search that leaves a thread out, /search answers' similar threads). A generation holds
        each thread as consecutive rows from its question (``Documents.question_rows``), so these are ranges, made
        from the question rows alone: 0.018-0.025 s at 235k documents against 0.28-0.30 s for a pass over every row
        (bench/generation_switch.py, ``prepare_row_by_row_s``), which stays the fallback for rows laid out otherwise."""
        return self.thread_runs[0]

    @property
    def thread_answer_rows(self) -> dict[str, Sequence[int]]:
        """Each thread's comments' rows, in thread order (its rows after its question)."""
        return self.thread_runs[1]

    @cached_property
    def thread_runs(self) -> tuple[dict[str, Sequence[int]], dict[str, Sequence[int]]]:
        """Each thread's rows and its comments' rows, built together once per generation."""
        tids = self.gen.docs.thread_ids
        # ``Documents.thread_starts``, from the answer mask this retriever holds (not another pass over the kinds)
        starts = np.flatnonzero(~self._kinds).tolist()
        ends = starts[1:] + [len(tids)]
        rows = {tids[a]: range(a, b) for a, b in zip(starts, ends)}
        if (len(rows) == len(starts) and (not tids or starts and starts[0] == 0)
                and all(tids[b - 1] == tids[a] for a, b in zip(starts, ends))):
            return rows, {tid: r[1:] for tid, r in rows.items()}
        log.warning("generation %s: threads are not consecutive rows from their questions; grouping row by row",
                    self.gen.name)
        by_row: dict[str, list[int]] = {}
        for row, tid in enumerate(tids):
            by_row.setdefault(tid, []).append(row)
        return by_row, {tid: [i for i in r if self._kinds[i]] for tid, r in by_row.items()}

    def allowed_rows(self, target: str, filters: Filters | None) -> np.ndarray | None:
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
        mask = np.ones(len(self._kinds), dtype=bool)
        if target == "answers":
            mask &= self._kinds
        elif target == "questions":
            mask &= ~self._kinds
        if filters is not None:
            if filters.category:
                mask &= self._cat_codes == self._cat_index.get(filters.category, -1)
            if filters.tagged():
                if not self.knows_tags:
                    raise TagsNotIndexed(self.gen.name)
                index, codes = self._tags_coded
                held = np.ones(len(index), dtype=bool)  # the sets of tags a thread may carry
                if filters.tags:  # those that hold every tag asked
                    held[:] = False
                    held[reduce(np.intersect1d, [self._sets_with(t) for t in filters.tags])] = True
                for group in filters.alternatives():  # and at least one of each group of alternatives
                    either = np.zeros(len(index), dtype=bool)
                    for t in group:
                        either[self._sets_with(t)] = True
                    held &= either
                for t in filters.exclude_tags:  # and none of those left out
                    held[self._sets_with(t)] = False
                mask &= held[codes]
            if filters.since:
                mask &= (self._dates != "") & (self._dates >= filters.since)
            if filters.until:
                until = filters.until + ("\uffff" if len(filters.until) <= 10 else "")
                mask &= (self._dates != "") & (self._dates <= until)
            for tid in filters.exclude_threads:
                mask[self.thread_rows.get(tid, [])] = False
        if mask.all():
            return None
        return np.flatnonzero(mask)

    @cached_property
    def _tags_coded(self) -> tuple[dict, np.ndarray]:
        """Each row's tags as a code into the distinct sets of tags (a thread's rows share one; threads share many),
        and those sets' code of each: made once, by the service's ``SearchPipeline.prepare`` before it serves the
        generation, else at the first tag filter."""
        return _coded(self.gen.docs.tags)

    @cached_property
    def _sets_with_tag(self) -> dict[str, np.ndarray]:
        """Each tag, and the distinct sets of tags that hold it (their codes, ascending)."""
        sets: dict[str, list[int]] = {}
        for value, code in self._tags_coded[0].items():
            for tag in tags_of_value(value):
                sets.setdefault(tag, []).append(code)
        return {tag: np.array(codes, dtype=np.int32) for tag, codes in sets.items()}

    def _sets_with(self, tag: str) -> np.ndarray:
        return self._sets_with_tag.get(tag_key(tag), _NONE)

    @cached_property
    def _threads_per_set(self) -> np.ndarray:
        """How many of the generation's threads (question documents) carry each distinct set of tags, by its code."""
        index, codes = self._tags_coded
        return np.bincount(codes[~self._kinds], minlength=len(index))

    @cached_property
    def tag_counts(self) -> list[tuple[str, int]]:
        """Every tag the generation's threads carry, with how many threads carry it: most threads first, then by tag
        (what a forum's tag list, or a search page's suggestions, shows). Counted once per generation."""
        per_set = self._threads_per_set
        counts = [(tag, int(per_set[sets].sum())) for tag, sets in self._sets_with_tag.items()]
        return sorted(counts, key=lambda tc: (-tc[1], tc[0]))

    FAMILIES_KEPT = 4096  # the family counts a generation keeps, the least recently asked for dropped first

    def threads_carrying_any(self, tags: Sequence[str]) -> int:
        """How many of the generation's threads carry any of ``tags``, each thread once: for a tag's family (its
        target and the target's synonyms, ``TagSynonyms.family``), what a search within the tag filters to. Kept per
        set of tags: a generation's threads do not change, and a family changed by new synonyms is another set, so
        the count a GET /tags page lists again is read, not counted (2-5 ms per 50 tags at 200,000 threads,
        bench/tag_filter.py)."""
        key = frozenset(tags)
        with self._families_lock:
            if (kept := self._families.get(key)) is not None:
                self._families.move_to_end(key)
                return kept
        per_set = self._threads_per_set
        held = np.zeros(len(per_set), dtype=bool)  # the sets of tags holding any of them: each set once
        for t in tags:
            held[self._sets_with(t)] = True
        count = int(per_set[held].sum())
        with self._families_lock:
            self._families[key] = count
            if len(self._families) > self.FAMILIES_KEPT:
                self._families.popitem(last=False)
        return count

    @cached_property
    def _tags_by_name(self) -> tuple[list[str], np.ndarray]:
        """The tags in code-point order, and each one's place in ``tag_counts``."""
        counts = self.tag_counts
        order = sorted(range(len(counts)), key=lambda i: counts[i][0])
        return [counts[i][0] for i in order], np.array(order, dtype=np.int64)

    def prepare(self) -> "Retriever":
        """Build now what a tag filter, GET /tags and `cqa tags` read (``SearchPipeline.prepare``)."""
        self._tags_by_name
        return self

    def tags_beginning(self, prefix: str = "", limit: int | None = None) -> tuple[list[tuple[str, int]], int]:
        """The first ``limit`` of ``tag_counts``' tags that begin with ``prefix`` as a filter compares it (all of them
        without one), in its order, and how many begin so: what GET /tags and `cqa tags` list. The tags are found by
        bisection in code-point order, not by reading each (36k tags: bench/tag_filter.py). TagsNotIndexed on a
        generation built before tags."""
        if not self.knows_tags:
            raise TagsNotIndexed(self.gen.name)
        key, counts = tag_key(prefix), self.tag_counts
        if not key:
            return counts[:limit], len(counts)
        names, places = self._tags_by_name
        lo = bisect_left(names, key)
        hi = bisect_left(names, True, lo, key=lambda name: not name.startswith(key))  # the run that begins so
        return [counts[i] for i in np.sort(places[lo:hi])[:limit].tolist()], hi - lo

    def search(self, query: str, k: int = 10, target: str = "answers", filters: Filters | None = None,
               expansion: str | None = None, config: RetrieverConfig | None = None) -> Retrieval:
        """``config``: this search's sources and fusion instead of the retriever's (their sources in the generation)."""
        cfg = config or self.config
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        allowed = self.allowed_rows(target, filters)
        if allowed is not None and allowed.size == 0:
            return Retrieval([], timings_ms={"filter": _ms(t0)})
        timings["filter"] = _ms(t0)
        t0 = time.perf_counter()
        tokens = self.gen.analyzer(query)
        exp = EXPANSIONS[expansion or cfg.expansion](self.gen, tokens, allowed=allowed)
        timings["expand"] = _ms(t0)
        runs: dict[str, list[Hit]] = {}
        for name in cfg.sources:
            t0 = time.perf_counter()
            src = self.gen.sources[name]
            if name == "dense":
                runs[name] = src.search(query, cfg.depth, allowed)
            else:
                runs[name] = src.search_tokens(exp.weights if exp.weights else tokens, cfg.depth, allowed)
            timings[name] = _ms(t0)
        t0 = time.perf_counter()
        if len(runs) == 1:
            fused = next(iter(runs.values()))
        else:
            kw = {"weights": list(cfg.weights)} if cfg.weights else {}
            fused = FUSIONS[cfg.fusion](list(runs.values()), **kw)
        if target == "threads":
            fused = self._group_by_thread(fused)
        timings["fusion"] = _ms(t0)
        stages = {name: {h.doc_id: h.score for h in hits} for name, hits in runs.items()}
        return Retrieval(fused[:k], stages, exp, timings)

    def _group_by_thread(self, hits: list[Hit]) -> list[Hit]:
        """A thread scores as its best document (its question or any answer)."""
        best: dict[str, float] = {}
        for h in hits:
            tid = self.gen.docs.thread_ids[self.gen.row[h.doc_id]]
            if tid not in best:
                best[tid] = h.score
        return [Hit(f"t:{tid}", s) for tid, s in best.items()]


def _coded(values: Sequence) -> tuple[dict, np.ndarray]:
    """Each distinct value's code (in order of first appearance), and each value's code."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return index, np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))


def _ms(t0: float) -> float:
    return round(1000 * (time.perf_counter() - t0), 3)
