"""Getting a forum's threads out of the store while it serves: ``backup`` (a consistent copy of the SQLite file, a
store again as it is) and ``export`` (the threads as our JSONL, which ``cqa ingest`` reads back). Both read one
snapshot of the store, block no writer, and never leave a half-written file under the name asked for."""
from __future__ import annotations

import gzip
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .store import Snapshot, StoreError, _counts, _fingerprint


def _hidden_beside(dest: Path) -> Path:
    """The file a write to ``dest`` goes to first; refuses a ``dest`` that exists."""
    if dest.exists():
        raise StoreError(f"{dest} exists: this never replaces a file; name a new one")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp"
    tmp.unlink(missing_ok=True)  # left by a run killed before it finished
    return tmp


def _put_in_place(tmp: Path, dest: Path) -> None:
    """``tmp``, complete, flushed to disk and given the name ``dest`` (whose folder is flushed too)."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    try:
        os.link(tmp, dest)  # unlike a rename, never replaces a file that appeared meanwhile
    except FileExistsError:
        raise StoreError(f"{dest} exists: this never replaces a file; name a new one") from None
    except OSError:  # a file system without hard links (some network and FAT mounts): check, then rename
        if dest.exists():
            raise StoreError(f"{dest} exists: this never replaces a file; name a new one") from None
        os.rename(tmp, dest)
    fd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(source: Path | str, dest: Path | str) -> dict:
    """A consistent copy of the store at ``source`` in one new SQLite file at ``dest``, made while any process goes on
    writing to it (``cqa backup``): ``VACUUM INTO`` a hidden file beside ``dest`` (one read transaction: the store as
    it was when it began, compacted, blocking no writer), checked (``PRAGMA integrity_check``), flushed to disk and
    linked into place, so ``dest`` is never a half-written file. The copy is a store: a data folder holding it as
    ``threads.sqlite3`` serves it (``cqa serve`` builds its indexes). Returns what it holds."""
    source, dest = Path(source), Path(dest)
    if not source.exists():
        raise StoreError(f"{source}: no store here")
    tmp = _hidden_beside(dest)
    t0 = time.perf_counter()
    try:
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, isolation_level=None)
        try:
            src.execute("PRAGMA busy_timeout=10000")
            src.execute("VACUUM INTO ?", (str(tmp),))
        finally:
            src.close()
        copy = sqlite3.connect(f"file:{tmp}?mode=ro", uri=True)
        try:
            (check,) = copy.execute("PRAGMA integrity_check").fetchone()
            if check != "ok":
                raise StoreError(f"the copy failed SQLite's integrity check: {check}")
            held = {**_counts(copy), "fingerprint": _fingerprint(copy)}
        finally:
            copy.close()
        _put_in_place(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return {"backup": str(dest), **held, "bytes": dest.stat().st_size, "seconds": round(time.perf_counter() - t0, 3)}


def export(source: Path | str, dest: Path | str | None, on_thread: Callable[[int], None] | None = None) -> dict:
    """Every thread of the store at ``source`` as one JSON line each (docs/data-format.md; fields at their default
    left out), in insertion order, from one snapshot (``Snapshot``) while any process goes on writing: to ``dest``
    (gzipped when it ends in ``.gz``; written beside it and linked into place when complete), or to stdout when
    ``dest`` is None. ``cqa ingest`` of the file into an empty store gives the same threads, in the same order.
    ``on_thread(n)`` after every thread. Returns what it wrote, and the snapshot's counts and fingerprint."""
    t0 = time.perf_counter()
    dest = Path(dest) if dest is not None else None
    tmp = _hidden_beside(dest) if dest is not None else None
    try:
        with Snapshot(source) as snap:
            if tmp is None:
                fh = sys.stdout
            elif tmp.name.endswith(".gz.tmp"):
                fh = gzip.open(tmp, "wt", encoding="utf-8")
            else:
                fh = open(tmp, "w", encoding="utf-8")
            n = answers = 0
            try:
                for t in snap.threads():
                    fh.write(json.dumps(t.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False))
                    fh.write("\n")
                    n, answers = n + 1, answers + len(t.answers)
                    if on_thread is not None:
                        on_thread(n)
            finally:
                if fh is not sys.stdout:
                    fh.close()
                else:
                    fh.flush()
            held = {**snap.counts, "fingerprint": snap.fingerprint}
        if (n, answers) != (held["threads"], held["answers"]):  # one snapshot: cannot differ
            raise StoreError(f"wrote {n} threads and {answers} answers of a snapshot that holds {held}")
        if tmp is not None:
            _put_in_place(tmp, dest)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    out = {"export": str(dest) if dest is not None else "-", **held}
    if dest is not None:
        out["bytes"] = dest.stat().st_size
    return {**out, "seconds": round(time.perf_counter() - t0, 3)}
