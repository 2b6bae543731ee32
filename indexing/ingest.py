"""Ingest thread files into the store: parse each file whole, then upsert it in one transaction.

An export's ledger line (``indexing.ledger``: its store's erasures and takedowns) is taken into a store without threads
before the file's threads are written (``ThreadStore.take_ledger``), so a forum restored from an export by ingesting it
keeps what was erased or taken down out of later writes; into a store that holds threads it is reported, not taken.

Into a data folder a service already searches, each file's texts are first put in the embedding cache
(``before_write``, ``indexing.reindex.encode_ahead``), so the build that takes the file in need not encode it: a bulk
import's encoding then runs in the ingest, outside the build lock, and a forum's own new posts meanwhile stay seconds
from searchable instead of waiting for a build that encodes the whole import."""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .loaders import Format, LoadError, expand_paths, load
from .models import Thread
from .store import ThreadStore, UpsertResult

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    threads: int = 0
    answers: int = 0
    skipped: int = 0
    files: int = 0
    upsert: UpsertResult = field(default_factory=UpsertResult)
    errors: list[str] = field(default_factory=list)
    encoded_ahead: dict | None = None  # texts, encoded, seconds: summed over the files (None: not asked)
    ahead_failed: list[str] = field(default_factory=list)  # files written without encoding ahead, and why
    ledgers: list[dict] = field(default_factory=list)  # each file's ledger line: taken in or not, and why
    passed_over: Counter = field(default_factory=Counter)  # records or files that hold no thread, by kind

    def add_ahead(self, done: dict) -> None:
        self.encoded_ahead = {k: round(done[k] + (self.encoded_ahead or {}).get(k, 0), 3)
                              for k in ("texts", "encoded", "seconds")}

    def as_dict(self) -> dict:
        return {"threads": self.threads, "answers": self.answers, "skipped": self.skipped,
                "files": self.files, "inserted": self.upsert.inserted, "updated": self.upsert.updated,
                "unchanged": self.upsert.unchanged,
                **({"superseded": len(self.upsert.superseded)} if self.upsert.superseded else {}),
                **self.upsert.erased(),
                **({"encoded_ahead": self.encoded_ahead} if self.encoded_ahead is not None else {}),
                **({"encode_ahead_failed": self.ahead_failed} if self.ahead_failed else {}),
                **({"ledgers": self.ledgers} if self.ledgers else {}),
                **({"passed_over": dict(self.passed_over)} if self.passed_over else {})}


def ingest_paths(store: ThreadStore, paths: list[Path], fmt: Format | None = None,
                 strict: bool = False, progress: bool = True,
                 before_write: Callable[[list[Thread]], dict] | None = None) -> IngestReport:
    """Load every file (folders are searched) and upsert its threads; ``before_write(threads)``, when given, runs
    on each file's threads before its write (``encode_ahead``: returns its texts, encoded and seconds). It is a cache:
    when it fails the file is written all the same, and the failure logged and listed in ``ahead_failed``.

    In strict mode the first malformed record raises ``LoadError`` and that file writes nothing;
    otherwise malformed records are skipped, counted and logged.
    """
    report = IngestReport()
    files = expand_paths(paths)
    bar = tqdm(total=len(files), unit="file", desc="ingest", disable=not progress)
    for f in files:
        bar.set_postfix_str(f.name[-40:])
        result = load(f, fmt, strict=strict)
        if result.passed_over:
            log.info("%s: passed over, holding no thread: %s", f.name, result.passed_over)
            report.passed_over.update(result.passed_over)
        if result.ledger is not None:  # an export's: before its threads, which it then applies to
            taken = store.take_ledger(result.ledger)
            report.ledgers.append({"file": f.name, **taken.summary()})
            if not taken.taken:
                log.warning("%s: its ledger (%d erasures, %d takedowns) is not taken: %s", f.name,
                            len(result.ledger.erasures), len(result.ledger.takedowns), taken.reason)
            elif taken.erasures_not_carried:
                log.warning("%s: %d of its ledger's erasures are not carried: %s", f.name, taken.erasures_not_carried,
                            taken.reason)
        if before_write is not None and result.threads:
            try:
                report.add_ahead(before_write(store.admitted(result.threads)))  # nothing of an erased user's
            except Exception as e:  # noqa: BLE001 - a cache only: the build encodes what is missing; write on
                log.warning("%s: encoding ahead failed, the build will encode its texts: %s", f.name, e)
                report.ahead_failed.append(f"{f.name}: {type(e).__name__}: {e}")
        written = store.upsert(result.threads)
        if written.superseded:
            some = ", ".join(written.superseded[:5]) + ("..." if len(written.superseded) > 5 else "")
            log.info("%s: %d threads left as stored, which holds a later revision of each (%s)", f.name,
                     len(written.superseded), some)
        if written.erased():
            log.info("%s: the ledger left out what was taken down, or what erased users wrote: %s", f.name,
                     written.erased())
        report.upsert.add(written)
        report.files += 1
        report.threads += len(result.threads)
        report.answers += result.answers
        report.skipped += len(result.errors)
        for e in result.errors:
            log.warning("skipped: %s", e)
            report.errors.append(str(e))
        bar.update(1)
    bar.close()
    return report


__all__ = ["IngestReport", "LoadError", "ingest_paths"]
