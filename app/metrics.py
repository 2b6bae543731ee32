"""Prometheus metrics: requests, errors, latency per endpoint and per ranking stage, index sizes, the neural
models' score memos, and the process's own (memory, CPU, open files, garbage collection).

With `cqa serve --workers N` a scrape reaches whichever worker the kernel gives its connection, so each worker
answering with its own counts would make every counter jump between the workers' values at each scrape (a rate over
them is noise). There, the workers keep their counters, histograms and gauges in prometheus_client's multiprocess
files ($PROMETHEUS_MULTIPROC_DIR, which `cqa serve` sets to a folder of its own), and any worker's /metrics adds them
up over all of them, those of workers gone included for the counters (so they never go back). What is each process's
own (memory, CPU, the score memos, the garbage collector's pauses) each worker writes to that folder every few seconds
and at each of its scrapes (``Metrics.publish``), and a scrape lists every live worker's, labelled ``pid``."""
from __future__ import annotations

import bisect
import gc
import itertools
import logging
import os
import re
import time
from pathlib import Path
from typing import Callable

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

log = logging.getLogger(__name__)

SHARED_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own setting, read as it is imported
PUBLISH_S = 5.0  # how often a worker writes its own metrics for the others' scrapes
_OWN = re.compile(r"own-(\d+)\.prom")
_LIVE_GAUGE = re.compile(r"gauge_live\w+?_(\d+)\.db")


