"""Ingest thread files into the store. A JSONL file or a StackExchange dump (staged on disk as it is parsed,
``indexing.stackexchange``) is read as a stream and written in one transaction per batch of its threads, so its size
is not bounded by memory; a SemEval file is parsed whole and written in one. A file that cannot be read writes nothing;
a batch the store refuses stops the file, the batches before it written, each thread whole.

An export's ledger line (``indexing.ledger``: its store's erasures and takedowns) is taken into a store without threads
before the file's threads are written (``ThreadStore.take_ledger``), so a forum restored from an export by ingesting it
keeps what was erased or taken down out of later writes; into a store that holds threads it is reported, not taken.

A mirror (``cqa ingest --mirror``: a forum re-imported from each new data dump of its site) also removes what the site
removed: each thread stored before the ingest that none of the files holds, unless it was posted after the newest post
the files hold (the forum's own since the dump was made). A thread the files hold keeps the stored comments posted after
that (the forum's own on the site's threads), after the file's own. It removes nothing when a record was skipped (the
thread it would have made may be one of them), when the files hold no thread, or when it would remove more than its
limit (``RemovalLimit``: a dump of the wrong site, or a truncated one, is not a reason to empty a forum).
Its files are all read through (and checked) before any of them is written, so the newest post is all of theirs.

Into a data folder a service already searches, each file's texts are first put in the embedding cache
(``before_write``, ``indexing.reindex.encode_ahead``), so the build that takes the file in need not encode it: a bulk
import's encoding then runs in the ingest, outside the build lock, and a forum's own new posts meanwhile stay seconds
from searchable instead of waiting for a build that encodes the whole import."""
from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from tqdm import tqdm

from .loaders import Format, LoadError, LoadResult, expand_paths, load
from .models import Answer, Thread, moment, newest_post
from .store import StoreError, TagSynonymConflict, ThreadStore, UpsertResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemovalLimit:
    """The most stored threads a mirror may remove: a count, or a share of the threads stored before it."""
    count: int | None = None
    share: float | None = None

    @classmethod
    def parse(cls, text: str) -> "RemovalLimit":
        """``25`` (threads) or ``10%`` (of those stored); ValueError saying what is expected otherwise."""
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*", text)
        if m is None or (not m[2] and "." in m[1]):
            raise ValueError(f"{text!r} is neither a count of threads (25) nor a share of those stored (10%)")
        if m[2]:
            share = float(m[1]) / 100
            if share > 1:
                raise ValueError(f"{text!r}: a share is at most 100%")
            return cls(share=share)
        return cls(count=int(m[1]))

    def allows(self, removed: int, stored: int) -> bool:
        return removed <= (self.count if self.count is not None else (self.share or 0.0) * stored)

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{100 * (self.share or 0.0):g}%"


DEFAULT_REMOVAL_LIMIT = RemovalLimit(share=0.10)


@dataclass
class Mirrored:
    """What a mirror removed, or why it removed nothing (``refused``): the stored threads none of the files holds,
    less those posted after the newest post the files hold (``kept_newer``)."""
    removed: list[str] = field(default_factory=list)
    absent: int = 0  # stored before the ingest, held by none of the files
    kept_newer: int = 0  # of those, posted after ``newest``: kept
    newest: str | None = None  # the newest post (question or comment) the files hold, ISO 8601
    limit: str = ""
    refused: str | None = None

    def summary(self) -> dict:
        return {"removed": len(self.removed), "absent": self.absent, "kept_newer": self.kept_newer,
                "newest_post": self.newest, "limit": self.limit, **({"refused": self.refused} if self.refused else {})}


class _Seen:
    """The thread ids a mirror's files hold, the newest post among them all, and the stored comments posted after it
    (read once, before any of the files is written)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.newest: datetime | None = None
        self.newer: dict[str, list[Answer]] = {}

    def horizon(self, store: ThreadStore, newest: datetime | None) -> None:
        """The files' newest post, known before any of their threads is written."""
        self.newest = newest
        self.newer = store.answers_after(newest) if newest is not None else {}


