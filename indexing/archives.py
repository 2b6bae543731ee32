"""A StackExchange data dump as it is downloaded: one site's archive (``site.stackexchange.com.7z`` from the Internet
Archive; a ``.zip`` too), read without unpacking it by hand.

Only the two files that hold threads are unpacked, ``Posts.xml`` and the ``PostLinks.xml`` beside it, into a
temporary folder (``$TMPDIR``), flat, under names of this module's choosing (a member's own path is never written
to); the loader then stages ``Posts.xml`` as it does an unpacked dump's (``indexing.stackexchange``), after which the
folder is deleted. The archive's other files (users, votes, comments, badges...) are counted as passed over. An
archive that holds no ``Posts.xml``, or more than one (several sites), is refused with what it holds.
"""
from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from .stackexchange import DUMP_ROOTS

ArchiveKind = Literal["7z", "zip"]
_MAGIC: dict[bytes, ArchiveKind] = {b"7z\xbc\xaf\x27\x1c": "7z", b"PK\x03\x04": "zip"}
POSTS, LINKS = "Posts.xml", "PostLinks.xml"
_DUMP_FILES = {name.lower(): name for name in DUMP_ROOTS.values()}


class ArchiveError(Exception):
    """An archive that cannot be read as a dump: ``where`` (a place in it, or what was being done) and why."""

    def __init__(self, where: str, message: str):
        super().__init__(message)
        self.where, self.message = where, message


def archive_kind(head: bytes) -> ArchiveKind | None:
    """The archive a file is, by its first bytes (7z or zip), or None."""
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)


@dataclass
class Unpacked:
    """What ``unpack_dump`` took out: ``posts`` (and ``links`` where the archive has them beside it), in a folder of
    their own, and the archive's other files counted by kind (``passed_over``)."""
    posts: Path
    links: Path | None
    passed_over: Counter = field(default_factory=Counter)


def _members(files: list[str]) -> tuple[str, str | None, Counter]:
    """The archive's ``Posts.xml`` member, the ``PostLinks.xml`` in the same folder, and the rest counted (``files``:
    its members' names, folders left out)."""
    for n in files:
        p = PurePosixPath(n.replace("\\", "/"))
        if p.is_absolute() or ".." in p.parts:
            raise ArchiveError(n, "a member named outside the archive's folder; refused")
    posts = [n for n in files if PurePosixPath(n).name.lower() == POSTS.lower()]
    if len(posts) != 1:
        some = ", ".join(files[:8]) + ("..." if len(files) > 8 else "")
        why = (f"holds {len(posts)} Posts.xml files ({', '.join(posts[:4])}): send one site's dump at a time" if posts
               else f"holds no Posts.xml, so no StackExchange dump's threads ({some or 'no files'})")
        raise ArchiveError("members", why)
    folder = PurePosixPath(posts[0]).parent
    links = next((n for n in files if PurePosixPath(n).parent == folder and
                  PurePosixPath(n).name.lower() == LINKS.lower()), None)
    rest: Counter = Counter()
    for n in files:
        if n not in (posts[0], links):
            known = _DUMP_FILES.get(PurePosixPath(n).name.lower())
            rest[f"StackExchange {known} (no threads)" if known else "files not of a StackExchange dump"] += 1
    return posts[0], links, rest


@contextmanager
def _opened(archive: Path, kind: ArchiveKind) -> Iterator[tuple[Any, str, str | None, Counter]]:
    """The archive open, with its ``Posts.xml``, ``PostLinks.xml`` and other members (``_members``). Whatever the
    archive's reader raises inside is an ArchiveError (the disk's OSError, which is not the archive's fault, aside)."""
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as z:
                yield (z, *_members([i.filename for i in z.infolist() if not i.is_dir()]))
            return
        import py7zr
        import py7zr.py7zr as reader
        # py7zr decompresses a member in chunks of up to 128 MB held in memory (``get_memory_limit``), so a dump's
        # unpacking would hold about twice its Posts.xml up to that: chunks of 4 MiB keep it to the codec's own
        reader.get_memory_limit = _chunk_bytes
        with py7zr.SevenZipFile(archive, mode="r") as z:
            if z.needs_password():
                raise ArchiveError("7z", "it is encrypted; send the dump as the site published it")
            yield (z, *_members([i.filename for i in z.list() if not i.is_directory]))
    except (ArchiveError, OSError):
        raise
    except Exception as e:  # zipfile's, py7zr's and the codecs' (lzma, zstd...) on a damaged or foreign file
        raise ArchiveError(kind, f"cannot read it: {type(e).__name__}: {e}") from None


def _chunk_bytes() -> int:
    return 4 << 20


def check_dump(archive: Path, kind: ArchiveKind) -> None:
    """ArchiveError unless ``archive`` is a readable archive of one dump (its list of members read, nothing
    unpacked): what an upload is checked by before it is accepted."""
    with _opened(archive, kind):
        pass


def unpack_dump(archive: Path, kind: ArchiveKind, into: Path) -> Unpacked:
    """``Posts.xml`` (and the ``PostLinks.xml`` beside it) of the dump ``archive`` written into the folder ``into`` as
    ``Posts.xml`` and ``PostLinks.xml``. ArchiveError when it is not a readable archive of one dump; OSError when
    ``into`` cannot take them."""
    staging = Path(tempfile.mkdtemp(prefix="members-", dir=into))  # a 7z's members land under their own paths here
    try:
        with _opened(archive, kind) as (z, posts, links, rest):
            wanted = [(member, name) for member, name in ((posts, POSTS), (links, LINKS)) if member is not None]
            if kind == "zip":
                for member, name in wanted:
                    with z.open(member) as src, open(into / name, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
            else:
                z.extract(path=staging, targets=[member for member, _ in wanted])
                for member, name in wanted:
                    (staging / member).replace(into / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Unpacked(into / POSTS, into / LINKS if links else None, rest)


__all__ = ["ArchiveError", "ArchiveKind", "Unpacked", "archive_kind", "check_dump", "unpack_dump"]
