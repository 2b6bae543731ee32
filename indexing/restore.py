"""Restoring the store from a backup without bringing back what was erased or taken down since (``cqa restore``).

A backup holds the store as it was when it began. One made before an erasure or a takedown holds the erased user's
posts or the taken-down thread, and its ledger (``indexing.ledger``) lacks that record. The erasure rewrites the
backups in ``CQA_BACKUP_DIR`` (``indexing.erasure``), but not those elsewhere: a copy taken off the machine, a
backup written to another folder. So a restore reads the ledgers of the files that know better (``sources``: the
store it replaces, the backups in the backups folder, any named; an export's ledger is its first line) and applies
them to the restored copy before it goes in place:

1. The restored copy is made (a store backup: ``VACUUM INTO`` a hidden file in the data folder, checked, with its own
   ledger; an export: a new store, which takes the export's own ledger line first), and each source's erasures are
   added to its ledger where both hash ids under one key (copies of one store do; ``ledger.carry``), and each
   takedown recorded.
2. An export's threads are written through ``upsert``, so the ledger applies to them on the way in.
3. Each source's erasures are applied to the copy's posts (``ThreadStore.erase_authors``, per rule): its users are
   found among the copy's authors by hashing each id under the source's key, so a source of another lineage (its
   own key) still erases them. Each takedown is applied (``delete`` of the thread or the comment).
4. The copy goes in place: a store it replaces is moved aside, as ``threads.sqlite3.replaced-<UTC time>`` (never
   deleted), and the copy renamed to ``threads.sqlite3``, the folder flushed.
5. A generation is built from scratch and made live, and the older ones deleted (``--no-reindex``: left to the
   operator), so search serves the restored store.

A service must not serve the data folder meanwhile: a generation some process holds a lease on refuses the restore.
"""
from __future__ import annotations

import gzip
import json
import logging
import os
import sqlite3
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError

from . import ledger
from .backup import backup, backups_in, checked_copy, replace_with
from .config import IndexSettings
from .generations import current_generation, leased_generations, prune_before
from .ingest import take_synonyms
from .models import Thread, is_synonyms_line, synonyms_of
from .reindex import ReindexError
from .store import NotInStore, StoreError, ThreadStore, UpsertResult, read_only

log = logging.getLogger(__name__)


class RestoreError(Exception):
    """A restore refused before anything changed in the data folder; the message says why and what to do."""


def sniffed_kind(path: Path) -> str:
    """``store`` (an SQLite file) or ``export`` (gzip), by the file's first bytes, not its name: a copy taken off the
    machine may have been renamed."""
    with open(path, "rb") as fh:
        head = fh.read(16)
    if head.startswith(b"SQLite format 3\0"):
        return "store"
    if head.startswith(b"\x1f\x8b"):
        return "export"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):  # `cqa export -o all.jsonl`: not gzipped
        raise RestoreError(f"{path}: a JSONL export that is not gzipped, whose end cannot be checked (a copy cut short "
                           "at a line's end would restore part of the forum): gzip it (`gzip FILE`) and restore the "
                           ".gz, or ingest it into an empty data folder (`cqa ingest FILE`)")
    raise RestoreError(f"{path}: neither a store backup (SQLite) nor an export (gzipped JSONL)")


@dataclass
class Source:
    """A ledger read for a restore, and where from."""
    path: Path
    held: ledger.Held


@dataclass
class Applied:
    """What the ledgers changed in the restored copy."""
    erasures_carried: int = 0  # records added to the copy's ledger (one key)
    erasures_not_carried: int = 0  # records under another key whose users the copy does not hold
    authors_erased: int = 0  # users found among the copy's posts, erased
    threads_deleted: int = 0
    answers_removed: int = 0
    posts_anonymized: int = 0
    takedowns: int = 0  # takedowns recorded in the copy
    takedowns_applied: int = 0  # of which the copy held the thread or comment
    by_source: dict[str, dict] = field(default_factory=dict)


def default_sources(settings: IndexSettings, backups_folder: Path | None, restoring: Path) -> list[Path]:
    """The files whose ledgers a restore reads unless told otherwise: the data folder's store (the one it replaces)
    and every backup in ``backups_folder`` (a store backup's ledger, or an export's first line), ``restoring`` itself
    left out."""
    out = [settings.store_path] if settings.store_path.exists() else []
    if backups_folder is not None and backups_folder.is_dir():
        out += [backups_folder / b.name for b in backups_in(backups_folder)]
    return [p for p in out if p.resolve() != restoring.resolve()]