def _with_newer_comments(threads: list[Thread], newer: dict[str, list[Answer]],
                         report: "IngestReport") -> list[Thread]:
    """``threads`` with the stored comments each lacks of ``newer`` (``ThreadStore.answers_after`` the files' newest
    post), after its own: a mirror replaces a stored thread with the dump's, and the comments the forum got since the
    dump was made are not in it."""
    if not newer:
        return threads
    out = []
    for t in threads:
        if (kept := newer.get(t.id)) and (extra := [a for a in kept if a.id not in {b.id for b in t.answers}]):
            t = t.model_copy(update={"answers": [*t.answers, *extra]})
            report.comments_kept_newer += len(extra)
        out.append(t)
    return out


def _mirror(store: ThreadStore, before: dict[str, str | None], seen: _Seen, skipped: int,
            limit: RemovalLimit, dry_run: bool = False) -> Mirrored:
    """Remove what ``before`` (stored ids and their dates, read before the ingest) holds and ``seen`` does not,
    unless posted after ``seen.newest``; or nothing, with the reason."""
    out = Mirrored(newest=seen.newest.isoformat() if seen.newest else None, limit=str(limit))
    absent = [tid for tid in before if tid not in seen.ids]
    out.absent = len(absent)
    newer = {tid for tid in absent if seen.newest is not None and (when := moment(before[tid])) is not None
             and when > seen.newest}
    out.kept_newer = len(newer)
    doomed = [tid for tid in absent if tid not in newer]
    if skipped:
        out.refused = (f"{skipped} records were skipped, and a thread any of them would have made is held by no file: "
                       "nothing removed; fix them (or run with --strict to stop at the first), then run again")
    elif not seen.ids:
        out.refused = "the files hold no thread: nothing removed"
    elif not limit.allows(len(doomed), len(before)):
        out.refused = (f"it would remove {len(doomed)} of the {len(before)} threads stored, more than the limit "
                       f"({limit}): nothing removed; if the files are the whole forum, run again with a higher "
                       "--max-remove")
    if out.refused is None and doomed:
        out.removed = store.remove(doomed, dry_run=dry_run)
    return out


@dataclass(frozen=True)
class IngestProgress:
    """Where an ingest is, told after each batch it writes (and each file it ends): ``file`` (its name), the
    ``files_done`` of ``files``, the ``share`` of this file read (0 to 1; a SemEval file, read whole, goes from 0 to 1
    at once) and the ``threads`` written so far, all files together."""
    file: str
    files_done: int
    files: int
    share: float
    threads: int

    @property
    def overall(self) -> float:
        """The share of the whole ingest done, each file counting alike."""
        return min((self.files_done + self.share) / max(self.files, 1), 1.0)

    def as_dict(self) -> dict:
        return {**asdict(self), "share": round(self.share, 4), "overall": round(self.overall, 4)}


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
    tag_synonyms: list[dict] = field(default_factory=list)  # each file's tag synonyms line: taken, or refused and why
    passed_over: Counter = field(default_factory=Counter)  # records or files that hold no thread, by kind
    dry_run: bool = False  # what it says would have been written and removed; nothing was
    mirror: Mirrored | None = None  # with ``mirror``: what it removed, or why nothing
    comments_kept_newer: int = 0  # with ``mirror``: the forum's own comments since the dump, kept in their threads

    def add_ahead(self, done: dict) -> None:
        self.encoded_ahead = {k: round(done[k] + (self.encoded_ahead or {}).get(k, 0), 3)
                              for k in ("texts", "encoded", "seconds")}

    def as_dict(self) -> dict:
        return {**({"dry_run": True} if self.dry_run else {}),
                "threads": self.threads, "answers": self.answers, "skipped": self.skipped,
                "files": self.files, "inserted": self.upsert.inserted, "updated": self.upsert.updated,
                "unchanged": self.upsert.unchanged,
                **({"superseded": len(self.upsert.superseded)} if self.upsert.superseded else {}),
                **self.upsert.erased(),
                **({"encoded_ahead": self.encoded_ahead} if self.encoded_ahead is not None else {}),
                **({"encode_ahead_failed": self.ahead_failed} if self.ahead_failed else {}),
                **({"ledgers": self.ledgers} if self.ledgers else {}),
                **({"tag_synonyms": self.tag_synonyms} if self.tag_synonyms else {}),
                **({"passed_over": dict(self.passed_over)} if self.passed_over else {}),
                **({"mirror": {**self.mirror.summary(), "comments_kept_newer": self.comments_kept_newer}}
                   if self.mirror is not None else {})}


