"""Files sent to the service to be ingested (``POST /imports``): received to disk, kept until their ingest is done.

An upload is written as it comes to a hidden file in the data folder's ``imports/`` folder, never held in memory, and
refused past its size limit. Once whole it is flushed, its format told by its first bytes (gunzipped), and only then
named (``import-<UTC time>-<id>.<jsonl|xml>[.gz]``, beside its options as ``<name>.options.json``), the folder flushed
too: a named upload is accepted data, which a killed process does not lose. Its ingest (``cqa ingest``, run by the
service, ``app.imports``) deletes it when done; an upload still named when a service starts is one whose ingest was
cut off, and is ingested again (an ingest of the same threads twice changes nothing). A hidden file is an upload whose
request never completed (never acknowledged); it is deleted.
"""
from __future__ import annotations

import fcntl
import json
import os
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from .archives import ArchiveError, archive_kind, check_dump
from .backup import flushed, replace_with
from .loaders import Format, LoadError, _head, _sniffed

IMPORTS_FOLDER = "imports"
_PARTIAL = ".upload-"


class UploadError(Exception):
    """An upload refused: ``status`` (an HTTP status: 413 too large, 415 not a thread file, 400 empty) and why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class ImportOptions:
    """What ``cqa ingest`` is told about one upload (its flags)."""
    strict: bool = False
    mirror: bool = False
    max_remove: str | None = None  # a ``RemovalLimit`` as written (``25``, ``10%``), with ``mirror``

    def args(self) -> list[str]:
        return [*(["--strict"] if self.strict else []), *(["--mirror"] if self.mirror else []),
                *(["--max-remove", self.max_remove] if self.mirror and self.max_remove else [])]


def imports_folder(data_dir: Path) -> Path:
    return Path(data_dir) / IMPORTS_FOLDER


class ImportLock:
    """A data folder's import lock (``imports/.lock``), taken without waiting: ``held`` says whether it was. Held from
    an upload's first byte to its ingest's end, by whichever worker of a service took it."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
        except BlockingIOError:
            self.held = False
            self.release()

    def fileno(self) -> int | None:
        """The lock's file descriptor while it is held: a child process given it (``pass_fds``) holds the lock with
        this process, until both have ended (``flock`` locks the open file, which they share)."""
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with it
            self._fd = None


def import_running(folder: Path) -> bool:
    """Whether a service holds the folder's import lock now (tried shared, without waiting, and let go at once)."""
    if not (folder / ".lock").exists():
        return False
    fd = os.open(folder / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


class Upload:
    """One upload being received: ``write`` each chunk as it comes, then ``finish`` (or ``abort``)."""

    def __init__(self, folder: Path, limit: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.limit, self.size = folder, limit, 0
        self.id = uuid.uuid4().hex[:8]
        self.partial = folder / f"{_PARTIAL}{self.id}"
        self._fh = open(self.partial, "wb")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise UploadError(413, f"the file is over the limit of {self.limit} bytes (CQA_MAX_IMPORT_BYTES); split it, "
                              "or ingest it with `cqa ingest` on the service's machine")
        self._fh.write(chunk)

    def finish(self, options: ImportOptions) -> Path:
        """The upload flushed, its format told, and named beside its options: from here on it is not lost."""
        self._fh.close()
        if self.size == 0:
            raise UploadError(400, "the request body is empty: send the thread file itself (JSONL, gzipped or not, or "
                              "a StackExchange dump's Posts.xml)")
        with open(self.partial, "rb") as f:
            raw = f.read(8)
        if (kind := archive_kind(raw)) is not None:  # a StackExchange dump as the site publishes it
            try:
                check_dump(self.partial, kind)
            except ArchiveError as e:
                raise UploadError(415, f"not a thread file: a {kind} archive that is not one StackExchange dump: "
                                  f"{e.message}") from None
            suffix = kind
        else:
            try:
                fmt: Format = _sniffed(_head(self.partial))
            except LoadError as e:
                raise UploadError(415, f"not a thread file: {e.message} (send JSONL, gzipped or not, a StackExchange "
                                  "dump's .7z archive, or its Posts.xml)") from None
            gz = raw[:2] == b"\x1f\x8b"
            suffix = f"{'jsonl' if fmt == 'jsonl' else 'xml'}{'.gz' if gz else ''}"
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"import-{stamp}-{self.id}.{suffix}"
        final = self.folder / name
        aside = self.folder / f".{name}.options.json.tmp"
        aside.write_text(json.dumps(asdict(options)), encoding="utf-8")
        replace_with(aside, self.folder / f"{name}.options.json")  # each flushed, named, the folder flushed
        replace_with(self.partial, final)
        return final

    def abort(self) -> None:
        self._fh.close()
        self.partial.unlink(missing_ok=True)


def options_of(upload: Path) -> ImportOptions:
    """The options an upload was sent with (none where its file is missing: an upload of an older version)."""
    path = upload.with_name(upload.name + ".options.json")
    if not path.exists():
        return ImportOptions()
    return ImportOptions(**json.loads(path.read_text()))


def done_with(upload: Path) -> None:
    """An upload whose ingest is over, deleted with its options."""
    upload.with_name(upload.name + ".options.json").unlink(missing_ok=True)
    upload.unlink(missing_ok=True)
    flushed(upload.parent)


def pending(folder: Path) -> list[Path]:
    """The named uploads not yet ingested, oldest first (by name, which starts with the UTC time it came)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.startswith("import-")
                  and not p.name.endswith(".options.json"))


def drop_partial(folder: Path) -> list[str]:
    """The hidden files of uploads whose request never completed (a process killed mid-way), deleted."""
    if not folder.is_dir():
        return []
    gone = [p for p in folder.iterdir() if p.name.startswith(_PARTIAL)]
    for p in gone:
        p.unlink(missing_ok=True)
    return [p.name for p in gone]


__all__ = ["ImportLock", "ImportOptions", "Upload", "UploadError", "done_with", "drop_partial", "import_running",
           "imports_folder", "options_of", "pending"]
