"""The service's warm-up: before it says it is ready, one request of each kind a user sends runs through the served
rankers and the live generation's search, so that no user's request pays for what a first one sets up. A first
request loads the encoder of the dense index (and the zero-shot encoder the subtask B ranker reads), and runs each
network's first pass, which is slower than the next (0.5 s more for a first POST /search on 2 cores,
bench/first_request.py).

Nothing of it stays: the rankers run without their score and vector memos meanwhile (``memos_detached``), so the
memos, the data folder's score and vector stores and their counts are as before it; it counts in no metric (it calls
the rankers, not the endpoints' micro-batchers). The queries are built by the endpoints' own code (app/queries.py)."""
from __future__ import annotations

import logging
import time
from typing import Callable

from ranking.rankers import memos_detached

from .queries import answers_query, questions_query, rerank_query
from .schemas import RerankAnswersIn, RerankIn, RerankQuestionsIn, SearchIn

log = logging.getLogger(__name__)

QUESTION = {"subject": "Renewing a residence permit",
            "body": "How long does it take to renew a residence permit, and which papers do I need?"}
COMMENTS = [
    {"id": "warm-up-c1", "author_id": "warm-up-u2", "created_at": "2026-01-05T10:00:00",
     "text": "It took me two weeks. Bring your passport, two photos and a letter from your sponsor."},
    {"id": "warm-up-c2", "text": "Ask at the immigration office, they tell you what is missing.",
     "author_id": "warm-up-u3", "created_at": "2026-01-05T11:30:00"},
    {"id": "warm-up-c3", "text": "Thanks, that helps!", "author_id": "warm-up-u1", "created_at": "2026-01-05T12:00:00"},
]
RERANK = RerankIn.model_validate({"question": QUESTION, "asker_id": "warm-up-u1", "candidates": COMMENTS})
QUESTIONS = RerankQuestionsIn.model_validate({"question": QUESTION, "candidates": [
    {"id": "warm-up-q1", "subject": "Residence permit renewal time", "body": "My permit ends next month. How long does "
     "the renewal take?", "comments": [c["text"] for c in COMMENTS]},
    {"id": "warm-up-q2", "subject": "Best beach for kids", "body": "Where can I take small children to swim?"}]})
ANSWERS = RerankAnswersIn.model_validate({"question": QUESTION, "threads": [
    {"id": "warm-up-q1", "subject": "Residence permit renewal time", "asker_id": "warm-up-u1",
     "body": "My permit ends next month. How long does the renewal take?", "comments": COMMENTS}]})
WARM_UP_DEPTH = 4  # candidates a warm-up search reranks: the first stage's, and the most similar thread's comments
SEARCHES = {target: SearchIn.model_validate({"question": QUESTION, "target": target, "explain": True,
                                             "k": WARM_UP_DEPTH})
            for target in ("answers", "questions")}


def warm_up(svc) -> dict[str, float | None]:
    """Run each kind of request once on ``svc`` (an app.main.Service that has loaded its rankers, and its generation
    if there is one: the searches need it): the milliseconds each took, by the endpoint that would have served it;
    None where it failed (logged; a failed warm-up costs a first request its speed, never the start)."""
    gen, pipeline = svc.snapshot()
    steps: dict[str, Callable[[], object]] = {
        "POST /rerank": lambda: svc.reranker.score([rerank_query(RERANK, gen)]),
        "POST /rerank/questions": lambda: svc.question_reranker.score([questions_query(QUESTIONS, gen, pipeline)]),
        "POST /rerank/answers": lambda: svc.answers_reranker.score([answers_query(ANSWERS, gen)]),
    }
    if (comments := svc.unbatched_comments_challenger) is not None:  # $CQA_INTERLEAVE_COMMENTS: its first pass too
        steps["POST /rerank, challenger"] = lambda: comments.score([rerank_query(RERANK, gen)])
    if pipeline is not None:
        # a few candidates: what a first search sets up, not the encoding of a whole head where the generation
        # stores no comment vectors
        unbatched = pipeline.reranked_by(svc.unbatched_search_rankers, depth=WARM_UP_DEPTH, thread_depth=1,
                                         thread_comments=WARM_UP_DEPTH)
        for target, body in SEARCHES.items():
            steps[f"POST /search {target}"] = lambda body=body: unbatched.search(body.request())
        for target, challenger in svc.unbatched_challengers.items():  # $CQA_INTERLEAVE_*: its first pass too
            alone = pipeline.reranked_by({target: challenger}, depth=WARM_UP_DEPTH, thread_depth=1,
                                         thread_comments=WARM_UP_DEPTH)
            steps[f"POST /search {target}, challenger"] = \
                lambda alone=alone, body=SEARCHES[target]: alone.search(body.request())
    took: dict[str, float | None] = {}
    t0 = time.perf_counter()
    with memos_detached(svc.served_rankers):
        for name, step in steps.items():
            t = time.perf_counter()
            try:
                step()
                took[name] = round(1000 * (time.perf_counter() - t), 1)
            except Exception:
                log.warning("warm-up: %s failed; its first request will set up what it needs", name, exc_info=True)
                took[name] = None
    log.info("warmed up in %.2f s: %s", time.perf_counter() - t0,
             ", ".join(f"{name} {ms} ms" for name, ms in took.items()))
    return took
