import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from indexing.reindex import reindex

from .conftest import ADMIN, ROOT, STUB_RANKERS, TOKEN, rerank_model
from .test_indexes import fake_encode, fill_store



def wait_job(client, job_id, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = client.get(f"/jobs/{job_id}").json()
        if j["state"] in ("succeeded", "failed"):
            return j
        time.sleep(0.1)
    pytest.fail("job did not finish")


def test_health_ready_threads(client):
    assert client.get("/health").json() == {"status": "ok"}
    r = client.get("/ready")
    assert r.status_code == 200 and r.json()["sizes"]["documents"] == 160
    assert r.json()["dense_encoder"].startswith("bi-encoder@")  # the generation's: the default, a fine-tuned one
    assert r.json()["translation"] == {"state": "trained", "pairs": 120, "trained_on_pairs": 120, "changed_pairs": 0}
    t = client.get("/threads/t3").json()
    assert t["id"] == "t3" and len(t["answers"]) == 3
    r = client.get("/threads/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found" and "nope" in r.json()["error"]["message"]


def test_the_service_prepares_a_generation_before_it_serves_it(client):
    """What a first reranked /search answers would build per generation (each thread's comment rows) is built while
    the service loads the generation, so no request pays it (bench/generation_switch.py)."""
    svc = client.app.state.service
    gen, pipeline = svc.snapshot()
    assert "thread_runs" in pipeline.retriever.__dict__  # a cached property, already computed
    assert list(pipeline.retriever.thread_answer_rows["t3"]) == [gen.row[f"a:t3_a{j}"] for j in range(3)]
    r = client.post("/reindex", headers=ADMIN)
    assert wait_job(client, r.json()["job"]["id"])["state"] == "succeeded"
    new_gen, new_pipeline = svc.snapshot()
    assert new_gen.name != gen.name and "thread_runs" in new_pipeline.retriever.__dict__


def test_not_ready_without_generation(settings, fast_encoder):
    with TestClient(create_app(settings.model_copy(update=STUB_RANKERS))) as c:
        r = c.get("/ready")
        assert r.status_code == 503 and "cqa reindex" in r.json()["error"]["message"]
        assert c.post("/search", json={"question": {"body": "x"}}).status_code == 503


def test_search_targets_rerank_explain(client):
    r = client.post("/search", json={"question": {"body": "question 7 about visa"}, "k": 3, "target": "questions",
                                     "explain": True, "expand": "rm3", "filters": {"category": "Visas"}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["expansion"]["method"] == "rm3" and out["generation"].startswith("gen-")
    assert [x["rank"] for x in out["results"]] == [1, 2, 3]
    assert {"bm25", "lm", "dense", "first_stage", "rerank"} <= set(out["results"][0]["stages"])
    assert {"bm25", "lm", "dense", "fusion", "rerank", "total"} <= set(out["timings_ms"])
    assert out["reranker"] == "stub-overlap"  # the questions target's reranker ($CQA_SEARCH_RANKER_QUESTIONS)
    plain = client.post("/search", json={"question": {"body": "question 7 about visa"}, "k": 3,
                                         "target": "questions", "rerank": False}).json()
    assert plain["results"][0]["id"] == "t7" and "stages" not in plain["results"][0] and plain["reranker"] is None
    for target in ("questions", "threads", "answers"):  # the thread a page shows, left out of its similar threads
        body = {"question": {"body": "question 7 about visa"}, "k": 10, "target": target}
        assert "t7" in {x["thread_id"] for x in client.post("/search", json=body).json()["results"]}
        left_out = client.post("/search", json={**body, "filters": {"exclude_threads": ["t7", "t7"]}})
        assert left_out.status_code == 200 and left_out.json()["results"], left_out.text
        assert "t7" not in {x["thread_id"] for x in left_out.json()["results"]}
        # GET /threads/t7/similar: the same search from the stored thread, by its id
        t7 = client.get("/threads/t7").json()
        like = {**body, "question": {"subject": t7["subject"], "body": t7["body"]},
                "filters": {"exclude_threads": ["t7"]}}
        similar = client.get(f"/threads/t7/similar?k=10&target={target}")
        assert similar.status_code == 200, similar.text
        assert [(x["id"], x["score"]) for x in similar.json()["results"]] == \
               [(x["id"], x["score"]) for x in client.post("/search", json=like).json()["results"]]
        assert "t7" not in {x["thread_id"] for x in similar.json()["results"]}
    for url, status, needle in (("/threads/nope/similar", 404, "no thread with id 'nope'"),
                                ("/threads/t7/similar?k=0", 422, "k"), ("/threads/t7/similar?k=101", 422, "k"),
                                ("/threads/t7/similar?target=everything", 422, "target")):
        bad = client.get(url)
        assert bad.status_code == status and needle in bad.json()["error"]["message"], (url, bad.text)
    assert client.get("/threads/t7/similar").json()["target"] == "questions"  # what a thread page asks by default
    # threads: reranked, the questions search's threads, by the questions' reranker; without reranking, the first
    # stage grouped by thread (a comment's hit brings its thread)
    for body in ({"body": "rent 5"}, {"body": "question 7 about visa"}):
        threads = client.post("/search", json={"question": body, "target": "threads", "k": 5}).json()
        questions = client.post("/search", json={"question": body, "target": "questions", "k": 5}).json()
        assert threads["results"] and all(x["kind"] == "thread" for x in threads["results"])
        assert threads["target"] == "threads" and threads["reranker"] == "stub-overlap" and threads["reranked"] > 0
        assert [(x["id"], x["score"], x["duplicates"]) for x in threads["results"]] == \
               [(x["id"], x["score"], x["duplicates"]) for x in questions["results"]]
        grouped = client.post("/search", json={"question": body, "target": "threads", "k": 5, "rerank": False}).json()
        assert grouped["reranker"] is None and all(x["kind"] == "thread" for x in grouped["results"])


def test_rerank_sorts_candidates(client):
    body = {"question": {"subject": "visa", "body": "how do I renew my visa"},
            "candidates": [{"id": "a", "text": "the weather is hot"}, {"id": "b", "text": "renew your visa online"},
                           {"id": "c", "text": "visa renew visa office", "author_id": "u1"}]}
    r = client.post("/rerank", json=body)
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["rank"] for x in res] == [1, 2, 3] and res[-1]["id"] == "a"
    assert res[0]["score"] >= res[1]["score"] >= res[2]["score"]
    assert r.json()["metadata"] == "none"  # no asker, two comments without authors, no timestamps
    cands = [{**c, "author_id": f"u{i}", "created_at": f"2024-01-0{i + 1} 10:00"} for i, c in enumerate(body["candidates"])]
    said = client.post("/rerank", json={**body, "candidates": cands, "asker_id": "u9"}).json()
    assert said["metadata"] == "full"  # users known, timestamps in order: the thread's order
    # newest first, with their times: put back in the thread's order by them
    assert client.post("/rerank", json={**body, "candidates": cands[::-1], "asker_id": "u9"}).json()["metadata"] == "full"
    untimed = [{k: v for k, v in c.items() if k != "created_at"} for c in cands[::-1]]
    assert client.post("/rerank", json={**body, "candidates": untimed, "asker_id": "u9", "thread_order": False}
                       ).json()["metadata"] == "no-order"
    assert client.post("/rerank", json={**body, "thread_order": True}).json()["metadata"] == "no-users"
    # a question that is a title alone (two of the first eighty 2016 test-A threads are) is a question
    title_only = client.post("/rerank", json={**body, "question": {"subject": "how do I renew my visa"}})
    assert title_only.status_code == 200, title_only.text
    assert title_only.json()["results"][-1]["id"] == "a"
    found = client.post("/search", json={"question": {"subject": "visa renewal"}, "k": 2})
    assert found.status_code == 200 and found.json()["results"], found.text


def test_rerank_ranks_arabic_input_with_the_arabic_ranker(client, settings):
    """Most letters Arabic script: POST /rerank answers with $CQA_ARABIC_RANKER (bm25-arabic: its Arabic stemmer
    matches a plural to its singular, which the default analyzer does not), scored as in process; English input still
    goes to the default ranker, and /ready names both."""
    from ranking.arabic import ARABIC
    from ranking.candidate_rankers import LexicalRanker
    from ranking.candidates import Candidate, Query
    body = {"question": {"body": "ما هو علاج الصداع المزمن"},
            "candidates": [{"id": "a", "text": "الطقس حار اليوم في الدوحة"},
                           {"id": "b", "text": "العلاجات المتاحة للصداع كثيرة"},
                           {"id": "c", "text": "راجع الطبيب"}]}
    r = client.post("/rerank", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reranker"] == "bm25-arabic" and out["results"][0]["id"] == "b"
    q = Query("rerank", body["question"]["body"], tuple(Candidate(c["id"], c["text"]) for c in body["candidates"]))
    by_id = dict(zip("abc", LexicalRanker("bm25", "bm25-arabic", ARABIC, per_query=True).score([q])[0]))
    assert {x["id"]: x["score"] for x in out["results"]} == pytest.approx(by_id)
    english = {"question": {"body": "how do I renew my visa"}, "candidates": [{"id": "a", "text": "renew it online"}]}
    assert client.post("/rerank", json=english).json()["reranker"] == "stub-overlap"
    assert client.get("/ready").json()["arabic_reranker"] == "bm25-arabic"


def test_rerank_questions_and_answers_rank_arabic_input_with_the_arabic_ranker(client):
    """Most letters Arabic script: POST /rerank/questions and /rerank/answers answer with $CQA_ARABIC_RANKER too, scored
    as in process on the texts as it reads them (a candidate question as subject and body join; a comment after its
    thread's question, as a dev-D pair), and say that the search order was not weighed; English input still goes to
    the subtask B and C rankers, which weigh it."""
    from ranking.arabic import ARABIC
    from ranking.candidate_rankers import LexicalRanker
    from ranking.candidates import Candidate, Query

    def bm25(question: str, texts: dict[str, str]) -> dict[str, float]:  # the forum is English: the candidates' stats
        q = Query("q", question, tuple(Candidate(i, t) for i, t in texts.items()))
        return dict(zip(texts, LexicalRanker("bm25", "bm25-arabic", ARABIC, per_query=True).score([q])[0]))

    question = {"body": "ما هو علاج الصداع المزمن"}
    cands = [{"id": "q1", "subject": "الطقس", "body": "الطقس حار اليوم في الدوحة"},
             {"id": "q2", "body": "العلاجات المتاحة للصداع كثيرة"}]
    r = client.post("/rerank/questions", json={"question": question, "candidates": cands})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reranker"] == "bm25-arabic" and out["search_order"] is False and out["results"][0]["id"] == "q2"
    expected = bm25(question["body"], {"q1": "الطقس\nالطقس حار اليوم في الدوحة", "q2": "العلاجات المتاحة للصداع كثيرة"})
    assert {x["id"]: x["score"] for x in out["results"]} == pytest.approx(expected)

    # c2's own words miss the question; its thread's question holds them, and it is read with them
    threads = [{"id": "r1", "body": "الطقس حار اليوم", "comments": [{"id": "c1", "text": "نعم حار جدا"}]},
               {"id": "r2", "body": "علاج الصداع المزمن", "comments": [{"id": "c2", "text": "راجع الطبيب"}]}]
    r = client.post("/rerank/answers", json={"question": question, "threads": threads})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reranker"] == "bm25-arabic" and out["search_order"] is False
    assert [(x["id"], x["thread_id"]) for x in out["results"]] == [("c2", "r2"), ("c1", "r1")]
    expected = bm25(question["body"], {"c1": "الطقس حار اليوم\nنعم حار جدا", "c2": "علاج الصداع المزمن\nراجع الطبيب"})
    assert {x["id"]: x["score"] for x in out["results"]} == pytest.approx(expected)

    english = {"subject": "visa", "body": "how do I renew my visa"}
    said = client.post("/rerank/questions", json={"question": english, "candidates": [{"id": "q1", "body": "visa"}]})
    assert said.json()["reranker"] == "stub-overlap" and said.json()["search_order"] is True
    said = client.post("/rerank/answers", json={"question": english, "threads": [
        {"id": "r1", "body": "visa", "comments": [{"id": "c1", "text": "renew it online"}]}]})
    assert said.json()["reranker"] == "stub-overlap" and said.json()["search_order"] is True
    assert client.post("/search", json={"question": english}).json()["reranker"] == "stub-overlap"
    assert client.post("/search", json={"question": english, "rerank": False}).status_code == 200
    # /metrics counts which ranker ran, per endpoint
    metrics = client.get("/metrics").text
    for endpoint, ranker in [("/rerank/questions", "bm25-arabic"), ("/rerank/questions", "stub-overlap"),
                             ("/rerank/answers", "bm25-arabic"), ("/rerank/answers", "stub-overlap"),
                             ("/search", "stub-overlap"), ("/search", "none")]:
        assert f'cqa_ranked_total{{endpoint="{endpoint}",ranker="{ranker}"}} 1.0' in metrics, (endpoint, ranker)
    assert 'cqa_ranked_total{endpoint="/rerank",' not in metrics  # no /rerank request here


def test_rerank_with_the_arabic_ranker_off_ranks_arabic_with_the_default(settings, fast_encoder):
    settings = settings.model_copy(update={**STUB_RANKERS, "arabic_ranker": ""})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        r = c.post("/rerank", json={"question": {"body": "ما هو علاج الصداع"},
                                    "candidates": [{"id": "a", "text": "علاج الصداع"}]})
        assert r.status_code == 200 and r.json()["reranker"] == "stub-overlap", r.text
        r = c.post("/rerank/questions", json={"question": {"body": "ما هو علاج الصداع"},
                                              "candidates": [{"id": "q1", "body": "علاج الصداع"}]})
        assert r.status_code == 200 and r.json()["reranker"] == "stub-overlap" and r.json()["search_order"], r.text
        r = c.post("/rerank/answers", json={"question": {"body": "ما هو علاج الصداع"}, "threads": [
            {"id": "r1", "body": "علاج الصداع", "comments": [{"id": "c1", "text": "راجع الطبيب"}]}]})
        assert r.status_code == 200 and r.json()["reranker"] == "stub-overlap" and r.json()["search_order"], r.text
        assert c.get("/ready").json()["arabic_reranker"] is None


def test_rerank_questions_sorts_given_questions(client):
    """POST /rerank/questions: a forum's own candidate questions, sorted by the subtask B ranker; bad input is a 422
    that names the field."""
    q = {"subject": "visa", "body": "how do I renew my visa"}
    cands = [{"id": "q1", "subject": "weather", "body": "is it hot in summer"},
             {"id": "q2", "subject": "visa renewal", "body": "renew my visa online"},
             {"id": "q3", "subject": "renew visa"}]  # a title alone is a question
    r = client.post("/rerank/questions", json={"question": q, "candidates": cands})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reranker"] == "stub-overlap" and [x["rank"] for x in out["results"]] == [1, 2, 3]
    assert out["results"][-1]["id"] == "q1" and {x["id"] for x in out["results"]} == {"q1", "q2", "q3"}
    assert client.get("/ready").json()["question_reranker"] == "stub-overlap" and out["search_order"] is True
    # each candidate may bring the texts of its thread's comments (none, or some)
    answered = [{**cands[0], "comments": ["it is hot", "very hot in July"]}, cands[1], {**cands[2], "comments": []}]
    r = client.post("/rerank/questions", json={"question": q, "candidates": answered})
    assert r.status_code == 200 and [x["id"] for x in r.json()["results"]][-1] == "q1", r.text
    unordered = client.post("/rerank/questions", json={"question": q, "candidates": cands, "search_order": False})
    assert unordered.status_code == 200 and unordered.json()["search_order"] is False, unordered.text
    for payload, needle in [
        ({"question": q, "candidates": cands, "search_order": "sometimes"}, "search_order"),
        ({"question": q, "candidates": []}, "candidates"),
        ({"question": q, "candidates": [{"id": "q1", "subject": " ", "body": ""}]}, "subject or a body"),
        ({"question": q, "candidates": [cands[0], cands[0]]}, "appears twice"),
        ({"question": q, "candidates": [{"id": "q1", "text": "x"}]}, "text"),
        ({"question": q, "candidates": [{"id": "q1", "body": "x" * 20_001}]}, "candidates.0.body"),
        ({"question": {"body": ""}, "candidates": cands}, "question needs a subject or a body"),
        ({"question": q, "candidates": [{**cands[0], "comments": ["fine", " "]}]}, "candidates.0.comments.1"),
        ({"question": q, "candidates": [{**cands[0], "comments": ["x" * 20_001]}]}, "candidates.0.comments.0"),
        ({"question": q, "candidates": [{**cands[0], "comments": "one comment"}]}, "comments"),
        ({"question": q, "candidates": [{**c, "comments": ["ok"] * 70} for c in cands]}, "comments: 210 items"),
    ]:
        bad = client.post("/rerank/questions", json=payload)
        assert bad.status_code == 422 and needle in bad.json()["error"]["message"], (payload, bad.text)


def test_rerank_answers_sorts_the_comments_of_given_threads(client):
    """POST /rerank/answers: the comments of a forum's own related threads, sorted across threads by the subtask C
    ranker, each with its thread; bad input is a 422 that names the field."""
    q = {"subject": "visa", "body": "how do I renew my visa"}
    threads = [{"id": "r1", "subject": "weather", "body": "is it hot in summer", "asker_id": "u1",
                "comments": [{"id": "c1", "text": "very hot in summer", "author_id": "u2"},
                             {"id": "c2", "text": "renew the visa online at the ministry"}]},
               {"id": "r2", "subject": "visa renewal", "category": "Visas",
                "comments": [{"id": "c3", "text": "go to the office", "created_at": "2015-01-01 10:00"}]},
               {"id": "r3", "subject": "renew visa", "comments": []}]  # no comment yet: r3 keeps its rank, adds none
    r = client.post("/rerank/answers", json={"question": q, "threads": threads})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["reranker"] == "stub-overlap" and [x["rank"] for x in out["results"]] == [1, 2, 3]
    assert [(x["id"], x["thread_id"]) for x in out["results"]][0] == ("c2", "r1")  # the comment that answers it
    assert {(x["id"], x["thread_id"]) for x in out["results"]} == {("c1", "r1"), ("c2", "r1"), ("c3", "r2")}
    assert out["results"][0]["score"] >= out["results"][1]["score"] >= out["results"][2]["score"]
    assert client.get("/ready").json()["answers_reranker"] == "stub-overlap"
    one = threads[:1]
    for payload, needle in [
        ({"question": q, "threads": []}, "threads"),
        ({"question": q, "threads": [{**threads[2]}]}, "nothing to rank"),
        ({"question": q, "threads": [one[0], one[0]]}, "thread id 'r1' appears twice"),
        ({"question": q, "threads": [one[0], {**threads[1], "comments": [{"id": "c1", "text": "x"}]}]},
         "comment id 'c1' appears twice"),
        ({"question": q, "threads": [{"id": "r1", "subject": " ", "comments": [{"id": "c", "text": "x"}]}]},
         "subject or a body"),
        ({"question": q, "threads": [{"id": "r1", "subject": "s"}]}, "comments"),
        ({"question": q, "threads": [{**one[0], "answers": []}]}, "answers"),
        ({"question": q, "threads": [{**one[0], "comments": [{"id": "c", "text": "x" * 20_001}]}]},
         "threads.0.comments.0.text"),
        ({"question": q, "threads": [{**one[0], "body": "x" * 20_001}]}, "threads.0.body"),
        ({"question": {"body": ""}, "threads": one}, "question needs a subject or a body"),
    ]:
        bad = client.post("/rerank/answers", json=payload)
        assert bad.status_code == 422 and needle in bad.json()["error"]["message"], (payload, bad.text)


@pytest.mark.parametrize("payload,status,needle", [
    ({"question": {"body": "   "}}, 422, "question needs a subject or a body"),
    ({"question": {"subject": " ", "body": "\n"}}, 422, "question needs a subject or a body"),
    ({"question": {}}, 422, "question needs a subject or a body"),
    ({"question": {"body": "x"}, "k": 0}, 422, "k"),
    ({"question": {"body": "x"}, "k": 101}, 422, "k"),
    ({"question": {"body": "x"}, "offset": -1}, 422, "offset"),
    ({"question": {"body": "x"}, "offset": 100}, 422, "offset"),
    ({"question": {"body": "x"}, "colour": 1}, 422, "colour"),
    ({"question": {"body": "x"}, "target": "everything"}, 422, "target"),
    ({"question": {"body": "x"}, "filters": {"since": "May"}}, 422, "filters.since"),
    ({"question": {"body": "x"}, "filters": {"exclude_threads": [" "]}}, 422, "filters.exclude_threads"),
    ({"question": {"body": "x"}, "filters": {"exclude_threads": "t7"}}, 422, "filters.exclude_threads"),
    ({"question": {"body": "x"}, "filters": {"exclude_threads": [f"t{i}" for i in range(101)]}}, 422,
     "filters.exclude_threads"),
    ({"question": {"body": "x" * 20_001}}, 422, "question.body"),
    ({"question": "  "}, 422, "question needs a subject or a body"),
    ({"question": "x" * 20_001}, 422, "question.body"),
    ({"question": 7}, 422, "question: a question is an object with a subject and a body (either may be left out), or "
                           "a string: its body"),
    ({"question": ["x"]}, 422, "or a string: its body"),
    ({"question": None}, 422, "or a string: its body"),
    ({}, 422, "question"),
])
def test_search_bad_input(client, payload, status, needle):
    r = client.post("/search", json=payload)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["status"] == status and needle in err["message"]


def test_search_results_carry_snippets_with_the_questions_words_marked(client):
    """Each result's snippet: its text where the question's words are (up to 300 characters, on word boundaries),
    each word of the question marked by its offsets, stemmed as the index stems them, stop words not; a long comment's
    snippet is the window that holds them, not its first lines; ``snippets: false`` leaves them out."""
    long = {"id": "long1", "subject": "an unrelated subject", "body": "nothing here",
            "answers": [{"id": "long1a", "text": "Filler words go here. " * 40 + "Renewing the walrus licence "
                         "happens at the zoo office. " + "More filler text. " * 40}]}
    assert client.post("/threads", json={"threads": [long]}, headers=ADMIN).status_code == 200
    assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
    out = client.post("/search", json={"question": "how do I renew a walrus licence?", "k": 5}).json()
    top = next(r for r in out["results"] if r["id"] == "long1a")
    snip = top["snippet"]
    assert snip["truncated"] and snip["start"] > 0 and len(snip["text"]) <= 300
    assert top["text"][snip["start"]:snip["start"] + len(snip["text"])] == snip["text"]
    assert [snip["text"][a:b] for a, b in snip["highlights"]] == ["Renewing", "walrus", "licence"]
    assert "snippets" in out["timings_ms"]
    short = next(r for r in out["results"] if len(r["text"]) <= 300)
    assert short["snippet"]["text"] == short["text"] and not short["snippet"]["truncated"]
    bare = client.post("/search", json={"question": "how do I renew a walrus licence?", "k": 5, "snippets": False})
    assert all("snippet" not in r for r in bare.json()["results"]) and "snippets" not in bare.json()["timings_ms"]


def test_search_pages_follow_one_another_without_overlap_or_gap(client):
    """A later page (offset) holds the results a larger k would have ranked there, with their ranks and scores, for
    every target, reranked or not; next_offset leads from one page to the next and is null at the last one;
    GET /threads/{id}/similar pages the same way."""
    for target in ("answers", "questions", "threads"):
        for rerank in (True, False):
            ask = {"question": {"body": "visa question rent"}, "target": target, "rerank": rerank}
            whole = client.post("/search", json={**ask, "k": 100}).json()
            found = len(whole["results"])
            assert found > 12 and whole["next_offset"] is None and whole["offset"] == 0
            pages, offset = [], 0
            while offset is not None:
                page = client.post("/search", json={**ask, "k": 6, "offset": offset}).json()
                assert "results" in page, page
                assert page["offset"] == offset and page["target"] == target
                pages += page["results"]
                offset = page["next_offset"]
                assert offset is None or offset == page["offset"] + 6
                assert len(page["results"]) == (6 if offset is not None else found - page["offset"])
            assert [(r["id"], r["rank"], r["score"]) for r in pages] == \
                   [(r["id"], r["rank"], r["score"]) for r in whole["results"]], (target, rerank)
            assert [r["rank"] for r in pages] == list(range(1, found + 1))
    similar = client.get("/threads/t1/similar", params={"k": 4}).json()
    later = client.get("/threads/t1/similar", params={"k": 4, "offset": 4}).json()
    both = client.get("/threads/t1/similar", params={"k": 8}).json()
    assert similar["next_offset"] == 4 and later["offset"] == 4
    assert [r["id"] for r in similar["results"] + later["results"]] == [r["id"] for r in both["results"]]
    last = client.get("/threads/t1/similar", params={"k": 10, "offset": 95, "target": "answers"}).json()
    # a page ends at rank 100; past the results there are, a page is empty
    assert client.get("/threads/t1/similar", params={"k": 10, "offset": 60}).json()["results"] == []
    assert [r["rank"] for r in last["results"]] == [96, 97, 98, 99, 100] and last["next_offset"] is None
    assert client.get("/threads/t1/similar", params={"offset": 100}).status_code == 422


def test_a_question_sent_as_a_string_is_its_body(client):
    """`{"question": "..."}`, what a first call to the API tends to send, is the question with that body, at every
    endpoint that asks about a new question; a candidate question stays an object (it has an id)."""
    text = "How do I renew my residence permit?"
    for path, rest in (("/search", {"k": 5}), ("/rerank", {"candidates": [{"id": "a", "text": "renew it online"}]}),
                       ("/rerank/questions", {"candidates": [{"id": "q", "body": "permit renewal"}]}),
                       ("/rerank/answers", {"threads": [{"id": "t", "body": "permit", "comments": [
                           {"id": "c", "text": "renew it online"}]}]})):
        short, full = (client.post(path, json={"question": q, **rest}) for q in (text, {"body": text}))
        assert short.status_code == full.status_code == 200, (path, short.text[:300])
        drop = {"timings_ms", "search_id"}  # each search its own id in the feedback log
        assert {k: v for k, v in short.json().items() if k not in drop} == \
            {k: v for k, v in full.json().items() if k not in drop}, path
    r = client.post("/rerank/questions", json={"question": text, "candidates": ["permit renewal"]})
    assert r.status_code == 422 and "candidates.0" in r.json()["error"]["message"]


def test_transport_level_bad_input(client):
    r = client.post("/search", content=b'{"question": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = client.post("/search", content=b'{"question": {"body": "\xff\xfe"}}', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"]
    r = client.post("/search", content=b"question=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    big = json.dumps({"question": {"body": "x" * 60_000}})
    r = client.post("/search", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert client.get("/search").status_code == 405
    r = client.post("/rerank", json={"question": {"body": "q"}, "candidates": []})
    assert r.status_code == 422 and "candidates" in r.json()["error"]["message"]
    r = client.post("/rerank", json={"question": {"body": "q"}, "candidates": [{"id": "a", "text": "1"},
                                                                                {"id": "a", "text": "2"}]})
    assert r.status_code == 422 and "twice" in r.json()["error"]["message"]


def test_admin_auth(client, settings):
    thread = {"id": "n1", "subject": "new question", "answers": [{"id": "n1a", "text": "an answer"}]}
    assert client.post("/threads", json={"threads": [thread]}).status_code == 401
    r = client.post("/threads", json={"threads": [thread]}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403
    assert client.delete("/threads/t1").status_code == 401
    assert client.post("/reindex").status_code == 401
    with TestClient(create_app(settings.model_copy(update={"api_token": None, **STUB_RANKERS}))) as c:
        r = c.post("/threads", json={"threads": [thread]}, headers=ADMIN)
        assert r.status_code == 403 and "disabled" in r.json()["error"]["message"]


def test_backups_over_http_copy_export_list_download_and_delete(client, tmp_path):
    """POST /backups runs `cqa backup` (or `cqa export`) as a job into the backups folder; GET /backups lists the
    complete files, newest first; GET /backups/{name} downloads one, a store that opens with every thread, or JSONL
    that `cqa ingest` reads; DELETE removes it. Admin only; a name that is not a backup's is a 404, never a path."""
    import gzip
    import sqlite3

    for method, path in (("POST", "/backups"), ("GET", "/backups"), ("GET", "/backups/x"), ("DELETE", "/backups/x")):
        assert client.request(method, path).status_code == 401, path
    svc = client.app.state.service
    assert client.get("/backups", headers=ADMIN).json() == {"folder": str(svc.settings.backups_folder), "backups": []}
    assert client.post("/backups", json={"kind": "zip"}, headers=ADMIN).status_code == 422
    assert client.post("/backups", json={"kind": "store", "to": "/etc"}, headers=ADMIN).status_code == 422
    r = client.post("/backups", headers=ADMIN)  # no body: a copy of the store
    assert r.status_code == 202 and r.json()["started"]
    store = wait_job(client, r.json()["job"]["id"])
    assert store["state"] == "succeeded", store
    made = store["result"]
    assert made["kind"] == "store" and made["threads"] == 40 and made["answers"] == 120 and made["fingerprint"]
    client.post("/threads", json={"threads": [{"id": "after", "subject": "written after the copy"}]}, headers=ADMIN)
    r = client.post("/backups", json={"kind": "export"}, headers=ADMIN)
    exported = wait_job(client, r.json()["job"]["id"])
    assert exported["state"] == "succeeded" and exported["result"]["threads"] == 41, exported
    listed = client.get("/backups", headers=ADMIN).json()["backups"]
    assert [b["name"] for b in listed] == [exported["result"]["name"], made["name"]]  # newest first
    assert [b["kind"] for b in listed] == ["export", "store"] and all(b["bytes"] > 0 for b in listed)
    got = client.get(f"/backups/{made['name']}", headers=ADMIN)
    assert got.status_code == 200 and got.headers["content-type"] == "application/vnd.sqlite3"
    assert made["name"] in got.headers["content-disposition"] and len(got.content) == made["bytes"]
    (tmp_path / "copy.sqlite3").write_bytes(got.content)
    with sqlite3.connect(tmp_path / "copy.sqlite3") as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("SELECT count(*) FROM threads").fetchone()[0] == 40  # as of the moment it began
    got = client.get(f"/backups/{exported['result']['name']}", headers=ADMIN)
    assert got.status_code == 200 and got.headers["content-type"] == "application/gzip"
    lines = gzip.decompress(got.content).decode().splitlines()
    assert len(lines) == 41 and json.loads(lines[-1])["id"] == "after"
    for name in ("threads.sqlite3", "threads-x.sqlite3", ".threads-20261125T051200.123Z.sqlite3.tmp",
                 "threads-20261125T051200.123Z.sqlite3"):  # the store itself, a half-written file, one never made
        r = client.get(f"/backups/{name}", headers=ADMIN)
        assert r.status_code == 404 and "GET /backups lists them" in r.json()["error"]["message"], name
    assert client.get("/backups/..%2Fthreads.sqlite3", headers=ADMIN).status_code == 404  # no route takes a path
    assert client.delete(f"/backups/{made['name']}", headers=ADMIN).json()["deleted"] == made["name"]
    assert client.get(f"/backups/{made['name']}", headers=ADMIN).status_code == 404
    assert [b["name"] for b in client.get("/backups", headers=ADMIN).json()["backups"]] == [exported["result"]["name"]]
    assert made["deleted_older"] == [] and exported["result"]["deleted_partial"] == []  # CQA_BACKUP_KEEP 0: keep all
    svc.settings = svc.settings.model_copy(update={"backup_keep": 1})  # keep the newest of each kind
    names = []
    for _ in range(2):
        job = wait_job(client, client.post("/backups", json={"kind": "store"}, headers=ADMIN).json()["job"]["id"])
        names.append(job["result"]["name"])
    assert job["result"]["deleted_older"] == [names[0]]
    assert [b["name"] for b in client.get("/backups", headers=ADMIN).json()["backups"]] == \
        [names[1], exported["result"]["name"]]


def test_status_over_http_says_what_cqa_status_says(client, tmp_path):
    """GET /status (admin): `cqa status --json` from the service, the same object; a write since the build shows the
    live generation behind the store, and what to do."""
    from indexing.status import folder_status

    assert client.get("/status").status_code == 401
    svc = client.app.state.service
    said = client.get("/status", params={"check": "true"}, headers=ADMIN).json()
    assert said["attention"] == [] and said["store"]["threads"] == 40 and said["store"]["check"] == "ok", said
    gen = said["generation"]
    assert gen["live"] == client.get("/ready").json()["generation"] and gen["behind"] is None
    assert [lease["generation"] for lease in gen["leases"]] == [gen["live"]]  # this process's
    client.post("/threads", json={"threads": [{"id": "late", "subject": "written after the build"}]}, headers=ADMIN)
    said = client.get("/status", headers=ADMIN).json()
    assert said["generation"]["behind"] == "store" and "cqa reindex --if-stale" in said["attention"][0], said
    again = folder_status(svc.settings, svc.settings.backups_folder).as_dict()  # what `cqa status` reads
    assert (said["store"], said["attention"], said["backups"]) == (again["store"], again["attention"], again["backups"])


def test_threads_upsert_delete_and_reindex_job(client):
    thread = {"id": "n1", "subject": "brand new zebra question", "category": "Visas",
              "answers": [{"id": "n1a", "text": "zebra crossing answer"}]}
    r = client.post("/threads", json={"threads": [thread]}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["inserted"] == 1 and "next reindex" in r.json()["note"]
    assert client.get("/threads/n1").json()["answers"][0]["text"] == "zebra crossing answer"
    # stored, not indexed yet: its similar threads come from the live generation, which cannot hold it
    assert "n1" not in {x["thread_id"] for x in client.get("/threads/n1/similar?target=answers").json()["results"]}
    r = client.post("/threads", json={"threads": [thread]}, headers=ADMIN)
    assert r.json()["unchanged"] == 1
    bad = client.post("/threads", json={"threads": [{"id": "x", "subject": " "}]}, headers=ADMIN)
    assert bad.status_code == 422 and "threads.0" in bad.json()["error"]["message"]
    clash = client.post("/threads", json={"threads": [{"id": "n2", "subject": "q",
                                                       "answers": [{"id": "n1a", "text": "t"}]}]}, headers=ADMIN)
    assert clash.status_code == 409 and "already belongs" in clash.json()["error"]["message"]
    before = client.get("/ready").json()["generation"]
    r = client.post("/reindex", headers=ADMIN)
    assert r.status_code == 202
    job = wait_job(client, r.json()["job"]["id"])
    assert job["state"] == "succeeded", job
    after = client.get("/ready").json()["generation"]
    assert after != before and after == job["result"]["generation"]
    # one new comment of 121: the live translation table kept ($CQA_TRANSLATION_RETRAIN_CHANGED), and /ready says so
    assert client.get("/ready").json()["translation"] == {"state": "kept", "pairs": 121, "trained_on_pairs": 120,
                                                           "changed_pairs": 1}
    hits = client.post("/search", json={"question": {"body": "zebra"}, "k": 3, "rerank": False}).json()["results"]
    assert hits[0]["id"] == "n1a"
    similar = client.get("/threads/n1/similar?target=answers&rerank=false")  # indexed now: its own comment left out
    assert similar.status_code == 200 and "n1a" not in {x["id"] for x in similar.json()["results"]}
    assert client.delete("/threads/n1", headers=ADMIN).json()["deleted"] == "n1"
    assert client.get("/threads/n1").status_code == 404
    assert client.delete("/threads/n1", headers=ADMIN).status_code == 404
    assert client.get("/jobs/doesnotexist").status_code == 404


def test_searches_within_tags(client):
    """POST /search's ``filters.tags`` and GET /threads/{id}/similar's ``tag``: only threads that carry every tag
    asked (their meta.tags as a forum's JSONL or a StackExchange dump gives them, case and spacing ignored), for
    every target; bad tags are a 422 naming the field; GET /tags lists the tags with their threads, by prefix; a
    live generation built before the tags column answers 409 with what to run."""
    tagged = [{"id": f"g{i}", "subject": f"gecko question {i}", "body": "where to buy gecko food",
               "answers": [{"id": f"g{i}a", "text": f"gecko food answer {i}"}], "meta": {"tags": tags}}
              for i, tags in enumerate((["Pets", "reptiles"], ["pets"], "reptiles", []))]
    assert client.post("/threads", json={"threads": tagged}, headers=ADMIN).json()["inserted"] == 4
    assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"

    def threads_found(target, tags, **more):
        r = client.post("/search", json={"question": {"body": "gecko food"}, "k": 100, "target": target,
                                         "filters": {"tags": tags, **more}})
        assert r.status_code == 200, r.json()
        return {x["thread_id"] for x in r.json()["results"]}

    for target in ("answers", "questions", "threads"):
        assert threads_found(target, ["pets"]) == {"g0", "g1"}, target
        assert threads_found(target, ["REPTILES", "pets "]) == {"g0"}, target
        assert threads_found(target, ["reptiles"], exclude_threads=["g0"]) == {"g2"}, target
    assert threads_found("answers", ["no such tag"]) == set()
    for target in ("answers", "questions"):  # none carrying a tag left out; with tags asked, those without it
        assert threads_found(target, [], exclude_tags=["REPTILES"]) >= {"g1", "g3"}
        assert not threads_found(target, [], exclude_tags=["reptiles"]) & {"g0", "g2"}
        assert threads_found(target, ["pets"], exclude_tags=["reptiles", "nothing"]) == {"g1"}
    assert {x["thread_id"] for x in client.get("/threads/g3/similar", params={
        "tag": "pets", "not_tag": "reptiles"}).json()["results"]} == {"g1"}
    for target in ("answers", "questions", "threads"):  # any of: one of them at least
        assert threads_found(target, [], any_tags=["REPTILES", "nothing"]) == {"g0", "g2"}, target
        assert threads_found(target, [], any_tags=["pets", "reptiles"]) == {"g0", "g1", "g2"}, target
        assert threads_found(target, ["pets"], any_tags=["reptiles", "nothing"]) == {"g0"}, target
        assert threads_found(target, [], any_tags=["pets", "reptiles"], exclude_tags=["pets"]) == {"g2"}, target
    assert {x["thread_id"] for x in client.get("/threads/g3/similar", params={
        "any_tag": ["reptiles", "nothing"], "k": 100}).json()["results"]} == {"g0", "g2"}
    for target in ("answers", "questions", "threads"):  # groups of alternatives: one of each group
        assert threads_found(target, [], tag_groups=[["pets", "nothing"], ["reptiles"]]) == {"g0"}, target
        assert threads_found(target, [], tag_groups=[["pets", "reptiles"]]) == {"g0", "g1", "g2"}, target
        assert threads_found(target, [], tag_groups=[["pets"], ["reptiles"]], any_tags=["nothing"]) == set(), target
    assert {x["thread_id"] for x in client.get("/threads/g3/similar", params={
        "tag_group": ["pets|nothing", " reptiles | x"], "k": 100}).json()["results"]} == {"g0"}
    for bad, field in (({"tag_groups": [[]]}, "filters.tag_groups.0"), ({"tag_groups": [["pets", ""]]},
                                                                         "filters.tag_groups.0.1"),
                       ({"tag_groups": [["pets"]] * 11}, "filters.tag_groups"),
                       ({"tag_groups": [[f"t{i}" for i in range(11)]]}, "filters.tag_groups.0"),
                       ({"tag_groups": ["pets"]}, "filters.tag_groups.0")):
        r = client.post("/search", json={"question": "gecko", "filters": bad})
        assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == field, (bad, r.json())
    r = client.get("/threads/g3/similar", params={"tag_group": ["pets|"]})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == "tag_group.0.1", r.json()
    shown = client.post("/search", json={"question": "gecko food", "k": 100, "target": "questions"}).json()["results"]
    assert {x["thread_id"]: x.get("thread_tags") for x in shown if x["thread_id"] in ("g0", "g1", "g2", "g3")} == {
        "g0": ["pets", "reptiles"], "g1": ["pets"], "g2": ["reptiles"], "g3": None}  # none: the field left out
    assert not any("thread_tags" in x for x in shown if x["thread_id"][0] != "g")
    similar = client.get("/threads/g3/similar", params={"tag": ["pets"], "k": 100})
    assert similar.status_code == 200 and {x["thread_id"] for x in similar.json()["results"]} == {"g0", "g1"}
    assert {x["thread_id"] for x in client.get("/threads/g3/similar", params={"tag": ["pets", "reptiles"]}).json()[
        "results"]} == {"g0"}
    for bad, field in (({"tags": [""]}, "filters.tags.0"), ({"tags": ["x" * 101]}, "filters.tags.0"),
                       ({"tags": [f"t{i}" for i in range(11)]}, "filters.tags"), ({"tags": "pets"}, "filters.tags")):
        r = client.post("/search", json={"question": "gecko", "filters": bad})
        assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == field, (bad, r.json())
    r = client.get("/threads/g3/similar", params={"tag": ["pets", " "]})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == "tag.1", r.json()
    r = client.get("/threads/g3/similar", params={"not_tag": ["x" * 101]})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == "not_tag.0", r.json()
    r = client.get("/threads/g3/similar", params={"any_tag": ["pets", ""]})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == "any_tag.1", r.json()
    r = client.post("/search", json={"question": "gecko", "filters": {"any_tags": [f"t{i}" for i in range(11)]}})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == "filters.any_tags", r.json()
    # tag synonyms: a filter on a synonym or its target takes the family, at once, no reindex
    assert client.get("/tags/synonyms").json() == {"synonyms": []}
    r = client.put("/tags/synonyms/ Reptile ", json={"target": "REPTILES"}, headers=ADMIN)
    assert r.status_code == 200 and r.json() == {"source": "reptile", "target": "reptiles"}, r.json()
    for target in ("answers", "questions"):
        assert threads_found(target, ["reptile"]) == {"g0", "g2"}, target
        assert threads_found(target, ["pets"], exclude_tags=["reptile"]) == {"g1"}, target
        assert threads_found(target, [], any_tags=["reptile"]) == threads_found(target, [], any_tags=["reptiles"])
        assert threads_found(target, [], tag_groups=[["reptile", "nothing"], ["pets"]]) == {"g0"}, target
    assert {x["thread_id"] for x in client.get("/threads/g3/similar", params={"tag": "reptile", "k": 100}).json()[
        "results"]} == {"g0", "g2"}
    typed = client.get("/tags", params={"prefix": " REPTILE"}).json()  # the synonym typed offers its tag
    assert typed["synonyms"] == [{"source": "reptile", "target": "reptiles"}] and typed["tags"][0]["tag"] == "reptiles"
    assert client.get("/tags").json()["synonyms"] == []  # none without a prefix
    assert client.put("/tags/synonyms/pets", json={"target": "reptiles"}, headers=ADMIN).status_code == 200
    assert client.get("/tags").json()["tags"] == [  # each thread of the family once: g0 carries both tags
        {"tag": "pets", "threads": 2, "with_synonyms": 3}, {"tag": "reptiles", "threads": 2, "with_synonyms": 3}]
    assert threads_found("questions", ["reptiles"]) == {"g0", "g1", "g2"}  # what a search within either finds
    assert client.delete("/tags/synonyms/pets", headers=ADMIN).status_code == 200
    assert client.get("/tags").json()["tags"][1] == {"tag": "reptiles", "threads": 2, "with_synonyms": 2}
    for source, target, status in (("lizard", "reptile", 409), ("reptiles", "pets", 409), ("pets", " PETS", 422)):
        r = client.put(f"/tags/synonyms/{source}", json={"target": target}, headers=ADMIN)
        assert r.status_code == status, (source, r.json())
    assert "synonym of 'reptiles'" in client.put("/tags/synonyms/lizard", json={"target": "reptile"},
                                                 headers=ADMIN).json()["error"]["message"]
    assert client.put("/tags/synonyms/lizard", json={"target": "reptiles"}).status_code == 401  # admin only
    assert client.put("/tags/synonyms/lizard", json={"target": ""}, headers=ADMIN).status_code == 422
    from indexing.store import ThreadStore
    with ThreadStore(client.app.state.service.settings.store_path) as other:  # another process's change is seen
        other.set_tag_synonym("lizard", "reptiles")
    assert client.get("/tags/synonyms").json()["synonyms"] == [{"source": "lizard", "target": "reptiles"},
                                                               {"source": "reptile", "target": "reptiles"}]
    assert threads_found("questions", ["lizard"]) == {"g0", "g2"}
    r = client.delete("/tags/synonyms/REPTILE", headers=ADMIN)
    assert r.status_code == 200 and r.json() == {"source": "reptile", "target": "reptiles"}
    assert threads_found("questions", ["reptile"]) == set()  # a tag of its own again, carried by no thread
    assert client.delete("/tags/synonyms/reptile", headers=ADMIN).status_code == 404
    assert client.delete("/tags/synonyms/lizard", headers=ADMIN).status_code == 200
    listed = client.get("/tags").json()  # the forum's tags, most threads first
    assert listed["tags"] == [{"tag": "pets", "threads": 2}, {"tag": "reptiles", "threads": 2}]
    assert listed["matching"] == 2 and listed["generation"] == client.get("/ready").json()["generation"]
    assert client.get("/tags", params={"prefix": " REP", "limit": 1}).json() == {
        "generation": listed["generation"], "tags": [{"tag": "reptiles", "threads": 2}], "matching": 1, "synonyms": []}
    assert client.get("/tags", params={"prefix": "zzz"}).json()["tags"] == []
    assert client.get("/tags", params={"limit": 0}).status_code == 422
    _, pipeline = client.app.state.service.snapshot()
    pipeline.retriever.knows_tags = False  # as a generation built before round 55 is read
    r = client.post("/search", json={"question": "gecko", "filters": {"tags": ["pets"]}})
    assert r.status_code == 409 and r.json()["error"]["code"] == "reindex_needed"
    assert "cqa reindex" in r.json()["error"]["message"] and r.json()["error"]["request_id"]
    assert client.get("/threads/g3/similar", params={"tag": "pets"}).status_code == 409
    assert client.get("/tags").status_code == 409
    assert client.post("/search", json={"question": "gecko", "filters": {"exclude_tags": ["pets"]}}).status_code == 409
    assert client.post("/search", json={"question": "gecko", "filters": {"any_tags": ["pets"]}}).status_code == 409
    assert client.post("/search", json={"question": "gecko", "filters": {"tag_groups": [["pets"]]}}).status_code == 409
    assert client.post("/search", json={"question": "gecko food", "filters": {"category": None}}).status_code == 200


def test_comments_of_a_thread_added_edited_and_deleted_one_at_a_time(client):
    """POST /threads/{id}/answers adds a forum's new comment to a stored thread (or replaces one it holds) without
    the thread sent again, and encodes only that comment ahead of the build; DELETE /threads/{id}/answers/{answer_id}
    removes one. Search sees each after the next build. Admin only; every refusal is a 4xx that wrote nothing."""
    import re

    def ahead() -> float:  # texts POST requests have put in the embedding cache, encoded or found there
        m = dict(re.findall(r'cqa_encode_ahead_texts_total\{outcome="(encoded|cached)"\} ([0-9.]+)',
                            client.get("/metrics").text))
        return sum(map(float, m.values()))
    new = {"id": "t5_new", "text": "try the quokka embassy on Tuesdays", "author_id": "u42",
           "created_at": "2026-11-28 09:00:00"}
    assert client.post("/threads/t5/answers", json={"answers": [new]}).status_code == 401
    assert client.delete("/threads/t5/answers/t5_a0").status_code == 401
    before, texts = client.get("/threads/t5").json(), ahead()
    r = client.post("/threads/t5/answers", json={"answers": [new]}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json() | {"note": ""} == {"thread_id": "t5", "inserted": 1, "updated": 0, "unchanged": 0, "answers": 4,
                                       "answers_suppressed": 0, "posts_anonymized": 0, "answers_taken_down": 0,
                                       "note": ""}
    per_comment = 2 if client.app.state.settings.answer_spec is not None else 1  # the answer encoder's too
    assert ahead() - texts == 1 + per_comment  # the thread's question and this comment, not its other comments
    after = client.get("/threads/t5").json()
    assert after["answers"] == before["answers"] + [{**new, "label": None, "meta": {}}]
    edit = {"id": "t5_a1", "text": "answer 1 on rent 5, edited"}
    r = client.post("/threads/t5/answers", json={"answers": [edit, new]}, headers=ADMIN).json()
    assert (r["inserted"], r["updated"], r["unchanged"], r["answers"]) == (0, 1, 1, 4)
    assert [a["text"] for a in client.get("/threads/t5").json()["answers"]][1:3] == [edit["text"], "answer 2 on rent 5"]
    stored = client.get("/threads/t5").json()
    for path, body, status, needle in (
            ("/threads/nope/answers", {"answers": [new]}, 404, "no thread with id 'nope'"),
            ("/threads/t5/answers", {"answers": []}, 422, "answers"),
            ("/threads/t5/answers", {"answers": [new, new]}, 422, "answer id 't5_new' appears twice"),
            ("/threads/t5/answers", {"answers": [{"id": " ", "text": "x"}]}, 422, "answer id must not be blank"),
            ("/threads/t5/answers", {"answers": [{"id": "t5_x", "text": "x\ud800"}]}, 422, "unpaired surrogate"),
            ("/threads/t5/answers", {"answers": [{"id": "t5_x", "text": "x", "votes": 3}]}, 422, "votes"),
            ("/threads/t5/answers", {"answers": [{"id": "t5_x", "text": "fine"}, {"id": "t6_a0", "text": "taken"}]},
             409, "already belongs to thread 't6'")):
        r = client.post(path, content=json.dumps(body, ensure_ascii=True), headers={**ADMIN,
                        "content-type": "application/json"})
        assert r.status_code == status and needle in r.json()["error"]["message"], (body, r.text)
    assert client.get("/threads/t5").json() == stored and client.get("/threads/t6").json()["answers"][0]["id"] == "t6_a0"
    job = wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])
    assert job["state"] == "succeeded", job
    hits = client.post("/search", json={"question": {"body": "quokka embassy"}, "k": 3, "rerank": False}).json()
    assert hits["results"][0]["id"] == "t5_new"
    r = client.delete("/threads/t5/answers/t5_new", headers=ADMIN)
    assert r.status_code == 200 and r.json()["deleted"] == "t5_new" and "removed from the store" in r.json()["note"]
    assert "search results at once" in r.json()["note"]
    assert [a["id"] for a in client.get("/threads/t5").json()["answers"]] == ["t5_a0", "t5_a1", "t5_a2"]
    for rerank in (False, True):  # gone from every search at once, before any build drops it from the indexes
        hits = client.post("/search", json={"question": {"body": "quokka embassy"}, "k": 10, "rerank": rerank}).json()
        assert hits["results"] and "t5_new" not in {i for x in hits["results"] for i in (x["id"], *x["duplicates"])}
    for path, needle in (("/threads/t5/answers/t5_new", "thread 't5' has no answer with id 't5_new'"),
                         ("/threads/nope/answers/t5_a0", "no thread with id 'nope'")):
        r = client.delete(path, headers=ADMIN)
        assert r.status_code == 404 and needle in r.json()["error"]["message"]
    job = wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])
    hits = client.post("/search", json={"question": {"body": "quokka embassy"}, "k": 10, "rerank": False}).json()
    assert "t5_new" not in {x["id"] for x in hits["results"]}


def test_a_stored_threads_comments_ranked_by_its_id_as_post_rerank_ranks_them(client):
    """GET /threads/{id}/answers ranks a stored thread's comments through POST /rerank's own code, with what the
    store holds (subject and body, asker, each comment's author and time, in the thread's order): the same answer as
    that request. A thread without comments has none to rank; an unknown id is a 404; a thread longer than
    CQA_MAX_THREAD_COMMENTS (not POST /rerank's CQA_MAX_CANDIDATES: the store sets the size) is a 422 that says so."""
    client.post("/threads", headers=ADMIN, json={"threads": [{
        "id": "r1", "subject": "Where to renew a visa?", "body": "Mine ends next week", "author_id": "asker",
        "answers": [{"id": "r1a", "text": "At the immigration office in Doha", "author_id": "u1",
                     "created_at": "2015-01-01 10:00:00"},
                    {"id": "r1b", "text": "thanks!", "author_id": "asker", "created_at": "2015-01-01 11:00:00"},
                    {"id": "r1c", "text": "Renew online on the ministry site", "author_id": "u2",
                     "created_at": "2015-01-01 12:00:00"}]}]})
    got = client.get("/threads/r1/answers")
    assert got.status_code == 200, got.text
    t = client.get("/threads/r1").json()
    sent_body = {
        "question": {"subject": t["subject"], "body": t["body"]}, "asker_id": t["author_id"], "thread_order": True,
        "candidates": [{"id": a["id"], "text": a["text"], "author_id": a["author_id"], "created_at": a["created_at"]}
                       for a in t["answers"]]}
    sent = client.post("/rerank", json=sent_body).json()
    assert got.json()["results"] == sent["results"] and got.json()["metadata"] == sent["metadata"] == "full"
    assert sorted(r["id"] for r in got.json()["results"]) == ["r1a", "r1b", "r1c"]
    client.post("/threads", headers=ADMIN, json={"threads": [{"id": "r2", "subject": "no comment yet"}]})
    assert client.get("/threads/r2/answers").json()["results"] == []
    r = client.get("/threads/nope/answers")
    assert r.status_code == 404 and "no thread with id 'nope'" in r.json()["error"]["message"]
    # the store keeps a question of invisible characters (forum data), which no ranker can read: a 422 that says so
    client.post("/threads", headers=ADMIN, json={"threads": [{"id": "r3", "subject": "\u200b",
                                                              "answers": [{"id": "r3a", "text": "a reply"}]}]})
    r = client.get("/threads/r3/answers")
    assert r.status_code == 422 and "thread 'r3' cannot be ranked as stored: question: the question needs a subject" \
        in r.json()["error"]["message"], r.text
    svc = client.app.state.service
    svc.settings = svc.settings.model_copy(update={"max_candidates": 2})  # POST /rerank's limit: a client's request
    assert client.post("/rerank", json=sent_body).status_code == 422
    assert client.get("/threads/r1/answers").json()["results"] == sent["results"]  # the store's own thread ranks
    svc.settings = svc.settings.model_copy(update={"max_thread_comments": 2})
    r = client.get("/threads/r1/answers")
    assert r.status_code == 422 and "has 3 comments, more than CQA_MAX_THREAD_COMMENTS (2)" in \
        r.json()["error"]["message"]


def test_a_question_edited_alone_keeps_every_comment(client):
    """PATCH /threads/{id} changes the thread's own fields that it sends and keeps its comments, read and written in
    one transaction: an edit never drops a comment added meanwhile, which a whole-thread POST /threads built before
    that comment would. A thread it would leave without subject and body is refused, and so is an empty edit."""
    from app.schemas import QuestionEditIn
    from indexing.store import QUESTION_FIELDS
    assert set(QuestionEditIn.model_fields) == QUESTION_FIELDS  # the request takes what the store edits
    assert client.patch("/threads/t3", json={"subject": "x"}).status_code == 401
    client.post("/threads/t3/answers", json={"answers": [{"id": "t3_late", "text": "posted meanwhile"}]}, headers=ADMIN)
    before = client.get("/threads/t3").json()
    import re

    def ahead() -> float:  # texts put in the embedding cache ahead of the build, encoded or found there
        return sum(float(v) for v in re.findall(r'cqa_encode_ahead_texts_total\{outcome="(?:encoded|cached)"\} '
                                                 r'([0-9.]+)', client.get("/metrics").text))
    texts = ahead()
    r = client.patch("/threads/t3", json={"subject": "question 3 about a walrus visa", "category": None},
                     headers=ADMIN)
    assert r.status_code == 200 and r.json()["changed"] is True and "accepted and durable" in r.json()["note"]
    assert ahead() == texts + 1  # the question's new text, encoded ahead of the build; no comment
    client.patch("/threads/t3", json={"category": "Visas"}, headers=ADMIN)
    assert ahead() == texts + 1  # no text changed: nothing to encode
    client.patch("/threads/t3", json={"category": None}, headers=ADMIN)
    after = client.get("/threads/t3").json()
    assert after == {**before, "subject": "question 3 about a walrus visa", "category": None}
    assert [a["id"] for a in after["answers"]] == ["t3_a0", "t3_a1", "t3_a2", "t3_late"]
    again = client.patch("/threads/t3", json={"subject": "question 3 about a walrus visa"}, headers=ADMIN).json()
    assert again["changed"] is False and "nothing changed" in again["note"]
    for body, status, needle in (({"subject": "", "body": " "}, 422, "neither subject nor body"),
                                 ({}, 422, "send at least one of subject"),
                                 ({"body": None}, 422, "body: not null"),
                                 ({"answers": []}, 422, "answers"),
                                 ({"body": "x" * 20_001}, 422, "body"),  # CQA_MAX_TEXT_CHARS
                                 ({"subject": "x" * 50_001}, 413, "the limit is 50000")):
        r = client.patch("/threads/t3", json=body, headers=ADMIN)
        assert r.status_code == status and needle in r.json()["error"]["message"], (body, r.text)
    r = client.patch("/threads/nope", json={"subject": "x"}, headers=ADMIN)
    assert r.status_code == 404 and "no thread with id 'nope'" in r.json()["error"]["message"]
    assert client.get("/threads/t3").json() == after  # every refusal wrote nothing
    job = wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])
    assert job["state"] == "succeeded", job
    hits = client.post("/search", json={"question": {"body": "walrus"}, "k": 3, "rerank": False,
                                        "target": "questions"}).json()["results"]
    assert hits[0]["thread_id"] == "t3" and "walrus" in hits[0]["text"], hits


def test_whole_threads_with_revisions_and_writes_on_the_etag_read(client):
    """Two ways a forum keeps a thread from losing what another write added. A sync job sends each whole thread with
    its revision: a snapshot delivered after a later one is listed as superseded and not written. A moderation tool
    sends back the ETag it read (GET /threads/{id}, or its last write's response) as If-Match: a write over a thread
    changed since is a 412 with the ETag now, and writes nothing. If-None-Match on a GET answers 304 while the
    thread is as read."""
    def thread(rev: int, n: int) -> dict:
        return {"id": "rv", "subject": "Where to buy a bike?", "revision": rev,
                "answers": [{"id": f"rv{i}", "text": f"shop number {i}"} for i in range(n)]}
    r = client.post("/threads", headers=ADMIN, json={"threads": [thread(7, 2)]})
    assert r.status_code == 200 and r.json()["superseded"] == [] and r.json()["inserted"] == 1
    def ahead() -> list[str]:  # the counts of texts encoded ahead of the build
        return [x for x in client.get("/metrics").text.splitlines() if x.startswith("cqa_encode_ahead_texts_total")]
    before = ahead()
    r = client.post("/threads", headers=ADMIN, json={"threads": [thread(6, 1)]})  # the older snapshot, delivered late
    assert ahead() == before and before  # superseded: nothing of it encoded ahead
    assert r.status_code == 200 and r.json() | {"note": ""} == {
        "accepted": 1, "inserted": 0, "updated": 0, "unchanged": 0, "superseded": ["rv"], "suppressed": [],
        "answers_suppressed": 0, "posts_anonymized": 0, "taken_down": [], "answers_taken_down": 0, "note": ""}
    got = client.get("/threads/rv")
    assert [a["id"] for a in got.json()["answers"]] == ["rv0", "rv1"] and got.json()["revision"] == 7
    etag = got.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) == 66
    for bad in ({"revision": -1}, {"revision": "seven"}, {"revision": 2**63}, {"revision": True}, {"revision": "8"},
                {"revision": 8.0}):
        r = client.post("/threads", headers=ADMIN, json={"threads": [{**thread(8, 1), **bad}]})
        assert r.status_code == 422 and "threads.0.revision" in r.json()["error"]["message"], r.text
    cached = client.get("/threads/rv", headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.headers["etag"] == etag and not cached.content
    assert client.get("/threads/rv", headers={"If-None-Match": '"other"'}).status_code == 200
    assert client.get("/threads/rv", headers={"If-None-Match": f'"other", W/{etag}'}).status_code == 304  # weakly

    # a moderator's tool read the thread (etag); a comment came in meanwhile
    r = client.post("/threads/rv/answers", headers={**ADMIN, "If-Match": etag},
                    json={"answers": [{"id": "rv9", "text": "posted meanwhile"}]})
    assert r.status_code == 200 and r.headers["etag"] == client.get("/threads/rv").headers["etag"] != etag
    now = r.headers["etag"]
    stored = client.get("/threads/rv").json()
    before = ahead()
    for method, path, body in (("PATCH", "/threads/rv", {"subject": "stale edit"}),
                               ("POST", "/threads/rv/answers", {"answers": [{"id": "rv8", "text": "stale"}]}),
                               ("DELETE", "/threads/rv/answers/rv0", None),
                               ("DELETE", "/threads/rv", None)):
        r = client.request(method, path, json=body, headers={**ADMIN, "If-Match": f'{etag}, W/{now}'})
        err = r.json()["error"]
        assert r.status_code == 412 and err["code"] == "precondition_failed" and r.headers["etag"] == now, r.text
        assert "'rv' has changed since it was read" in err["message"] and now in err["message"]
    assert client.get("/threads/rv").json() == stored  # nothing written
    assert ahead() == before and before  # and a stale condition encoded nothing ahead
    r = client.patch("/threads/rv", headers={**ADMIN, "If-Match": now}, json={"subject": "Where to buy a used bike?"})
    assert r.status_code == 200 and r.json()["changed"]
    assert r.headers["etag"] == client.get("/threads/rv").headers["etag"]
    r = client.delete("/threads/rv/answers/rv9", headers={**ADMIN, "If-Match": r.headers["etag"]})
    assert r.status_code == 200 and r.headers["etag"] == client.get("/threads/rv").headers["etag"]
    assert client.get("/threads/rv").json()["revision"] == 7  # single-thread writes keep the forum's revision
    r = client.patch("/threads/rv", headers={**ADMIN, "If-Match": " , "}, json={"subject": "x"})
    assert r.status_code == 400 and "If-Match" in r.json()["error"]["message"]
    r = client.patch("/threads/nope", headers={**ADMIN, "If-Match": "*"}, json={"subject": "x"})
    assert r.status_code == 404
    assert client.delete("/threads/rv", headers={**ADMIN, "If-Match": "*"}).status_code == 200
    assert client.get("/threads/rv").status_code == 404


def test_the_thread_listing_pages_by_id(client):
    """GET /threads: every stored thread once, in id order, a page at a time (`next` until the last), each with its
    revision, ETag (the one GET /threads/{id} sends), subject and number of comments."""
    client.post("/threads", headers=ADMIN, json={"threads": [{"id": "zz1", "subject": "listed", "revision": 4,
                                                              "answers": [{"id": "zz1a", "text": "x"}]}]})
    seen, after = [], None
    while True:
        r = client.get("/threads", params={"limit": 7, **({"after": after} if after else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        seen += page["threads"]
        if page["next"] is None:
            break
        assert page["next"] == page["threads"][-1]["id"] and len(page["threads"]) == 7
        after = page["next"]
    ids = [t["id"] for t in seen]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == client.app.state.service.store.counts()["threads"]
    zz1 = next(t for t in seen if t["id"] == "zz1")
    assert zz1 == {"id": "zz1", "revision": 4, "etag": client.get("/threads/zz1").headers["etag"].strip('"'),
                   "subject": "listed", "answers": 1}
    for params, needle in (({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"after": "x" * 201}, "after")):
        r = client.get("/threads", params=params)
        assert r.status_code == 422 and needle in r.json()["error"]["message"], r.text


def test_a_write_that_finds_the_store_locked_is_a_503_to_send_again_and_writes_nothing(client):
    """A write that waits out the store's busy timeout behind another one (a `--vacuum` erasure, another process's
    long import) is rolled back and answered 503 `store_busy` with Retry-After, not a 500; sent again, it is kept."""
    import sqlite3
    svc = client.app.state.service
    svc.store._conn.execute("PRAGMA busy_timeout=100")  # 10 s as shipped
    other = sqlite3.connect(svc.settings.store_path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    thread = {"threads": [{"id": "busy1", "subject": "sent while the store is locked"}]}
    try:
        r = client.post("/threads", json=thread, headers=ADMIN)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.json()
        assert r.json()["error"]["code"] == "store_busy"
        r = client.post("/erasures", json={"author_ids": ["u1"], "content": "anonymize"}, headers=ADMIN)
        assert r.status_code == 503 and client.app.state.service.jobs.running("erasure") is None
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert client.get("/threads/busy1").status_code == 404
    assert client.post("/threads", json=thread, headers=ADMIN).status_code == 200
    assert client.get("/threads/busy1").status_code == 200


def test_a_failure_to_encode_ahead_loses_no_write(client, monkeypatch):
    """POST /threads encodes its texts into the embedding cache before its write ($CQA_ENCODE_AHEAD_TEXTS); when that
    fails (a broken cache file, a model that will not load) the write still happens and is acknowledged: the cache is
    only a head start for the build, which encodes whatever is missing."""
    import indexing.reindex

    def broken(*args, **kwargs):
        raise OSError("disk I/O error")
    works = indexing.reindex.encode_ahead
    monkeypatch.setattr(indexing.reindex, "encode_ahead", broken)
    thread = {"id": "e1", "subject": "encoding ahead fails", "answers": [{"id": "e1a", "text": "still stored"}]}
    r = client.post("/threads", json={"threads": [thread]}, headers=ADMIN)
    assert r.status_code == 200 and r.json()["inserted"] == 1
    assert client.get("/threads/e1").json()["answers"][0]["text"] == "still stored"
    per_comment = 2 if client.app.state.settings.answer_spec is not None else 1  # the answer encoder's too
    assert f'cqa_encode_ahead_texts_total{{outcome="failed"}} {1.0 + per_comment}' in client.get("/metrics").text
    monkeypatch.setattr(indexing.reindex, "encode_ahead", works)
    many = [{"id": f"m{i}", "subject": f"an imported thread {i}",
             "answers": [{"id": f"m{i}a", "text": f"comment {i}"}]} for i in range(20)]  # 60 texts the cache lacks, over the default 32: left to the build
    assert client.post("/threads", json={"threads": many}, headers=ADMIN).status_code == 200
    metrics = client.get("/metrics").text
    assert 'cqa_encode_ahead_texts_total{outcome="skipped"} 60.0' in metrics
    assert client.post("/threads", json={"threads": [{**thread, "id": "e2", "answers": []}]},
                       headers=ADMIN).status_code == 200
    assert 'cqa_encode_ahead_texts_total{outcome="encoded"} 1.0' in client.get("/metrics").text


def test_evaluation_job_and_report(client):
    from ranking.evaluation.runner import shipped_figures
    fresh = client.get("/evaluation").json()
    assert fresh["benchmarks"] == {}  # nothing has run on this service yet
    # ... but a fresh install shows the figures this release was measured with, each with its command
    assert fresh["shipped"] == shipped_figures() and len(fresh["shipped"]) >= 4
    assert {"semeval2016-test-A", "semeval2016-test-search-answers", "semeval2016-test-search-questions"} <= \
        {f["benchmark"] for f in fresh["shipped"]}
    assert all(f["command"].startswith("cqa evaluate --benchmark ") and f["measured_at"] for f in fresh["shipped"])
    # every shipped figure gives its 95% interval (a bootstrap over its run's questions) around it
    for f in fresh["shipped"]:
        lo, hi = f["MAP_interval_95"]
        assert lo < f["figures"].get("MAP", f["figures"].get("MAP@10")) < hi
    r = client.post("/evaluation", json={"benchmark": "semeval2016-test-B", "ranker": "ir-baseline"}, headers=ADMIN)
    assert r.status_code == 202
    job = wait_job(client, r.json()["job"]["id"])
    assert job["state"] == "succeeded" and round(job["result"]["MAP"], 4) == 0.7475
    ev = client.get("/evaluation").json()["benchmarks"]["semeval2016-test-B"]
    assert client.get("/evaluation").json()["shipped"] == fresh["shipped"]
    assert ev["ranker"] == "ir-baseline" and round(ev["MAP"], 4) == 0.7475 and ev["generation"].startswith("gen-")
    lo, hi = ev["MAP_interval_95"]  # a bootstrap over its 70 questions, as the job's report has it
    assert lo < ev["MAP"] < hi and [lo, hi] == job["result"]["MAP_interval_95"]
    r = client.post("/evaluation", json={"benchmark": "nope"}, headers=ADMIN)
    assert r.status_code == 422 and "unknown benchmark" in r.json()["error"]["message"]


def test_evaluation_job_of_the_forums_own_duplicates(client):
    """POST /evaluation {"benchmark": "forum-duplicates"}: `cqa evaluate --duplicates` as a job, through this service's
    own pipeline; a store without links fails the job saying so, a ranker is refused."""
    r = client.post("/evaluation", json={"benchmark": "forum-duplicates"}, headers=ADMIN)
    job = wait_job(client, r.json()["job"]["id"])
    assert r.status_code == 202 and job["state"] == "failed" and "no duplicate links" in job["error"]
    repost = {"id": "dup7", "subject": "question 7 about visa 1", "body": "body text", "meta": {"duplicate_of": ["t7"]}}
    assert client.post("/threads", json={"threads": [repost]}, headers=ADMIN).status_code == 200
    assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
    r = client.post("/evaluation", json={"benchmark": "forum-duplicates", "ranker": "bm25"}, headers=ADMIN)
    assert r.status_code == 422 and "no ranker" in r.json()["error"]["message"]
    job = wait_job(client, client.post("/evaluation", json={"benchmark": "forum-duplicates"}, headers=ADMIN)
                   .json()["job"]["id"])
    assert job["state"] == "succeeded", job
    assert (job["result"]["questions"], job["result"]["links"], job["result"]["P@1"]) == (1, 1, 1.0)
    listed = client.get("/evaluation").json()["benchmarks"]["forum-duplicates"]
    assert listed["MAP"] == job["result"]["MAP"] == 1.0 and listed["ranker"] == job["result"]["ranker"]
    # the same links judge the answer search: a duplicate should find its group's accepted answer
    job = wait_job(client, client.post("/evaluation", json={"benchmark": "forum-duplicates-answers-accepted"},
                                       headers=ADMIN).json()["job"]["id"])
    assert job["state"] == "failed" and "judged by accepted" in job["error"]  # t7's answers: none accepted yet
    t7 = {"id": "t7", "subject": "question 7 about visa 1", "body": "body text", "category": "Visas",
          "answers": [{"id": f"t7_a{j}", "text": f"answer {j} on rent 7"} for j in range(3)]}  # as fill_store wrote it
    t7["answers"][-1]["meta"] = {"accepted": True}
    assert client.post("/threads", json={"threads": [t7]}, headers=ADMIN).status_code == 200
    assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
    job = wait_job(client, client.post("/evaluation", json={"benchmark": "forum-duplicates-answers-accepted"},
                                       headers=ADMIN).json()["job"]["id"])
    assert job["state"] == "succeeded", job
    assert (job["result"]["target"], job["result"]["judged_by"], job["result"]["questions"]) == ("answers", "accepted", 1)
    served = client.get("/threads/dup7/similar", params={"target": "answers"}).json()["results"]
    accepted = t7["answers"][-1]["id"]
    rank = next((r["rank"] for r in served if accepted in (r["id"], *r["duplicates"])), None)  # the one relevant
    assert job["result"]["MAP"] == (round(1 / rank, 4) if rank else 0.0)


def test_metrics(client):
    client.post("/search", json={"question": {"body": "visa"}, "k": 2})
    client.post("/search", json={"question": {"body": " "}})
    text = client.get("/metrics").text
    assert 'cqa_requests_total{endpoint="/search",method="POST",status="200"}' in text
    assert 'cqa_errors_total{endpoint="/search",status="422"}' in text
    assert "cqa_stage_seconds_bucket" in text and 'stage="bm25"' in text
    assert 'cqa_index_documents{index="documents"} 160.0' in text
    assert "cqa_gc_frozen_objects 0.0" in text and 'cqa_gc_pause_seconds_bucket{generation="0",le="0.05"}' in text
    if sys.platform == "linux":  # the process collector reads /proc
        rss = [line for line in text.splitlines() if line.startswith("process_resident_memory_bytes ")]
        assert len(rss) == 1 and float(rss[0].split()[1]) > 50e6  # torch and the models alone are more


def test_unpaired_surrogates_are_a_clear_422_and_store_nothing(client):
    """JSON can escape half a UTF-16 pair (\\ud800), which no UTF-8 text can hold: once that crashed the store's
    hash of a thread (a 500). Now every body field, field name and thread field is checked first."""
    def post(path, body):
        raw = json.dumps(body).encode()  # ensure_ascii: a lone surrogate goes out as the escape \ud800
        return client.post(path, content=raw, headers={"Content-Type": "application/json", **ADMIN})

    thread = {"id": "sur1", "subject": "ok", "body": "ok",
              "answers": [{"id": "sur1_a", "text": "fine", "author_id": "u\ud800"}]}
    r = post("/threads", {"threads": [thread]})
    assert r.status_code == 422, r.text
    msg = r.json()["error"]["message"]
    assert "answers[0].author_id" in msg and "unpaired surrogate (U+D800" in msg
    assert client.get("/threads/sur1").status_code == 404  # the request was refused whole: nothing stored
    r = post("/search", {"question": {"body": "visa\udfff"}})
    assert r.status_code == 422 and "question.body" in r.json()["error"]["message"]
    r = post("/rerank", {"question": {"body": "q"}, "candidates": [{"id": "a", "text": "x\ud83d"}]})
    assert r.status_code == 422 and "unpaired surrogate" in r.json()["error"]["message"]
    r = post("/search", {"question": {"body": "x"}, "\ud800": 1})  # in a field name: the error echoes it escaped
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = post("/threads", {"threads": [{**thread, "answers": [], "meta": {"k\ud800": 1}}]})
    assert r.status_code == 422 and "meta key" in r.json()["error"]["message"]
    assert post("/threads", {"threads": [{**thread, "answers": []}]}).status_code == 200  # the rest was fine


def test_openapi_fuzz_no_5xx(client):
    """Schemathesis against the app's own OpenAPI schema: no server errors (bounded examples)."""
    import schemathesis
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hsettings

    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    failures, calls = [], []
    for op in schema.get_all_operations():
        operation = op.ok()
        if operation.path in ("/reindex", "/evaluation") and operation.method.upper() == "POST":
            continue  # long jobs: covered above

        @hsettings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(case=operation.as_strategy())
        def check(case):
            resp = case.call(headers=ADMIN)
            calls.append(operation.path)
            if resp.status_code >= 500:
                failures.append((operation.method, operation.path, resp.status_code, resp.text[:200]))
        check()
    assert len(set(calls)) >= 8 and len(calls) >= 80  # every endpoint fuzzed, not a vacuous pass
    assert not failures, failures


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path, port, extra_env=None):
    env = {**os.environ, "CQA_DATA_DIR": str(tmp_path / "var"), "CQA_SHARED_DATA_DIR": str(tmp_path / "none"),
           "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "CQA_API_TOKEN": TOKEN, "CQA_GC_FREEZE": "1",
           **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_server(p, timeout=60):
    """A clean stop (SIGTERM: the workers drop their leases), killed if it does not come in ``timeout`` seconds."""
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()


def http(method, url, body=None, headers=None, timeout=30):
    req = urllib.request.Request(url, method=method, headers={"Content-Type": "application/json", **(headers or {})},
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_ready(p, base, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert p.poll() is None, p.stderr.read()
        try:
            status, body = http("GET", base + "/ready", timeout=2)
            if status == 200:
                return body
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1)
    pytest.fail("server did not become ready")


def test_real_uvicorn_end_to_end_and_kill_9(tmp_path):
    """`cqa serve` bootstraps the demo corpus with the real model, answers HTTP, survives kill -9:
    every thread it acknowledged is there after a restart, which serves the last complete generation."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port)
    try:
        ready = wait_ready(p, base)
        assert ready["sizes"]["documents"] >= 180
        # warmed up before it was ready (CQA_WARM_UP): a request of each kind ran, and none of it stayed in a memo
        assert set(ready["warm_up_ms"]) == {"POST /rerank", "POST /rerank/questions", "POST /rerank/answers",
                                            "POST /search answers", "POST /search questions"}
        assert all(ms is not None and ms > 0 for ms in ready["warm_up_ms"].values()), ready["warm_up_ms"]
        assert all(m["pairs"] == m["hits"] == m["misses"] == 0 for m in ready["score_memos"].values())
        assert ready["score_store"]["written"] == ready["vector_store"]["written"] == 0
        status, out = http("POST", base + "/search", {"question": {"body": "How do I renew my residence permit?"},
                                                      "k": 5})
        assert status == 200 and len(out["results"]) == 5
        assert "demo003" in {x["thread_id"] for x in out["results"]}  # the residence-permit thread
        # /search reads the generation's stored answer vectors: no pair memo is touched, the A bi-encoder's
        # vector memo encodes the question once
        searched = http("GET", base + "/ready")[1]["score_memos"]
        assert all(m["hits"] == m["misses"] == 0 for name, m in searched.items() if not name.endswith(" vectors"))
        assert searched["bi-encoder vectors"]["misses"] == 1, searched
        CE, BE = rerank_model("cross-encoder"), rerank_model("bi-encoder")  # the cascade's models, as served here
        body = {"question": {"body": "cheap furniture"}, "candidates": [
            {"id": "x", "text": "The Friday market sells cheap second-hand furniture"},
            {"id": "y", "text": "I love the beach"}]}
        status, out = http("POST", base + "/rerank", body)
        assert status == 200 and out["results"][0]["id"] == "x"
        memos = http("GET", base + "/ready")[1]["score_memos"]
        assert {CE, BE} <= set(memos)
        status, again = http("POST", base + "/rerank", body)  # the same thread again: from the score memos
        assert status == 200 and again["results"] == out["results"]
        after = http("GET", base + "/ready")[1]["score_memos"]
        # the bi-encoder's pairs are read twice per request: by its part of the layer and by closest-comment-margin
        for model, reads in ((CE, 2), (BE, 4)):
            assert after[model]["misses"] == memos[model]["misses"]
            assert after[model]["hits"] == memos[model]["hits"] + reads, (model, memos[model], after[model])
        with urllib.request.urlopen(base + "/metrics") as r:
            metrics = r.read().decode()
        assert f'cqa_score_memo_hits_total{{model="{CE}"}} {after[CE]["hits"]}.0' in metrics
        # the models' objects frozen once loaded (CQA_GC_FREEZE), out of every full collection's walk
        frozen = [line for line in metrics.splitlines() if line.startswith("cqa_gc_frozen_objects ")]
        assert len(frozen) == 1 and float(frozen[0].split()[1]) > 100_000, frozen
        assert 'cqa_gc_pause_seconds_count{generation="2"}' in metrics
        # a thread the live generation indexes: the bi-encoder reads its comments' stored vectors (no model call for
        # them) and scores as it does when it encodes them (the same thread under ids the generation does not know)
        demo = json.loads((ROOT / "data/demo/threads.jsonl").read_text().splitlines()[2])
        indexed = {"question": {"subject": demo["subject"], "body": demo["body"]}, "asker_id": demo["author_id"],
                   "thread_order": True, "candidates": [{"id": a["id"], "text": a["text"], "author_id": a["author_id"]}
                                                        for a in demo["answers"]]}
        foreign = {**indexed, "candidates": [{**c, "id": "new-" + c["id"]} for c in indexed["candidates"]]}
        status, known = http("POST", base + "/rerank", indexed)
        assert status == 200
        memos = http("GET", base + "/ready")[1]["score_memos"]
        assert memos[BE]["misses"] == after[BE]["misses"]  # read, not encoded
        assert memos[CE]["misses"] == after[CE]["misses"] + len(demo["answers"])
        assert http("POST", base + "/rerank", indexed)[1]["results"] == known["results"]  # the question's vector too
        again = http("GET", base + "/ready")[1]["score_memos"]
        assert again[f"{BE} vectors"]["hits"] == memos[f"{BE} vectors"]["hits"] + 2  # its part, then the margin's
        assert again[f"{BE} vectors"]["misses"] == memos[f"{BE} vectors"]["misses"]
        assert f"{CE} vectors" not in again  # a cross-encoder's scores are not dot products of vectors
        status, unknown = http("POST", base + "/rerank", foreign)  # the same texts: from the memos, except the bi-encoder
        assert status == 200
        last = http("GET", base + "/ready")[1]["score_memos"]
        assert last[BE]["misses"] == memos[BE]["misses"] + len(demo["answers"])
        # whose comments it had read from the generation, so it encodes them now; the question it holds
        texts = {a["text"] for a in demo["answers"]}
        assert last[f"{BE} vectors"]["misses"] == again[f"{BE} vectors"]["misses"] + len(texts)
        # the question, then each comment once for closest-comment and once for its margin, read from the memo
        assert last[f"{BE} vectors"]["hits"] == again[f"{BE} vectors"]["hits"] + 1 + 2 * len(texts)
        assert [r["id"] for r in known["results"]] == [r["id"][4:] for r in unknown["results"]]
        # (in fp32 to 1e-4; where auto runs the cascade in bf16, it encodes the comments in bf16, stored in fp32)
        tol = 1e-4 if BE == "bi-encoder" else 2e-2
        assert [r["score"] for r in known["results"]] == pytest.approx([r["score"] for r in unknown["results"]], abs=tol)
        first = indexed["candidates"][0]  # an indexed id whose text was edited since: never its stored vector
        edited = {**indexed, "candidates": [{**first, "text": first["text"] + " (edited)"}] + indexed["candidates"][1:]}
        before = http("GET", base + "/ready")[1]["score_memos"][BE]["misses"]
        assert http("POST", base + "/rerank", edited)[0] == 200
        assert http("GET", base + "/ready")[1]["score_memos"][BE]["misses"] == before + 1
        acked = []
        for i in range(20):
            status, _ = http("POST", base + "/threads", {"threads": [{"id": f"k{i}", "subject": f"kill test {i}"}]},
                             {"Authorization": f"Bearer {TOKEN}"})
            assert status == 200
            acked.append(f"k{i}")
        comments = []  # and comments added one at a time to one of them, as a forum's users post them
        for i in range(10):
            status, out_ = http("POST", base + "/threads/k0/answers", {"answers": [{"id": f"k0c{i}", "text": f"c {i}"}]},
                                {"Authorization": f"Bearer {TOKEN}"})
            assert status == 200 and out_["answers"] == i + 1, out_
            comments.append(f"k0c{i}")
        store = http("GET", base + "/ready")[1]["score_store"]
        assert store["path"].endswith("score-store.sqlite3") and store["written"] > 0 and store["error"] == ""
        vector_store = http("GET", base + "/ready")[1]["vector_store"]
        assert vector_store["path"].endswith("vector-store.sqlite3") and vector_store["written"] > 0
        imported = b"".join(json.dumps({"id": f"imp{i}", "subject": f"sent before the kill {i}"}).encode() + b"\n"
                            for i in range(5))  # a file sent whole: accepted at its 202, its ingest cut off by the kill
        req = urllib.request.Request(base + "/imports", data=imported, method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 202 and json.loads(r.read())["started"]
        # a user's judgement of a search's result, answered 201 just before the kill, and a search not judged yet
        status, found = http("POST", base + "/search", {"question": {"body": "where to buy furniture"}, "k": 5})
        assert status == 200
        status, _ = http("POST", base + "/feedback", {"search_id": found["search_id"], "judgements": [
            {"result_id": found["results"][1]["id"], "helpful": True}]})
        assert status == 201
        status, unjudged = http("POST", base + "/search", {"question": {"body": "a driving licence"}, "k": 3})
        assert status == 200
        status, job = http("POST", base + "/reindex", headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 202
        time.sleep(0.5)
        p.send_signal(signal.SIGKILL)  # during the reindex, and the import's ingest
        p.wait(timeout=20)
        p = start_server(tmp_path, port)
        ready2 = wait_ready(p, base)
        # the reindex was killed: either it had not published (the old generation is live) or it had, and then
        # the live generation is complete and holds every thread acknowledged before it started
        if ready2["generation"] != ready["generation"]:
            assert ready2["sizes"]["documents"] == ready["sizes"]["documents"] + len(acked) + len(comments)
        assert not any(p.name.startswith(".tmp") and p.name.endswith(ready2["generation"])
                       for p in (tmp_path / "var" / "indexes").iterdir())
        for tid in acked:
            assert http("GET", f"{base}/threads/{tid}")[0] == 200
        assert [a["id"] for a in http("GET", f"{base}/threads/k0")[1]["answers"]] == comments
        deadline = time.time() + 180  # the upload, ingested again by the restarted service, then deleted
        while (list((tmp_path / "var" / "imports").glob("import-*")) or http("GET", f"{base}/threads/imp4")[0] != 200) \
                and time.time() < deadline:
            time.sleep(0.5)
        assert [http("GET", f"{base}/threads/imp{i}")[0] for i in range(5)] == [200] * 5
        # the judgement outlived the kill, and the search served before it can still be judged
        (group,) = http("GET", base + "/evaluation/feedback")[1]["groups"]
        assert group["searches"] == 1 and group["judgements"] == 1 and group["MAP"] == 1.0, group
        assert http("POST", base + "/feedback", {"search_id": unjudged["search_id"], "judgements": [
            {"result_id": unjudged["results"][0]["id"], "helpful": False}]})[0] == 201
        assert list((tmp_path / "var" / "imports").glob("import-*")) == []
        # the score store outlives the process: the first thread again costs the restarted service no model call
        status, restarted = http("POST", base + "/rerank", body)
        assert status == 200 and restarted["results"] == out["results"]
        memos = http("GET", base + "/ready")[1]["score_memos"]
        for model in ("bilstm", CE, BE):
            assert memos[model]["misses"] == 0 and memos[model]["shared_hits"] == 2, (model, memos[model])
        # and so does the vector store: the same comments with a new question cost the bi-encoder that question only
        status, _ = http("POST", base + "/rerank", {**body, "question": {"body": "second-hand furniture"}})
        vectors = http("GET", base + "/ready")[1]["score_memos"][f"{BE} vectors"]
        assert status == 200 and vectors["shared_hits"] == 2 and vectors["misses"] == 1, vectors
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_searches_keep_succeeding_during_reindex_and_swap(client):
    """Searches from 4 threads run while a reindex builds and swaps generations: 0 failures."""
    import threading
    before = client.get("/ready").json()["generation"]
    stop = threading.Event()
    results: list[int] = []
    generations: set[str] = set()

    def hammer():
        while not stop.is_set():
            r = client.post("/search", json={"question": {"body": "visa question rent"}, "k": 5, "rerank": False})
            results.append(r.status_code)
            if r.status_code == 200:
                generations.add(r.json()["generation"])

    workers = [threading.Thread(target=hammer) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        time.sleep(0.3)
        job = client.post("/reindex", headers=ADMIN).json()["job"]
        done = wait_job(client, job["id"])
        time.sleep(0.3)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert done["state"] == "succeeded"
    assert len(results) >= 20 and set(results) == {200}
    assert before in generations and done["result"]["generation"] in generations  # served old, then new


def test_limits_follow_the_settings(settings, fast_encoder):
    small = settings.model_copy(update={"api_token": TOKEN, "max_text_chars": 100, "max_candidates": 2,
                                        "max_threads_per_request": 1, **STUB_RANKERS})
    fill_store(small, 3)
    reindex(small, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(small)) as c:
        r = c.post("/search", json={"question": {"body": "y" * 101}})
        assert r.status_code == 422 and "question.body" in r.json()["error"]["message"]
        assert "CQA_MAX_TEXT_CHARS" in r.json()["error"]["message"]
        assert c.post("/search", json={"question": {"body": "y" * 100}, "rerank": False}).status_code == 200
        cands = [{"id": str(i), "text": "t"} for i in range(3)]
        r = c.post("/rerank", json={"question": {"body": "q"}, "candidates": cands})
        assert r.status_code == 422 and "CQA_MAX_CANDIDATES" in r.json()["error"]["message"]
        r = c.post("/rerank", json={"question": {"body": "q"}, "candidates": [{"id": "a", "text": "z" * 101}]})
        assert r.status_code == 422 and "candidates.0.text" in r.json()["error"]["message"]
        # /rerank/answers counts the comments of all its threads together
        split = [{"id": f"r{i}", "subject": "s", "comments": cands[i:i + 1]} for i in range(3)]
        r = c.post("/rerank/answers", json={"question": {"body": "q"}, "threads": split})
        assert r.status_code == 422 and "comments" in r.json()["error"]["message"]
        assert "CQA_MAX_CANDIDATES" in r.json()["error"]["message"]
        assert c.post("/rerank/answers", json={"question": {"body": "q"}, "threads": split[:2]}).status_code == 200
        two = [{"id": "x1", "subject": "a"}, {"id": "x2", "subject": "b"}]
        r = c.post("/threads", json={"threads": two}, headers=ADMIN)
        assert r.status_code == 422 and "CQA_MAX_THREADS_PER_REQUEST" in r.json()["error"]["message"]
        r = c.post("/threads", json={"threads": [{"id": "x3", "subject": "s", "answers": [
            {"id": "x3a", "text": "w" * 101}]}]}, headers=ADMIN)
        assert r.status_code == 422 and "threads.0.answers.0.text" in r.json()["error"]["message"]


@pytest.mark.parametrize("rerank", [False, True])
def test_a_questions_search_shows_the_answered_copy_of_a_reposted_question(client, rerank):
    """A repost without comments, word for word the original but for the one word asked, comes first from the first
    stage; the group it folds into is shown as the original (its comments are what the asker wants), the repost
    listed as its duplicate, whether the search is reranked or not."""
    words = ("how long does the family residence visa take to be approved after the medical test and the "
             "fingerprints at the immigration office in the industrial area for a sponsor").split()
    original = {"id": "orig-1", "subject": "family visa", "body": " ".join(words),
                "answers": [{"id": "orig-1_c1", "text": "About two weeks."}, {"id": "orig-1_c2", "text": "Ten days."}]}
    repost = {"id": "repost-1", "subject": "family visa", "body": " ".join(words) + " zanzibar"}
    assert client.post("/threads", json={"threads": [repost, original]}, headers=ADMIN).status_code == 200
    assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
    r = client.post("/search", json={"question": {"body": "family visa approved zanzibar"}, "target": "questions",
                                     "k": 5, "rerank": rerank, "collapse": False})
    assert r.status_code == 200 and r.json()["results"][0]["thread_id"] == "repost-1"  # the first stage's own order
    r = client.post("/search", json={"question": {"body": "family visa approved zanzibar"}, "target": "questions",
                                     "k": 5, "rerank": rerank})
    top = r.json()["results"][0]
    assert (top["thread_id"], top["duplicates"]) == ("orig-1", ["repost-1"])


def test_imports_over_http_ingest_a_file_sent_whole_and_one_cut_off_at_the_next_start(client, monkeypatch):
    """POST /imports (admin): the body is the thread file itself, written to the data folder as it comes, then
    ingested by `cqa ingest` in a child process as a job. Bad options, an empty body, a file that is not one and one
    over the limit are refused with what was wrong, and leave nothing behind; one import at a time (409); a mirror
    whose removal is refused is a done import that says why. An upload a stopped service had accepted is ingested at
    the next start, and one whose request never completed is deleted."""
    import gzip

    from indexing.imports import ImportLock, ImportOptions, Upload, import_running, imports_folder, pending
    from indexing.status import folder_status
    from indexing.status import lines as status_lines

    svc = client.app.state.service
    folder = imports_folder(svc.settings.data_dir)
    threads = [{"id": f"imp{k}", "subject": f"imported question {k}", "answers": [{"id": f"imp{k}a", "text": "yes"}]}
               for k in range(3)]
    body = "".join(json.dumps(t) + "\n" for t in threads).encode() + b"[not a thread\n"
    assert client.post("/imports", content=body).status_code == 401
    for params, why in (({"max_remove": "3"}, "mirror=true"), ({"mirror": "true", "max_remove": "lots"}, "max_remove")):
        r = client.post("/imports", params=params, content=body, headers=ADMIN)
        assert r.status_code == 422 and why in r.json()["error"]["message"], r.text
    for content, status, why in ((b"", 400, "empty"), (b"PK\x03\x04 a zip", 415, "not a thread file"),
                                 (b"%PDF-1.7", 415, "not a thread file")):
        r = client.post("/imports", content=content, headers=ADMIN)
        assert r.status_code == status and why in r.json()["error"]["message"], r.text
    limit = svc.settings.max_import_bytes
    svc.settings = svc.settings.model_copy(update={"max_import_bytes": 2048})
    r = client.post("/imports", content=body * 40, headers=ADMIN)
    assert r.status_code == 413 and "CQA_MAX_IMPORT_BYTES" in r.json()["error"]["message"]
    svc.settings = svc.settings.model_copy(update={"max_import_bytes": limit})
    with monkeypatch.context() as m:
        m.setattr(Upload, "write", lambda self, chunk: (_ for _ in ()).throw(OSError(28, "No space left on device")))
        r = client.post("/imports", content=body, headers=ADMIN)
        assert r.status_code == 507 and "No space left" in r.json()["error"]["message"], r.text
    assert [p.name for p in folder.iterdir()] == [".lock"]  # nothing kept of what was refused
    assert not import_running(folder)
    held = ImportLock(folder)  # another worker's import
    assert held.held and import_running(folder) and client.post("/imports", content=body, headers=ADMIN).status_code == 409
    held.release()
    assert not import_running(folder)

    r = client.post("/imports", content=gzip.compress(body), headers={**ADMIN, "Content-Type": "application/gzip"})
    assert r.status_code == 202 and r.json()["started"] and r.json()["upload"].endswith(".jsonl.gz"), r.text
    job = wait_job(client, r.json()["job"]["id"], timeout=300)
    assert job["state"] == "succeeded", job
    (done,) = job["result"]["imports"]
    assert done["exit"] == 0 and (done["summary"]["inserted"], done["summary"]["skipped"]) == (3, 1)
    assert job["stage"] == f"{done['upload']}: 3 threads written, 100% read", job  # the child's progress
    assert client.get("/threads/imp2").json()["answers"][0]["text"] == "yes" and pending(folder) == []

    good = b"".join(body.splitlines(keepends=True)[:3])
    r = client.post("/imports", params={"mirror": "true"}, content=good, headers=ADMIN)  # the forum's 40 not in it
    job = wait_job(client, r.json()["job"]["id"], timeout=300)
    (done,) = job["result"]["imports"]
    assert job["state"] == "succeeded" and done["exit"] == 3 and "--max-remove" in done["mirror_refused"], job
    assert done["options"] == ["--mirror"] and client.get("/threads/t3").status_code == 200

    upload = Upload(folder, 10**6)  # accepted (named) by a service that then stopped, before its ingest
    upload.write(json.dumps({"id": "late", "subject": "accepted before the stop"}).encode() + b"\n")
    named = upload.finish(ImportOptions(strict=True))
    Upload(folder, 10**6).write(b'{"id": "never"')  # a request cut off: never acknowledged
    assert len(list(folder.glob(".upload-*"))) == 1 and pending(folder) == [named]
    said = folder_status(svc.settings)  # `cqa status`, GET /status: waiting, and no service at it
    assert said.imports == [named.name] and not said.import_running
    assert any("POST /imports accepted are not ingested" in a for a in said.attention), said.attention
    assert f"imports      1 waiting\n             {named.name}" in "\n".join(status_lines(said))
    held = ImportLock(folder)  # at the start, held a moment yet (a killed service's child, dying): waited for
    threading.Timer(1.5, held.release).start()
    with TestClient(create_app(svc.settings)) as again:
        deadline = time.time() + 300
        while pending(folder) and time.time() < deadline:
            time.sleep(0.2)
        job = again.app.state.service.jobs.running("import")
        while job is not None and job.state not in ("succeeded", "failed") and time.time() < deadline:
            time.sleep(0.2)
        assert again.get("/threads/late").status_code == 200 and pending(folder) == []
    assert list(folder.glob(".upload-*")) == []


def test_search_results_carry_the_forums_votes_and_acceptance_where_it_sends_them(settings, fast_encoder):
    """Round 59: a StackExchange-like thread (meta.score, meta.accepted_answer_id; its answers' meta.score and
    meta.accepted) gives its results ``votes`` and ``accepted``, as answers (the accepted one true, the others false)
    and as a question or thread (whether it has an accepted answer); a thread whose forum says nothing of either has
    neither key; a non-integer score is not passed on."""
    from indexing.models import Answer, Thread
    from indexing.reindex import reindex
    from indexing.store import ThreadStore

    from .conftest import STUB_RANKERS
    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    with ThreadStore(settings.store_path) as s:
        s.upsert([
            Thread(id="se1", subject="zanzibar ferry timetable", body="when does the zanzibar ferry leave",
                   meta={"score": 12, "accepted_answer_id": "se1_a2"},
                   answers=[Answer(id="se1_a1", text="the zanzibar ferry leaves at noon", meta={"score": -1}),
                            Answer(id="se1_a2", text="zanzibar ferry at seven daily",
                                   meta={"score": 30, "accepted": True}),
                            Answer(id="se1_a3", text="zanzibar ferry, ask the port", meta={"score": "many"})]),
            Thread(id="se2", subject="zanzibar spice tour", body="any zanzibar spice tour tips",
                   answers=[Answer(id="se2_a1", text="zanzibar spice farms are fun")])])
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings.model_copy(update=STUB_RANKERS))) as client:
        got = client.post("/search", json={"question": "zanzibar ferry", "k": 20, "target": "answers"}).json()
        marks = {r["id"]: (r.get("votes"), r.get("accepted")) for r in got["results"] if r["thread_id"] in
                 ("se1", "se2")}
        assert marks["se1_a1"] == (-1, False) and marks["se1_a2"] == (30, True)
        assert marks["se1_a3"] == (None, False)  # "many" is no score
        assert marks["se2_a1"] == (None, None)
        assert "votes" not in next(r for r in got["results"] if r["id"] == "se2_a1")
        got = client.post("/search", json={"question": "zanzibar", "k": 20, "target": "questions"}).json()
        marks = {r["id"]: (r.get("votes"), r.get("accepted")) for r in got["results"]}
        assert marks["se1"] == (12, True) and marks["se2"] == (None, None)
        got = client.post("/search", json={"question": "zanzibar", "k": 20, "target": "threads"}).json()
        assert {r["id"]: r.get("votes") for r in got["results"]}["se1"] == 12