def _export_head(path: Path) -> list[str]:
    """An export's first two lines, where its ledger and tag synonyms lines are when it has them; ``RestoreError``
    when the file cannot be read."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return [fh.readline(), fh.readline()]
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise RestoreError(f"{path}: the export cannot be read ({e})") from None


def export_ledger(path: Path) -> ledger.Held:
    """The ledger an export carries (its first line, ``ledger.ledger_line``); an empty one where it has none (its
    store held no record, or it was written before exports carried their ledger). ``RestoreError`` when the file
    cannot be read or its ledger line is damaged."""
    try:
        return ledger.of_line(_export_head(path)[0]) or ledger.Held(None)
    except ValueError as e:
        raise RestoreError(f"{path}, line 1: {e}") from None


def export_synonyms(path: Path) -> dict[str, str]:
    """The tag synonyms an export carries (its line before the threads, after the ledger line where it has one,
    ``models.synonyms_line``); none where it has no such line. ``RestoreError`` when that line is damaged."""
    first, second = _export_head(path)
    line = second if ledger.is_ledger_line(first) else first
    if not is_synonyms_line(line):
        return {}
    try:
        return synonyms_of(json.loads(line))
    except ValueError as e:
        raise RestoreError(f"{path}: its tag synonyms line: {e}; nothing was restored") from None


def read_sources(paths: Sequence[Path], strict: Sequence[Path] = ()) -> tuple[list[Source], dict[str, str]]:
    """Each file's ledger (a store's, or an export's first line); those that cannot be read (a damaged store, often
    the reason for the restore) are named with why, unless they are in ``strict`` (named by the operator), which
    raise ``RestoreError``."""
    sources, unreadable = [], {}
    for p in paths:
        try:
            if sniffed_kind(p) == "export":
                sources.append(Source(p, export_ledger(p)))
                continue
            conn = read_only(p)
            try:
                sources.append(Source(p, ledger.read(conn.cursor())))
            finally:
                conn.close()
        except (OSError, StoreError, RestoreError, sqlite3.Error) as e:
            if p in strict:
                raise RestoreError(f"cannot read the ledger of {p}: {e}") from None
            log.warning("restore: the ledger of %s cannot be read, and is not applied: %s", p, e)
            unreadable[str(p)] = str(e)
    return sources, unreadable


def _apply(copy: ThreadStore, source: Source, out: Applied) -> None:
    """One source's erasures and takedowns applied to the copy's posts (step 3)."""
    matched = source.held.matching(copy.author_ids())
    by_rule: dict[ledger.Rule, list[str]] = defaultdict(list)
    for author, rule in matched.items():
        by_rule[rule].append(author)
    mine = {"erasures": len(source.held.erasures), "authors_found": len(matched), "threads_deleted": 0,
            "answers_removed": 0, "takedowns_applied": 0}
    for rule, authors in by_rule.items():
        erased = copy.erase_authors(sorted(authors), remove=rule.remove, meta_keys=sorted(rule.meta_keys))
        out.authors_erased += len(authors)
        out.threads_deleted += len(erased.threads_deleted)
        out.answers_removed += erased.answers_removed
        out.posts_anonymized += erased.posts_anonymized
        mine["threads_deleted"] += len(erased.threads_deleted)
        mine["answers_removed"] += erased.answers_removed
    for t in source.held.takedowns:
        try:
            if t.answer_id is None:
                done = copy.delete(t.thread_id, takedown=True) is not None
                out.threads_deleted += done
            else:
                copy.delete_answer(t.thread_id, t.answer_id, takedown=True)
                out.answers_removed += 1
                done = True
        except NotInStore:
            done = False
        copy.record_takedown(t.thread_id, t.answer_id, t.at)  # when it was taken down, not now
        out.takedowns_applied += done
        mine["takedowns_applied"] += done
    out.by_source[str(source.path)] = mine


def _export_threads(path: Path, batch: int = 500):
    """An export's threads, ``batch`` at a time; ``RestoreError`` naming the line that is not a thread, or saying the
    file ends before its end (a copy cut short)."""
    chunk: list[Thread] = []
    n = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if n <= 2 and (ledger.is_ledger_line(line) or is_synonyms_line(line)):  # read before
                    continue
                if line.strip():
                    chunk.append(Thread.model_validate_json(line))
                if len(chunk) == batch:
                    yield chunk
                    chunk = []
    except ValidationError as e:
        raise RestoreError(f"{path}, line {n}: not a thread: {e.errors()[0]['msg']}; nothing was restored") from None
    except (EOFError, UnicodeDecodeError) as e:
        raise RestoreError(f"{path}: the export is cut short or damaged after line {n} ({e}); nothing was "
                           "restored") from None
    if chunk:
        yield chunk


def restore(settings: IndexSettings, source_file: Path, *, ledgers: Sequence[Path] | None = None,
            extra_ledgers: Sequence[Path] = (), backups_folder: Path | None = None, replace: bool = False,
            reindex: bool = True, progress: bool = False) -> dict:
    """Restore the data folder's store from ``source_file`` (a store backup or an export), with the erasures and
    takedowns of the ledgers of ``ledgers`` (None: ``default_sources``) and ``extra_ledgers`` applied first (the
    module's docstring says how). ``replace``: a store already there is moved aside; else it refuses. Returns a
    summary without any text or author id."""
    t0 = time.perf_counter()
    source_file = Path(source_file)
    if not source_file.is_file():
        raise RestoreError(f"{source_file}: no such file")
    kind = sniffed_kind(source_file)
    store_path = settings.store_path
    if store_path.exists() and not replace:
        raise RestoreError(f"{store_path} holds a store already; --replace moves it aside (nothing is deleted) and "
                           "reads its ledger, so what was erased since the backup stays erased")
    served = leased_generations(settings.index_root) if settings.index_root.is_dir() else set()
    if served:
        raise RestoreError(f"a service serves {settings.data_dir} (generations {', '.join(sorted(served))} are "
                           "leased): stop it, restore, then start it")
    paths = list(default_sources(settings, backups_folder, source_file) if ledgers is None else ledgers)
    paths += [p for p in extra_ledgers if p not in paths]
    sources, unreadable = read_sources(paths, strict=[*(ledgers or ()), *extra_ledgers])
    synonyms = {}  # a store backup holds its own
    if kind == "export":  # its own ledger first: the records its threads were written under; its tag synonyms
        sources.insert(0, Source(source_file, export_ledger(source_file)))
        synonyms = export_synonyms(source_file)
    out = Applied()
    tmp = store_path.parent / f".{store_path.name}.restoring"
    leftovers = [tmp.with_name(tmp.name + side) for side in ("", "-wal", "-shm")]
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)  # a restore cut off before: done again from the start
    store_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if kind == "store":
            backup(source_file, tmp)  # a consistent, checked copy
        with ThreadStore(tmp) as copy:
            foreign = []  # sources under another key: only their users the copy holds are erased
            for s in sources:  # step 1: the records, so that an export's threads meet them on the way in
                if copy.carry_ledger(s.held):
                    out.erasures_carried += len(s.held.erasures)
                else:
                    foreign.append(s)
                for t in s.held.takedowns:
                    copy.record_takedown(t.thread_id, t.answer_id, t.at)
            out.takedowns = len(copy.takedowns(limit=-1))
            written = None
            take_synonyms(copy, synonyms)
            if kind == "export":  # step 2
                from tqdm import tqdm
                result = UpsertResult()
                with tqdm(unit="thread", desc="restore", disable=not progress) as bar:
                    for chunk in _export_threads(source_file):
                        result.add(copy.upsert(chunk))
                        bar.update(len(chunk))
                written = {"inserted": result.inserted, **result.erased()}
            for s in sources:  # step 3
                _apply(copy, s, out)
            out.erasures_not_carried = sum(len(s.held.erasures) - out.by_source[str(s.path)]["authors_found"]
                                           for s in foreign)
            if out.erasures_not_carried:
                log.warning("restore: %d erasures recorded under another store's key name users the restored store "
                            "does not hold, and are not in its ledger: posts of theirs sent later are stored",
                            out.erasures_not_carried)
            synonyms_held = len(copy.tag_synonyms())
            copy.vacuum()
            copy.truncate_wal()
        held = checked_copy(tmp)
        replaced = None
        if store_path.exists():  # step 4
            try:
                with ThreadStore(store_path) as old:
                    old.truncate_wal()  # its log folded in, where it opens: one file to move aside
            except (sqlite3.Error, StoreError) as e:  # damaged: moved aside as it is, its log with it
                log.warning("restore: the store replaced does not open (%s); moved aside as it is", e)
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            replaced = store_path.with_name(f"{store_path.name}.replaced-{stamp}")
            for side in ("-wal", "-shm", ""):  # the main file last: its log never lies beside another file
                if Path(f"{store_path}{side}").exists():
                    os.replace(f"{store_path}{side}", f"{replaced}{side}")
        replace_with(tmp, store_path)
    finally:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
    summary = {"restored": str(source_file), "kind": kind, **held, "replaced_as": replaced and replaced.name,
               "ledgers_read": [str(s.path) for s in sources], "ledgers_unreadable": unreadable,
               **out.__dict__, **({"export": written} if written else {}), "tag_synonyms": synonyms_held}
    if reindex:  # step 5
        from .erasure import build_afresh
        try:
            built = build_afresh(settings, progress, lambda stage, frac: None)
        except ReindexError as e:  # the store is in place: the build is what is left to do
            log.error("restore: the store is restored, but the build failed: %s; run `cqa reindex --full`", e)
            summary["build_error"] = str(e)
        else:
            dropped, _ = prune_before(settings.index_root, built["generation"])
            summary.update({"generation": built["generation"], "build_seconds": built["seconds"],
                            "generations_deleted": dropped})
    elif current_generation(settings.index_root) is not None:
        log.warning("restore: the live generation was built from the store replaced; run `cqa reindex --full` "
                    "before serving")
    summary["seconds"] = round(time.perf_counter() - t0, 3)
    return summary

