"""The documents every index holds, in one row order: questions (subject + body) and answers."""
from __future__ import annotations

import bisect
import json
import mmap
import operator
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import numpy as np

from .models import Thread, thread_tags

QUESTION, ANSWER = "question", "answer"
FORMAT, BINARY = "documents", 3
FILE, OLD_FILE = "documents.bin", "documents.json"  # a generation's; the second written before round 20
# how documents are made from threads (``Documents.from_threads``, ``ThreadStore.documents``): a build copies a live
# generation's documents only when they were made the same way (one more when that changes)
MADE = 2
TAGS_SINCE = 2  # the first MADE whose documents carry their thread's tags (round 55)
OPTIONAL = ("tags",)  # columns a documents file written before them lacks: read as None in every row


def tags_value(raw) -> str | None:
    """A thread's ``meta["tags"]`` as the ``tags`` column holds it: its tags (``models.thread_tags``) one per line, or
    None without any (a tag holds no line break once its spacing is collapsed)."""
    keys = thread_tags(raw)
    return "\n".join(keys) if keys else None


def tags_of_value(value: str | None) -> frozenset[str]:
    """The tags a ``tags`` column value holds."""
    return frozenset(value.split("\n")) if value else frozenset()


def documents_file(folder: Path) -> Path:
    """A generation folder's documents: ``FILE``, or the ``OLD_FILE`` of a generation built before round 20."""
    return folder / FILE if (folder / FILE).exists() or not (folder / OLD_FILE).exists() else folder / OLD_FILE


def question_doc_id(thread_id: str) -> str:
    return f"q:{thread_id}"


def answer_doc_id(answer_id: str) -> str:
    return f"a:{answer_id}"


