"""StackExchange data dumps: a site's ``Posts.xml`` read as threads, its duplicate links from ``PostLinks.xml``.

A site's dump (``<site>.stackexchange.com.7z``, unpacked) is a folder of XML files, one ``<row .../>`` per record:
``Posts.xml`` holds the questions (``PostTypeId="1"``) and their answers (``PostTypeId="2"``, ``ParentId`` naming the
question), the others hold users, votes, badges, edits, tags and links. Each question becomes a thread whose comments
are its answers in the order they were posted (their ``CreationDate``, then their place in the file, which a dump
writes in id order). Bodies are HTML, read as text (paragraphs, list items and code blocks on lines of their own; an
image as its alt text); titles are plain text. The thread's ``category`` is its first tag; ``meta`` keeps every tag,
the score, the view count, the accepted answer, when it was closed, and the questions it was closed as a duplicate of
(``duplicate_of``, from ``PostLinks.xml`` beside it, ``LinkTypeId="3"``). Its answers' ``meta`` keep their score and
whether the asker accepted them.

The dump's other files hold no threads: ``cqa ingest`` of the whole folder passes them over and says so. The rows of
``Posts.xml`` that are not questions or answers (tag wikis, moderator nominations...) are passed over and counted.
The file is parsed row by row as it is read (``lxml.etree.iterparse``, each row freed once read) and each row, its body
as text, staged in a SQLite file of its own in the temporary folder (``stage_posts``). Its threads are then made
``BATCH_THREADS`` at a time, in the file's order of their questions (``Staged.batches``): reading a dump holds one batch
of threads, whatever its size. The whole file is read, and every row it cannot use known (but for a question that makes
no valid thread, known as its batch is made), before any thread of it is handed on.
"""
from __future__ import annotations

import html
import io
import re
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from lxml import etree
from lxml import html as lxml_html
from pydantic import ValidationError

from .models import Answer, Thread, moment

QUESTION, ANSWER = "1", "2"
DUPLICATE_LINK = "3"  # PostLinks.xml: LinkTypeId 1 is "linked", 3 "duplicate"

# Post types a dump holds that are not questions or answers (https://meta.stackexchange.com/q/2677, "PostTypeId").
OTHER_POST_TYPES = {"3": "orphaned tag wiki", "4": "tag wiki excerpt", "5": "tag wiki", "6": "moderator nomination",
                    "7": "wiki placeholder", "8": "privilege wiki", "9": "article", "10": "collective discussion",
                    "12": "announcement", "13": "collective collection", "14": "collective article",
                    "15": "collective knowledge"}

# A dump's files by their root element: only ``posts`` holds threads.
DUMP_ROOTS = {"posts": "Posts.xml", "postlinks": "PostLinks.xml", "comments": "Comments.xml", "users": "Users.xml",
              "votes": "Votes.xml", "badges": "Badges.xml", "posthistory": "PostHistory.xml", "tags": "Tags.xml",
              "posthistorytypes": "PostHistoryTypes.xml"}

# Block elements: a paragraph, a code block, a quote or a heading stands apart (a blank line), a list item, a table
# row or a line break on a line of its own.
_PARAGRAPHS = frozenset({"p", "div", "pre", "blockquote", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "table",
                         "hr", "dl", "details"})
_LINES = frozenset({"li", "tr", "dt", "dd", "summary", "br"})
_PARA, _LINE = "\x01", "\x00"  # marks, resolved once the text is whole (neither is in a valid post)
_DEPTH_LIMIT = 255  # libxml2's HTML parser keeps elements nested at most this deep
_TAGS = re.compile(r"<!--.*?-->|<[^<>]*>", re.S)
_SPACES = re.compile(r"\s+")
_BREAKS = re.compile(r"[ \t\r\n\x00\x01]*[\x00\x01][ \t\r\n\x00\x01]*")


