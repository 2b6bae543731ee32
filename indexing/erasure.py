"""Erasing a forum user (a right-to-erasure request): what the store holds of them, and everything derived from it.

``ThreadStore.erase_authors`` changes the store in one transaction: the authors' questions and comments removed, or
kept without their ids. The store overwrites what it deletes (``secure_delete``) and empties its write-ahead log.
``forget_derived`` then clears what was made from the erased texts, in this order:

1. **Index generations.** It builds a generation from scratch (``reindex`` without growing the live dense index or
   linking the live comment vectors, and with the translation table trained again). A grown index would keep an
   erased document's vector as a row marked removed. The build waits for one already running.
2. **Embedding cache.** It deletes the vectors of the erased texts under every encoder the cache names.
3. **Older generations.** It deletes every generation built before its own, once no serving process holds a lease
   on it. Each process switches within ``$CQA_GENERATION_POLL_S``, and it waits up to ``wait_s`` for them.
4. **Shared score and vector memos** (``remove`` only). These hold scores and vectors under keyed hashes, not texts.
   It empties them rather than keying each erased text under every model that may have scored it.

5. **Backups** in the backups folder that began before the erasure (``rewrite_backups``). Each is written again
   without what the erasure took out, under its own name, in one step: a store backup by the same erasure in a
   copy of it (so it gains the ledger, and a service restored from it keeps the user erased), an export by the
   ledger's rule applied to each of its threads, its ledger line (its first) merged with the store's. A backup
   still being written is waited for. With ``rewrite_backups_too`` off (``CQA_ERASE_BACKUPS=keep``) they are only
   named. A takedown (a thread or a comment deleted with ``purge``, ``take_down``) rewrites them the same way, by
   the ids it deleted, and a store backup's copy records the takedown in its ledger as the store did.
   Backups elsewhere (``cqa backup`` to another folder, copies off the machine) are the operator's.

Before all of these, the ``holders`` a caller names forget what was removed: what else of the data folder may hold
it, kept by a layer above this one (``HoldsRemoved``). The feedback log's kept requests
(``ranking.evaluation.feedback.KeptRequests``: a user's search whose question was the post they later had erased)
forget its texts; the searches it logged (``ShownPosts``: what they showed and what their users judged) its posts'
ids. A store backup's copy of the log is rewritten with the backup (step 5). No search shows a removed post once the
store's part is done (each checks what it shows against the store), so none logs its id again after."""
from __future__ import annotations

import gzip
import json
import logging
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Protocol

from . import ledger
from .backup import (STALE_PARTIAL_S, _partial_name, backup_kind, backups_in, began, checked_copy, partial_backups,
                     replace_with, thread_line)
from .config import IndexSettings
from .embcache import text_key
from .generations import current_generation, prune_before
from .models import Thread, is_synonyms_line
from .reindex import BUSY, ReindexError, reindex
from .store import Erased, NotInStore, ThreadStore, empty_wal, read_only

log = logging.getLogger(__name__)

Progress = Callable[[str, float], None]


class HoldsRemoved(Protocol):
    """Something of the data folder, besides the store and what this module clears, that may hold what an erasure or
    a takedown removed (``forget_derived``'s ``holders``): its texts (``Erased.texts``), or its posts' ids
    (``Erased.posts``)."""
    name: str  # the summary's key: how many of its records it changed

    def forget(self, erased: Erased) -> int:
        """The records holding what ``erased`` removed cleared; how many."""

    def forget_in_backup(self, backup_file: Path, erased: Erased) -> int:
        """The same in the copy of it a store backup carries (being rewritten, before it is compacted)."""


