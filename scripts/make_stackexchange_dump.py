"""Write thread files (JSONL or SemEval XML) as a StackExchange data dump's folder, the shape `cqa ingest` reads from
a site's unpacked dump: `Posts.xml` (each thread's question a `PostTypeId="1"` row, each comment a `PostTypeId="2"` row
naming it as `ParentId`, bodies as HTML: a paragraph per blank-line-separated part, a `<br>` per line break),
`PostLinks.xml` (`--duplicates`), and a `Users.xml` of the authors, which `cqa ingest` passes over as a dump's. A
post's votes (`Score`) are its `meta.score`, 0 where it has none, and a question's `AcceptedAnswerId` names its comment
with `meta.accepted` true: with `--votes-from-labels`, a SemEval comment's subtask A label is its votes.

A thread's category becomes its one tag (spaces as hyphens, as StackExchange spells tags). It lets anyone try, test and
time the StackExchange import on data they have (tests/test_stackexchange.py, bench/stackexchange_import.py).

    python scripts/make_stackexchange_dump.py THREADS.jsonl OUT_FOLDER [--duplicates LINKS.json] [--votes-from-labels]
"""
from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from lxml import etree

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from indexing.models import Thread  # noqa: E402


def as_html(text: str) -> str:
    """Text as a StackExchange body: each blank-line-separated part a paragraph, each line break a ``<br>``."""
    parts = [p for p in text.split("\n\n") if p.strip()]
    return "\n\n".join("<p>" + "<br>\n".join(html.escape(line, quote=False) for line in p.split("\n")) + "</p>"
                       for p in parts)


def tag_of(category: str | None) -> str | None:
    return "-".join(category.lower().split()) if category and category.strip() else None


def _row(parent: etree._Element, **attrs: str | None) -> None:
    etree.SubElement(parent, "row", {k: v for k, v in attrs.items() if v is not None})


def _score(meta: Mapping) -> str:
    """A post's votes as its ``Score``: ``meta.score`` where it holds a whole number, else 0."""
    v = meta.get("score")
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else "0"


# A SemEval comment's judgement as votes (``--votes-from-labels``): what `cqa evaluate --answers --judged-by votes`
# then reads as relevant (a score above 0) is exactly what subtask A judges Good.
LABEL_VOTES = {"Good": 1, "PotentiallyUseful": 0, "Bad": -1}


def votes_from_labels(t: Thread) -> Thread:
    """``t`` with each judged comment's label as its votes (``LABEL_VOTES``, in ``meta.score``)."""
    answers = [a.model_copy(update={"meta": {**a.meta, "score": LABEL_VOTES[a.label]}}) if a.label in LABEL_VOTES
               else a for a in t.answers]
    return t.model_copy(update={"answers": answers})


def write_dump(threads: Iterable[Thread], folder: Path, duplicates: Mapping[str, list[str]] | None = None,
               answers_first: int = 0) -> dict:
    """The dump's files in ``folder``; ``duplicates``: a thread's id to the ids it is a duplicate of;
    ``answers_first``: the first N threads' answers are written before the questions (a dump's rows out of order)."""
    folder.mkdir(parents=True, exist_ok=True)
    threads = list(threads)
    posts, users = etree.Element("posts"), set()
    early = etree.Element("early")
    for i, t in enumerate(threads):
        tag = tag_of(t.category)
        chosen = next((a.id for a in t.answers if a.meta.get("accepted") is True), None)
        _row(posts, Id=t.id, PostTypeId="1", CreationDate=t.created_at, Score=_score(t.meta), Body=as_html(t.body),
             OwnerUserId=t.author_id, Title=t.subject, Tags=f"<{tag}>" if tag else None,
             AnswerCount=str(len(t.answers)), AcceptedAnswerId=chosen)
        for a in t.answers:
            _row(early if i < answers_first else posts, Id=a.id, PostTypeId="2", ParentId=t.id,
                 CreationDate=a.created_at, Score=_score(a.meta), Body=as_html(a.text), OwnerUserId=a.author_id)
            users.add(a.author_id)
        users.add(t.author_id)
    for row in reversed(list(early)):
        posts.insert(0, row)
    _row(posts, Id="tagwiki-1", PostTypeId="4", Body="<p>A tag's excerpt.</p>")  # not a thread: passed over
    links = etree.Element("postlinks")
    for n, (pid, targets) in enumerate(sorted((duplicates or {}).items())):
        for target in targets:
            _row(links, Id=str(n), PostId=pid, RelatedPostId=target, LinkTypeId="3")
    people = etree.Element("users")
    for uid in sorted(u for u in users if u):
        _row(people, Id=uid, DisplayName=f"user {uid}")
    for name, root in (("Posts.xml", posts), ("PostLinks.xml", links), ("Users.xml", people)):
        etree.ElementTree(root).write(str(folder / name), xml_declaration=True, encoding="utf-8", pretty_print=True)
    return {"folder": str(folder), "threads": len(threads), "answers": sum(len(t.answers) for t in threads),
            "duplicate_links": sum(len(v) for v in (duplicates or {}).values())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("threads", type=Path, help="a thread file cqa ingest reads (JSONL or SemEval XML)")
    p.add_argument("out", type=Path, help="the dump's folder (created)")
    p.add_argument("--duplicates", type=Path, help='a JSON object: {"thread id": ["id it duplicates", ...]}')
    p.add_argument("--votes-from-labels", action="store_true",
                   help="each SemEval comment's subtask A label as its votes: Good 1, PotentiallyUseful 0, Bad -1 "
                        "(a comment's meta.score and meta.accepted are written as its Score and its question's "
                        "AcceptedAnswerId in any case)")
    args = p.parse_args(argv)
    from indexing.loaders import load
    result = load(args.threads, strict=True)
    dups = json.loads(args.duplicates.read_text(encoding="utf-8")) if args.duplicates else None
    threads = [votes_from_labels(t) for t in result.threads] if args.votes_from_labels else result.threads
    print(json.dumps(write_dump(threads, args.out, dups)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