def html_text(markup: str) -> str:
    """A post's HTML body as text: a paragraph, code block, quote or heading apart from the rest by a blank line, a
    list item, table row or line break on a line of its own, an image as its alt text, entities decoded. Text that
    holds no markup is returned stripped."""
    if "<" not in markup and "&" not in markup:
        return markup.strip()
    markup = markup.replace(_PARA, "").replace(_LINE, "")
    try:
        root = lxml_html.fragment_fromstring(markup, create_parent="div")
    except (etree.ParserError, ValueError):  # nothing an HTML parser can read: keep it as written
        return markup.strip()
    parts: list[str] = []
    for event, el in etree.iterwalk(root, events=("start", "end", "comment", "pi")):  # iterative: deep markup is fine
        if event in ("comment", "pi"):  # its text is no one's; what follows it is
            parts.append(el.tail or "")
            continue
        tag = el.tag if isinstance(el.tag, str) else None
        mark = _PARA if tag in _PARAGRAPHS else _LINE if tag in _LINES else ""
        if event == "start":
            parts.append(mark)
            if tag == "img" and el.get("alt"):
                parts.append(el.get("alt"))
            if el.text:
                parts.append(el.text)
        else:
            parts.append(mark)
            if el.tail and el is not root:
                parts.append(el.tail)
    text = _BREAKS.sub(lambda m: "\n\n" if _PARA in m.group() else "\n", "".join(parts)).strip()
    if markup.count("<") < _DEPTH_LIMIT:  # too few tags to nest past the parser's limit: nothing was dropped
        return text
    bare = _SPACES.sub(" ", html.unescape(_TAGS.sub(" ", markup))).strip()
    if len(_SPACES.sub("", text)) < 0.9 * len(_SPACES.sub("", bare)):  # the parser dropped text (markup nested
        return bare  # past libxml2's depth limit): the text without its tags, on one line, rather than lose it
    return text


def tags_of(raw: str | None) -> list[str]:
    """A question's tags as the dumps spell them: ``<python><pandas>`` (until 2024) or ``|python|pandas|``."""
    if not raw:
        return []
    if "<" in raw:
        return [t for t in re.findall(r"<([^<>]+)>", raw) if t.strip()]
    return [t for t in raw.split("|") if t.strip()]


def root_of(head: bytes) -> str | None:
    """The root element's name (lower case) of an XML file from its first bytes; None if none is found there."""
    for m in re.finditer(rb"<([^?!/\s>][^\s/>]*)", head):
        return m.group(1).decode("ascii", "replace").lower()
    return None


@dataclass
class _Pending:
    """A question row read, and its answers as they come."""
    row: dict[str, str]
    line: int
    answers: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)  # (created, line, row)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def duplicate_links(raw: bytes | BinaryIO) -> dict[str, list[str]]:
    """``PostLinks.xml``: each question's duplicate links (the questions it was closed as a duplicate of)."""
    out: dict[str, list[str]] = {}
    for _, row in _rows(raw, LINK_FIELDS):
        if row.get("LinkTypeId") == DUPLICATE_LINK and row.get("PostId") and row.get("RelatedPostId"):
            targets = out.setdefault(row["PostId"], [])
            if row["RelatedPostId"] not in targets:
                targets.append(row["RelatedPostId"])
    return out


def _release(row: etree._Element) -> None:
    """Frees a parsed row and the rows before it: a dump of millions of rows parsed in bounded memory."""
    row.clear()
    while row.getprevious() is not None:
        del row.getparent()[0]


# The attributes a row is kept with (a dump's rows carry more: edit dates, editors, licence...).
POST_FIELDS = ("Id", "PostTypeId", "ParentId", "AcceptedAnswerId", "CreationDate", "Score", "ViewCount", "Body",
               "OwnerUserId", "OwnerDisplayName", "Title", "Tags", "ClosedDate")
LINK_FIELDS = ("PostId", "RelatedPostId", "LinkTypeId")


