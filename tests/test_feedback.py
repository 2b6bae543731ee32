"""The feedback log: served searches, their users' judgements, and the MAP they give (ranking/evaluation/feedback.py,
POST /feedback, GET /evaluation/feedback, `cqa evaluate --feedback`)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ranking.evaluation.feedback import (FeedbackLog, FeedbackUnavailable, NotShown, Served, UnknownSearch,
                                         feedback_report, report)

from .conftest import ROOT, STUB_RANKERS

DAY = 86400.0


def served(results, first_stage=None, ranker="stub", offset=0, endpoint="/search", target="answers"):
    return Served(endpoint, target, ranker, "gen-1", offset, tuple(results),
                  tuple(first_stage if first_stage is not None else range(len(results))))


def test_the_report_is_the_official_scorers_arithmetic_over_the_judged_results(tmp_path):
    log = FeedbackLog(tmp_path / "feedback.sqlite3")
    one = log.record(served(["a", "b", "c"], first_stage=[2, 0, 1]), now=1000.0)
    two = log.record(served(["x", "y"]), now=1001.0)
    log.record(served(["p", "q"]), now=1002.0)  # never judged: not in the report
    later = log.record(served(["m", "n"], offset=10), now=1003.0)
    assert len({one, two, later}) == 3 and all(len(i) == 32 for i in (one, two, later))
    log.judge(one, [("a", True), ("c", False)], now=1010.0)
    log.judge(two, [("y", True)], now=1010.0)
    log.judge(later, [("n", True)], now=1010.0)
    out = feedback_report(log, now=1020.0)
    assert out["searches_judged"] == 3
    (g,) = out["groups"]
    assert (g["endpoint"], g["target"], g["reranker"], g["searches"]) == ("/search", "answers", "stub", 2)
    assert g["judgements"] == 3 and g["judgements_later_pages"] == 1
    # condensed: [T, F] -> 1, [T] -> 1; unjudged as not helpful: [T, F, F] -> 1, [F, T] -> 0.5
    assert g["MAP"] == 1.0 and g["MAP_unjudged_not_helpful"] == 0.75 and g["MRR"] == 100.0
    # in the order the reranker was given them: b, c, a -> judged [c F, a T] -> 0.5; y alone -> 1
    assert g["first_stage"]["MAP"] == 0.75 and g["first_stage"]["reranker_gain"] == 0.25
    assert g["helpful_share"] == round(2 / 3, 4)
    assert g["helpful_by_rank"] == [{"rank": 1, "helpful": 1, "judged": 1}, {"rank": 2, "helpful": 1, "judged": 1},
                                    {"rank": 3, "helpful": 0, "judged": 1}]
    # the last day only: none of these (Unix time 1000 is 1970)
    assert feedback_report(log, days=1, now=1000.0 + 5 * DAY)["groups"] == []


def test_groups_are_apart_and_an_unreranked_search_has_no_first_stage_figure(tmp_path):
    log = FeedbackLog(tmp_path / "f.sqlite3")
    a = log.record(served(["a", "b"], ranker=None), now=1.0)
    b = log.record(served(["t1", "t2"], endpoint="/threads/{id}/similar", target="questions"), now=2.0)
    log.judge(a, [("b", True)], now=3.0)
    log.judge(b, [("t1", False), ("t2", True)], now=3.0)
    groups = {(g["endpoint"], g["reranker"]): g for g in feedback_report(log, now=4.0)["groups"]}
    assert groups[("/search", None)]["MAP"] == 1.0 and groups[("/search", None)].get("first_stage") is None
    similar = groups[("/threads/{id}/similar", "stub")]
    assert similar["target"] == "questions" and similar["MAP"] == 0.5 and similar["MRR"] == 50.0


def test_a_judgement_is_checked_replaced_when_sent_again_and_refused_once_forgotten(tmp_path):
    log = FeedbackLog(tmp_path / "f.sqlite3", keep_days=1)
    sid = log.record(served(["a", "b"]), now=0.0)
    with pytest.raises(UnknownSearch):
        log.judge("0" * 32, [("a", True)], now=1.0)
    with pytest.raises(NotShown) as e:
        log.judge(sid, [("a", True), ("zz", True)], now=1.0)
    assert e.value.ids == ["zz"] and "did not show 'zz'" in str(e.value)
    assert log.judged_searches() == []  # nothing of the refused request written
    assert log.judge(sid, [("a", True)], now=2.0).judged == 1
    j = log.judge(sid, [("a", False), ("b", True)], now=3.0)  # a user changes their mind
    assert (j.recorded, j.judged) == (2, 2)
    assert log.judged_searches()[0]["judged"] == {"a": False, "b": True}
    late = log.record(served(["c"]), now=10.0)
    with pytest.raises(UnknownSearch):
        log.judge(late, [("c", True)], now=10.0 + DAY + 1)  # past keep_days
    # a later record forgets the searches nobody judged within keep_days, and keeps the judged one
    log.record(served(["d"]), now=10.0 + DAY + 100)
    import sqlite3
    with sqlite3.connect(log.path) as db:
        kept = {r[0] for r in db.execute("SELECT id FROM served")}
    assert sid in kept and late not in kept and len(kept) == 2


def test_two_workers_share_the_file(tmp_path):
    """A search one worker served is judged through another (each opens the file itself)."""
    one, two = FeedbackLog(tmp_path / "f.sqlite3"), FeedbackLog(tmp_path / "f.sqlite3")
    sid = one.record(served(["a", "b"]))
    assert two.judge(sid, [("b", True)]).judged == 1
    assert one.judged_searches()[0]["judged"] == {"b": True}
    one.close()
    two.close()


def test_a_broken_file_answers_the_search_without_an_id_and_refuses_the_judgement(tmp_path):
    (tmp_path / "f.sqlite3").mkdir()  # a folder where the file should be
    log = FeedbackLog(tmp_path / "f.sqlite3")
    assert log.record(served(["a"])) is None and log.store_errors == 1
    with pytest.raises(FeedbackUnavailable):
        log.judge("0" * 32, [("a", True)])
    assert log.store_errors == 2


def test_an_empty_log_reports_nothing(tmp_path):
    assert feedback_report(FeedbackLog(tmp_path / "none.sqlite3"))["groups"] == []
    assert report([])["searches_judged"] == 0


# --- through the app ---------------------------------------------------------------------------

def test_a_served_search_is_judged_through_the_api_and_reported(client):
    out = client.post("/search", json={"question": {"subject": "visa question", "body": "visa 1"}, "k": 5}).json()
    sid = out["search_id"]
    assert len(sid) == 32 and all("first_stage_rank" not in r for r in out["results"])
    ids = [r["id"] for r in out["results"]]
    r = client.post("/feedback", json={"search_id": sid, "judgements": [{"result_id": ids[1], "helpful": True},
                                                                        {"result_id": ids[0], "helpful": False}]})
    assert r.status_code == 201 and r.json() == {"search_id": sid, "recorded": 2, "judged": 2, "removed": []}
    rep = client.get("/evaluation/feedback").json()
    (g,) = rep["groups"]
    assert g["endpoint"] == "/search" and g["reranker"] == out["reranker"] and g["searches"] == 1
    assert g["MAP"] == 0.5 and g["MRR"] == 50.0  # judged: [not helpful, helpful]
    assert "cqa_feedback_judgements_total{helpful=\"true\"} 1.0" in client.get("/metrics").text
    assert client.get("/ready").json()["feedback"] == {"recorded": 1, "judgements": 2, "store_errors": 0,
                                                       "keep_days": 30.0}
    # a search that showed nothing has nothing to judge: no search_id, nothing kept
    none = client.post("/search", json={"question": {"body": "visa"}, "k": 5, "filters": {"category": "Nowhere"}})
    assert none.status_code == 200 and none.json()["results"] == [] and "search_id" not in none.json()
    assert client.get("/ready").json()["feedback"]["recorded"] == 1
    similar = client.get("/threads/t7/similar", params={"k": 3}).json()
    assert len(similar["search_id"]) == 32 and similar["search_id"] != sid
    assert client.post("/feedback", json={"search_id": similar["search_id"], "judgements": [
        {"result_id": similar["results"][0]["id"], "helpful": True}]}).status_code == 201
    endpoints = {g["endpoint"] for g in client.get("/evaluation/feedback", params={"days": 1}).json()["groups"]}
    assert endpoints == {"/search", "/threads/{id}/similar"}
    # a report is kept for a few seconds (anyone may ask, and it reads the whole log), but never past a judgement
    # this worker recorded: a user who judges and reads sees their judgement
    svc = client.app.state.service
    assert svc.feedback_report(None) is svc.feedback_report(None)
    kept = svc.feedback_report(None)
    assert client.post("/feedback", json={"search_id": sid, "judgements": [
        {"result_id": ids[0], "helpful": True}]}).status_code == 201
    assert svc.feedback_report(None) is not kept
    assert client.get("/evaluation/feedback").json()["groups"][0]["MAP"] == 1.0


def test_a_threads_comment_order_is_judged_by_its_readers_beside_the_threads_own_order(client):
    """GET /threads/{id}/answers and the /rerank endpoints keep the order they showed; its readers' judgements give
    its MAP beside the order the ranker was given (the thread's own, or the request's)."""
    from .conftest import ADMIN
    out = client.get("/threads/t4/answers").json()
    sid, ids = out["search_id"], [r["id"] for r in out["results"]]
    assert len(sid) == 32 and ids == ["t4_a1", "t4_a0", "t4_a2"]  # the overlap stub: t4_a1 shares "4" and "1"
    # the reader: the comment shown first helped, the thread's first did not
    r = client.post("/feedback", json={"search_id": sid, "judgements": [{"result_id": "t4_a1", "helpful": True},
                                                                        {"result_id": "t4_a0", "helpful": False}]})
    assert r.status_code == 201 and r.json()["judged"] == 2
    bad = client.post("/feedback", json={"search_id": sid, "judgements": [{"result_id": "t7_a1", "helpful": True}]})
    assert bad.status_code == 422 and "did not show 't7_a1'" in bad.json()["error"]["message"]
    (g,) = client.get("/evaluation/feedback").json()["groups"]
    assert (g["endpoint"], g["target"], g["reranker"], g["searches"]) == ("/threads/{id}/answers", "comments",
                                                                          "stub-overlap", 1)
    assert g["MAP"] == 1.0 and g["MAP_unjudged_not_helpful"] == 1.0  # shown: helpful, not helpful, unjudged
    # in the thread's order the not-helpful comment comes first: AP 0.5; the ranker's gain over it, 0.5
    assert g["first_stage"] == {"MAP": 0.5, "order": "thread", "reranker_gain": 0.5, "p": 1.0}
    assert client.get("/ready").json()["feedback"]["recorded"] == 1
    # a forum that sends its own thread's comments (POST /rerank) judges them the same way, beside the order it sent
    sent = client.post("/rerank", json={"question": {"subject": "rent", "body": "a flat in 4"}, "candidates": [
        {"id": "c1", "text": "call them"}, {"id": "c2", "text": "rent a flat"}, {"id": "c3", "text": "a flat in 4"}]})
    given = sent.json()
    assert [r["id"] for r in given["results"]] == ["c3", "c2", "c1"] and len(given["search_id"]) == 32
    assert client.post("/feedback", json={"search_id": given["search_id"], "judgements": [
        {"result_id": "c1", "helpful": False}, {"result_id": "c3", "helpful": True}]}).status_code == 201
    groups = {g["endpoint"]: g for g in client.get("/evaluation/feedback").json()["groups"]}
    assert set(groups) == {"/threads/{id}/answers", "/rerank"} and groups["/rerank"]["target"] == "comments"
    assert groups["/rerank"]["MAP"] == 1.0 and groups["/rerank"]["replayable"] == 0
    assert groups["/rerank"]["first_stage"] == {"MAP": 0.5, "order": "given", "reranker_gain": 0.5, "p": 1.0}
    assert client.get("/ready").json()["feedback"]["recorded"] == 2
    # so do similar questions (/rerank/questions) and related threads' comments (/rerank/answers) a forum sends
    question = {"subject": "visa", "body": "renew my visa online"}
    similar = client.post("/rerank/questions", json={"question": question, "candidates": [
        {"id": "q1", "body": "a car"}, {"id": "q2", "body": "renew a visa"}]}).json()
    related = client.post("/rerank/answers", json={"question": question, "threads": [
        {"id": "r1", "body": "cars", "comments": [{"id": "k1", "text": "sell it"}]},
        {"id": "r2", "body": "visa", "comments": [{"id": "k2", "text": "renew it online"}]}]}).json()
    for out, first, other in ((similar, "q2", "q1"), (related, "k2", "k1")):
        assert out["results"][0]["id"] == first and len(out["search_id"]) == 32
        assert client.post("/feedback", json={"search_id": out["search_id"], "judgements": [
            {"result_id": first, "helpful": True}, {"result_id": other, "helpful": False}]}).status_code == 201
    groups = {g["endpoint"]: g for g in client.get("/evaluation/feedback").json()["groups"]}
    assert (groups["/rerank/questions"]["target"], groups["/rerank/answers"]["target"]) == ("questions", "answers")
    for endpoint in ("/rerank/questions", "/rerank/answers"):  # the forum sent the helpful one second
        assert groups[endpoint]["first_stage"] == {"MAP": 0.5, "order": "given", "reranker_gain": 0.5, "p": 1.0}
    assert client.get("/ready").json()["feedback"]["recorded"] == 4
    # a thread with no comment shows nothing to judge
    assert client.post("/threads", json={"threads": [{"id": "bare", "subject": "rent?", "body": "no answer yet"}]},
                       headers=ADMIN).status_code == 200
    bare = client.get("/threads/bare/answers").json()
    assert bare["results"] == [] and "search_id" not in bare
    assert client.get("/ready").json()["feedback"]["recorded"] == 4


def test_a_request_that_says_feedback_false_is_answered_the_same_and_kept_nowhere(client):
    """``?feedback=false`` on every endpoint that ranks: the same results, no search_id, nothing written to the log
    (a user who opted out, a forum's batch job); any other value is a 422 that names it."""
    question = {"subject": "visa", "body": "renew my visa online"}
    asks = [("post", "/search", {"question": {"subject": "visa question 7", "body": "rent answer 1"}}),
            ("get", "/threads/t4/similar", None), ("get", "/threads/t4/answers", None),
            ("post", "/rerank", {"question": question, "candidates": [{"id": "c1", "text": "call them"},
                                                                     {"id": "c2", "text": "renew it online"}]}),
            ("post", "/rerank/questions", {"question": question, "candidates": [{"id": "q1", "body": "a car"},
                                                                               {"id": "q2", "body": "renew a visa"}]}),
            ("post", "/rerank/answers", {"question": question, "threads": [
                {"id": "r1", "body": "cars", "comments": [{"id": "k1", "text": "sell it"}]},
                {"id": "r2", "body": "visa", "comments": [{"id": "k2", "text": "renew it online"}]}]})]

    def ask(method, path, body, **params):
        r = client.request(method.upper(), path, json=body, params=params)
        assert r.status_code == 200, (path, r.text)
        return r.json()
    for method, path, body in asks:
        before = client.get("/ready").json()["feedback"]["recorded"]
        quiet = ask(method, path, body, feedback="false")
        assert "search_id" not in quiet and quiet["results"], path
        assert client.get("/ready").json()["feedback"]["recorded"] == before, path
        kept = ask(method, path, body)
        assert len(kept["search_id"]) == 32 and client.get("/ready").json()["feedback"]["recorded"] == before + 1
        assert [r["id"] for r in quiet["results"]] == [r["id"] for r in kept["results"]], path
    bad = client.get("/threads/t4/answers", params={"feedback": "maybe"})
    assert bad.status_code == 422 and "feedback" in bad.text
    metrics = client.get("/metrics").text  # each endpoint's requests kept out, counted
    for _, path, _ in asks:
        endpoint = path.replace("t4", "{thread_id}")
        assert f'cqa_feedback_not_kept_total{{endpoint="{endpoint}"}}' in metrics or \
            f'cqa_feedback_not_kept_total{{endpoint="{path.replace("t4", "{id}")}"}}' in metrics, (path, metrics)


def test_bad_feedback_gets_a_clear_4xx_and_records_nothing(client):
    out = client.post("/search", json={"question": {"body": "rent"}, "k": 3}).json()
    sid, first = out["search_id"], out["results"][0]["id"]
    cases = [
        ({"search_id": sid.upper(), "judgements": [{"result_id": first, "helpful": True}]}, 422, "search_id"),
        ({"search_id": "f" * 32, "judgements": [{"result_id": first, "helpful": True}]}, 404, "no search"),
        ({"search_id": sid, "judgements": [{"result_id": "nope", "helpful": True}]}, 422, "did not show 'nope'"),
        ({"search_id": sid, "judgements": []}, 422, "judgements"),
        ({"search_id": sid, "judgements": [{"result_id": first, "helpful": True}] * 2}, 422, "judged twice"),
        ({"search_id": sid, "judgements": [{"result_id": first, "helpful": "maybe"}]}, 422, "helpful"),
        ({"search_id": sid, "judgements": [{"result_id": first, "helpful": True}], "extra": 1}, 422, "extra"),
    ]
    for body, status, words in cases:
        r = client.post("/feedback", json=body)
        assert r.status_code == status and words in json.dumps(r.json()), (body, r.json())
    assert client.get("/evaluation/feedback").json()["groups"] == []


def test_feedback_off_gives_no_search_id_and_404(settings, fast_encoder):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    # a challenger set without the log interleaves nothing: no judgement could say which ranker is preferred
    settings = settings.model_copy(update={"feedback": False, **STUB_RANKERS, "interleave_answers": "stub-reverse",
                                           "interleave_comments": "stub-reverse", "interleave_share": 1.0})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        ready = c.get("/ready").json()
        assert ready["search_challengers"] == {} and ready["comments_challenger"] is None
        out = c.post("/search", json={"question": {"body": "rent"}, "k": 3}).json()
        assert "search_id" not in out and out["results"] and "interleaved_with" not in out
        out = c.get("/threads/t3/answers").json()
        assert "search_id" not in out and out["results"] and out["interleaved_with"] is None
        r = c.post("/feedback", json={"search_id": "a" * 32, "judgements": [{"result_id": "x", "helpful": True}]})
        assert r.status_code == 404 and "CQA_FEEDBACK=false" in r.json()["error"]["message"]
    assert not settings.feedback_file.exists()


def test_an_unwritable_log_answers_searches_and_gets_judgements_a_503(settings, fast_encoder):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    broken = settings.data_dir / "broken"
    broken.mkdir(parents=True)
    settings = settings.model_copy(update={"feedback_store": broken, **STUB_RANKERS})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        r = c.post("/search", json={"question": {"body": "rent"}, "k": 3})
        assert r.status_code == 200 and r.json()["results"] and "search_id" not in r.json()
        r = c.get("/threads/t3/answers")  # a thread's comments are sorted all the same
        assert r.status_code == 200 and len(r.json()["results"]) == 3 and "search_id" not in r.json()
        r = c.post("/feedback", json={"search_id": "a" * 32, "judgements": [{"result_id": "x", "helpful": True}]})
        assert r.status_code == 503 and "could not be written" in r.json()["error"]["message"] and r.headers["Retry-After"]
        assert 'cqa_feedback_unrecorded_total{what="search"} 2.0' in c.get("/metrics").text


def test_cqa_evaluate_feedback_prints_the_report(tmp_path, cli_env):
    from app.settings import Settings
    settings = Settings(data_dir=tmp_path / "var")
    log = FeedbackLog(settings.feedback_file)
    sid = log.record(served(["a", "b", "c"]))
    log.judge(sid, [("c", True)])
    out = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", "--feedback", "--json"], env=cli_env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "/search" in out.stdout and "MAP" in out.stdout
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["groups"][0]["MAP"] == 1.0 and last["groups"][0]["MAP_unjudged_not_helpful"] == round(1 / 3, 4)
    bad = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", "--feedback", "--benchmark",
                          "semeval2016-dev-A"], env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--feedback" in bad.stderr