def take_synonyms(store: ThreadStore, synonyms: dict[str, str]) -> dict:
    """An export's tag synonyms set in ``store``: those it holds already counted, and one the store refuses (its
    target is a synonym there, or its source has synonyms there: ``TagSynonymConflict``) left out, with why; the
    others taken. What was taken, held already and refused."""
    have = store.tag_synonyms()
    taken, held, refused = 0, 0, {}
    for source, target in sorted(synonyms.items()):
        if have.get(source) == target:
            held += 1
            continue
        try:
            store.set_tag_synonym(source, target)
            taken += 1
        except (TagSynonymConflict, ValueError) as e:
            refused[source] = str(e)
    if refused:
        log.warning("tag synonyms not taken, the store holding others that conflict: %s", refused)
    return {"taken": taken, "held": held, **({"refused": refused} if refused else {})}


def _write(store: ThreadStore, name: str, threads: list[Thread], report: IngestReport,
           before_write: Callable[[list[Thread]], dict] | None, seen: _Seen | None, dry_run: bool) -> None:
    """One file's threads (or one batch of a streamed file's) encoded ahead, written, and counted in ``report``;
    with ``seen`` (a mirror), their ids kept and the forum's newer comments kept in them."""
    if before_write is not None and threads and not dry_run:
        try:
            report.add_ahead(before_write(store.admitted(threads)))  # nothing of an erased user's
        except Exception as e:  # noqa: BLE001 - a cache only: the build encodes what is missing; write on
            log.warning("%s: encoding ahead failed, the build will encode its texts: %s", name, e)
            report.ahead_failed.append(f"{name}: {type(e).__name__}: {e}")
    answers = sum(len(t.answers) for t in threads)  # the file's own, not the forum's kept beside them
    if seen is not None:
        seen.ids.update(t.id for t in threads)
        threads = _with_newer_comments(threads, seen.newer, report)  # the forum's own comments since the dump stay
    written = store.upsert(threads, dry_run=dry_run)
    report.threads += len(threads)
    report.answers += answers
    if written.superseded:
        some = ", ".join(written.superseded[:5]) + ("..." if len(written.superseded) > 5 else "")
        log.info("%s: %d threads left as stored, which holds a later revision of each (%s)", name,
                 len(written.superseded), some)
    if written.erased():
        log.info("%s: the ledger left out what was taken down, or what erased users wrote: %s", name,
                 written.erased())
    report.upsert.add(written)


