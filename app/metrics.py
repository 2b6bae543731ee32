"""Prometheus metrics: requests, errors, latency per endpoint and per ranking stage, index sizes."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("cqa_requests_total", "HTTP requests", ["method", "endpoint", "status"],
                                registry=self.registry)
        self.errors = Counter("cqa_errors_total", "HTTP responses with status >= 400", ["endpoint", "status"],
                              registry=self.registry)
        self.latency = Histogram("cqa_request_seconds", "request latency", ["endpoint"], buckets=BUCKETS,
                                 registry=self.registry)
        self.stage = Histogram("cqa_stage_seconds", "ranking stage latency", ["stage"], buckets=BUCKETS,
                               registry=self.registry)
        self.index_docs = Gauge("cqa_index_documents", "documents in the live index generation", ["index"],
                                registry=self.registry)
        self.generation = Gauge("cqa_generation_served", "1 for the index generation this process serves",
                                ["generation"], registry=self.registry)
        self.store_threads = Gauge("cqa_store_threads", "threads in the store", registry=self.registry)
        self.batch_size = Histogram("cqa_rerank_batch_size", "requests per reranker batch",
                                    buckets=(1, 2, 4, 8, 16, 32), registry=self.registry)