def _rows(source: bytes | BinaryIO, fields: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Each ``<row>`` of a dump file (its bytes, or a binary file read as it is parsed) with its line and ``fields``."""
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    for _, row in etree.iterparse(stream, events=("end",), tag="row", huge_tree=True, resolve_entities=False,
                                  no_network=True):
        yield row.sourceline or 0, {k: v for k in fields if (v := row.get(k)) is not None}
        _release(row)


def _answer(row: dict[str, str], accepted: str | None) -> Answer:
    meta: dict[str, object] = {"source": "stackexchange"}
    if (score := _int(row.get("Score"))) is not None:
        meta["score"] = score
    if accepted is not None and row["Id"] == accepted:
        meta["accepted"] = True
    if not row.get("OwnerUserId") and row.get("OwnerDisplayName"):
        meta["username"] = row["OwnerDisplayName"]
    return Answer(id=row["Id"], text=row.get("Body") or "", created_at=row.get("CreationDate"),
                  author_id=row.get("OwnerUserId") or None, meta=meta)


def _thread(q: _Pending, duplicates: dict[str, list[str]]) -> Thread:
    row = q.row
    tags = tags_of(row.get("Tags"))
    accepted = row.get("AcceptedAnswerId")
    meta: dict[str, object] = {"source": "stackexchange", "tags": tags}
    for key, attr in (("score", "Score"), ("view_count", "ViewCount")):
        if (v := _int(row.get(attr))) is not None:
            meta[key] = v
    if accepted:
        meta["accepted_answer_id"] = accepted
    if row.get("ClosedDate"):
        meta["closed_at"] = row["ClosedDate"]
    if row["Id"] in duplicates:
        meta["duplicate_of"] = duplicates[row["Id"]]
    if not row.get("OwnerUserId") and row.get("OwnerDisplayName"):
        meta["username"] = row["OwnerDisplayName"]
    answers = [_answer(a, accepted) for _, _, a in sorted(q.answers, key=lambda a: a[:2])]  # posted, then file order
    return Thread(id=row["Id"], subject=(row.get("Title") or "").strip(), body=row.get("Body") or "",
                  category=tags[0] if tags else None, created_at=row.get("CreationDate"),
                  author_id=row.get("OwnerUserId") or None, answers=answers, meta=meta)


BATCH_THREADS = 2000  # threads made and handed on at a time from a staged dump

# A staged row: its place in the file (``seq``, ``line``), what batches are made by, and the fields a thread is made of.
_STAGED = ("line", "question", "parent", *POST_FIELDS)
_STAGE_SCHEMA = (f"CREATE TABLE posts (seq INTEGER PRIMARY KEY, {', '.join(_STAGED)})")
_STAGE_INSERT = f"INSERT INTO posts ({', '.join(_STAGED)}) VALUES ({', '.join('?' * len(_STAGED))})"
_STAGE_ROWS = 1000  # rows sent to the staging file at a time


def _row_of(values: tuple) -> dict[str, str]:
    """A staged row's fields (those it has), as ``_rows`` gave them."""
    return {f: v for f, v in zip(POST_FIELDS, values) if v is not None}


class Staged:
    """A dump's ``Posts.xml`` read once into a SQLite file of its own (``stage_posts``), each row's body as text: its
    threads are then made ``BATCH_THREADS`` at a time (``batches``), so reading a dump of millions of posts holds one
    batch of threads, not the file's. The rows it could not use are known once it is staged (``errors``: a row
    without an ``Id``, a post id twice, an answer whose question the file does not hold), but for a question that
    makes no valid thread, which ``batches`` adds as it meets one."""

    def __init__(self, folder: Path):
        self._dir = tempfile.TemporaryDirectory(prefix="cqa-stage-", dir=folder)
        self._conn = sqlite3.connect(Path(self._dir.name) / "posts.sqlite3", isolation_level=None)
        self._conn.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _STAGE_SCHEMA)
        self.errors: list[tuple[int, str, str | Exception]] = []
        self.passed_over: Counter = Counter()
        self.newest: datetime | None = None  # the newest post's time (``moment``), known once staged
        self.questions = 0  # the questions staged, once staged
        self.made = 0  # the questions ``batches`` has made threads of (or found making none)

    def _add(self, source: bytes | BinaryIO) -> None:
        cur = self._conn.cursor()
        cur.execute("BEGIN")
        pending: list[tuple] = []
        for line, row in _rows(source, POST_FIELDS):
            kind, pid = row.get("PostTypeId"), (row.get("Id") or "").strip()
            if not pid:
                self.errors.append((line, f"line {line} <row Id=?>", "a row without an Id"))
                continue
            if kind not in (QUESTION, ANSWER):
                self.passed_over[OTHER_POST_TYPES.get(kind or "", f"post type {kind}")] += 1
                continue
            row["Id"] = pid
            row["Body"] = html_text(row.get("Body") or "")
            pending.append((line, kind == QUESTION, (row.get("ParentId") or "").strip() or None,
                            *(row.get(f) for f in POST_FIELDS)))
            if len(pending) >= _STAGE_ROWS:
                cur.executemany(_STAGE_INSERT, pending)
                pending.clear()
        cur.executemany(_STAGE_INSERT, pending)
        cur.execute("CREATE INDEX posts_id ON posts(Id, seq)")
        for line, pid in cur.execute("SELECT line, Id FROM posts p WHERE EXISTS "
                                     "(SELECT 1 FROM posts q WHERE q.Id = p.Id AND q.seq < p.seq)").fetchall():
            self.errors.append((line, f"line {line} <row Id={pid}>", f"post {pid} appears twice in this file"))
        cur.execute("DELETE FROM posts WHERE EXISTS "
                    "(SELECT 1 FROM posts q WHERE q.Id = posts.Id AND q.seq < posts.seq)")
        cur.execute("CREATE INDEX posts_parent ON posts(parent) WHERE NOT question")
        cur.execute("COMMIT")
        for line, aid, parent in cur.execute(
                "SELECT line, Id, parent FROM posts a WHERE NOT question AND NOT EXISTS "
                "(SELECT 1 FROM posts q WHERE q.Id = a.parent AND q.question) ORDER BY seq"):
            self.errors.append((line, f"line {line} <row Id={aid}>",
                                f"answer {aid} names question {parent or '(none)'}, which this file does not hold"))
        self.errors.sort(key=lambda e: e[0])
        self.questions = cur.execute("SELECT COUNT(*) FROM posts WHERE question").fetchone()[0]
        self.newest = max((when for (stamp,) in cur.execute("SELECT CreationDate FROM posts")
                           if (when := moment(stamp)) is not None), default=None)

    def batches(self, duplicates: dict[str, list[str]] | None = None,
                size: int | None = None) -> Iterator[list[Thread]]:
        """The threads, ``size`` (``BATCH_THREADS``) at a time in the file's order of their questions, each question's
        answers in the order they were posted (then the file's). A question that makes no valid thread is added to
        ``errors``."""
        size = size or BATCH_THREADS
        self.made = 0
        fields = ", ".join(POST_FIELDS)
        cur = self._conn.cursor()
        last = 0
        while True:
            rows = cur.execute(f"SELECT seq, line, {fields} FROM posts WHERE question AND seq > ? ORDER BY seq "
                               "LIMIT ?", (last, size)).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            pending = {r[2]: _Pending(_row_of(r[2:]), r[1]) for r in rows}  # by Id, the first field
            marks = ",".join("?" * len(pending))
            for r in self._conn.execute(f"SELECT parent, line, {fields} FROM posts WHERE NOT question AND parent IN "
                                        f"({marks})", list(pending)):
                answer = _row_of(r[2:])
                pending[r[0]].answers.append((answer.get("CreationDate") or "", r[1], answer))
            threads = []
            for pid, q in pending.items():
                try:
                    threads.append(_thread(q, duplicates or {}))
                except (ValueError, ValidationError) as e:
                    self.errors.append((q.line, f"line {q.line} <row Id={pid}>", e))
            self.errors.sort(key=lambda e: e[0])
            self.made += len(rows)
            yield threads

    def share_made(self) -> float:
        """How much of the dump ``batches`` has made threads of: its questions, 0 to 1."""
        return min(self.made / self.questions, 1.0) if self.questions else 0.0

    def close(self) -> None:
        self._conn.close()
        self._dir.cleanup()

    def __enter__(self) -> "Staged":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stage_posts(source: bytes | BinaryIO, folder: Path | None = None) -> Staged:
    """A dump's ``Posts.xml`` (its bytes, or a binary file read as it is parsed) staged in a SQLite file under
    ``folder`` (default: the system's temporary folder, ``$TMPDIR``), for ``Staged.batches``."""
    staged = Staged(Path(folder or tempfile.gettempdir()))
    try:
        staged._add(source)
    except BaseException:
        staged.close()
        raise
    return staged


__all__ = ["BATCH_THREADS", "DUMP_ROOTS", "Staged", "duplicate_links", "html_text", "root_of", "stage_posts",
           "tags_of"]