@dataclass
class Documents:
    ids: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    thread_ids: list[str] = field(default_factory=list)
    categories: list[str | None] = field(default_factory=list)
    created_at: list[str | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    tags: list[str | None] = field(default_factory=list)  # the thread's tags (``tags_value``), on each of its rows

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_threads(cls, threads: Iterable[Thread]) -> "Documents":
        d = cls()
        for t in threads:
            tags = tags_value(t.meta.get("tags"))
            d._add(question_doc_id(t.id), QUESTION, t.id, t.category, t.created_at, t.question_text, tags)
            for a in t.answers:
                d._add(answer_doc_id(a.id), ANSWER, t.id, t.category, a.created_at or t.created_at, a.text, tags)
        return d

    def _add(self, did, kind, tid, cat, created, text, tags: str | None = None) -> None:
        self.ids.append(did)
        self.kinds.append(kind)
        self.thread_ids.append(tid)
        self.categories.append(cat)
        self.created_at.append(created)
        self.texts.append(text)
        self.tags.append(tags)

    def question_rows(self) -> np.ndarray:
        """Each thread's first row (its question), in order: a thread's documents are the rows from its question to
        the next one's."""
        return np.flatnonzero(np.fromiter((k == QUESTION for k in self.kinds), dtype=bool, count=len(self)))

    def thread_starts(self) -> np.ndarray:
        """``question_rows``, then the number of documents: thread k's rows are ``starts[k]`` to ``starts[k + 1]``."""
        return np.append(self.question_rows(), len(self))

    def answer_rows(self) -> list[int]:
        """The rows that are comments, in order: what the answer encoder encodes."""
        return [i for i, k in enumerate(self.kinds) if k == ANSWER]

    def counts(self) -> dict[str, int]:
        q = sum(k == QUESTION for k in self.kinds)
        return {"total": len(self), "questions": q, "answers": len(self) - q}

    def save(self, path: Path) -> None:
        """The binary format (``FILE``, version 3): a JSON header line naming each section's place, then the sections,
        each 8-byte aligned. Each string column is its values' UTF-8 bytes end to end and their byte offsets; the
        columns that repeat values (kinds, threads, categories, dates, tags) keep each distinct value once and a code
        per document (-1: None). A service going live reads the header, maps the file and makes the short columns'
        strings; a text is decoded when it is read (``Texts``), so none is parsed up front and the file's pages are
        shared by every process serving it (bench/build_parts.py ``documents``)."""
        sections: list[tuple[str, bytes | np.ndarray]] = []
        for name, values in self.__dict__.items():
            if name in PLAIN:
                sections += _strings(name, values)
            else:
                table = dict.fromkeys(values)  # the distinct values in order of first appearance
                table.pop(None, None)
                code = {v: i for i, v in enumerate(table)}
                code[None] = -1
                codes = np.fromiter(map(code.__getitem__, values), dtype=np.int32, count=len(values))
                sections += [(f"{name}.codes", codes), *_strings(f"{name}.values", list(table))]
        place, at = {}, 0
        for name, data in sections:
            size = memoryview(data).nbytes
            place[name] = [at, size, data.dtype.str if isinstance(data, np.ndarray) else "bytes"]
            at += size + (-size) % 8
        head = json.dumps({"format": FORMAT, "version": BINARY, "documents": len(self), "sections": place}).encode()
        head += b" " * ((-len(head) - 1) % 8) + b"\n"  # the sections 8-byte aligned in the file too
        with open(path, "wb") as fh:
            fh.write(head)
            for name, data in sections:
                fh.write(data)  # an array's buffer or the bytes as they are, not copied
                fh.write(b"\0" * (-memoryview(data).nbytes % 8))

    @classmethod
    def load(cls, path: Path) -> "Documents":
        """What ``save`` wrote (its texts read from the mapped file as they are asked for), or a generation's
        ``documents.json`` from before round 20: JSON lines (a header, then the columns of 2,000 documents a
        line), or one JSON object (before round 18)."""
        with open(path, "rb") as fh:
            first = fh.readline()
            head = json.loads(first)
            if head.get("format") != FORMAT:
                docs = cls(**head)
                for name in OPTIONAL:
                    if not docs.__dict__[name]:
                        docs.__dict__[name] = [None] * len(docs)
                return docs
            if head.get("version") == BINARY:
                return cls._mapped(path, fh, len(first), head)
            docs = cls()
            columns = docs.__dict__
            for line in fh:
                for k, v in json.loads(line).items():
                    columns[k].extend(v)
        for name in OPTIONAL:
            if not columns[name]:
                columns[name].extend([None] * head["documents"])
        if any(len(v) != head["documents"] for v in columns.values()):
            raise ValueError(f"{path}: {head['documents']} documents announced, "
                             f"{sorted({len(v) for v in columns.values()})} read")
        return docs

    @classmethod
    def _mapped(cls, path: Path, fh, base: int, head: dict) -> "Documents":
        n, place = head["documents"], head["sections"]
        end = base + max((at + size for at, size, _ in place.values()), default=0)
        size = os.fstat(fh.fileno()).st_size
        if size < end:
            raise ValueError(f"{path}: cut short: {size} bytes, its sections end at {end}")
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

        def array(name: str, count: int | None = None) -> np.ndarray:
            at, nbytes, dtype = place[name]
            a = np.frombuffer(mm, dtype=dtype, count=nbytes // np.dtype(dtype).itemsize, offset=base + at)
            if count is not None and len(a) != count:
                raise ValueError(f"{path}: {name} holds {len(a)} values, {count} expected")
            return a

        def strings(name: str, count: int | None = None) -> Texts:
            offsets = array(f"{name}.offsets", None if count is None else count + 1)
            at, nbytes, _ = place[f"{name}.bytes"]
            if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != nbytes or (np.diff(offsets) < 0).any():
                raise ValueError(f"{path}: {name}'s offsets do not fit its bytes")
            return Texts(mm, base + at, offsets)

        columns = {}
        for name in cls().__dict__:
            if name in PLAIN:
                columns[name] = strings(name, n)
                continue
            if name in OPTIONAL and f"{name}.codes" not in place:
                columns[name] = [None] * n
                continue
            codes = array(f"{name}.codes", n)
            values = list(strings(f"{name}.values")) + [None]
            if n and (codes.min() < -1 or codes.max() >= len(values) - 1):
                raise ValueError(f"{path}: {name}'s codes do not fit its values")
            columns[name] = [values[c] for c in codes.tolist()]  # -1: the None at the end
        columns["ids"] = list(columns["ids"])  # looked up by id: made once
        return cls(**columns)


PLAIN = ("ids", "texts")  # the columns whose values rarely repeat: stored one by one, not as codes


def _strings(name: str, values: Sequence[str]) -> list[tuple[str, bytes | np.ndarray]]:
    # Texts' UTF-8 bytes as they are: not decoded, not encoded again
    offsets, chunks = values.encoded() if isinstance(values, (Texts, TextRuns)) else _encoded(values)
    return [(f"{name}.offsets", offsets), (f"{name}.bytes", b"".join(chunks))]


def _encoded(values: Sequence[str]) -> tuple[np.ndarray, list[bytes]]:
    raw = list(map(str.encode, values, repeat("utf-8"), repeat("surrogatepass")))
    offsets = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)), out=offsets[1:])
    return offsets, raw


