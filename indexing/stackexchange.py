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
The file is parsed row by row as it is read (``lxml.etree.iterparse``, each row freed once read, each body kept as its
text), so it holds the threads it makes, not the file nor its parsed tree. As every loader, it reads the whole file
before anything of it is written.
"""
from __future__ import annotations

import html
import io
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from lxml import etree
from lxml import html as lxml_html
from pydantic import ValidationError

from .models import Answer, Thread

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


@dataclass
class Posts:
    """What ``Posts.xml`` gave: its threads in the file's order, the rows it could not use in the file's order (line,
    where, and why: words, or the validation error of the thread it would have made), and the rows passed over by
    kind."""
    threads: list[Thread] = field(default_factory=list)
    errors: list[tuple[int, str, str | Exception]] = field(default_factory=list)
    passed_over: Counter = field(default_factory=Counter)


def read_posts(source: bytes | BinaryIO, duplicates: dict[str, list[str]] | None = None) -> Posts:
    """A dump's ``Posts.xml`` (its bytes, or a binary file read as it is parsed) as threads, each question's answers
    in the order they were posted. Each body is read as text (``html_text``) as its row comes, so what is kept is the
    text, not the HTML; a title is plain text already.

    An answer whose question the file does not hold, a row without an ``Id``, a second row with the same id, and a
    question that makes no valid thread (no title and no body) are errors, each with its line; ``duplicates`` maps a
    question's id to the questions it duplicates (``duplicate_links``)."""
    out = Posts()
    questions: dict[str, _Pending] = {}
    orphans: list[tuple[int, dict[str, str]]] = []
    seen: set[str] = set()
    for line, row in _rows(source, POST_FIELDS):
        kind, pid = row.get("PostTypeId"), (row.get("Id") or "").strip()
        where = f"line {line} <row Id={pid or '?'}>"
        if not pid:
            out.errors.append((line, where, "a row without an Id"))
            continue
        row["Id"] = pid
        if kind not in (QUESTION, ANSWER):
            out.passed_over[OTHER_POST_TYPES.get(kind or "", f"post type {kind}")] += 1
            continue
        if pid in seen:
            out.errors.append((line, where, f"post {pid} appears twice in this file"))
            continue
        seen.add(pid)
        row["Body"] = html_text(row.get("Body") or "")
        if kind == QUESTION:
            questions[pid] = _Pending(row, line)
        elif (parent := (row.get("ParentId") or "").strip()) in questions:
            questions[parent].answers.append((row.get("CreationDate") or "", line, row))
        else:
            orphans.append((line, row))  # its question may come later in the file
    for line, row in orphans:
        parent = (row.get("ParentId") or "").strip()
        if parent in questions:
            questions[parent].answers.append((row.get("CreationDate") or "", line, row))
        else:
            out.errors.append((line, f"line {line} <row Id={row['Id']}>",
                               f"answer {row['Id']} names question {parent or '(none)'}, which this file does not hold"))
    for pid, q in questions.items():
        try:
            out.threads.append(_thread(q, duplicates or {}))
        except (ValueError, ValidationError) as e:
            out.errors.append((q.line, f"line {q.line} <row Id={pid}>", e))
    out.errors.sort(key=lambda e: e[0])  # as the file has them: --strict stops at the first
    return out


__all__ = ["DUMP_ROOTS", "Posts", "duplicate_links", "html_text", "read_posts", "root_of", "tags_of"]
