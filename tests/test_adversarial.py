"""Valid requests with hostile texts and shapes, through the real app with the default rankers (real weights) over the
demo corpus: no 5xx ever; a 200 ranks every candidate it was given exactly once, with finite scores, best first; a
refused request says which field and why. Hypothesis draws the requests (derandomised, so a failure repeats)."""
import itertools
import json
import math
import os

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.main import create_app

TOKEN = "adversarial-token"
# draws per test; a heavier run: CQA_FUZZ_EXAMPLES=150 python -m pytest tests/test_adversarial.py
EXAMPLES_PER_TEST = int(os.environ.get("CQA_FUZZ_EXAMPLES", "30"))
THREAD_IDS = itertools.count()

# texts a forum sends or a client gets wrong: empty, blank, control and invisible characters, right-to-left
# override, combining marks, emoji, Arabic, full-width and mathematical letters, markup, very long
HOSTILE = ["", " ", "\u200b", "\u202e evil", "?", "...", "the the the", "\x00", "\t\n", "\U0001f642\U0001f642",
           "\ufdfa", "\u0645\u0631\u062d\u0628\u0627 \u0643\u064a\u0641", "\u00e9" * 300, "word " * 600,
           "<script>alert(1)</script>", "NaN", "\ufeff", "a\u0301", "\U0001d518\U0001d52b", "http://x.y/z?q=1",
           "@user thanks", "x" * 5000, "visa renewal qatar", "\uff26\uff55\uff4c\uff4c"]
text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40),
                 st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3).map(" ".join))
ident = st.text(alphabet="abXY09_-/.:\u00e9", min_size=1, max_size=8)
question = st.fixed_dictionaries({"subject": text, "body": text})
comment = st.fixed_dictionaries({"id": ident, "text": text}, optional={
    "author_id": st.one_of(st.none(), ident),
    "created_at": st.sampled_from([None, "2015-01-01", "2015-01-01T10:00:00", "2015-01-01 10:00:00"])})
REQUESTS = {
    "/rerank": st.fixed_dictionaries({"question": question, "candidates": st.lists(comment, min_size=1, max_size=20)},
                                     optional={"asker_id": st.one_of(st.none(), ident),
                                               "thread_order": st.sampled_from([None, True, False])}),
    "/rerank/questions": st.fixed_dictionaries(
        {"question": question, "candidates": st.lists(st.fixed_dictionaries(
            {"id": ident, "subject": text, "body": text},
            optional={"comments": st.lists(text.filter(str.strip), max_size=3)}), min_size=1, max_size=10)},
        optional={"search_order": st.booleans()}),
    "/rerank/answers": st.fixed_dictionaries(
        {"question": question, "threads": st.lists(st.fixed_dictionaries(
            {"id": ident, "subject": text, "body": text, "comments": st.lists(comment, max_size=6)}),
            min_size=1, max_size=4)}, optional={"search_order": st.booleans()}),
    "/search": st.fixed_dictionaries({"question": question}, optional={
        "k": st.integers(1, 50), "target": st.sampled_from(["answers", "questions", "threads"]),
        "expand": st.sampled_from([False, True, "rm3", "translation"]), "collapse": st.booleans()}),
}


# a request each endpoint must rank, and one it must refuse (an empty question), whatever Hypothesis draws
QUESTION = {"subject": "visa renewal", "body": "how long does it take?"}
EXAMPLES = {
    "/rerank": {"candidates": [{"id": "a", "text": "two weeks"}, {"id": "b", "text": "\u202e"}]},
    "/rerank/questions": {"candidates": [{"id": "q", "subject": "visa", "body": ""}]},
    "/rerank/answers": {"threads": [{"id": "t", "subject": "visa", "body": "", "comments": [{"id": "c", "text": "x"}]}]},
    "/search": {"k": 50},
}


def given_ids(path: str, body: dict) -> list[str]:
    if path == "/rerank/answers":
        return [c["id"] for t in body["threads"] for c in t["comments"]]
    return [c["id"] for c in body["candidates"]]