def take_down(store: ThreadStore, thread_id: str, answer_id: str | None = None,
              if_match: Sequence[str] | None = None) -> tuple[Erased, str | None] | None:
    """A takedown's part in the store (``DELETE ...?purge=true``, ``cqa takedown``): the thread (``answer_id`` None)
    or one comment of it removed, and the takedown recorded, in one transaction (``ThreadStore.delete``,
    ``delete_answer``); then the write-ahead log, whose older pages held it, emptied. Returns what
    ``forget_derived`` forgets it by (the texts the store no longer holds anywhere, the takedown) and the thread's
    ETag after a comment's removal; None when the thread is not stored. ``NotInStore`` for a comment it does not hold,
    ``PreconditionFailed`` when ``if_match`` does not name the thread's ETag (nothing removed)."""
    if answer_id is None:
        gone = store.delete(thread_id, if_match, takedown=True)
        if gone is None:
            return None
        texts = [gone.question_text, gone.subject, gone.body, *(a.text for a in gone.answers)]
        return Erased(threads_deleted=[thread_id], texts=store.unheld(texts), at=time.time(),
                      posts=[thread_id, *(a.id for a in gone.answers)],
                      wal_truncated=store.truncate_wal(), takedown=[(thread_id, None)]), None
    removed = store.delete_answer(thread_id, answer_id, if_match, takedown=True)
    return Erased(threads_changed=[thread_id], answers_removed=1, texts=store.unheld([removed.text]), at=time.time(),
                  posts=[answer_id],
                  wal_truncated=store.truncate_wal(), takedown=[(thread_id, answer_id)]), removed.etag


class WalNotEmptied(sqlite3.OperationalError):
    """``scrub`` removed the rows, but the file's write-ahead log, which still holds their older pages, could not be
    emptied in time: the caller (an erasure's job) must try again or fail."""


