"""What each rerank endpoint hands its ranker: the request as a ``Query``, with what the live generation stores for
its candidates. The endpoints and the start's warm-up (app/warmup.py) build their queries here, so the warm-up runs
what a request runs."""
from __future__ import annotations

from ranking.candidates import (Candidate, Query, comments_query, indexed_question_meta,
                                related_comment_candidates)

from .schemas import RerankAnswersIn, RerankIn, RerankQuestionsIn


def rerank_query(body: RerankIn, gen) -> Query:
    """POST /rerank (one thread's comments, subtask A): comments the live generation ``gen`` (or None) indexes come
    with their stored vectors."""
    return comments_query(body.question.text, body.candidates, body.asker_id, body.thread_order, gen)


def questions_query(body: RerankQuestionsIn, gen, pipeline) -> Query:
    """POST /rerank/questions (subtask B), as the subtask B files give a related question: its text, its rank in the
    search that found it, its comments. Threads the live generation indexes come with their question's stored vector,
    and with their comments' where the comments given are the ones it indexes (``pipeline``, or without one ``gen``)."""
    def stored(c) -> dict:
        return (pipeline.question_meta(c.id, c.text, c.comments) if pipeline is not None
                else indexed_question_meta(gen, c.id, c.text))
    return Query("rerank-questions", body.question.text,
                 tuple(Candidate(c.id, c.text, {"thread_rank": i, "subject": c.subject, "body": c.body,
                                                "comments": tuple(c.comments), **stored(c)})
                       for i, c in enumerate(body.candidates, 1)), {"search_order": body.search_order})


def answers_query(body: RerankAnswersIn, gen) -> Query:
    """POST /rerank/answers (subtask C): every comment of the threads given, in their order, each with its thread's
    metadata and what ``gen`` (or None) stores for it."""
    return Query("rerank-answers", body.question.text,
                 tuple(related_comment_candidates([t.thread() for t in body.threads], gen)),
                 {"subject": body.question.subject, "body": body.question.body, "search_order": body.search_order})