def test_a_large_log_is_reported_with_the_normal_approximation_which_agrees_with_the_bootstrap():
    """Past EXACT_UP_TO judged searches, the interval is the normal approximation's and the test the paired t-test's
    (the bootstrap would draw 10,000 resamples of every search); on 6,000 searches it agrees with the bootstrap."""
    import random

    from ranking.evaluation.feedback import EXACT_UP_TO
    from ranking.evaluation.measures import map_interval
    rng = random.Random(7)
    searches = []
    for i in range(EXACT_UP_TO + 1000):
        ids = [f"s{i}r{j}" for j in range(10)]
        judged = {ids[j]: rng.random() < 0.4 for j in rng.sample(range(10), 3)}
        searches.append({"id": f"{i:032x}", "endpoint": "/search", "target": "answers", "ranker": "r",
                         "generation": "g", "offset": 0, "results": ids, "first_stage": rng.sample(range(10), 10),
                         "judged": judged})
    (g,) = report(searches)["groups"]
    assert g["interval"] == "normal" and g["searches"] == EXACT_UP_TO + 1000
    from ranking.evaluation.feedback import judgements_in_order
    from ranking.evaluation.scorer import average_precision
    boot = map_interval({s["id"]: average_precision(judgements_in_order(s, list(range(10)), True)) for s in searches})
    assert g["MAP_interval_95"] == pytest.approx(boot, abs=0.002)
    assert 0 <= g["first_stage"]["p"] <= 1
    (small,) = report(searches[:100])["groups"]
    assert small["interval"] == "bootstrap"


