"""The service's settings: everything the indexing and ranking rooms read, and where it listens, who may
administer it, request limits and micro-batching."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from ranking.settings import RankingSettings

from .access import LogFormat


class Settings(RankingSettings):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_token: str | None = Field(None, description="Bearer token for admin endpoints; unset = disabled.")
    max_request_bytes: int = Field(1_000_000, ge=1024, description="Larger request bodies get 413.")
    max_import_bytes: int = Field(2 * 1024**3, ge=1024, description="The largest file POST /imports takes (it is "
                                  "written to the data folder as it comes, never held in memory); larger gets 413.")
    backup_dir: Path | None = Field(None, description="Where POST /backups writes its copies of the store and its "
                                    "exports, and GET /backups lists them (default: backups/ in the data folder).")
    backup_keep: int = Field(0, ge=0, le=10_000, description="After each POST /backups, keep only this many of the "
                             "newest backups of its kind in the backups folder, deleting older ones (0: keep all).")
    erase_backups: Literal["rewrite", "keep"] = Field(
        "rewrite", description="What an erasure (cqa erase, POST /erasures) does to the backups in the backups folder "
        "that began before it: rewrite: each is written again without what it erased (a store backup also gains the "
        "erasure ledger), under its own name; keep: they are named and left as they are, until rotated out.")
    max_text_chars: int = Field(20_000, ge=100, description="Longest question, answer or candidate text.")
    max_candidates: int = Field(200, ge=1, description="Most candidates one /rerank request may send.")
    max_threads_per_request: int = Field(1000, ge=1, description="Most threads one POST /threads may send.")
    max_thread_comments: int = Field(1000, ge=1, description="Most comments of a stored thread GET /threads/{id}/answers "
                                     "ranks (a longer one gets 422); POST /rerank stays at max_candidates, since there a "
                                     "client decides the size, here the store.")
    max_in_flight: int = Field(32, ge=0, le=100_000, description="Ranking requests (POST /search, the /rerank "
                               "endpoints, GET /threads/{id}/answers and /similar) one worker takes at once, those "
                               "waiting for a model included; past it a new one gets 503 `overloaded` with "
                               "Retry-After at once, instead of a wait that grows with the queue (with CQA_FAIR_SHARE, "
                               "a client holding none still takes one of a few spare places). 0: no bound.")
    fair_share: bool = Field(True, description="Once a worker holds an eighth of CQA_MAX_IN_FLIGHT, a client (its address; "
                             "an IPv6 one's /64; or the user CQA_CLIENT_HEADER names) that holds its share already (the limit divided by the clients that "
                             "sent a ranking request in the last 10 s) gets 429 `over_share` with Retry-After "
                             "for its next one: one client sending many at once (a scraper, a runaway script) cannot "
                             "fill the worker and get everyone else 503. A client alone may still take the whole limit; "
                             "a client holding none when it is full takes one of a few spare places past it (an eighth "
                             "of the limit), so a newcomer is not refused because one client filled it. "
                             "Behind a proxy, name it in CQA_FORWARDED_ALLOW_IPS so each user counts as one client.")
    over_share_delay_ms: float = Field(500, ge=0, le=10_000, description="How long a request refused 429 "
                                       "`over_share` or `rate_limited` waits before its answer (no CPU is spent meanwhile, and it holds "
                                       "no place in the bound): a client that sends again as soon as it is refused "
                                       "(a runaway script, a scraper's retry loop) is slowed to this pace instead of "
                                       "spending the worker's time on refusals. 503 `overloaded` stays immediate, so "
                                       "a client can try another replica at once. 0: at once.")
    rate_limit_per_min: int = Field(0, ge=0, le=1_000_000, description="Ranking requests one client (as the fair "
                                    "share counts it: its address, an IPv6 one's /64, or the user CQA_CLIENT_HEADER "
                                    "names) may send a minute, on average, to all the workers of the data folder "
                                    "together; past it, and past its burst, a request gets 429 `rate_limited` with "
                                    "Retry-After (the seconds until it may send one more), nothing of it done. Bounds "
                                    "what a scraper walking the forum one search at a time takes, which the fair share "
                                    "(what it holds at once) does not. The workers count it in one file "
                                    "(CQA_RATE_LIMIT_STORE). 0: no limit (the default: a forum's backend calling for "
                                    "all its users from one address would be one client, unless it names them).")
    rate_limit_burst: int = Field(0, ge=0, le=1_000_000, description="How many ranking requests a client may send at "
                                  "once above CQA_RATE_LIMIT_PER_MIN (its bucket). 0: ten seconds' worth of the rate, "
                                  "at least 1.")
    rate_limit_store: Path | None = Field(None, description="The file the workers count each client's rate in "
                                          "(default: rate-limits.sqlite3 in the data folder's cache/), shared by every "
                                          "server of the data folder, so a client is held to one rate whichever worker "
                                          "its connections reach. State that may be lost: deleting it gives every "
                                          "client a full burst again.")
    feedback: bool = Field(True, description="Keep each served search (POST /search, GET /threads/{id}/similar) in the "
                           "feedback log under an id (`search_id` in its response), so its users can judge its results "
                           "(POST /feedback; the search page's Helpful? buttons) and GET /evaluation/feedback and `cqa "
                           "evaluate --feedback` report MAP on the forum's own traffic. The log keeps ids, ranks and "
                           "judgements, no query text and no client (unless CQA_FEEDBACK_QUERIES). false: no search_id, "
                           "and POST /feedback gets 404.")
    feedback_queries: bool = Field(False, description="Keep each logged search's request too (its question's subject "
                                   "and body, filters, k and target), so that `cqa evaluate --feedback --ranker NAME` "
                                   "can search the judged searches again with another ranker and score it by the "
                                   "forum's own judgements before it serves anyone. The text is what a user typed, so "
                                   "it is off by default, and a text is kept for CQA_FEEDBACK_QUERY_DAYS only.")
    feedback_query_days: float = Field(30.0, gt=0, le=36_500, description="How long a logged search's request "
                                       "(CQA_FEEDBACK_QUERIES) is kept, judged or not (days); past it a judged search "
                                       "keeps its ids and judgements, and is no longer searched again. Requests "
                                       "already kept expire so even once CQA_FEEDBACK_QUERIES is off: read as gone "
                                       "at once, dropped by each worker's sweep within a minute whether or not anyone "
                                       "searches, and left out by a restore. An erasure or a takedown drops the "
                                       "requests that carry what it removed.")
    feedback_days: float = Field(30.0, gt=0, le=36_500, description="How long a search nobody judged is kept and may "
                                 "be judged (days); a judged one is kept.")
    feedback_store: Path | None = Field(None, description="The feedback log's file (default: feedback.sqlite3 in the "
                                        "data folder), shared by every worker of the data folder. Accepted judgements "
                                        "are synced to it before the answer.")
    run_slots: int = Field(2, ge=0, le=1024, description="Ranking requests one worker works on at once; the others "
                           "it has taken wait, and a freed slot goes to one whose client has the fewest running, the "
                           "clients taking turns, so a user's search waits for one slot, not behind every search a "
                           "busier client sent before it. 0: no queue, every request taken runs at once (as before "
                           "round 57).")
    run_slots_alone: int = Field(0, ge=0, le=100_000, description="How many ranking requests a client alone in a "
                                 "worker (no other seen in the last 10 s) may run at once, past CQA_RUN_SLOTS. A user "
                                 "who then arrives runs at once beside them (not after them), so the fewer they are, "
                                 "the sooner that user is answered: beside a lone client's burst of 32, 296-301 ms "
                                 "p50 with 8 against 1,065-1,104 ms unbounded; but one client sending 1.5x what the "
                                 "worker can answer got 0.90x as many answered with 8 or 16 (docs/BENCHMARKS.md, "
                                 "\"Round 58\"). 0: no bound, the default (a forum's backend that calls for all its "
                                 "users from one address is such a client). A public forum with crawlers and few "
                                 "users at a time: 8.")
    forwarded_allow_ips: str | None = Field(None, description="The proxies (comma-separated addresses or networks, * "
                                            "for any) whose X-Forwarded-For and X-Forwarded-Proto the service believes, "
                                            "and CQA_CLIENT_HEADER: the client they name is the one the access log "
                                            "writes and the fair share and the run queue count. Unset: uvicorn's "
                                            "default, 127.0.0.1,::1 (a proxy on the same host), or $FORWARDED_ALLOW_IPS. "
                                            "A proxy not named counts as one client for all its users.")
    client_header: str | None = Field(None, description="A request header (e.g. X-Forum-User) naming the user a "
                                      "request is for, believed from the proxies of CQA_FORWARDED_ALLOW_IPS only: the "
                                      "fair share and the run queue count that user as the client, not the address. "
                                      "For a forum's backend or proxy that calls for all its users from one address "
                                      "(its session or user id, any string; kept as a digest). Unset: the address.")
    batch_max: int = Field(16, ge=1, le=256, description="Most rerank requests scored in one model call.")
    batch_wait_ms: float = Field(5.0, ge=0, le=1000, description="How long a rerank batch waits to fill.")
    workers: int = Field(1, ge=1, le=64, description="Serving processes of `cqa serve` sharing the port; each "
                         "loads its own models and follows the `current` generation.")
    generation_poll_s: float = Field(2.0, gt=0, le=3600, description="How often the service checks the "
                                     "`current` pointer and goes live on a generation another process published.")
    refresh_s: float = Field(60.0, ge=0, le=86400, description="Automatic refresh: when a thread was added, changed "
                             "or deleted since the live generation was built, the service builds a new one by itself "
                             "(a `cqa reindex --if-stale` in a child process at lower CPU priority) and goes live on "
                             "it; at once if its last build ended at least this many seconds ago, else when they have "
                             "passed, so a store written to all the time is rebuilt at most once per this interval "
                             "plus a build. 0: off (only POST /reindex or `cqa reindex` build). While builds are "
                             "cheap the wait is shorter: see refresh_duty.")
    refresh_duty: float = Field(0.2, ge=0, le=1, description="The largest share of the time the automatic refresh "
                                "spends building: after a build that took B seconds the next starts B * (1 / duty - "
                                "1) seconds after it ended (B * 4 at 0.2), at most refresh_s; so a change written "
                                "during or right after a build waits seconds where builds are quick, and a large "
                                "forum's builds still leave the CPU to searches. 0: always refresh_s.")
    gc_freeze: bool = Field(True, description="Once the models are loaded, move every object the service has made "
                            "so far out of reach of Python's cyclic garbage collector (gc.freeze): they live as long "
                            "as the process, and a full collection would otherwise walk them all, stopping every "
                            "request meanwhile. GET /metrics: cqa_gc_pause_seconds.")
    warm_up: bool = Field(True, description="At the start, before the service takes its first request, run one "
                          "request of each kind (a search of each target, each rerank endpoint) through its rankers, "
                          "so that no user's request pays for what a first one sets up: the dense index's encoder "
                          "loaded, each network's first pass (GET /ready: warm_up_ms). Nothing it scores is kept.")
    load_switch_interval_ms: float = Field(0.5, ge=0, le=100, description="While the service loads a generation "
                                           "beside the one it serves, how long Python lets one thread hold its lock "
                                           "while another waits (sys.setswitchinterval; Python's default is 5 ms): a "
                                           "search's model runs many short steps that each give the lock up, and each "
                                           "waited up to that long for the loading thread to hand it back. 0: "
                                           "Python's setting as it is.")
    refresh_prestart: bool = Field(True, description="Keep the automatic refresh's next build process started, at "
                                   "its CPU priority, its imports done, waiting to be told to build: a change then "
                                   "does not wait for Python to start and import the build's libraries (about 0.5 s "
                                   "on 2 cores). GET /ready: refresh.spare_pid.")
    refresh_nice: int = Field(10, ge=0, le=19, description="How much lower the automatic refresh's CPU priority is "
                              "than the service's (a Unix nice increment), so searches come first on a small machine.")
    refresh_translation_later: bool = Field(True, description="The automatic refresh's build, when a comment was "
                                            "added, changed or removed, goes live before it trains the translation "
                                            "table again (`cqa reindex --translation-later`), then publishes a second "
                                            "generation with it: the default search reads no translation table, so "
                                            "the comment is searchable seconds sooner; `expand: translation` meanwhile "
                                            "expands with the previous table. false: one generation, after training.")
    encode_ahead_texts: int = Field(32, ge=0, le=10_000, description="POST /threads encodes up to this many texts "
                                    "(each question and comment for the dense index, each comment also for the answer "
                                    "encoder) itself, before its write, into the "
                                    "embedding cache, so the build that indexes them loads no model: a new thread or "
                                    "answer is searchable seconds sooner. A request with more leaves them to the "
                                    "build, so a large import does not hold the encoder searches use. 0: off.")

    log_format: LogFormat = Field("text", description="How every log line of the service and the "
                                                "commands is written: text (time, level, logger, [request id], "
                                                "message), or json: one object per line (time, level, logger, "
                                                "message, request_id, and an access line's client, method, path, "
                                                "status, ms), for a log shipper.")
    access_log: bool = Field(True, description="One line per request, written when its response has ended, on "
                             "standard output: client, method, path (with its query), status, milliseconds and the "
                             "request id (logger cqa.access). Every other line goes to standard error.")
    cors_origins: Annotated[list[str], NoDecode] = Field(
        [], description="The web origins (scheme://host[:port]) whose pages may call the API from a browser, e.g. the "
        "forum's own site showing similar questions as its users type: comma-separated (or a JSON list), e.g. "
        "https://forum.example.org,https://m.forum.example.org, or * for any origin. Empty: no cross-origin headers, "
        "so browsers keep other sites' pages out. Never send the admin token from a browser.")

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins_listed(cls, value):
        """The environment's text as a list: a JSON list, or origins separated by commas."""
        if isinstance(value, str):
            import json
            text = value.strip()
            try:
                value = json.loads(text) if text.startswith("[") else [o.strip() for o in text.split(",") if o.strip()]
            except json.JSONDecodeError as e:
                raise ValueError(f"not a JSON list of origins: {e}") from None
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        import re
        for o in origins:
            if o != "*" and not re.fullmatch(r"https?://[^/\s?#]+", o):
                raise ValueError(f"{o!r} is not a web origin: scheme://host[:port], with no path or trailing slash "
                                 "(e.g. https://forum.example.org), or \"*\"")
        return origins

    @field_validator("client_header")
    @classmethod
    def _header_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        import re
        value = value.strip()
        if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", value):
            raise ValueError(f"{value!r} is not a header name (letters, digits and -, e.g. X-Forum-User)")
        if value.lower() in ("x-forwarded-for", "x-forwarded-proto", "host", "authorization", "cookie"):
            raise ValueError(f"{value!r} carries something else; name a header of its own, e.g. X-Forum-User")
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxies(cls, value: str | None) -> str | None:
        """Each entry an address, a network or *: uvicorn would take a mistyped one as a name no proxy has, and the
        proxy's users would silently count as one client."""
        if value is None:
            return None
        import ipaddress
        entries = [e.strip() for e in value.split(",") if e.strip()]
        if not entries:
            raise ValueError("no proxy named: give addresses or networks separated by commas, or * for any")
        for e in entries:
            if e == "*":
                continue
            try:
                ipaddress.ip_network(e, strict=False) if "/" in e else ipaddress.ip_address(e)
            except ValueError:
                raise ValueError(f"{e!r} is neither an IP address nor a network (e.g. 10.0.0.5, 10.0.0.0/8, "
                                 "fd00::/8), nor *") from None
        return ",".join(entries)

    @property
    def rate_limit_file(self) -> Path:
        return self.rate_limit_store or self.cache_dir / "rate-limits.sqlite3"

    @property
    def feedback_file(self) -> Path:
        return self.feedback_store or self.data_dir / "feedback.sqlite3"

    @property
    def backups_folder(self) -> Path:
        return self.backup_dir or self.data_dir / "backups"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