def ingest_paths(store: ThreadStore, paths: list[Path], fmt: Format | None = None,
                 strict: bool = False, progress: bool = True,
                 before_write: Callable[[list[Thread]], dict] | None = None,
                 mirror: RemovalLimit | None = None, dry_run: bool = False,
                 on_progress: Callable[[IngestProgress], None] | None = None) -> IngestReport:
    """Load every file (folders are searched) and upsert its threads; with ``mirror``, then remove the stored
    threads none of them holds (see the module's notes; ``report.mirror`` says what, or why nothing). With
    ``dry_run``, each write is rolled back: the report says what would have been written and removed, each file's
    against the store as it is (an export's ledger line is not taken, nor ``before_write`` run).
    ``before_write(threads)``, when given, runs
    on each file's threads before its write (``encode_ahead``: returns its texts, encoded and seconds). It is a cache:
    when it fails the file is written all the same, and the failure logged and listed in ``ahead_failed``.
    ``on_progress``, when given, is told where the ingest is after each batch written and each file ended
    (``IngestProgress``); ``progress`` shows the same as a bar on standard error.

    In strict mode the first malformed record raises ``LoadError`` and that file writes nothing;
    otherwise malformed records are skipped, counted and logged.
    """
    report = IngestReport(dry_run=dry_run)
    files = expand_paths(paths)
    before = store.dated_ids() if mirror is not None else {}  # what a mirror may remove: not what comes meanwhile
    seen = _Seen()

    bar = tqdm(total=len(files), unit="file", desc="ingest", disable=not progress,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")

    def advanced(f: Path, done: int, share: float) -> None:  # the bar, and whoever asked, told where the ingest is
        bar.n = done + share
        bar.refresh()
        if on_progress is not None:
            on_progress(IngestProgress(f.name, done, len(files), share, report.threads))

    def loaded(f: Path) -> LoadResult:  # JSONL and a StackExchange dump in batches, SemEval XML whole
        bar.set_postfix_str(f"{f.name[-40:]}: reading")
        return load(f, fmt, strict=strict, stream=True, dated=mirror is not None)
    if mirror is None:
        results: Iterable[tuple[Path, LoadResult]] = ((f, loaded(f)) for f in files)  # a file read as it comes
    else:  # every file checked first: their newest post is the horizon, and an unreadable one stops all unwritten
        results = [(f, loaded(f)) for f in files]
        seen.horizon(store, max((when for _, r in results if (when := r.newest if r.batches is not None else
                                                                newest_post(r.threads)) is not None), default=None))
    for done, (f, result) in enumerate(results):
        bar.set_postfix_str(f.name[-40:])
        if result.passed_over:
            log.info("%s: passed over, holding no thread: %s", f.name, result.passed_over)
            report.passed_over.update(result.passed_over)
        if result.ledger is not None and dry_run:
            report.ledgers.append({"file": f.name, "taken": False, "reason": "a dry run takes no ledger in"})
        elif result.ledger is not None:  # an export's: before its threads, which it then applies to
            taken = store.take_ledger(result.ledger)
            report.ledgers.append({"file": f.name, **taken.summary()})
            if not taken.taken:
                log.warning("%s: its ledger (%d erasures, %d takedowns) is not taken: %s", f.name,
                            len(result.ledger.erasures), len(result.ledger.takedowns), taken.reason)
            elif taken.erasures_not_carried:
                log.warning("%s: %d of its ledger's erasures are not carried: %s", f.name, taken.erasures_not_carried,
                            taken.reason)
        if result.tag_synonyms is not None:  # an export's, after its ledger
            report.tag_synonyms.append({"file": f.name, **(
                {"taken": 0, "reason": "a dry run takes no synonyms in"} if dry_run else
                take_synonyms(store, result.tag_synonyms))})
        start = report.threads
        try:
            for threads in result.parts():
                _write(store, f.name, threads, report, before_write, seen if mirror is not None else None, dry_run)
                if result.batches is not None:
                    bar.set_postfix_str(f"{f.name[-40:]}: {report.threads} threads")
                    advanced(f, done, result.read_share() if result.read_share is not None else 0.0)
        except StoreError as e:  # a batch refused: those before it stay written, each thread whole
            e.written_before = report.threads - start
            raise
        report.files += 1
        report.skipped += len(result.errors)
        for e in result.errors:
            log.warning("skipped: %s", e)
            report.errors.append(str(e))
        advanced(f, done + 1, 0.0)
    bar.close()
    if mirror is not None:
        report.mirror = _mirror(store, before, seen, len(report.errors), mirror, dry_run)
        if report.mirror.removed:
            some = ", ".join(report.mirror.removed[:5]) + ("..." if len(report.mirror.removed) > 5 else "")
            log.info("mirror: %s %d threads none of the files holds (%s)", "would remove" if dry_run else "removed",
                     len(report.mirror.removed), some)
    return report


__all__ = ["DEFAULT_REMOVAL_LIMIT", "IngestProgress", "IngestReport", "LoadError", "Mirrored", "RemovalLimit",
           "ingest_paths"]
