"""Readers for thread files: every SemEval-2015/2016 Task 3 XML variant, our JSONL format, and a StackExchange
data dump's ``Posts.xml`` (``indexing.stackexchange``).

A file is read through before anything of it is written, so a file that cannot be read (a gzip file cut short, a
StackExchange dump that is not well-formed XML) leaves the store untouched. A malformed record is reported with the
file, the line and what was wrong; ``strict`` turns the first such report into an error, before anything is handed on.

Read with ``stream`` (as ``cqa ingest`` reads), a JSONL file and a StackExchange dump hand their threads on a batch at
a time (``LoadResult.batches``), so a forum of any size is read in bounded memory: a JSONL file is read again for its
threads after a first pass that checks it (a gzip file to its end; with ``strict``, or ``dated``, every record). A
SemEval file, a benchmark's and never large, is read whole. Standard input is spooled to a temporary file first.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Literal

from lxml import etree
from pydantic import ValidationError

from .archives import ArchiveError, ArchiveKind, archive_kind, unpack_dump
from .ledger import Held, from_line, is_ledger
from .models import Answer, Thread, is_synonyms, question_text, synonyms_of
from .stackexchange import BATCH_THREADS, DUMP_ROOTS, duplicate_links, root_of, stage_posts

Format = Literal["semeval", "jsonl", "stackexchange"]
FORMATS: tuple[str, ...] = ("semeval", "jsonl", "stackexchange")


class LoadError(Exception):
    """A file or record that could not be read, with where and why."""

    def __init__(self, path: Path | str, where: str, message: str):
        self.path, self.where, self.message = str(path), where, message
        super().__init__(f"{path}: {where}: {message}")


@dataclass
class OrgQuestion:
    """An original question of SemEval subtasks B and C, with its related threads in IR order."""
    id: str
    subject: str
    body: str
    thread_ids: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return question_text(self.subject, self.body)


@dataclass
class LoadResult:
    path: str
    threads: list[Thread] = field(default_factory=list)
    org_questions: dict[str, OrgQuestion] = field(default_factory=dict)
    errors: list[LoadError] = field(default_factory=list)
    ledger: Held | None = None  # an export's ledger line (``indexing.ledger``), where the file has one
    tag_synonyms: dict[str, str] | None = None  # an export's tag synonyms line (``models.synonyms_line``)
    passed_over: dict[str, int] = field(default_factory=dict)  # records (or whole files) that hold no thread, by kind
    # a streamed file's threads, a batch at a time (``load(..., stream=True)``; ``threads`` is then empty, and
    # ``errors`` complete once they are all read)
    batches: Iterator[list[Thread]] | None = None
    # a streamed file's newest post (question or comment), known before its batches: a dump's always, a JSONL file's
    # when read ``dated``
    newest: datetime | None = None
    # how much of a streamed file its batches have read so far, 0 to 1 (``load(..., stream=True)``)
    read_share: Callable[[], float] | None = None

    @property
    def answers(self) -> int:
        return sum(len(t.answers) for t in self.threads)

    def parts(self) -> Iterator[list[Thread]]:
        """The file's threads: its batches as they are made where it is streamed, else all of them at once."""
        if self.batches is not None:
            yield from self.batches
        elif self.threads:
            yield self.threads


def file_digest(path: Path) -> str:
    """A short content hash of a data file: names what a model or cache was built from."""
    import hashlib
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def detect_format(path: Path) -> Format:
    """By the file's name, and for XML by its root element: ``<posts>``, ``<users>``... are a StackExchange dump's."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".xml"):
        return "stackexchange" if root_of(_head(path)) in DUMP_ROOTS else "semeval"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    raise LoadError(path, "file name", "cannot tell the format from the name; "
                    "expected .xml, .xml.gz, .jsonl or .jsonl.gz, or pass --format")


STDIN = Path("-")  # standard input, as a path: `cqa export | cqa ingest -`


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; folders become the thread files they hold, sorted; ``-`` is standard input (once)."""
    out: list[Path] = []
    for p in paths:
        if p == STDIN:
            if STDIN in out:
                raise LoadError(p, "path", "standard input named twice")
            out.append(p)
        elif p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and
                          q.name.lower().removesuffix(".gz").endswith((".xml", ".jsonl", ".ndjson")))
        elif p.exists():
            out.append(p)
        else:
            raise LoadError(p, "path", "no such file or folder")
    return out