def test_a_store_backup_carries_the_feedback_log_and_a_restore_merges_it_back(tmp_path, cli_env):
    """`cqa backup` copies the judgements into the store backup (its tables feedback_served and feedback_judged);
    the data folder lost, `cqa restore --replace` brings them back, and a judgement newer than the backup's stays."""
    import sqlite3

    from app.settings import Settings
    from ranking.evaluation.feedback import merge_from

    from .test_indexes import fill_store
    settings = Settings(data_dir=tmp_path / "var")
    fill_store(settings, n=3)
    log = FeedbackLog(settings.feedback_file)
    sid = log.record(served(["t1_a0", "t1_a1"]))
    log.judge(sid, [("t1_a1", True)])
    log.close()
    (tmp_path / "backups").mkdir()
    run = subprocess.run([sys.executable, "-m", "app.cli", "backup", str(tmp_path / "backups")], env=cli_env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    made = json.loads(run.stdout.strip().splitlines()[-1])
    assert made["feedback"] == {"searches": 1, "judgements": 1} and made["threads"] == 3
    copy = Path(made["backup"])
    with sqlite3.connect(copy) as db:
        assert db.execute("SELECT count(*) FROM feedback_judged").fetchone() == (1,)
    settings.feedback_file.unlink()  # the data folder's log lost
    run = subprocess.run([sys.executable, "-m", "app.cli", "restore", str(copy), "--replace", "--no-reindex", "-q"],
                         env=cli_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    restored = json.loads(run.stdout.strip().splitlines()[-1])
    assert restored["feedback"] == {"searches_added": 1, "judgements_merged": 1, "in_backup": True,
                                    "searches_forgotten": 0, "requests_dropped": 0}
    (g,) = feedback_report(FeedbackLog.of(settings))["groups"]
    assert g["MAP"] == 1.0 and g["MAP_unjudged_not_helpful"] == 0.5
    with sqlite3.connect(settings.store_path) as db:  # the restored store holds threads, not the log's copies
        assert not {r[0] for r in db.execute("SELECT name FROM sqlite_master")} & {"feedback_served", "feedback_judged"}
    run = subprocess.run([sys.executable, "-m", "app.cli", "backup", str(tmp_path / "backups")], env=cli_env,
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and json.loads(run.stdout.strip().splitlines()[-1])["feedback"]["judgements"] == 1
    # merged again: nothing new; a judgement changed since the backup is newer, and stays
    FeedbackLog(settings.feedback_file).judge(sid, [("t1_a1", False)])
    assert merge_from(copy, FeedbackLog.of(settings)) == {"searches_added": 0, "judgements_merged": 0,
                                                        "in_backup": True, "searches_forgotten": 0,
                                                        "requests_dropped": 0}
    assert feedback_report(FeedbackLog.of(settings))["groups"][0]["MAP"] == 0.0
    # a backup without the tables (before round 60, or no log yet) merges nothing
    bare = tmp_path / "bare.sqlite3"
    with sqlite3.connect(bare) as db:
        db.execute("CREATE TABLE threads (id TEXT)")
    assert merge_from(bare, FeedbackLog.of(settings))["in_backup"] is False


def test_post_backups_carries_the_feedback_log(client):
    import time as time_
    out = client.post("/search", json={"question": {"body": "rent"}, "k": 3}).json()
    client.post("/feedback", json={"search_id": out["search_id"], "judgements": [
        {"result_id": out["results"][0]["id"], "helpful": True}]})
    from .conftest import ADMIN
    job = client.post("/backups", json={"kind": "store"}, headers=ADMIN).json()["job"]
    for _ in range(200):
        got = client.get(f"/jobs/{job['id']}").json()
        if got["state"] in ("succeeded", "failed"):
            break
        time_.sleep(0.05)
    assert got["state"] == "succeeded", got
    assert got["result"]["feedback"] == {"searches": 1, "judgements": 1}


# --- interleaving ------------------------------------------------------------------------------

def test_team_draft_merges_both_orders_fairly_and_the_same_way_for_the_same_seed():
    import random

    from ranking.interleave import team_draft
    rng = random.Random(3)
    for trial in range(200):
        n = rng.randint(1, 30)
        a = rng.sample(range(n), n)
        b = rng.sample(range(n), n)
        order, teams = team_draft(a, b, trial)
        assert sorted(order) == list(range(n)) and len(teams) == n
        for k in range(1, n + 1):  # at every rank the teams' picks differ by one at most
            assert abs(teams[:k].count("A") - teams[:k].count("B")) <= 1
        for i, (item, team) in enumerate(zip(order, teams)):  # each pick is its team's best not shown before it
            mine = a if team == "A" else b
            assert item == next(x for x in mine if x not in order[:i])
        assert team_draft(a, b, trial) == (order, teams)
    same, _ = team_draft([2, 0, 1], [2, 0, 1], 5)
    assert same == [2, 0, 1]
    with pytest.raises(ValueError):
        team_draft([0, 1], [0, 2], 1)


def test_a_challengers_scores_are_merged_with_the_order_shown_by_team_draft():
    """``with_challenger``: the challenger's order from its scores of the ids as given (a tie keeps the order given),
    merged with the served order by team-draft; each id once with its team, the same for the same seed."""
    from ranking.interleave import with_challenger
    shown = ["c3", "c2", "c1", "c4"]  # the served ranker's order (team A)
    given = ["c1", "c2", "c3", "c4"]
    theirs = [5.0, 1.0, 0.0, 1.0]  # the challenger's (team B): c1, then c2 and c4 tied (c2 given first), then c3
    for rng_seed in range(8):
        merged, teams = with_challenger(shown, given, theirs, rng_seed)
        order, team_of = [shown[i] for i in merged], dict(zip((shown[i] for i in merged), teams))
        # first round: each team's best (A c3, B c1), in the coin's order; second: each its best not shown, and both
        # rank c2 before c4, so the first picker takes c2 and the other c4
        assert set(order[:2]) == {"c3", "c1"} and team_of["c3"] == "A" and team_of["c1"] == "B"
        assert order[2:] == ["c2", "c4"] and teams[2] != teams[3]
        assert with_challenger(shown, given, theirs, rng_seed) == (merged, teams)


def test_the_questions_interleaved_are_a_share_and_always_the_same():
    from ranking.interleave import drawn
    texts = [f"question {i}" for i in range(4000)]
    assert not any(drawn(t, "answers", 0.0) for t in texts) and all(drawn(t, "answers", 1.0) for t in texts)
    share = sum(drawn(t, "answers", 0.3) for t in texts) / len(texts)
    assert 0.27 < share < 0.33
    assert [drawn(t, "answers", 0.3) for t in texts[:50]] == [drawn(t, "answers", 0.3) for t in texts[:50]]


def test_interleaving_credits_each_helpful_result_to_the_team_that_showed_it(tmp_path):
    log = FeedbackLog(tmp_path / "f.sqlite3")

    def interleaved(teams):
        ids = [f"r{i}" for i in range(len(teams))]
        return log.record(Served("/search", "answers", "inc", "g", 0, tuple(ids), tuple(range(len(ids))), "chal",
                                 tuple(teams))), ids
    one, ids = interleaved(["A", "B", "B", "A"])
    log.judge(one, [(ids[1], True), (ids[2], True), (ids[0], True)])  # B 2, A 1: the challenger's
    two, ids = interleaved(["B", "A"])
    log.judge(two, [(ids[1], True), (ids[0], False)])  # A 1: the reranker's
    three, ids = interleaved(["A", "B"])
    log.judge(three, [(ids[0], False)])  # nothing helpful: a tie
    plain = log.record(served(["x", "y"], ranker="inc"))
    log.judge(plain, [("x", True)])
    groups = feedback_report(log)["groups"]
    assert len(groups) == 2 and "interleaving" not in groups[0]
    it = groups[1]["interleaving"]
    assert it == {"challenger": "chal", "searches": 3, "reranker_wins": 1, "challenger_wins": 1, "ties": 1,
                  "challenger_preference": 0.0, "p": 1.0, "searches_for_a_verdict": None}  # neither leads


def test_the_searches_an_interleaving_verdict_needs_follow_the_sign_test():
    """``searches_for_a_verdict``: at the split it names, the sign test is significant, and at a fifth fewer it is
    not; the ties' share scales it."""
    from scipy.stats import binomtest

    from ranking.evaluation.feedback import searches_for_a_verdict
    for a, b, ties in ((152, 68, 107), (122, 96, 109), (115, 109, 103), (2, 1, 0), (10, 30, 60), (30, 10, 0)):
        n = searches_for_a_verdict(a, b, a + b + ties)
        decided = math.floor(n * (a + b) / (a + b + ties))
        assert binomtest(round(decided * b / (a + b)), decided, 0.5).pvalue < 0.05, (a, b, n)
        fewer = round(decided * 0.8)
        assert binomtest(round(fewer * b / (a + b)), fewer, 0.5).pvalue > 0.05, (a, b, n)
    assert searches_for_a_verdict(122, 96, 327) > 327 > searches_for_a_verdict(152, 68, 327)  # the benches' splits
    assert searches_for_a_verdict(2, 1, 6) == 2 * searches_for_a_verdict(2, 1, 3)
    assert searches_for_a_verdict(1, 2, 3) == searches_for_a_verdict(2, 1, 3)
    assert searches_for_a_verdict(5, 5, 20) is None and searches_for_a_verdict(0, 0, 4) is None


def test_a_served_search_is_interleaved_with_the_challenger_and_its_pages_agree(settings, fast_encoder):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex
    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={**STUB_RANKERS, "interleave_answers": "stub-reverse",
                                           "interleave_share": 1.0})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    ask = {"question": {"subject": "visa question 7", "body": "rent answer 1"}, "k": 20}
    with TestClient(create_app(settings)) as c:
        ready = c.get("/ready").json()
        assert ready["search_challengers"] == {"answers": "stub-reverse"} and ready["interleave_share"] == 1.0
        whole = c.post("/search", json=ask).json()
        assert whole["interleaved_with"] == "stub-reverse" and whole["reranker"] == "stub-overlap"
        assert all("team" not in r for r in whole["results"])
        pages = [c.post("/search", json={**ask, "k": 10, "offset": o}).json() for o in (0, 10)]
        assert [r["id"] for p in pages for r in p["results"]] == [r["id"] for r in whole["results"]]
        questions = c.post("/search", json={**ask, "target": "questions"}).json()  # no challenger for questions
        assert "interleaved_with" not in questions
        shown = FeedbackLog(settings.feedback_file)
        c.post("/feedback", json={"search_id": whole["search_id"], "judgements": [
            {"result_id": r["id"], "helpful": True} for r in whole["results"][:4]]})
        (logged,) = shown.judged_searches()
        teams = logged["teams"]
        assert logged["challenger"] == "stub-reverse" and len(teams) == 20 and set(teams[:4]) <= {"A", "B"}
        # the reranker's best result first or second, the challenger's (the reranker's worst of the head) the other
        assert {teams[0], teams[1]} == {"A", "B"}
        it = c.get("/evaluation/feedback").json()["groups"][0]["interleaving"]
        a, b = teams[:4].count("A"), teams[:4].count("B")
        assert (it["reranker_wins"], it["challenger_wins"], it["ties"]) == (int(a > b), int(b > a), int(a == b))
        # a search kept out of the log (feedback=false) is nobody's to judge: the reranker's order alone
        quiet = c.post("/search", json=ask, params={"feedback": "false"}).json()
        assert "interleaved_with" not in quiet and "search_id" not in quiet
        assert [r["id"] for r in quiet["results"]] != [r["id"] for r in whole["results"]]
    off = settings.model_copy(update={"interleave_share": 0.0})
    with TestClient(create_app(off)) as c:
        alone = c.post("/search", json=ask).json()
        assert "interleaved_with" not in alone and [r["id"] for r in alone["results"]] == [r["id"] for r in
                                                                                          quiet["results"]]


def test_a_threads_comments_are_interleaved_with_the_challenger_and_its_readers_give_the_verdict(settings,
                                                                                                 fast_encoder):
    """CQA_INTERLEAVE_COMMENTS: GET /threads/{id}/answers and POST /rerank show both rankers' orders merged by
    team-draft, the same way every time; the log keeps each comment's team, and the readers' judgements give the
    interleaving's verdict in the comments group. The Arabic ranker's order and a share of 0 are never interleaved."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex
    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={**STUB_RANKERS, "interleave_comments": "stub-reverse",
                                           "interleave_share": 1.0, "warm_up": True})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        ready = c.get("/ready").json()
        assert ready["comments_challenger"] == "stub-reverse" and ready["search_challengers"] == {}
        assert ready["interleave_share"] == 1.0 and ready["warm_up_ms"]["POST /rerank, challenger"] is not None
        out = c.get("/threads/t4/answers").json()
        assert out["interleaved_with"] == "stub-reverse" and out["reranker"] == "stub-overlap"
        ids = [r["id"] for r in out["results"]]
        # the overlap stub's best (t4_a1) and the reverse's (t4_a0: t4_a2 ties with it, and comes later in the thread)
        # take the first two places, in the coin's order
        assert set(ids[:2]) == {"t4_a1", "t4_a0"} and ids[2] == "t4_a2"
        assert [r["rank"] for r in out["results"]] == [1, 2, 3] and all("team" not in r for r in out["results"])
        assert "interleave" in out["timings_ms"]
        again = c.get("/threads/t4/answers").json()
        assert [r["id"] for r in again["results"]] == ids  # the thread's text decides the coin: the same order
        log = FeedbackLog(settings.feedback_file)
        assert c.post("/feedback", json={"search_id": out["search_id"], "judgements": [
            {"result_id": ids[0], "helpful": True}, {"result_id": ids[1], "helpful": False}]}).status_code == 201
        (logged,) = log.judged_searches()
        assert logged["challenger"] == "stub-reverse" and len(logged["teams"]) == 3
        first = logged["teams"][0]
        assert {logged["teams"][0], logged["teams"][1]} == {"A", "B"} and (first == "A") == (ids[0] == "t4_a1")
        (g,) = c.get("/evaluation/feedback").json()["groups"]
        assert (g["endpoint"], g["target"], g["searches"]) == ("/threads/{id}/answers", "comments", 1)
        it = g["interleaving"]
        assert (it["reranker_wins"], it["challenger_wins"], it["ties"]) == (int(first == "A"), int(first == "B"), 0)
        # a forum's own thread sent to POST /rerank is interleaved the same way
        sent = c.post("/rerank", json={"question": {"subject": "rent", "body": "a flat in 4"}, "candidates": [
            {"id": "c1", "text": "call them"}, {"id": "c2", "text": "rent a flat"},
            {"id": "c3", "text": "a flat in 4"}]}).json()
        assert sent["interleaved_with"] == "stub-reverse" and {r["id"] for r in sent["results"][:2]} == {"c3", "c1"}
        # an order kept out of the log (a batch sort, a reader who opted out) is the default ranker's alone
        quiet = c.post("/rerank", params={"feedback": "false"}, json={
            "question": {"subject": "rent", "body": "a flat in 4"}, "candidates": [
                {"id": "c1", "text": "call them"}, {"id": "c2", "text": "rent a flat"},
                {"id": "c3", "text": "a flat in 4"}]}).json()
        assert quiet["interleaved_with"] is None and [r["id"] for r in quiet["results"]] == ["c3", "c2", "c1"]
        metrics = c.get("/metrics").text
        assert 'cqa_interleaved_total{challenger="stub-reverse",endpoint="/threads/{id}/answers"} 2.0' in metrics
        assert 'cqa_interleaved_total{challenger="stub-reverse",endpoint="/rerank"} 1.0' in metrics
        # the Arabic ranker's order is the Arabic ranker's alone
        arabic = c.post("/rerank", json={"question": "كيف أجدد الإقامة في قطر", "candidates": [
            {"id": "a1", "text": "اذهب إلى مكتب الهجرة"}, {"id": "a2", "text": "جدد الإقامة عبر الإنترنت"}]}).json()
        assert arabic["reranker"] == settings.arabic_ranker and arabic["interleaved_with"] is None
    off = settings.model_copy(update={"interleave_share": 0.0, "warm_up": False})
    with TestClient(create_app(off)) as c:
        out = c.get("/threads/t4/answers").json()
        assert out["interleaved_with"] is None and [r["id"] for r in out["results"]] == ["t4_a1", "t4_a0", "t4_a2"]


def test_a_challenger_that_fails_costs_the_experiment_not_the_answer(settings, fast_encoder, caplog):
    """A challenger that raises while serving: the search and the thread's comments are answered 200 by the served
    ranker alone, not interleaved, and the failure is logged."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex
    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={**STUB_RANKERS, "interleave_answers": "stub-broken",
                                           "interleave_comments": "stub-broken", "interleave_share": 1.0})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        found = c.post("/search", json={"question": {"subject": "visa question 7", "body": "rent answer 1"}})
        assert found.status_code == 200 and "interleaved_with" not in found.json() and found.json()["search_id"]
        out = c.get("/threads/t4/answers")
        assert out.status_code == 200 and out.json()["interleaved_with"] is None
        assert [r["id"] for r in out.json()["results"]] == ["t4_a1", "t4_a0", "t4_a2"]  # the default ranker's
        assert "cqa_interleaved_total{" not in c.get("/metrics").text
    failed = [r.getMessage() for r in caplog.records if "challenger stub-broken failed" in r.getMessage()]
    assert len(failed) == 2, failed


def test_cqa_evaluate_feedback_prints_an_interleavings_verdict(tmp_path, cli_env):
    from app.settings import Settings
    log = FeedbackLog(Settings(data_dir=tmp_path / "var").feedback_file)
    sid = log.record(Served("/search", "answers", "inc", "g", 0, ("a", "b"), (0, 1), "chal", ("B", "A")))
    log.judge(sid, [("a", True)])
    out = subprocess.run([sys.executable, "-m", "app.cli", "evaluate", "--feedback"], env=cli_env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "interleaved with chal: 1 searches, the reranker preferred in 0, the challenger in 1, 0 ties" in out.stdout
    assert "; about 6 searches for a verdict at this split)" in out.stdout  # 5 of 5 won: p = 0.0625, 6 of 6: 0.03125


def test_the_warm_up_runs_the_challenger_too(settings, fast_encoder):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={**STUB_RANKERS, "interleave_questions": "stub-overlap", "warm_up": True})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        took = c.get("/ready").json()["warm_up_ms"]
        assert took["POST /search questions, challenger"] is not None and "POST /search answers, challenger" not in took


def test_a_backlog_of_forgotten_searches_is_deleted_a_bounded_batch_at_a_time(tmp_path, monkeypatch):
    import sqlite3

    import ranking.evaluation.feedback as fb
    monkeypatch.setattr(fb, "FORGET_AT_ONCE", 3)
    log = FeedbackLog(tmp_path / "f.sqlite3", keep_days=1)
    old = [log.record(served(["a"]), now=float(i)) for i in range(5)]
    log.judge(old[0], [("a", True)], now=10.0)

    def kept():
        with sqlite3.connect(log.path) as db:
            return {r[0] for r in db.execute("SELECT id FROM served")}
    later = DAY + 100.0
    new = log.record(served(["b"]), now=later)
    assert len(kept() & set(old[1:])) == 1 and old[0] in kept() and new in kept()  # 3 of the 4 unjudged deleted
    log.record(served(["c"]), now=later + 1)  # within FORGET_EVERY_S: no delete
    assert len(kept() & set(old[1:])) == 1
    log.record(served(["d"]), now=later + fb.FORGET_EVERY_S + 1)
    assert kept() & set(old) == {old[0]}