def shared_folder() -> Path | None:
    """Where the workers keep the metrics they add up ($PROMETHEUS_MULTIPROC_DIR), or None: one process."""
    value = os.environ.get(SHARED_ENV)
    return Path(value) if value else None

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.shared = shared_folder()
        self.registry = CollectorRegistry()  # what the workers add up (in the shared folder, when there is one)
        self.own = self.registry if self.shared is None else CollectorRegistry()  # each process's own
        ProcessCollector(registry=self.own)  # process_resident_memory_bytes, CPU seconds, open files (Linux)
        self.requests = Counter("cqa_requests_total", "HTTP requests", ["method", "endpoint", "status"],
                                registry=self.registry)
        self.errors = Counter("cqa_errors_total", "HTTP responses with status >= 400", ["endpoint", "status"],
                              registry=self.registry)
        self.latency = Histogram("cqa_request_seconds", "request latency", ["endpoint"], buckets=BUCKETS,
                                 registry=self.registry)
        self.stage = Histogram("cqa_stage_seconds", "ranking stage latency", ["stage"], buckets=BUCKETS,
                               registry=self.registry)
        # gauges, with several workers: the largest of the live workers' values, or each live worker's (``pid``)
        self.index_docs = Gauge("cqa_index_documents", "documents in the live index generation", ["index"],
                                registry=self.registry, multiprocess_mode="livemax")
        self.generation = Gauge("cqa_generation_served", "1 for the index generation this process serves (with "
                                "several workers, each one's, labelled pid)", ["generation"], registry=self.registry,
                                multiprocess_mode="liveall")
        self.store_threads = Gauge("cqa_store_threads", "threads in the store", registry=self.registry,
                                   multiprocess_mode="livemax")
        self.ranked = Counter("cqa_ranked_total", "requests ranked, by endpoint and the ranker that ran: an "
                              "endpoint's default, or $CQA_ARABIC_RANKER for Arabic input (/search: the target's "
                              "reranker; none when not reranked)", ["endpoint", "ranker"], registry=self.registry)
        self.batch_size = Histogram("cqa_rerank_batch_size", "requests per reranker batch",
                                    buckets=(1, 2, 4, 8, 16, 32), registry=self.registry)
        self.batch_wait = Histogram("cqa_rerank_batch_wait_seconds", "how long a request's scoring waited for its "
                                    "reranker batch's model call to begin: the batch gathered (CQA_BATCH_WAIT_MS) and "
                                    "the batch before it scored", buckets=BUCKETS, registry=self.registry)
        self.refreshes = Counter("cqa_refreshes_total", "automatic refreshes ($CQA_REFRESH_S) this process ran, by "
                                 "outcome: built, skipped (another process was building, or had built), failed",
                                 ["outcome"], registry=self.registry)
        self.refresh_pending_since = Gauge("cqa_refresh_pending_since_timestamp_seconds", "since when (unix time) "
                                           "this process has seen the store hold changes the live generation lacks; "
                                           "0: none (time() minus it: how far search is behind the store)",
                                           registry=self.registry, multiprocess_mode="livemax")
        self.encoded_ahead = Counter("cqa_encode_ahead_texts_total", "texts POST /threads put in the embedding cache "
                                     "before its write ($CQA_ENCODE_AHEAD_TEXTS), by outcome: encoded, cached (found "
                                     "there already), skipped (too many: left to the build), failed (the encoding "
                                     "raised: logged, and the build encodes them)",
                                     ["outcome"], registry=self.registry)
        self.refused = Counter("cqa_overloaded_total", "ranking requests refused at once with 503 overloaded: the "
                               "worker held CQA_MAX_IN_FLIGHT of them already", ["endpoint"], registry=self.registry)
        self.over_share = Counter("cqa_over_share_total", "ranking requests refused at once with 429 over_share: "
                                  "their client held its share of CQA_MAX_IN_FLIGHT while others were searching "
                                  "(CQA_FAIR_SHARE)", ["endpoint"], registry=self.registry)
        self.rate_limited = Counter("cqa_rate_limited_total", "ranking requests refused at once with 429 "
                                    "rate_limited: their client had sent more than CQA_RATE_LIMIT_PER_MIN (to all the "
                                    "workers together), its burst spent", ["endpoint"], registry=self.registry)
        self.feedback = Counter("cqa_feedback_judgements_total", "judgements of search results recorded (POST "
                                "/feedback), by whether the result helped", ["helpful"], registry=self.registry)
        self.interleaved = Counter("cqa_interleaved_total", "ranking answers whose order was a challenger's merged "
                                   "with the served ranker's (CQA_INTERLEAVE_*), by endpoint and challenger",
                                   ["endpoint", "challenger"], registry=self.registry)
        self.not_kept = Counter("cqa_feedback_not_kept_total", "ranking answers the feedback log did not keep because "
                                "their request said feedback=false", ["endpoint"], registry=self.registry)
        self.feedback_unrecorded = Counter("cqa_feedback_unrecorded_total", "searches answered without a search_id, "
                                           "and judgements refused with 503, because the feedback log could not be "
                                           "written", ["what"], registry=self.registry)
        self.queued = Histogram("cqa_ranking_queue_seconds", "how long a ranking request taken waited for one of "
                                "CQA_RUN_SLOTS before its work began", buckets=BUCKETS, registry=self.registry)
        self.in_flight = Gauge("cqa_ranking_in_flight", "ranking requests taken and not answered yet (with several "
                               "workers, all of theirs)", registry=self.registry, multiprocess_mode="livesum")
        self.memo_stats: Callable[[], dict[str, dict]] = dict
        self.own.register(_MemoCollector(lambda: self.memo_stats()))
        GC_PAUSES.install()
        self.own.register(_GCCollector())
        self._own_file = self.shared / f"own-{os.getpid()}.prom" if self.shared is not None else None

    def watch_memos(self, stats: Callable[[], dict[str, dict]]) -> None:
        """Export the score memos ``stats()`` reports (model -> ScoreMemo.stats()) at each scrape."""
        self.memo_stats = stats

    def exposition(self) -> tuple[bytes, str]:
        """GET /metrics' body and content type: this process's metrics, or with several workers, every worker's."""
        if self.shared is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client.multiprocess import MultiProcessCollector
        self.publish()
        self._forget_dead()
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(self.shared))
        registry.register(_WorkersOwn(self.shared))
        return generate_latest(registry), CONTENT_TYPE_LATEST

    def publish(self) -> None:
        """This worker's own metrics, written whole for any worker's scrape (``own-PID.prom``); nothing without a
        shared folder."""
        if self._own_file is None:
            return
        try:
            tmp = self._own_file.with_name(f".{self._own_file.name}.tmp")
            tmp.write_bytes(generate_latest(self.own))
            os.replace(tmp, self._own_file)
        except OSError as e:
            log.warning("could not write this worker's metrics to %s: %s", self._own_file, e)

    def retire(self) -> None:
        """A worker stopping: its live gauges and its own metrics leave the scrapes (its counters stay counted)."""
        if self.shared is None:
            return
        from prometheus_client.multiprocess import mark_process_dead
        mark_process_dead(os.getpid(), str(self.shared))
        self._own_file.unlink(missing_ok=True)

    def _forget_dead(self) -> None:
        """The files of workers that died without stopping (kill -9): their live gauges and own metrics removed, so
        a scrape does not report them as serving (their counters are kept: a total never goes back)."""
        from prometheus_client.multiprocess import mark_process_dead

        from .jobs import process_alive
        pids = {int(m.group(1)) for f in os.listdir(self.shared)
                if (m := _OWN.fullmatch(f) or _LIVE_GAUGE.fullmatch(f))}
        for pid in pids - {os.getpid()}:
            if not process_alive(pid):
                mark_process_dead(pid, str(self.shared))
                (self.shared / f"own-{pid}.prom").unlink(missing_ok=True)


