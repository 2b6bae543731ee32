"""Readers for thread files: every SemEval-2015/2016 Task 3 XML variant, our JSONL format, and a StackExchange
data dump's ``Posts.xml`` (``indexing.stackexchange``).

A loader parses a whole file before anything is written, so a file that cannot be read
(truncated, not UTF-8) leaves the store untouched. A malformed record is reported with the
file, the line and what was wrong; ``strict`` turns the first such report into an error.
"""
from __future__ import annotations

import gzip
import io
import json
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Literal

from lxml import etree
from pydantic import ValidationError

from .ledger import Held, from_line, is_ledger
from .models import Answer, Thread, question_text
from .stackexchange import DUMP_ROOTS, duplicate_links, root_of, stage_posts

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
    passed_over: dict[str, int] = field(default_factory=dict)  # records (or whole files) that hold no thread, by kind
    # a streamed file's threads, a batch at a time (``load(..., stream=True)``; ``threads`` is then empty, and
    # ``errors`` complete once they are all read)
    batches: Iterator[list[Thread]] | None = None
    newest: datetime | None = None  # a streamed file's newest post (question or comment), known before its batches

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


def load(path: Path | str, fmt: Format | None = None, strict: bool = False, stream: bool = False) -> LoadResult:
    """One file's threads (``-``: standard input, read whole, its format told by its first byte unless ``fmt``).
    With ``stream``, a StackExchange dump's threads come in batches (``LoadResult.batches``), so a dump of millions
    of posts is never held whole; the other formats are read whole all the same."""
    path = Path(path)
    raw = _read_bytes(path) if path == STDIN else None
    fmt = fmt or (_sniffed(raw) if raw is not None else detect_format(path))
    if fmt == "semeval":
        return load_semeval(path, strict=strict, raw=raw)
    if fmt == "jsonl":
        return load_jsonl(path, strict=strict, raw=raw)
    if fmt == "stackexchange":
        return load_stackexchange(path, strict=strict, raw=raw, stream=stream)
    raise LoadError(path, "format", f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _sniffed(raw: bytes) -> Format:
    """Standard input's format: XML starts with ``<`` (a StackExchange dump's by its root element), JSONL with ``{``
    (after any byte-order mark and blanks)."""
    head = raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head == b"<":
        return "stackexchange" if root_of(raw[:HEAD_BYTES]) in DUMP_ROOTS else "semeval"
    if head in (b"{", b""):
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


def _read_bytes(path: Path) -> bytes:
    try:
        raw = sys.stdin.buffer.read() if path == STDIN else path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, gzip.BadGzipFile) as e:
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


def load_semeval(path: Path, strict: bool = False, raw: bytes | None = None) -> LoadResult:
    raw = _read_bytes(path) if raw is None else raw
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

def load_stackexchange(path: Path, strict: bool = False, raw: bytes | None = None, stream: bool = False) -> LoadResult:
    """A StackExchange dump's ``Posts.xml`` as threads, with the duplicate links of the ``PostLinks.xml`` beside it
    (``indexing.stackexchange``). The dump's other files hold no thread: each is passed over (``passed_over``) from
    its first bytes, without reading it whole. The file is parsed as it is read and staged on disk
    (``stage_posts``); with ``stream``, its threads are then made a batch at a time as ``batches`` is read, so only
    one batch is held. With ``strict``, every row is checked before anything is handed on."""
    head = raw[:HEAD_BYTES] if raw is not None else _head(path)
    root = root_of(head)
    if root != "posts":
        if root in DUMP_ROOTS:
            return LoadResult(path=str(path), passed_over={f"StackExchange {DUMP_ROOTS[root]} (no threads)": 1})
        raise LoadError(path, "root element", f"<{root}> is not a StackExchange dump's; expected <posts> "
                        "(Posts.xml)")
    result = LoadResult(path=str(path))
    links = None if path == STDIN else next(
        (q for q in sorted(path.parent.iterdir()) if q.is_file() and q.name.lower().removesuffix(".gz") ==
         "postlinks.xml"), None)
    duplicates: dict[str, list[str]] = {}
    if links is not None:
        try:
            with _stream(links) as f:
                duplicates = duplicate_links(f)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise LoadError(links, "file", f"cannot read: {e}") from None
        except etree.XMLSyntaxError as e:
            err = LoadError(links, f"line {e.lineno or '?'}", f"not well-formed XML, so no duplicate links: {e.msg}")
            if strict:
                raise err from None
            result.errors.append(err)
    try:
        with (nullcontext(raw) if raw is not None else _stream(path)) as source:
            staged = stage_posts(source)  # parsed as it is read, not held whole
    except etree.XMLSyntaxError as e:
        raise LoadError(path, f"line {e.lineno or '?'}", f"not well-formed XML: {e.msg}") from None
    except (OSError, EOFError, gzip.BadGzipFile) as e:
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
    result.batches, result.newest = batches(), staged.newest
    return result


# --- JSONL --------------------------------------------------------------------------

def load_jsonl(path: Path, strict: bool = False, raw: bytes | None = None) -> LoadResult:
    raw = _read_bytes(path) if raw is None else raw
    result = LoadResult(path=str(path))
    seen: set[str] = set()
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"invalid UTF-8 at byte {e.start} of the line") from None
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"invalid JSON: {e.msg} at column {e.colno}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object (a thread), got {type(obj).__name__}")
            if is_ledger(obj):  # an export's first line: its store's erasures and takedowns
                if result.ledger is not None:
                    raise ValueError("a second ledger line in one file")
                result.ledger = from_line(obj)
                continue
            thread = Thread.model_validate(obj)
            if thread.id in seen:
                raise ValueError(f"thread id {thread.id!r} appears twice in this file")
            seen.add(thread.id)
            result.threads.append(thread)
        except (ValueError, ValidationError) as e:
            err = LoadError(path, f"line {lineno}", _short(e))
            if strict:
                raise err from None
            result.errors.append(err)
    return result


def _short(e: Exception) -> str:
    if isinstance(e, ValidationError):
        parts = []
        for d in e.errors()[:3]:
            loc = ".".join(str(x) for x in d["loc"]) or "record"
            parts.append(f"{loc}: {d['msg']}")
        return "; ".join(parts)
    return str(e)
