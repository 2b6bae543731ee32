"""Ingest thread files into the store: parse each file whole, then upsert it in one transaction."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .loaders import Format, LoadError, expand_paths, load
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

    def as_dict(self) -> dict:
        return {"threads": self.threads, "answers": self.answers, "skipped": self.skipped,
                "files": self.files, "inserted": self.upsert.inserted, "updated": self.upsert.updated,
                "unchanged": self.upsert.unchanged}


def ingest_paths(store: ThreadStore, paths: list[Path], fmt: Format | None = None,
                 strict: bool = False, progress: bool = True) -> IngestReport:
    """Load every file (folders are searched) and upsert its threads.

    In strict mode the first malformed record raises ``LoadError`` and that file writes nothing;
    otherwise malformed records are skipped, counted and logged.
    """
    report = IngestReport()
    files = expand_paths(paths)
    bar = tqdm(total=len(files), unit="file", desc="ingest", disable=not progress)
    for f in files:
        bar.set_postfix_str(f.name[-40:])
        result = load(f, fmt, strict=strict)
        report.upsert.add(store.upsert(result.threads))
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
