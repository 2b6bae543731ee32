"""The judged searches searched again with another ranker (CQA_FEEDBACK_QUERIES, ranking/evaluation/replay.py,
`cqa evaluate --feedback --ranker NAME`)."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from ranking.evaluation.feedback import FeedbackLog, Served, merge_from
from ranking.evaluation.replay import replay
from ranking.evaluation.scorer import average_precision

from .conftest import ROOT, STUB_RANKERS


ASKED = [{"question": {"subject": "visa question 7", "body": "rent answer 1"}, "k": 6},
         {"question": {"subject": "rent 3", "body": "answer on rent"}, "k": 5, "filters": {"category": "Visas"}},
         {"question": {"subject": "question about visa 2", "body": "rent 12"}, "k": 4}]


def judge_the_last_helpful(results: list[dict]) -> list[dict]:
    """The user's judgements: the first result shown not helpful, the two last helpful (the reverse ranker's first)."""
    return [{"result_id": results[0]["id"], "helpful": False},
            *({"result_id": r["id"], "helpful": True} for r in results[-2:])]


@pytest.fixture()
def served_forum(settings, fast_encoder):
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={**STUB_RANKERS, "feedback_queries": True})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    return settings


def condensed_ap(results: list[dict], judged: dict[str, bool]) -> float:
    return average_precision([judged[r["id"]] for r in results if r["id"] in judged])


def test_a_judged_search_searched_again_scores_the_served_ranker_as_shown_and_the_candidate_as_it_would_serve(
        served_forum):
    from fastapi.testclient import TestClient

    from app.main import create_app
    settings = served_forum
    judgements = []
    with TestClient(create_app(settings)) as c:
        for ask in ASKED:
            out = c.post("/search", json=ask).json()
            sent = judge_the_last_helpful(out["results"])
            assert c.post("/feedback", json={"search_id": out["search_id"], "judgements": sent}).status_code == 201
            judgements.append({j["result_id"]: j["helpful"] for j in sent})
        similar = c.get("/threads/t4/similar", params={"k": 3}).json()  # a questions search: not replayed as answers
        c.post("/feedback", json={"search_id": similar["search_id"], "judgements": [
            {"result_id": similar["results"][0]["id"], "helpful": True}]})
        reported = {g["endpoint"]: g for g in c.get("/evaluation/feedback").json()["groups"]}["/search"]
    # what the candidate would serve, through the API with it as the reranker: the replay must score that
    candidate = settings.model_copy(update={"search_ranker_answers": "stub-reverse", "feedback": False})
    with TestClient(create_app(candidate)) as c:
        would = [c.post("/search", json=ask).json()["results"] for ask in ASKED]
    # a search judged before its request was kept: counted, not replayed
    log = FeedbackLog(settings.feedback_file)
    old = log.record(Served("/search", "answers", "stub-overlap", "g0", 0, ("t1_a0",), (0,)))
    log.judge(old, [("t1_a0", True)])

    r = replay(settings, "stub-reverse", "answers", progress=False)
    assert (r["searches"], r["without_request"], r["not_reranked"], r["endpoints"]) == (3, 1, 0, {"/search": 3})
    assert r["reproducible"] == r["reproduced"] == 3 and r["other_generation"] == r["other_reranker"] == 0
    assert r["benchmark"] == "feedback-replay-answers"
    # searched again as served, the searches score what the feedback report gave them (the old one left out)
    assert r["served"]["reranker"] == "stub-overlap" and r["served"]["MAP"] == r["as_shown_MAP"]
    assert reported["searches"] == reported["replayable"] == 3 and reported["MAP"] == r["as_shown_MAP"]
    assert r["served"]["MAP_unjudged_not_helpful"] == reported["MAP_unjudged_not_helpful"]
    would_full = [average_precision([j.get(x["id"], False) for x in res]) for res, j in zip(would, judgements)]
    assert r["candidate"]["MAP_unjudged_not_helpful"] == round(sum(would_full) / 3, 4)
    expected = [condensed_ap(res, j) for res, j in zip(would, judgements)]
    assert r["candidate"]["reranker"] == "stub-reverse" and r["candidate"]["MAP"] == round(sum(expected) / 3, 4)
    # the reverse of the head puts its worst first: the helpful results shown leave its page
    found = [len({i for i, h in j.items() if h} & {x["id"] for x in res}) / 2 for res, j in zip(would, judgements)]
    assert r["served"]["helpful_found"] == 1.0 and r["candidate"]["helpful_found"] == round(sum(found) / 3, 4) < 1
    assert r["compare"]["helpful_found_difference"] == round(sum(found) / 3 - 1, 4)
    assert r["compare"]["questions"] == 3
    assert r["compare"]["MAP_difference"] == round(r["candidate"]["MAP"] - r["served"]["MAP"], 4)
    assert r["compare"]["better"] + r["compare"]["worse"] <= 3
    assert r["judgements_per_search"] == round(sum(map(len, judgements)) / 3, 2)
    assert (r["compare"]["caution"] is None) == (r["compare"]["verdict"] == "undecided" or
                                                 r["compare"]["verdict"].endswith("(significant)"))
    with open(f"{r['folder']}/report.json") as fh:
        assert json.load(fh)["candidate"] == r["candidate"]
    # a search served by a reranker no longer serving is searched again, but not expected to show what it showed
    other = log.record(Served("/search", "answers", "retired", r["generation"], 0, ("t2_a0",), (0,),
                              request=json.dumps({"text": "rent 2", "subject": "rent 2", "k": 3})))
    log.judge(other, [("t2_a0", True)])
    again = replay(settings, "stub-reverse", "answers", progress=False)
    assert again["searches"] == 4 and again["other_reranker"] == 1 and again["reproducible"] == again["reproduced"] == 3
    # the questions search (GET /threads/{id}/similar) is the questions target's
    q = replay(settings, "stub-reverse", "questions", progress=False)
    assert q["searches"] == 1 and q["endpoints"] == {"/threads/{id}/similar": 1} and q["reproduced"] == 1


# the readers of two threads: the overlap stub's first comment (a1, sharing "1" and the thread's number with its
# question) not helpful, its last helpful
READ = {"t4": {"t4_a2": True, "t4_a1": False}, "t7": {"t7_a2": True, "t7_a1": False}}


def test_a_threads_judged_comment_order_is_ranked_again_as_the_endpoint_would_rank_it(served_forum, capsys):
    from fastapi.testclient import TestClient

    from app.cli import build_parser
    from app.main import create_app
    from indexing.models import Answer
    from indexing.store import ThreadStore
    from ranking.evaluation.cli import evaluate_command

    from .conftest import ADMIN, TOKEN
    from .test_api import wait_job
    settings = served_forum.model_copy(update={"api_token": TOKEN})
    with TestClient(create_app(settings)) as c:
        shown = {}
        for tid, read in READ.items():
            out = c.get(f"/threads/{tid}/answers").json()
            shown[tid] = [r["id"] for r in out["results"]]
            assert c.post("/feedback", json={"search_id": out["search_id"], "judgements": [
                {"result_id": i, "helpful": h} for i, h in read.items()]}).status_code == 201
        # a forum's own comments (POST /rerank), judged: the forum's text, never kept, so never ranked again
        given = c.post("/rerank", json={"question": {"body": "rent 4"}, "candidates": [{"id": "x", "text": "rent"}]})
        c.post("/feedback", json={"search_id": given.json()["search_id"], "judgements": [
            {"result_id": "x", "helpful": True}]})
        reported = {g["endpoint"]: g for g in c.get("/evaluation/feedback").json()["groups"]}["/threads/{id}/answers"]
    assert reported["target"] == "comments" and reported["replayable"] == 2
    (kept,) = {json.loads(s["request"])["comments_of"] for s in FeedbackLog(settings.feedback_file).judged_searches()
               if s["request"] and "t4_a0" in s["results"]}
    assert kept == "t4"  # the thread's id, no words
    # what the endpoint would show with the candidate as the default ranker: the replay must score that
    candidate = settings.model_copy(update={"default_ranker": "stub-reverse", "feedback": False})
    with TestClient(create_app(candidate)) as c:
        would = {tid: c.get(f"/threads/{tid}/answers").json()["results"] for tid in READ}
    assert all([r["id"] for r in would[t]] != shown[t] for t in READ)
    r = replay(settings, "stub-reverse", "comments", progress=False)
    assert (r["benchmark"], r["searches"], r["endpoints"], r["given"]) == ("feedback-replay-comments", 2,
                                                                           {"/threads/{id}/answers": 2}, 1)
    assert r["without_request"] == 0
    assert r["reproducible"] == r["reproduced"] == 2 and r["served"]["reranker"] == "stub-overlap"
    assert r["served"]["MAP"] == r["as_shown_MAP"] == reported["MAP"]
    expected = [condensed_ap(would[t], READ[t]) for t in READ]
    assert r["candidate"]["reranker"] == "stub-reverse" and r["candidate"]["MAP"] == round(sum(expected) / 2, 4)
    # the same comments in another order: every helpful one is on both pages
    assert r["served"]["helpful_found"] == r["candidate"]["helpful_found"] == 1.0
    assert (r["served"]["MAP"], r["candidate"]["MAP"], r["compare"]["MAP_difference"]) == (0.5, 1.0, 0.5)
    # `cqa evaluate --feedback` names the thread's order; --ranker --target comments ranks them again
    assert evaluate_command(build_parser().parse_args(["evaluate", "--feedback"]), settings, print) == 0
    printed = capsys.readouterr().out
    assert f"in the thread's own order: MAP {reported['first_stage']['MAP']:.4f}" in printed
    emitted = []
    args = build_parser().parse_args(["evaluate", "--feedback", "--ranker", "stub-reverse", "--target", "comments",
                                      "--json"])
    assert evaluate_command(args, settings, emitted.append) == 0
    printed = capsys.readouterr().out
    assert "2 judged threads' comment orders ranked again" in printed and "1 sent to /rerank (never kept)" in printed
    assert emitted[0]["candidate"]["MAP"] == r["candidate"]["MAP"]
    # a comment added since is ranked with the rest; a thread gone is not ranked again
    with ThreadStore(settings.store_path) as store:
        t4 = store.get("t4")
        store.upsert([t4.model_copy(update={"answers": [*t4.answers, Answer(id="t4_a3", text="about visa 4 1")]})])
        store.delete("t7")
    again = replay(settings, "stub-reverse", "comments", progress=False)
    assert (again["searches"], again["thread_gone"], again["reproduced"]) == (1, 1, 0)
    # as a job (POST /evaluation), as the other replays
    with TestClient(create_app(settings)) as c:
        job = wait_job(c, c.post("/evaluation", json={"benchmark": "feedback-replay-comments",
                                                       "ranker": "stub-reverse"}, headers=ADMIN).json()["job"]["id"])
        assert job["state"] == "succeeded" and job["result"]["searches"] == 1, job


def test_the_request_kept_is_the_one_served_and_none_without_the_setting(served_forum):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.store import ThreadStore
    from ranking.pipeline import SearchRequest
    settings = served_forum
    with TestClient(create_app(settings)) as c:
        out = c.post("/search", json=ASKED[1]).json()
        c.post("/feedback", json={"search_id": out["search_id"], "judgements": [
            {"result_id": out["results"][0]["id"], "helpful": True}]})
    (s,) = FeedbackLog(settings.feedback_file).judged_searches()
    req = SearchRequest.from_json(s["request"])
    assert (req.subject, req.body, req.k, req.target, req.filters.category) == ("rent 3", "answer on rent", 5,
                                                                                 "answers", "Visas")
    assert SearchRequest.from_json(req.to_json()) == req
    # a thread's similar search keeps the thread's id, not its words: one erased leaves no copy, and is not asked again
    with TestClient(create_app(settings)) as c:
        similar = c.get("/threads/t4/similar", params={"k": 3, "category": "Visas"}).json()
        c.post("/feedback", json={"search_id": similar["search_id"], "judgements": [
            {"result_id": similar["results"][0]["id"], "helpful": True}]})
        kept = {s["id"]: s["request"] for s in FeedbackLog(settings.feedback_file).judged_searches()}
        kept = json.loads(kept[similar["search_id"]])
        assert kept["like_thread"] == "t4" and not {"text", "subject", "body"} & set(kept)
        with ThreadStore(settings.store_path) as store:
            again = SearchRequest.from_json(json.dumps(kept), store.get)
            assert again == SearchRequest.like_thread(store.get("t4"), again.filters, k=3, target="questions")
            assert again.filters.category == "Visas" and again.filters.exclude_threads == ("t4",)
    assert replay(settings, "stub-reverse", "questions", progress=False)["reproduced"] == 1
    with ThreadStore(settings.store_path) as store:
        store.delete("t4", takedown=True)
    with pytest.raises(ValueError, match="1 of threads no longer stored"):
        replay(settings, "stub-reverse", "questions", progress=False)
    off = settings.model_copy(update={"feedback_queries": False, "feedback_store": settings.data_dir / "off.sqlite3"})
    with TestClient(create_app(off)) as c:
        out = c.post("/search", json=ASKED[0]).json()
        c.post("/feedback", json={"search_id": out["search_id"], "judgements": [
            {"result_id": out["results"][0]["id"], "helpful": True}]})
    (s,) = FeedbackLog(off.feedback_file).judged_searches()
    assert s["request"] is None
    with pytest.raises(ValueError, match="CQA_FEEDBACK_QUERIES=true"):
        replay(off.model_copy(update={"feedback_store": off.feedback_file}), "stub-reverse", progress=False)


def test_a_log_made_before_requests_were_kept_gains_the_column_and_its_backups_merge(tmp_path):
    old = tmp_path / "old.sqlite3"
    with sqlite3.connect(old) as db:  # round 60's schema
        db.executescript("""
        CREATE TABLE served (id TEXT PRIMARY KEY, at REAL NOT NULL, endpoint TEXT NOT NULL, target TEXT NOT NULL,
            ranker TEXT, generation TEXT NOT NULL, first INTEGER NOT NULL, results TEXT NOT NULL,
            first_stage TEXT NOT NULL, challenger TEXT, teams TEXT) WITHOUT ROWID;
        CREATE TABLE judged (search TEXT NOT NULL, result TEXT NOT NULL, helpful INTEGER NOT NULL, at REAL NOT NULL,
            PRIMARY KEY (search, result)) WITHOUT ROWID;
        INSERT INTO served VALUES ('s1', 1.0, '/search', 'answers', 'r', 'g', 0, '["a","b"]', '[0,1]', NULL, NULL);
        INSERT INTO judged VALUES ('s1', 'b', 1, 2.0);
        CREATE TABLE feedback_served AS SELECT * FROM served;
        CREATE TABLE feedback_judged AS SELECT * FROM judged;
        """)
    assert FeedbackLog(old).judged_searches()[0]["request"] is None  # read-only: read as it is
    log = FeedbackLog(old)
    sid = log.record(Served("/search", "answers", "r", "g", 0, ("c",), (0,), request='{"text": "x"}'), now=5.0)
    log.judge(sid, [("c", True)], now=6.0)
    assert {s["id"]: s["request"] for s in log.judged_searches(now=7.0)} == {"s1": None, sid: '{"text": "x"}'}
    log.close()
    # a backup made before round 61 (its copies without the column) merges into a log that has it
    merged = merge_from(old, FeedbackLog(tmp_path / "new.sqlite3"))
    assert merged == {"searches_added": 1, "judgements_merged": 1, "in_backup": True, "searches_forgotten": 0,
                      "requests_dropped": 0}
    assert FeedbackLog(tmp_path / "new.sqlite3").judged_searches()[0]["request"] is None


def test_cqa_evaluate_feedback_ranker_prints_both_and_refuses_what_does_not_go(served_forum, cli_env, capsys):
    from fastapi.testclient import TestClient

    from app.cli import build_parser
    from app.main import create_app
    from ranking.evaluation.cli import evaluate_command
    settings = served_forum
    with TestClient(create_app(settings)) as c:
        out = c.post("/search", json=ASKED[0]).json()
        c.post("/feedback", json={"search_id": out["search_id"], "judgements": judge_the_last_helpful(out["results"])})
    assert evaluate_command(build_parser().parse_args(["evaluate", "--feedback"]), settings, print) == 0
    assert "1 can be searched again (--ranker NAME)" in capsys.readouterr().out
    emitted = []
    args = build_parser().parse_args(["evaluate", "--feedback", "--ranker", "stub-reverse", "--json"])
    assert evaluate_command(args, settings, emitted.append) == 0
    printed = capsys.readouterr().out
    assert "1 judged answers searches searched again" in printed and "1 of 1 shown again as served" in printed
    (r,) = emitted
    assert f"stub-reverse: MAP {r['candidate']['MAP']:.4f}" in printed
    assert f"stub-overlap: MAP {r['served']['MAP']:.4f}" in printed and r["served"]["MAP"] == r["as_shown_MAP"]
    assert f"candidate - served: MAP {r['compare']['MAP_difference']:+.4f}" in printed
    for argv, words in ((["--feedback", "--target", "answers"], "--target goes with --feedback --ranker"),
                        (["--feedback", "--ranker", "stub-reverse", "--target", "threads"], "--target questions"),
                        (["--feedback", "--ranker", "stub-reverse", "--compare", "x"], "without --compare")):
        bad = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", *argv], env=cli_env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and words in bad.stderr, (argv, bad.stderr)
    none = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", "--feedback", "--ranker", "bm25"],
                          env={**cli_env, "CQA_DATA_DIR": str(settings.data_dir.parent / "empty")}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert none.returncode == 2 and "no feedback log" in none.stderr


def test_post_evaluation_replays_as_a_job(served_forum):
    from fastapi.testclient import TestClient

    from app.main import create_app

    from .conftest import ADMIN, TOKEN
    from .test_api import wait_job
    settings = served_forum.model_copy(update={"api_token": TOKEN})
    with TestClient(create_app(settings)) as c:
        out = c.post("/search", json=ASKED[0]).json()
        c.post("/feedback", json={"search_id": out["search_id"], "judgements": judge_the_last_helpful(out["results"])})
        r = c.post("/evaluation", json={"benchmark": "feedback-replay-answers", "ranker": "stub-reverse"},
                   headers=ADMIN)
        assert r.status_code == 202
        job = wait_job(c, r.json()["job"]["id"])
        assert job["state"] == "succeeded", job
        got = job["result"]
        assert got["searches"] == 1 and got["reproduced"] == 1 and got["candidate"]["reranker"] == "stub-reverse"
        assert got["served"]["MAP"] == got["as_shown_MAP"] == c.get("/evaluation/feedback").json()["groups"][0]["MAP"]
        # nothing judged for questions: the job fails, saying why
        job = wait_job(c, c.post("/evaluation", json={"benchmark": "feedback-replay-questions",
                                                       "ranker": "stub-reverse"}, headers=ADMIN).json()["job"]["id"])
        assert job["state"] == "failed" and "no judged questions search" in job["error"]
        bad = c.post("/evaluation", json={"benchmark": "feedback-replay-answers"}, headers=ADMIN)
        assert bad.status_code == 422 and "name it" in bad.json()["error"]["message"]


def test_a_kept_request_is_dropped_after_its_own_period_and_the_judgements_stay(tmp_path):
    day = 86400.0
    log = FeedbackLog(tmp_path / "f.sqlite3", keep_days=30, keep_request_days=1)
    asked = '{"text": "my own words"}'
    judged = log.record(Served("/search", "answers", "r", "g", 0, ("a",), (0,), request=asked), now=0.0)
    log.judge(judged, [("a", True)], now=1.0)
    unjudged = log.record(Served("/search", "answers", "r", "g", 0, ("b",), (0,), request=asked), now=2.0)
    fresh = log.record(Served("/search", "answers", "r", "g", 0, ("c",), (0,), request=asked), now=day + 100)
    log.judge(fresh, [("c", False)], now=day + 101)
    with sqlite3.connect(log.path) as db:
        kept = dict(db.execute("SELECT id, request FROM served"))
    # both past a day lose their text; the unjudged one is still there to be judged (CQA_FEEDBACK_DAYS is 30)
    assert kept == {judged: None, unjudged: None, fresh: asked}
    assert {s["id"]: (s["request"], s["judged"]) for s in log.judged_searches(now=day + 102)} == {
        judged: (None, {"a": True}), fresh: (asked, {"c": False})}
    # read a day later with no write in between: the fresh one's text is past its period too, and is not read
    assert log.judged_searches(now=2 * day + 101)[1]["request"] is None


def test_the_verdict_is_the_ranker_both_maps_favour_and_undecided_where_they_disagree():
    from ranking.evaluation.replay import verdict
    assert verdict(0.09, 0.025, 0.003, 0.52) == "candidate"
    assert verdict(0.09, 0.025, 0.003, 0.04) == "candidate (significant)"
    assert verdict(-0.03, -0.18, 0.48, 0.002) == "served"
    assert verdict(-0.13, -0.29, 0.01, 0.0001) == "served (significant)"
    assert verdict(0.0068, -0.0881, 0.34, 0.003) == "undecided"  # round 61's question-fusion, truly worse
    assert verdict(0.0, 0.0, 1.0, 1.0) == "undecided"


def test_a_verdict_that_is_not_significant_comes_with_a_caution_and_says_which_way_sparse_judgements_lean():
    """Round 62: with few judgements a search the judged results are the served ranker's top ones, and a verdict that
    is not significant may name it where the candidate was better."""
    from ranking.evaluation.replay import caution
    assert caution(1.0, "served (significant)") is None and caution(1.0, "undecided") is None
    assert "interleave" in caution(4.5, "served") and "leans" not in caution(4.5, "candidate")
    for sparse in (1.0, 2.0, 3.0):  # dev's related-answers: named the served ranker on a tie with each
        assert f"with {sparse:.1f} judgements a search it leans to the served ranker" in caution(sparse, "served")
