"""The request bodies a forum sends for each question of a SemEval file: subtask A's thread to POST /rerank, subtask
B's related questions to POST /rerank/questions, subtask C's related threads to POST /rerank/answers, with what a
benchmark variant leaves of their metadata and order. bench/rerank_quality.py scores what the server returns for
them; bench/load.py times them."""
from __future__ import annotations

from pathlib import Path

ENDPOINTS = {"A": "/rerank", "B": "/rerank/questions", "C": "/rerank/answers"}


def comment_in(a) -> dict:
    """A comment as a forum sends it (a Candidate of the benchmark, or a stored Answer)."""
    meta = getattr(a, "meta", {})
    return {"id": a.id, "text": a.text, "author_id": getattr(a, "author_id", None) or meta.get("author_id") or None,
            "created_at": getattr(a, "created_at", None) or meta.get("created_at") or None}


def related_threads(xml: Path, variant: str | None = None) -> dict[str, list]:
    """Subtask C: each original question's related threads (whole, as the file stores them, or as the benchmark's
    ``variant`` leaves them: no user ids, comments shuffled) in the search engine's order, as the benchmark loader
    takes them."""
    from indexing.loaders import load_semeval
    from ranking.evaluation import benchmarks
    return benchmarks.related_threads(load_semeval(xml, strict=True), variant)


def body_of(q, variant: str | None, subtask: str = "A", threads: list | None = None) -> dict:
    """The body a forum sends. Subtask A, POST /rerank: this thread, with what the benchmark's variant leaves of its
    metadata (the normal file's comments come in thread order and the forum says so; a shuffled variant's do not).
    Subtask B, POST /rerank/questions: the question and its related questions, each with its thread's comments, in
    the search engine's order (the unordered variant's in another, and the forum says so: search_order false).
    Subtask C, POST /rerank/answers: the question and its related ``threads`` in that order (or, said so, another),
    with their comments."""
    question = {"subject": q.meta.get("subject", ""), "body": q.meta.get("body", "")}
    if subtask == "B":
        return {"question": question, "search_order": variant != "unordered",
                "candidates": [{"id": c.id, "subject": c.meta["subject"], "body": c.meta["body"],
                                "comments": list(c.meta.get("comments", ()))} for c in q.candidates]}
    if subtask == "C":
        return {"question": question, "search_order": variant != "unordered", "threads": [
            {"id": t.id, "subject": t.subject, "body": t.body, "asker_id": t.author_id, "category": t.category,
             "comments": [comment_in(a) for a in t.answers]} for t in threads]}
    asker = q.meta.get("author_id") or None
    return {"question": question, "asker_id": asker, "thread_order": not (variant and "shuffled" in variant),
            "candidates": [comment_in(c) for c in q.candidates]}
