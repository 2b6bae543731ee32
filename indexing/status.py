"""What a data folder holds and whether anything needs the operator (``cqa status``), read without changing it.

The store is read through a read-only connection (its counts, fingerprint and ledger; with ``check``, SQLite's
``quick_check``), the live generation through its manifest, the serving processes through their lease files (an
expired lease is reported, not removed), the builds under way through their hidden folders, the backups through the
backups folder's names. Nothing is locked: a build or a write going on meanwhile is not held up, so what it says is
the folder as it was a moment ago.

``FolderStatus.attention`` lists what needs the operator, in words, each with what to do:

- no store, or one that fails the check;
- no live generation, or one behind the store (threads written since it was built, which search does not see yet);
- a build folder left by a build that died, a half-written backup whose writer died;
- a lease that expired (the process that held it died without dropping it: its generation may be pruned);
- files ``POST /imports`` accepted and not ingested, with no service at them (one stopped first).
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from . import ledger
from .backup import STALE_PARTIAL_S, backups_in, began, partial_backups
from .config import IndexSettings
from .generations import current_generation, leases, list_generations
from .imports import import_running, imports_folder, pending
from .store import StoreError, _counts, _fingerprint, read_only

# a build folder (``.tmp-*``) untouched this long was left by a build that died
STALE_BUILD_S = 3600.0


@dataclass
class StoreStatus:
    path: str
    threads: int
    answers: int
    bytes: int  # the file and its write-ahead log
    fingerprint: str
    erasures: int
    takedowns: int
    check: str | None = None  # SQLite's quick_check ("ok"), where asked


@dataclass
class Lease:
    holder: str  # host-pid-nonce of the serving process
    generation: str
    expires_in_s: float  # below 0: expired (its process died without dropping it)


@dataclass
class GenerationStatus:
    live: str | None
    created_at: str | None = None
    age_s: float | None = None
    documents: dict[str, int] = field(default_factory=dict)
    dense_encoder: str | None = None
    behind: str | None = None  # generation, store, documents or translation (``reindex.Staleness``); None: up to date
    reason: str | None = None
    on_disk: list[str] = field(default_factory=list)
    leases: list[Lease] = field(default_factory=list)
    builds: dict[str, float] = field(default_factory=dict)  # hidden build folder -> seconds since last written


@dataclass
class BackupsStatus:
    folder: str
    stores: int = 0
    exports: int = 0
    newest: str | None = None
    newest_age_s: float | None = None
    being_written: list[str] = field(default_factory=list)
    left_by_a_dead_writer: list[str] = field(default_factory=list)


@dataclass
class FolderStatus:
    data_dir: str
    store: StoreStatus | None
    generation: GenerationStatus
    cache_bytes: int
    backups: BackupsStatus | None
    attention: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)  # files POST /imports accepted, not yet ingested
    import_running: bool = False  # a service holds the import lock: it receives or ingests one now

    def as_dict(self) -> dict:
        return asdict(self)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def _store(settings: IndexSettings, check: bool) -> StoreStatus:
    path = settings.store_path
    with closing(read_only(path)) as conn:
        conn.execute("BEGIN")  # one snapshot for every figure
        counts, fingerprint = _counts(conn), _fingerprint(conn)
        held = ledger.read(conn.cursor())
        verdict = conn.execute("PRAGMA quick_check").fetchone()[0] if check else None
        conn.execute("COMMIT")
    return StoreStatus(str(path), counts["threads"], counts["answers"], _size(path), fingerprint,
                       len(held.erasures), len(held.takedowns), verdict)


def _leases(root: Path, now: float) -> list[Lease]:
    return [Lease(p.stem, lease.get("generation", "?"), round(lease.get("expires_at", 0) - now, 1))
            for p, lease in leases(root).items()]


def _generation(settings: IndexSettings, fingerprint: str | None, now: float) -> GenerationStatus:
    from .reindex import staleness
    root = settings.index_root
    live = current_generation(root) if root.is_dir() else None
    out = GenerationStatus(live, on_disk=list_generations(root), leases=_leases(root, now))
    if root.is_dir():
        out.builds = {p.name: round(now - p.stat().st_mtime, 1) for p in root.iterdir()
                      if p.is_dir() and p.name.startswith(".tmp-")}
    try:
        m = json.loads((root / live / "manifest.json").read_text(encoding="utf-8")) if live is not None else None
    except (OSError, ValueError) as e:  # damaged, or deleted since it was named
        out.behind, out.reason = "generation", f"the manifest of {live} cannot be read ({e})"
        return out
    if m is not None:
        out.created_at = m.get("created_at")
        if out.created_at:
            out.age_s = round(now - datetime.fromisoformat(out.created_at).timestamp(), 1)
        docs = m.get("documents")
        out.documents = docs if isinstance(docs, dict) else {}
        out.dense_encoder = (m.get("encoder") or {}).get("name") or m.get("model")
    if fingerprint is not None:
        behind = staleness(settings, fingerprint=fingerprint)
        if behind is not None:
            out.behind, out.reason = behind.behind, behind.reason
    return out


def _backups(folder: Path, now: float) -> BackupsStatus:
    out = BackupsStatus(str(folder))
    files = backups_in(folder)
    out.stores = sum(f.kind == "store" for f in files)
    out.exports = sum(f.kind == "export" for f in files)
    if files:
        out.newest = files[0].name
        out.newest_age_s = round(now - began(files[0].name), 1)
    for _, name, idle in partial_backups(folder, now):
        (out.left_by_a_dead_writer if idle > STALE_PARTIAL_S else out.being_written).append(name)
    return out


def folder_status(settings: IndexSettings, backups_folder: Path | None = None, check: bool = False) -> FolderStatus:
    """The data folder of ``settings`` as it is now, and what needs the operator (the module's docstring)."""
    now = time.time()
    attention = []
    store = None
    if not settings.store_path.exists():
        attention.append(f"no store at {settings.store_path}: `cqa ingest FILE` (or `cqa serve`, which ingests the "
                         "default corpus into an empty folder)")
    else:
        try:
            store = _store(settings, check)
        except (StoreError, sqlite3.Error) as e:
            attention.append(f"the store cannot be read ({e}): `cqa restore BACKUP --replace`")
        else:
            if store.check not in (None, "ok"):
                attention.append(f"the store fails SQLite's check ({store.check}): `cqa restore BACKUP --replace`")
    gen = _generation(settings, store.fingerprint if store else None, now)
    if gen.behind == "generation" and gen.live is not None:
        attention.append(f"{gen.reason}: `cqa reindex --full` builds a new one")
    elif store is not None and gen.behind == "generation":
        attention.append("no live generation: search serves nothing until `cqa reindex` (or `cqa serve`) builds one")
    elif gen.behind == "store":
        attention.append(f"{gen.reason}: search does not see the threads written since, until the next build "
                         "(`cqa reindex --if-stale`, or a serving instance's automatic refresh)")
    elif gen.behind == "documents":
        attention.append(f"{gen.reason} (`cqa reindex --if-stale`, or a serving instance's automatic refresh)")
    for name, idle in gen.builds.items():
        if idle > STALE_BUILD_S:
            attention.append(f"{name}: a build folder untouched for {idle / 3600:.1f} h, left by a build that died "
                             "(the next build deletes it)")
    for lease in gen.leases:
        if lease.expires_in_s < 0:
            attention.append(f"the lease of {lease.holder} on {lease.generation} expired {-lease.expires_in_s:.0f} s "
                             "ago: its process died without dropping it (the next prune removes it)")
    backups = _backups(backups_folder, now) if backups_folder is not None else None
    if backups is not None and backups.left_by_a_dead_writer:
        attention.append(f"{len(backups.left_by_a_dead_writer)} half-written backups in {backups.folder} were left "
                         "by a writer that died (the next backup deletes them)")
    folder = imports_folder(settings.data_dir)
    waiting, running = [p.name for p in pending(folder)], import_running(folder)
    if waiting and not running:
        attention.append(f"{len(waiting)} files POST /imports accepted are not ingested yet (a service stopped first): "
                         "the next `cqa serve` ingests them, or `cqa ingest` each of " + str(folder))
    cache = settings.cache_dir / "embeddings.sqlite3"
    return FolderStatus(str(settings.data_dir), store, gen, _size(cache), backups, attention, waiting, running)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds / span:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def lines(s: FolderStatus) -> list[str]:
    """``s`` in words, one line per part, for a person at a terminal."""
    out = [f"data folder  {os.path.abspath(s.data_dir)}"]
    if s.store is not None:
        st = s.store
        out.append(f"store        {st.threads:,} threads, {st.answers:,} comments, {_mb(st.bytes)} (fingerprint "
                   f"{st.fingerprint}){'' if st.check is None else ', check: ' + st.check}")
        out.append(f"ledger       {st.erasures:,} users erased, {st.takedowns:,} takedowns on record")
    g = s.generation
    if g.live is None:
        out.append("generation   none live")
    else:
        docs = ", ".join(f"{v:,} {k}" for k, v in g.documents.items())
        out.append(f"generation   {g.live}, built {_ago(g.age_s)} ({docs}; dense: {g.dense_encoder or 'none'})")
        out.append("             " + ("up to date with the store" if g.behind is None else f"behind: {g.reason}"))
    if len(g.on_disk) > 1:
        out.append(f"on disk      {len(g.on_disk)} generations: {', '.join(g.on_disk)}")
    for name, idle in g.builds.items():
        out.append(f"building     {name} (last written {_ago(idle)})")
    served = [lease for lease in g.leases if lease.expires_in_s >= 0]
    out.append(f"served by    {len(served)} processes" + "".join(
        f"\n             {lease.holder}: {lease.generation}" for lease in served))
    out.append(f"cache        {_mb(s.cache_bytes)} of embeddings")
    if s.imports or s.import_running:
        out.append(f"imports      {len(s.imports)} waiting" + (", one being received or ingested" if s.import_running
                                                              else "") + "".join(f"\n             {n}" for n in s.imports))
    if s.backups is not None:
        b = s.backups
        out.append(f"backups      {b.folder}: {b.stores} store, {b.exports} export" + (
            f"; newest {b.newest} ({_ago(b.newest_age_s)})" if b.newest else "") + (
            f"; being written: {', '.join(b.being_written)}" if b.being_written else ""))
    out.append("attention    " + ("none" if not s.attention else "\n".join(
        ("" if i == 0 else "             ") + "- " + a for i, a in enumerate(s.attention))))
    return out
