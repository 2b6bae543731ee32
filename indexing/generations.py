"""Index generations: self-describing directories published atomically under one ``current`` pointer.

Layout under the index root::

    current                 # one line: the live generation's name (replaced atomically)
    gen-20261121T150000Z-ab12/
        manifest.json       # kind, format version, parameters, counts, model, build time
        documents.bin       # ids, kinds, threads, categories, dates, texts: row order of every index
        terms/ bm25/ lm/ dense/
        answer_vectors/     # the answer encoder's vector of each comment by row (indexing.rowvectors), if built
    .tmp-gen-.../           # a build in progress; never read, removed by the next reindex

A reindex that dies before the pointer moves leaves the live generation untouched.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

FORMAT = "cqa-index-generation"
FORMAT_VERSION = 1
POINTER = "current"
ANSWER_VECTORS = "answer_vectors"  # a folder; older generations' one file answer_vectors.npy still loads


class IndexFormatError(Exception):
    """An index directory this code cannot read; the message says what and what to do."""


def read_manifest(folder: Path, kind: str, version: int) -> dict:
    path = folder / "manifest.json"
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"{path} is missing: not an index directory; run `cqa reindex`") from None
    except json.JSONDecodeError as e:
        raise IndexFormatError(f"{path} is not valid JSON ({e}); run `cqa reindex`") from None
    if m.get("kind") != kind:
        raise IndexFormatError(f"{path}: kind {m.get('kind')!r}, expected {kind!r}")
    if m.get("format_version") != version:
        raise IndexFormatError(f"{path}: format version {m.get('format_version')!r} of {kind!r} is unknown to "
                               f"this code (reads version {version}); rebuild with `cqa reindex`")
    return m


def link_or_copy(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` too, as a hard link; a copy where the file system has none. Published generations are never
    written again, so sharing their files is safe."""
    import shutil
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(folder)


def current_generation(root: Path) -> str | None:
    p = root / POINTER
    try:
        name = p.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return name if name and (root / name / "manifest.json").exists() else None


def publish(root: Path, tmp: Path, name: str) -> Path:
    """Move a finished build into place and point ``current`` at it, each step atomic."""
    fsync_tree(tmp)
    final = root / name
    os.rename(tmp, final)
    _fsync_dir(root)
    point_current(root, name)
    return final


def point_current(root: Path, name: str) -> None:
    """The ``current`` pointer names generation ``name``: written aside, flushed, then replaced in one step."""
    ptr_tmp = root / f".{POINTER}.tmp"
    with open(ptr_tmp, "w", encoding="utf-8") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(ptr_tmp, root / POINTER)
    _fsync_dir(root)


def list_generations(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("gen-"))


LEASES = ".leases"


def write_lease(root: Path, holder: str, generation: str, ttl_s: float) -> None:
    """A reader's claim on the generation it serves, until ``ttl_s`` from now: prune leaves it alone. A
    reader renews it while it lives; one killed with kill -9 stops renewing, and its lease expires."""
    folder = root / LEASES
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{holder}.tmp"
    tmp.write_text(json.dumps({"generation": generation, "pid": os.getpid(), "expires_at": time.time() + ttl_s}),
                   encoding="utf-8")
    os.replace(tmp, folder / f"{holder}.json")


def drop_lease(root: Path, holder: str) -> None:
    (root / LEASES / f"{holder}.json").unlink(missing_ok=True)


def leases(root: Path) -> dict[Path, dict]:
    """Every lease file and what it says (generation, pid, expires_at), by holder name order, expired ones too."""
    out = {}
    folder = root / LEASES
    for p in sorted(folder.glob("*.json")) if folder.exists() else ():
        try:
            out[p] = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now: its holder is alive
    return out


def leased_generations(root: Path, now: float | None = None) -> set[str]:
    """Generations some reader holds an unexpired lease on (expired lease files are removed)."""
    now = time.time() if now is None else now
    out = set()
    for p, lease in leases(root).items():
        if lease.get("expires_at", 0) > now:
            out.add(lease["generation"])
        else:
            p.unlink(missing_ok=True)
    return out


def prune(root: Path, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` generations; never the live one, nor one a reader still serves."""
    gens = list_generations(root)
    return remove_unserved(root, gens[: max(0, len(gens) - keep)])[0]


def prune_before(root: Path, name: str) -> tuple[list[str], list[str]]:
    """Remove every generation built before ``name`` (names sort by build time) that no process serves: an
    erasure's, whose older generations hold what it erased. The ones removed, and the ones still served."""
    return remove_unserved(root, [g for g in list_generations(root) if g < name])


def remove_unserved(root: Path, names: list[str]) -> tuple[list[str], list[str]]:
    """Remove those of the generations ``names`` that are neither live nor leased by a reader: the ones removed,
    and the ones kept because a process serves them."""
    live, leased = current_generation(root), leased_generations(root)
    removed, served = [], []
    for name in names:
        if name == live or name in leased:
            served.append(name)
        else:
            shutil.rmtree(root / name, ignore_errors=True)
            removed.append(name)
    return removed, served


def remove_stale_builds(root: Path) -> list[str]:
    removed = []
    if root.exists():
        for p in root.iterdir():
            if p.is_dir() and p.name.startswith(".tmp-"):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
    return removed