@pytest.fixture(scope="module")
def demo_client(demo_served):
    with TestClient(create_app(demo_served.model_copy(update={"api_token": TOKEN})), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("path", list(REQUESTS))
def test_hostile_requests_get_a_ranking_or_a_clear_4xx_never_a_5xx(demo_client, path):
    seen = {"ranked": 0, "refused": 0}

    @hsettings(max_examples=EXAMPLES_PER_TEST, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=REQUESTS[path])
    @example(body={"question": QUESTION, **EXAMPLES[path]})
    @example(body={"question": {"subject": " ", "body": "\t\n"}, **EXAMPLES[path]})
    def check(body):
        r = demo_client.post(path, json=body)
        assert r.status_code < 500, (r.status_code, r.text[:300], json.dumps(body)[:500])
        if r.status_code != 200:
            assert r.status_code == 422, r.text[:300]
            message = r.json()["error"]["message"]
            assert message.startswith("invalid request: ") and "Value error" not in message
            seen["refused"] += 1
            return
        seen["ranked"] += 1
        results = r.json()["results"]
        scores = [x["score"] for x in results]
        assert all(math.isfinite(s) for s in scores), json.dumps(body)[:500]
        assert [x["rank"] for x in results] == list(range(1, len(results) + 1))
        # /search: the reranker's scores in the reranked head, the first stage's below it (SearchResult.score);
        # each part best first
        head = r.json()["reranked"] if path == "/search" else len(results)
        for part in (scores[:head], scores[head:]):
            assert part == sorted(part, reverse=True), json.dumps(body)[:500]
        if path != "/search":  # a rerank orders exactly what it was given
            assert sorted(x["id"] for x in results) == sorted(given_ids(path, body))
    check()
    assert seen["ranked"] >= 5 and seen["refused"] >= 1, seen  # both ways were tried


@pytest.mark.parametrize("path", list(REQUESTS))
def test_a_question_of_invisible_characters_only_is_refused_as_blank(demo_client, path):
    """Zero-width spaces, a byte-order mark and a direction mark survive ``str.strip``, but nobody can read them."""
    r = demo_client.post(path, json={"question": {"subject": "\u200b\ufeff", "body": " \u202e\t"}, **EXAMPLES[path]})
    assert r.status_code == 422
    assert r.json()["error"]["message"] == ("invalid request: question: the question needs a subject or a body that "
                                            "is not empty, whitespace or invisible characters")
    ok = demo_client.post(path, json={"question": {"subject": "\u200bvisa\u200b", "body": ""}, **EXAMPLES[path]})
    assert ok.status_code == 200  # a readable word among them is a question


@hsettings(max_examples=EXAMPLES_PER_TEST + 10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(subject=text, body=text, category=st.one_of(st.none(), text), comments=st.lists(text, max_size=5),
       authors=st.lists(st.one_of(st.none(), text), min_size=5, max_size=5), later=text)
@example(subject="\x00\ufeff\u202e visa", body="x" * 5000, category="\u200b", comments=["\x00", "", "\U0001f642 ok"],
         authors=[None, "\u202e", "", "a\u0301", "\x00"], later="\u202e\x00")
def test_a_thread_accepted_with_hostile_texts_reads_back_exactly_as_sent(demo_client, subject, body, category,
                                                                         comments, authors, later):
    """Accepted data is never lost, nor changed: every character of a thread the store took (NUL, BOM, a direction
    override, 5,000-character words...) reads back as it was sent, and so does a comment added to it later alone
    (POST /threads/{id}/answers); what it refuses is a 422."""
    tid = f"hostile-{next(THREAD_IDS)}"
    thread = {"id": tid, "subject": subject, "body": body, "category": category,
              "answers": [{"id": f"{tid}_c{j}", "text": c, "author_id": a}
                          for j, (c, a) in enumerate(zip(comments, itertools.cycle(authors)))]}
    r = demo_client.post("/threads", json={"threads": [thread]}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code in (200, 422), r.text[:300]
    if r.status_code == 422:
        assert not (subject.strip() or body.strip()), r.text[:300]  # the one refusal these draws can earn
        assert demo_client.get(f"/threads/{tid}").status_code == 404  # and nothing of it was written
        return
    added = {"id": f"{tid}_later", "text": later, "author_id": authors[0]}
    r = demo_client.post(f"/threads/{tid}/answers", json={"answers": [added]},
                         headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json()["inserted"] == 1, r.text[:300]
    thread["answers"].append(added)
    got = demo_client.get(f"/threads/{tid}").json()
    assert (got["subject"], got["body"], got["category"]) == (subject, body, category)
    assert [(a["id"], a["text"], a["author_id"]) for a in got["answers"]] == \
        [(a["id"], a["text"], a["author_id"]) for a in thread["answers"]]