class _WorkersOwn:
    """Every live worker's own metrics as it last wrote them (``Metrics.publish``), each sample labelled ``pid``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def collect(self):
        from prometheus_client.parser import text_string_to_metric_families
        merged: dict[str, Metric] = {}
        for path in sorted(self.folder.glob("own-*.prom")):
            pid = path.stem.split("-", 1)[1]
            try:
                text = path.read_text()
            except OSError:  # a worker stopping removed it
                continue
            for family in text_string_to_metric_families(text):
                into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    into.add_sample(sample.name, {**sample.labels, "pid": pid}, sample.value, sample.timestamp)
        yield from merged.values()


class _MemoCollector:
    def __init__(self, stats: Callable[[], dict[str, dict]]) -> None:
        self.stats = stats

    def collect(self):
        hits = CounterMetricFamily("cqa_score_memo_hits", "(question, answer) pairs scored from the memory of a "
                                   "neural model's recent scores, without a model call", labels=["model"])
        shared = CounterMetricFamily("cqa_score_memo_shared_hits", "(question, answer) pairs found in the score store "
                                     "the data folder's serving processes share, without a model call (for 'NAME "
                                     "vectors': texts found in the vector store)", labels=["model"])
        misses = CounterMetricFamily("cqa_score_memo_misses", "(question, answer) pairs a neural model scored",
                                     labels=["model"])
        pairs = GaugeMetricFamily("cqa_score_memo_pairs", "pairs a neural model's score memo holds (a model labelled "
                                  "'NAME vectors': an encoder's memo of text vectors, counted in texts)",
                                  labels=["model"])
        for model, st in self.stats().items():
            hits.add_metric([model], st["hits"])
            shared.add_metric([model], st.get("shared_hits", 0))
            misses.add_metric([model], st["misses"])
            pairs.add_metric([model], st["pairs"])
        yield from (hits, shared, misses, pairs)


class _GCPauses:
    """The time Python's cyclic garbage collector stopped this process, by generation (``gc.callbacks``: one callback
    for the process, however many services it runs, installed by the first). A collection of generation 2 walks every
    tracked object: with the models loaded that is the longest pause a request can meet (``$CQA_GC_FREEZE``).

    Plain counts, not a prometheus_client ``Histogram``: its locks, taken inside a collection that a scrape holding
    them set off, would deadlock the process."""

    def __init__(self) -> None:
        self.buckets = [[0] * (len(BUCKETS) + 1) for _ in range(3)]  # the last: over the largest bound
        self.seconds, self.longest = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]
        self._started = 0.0

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took, g = time.perf_counter() - self._started, info["generation"]
        self.buckets[g][bisect.bisect_left(BUCKETS, took)] += 1
        self.seconds[g] += took
        self.longest[g] = max(self.longest[g], took)


GC_PAUSES = _GCPauses()


class _GCCollector:
    def collect(self):
        pauses = HistogramMetricFamily("cqa_gc_pause_seconds", "how long each collection of Python's cyclic garbage "
                                       "collector stopped this process, by generation (2: every tracked object "
                                       "walked)", labels=["generation"])
        longest = GaugeMetricFamily("cqa_gc_longest_pause_seconds", "the longest of them since the process started",
                                    labels=["generation"])
        for g in range(3):
            counts = list(itertools.accumulate(GC_PAUSES.buckets[g]))
            pauses.add_metric([str(g)], [(str(le), c) for le, c in zip(BUCKETS, counts)] + [("+Inf", counts[-1])],
                              GC_PAUSES.seconds[g])
            longest.add_metric([str(g)], GC_PAUSES.longest[g])
        frozen = GaugeMetricFamily("cqa_gc_frozen_objects", "objects out of the collector's reach ($CQA_GC_FREEZE: "
                                   "those made while the models loaded)", value=gc.get_freeze_count())
        yield from (pauses, longest, frozen)
