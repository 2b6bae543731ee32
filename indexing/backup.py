"""Getting a forum's threads out of the store while it serves: ``backup`` (a consistent copy of the SQLite file, a
store again as it is) and ``export`` (the threads as our JSONL, which ``cqa ingest`` reads back). Both read one
snapshot of the store, block no writer, and never leave a half-written file under the name asked for."""
from __future__ import annotations

import gzip
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import closing, nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .ledger import ledger_line
from .models import Thread, synonyms_line
from .store import Snapshot, StoreError, _counts, _fingerprint, read_only


def _partial_name(name: str) -> str:
    """The hidden name a file named ``name`` is written under until it is complete."""
    return f".{name}.tmp"


def _partial_of(name: str) -> str | None:
    """The name whose hidden partial file ``name`` is, or None."""
    return name[1:-4] if name.startswith(".") and name.endswith(".tmp") else None


def _hidden_beside(dest: Path) -> Path:
    """The file a write to ``dest`` goes to first; refuses a ``dest`` that exists."""
    if dest.exists():
        raise StoreError(f"{dest} exists: this never replaces a file; name a new one")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / _partial_name(dest.name)
    tmp.unlink(missing_ok=True)  # left by a run killed before it finished
    return tmp


def flushed(path: Path) -> None:
    """``path``'s file, or folder, flushed to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _put_in_place(tmp: Path, dest: Path) -> None:
    """``tmp``, complete, flushed to disk and given the name ``dest`` (whose folder is flushed too)."""
    flushed(tmp)
    try:
        os.link(tmp, dest)  # unlike a rename, never replaces a file that appeared meanwhile
    except FileExistsError:
        raise StoreError(f"{dest} exists: this never replaces a file; name a new one") from None
    except OSError:  # a file system without hard links (some network and FAT mounts): check, then rename
        if dest.exists():
            raise StoreError(f"{dest} exists: this never replaces a file; name a new one") from None
        os.rename(tmp, dest)
    flushed(dest.parent)


def replace_with(tmp: Path, dest: Path) -> None:
    """``tmp``, complete and flushed to disk, put in the place of the file ``dest`` in one step (a reader sees the
    old file or the new one, never a mix), the folder flushed too: a backup rewritten by an erasure."""
    flushed(tmp)
    os.replace(tmp, dest)
    flushed(dest.parent)


def thread_line(thread: Thread) -> str:
    """One thread as a line of an export (docs/data-format.md; fields at their default left out)."""
    return json.dumps(thread.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False) + "\n"


def checked_copy(path: Path) -> dict:
    """What the SQLite copy of the store at ``path`` holds (counts, fingerprint), once it passed SQLite's integrity
    check (``StoreError`` if not)."""
    with closing(read_only(path)) as copy:
        (check,) = copy.execute("PRAGMA integrity_check").fetchone()
        if check != "ok":
            raise StoreError(f"the copy failed SQLite's integrity check: {check}")
        return {**_counts(copy), "fingerprint": _fingerprint(copy)}


def backup(source: Path | str, dest: Path | str, beside: Callable[[Path], dict] | None = None) -> dict:
    """A consistent copy of the store at ``source`` in one new SQLite file at ``dest``, made while any process goes on
    writing to it (``cqa backup``): ``VACUUM INTO`` a hidden file beside ``dest`` (one read transaction: the store as
    it was when it began, compacted, blocking no writer), checked (``PRAGMA integrity_check``), flushed to disk and
    linked into place, so ``dest`` is never a half-written file. The copy is a store: a data folder holding it as
    ``threads.sqlite3`` serves it (``cqa serve`` builds its indexes). ``beside``: what else of the data folder goes
    into the copy before it is checked (the feedback log's tables, ``ranking.evaluation.feedback.copy_into``), given
    the copy's path, what it says added to the result. Returns what it holds."""
    source, dest = Path(source), Path(dest)
    t0 = time.perf_counter()
    tmp = _hidden_beside(dest)
    try:
        with closing(read_only(source)) as src:
            src.execute("VACUUM INTO ?", (str(tmp),))
        added = beside(tmp) if beside is not None else {}
        held = {**checked_copy(tmp), **added}
        _put_in_place(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return {"backup": str(dest), **held, "bytes": dest.stat().st_size, "seconds": round(time.perf_counter() - t0, 3)}


def export(source: Path | str, dest: Path | str | None, on_thread: Callable[[int], None] | None = None,
           authors: Sequence[str] | None = None, with_ledger: bool = True) -> dict:
    """Every thread of the store at ``source`` as one JSON line each (docs/data-format.md; fields at their default
    left out), in insertion order, from one snapshot (``Snapshot``) while any process goes on writing: to ``dest``
    (gzipped when it ends in ``.gz``; written beside it and linked into place when complete), or to stdout when
    ``dest`` is None. ``cqa ingest`` of the file into an empty store gives the same threads, in the same order.
    ``on_thread(n)`` after every thread. Returns what it wrote, and the snapshot's counts and fingerprint.

    Where the store's ledger holds a record (an erasure, a takedown), the snapshot's ledger is the first line
    (``ledger.ledger_line``; ``with_ledger`` False leaves it out): ``cqa ingest`` of the file into an empty store,
    and ``cqa restore`` of it, then keep what was erased or taken down out of later writes too. Where it has tag
    synonyms, they come next, in one line (``models.synonyms_line``), before the threads: both read them back.

    With ``authors``, instead: every question and comment those users wrote, one JSON line each (``Post``), and
    nothing of other users': what a user's access request gets."""
    t0 = time.perf_counter()
    dest = Path(dest) if dest is not None else None
    tmp = _hidden_beside(dest) if dest is not None else None
    if tmp is None:
        out = nullcontext(sys.stdout)
    else:
        out = gzip.open(tmp, "wt", encoding="utf-8") if dest.name.endswith(".gz") else open(tmp, "w", encoding="utf-8")
    try:
        with out as fh, Snapshot(source) as snap:
            if authors is not None:
                posts = snap.posts(authors)
                for post in posts:
                    fh.write(json.dumps(post.as_json(), ensure_ascii=False) + "\n")
            held = snap.ledger() if authors is None and with_ledger else None
            if held is not None and not held.empty:
                fh.write(ledger_line(held))
            synonyms = snap.tag_synonyms() if authors is None else {}
            if synonyms:
                fh.write(synonyms_line(synonyms))
            for n, t in enumerate(snap.threads() if authors is None else (), 1):
                fh.write(thread_line(t))
                if on_thread is not None:
                    on_thread(n)
            fh.flush()
        if tmp is not None:
            _put_in_place(tmp, dest)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    summary = {"export": str(dest) if dest is not None else "-", **snap.counts, "fingerprint": snap.fingerprint}
    if held is not None and not held.empty:
        summary["ledger"] = {"erasures": len(held.erasures), "takedowns": len(held.takedowns)}
    if synonyms:
        summary["tag_synonyms"] = len(synonyms)
    if authors is not None:
        summary["posts"] = {kind: sum(p.kind == kind for p in posts) for kind in ("question", "comment")}
    if dest is not None:
        summary["bytes"] = dest.stat().st_size
    return {**summary, "seconds": round(time.perf_counter() - t0, 3)}


# --- a folder of backups (`cqa backup FOLDER`, POST /backups) ------------------------------------------------------
# Each kind's file name: threads-<UTC time to the millisecond>Z and the kind's suffix
BACKUP_SUFFIXES = {"store": ".sqlite3", "export": ".jsonl.gz"}
_BACKUP_NAME = re.compile(r"threads-(\d{8}T\d{6})(?:\.(\d{3}))?Z(\.sqlite3|\.jsonl\.gz)")  # time, ms, kind


def dated_name(kind: str, now: datetime | None = None) -> str:
    """A new backup's file name in a backups folder: ``threads-20261125T051200.123Z.sqlite3`` (``store``) or
    ``... .jsonl.gz`` (``export``)."""
    now = now or datetime.now(timezone.utc)
    return f"threads-{now:%Y%m%dT%H%M%S}.{now.microsecond // 1000:03d}Z{BACKUP_SUFFIXES[kind]}"


@dataclass(frozen=True)
class BackupFile:
    """One complete backup in a backups folder."""
    name: str
    kind: str  # store (a SQLite copy) or export (gzipped JSONL)
    bytes: int
    modified: float  # seconds since the epoch


def backup_kind(name: str) -> str | None:
    """``store`` or ``export`` for a backup's file name, None for any other name (half-written files, which start
    with a dot, and anything that is not a backup)."""
    m = _BACKUP_NAME.fullmatch(name)
    if m is None:
        return None
    return next(k for k, suffix in BACKUP_SUFFIXES.items() if suffix == m.group(3))


def began(name: str) -> float:
    """When the backup named ``name`` (``backup_kind`` not None) began, in seconds since the epoch: the moment of
    the store it holds."""
    stamp = _BACKUP_NAME.fullmatch(name)
    moment = datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    return moment.timestamp() + int(stamp.group(2) or 0) / 1000


def backups_in(folder: Path) -> list[BackupFile]:
    """The complete backups in ``folder``, newest first (by name, which is the UTC time it began)."""
    if not folder.is_dir():
        return []
    out = []
    for path in folder.iterdir():
        kind = backup_kind(path.name)
        if kind is not None and path.is_file():
            st = path.stat()
            out.append(BackupFile(path.name, kind, st.st_size, st.st_mtime))
    return sorted(out, key=lambda f: f.name, reverse=True)


def backup_path(folder: Path, name: str) -> Path | None:
    """The file of the backup named ``name`` in ``folder``, or None: only a backup's own name is looked up, never a
    path (no ``..``, no folder)."""
    if backup_kind(name) is None:
        return None
    path = folder / name
    return path if path.is_file() else None


# A hidden file a backup writes to first is older than this only if its writer died (kill -9, a lost machine): a
# backup still running writes to its file all the time.
STALE_PARTIAL_S = 600.0


def partial_backups(folder: Path, now: float | None = None) -> list[tuple[Path, str, float]]:
    """The hidden files of backups being written in ``folder`` (or left by a killed one): each file, the backup's
    name, and the seconds since it was last written to (past ``STALE_PARTIAL_S``: its writer died)."""
    now = time.time() if now is None else now
    out = []
    for p in (folder.iterdir() if folder.is_dir() else ()):
        name = _partial_of(p.name)
        if name and backup_kind(name):
            try:
                out.append((p, name, now - p.stat().st_mtime))
            except FileNotFoundError:  # completed, or removed, meanwhile
                pass
    return out


def tidy(folder: Path, kind: str, keep: int, now: float | None = None) -> dict:
    """After a backup into ``folder``: delete the older backups of ``kind`` beyond the newest ``keep`` (0: none
    deleted), and the hidden half-written files a killed backup left (untouched for ``STALE_PARTIAL_S``). Returns the
    names deleted."""
    now = time.time() if now is None else now
    dropped = [f.name for f in backups_in(folder) if f.kind == kind][keep:] if keep else []
    for name in dropped:
        (folder / name).unlink(missing_ok=True)
    partial = [p for p, _, idle in partial_backups(folder, now) if idle > STALE_PARTIAL_S]
    for path in partial:
        path.unlink(missing_ok=True)
    return {"deleted_older": dropped, "deleted_partial": [p.name for p in partial]}