class _Strings(Sequence):
    """A read-only sequence of strings that is not a list: equal to a list of the same strings, pickled as that list."""

    def __eq__(self, other) -> bool:
        if not isinstance(other, (list, tuple, _Strings)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __reduce__(self):
        return list, (list(self),)


class Texts(_Strings):
    """Strings stored end to end as UTF-8 (``Documents.save``), decoded one at a time as they are read: a
    generation's texts in a mapped file, not a list of 100k-1M string objects parsed when it goes live."""

    def __init__(self, buffer, start: int, offsets: np.ndarray):
        self._buffer, self._start, self._offsets = buffer, start, offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            return list(self._decoded(start, max(start, stop)))  # a run decoded in one pass, as ``__iter__``
        i = operator.index(i)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("text index out of range")
        a, b = self._start + int(self._offsets[i]), self._start + int(self._offsets[i + 1])
        return self._buffer[a:b].decode("utf-8", "surrogatepass")

    def __iter__(self):
        return self._decoded(0, len(self))

    def _decoded(self, first: int, end: int):
        start, buffer, offsets = self._start, self._buffer, self._offsets[first:end + 1].tolist()
        for a, b in zip(offsets[:-1], offsets[1:]):
            yield buffer[start + a:start + b].decode("utf-8", "surrogatepass")

    def __repr__(self) -> str:
        return f"Texts({len(self)} strings)"

    def encoded(self, first: int = 0, end: int | None = None) -> tuple[np.ndarray, list[memoryview]]:
        """Strings ``first`` to ``end`` as ``Documents.save`` writes them: their offsets from 0 and their bytes (a view
        of the mapped file, not a copy)."""
        end = len(self) if end is None else end
        offsets = self._offsets[first:end + 1] - self._offsets[first]
        a = self._start + int(self._offsets[first])
        return offsets, [memoryview(self._buffer)[a:a + int(offsets[-1])]]


class TextRuns(_Strings):
    """Texts made of runs of other sequences of texts (``Texts`` or lists), in order (``extend``): what a build copies
    of a live generation's mapped ``Texts`` is saved as its bytes (``Documents.save``), never decoded unless read, nor
    encoded again."""

    def __init__(self):
        self._runs: list[tuple[Sequence[str], int, int]] = []
        self._starts = [0]  # where each run begins, then the end

    def extend(self, texts: Sequence[str], first: int, end: int) -> None:
        """Strings ``first`` to ``end`` of ``texts`` after the others."""
        if end > first:
            self._runs.append((texts, first, end))
            self._starts.append(self._starts[-1] + end - first)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = operator.index(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("text index out of range")
        k = bisect.bisect_right(self._starts, i) - 1
        texts, first, _ = self._runs[k]
        return texts[first + i - self._starts[k]]

    def __iter__(self):
        for texts, first, end in self._runs:
            yield from texts[first:end]  # a run of a Texts decoded in one pass

    def __repr__(self) -> str:
        return f"TextRuns({len(self)} strings in {len(self._runs)} runs)"

    def encoded(self) -> tuple[np.ndarray, list]:
        """All of them as ``Documents.save`` writes them: offsets from 0, and the bytes in chunks (a mapped run's as
        they are in its file)."""
        offsets, chunks, at = [np.zeros(1, dtype=np.int64)], [], 0
        for texts, first, end in self._runs:
            if isinstance(texts, Texts):
                off, raw = texts.encoded(first, end)
            else:
                off, raw = _encoded(texts[first:end])
            offsets.append(off[1:] + at)
            chunks += raw
            at += int(off[-1])
        return np.concatenate(offsets), chunks
