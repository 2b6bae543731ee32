"""What a reranker sees: a question and the candidates to order for it.

A candidate's metadata is built here, from a stored thread, and nowhere else: the benchmark loaders
(SemEval files) and the search pipeline (the store behind an index generation) both call
``answer_candidates`` / ``question_candidate``, so a forum signal has the same value in evaluation
as at serving."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from indexing.models import Answer, Thread


# A query's or candidate's stored embeddings (meta "vector", "thread_vector", "comment_vectors", from the dense
# index, or the first stage's of the question) are the vectors of the encoder in meta VECTOR_ENCODER (an
# indexing.encoder.EncoderSpec; absent: the packaged all-MiniLM-L6-v2). A ranker reuses them only when they are
# its own model's.
VECTOR_ENCODER = "vector_encoder"


def encoder_of(meta: dict[str, Any]):
    """The EncoderSpec whose vectors ``meta`` carries (the packaged model's when it says none)."""
    from indexing.encoder import EncoderSpec
    return meta.get(VECTOR_ENCODER) or EncoderSpec()


def stored(meta: dict[str, Any], key: str, encoder_id: str) -> Any:
    """``meta[key]`` when it holds ``encoder_id``'s vectors, else None (the ranker encodes the text itself)."""
    return meta.get(key) if encoder_of(meta).id == encoder_id else None


# A search's comment candidates also carry the answer encoder's stored vector (``$CQA_ANSWER_ENCODER``, stored by
# reindex): meta ANSWER_VECTOR, made by the encoder whose id is meta ANSWER_ENCODER; its question candidates carry
# their thread's comments' ones (meta "comment_answer_vectors", in the order of meta "comments").
ANSWER_VECTOR, ANSWER_ENCODER = "answer_vector", "answer_encoder_id"


def indexed_answer_meta(gen, answer_id: str, text: str) -> dict[str, Any]:
    """What a candidate of POST /rerank carries when the live generation ``gen`` (or None) indexes it as a comment
    with the same id and exactly the same text: its stored answer-encoder vector, so a bi-encoder that is that
    encoder scores it without encoding it (``stored_vector``); else nothing."""
    v = gen.answer_vector(answer_id, text) if gen is not None else None
    return {} if v is None else {ANSWER_VECTOR: v, ANSWER_ENCODER: gen.answer_encoder.id}


def indexed_question_meta(gen, thread_id: str, text: str) -> dict[str, Any]:
    """What a candidate of POST /rerank/questions carries when the live generation ``gen`` (or None) indexes thread
    ``thread_id`` with exactly that question text: the dense index's stored vector of it and that encoder, so a ranker
    that is the same encoder (the question bi-encoder, by default) scores it without encoding it; else nothing."""
    v = gen.question_vector(thread_id, text) if gen is not None else None
    return {} if v is None else {"vector": v, VECTOR_ENCODER: gen.dense.encoder}


def stored_vector(meta: dict[str, Any], encoder_id: str) -> Any:
    """A candidate's own stored embedding by ``encoder_id``: the dense index's, or the answer encoder's; else None."""
    v = stored(meta, "vector", encoder_id)
    if v is None and meta.get(ANSWER_ENCODER) == encoder_id:
        v = meta.get(ANSWER_VECTOR)
    return v


@dataclass(frozen=True)
class Candidate:
    id: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    candidates: tuple[Candidate, ...]
    meta: dict[str, Any] = field(default_factory=dict)


def comments_query(question: str, comments, asker_id: str | None, thread_order: bool | None, gen) -> Query:
    """POST /rerank's query (one thread's comments, subtask A): ``comments`` (each with ``id``, ``text``, ``author_id``
    and ``created_at``: a request's candidates or a stored thread's answers) in the order given, each with its
    place, and what the live generation ``gen`` (or None) stores for it (``indexed_answer_meta``); the asker and
    whether the order given is the thread's in the query's metadata."""
    return Query("rerank", question,
                 tuple(Candidate(c.id, c.text, {"author_id": c.author_id, "created_at": c.created_at, "position": i,
                                                **indexed_answer_meta(gen, c.id, c.text)})
                       for i, c in enumerate(comments, 1)),
                 {"author_id": asker_id, "thread_order": thread_order})


def stored_thread_query(t: Thread, gen) -> Query:
    """A stored thread's comments as GET /threads/{id}/answers ranks them: POST /rerank's query of the thread as a
    forum sends it (its question, its asker, its comments in the thread's order)."""
    return comments_query(t.question_text, t.answers, t.author_id, True, gen)


FORUM = "forum"  # a candidate's meta key for what its forum says of it (``forum_marks``), where the store was read


def forum_marks(t: Thread, answer: Answer | None = None) -> dict[str, Any]:
    """What the forum says of ``answer`` of thread ``t`` (or of the thread itself), as a search result shows it:
    ``votes`` (meta.score, a whole number) and ``accepted`` (an answer its asker accepted; a thread with an accepted
    answer: meta.accepted, meta.accepted_answer_id), each None where the forum says nothing of it."""
    if answer is not None:
        meta = answer.meta
        accepted = True if meta.get("accepted") is True else (False if "accepted_answer_id" in t.meta else None)
    else:
        meta = t.meta
        accepted = bool(meta.get("accepted_answer_id")) if "accepted_answer_id" in meta else None
    votes = meta.get("score")
    return {"votes": votes if isinstance(votes, int) and not isinstance(votes, bool) else None, "accepted": accepted}


def answer_candidates(t: Thread, thread_rank: int | None = None) -> list[Candidate]:
    """Every comment of a thread, in thread order, with its position, author, the thread's asker, its
    question and category, and its dialogue signals within the whole thread (``thread_rank``: the thread's
    rank in a search, where there is one)."""
    from .signals import dialogue
    talk = dialogue([a.author_id for a in t.answers], [a.text for a in t.answers], t.author_id)
    out = []
    for pos, a in enumerate(t.answers, 1):
        meta = {"thread_id": t.id, "position": pos, "author_id": a.author_id, "created_at": a.created_at,
                "asker_id": t.author_id, "category": t.category, "thread_question": t.question_text,
                "dialogue": tuple(float(v) for v in talk[pos - 1]), FORUM: forum_marks(t, a)}
        if thread_rank is not None:
            meta["thread_rank"] = thread_rank
        out.append(Candidate(a.id, a.text, meta))
    return out


def question_candidate(t: Thread, thread_rank: int) -> Candidate:
    """A thread's question as a candidate of question-question similarity (subtask B), with its thread's
    comments (what answered it)."""
    return Candidate(t.id, t.question_text, {"thread_id": t.id, "category": t.category, "thread_rank": thread_rank,
                                             "subject": t.subject, "body": t.body,
                                             "comments": tuple(a.text for a in t.answers),
                                             FORUM: forum_marks(t)})


def related_comment_candidates(threads: list[Thread], gen=None) -> list[Candidate]:
    """Subtask C's candidates: every comment of ``threads`` (in the order a search ranked them), each with its
    thread's metadata and rank as the benchmark loader gives them (``answer_candidates``), plus what the live
    generation ``gen`` (or None) stores: the comment's answer-encoder vector (``indexed_answer_meta``) and its
    thread question's dense vector (``thread_vector``), each only where the indexed text is the text given."""
    out = []
    for rank, t in enumerate(threads, 1):
        tv = indexed_question_meta(gen, t.id, t.question_text)
        thread_vec = {"thread_vector": tv["vector"], VECTOR_ENCODER: tv[VECTOR_ENCODER]} if tv else {}
        out += [Candidate(c.id, c.text, {**c.meta, **thread_vec, **indexed_answer_meta(gen, c.id, c.text)})
                for c in answer_candidates(t, rank)]
    return out