def scrub(path: Path, delete: Callable[[sqlite3.Connection], int], wait_s: float = 10.0,
          then: Sequence[Callable[[sqlite3.Connection], int]] = ()) -> int:
    """Run ``delete`` (DELETE statements on a connection, returning how many rows they removed) on the SQLite file at
    ``path`` in one write transaction, and each of ``then`` in one of its own (a long change cut in steps, so that the
    service's writes to the file wait for one step at most), the deleted rows overwritten with zeros
    (``secure_delete``), then empty the file's write-ahead log, whose older pages still held them (``empty_wal``:
    while the service writes the file too, after a few tries); how many rows they removed (0: no such file). Raises
    ``WalNotEmptied`` where the log could not be emptied within ``wait_s``."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA secure_delete=ON")
        n = 0
        for step in (delete, *then):
            conn.execute("BEGIN IMMEDIATE")
            n += step(conn)
            conn.execute("COMMIT")
        if not empty_wal(conn, wait_s):
            raise WalNotEmptied(f"{path}: {n} rows removed, but its write-ahead log, which held them, was still in "
                                f"use after {wait_s:.0f} s")
        return n
    finally:
        conn.close()


def empty_cache_file(path: Path) -> int:
    """Delete every row of every table of the SQLite cache at ``path`` (``scrub``); how many it held."""
    def every_row(conn: sqlite3.Connection) -> int:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return sum(conn.execute(f'DELETE FROM "{t}"').rowcount for t in tables)
    return scrub(path, every_row)


def forget(path: Path, texts: Sequence[str], models: Sequence[str] = ()) -> int:
    """Delete the vectors of ``texts`` from the embedding cache file at ``path`` (``scrub``), under every encoder
    it names and ``models`` (the ones in use, which a cache written before it named them lacks); how many it held."""
    if not texts:
        return 0

    def their_vectors(conn: sqlite3.Connection) -> int:
        conn.execute("CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY)")
        names = {*models, *(m for (m,) in conn.execute("SELECT name FROM models"))}
        keys = list({text_key(m, t) for m in names for t in set(texts)})
        return sum(conn.execute(f"DELETE FROM emb WHERE key IN ({','.join('?' * len(keys[i:i + 900]))})",
                                keys[i:i + 900]).rowcount for i in range(0, len(keys), 900))
    return scrub(path, their_vectors)


def forget_vectors(settings: IndexSettings, erased: Erased) -> int:
    """Delete the erased texts' vectors from the data folder's embedding cache, under the encoders it names and the
    ones the settings name; how many it held."""
    if not erased.texts:
        return 0
    return forget(settings.cache_dir / "embeddings.sqlite3", erased.texts,
                  [m for m in (settings.encoder.id, settings.answer_encoder_id) if m])


def build_afresh(settings: IndexSettings, progress: bool, on_progress: Progress, poll_s: float = 1.0) -> dict:
    """A generation built from scratch (nothing grown from or linked to the live one), made live; it waits for a
    build already running on the data folder to end first."""
    waited = False
    while True:
        try:
            return reindex(settings, progress=progress, on_progress=on_progress, grow_dense=False,
                           carry_translation=False)
        except ReindexError as e:
            if str(e) != BUSY:
                raise
            if not waited:
                log.info("erasure: waiting for the build running on this data folder to end")
                waited = True
            time.sleep(poll_s)


def _without(thread: Thread, erased: Erased, rules: dict[str, ledger.Rule]) -> ledger.Applied:
    """``thread`` without what ``erased`` took out: the takedown's thread or comments, the erased users' posts."""
    if (thread.id, None) in erased.takedown:
        return ledger.Applied(None)
    gone = {aid for tid, aid in erased.takedown if tid == thread.id}
    kept = [a for a in thread.answers if a.id not in gone]
    applied = ledger.apply(thread.model_copy(update={"answers": kept}), rules)
    applied.answers_removed += len(thread.answers) - len(kept)
    return applied


def _first_line(line: str, live: ledger.Held | None, name: str) -> tuple[str, ledger.Held | None, bool]:
    """An export's rewritten first line: what to write first (its ledger line merged with ``live``, the store's; ""
    for none), that ledger, and whether ``line`` was the old ledger line (so not copied as a thread's)."""
    is_ledger = ledger.is_ledger_line(line)
    try:
        own = ledger.of_line(line)
    except ValueError as e:  # the store's ledger takes its place
        log.warning("erasure: %s: %s; the store's ledger takes its place", name, e)
        own = None
    merged = own if live is None else live if own is None else own.merged(live)
    if merged is None and own is not None:  # another lineage's key: kept as it was
        log.warning("erasure: %s's ledger hashes under another key; its line is kept as it was", name)
        merged = own
    if merged is not None and not merged.empty:
        return ledger.ledger_line(merged), merged, is_ledger
    return line if is_ledger else "", None, is_ledger  # one that cannot be read, and nothing in its place: kept


def rewrite_backup(path: Path, erased: Erased, live: ledger.Held | None = None,
                   holders: Sequence[HoldsRemoved] = ()) -> dict:
    """The backup at ``path`` written again without what ``erased`` took out (a user's erasure, ``erased.rule``, or
    a takedown, ``erased.takedown``), under the same name, in one step (``replace_with``): a store backup by the
    same writes in a copy of it (``ThreadStore.erase_authors``, which also records the erasure in the copy's ledger;
    ``delete``, ``delete_answer``), then compacted (``VACUUM``) and checked; an export thread by thread
    (``_without``), its ledger line (``ledger.ledger_line``) merged with ``live``, the store's ledger after the
    erasure (``Held.merged``; added as its first line where it had none), so that it carries the record as a store
    backup does; a store backup's copies of what ``holders`` keep cleared too (``HoldsRemoved.forget_in_backup``).
    Returns what it changed, without any text or author id."""
    t0 = time.perf_counter()
    tmp = path.parent / _partial_name(path.name)  # a kill -9 leaves it to ``backup.tidy``
    tmp.unlink(missing_ok=True)
    out = {"threads_deleted": 0, "threads_changed": 0, "answers_removed": 0, "posts_anonymized": 0}
    try:
        if backup_kind(path.name) == "store":
            shutil.copyfile(path, tmp)
            with ThreadStore(tmp) as copy:
                if erased.rule is not None:
                    done = copy.erase_authors(erased.authors, remove=erased.rule.remove,
                                              meta_keys=sorted(erased.rule.meta_keys))
                    out.update({k: v for k, v in done.summary().items() if k in out})
                for tid, aid in erased.takedown:
                    try:
                        if aid is None:
                            out["threads_deleted"] += copy.delete(tid) is not None
                        else:
                            copy.delete_answer(tid, aid)
                            out["threads_changed"] += 1
                            out["answers_removed"] += 1
                    except NotInStore:  # not there when the backup began
                        pass
                    copy.record_takedown(tid, aid)  # a service restored from it keeps it taken down
                for h in holders if erased.texts or erased.posts else ():
                    out[h.name] = h.forget_in_backup(tmp, erased)
                copy.vacuum()
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=DELETE")  # one file again, as ``cqa backup`` writes it
            finally:
                conn.close()
            out.update(checked_copy(tmp))
        else:
            rules = {a: erased.rule for a in erased.authors} if erased.rule else {}  # a rewrite erases no one else
            # a line that does not hold one of these (as JSON writes them) has nothing to take out: copied as it is
            needles = [json.dumps(v, ensure_ascii=False) for v in (*rules, *(tid for tid, _ in erased.takedown))]
            with gzip.open(path, "rt", encoding="utf-8") as src, gzip.open(tmp, "wt", encoding="utf-8") as dst:
                for n_line, line in enumerate(src):
                    if n_line == 0:  # its ledger line, where it has one, merged with the store's
                        head, merged, was_ledger = _first_line(line, live, path.name)
                        dst.write(head)
                        if merged is not None:
                            out["ledger"] = {"erasures": len(merged.erasures), "takedowns": len(merged.takedowns)}
                        if was_ledger:
                            continue
                    if n_line <= 1 and is_synonyms_line(line):  # its tag synonyms: no post of anyone's
                        dst.write(line)
                        continue
                    if not any(n in line for n in needles):
                        dst.write(line)
                        continue
                    thread = Thread.model_validate_json(line)
                    applied = _without(thread, erased, rules)
                    if applied.thread is None:
                        out["threads_deleted"] += 1
                        continue
                    if applied.thread != thread:
                        out["threads_changed"] += 1
                        out["answers_removed"] += applied.answers_removed
                        out["posts_anonymized"] += applied.posts_anonymized
                    dst.write(thread_line(applied.thread))
        if not path.exists():  # deleted meanwhile (DELETE /backups, CQA_BACKUP_KEEP's rotation): not brought back
            return {"backup": path.name, "deleted_meanwhile": True}
        replace_with(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"backup": path.name, **out, "seconds": round(time.perf_counter() - t0, 3)}


def rewrite_backups(folder: Path, erased: Erased, wait_s: float = 60.0, poll_s: float = 0.5,
                    live: ledger.Held | None = None, holders: Sequence[HoldsRemoved] = ()) -> dict:
    """Every backup in ``folder`` that began before ``erased`` was committed, written again without it
    (``rewrite_backup``, an export's ledger line merged with ``live``, the store's ledger after it), once the backups
    of that time still being written are complete (their hidden file untouched for ``STALE_PARTIAL_S`` means a writer
    that died); waits up to ``wait_s`` for them. Returns what each rewrite changed, and the backups that were still
    being written after the wait (they hold what was erased)."""
    def writing() -> list[str]:
        return [name for _, name, idle in partial_backups(folder) if began(name) < erased.at and idle < STALE_PARTIAL_S]
    deadline = time.monotonic() + wait_s
    while (busy := writing()) and time.monotonic() < deadline:
        time.sleep(poll_s)
    rewritten = []
    for b in backups_in(folder):
        if began(b.name) < erased.at:
            try:
                rewritten.append(rewrite_backup(folder / b.name, erased, live, holders))
            except FileNotFoundError:  # deleted since it was listed
                rewritten.append({"backup": b.name, "deleted_meanwhile": True})
    if busy:
        log.warning("erasure: %d backups that began before it were still being written after %g s and hold what "
                    "it erased: %s (run the erasure again once they are complete)", len(busy), wait_s, ", ".join(busy))
    return {"backups_rewritten": rewritten, "backups_being_written": busy}


def forget_derived(settings: IndexSettings, erased: Erased, *, memo_files: Sequence[Path] = (),
                   backups: Path | None = None, rewrite_backups_too: bool = True, wait_s: float = 60.0,
                   progress: bool = False,
                   on_progress: Progress | None = None, on_live: Callable[[], None] | None = None,
                   poll_s: float = 0.5, holders: Sequence[HoldsRemoved] = ()) -> dict:
    """Clear what the data folder derived from what ``erased`` took out of the store (the module's docstring says
    what and in which order). ``memo_files`` are the serving score and vector stores, emptied when texts were
    removed; ``backups``, the folder whose backups that began before the erasure are rewritten without it (with
    ``rewrite_backups_too`` and a user's erasure; otherwise the summary names them); ``on_live`` runs once the new
    generation is live (a service switches to it there); ``holders`` forget what was removed first, in the live data
    folder and in the store backups rewritten (``HoldsRemoved``). Returns a summary without any text or author id."""
    report = on_progress or (lambda stage, frac: None)
    root = settings.index_root
    out: dict = {}
    for h in holders if erased.texts or erased.posts else ():  # cheap, and kept by nothing the build could fail
        report(h.name, 0.01)
        out[h.name] = h.forget(erased)
    if current_generation(root) is not None:
        report("build", 0.05)
        built = build_afresh(settings, progress, lambda stage, frac: report(f"build: {stage}", 0.05 + 0.75 * frac))
        out["generation"] = built["generation"]
        out["build_seconds"] = built["seconds"]
        if on_live is not None:
            on_live()
    report("embedding cache", 0.82)
    out["cache_vectors_deleted"] = forget_vectors(settings, erased)
    if "generation" in out:
        report("older generations", 0.85)
        deadline = time.monotonic() + wait_s
        dropped, held = prune_before(root, out["generation"])
        while held and time.monotonic() < deadline:
            time.sleep(poll_s)
            more, held = prune_before(root, out["generation"])
            dropped += more
        out["generations_deleted"], out["generations_still_served"] = dropped, held
        if held:
            log.warning("erasure: %d older generations are still served after %.0f s and were kept: %s (delete "
                        "them once their processes have switched, or run the erasure again)", len(held), wait_s,
                        ", ".join(held))
    if erased.texts:
        report("memos", 0.95)
        out["memo_entries_deleted"] = sum(empty_cache_file(Path(p)) for p in memo_files)
    if backups is not None and rewrite_backups_too and (erased.rule is not None or erased.takedown):
        report("backups", 0.97)
        with closing(read_only(settings.store_path)) as conn:
            live = ledger.read(conn.cursor())  # with the erasure's record, which the exports then carry
        out.update(rewrite_backups(backups, erased, wait_s=wait_s, poll_s=poll_s, live=live, holders=holders))
    elif backups is not None:
        out["backups_before"] = [b.name for b in backups_in(backups) if began(b.name) < erased.at]
    if erased.texts:  # the store's write-ahead log, emptied at the removal unless a reader kept it then
        with closing(sqlite3.connect(settings.store_path, isolation_level=None)) as conn:
            conn.execute("PRAGMA busy_timeout=10000")
            out["store_wal_emptied"] = empty_wal(conn)
        if not out["store_wal_emptied"]:
            log.warning("erasure: the store's write-ahead log was still in use after 10 s; the next checkpoint "
                        "empties it")
    report("done", 1.0)
    return out