def load(path: Path | str, fmt: Format | None = None, strict: bool = False, stream: bool = False,
         dated: bool = False) -> LoadResult:
    """One file's threads (``-``: standard input, spooled to a temporary file as it is read, its format told by its
    first bytes unless ``fmt``). With ``stream``, a JSONL file's or a StackExchange dump's threads come in batches
    (``LoadResult.batches``), so a file of millions of threads is never held whole; with ``dated`` too, a JSONL
    file's newest post is known before its batches (``LoadResult.newest``, a dump's always is), at the cost of
    reading it twice. A SemEval file is read whole all the same."""
    path = Path(path)
    spool = _spooled_stdin() if path == STDIN else None
    file = Path(spool.name) if spool is not None else path
    try:
        if (kind := archive_kind(_raw_head(path, file))) is not None:
            if fmt not in (None, "stackexchange"):
                raise LoadError(path, "format", f"a {kind} archive is read as a StackExchange dump, not {fmt}")
            return load_dump_archive(path, kind, strict=strict, file=file, stream=stream)
        fmt = fmt or (_sniffed(_head(file)) if spool is not None else detect_format(path))
        if fmt == "semeval":
            return load_semeval(path, strict=strict, file=file)
        if fmt == "jsonl":
            return load_jsonl(path, strict=strict, file=file, stream=stream, dated=dated, spool=spool)
        if fmt == "stackexchange":
            return load_stackexchange(path, strict=strict, file=file, stream=stream)
        raise LoadError(path, "format", f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    finally:  # a streamed JSONL file's batches keep their spool until they are read
        if spool is not None and not (fmt == "jsonl" and stream):
            spool.close()


def _raw_head(path: Path, file: Path) -> bytes:
    """A file's first bytes as they are (not gunzipped): enough to tell an archive."""
    try:
        with file.open("rb") as f:
            return f.read(8)
    except OSError as e:
        raise LoadError(path, "file", f"cannot read: {e}") from None


def load_dump_archive(path: Path, kind: ArchiveKind, strict: bool = False, file: Path | None = None,
                      stream: bool = False) -> LoadResult:
    """A StackExchange dump as downloaded, one site's ``.7z`` (or ``.zip``) archive (``indexing.archives``): its
    ``Posts.xml`` and the ``PostLinks.xml`` beside it unpacked into ``$TMPDIR``, read as an unpacked dump's (staged,
    so the unpacked files are deleted before the threads are made), the archive's other files passed over. Errors
    name the archive and the member (``site.7z/Posts.xml: line 12 ...``)."""
    file = file or path
    try:
        folder = tempfile.TemporaryDirectory(prefix="cqa-unpack-")
    except OSError as e:
        raise LoadError(path, "unpacking", f"cannot make a folder in {tempfile.gettempdir()}: {e}") from None
    with folder:
        try:
            unpacked = unpack_dump(file, kind, Path(folder.name))
        except ArchiveError as e:
            raise LoadError(path, e.where, e.message) from None
        except OSError as e:
            raise LoadError(path, "unpacking", f"cannot unpack its Posts.xml in {tempfile.gettempdir()}: {e}; set "
                            "TMPDIR to a folder with room for it") from None
        result = load_stackexchange(path / "Posts.xml", strict=strict, file=unpacked.posts, stream=stream,
                                    links=unpacked.links)
    result.passed_over = dict(Counter(result.passed_over) + unpacked.passed_over)
    return result


def _spooled_stdin() -> "tempfile._TemporaryFileWrapper":
    """Standard input copied as it is read into a temporary file (``$TMPDIR``), removed when closed."""
    try:
        spool = tempfile.NamedTemporaryFile(prefix="cqa-stdin-")
    except OSError as e:
        raise LoadError(STDIN, "input", f"cannot spool it in {tempfile.gettempdir()}: {e}") from None
    try:
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        spool.flush()
    except OSError as e:
        spool.close()
        raise LoadError(STDIN, "input", f"cannot read it, or spool it in {tempfile.gettempdir()}: {e}; set TMPDIR to "
                        "a folder with room for it") from None
    return spool


def _sniffed(head: bytes) -> Format:
    """Standard input's format from its first bytes (gunzipped): XML starts with ``<`` (a StackExchange dump's by its
    root element), JSONL with ``{`` (after any byte-order mark and blanks)."""
    first = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if first == b"<":
        return "stackexchange" if root_of(head) in DUMP_ROOTS else "semeval"
    if first in (b"{", b""):
        return "jsonl"
    raise LoadError(STDIN, "input", "neither XML nor JSONL; pass --format")


HEAD_BYTES = 4096  # enough of an XML file to find its root element


def _head(path: Path) -> bytes:
    """A file's first bytes (gunzipped), enough to find an XML file's root element without reading it whole."""
    try:
        with _stream(path) as f:
            return f.read(HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise LoadError(path, "file", f"cannot read: {e}") from e


def _stream(path: Path) -> BinaryIO:
    """A file opened for reading as it is parsed, gunzipped if it is gzipped."""
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else path.open("rb")


def _read_bytes(path: Path, file: Path | None = None) -> bytes:
    """``path``'s bytes (read from ``file`` where given: standard input's spool), gunzipped if it is gzipped."""
    try:
        raw = (file or path).read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise LoadError(path, "file", f"cannot read: {e}") from e


# --- SemEval XML --------------------------------------------------------------------

def _attr(el: etree._Element, name: str) -> str | None:
    v = el.get(name)
    return v.strip() if v and v.strip() else None


def _text(el: etree._Element | None) -> str:
    return (el.text or "").strip() if el is not None else ""


def _required(el: etree._Element, name: str) -> str:
    v = _attr(el, name)
    if v is None:
        raise ValueError(f"<{el.tag}> has no {name} attribute")
    return v


def _semeval_thread(th: etree._Element, orgq_id: str | None) -> Thread:
    rq = th.find("RelQuestion")
    if rq is None:
        raise ValueError("<Thread> has no <RelQuestion>")
    tid = _required(rq, "RELQ_ID")
    meta: dict[str, object] = {"source": "semeval"}
    if orgq_id:
        meta["orgq_id"] = orgq_id
    for key, attr in (("relevance2orgq", "RELQ_RELEVANCE2ORGQ"), ("ranking_order", "RELQ_RANKING_ORDER"),
                      ("username", "RELQ_USERNAME")):
        if (v := _attr(rq, attr)) is not None:
            meta[key] = int(v) if key == "ranking_order" else v
    if (skip := _attr(th, "SubtaskA_Skip_Because_Same_As_RelQuestion_ID")) is not None:
        meta["subtaskA_skip_same_as"] = skip
    answers = []
    for c in th.iterfind("RelComment"):
        try:
            cid = _required(c, "RELC_ID")
        except ValueError as e:
            raise ValueError(f"{e} (line {c.sourceline})") from None
        ameta = {}
        if (v := _attr(c, "RELC_RELEVANCE2ORGQ")) is not None:
            ameta["relevance2orgq"] = v
        if (v := _attr(c, "RELC_USERNAME")) is not None:
            ameta["username"] = v
        answers.append(Answer(id=cid, text=_text(c.find("RelCText")), created_at=_attr(c, "RELC_DATE"),
                              author_id=_attr(c, "RELC_USERID"), label=_attr(c, "RELC_RELEVANCE2RELQ"),
                              meta=ameta))
    return Thread(id=tid, subject=_text(rq.find("RelQSubject")), body=_text(rq.find("RelQBody")),
                  category=_attr(rq, "RELQ_CATEGORY"), created_at=_attr(rq, "RELQ_DATE"),
                  author_id=_attr(rq, "RELQ_USERID"), answers=answers, meta=meta)


def _arabic_threads(q: etree._Element) -> Iterator[Thread]:
    """Subtask D: each QApair becomes a one-answer thread ``<QID>_<QAID>``."""
    qid = _required(q, "QID")
    for pair in q.iterfind("QApair"):
        try:
            qaid = _required(pair, "QAID")
        except ValueError as e:
            raise ValueError(f"{e} (line {pair.sourceline})") from None
        tid = f"{qid}_{qaid}"
        meta = {"source": "semeval", "orgq_id": qid, "qaid": qaid}
        if (rel := _attr(pair, "QArel")) is not None:
            meta["relevance2orgq"] = rel
        yield Thread(id=tid, body=_text(pair.find("QAquestion")), meta=meta,
                     answers=[Answer(id=f"{tid}_A", text=_text(pair.find("QAanswer")))])


def load_semeval(path: Path, strict: bool = False, file: Path | None = None) -> LoadResult:
    raw = _read_bytes(path, file)
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True, recover=False)
    try:
        root = etree.parse(io.BytesIO(raw), parser).getroot()
    except etree.XMLSyntaxError as e:
        line = getattr(e, "lineno", None) or (e.position[0] if getattr(e, "position", None) else "?")
        raise LoadError(path, f"line {line}", f"not well-formed XML: {e.msg}") from None
    result = LoadResult(path=str(path))

    def record(where: str, make) -> None:
        try:
            result.threads.extend(make())
        except (ValueError, ValidationError) as e:
            err = LoadError(path, where, _short(e))
            if strict:
                raise err from None
            result.errors.append(err)

    for el in root:
        if not isinstance(el.tag, str):
            continue
        where = f"line {el.sourceline} <{el.tag}>"
        if el.tag == "OrgQuestion":
            oid = _attr(el, "ORGQ_ID")
            if oid is None:
                record(where, lambda: (_ for _ in ()).throw(ValueError("<OrgQuestion> has no ORGQ_ID")))
                continue
            oq = result.org_questions.setdefault(
                oid, OrgQuestion(oid, _text(el.find("OrgQSubject")), _text(el.find("OrgQBody"))))
            for th in el.iterfind("Thread"):
                n_before = len(result.threads)
                record(f"line {th.sourceline} <Thread>", lambda th=th, oid=oid: [_semeval_thread(th, oid)])
                if len(result.threads) > n_before:
                    oq.thread_ids.append(result.threads[-1].id)
        elif el.tag == "Thread":
            record(where, lambda el=el: [_semeval_thread(el, None)])
        elif el.tag == "Question":
            record(where, lambda el=el: list(_arabic_threads(el)))
            if (qid := _attr(el, "QID")) is not None:
                result.org_questions[qid] = OrgQuestion(qid, "", _text(el.find("Qtext")),
                                                        [f"{qid}_{_attr(p, 'QAID')}" for p in el.iterfind("QApair")])
        else:
            err = LoadError(path, where, f"unexpected element <{el.tag}>; expected OrgQuestion, Thread or Question")
            if strict:
                raise err
            result.errors.append(err)
    return result


# --- StackExchange data dumps -------------------------------------------------------

def load_stackexchange(path: Path, strict: bool = False, file: Path | None = None, stream: bool = False,
                       links: Path | None | Literal["beside"] = "beside") -> LoadResult:
    """A StackExchange dump's ``Posts.xml`` as threads, with the duplicate links of the ``PostLinks.xml`` beside it
    (``indexing.stackexchange``). The dump's other files hold no thread: each is passed over (``passed_over``) from
    its first bytes, without reading it whole. The file is parsed as it is read and staged on disk
    (``stage_posts``); with ``stream``, its threads are then made a batch at a time as ``batches`` is read, so only
    one batch is held. With ``strict``, every row is checked before anything is handed on. ``file``: where its bytes
    are, if not at ``path`` (standard input's spool, an archive's unpacked member); ``links``: its PostLinks.xml,
    where it is not the one beside ``path`` (None: none)."""
    file = file or path
    head = _head(file)
    root = root_of(head)
    if root != "posts":
        if root in DUMP_ROOTS:
            return LoadResult(path=str(path), passed_over={f"StackExchange {DUMP_ROOTS[root]} (no threads)": 1})
        raise LoadError(path, "root element", f"<{root}> is not a StackExchange dump's; expected <posts> "
                        "(Posts.xml)")
    result = LoadResult(path=str(path))
    if links == "beside":
        links = None if path == STDIN else next(
            (q for q in sorted(path.parent.iterdir()) if q.is_file() and q.name.lower().removesuffix(".gz") ==
             "postlinks.xml"), None)
    duplicates: dict[str, list[str]] = {}
    if links is not None:
        try:
            with _stream(links) as f:
                duplicates = duplicate_links(f)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise LoadError(path.parent / links.name, "file", f"cannot read: {e}") from None
        except etree.XMLSyntaxError as e:
            err = LoadError(path.parent / links.name, f"line {e.lineno or '?'}",
                            f"not well-formed XML, so no duplicate links: {e.msg}")
            if strict:
                raise err from None
            result.errors.append(err)
    try:
        with _stream(file) as source:
            staged = stage_posts(source)  # parsed as it is read, not held whole
    except etree.XMLSyntaxError as e:
        raise LoadError(path, f"line {e.lineno or '?'}", f"not well-formed XML: {e.msg}") from None
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise LoadError(path, "file", f"cannot read: {e}") from None
    except sqlite3.Error as e:  # the temporary folder full, most likely
        raise LoadError(path, "staging", f"cannot stage its rows in {tempfile.gettempdir()}: {e}; set TMPDIR to a "
                        "folder with room for the dump's text") from None
    result.passed_over = dict(staged.passed_over)

    def errors() -> list[LoadError]:
        return [LoadError(path, where, why if isinstance(why, str) else _short(why)) for _, where, why in staged.errors]
    if strict:
        if not staged.errors:
            for _ in staged.batches(duplicates):  # a question that makes no thread stops the file too
                pass
        if staged.errors:
            staged.close()
            raise errors()[0]
    if not stream:
        with staged:
            result.threads = [t for batch in staged.batches(duplicates) for t in batch]
        result.errors += errors()
        return result

    def batches() -> Iterator[list[Thread]]:
        try:
            yield from staged.batches(duplicates)
            result.errors.extend(errors())
        finally:
            staged.close()
    result.batches, result.newest, result.read_share = batches(), staged.newest, staged.share_made
    return result


# --- JSONL --------------------------------------------------------------------------

def load_jsonl(path: Path, strict: bool = False, file: Path | None = None, stream: bool = False,
               dated: bool = False, spool=None) -> LoadResult:
    """A JSONL file's threads, one a line (``docs/data-format.md``), and the ledger line an export starts with.
    ``file``: where its bytes are, if not at ``path`` (standard input's ``spool``, closed once its batches are read).

    Whole, or with ``stream`` a batch at a time (``BATCH_THREADS``), the file read again for them after a first pass:
    with ``strict`` or ``dated``, every record is checked in it (the first bad one raised with ``strict``), and its
    newest post found; otherwise only its first line (a ledger) is read, and a gzip file decompressed to its end, so a
    file cut short is an error before anything is handed on. A record the first pass found bad is skipped again
    silently; ``errors`` are complete once the batches are read."""
    reader = _JsonlReader(path, file or path, strict)
    result = reader.result
    if not stream:
        result.threads = list(reader.threads())
        return result
    try:
        if strict or dated:
            result.newest = max((when for t in reader.threads() if (when := t.newest_post()) is not None),
                                default=None)
            reader.checked = True
        else:
            reader.check_readable()
    except BaseException:
        if spool is not None:
            spool.close()
        raise

    def batches() -> Iterator[list[Thread]]:
        try:
            batch: list[Thread] = []
            for t in reader.threads():
                batch.append(t)
                if len(batch) == BATCH_THREADS:
                    yield batch
                    batch = []
            if batch:
                yield batch
        finally:
            if spool is not None:
                spool.close()
    result.batches, result.read_share = batches(), reader.read_share
    return result


_HEADER = object()  # what ``_JsonlReader._record`` gives for an export's ledger or tag synonyms line


class _JsonlReader:
    """A JSONL file read as it is parsed, as often as asked: the bad lines that one reading reports (in
    ``result.errors``, or raised with ``strict``) are skipped silently by the next."""

    def __init__(self, path: Path, file: Path, strict: bool):
        self.path, self.file, self.strict = path, file, strict
        self.result = LoadResult(path=str(path))
        self.bad: set[int] = set()  # the line numbers of the records reported
        self.checked = False  # every record read once, and the bad ones reported
        self._reading: BinaryIO | None = None  # the file as ``threads`` reads it

    def _open(self) -> BinaryIO:
        try:
            return _stream(self.file)
        except OSError as e:
            raise LoadError(self.path, "file", f"cannot read: {e}") from None

    def read_share(self) -> float:
        """How much of the file ``threads`` has read: its (compressed) bytes read over its size, 0 to 1."""
        f = self._reading
        if f is None:
            return 0.0
        if f.closed:  # read to its end (or given up on)
            return 1.0
        try:
            raw = f.fileobj if isinstance(f, gzip.GzipFile) else f  # a gzip file's compressed bytes read
            return min(raw.tell() / max(os.fstat(raw.fileno()).st_size, 1), 1.0)
        except (OSError, ValueError, AttributeError):
            return 0.0

    def check_readable(self) -> None:
        """The lines before its first thread read (an export's ledger and tag synonyms), and a gzip file decompressed
        to its end (nothing else parsed)."""
        with self._open() as f:
            try:
                first = True
                for lineno, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    # a bad one is reported now, and skipped when the threads are read
                    if self._record(lineno, line, first) is not _HEADER:
                        break
                    first = False
                while isinstance(f, gzip.GzipFile) and f.read(1 << 20):  # a plain file has no end to check
                    pass
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
                raise LoadError(self.path, "file", f"cannot read: {e}") from None

    def threads(self) -> Iterator[Thread]:
        seen: set[str] = set()
        first, lineno = True, 0
        with self._open() as f:
            self._reading = f
            try:
                for lineno, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    is_first, first = first, False
                    if lineno in self.bad:
                        continue
                    thread = self._record(lineno, line, is_first, seen)
                    if isinstance(thread, Thread):
                        yield thread
            except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
                raise LoadError(self.path, f"after line {lineno}", f"cannot read: {e}") from None

    def _record(self, lineno: int, line: bytes, first: bool,
                seen: set[str] | None = None) -> Thread | object | None:
        """The line's thread; ``_HEADER`` for the ledger line (kept in ``result.ledger``) or the tag synonyms line (in
        ``result.tag_synonyms``); None for a bad record (reported). ``seen``: the ids of the threads read so far."""
        try:
            try:
                text = line.decode("utf-8-sig" if first else "utf-8")  # a byte-order mark before the first record
            except UnicodeDecodeError as e:
                raise ValueError(f"invalid UTF-8 at byte {e.start} of the line") from None
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"invalid JSON: {e.msg} at column {e.colno}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object (a thread), got {type(obj).__name__}")
            if is_ledger(obj):  # an export's first line: its store's erasures and takedowns
                if not first:
                    raise ValueError("a ledger line (an export's erasures and takedowns) is read only as a file's "
                                     "first line")
                self.result.ledger = from_line(obj)
                return _HEADER
            if is_synonyms(obj):  # an export's, after its ledger line
                if seen:
                    raise ValueError("a tag synonyms line (an export's) is read only before the file's first thread")
                self.result.tag_synonyms = synonyms_of(obj)
                return _HEADER
            thread = Thread.model_validate(obj)
            if seen is not None:
                if thread.id in seen:
                    raise ValueError(f"thread id {thread.id!r} appears twice in this file")
                seen.add(thread.id)
            return thread
        except (ValueError, ValidationError) as e:
            self.bad.add(lineno)
            if self.checked:
                return None
            err = LoadError(self.path, f"line {lineno}", _short(e))
            if self.strict:
                raise err from None
            self.result.errors.append(err)
            return None


def _short(e: Exception) -> str:
    if isinstance(e, ValidationError):
        parts = []
        for d in e.errors()[:3]:
            loc = ".".join(str(x) for x in d["loc"]) or "record"
            parts.append(f"{loc}: {d['msg']}")
        return "; ".join(parts)
    return str(e)
