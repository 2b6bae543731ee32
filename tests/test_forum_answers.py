"""`cqa evaluate --answers` and POST /evaluation {"benchmark": "forum-answers-..."}: a forum's own threads, their
comments sorted as GET /threads/{id}/answers sorts them, judged by the forum's acceptance or votes."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from indexing.models import Answer, Thread
from ranking.evaluation.forum_answers import (JudgedBy, asked_threads, baseline_scores, passed_over, relevant,
                                              run_forum_answers, unreadable)
from ranking.evaluation.scorer import average_precision

from .conftest import ADMIN, CQA, ROOT
from .test_api import wait_job

DEV_A = "dev/SemEval2016-Task3-CQA-QL-dev-subtaskA.xml"


def thread(tid: str, *answers: dict, asker: str = "asker") -> Thread:
    return Thread(id=tid, subject=f"question {tid}", body="how do I renew my visa?", author_id=asker,
                  answers=[Answer(id=f"{tid}-{i}", text=a.get("text", f"comment {i} of {tid}"),
                                  author_id=a.get("author", f"u{i}"), meta=a.get("meta", {}))
                           for i, a in enumerate(answers)])


def test_what_each_judgement_calls_relevant_and_which_threads_are_asked():
    yes, up, down, flag = ({"meta": {"accepted": True}}, {"meta": {"score": 3}}, {"meta": {"score": -1}},
                           {"meta": {"score": True}})  # a bool is no score
    t = thread("t", yes, up, down, flag, {})
    assert [relevant(a, JudgedBy.ACCEPTED) for a in t.answers] == [True, False, False, False, False]
    assert [relevant(a, JudgedBy.VOTES) for a in t.answers] == [True, True, False, False, False]
    assert passed_over(t, JudgedBy.ACCEPTED, 10) is None and passed_over(t, JudgedBy.VOTES, 10) is None
    assert passed_over(t, JudgedBy.VOTES, 4) == "more comments than CQA_MAX_THREAD_COMMENTS"
    assert passed_over(thread("one", yes), JudgedBy.ACCEPTED, 10) == "fewer than two comments"
    assert passed_over(thread("none", up, down), JudgedBy.ACCEPTED, 10) == "no accepted answer"
    assert passed_over(thread("none", down, {}), JudgedBy.VOTES, 10) == "no answer voted up or accepted"
    assert passed_over(thread("all", yes, up), JudgedBy.VOTES, 10) == "every comment relevant"
    assert [unreadable(a) for a in thread("u", flag, {"meta": {"score": "3"}}, {"meta": {"accepted": 1}}, yes, up,
                                          {"meta": {"score": None}}).answers] == [True, True, True, False, False, False]
    stored = [thread("a", yes, down), thread("one", yes), thread("b", down, yes), thread("c", yes, {})]
    asked = asked_threads(stored, JudgedBy.ACCEPTED, 10, limit=2)
    assert asked.ids == ["a", "b"] and asked.stored == 4
    assert dict(asked.passed_over) == {"fewer than two comments": 1}  # "c" is past the limit, not passed over
    # the orders a forum has without a ranker: the thread's (first highest), the votes' (none counts 0)
    assert baseline_scores(t, "thread-order") == [0.0, -1.0, -2.0, -3.0, -4.0]
    assert baseline_scores(t, "votes") == [0.0, 3.0, -1.0, 0.0, 0.0]


class Reversed:
    """A ranker that puts a thread's comments last first, recording the queries it was given."""
    name = "reversed"

    def __init__(self):
        self.queries = []

    def score(self, queries):
        self.queries += queries
        return [[float(i) for i in range(len(q.candidates))] for q in queries]


def test_figures_against_the_threads_order_and_the_votes(settings):
    """Judged by acceptance: each thread scored with the official scorer's arithmetic as ranked by the ranker it is
    given, by the thread's order and by the votes; the report folder holds files the official scorer reads."""
    from indexing.store import ThreadStore
    from ranking.evaluation.scorer import score_files
    acc = {"accepted": True}
    threads = [thread("a", {"meta": {"score": 5}}, {"meta": {**acc, "score": 2}}, {}),  # accepted 2nd, most voted 1st
               thread("b", {"meta": {**acc, "score": 1}}, {"meta": {"score": 4}}),  # accepted first, voted 2nd
               thread("c", {}, {})]  # no accepted answer: passed over
    with ThreadStore(settings.store_path) as store:
        store.upsert(threads)
    ranker, told = Reversed(), []
    r = run_forum_answers(settings, "accepted", progress=False, served=(None, ranker, None),
                          on_progress=lambda stage, frac: told.append((stage, frac)))
    assert told == [("reading the store", 0.0), ("ranking", 0.0), ("ranking", 0.5)]  # what a job's GET /jobs shows
    # reversed: a's accepted comment 2nd of 3 (AP 1/2), b's 2nd of 2 (1/2); thread order: 1/2 and 1; votes: 1/2, 1/2
    assert (r["questions"], r["comments"], r["relevant"], r["passed_over"]) == (2, 5, 2, {"no accepted answer": 1})
    assert r["per_question_ap"] == {"a": 0.5, "b": 0.5} and r["MAP"] == 0.5 and r["figures"]["P@1"] == 0.0
    compare = {c["run"]: c for c in r["compare"]}
    assert compare["thread-order"]["figures"]["MAP"] == 0.75 and compare["votes"]["figures"]["MAP"] == 0.5
    assert compare["thread-order"]["figures"]["P@1"] == 0.5 and compare["votes"]["questions"] == 2
    # the ranker read each thread as GET /threads/{id}/answers sends it: the question, asker and comments in order
    q = ranker.queries[0]
    assert q.text == threads[0].question_text and q.meta == {"author_id": "asker", "thread_order": True}
    assert [(c.id, c.meta["position"], c.meta["author_id"]) for c in q.candidates] == \
        [("a-0", 1, "u0"), ("a-1", 2, "u1"), ("a-2", 3, "u2")]
    folder = settings.reports_dir / "forum-answers-accepted"
    assert (folder / "latest.json").exists() and r["folder"].startswith(str(folder))
    official = score_files(Path(r["folder"]) / "gold.relevancy", Path(r["folder"]) / "predictions.txt")
    assert official.MAP == r["MAP"] and official.questions == 2
    assert score_files(Path(r["folder"]) / "gold.relevancy", Path(r["folder"]) / "thread-order.txt").MAP == 0.75
    votes = run_forum_answers(settings, JudgedBy.VOTES, progress=False, served=(None, Reversed(), None))
    # judged by votes: a (5, 2 up; 3rd not) and b (both up: every comment relevant, passed over)
    assert votes["questions"] == 1 and [c["run"] for c in votes["compare"]] == ["thread-order"]
    assert votes["per_question_ap"] == {"a": pytest.approx((1 / 2 + 2 / 3) / 2)}


def test_a_store_with_nothing_to_judge_says_so(settings):
    from indexing.store import ThreadStore
    with pytest.raises(FileNotFoundError, match="ingest the forum first"):
        run_forum_answers(settings, progress=False, served=(None, Reversed(), None))
    with ThreadStore(settings.store_path) as store:
        store.upsert([thread("a", {}, {}), thread("b", {"meta": {"accepted": True}})])
    with pytest.raises(ValueError, match=r"none of the store's 2 threads can be judged by accepted \(1 no accepted "
                                         r"answer, 1 fewer than two comments\)"):
        run_forum_answers(settings, progress=False, served=(None, Reversed(), None))
    with ThreadStore(settings.store_path) as store:  # judgements sent as text: said, not silently read as none
        store.upsert([thread("a", {"meta": {"accepted": "true"}}, {"meta": {"score": "5"}})])
    with pytest.raises(ValueError, match=r"2 answers carry a meta.score or meta.accepted that cannot be read \(a score "
                                         r"is a whole number, accepted is true or false\)"):
        run_forum_answers(settings, JudgedBy.VOTES, progress=False, served=(None, Reversed(), None))


def test_votes_from_semeval_labels_give_the_official_subtask_A_figure_of_the_default_ranker(tmp_path, cli_env, semeval,
                                                                                           settings):
    """dev-A's first threads as a StackExchange dump whose votes are their comments' labels (Good 1, PotentiallyUseful
    0, Bad -1): `cqa ingest` of the dump and `cqa evaluate --answers --judged-by votes` give each thread the AP the
    official scorer gives the default ranker's ranking of the same thread from the SemEval file."""
    from indexing.loaders import load
    from ranking.evaluation.benchmarks import queries_for
    from ranking.presets import build_label
    from ranking.settings import RankingSettings
    from scripts.make_stackexchange_dump import votes_from_labels, write_dump
    threads = [votes_from_labels(t) for t in load(semeval / DEV_A).threads[:8]]
    write_dump(threads, tmp_path / "dump")
    for cmd in (["ingest", str(tmp_path / "dump"), "--encode", "never"],
                ["evaluate", "--answers", "--judged-by", "votes", "--compare", "bm25", "--json"]):
        p = subprocess.run(CQA + cmd, cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    asked = [t.id for t in threads if passed_over(t, JudgedBy.VOTES, 1000) is None]
    assert out["threads"] == len(asked) >= 4 and out["ranker"] == RankingSettings().default_ranker
    report = json.loads((next((tmp_path / "var" / "reports" / "forum-answers-votes").glob("*/report.json"))).read_text())
    queries = [q for q in queries_for(semeval / DEV_A, "A") if q.id in asked]
    ranker = build_label(RankingSettings().default_ranker, settings)
    official = {}
    for q, scores in zip(queries, ranker.score(queries)):
        labels = {a.id: a.label == "Good" for t in threads if t.id == q.id for a in t.answers}
        ranked = sorted(zip([labels[c.id] for c in q.candidates], scores), key=lambda p: -p[1])
        official[q.id] = average_precision([rel for rel, _ in ranked])
    assert report["per_question_ap"] == pytest.approx(official, abs=1e-9)
    assert out["MAP"] == round(sum(official.values()) / len(official), 4)
    # --compare: another preset ranked beside it on the same threads, with the paired test; then the thread's order
    assert [c["run"] for c in out["compare"]] == ["bm25", "thread-order"]
    assert out["compare"][0]["questions"] == len(asked) and 0 <= out["compare"][0]["p_randomization"] <= 1
    assert any((tmp_path / "var" / "reports" / "forum-answers-votes").glob("*/bm25.txt"))


def test_the_evaluation_job_ranks_as_the_endpoint_serves(client):
    """POST /evaluation {"benchmark": "forum-answers-votes"}: the job ranks each thread with the service's own ranker
    as GET /threads/{id}/answers does, to the same AP, or with the preset named (an unknown one is a 422); a store
    with nothing to judge fails the job saying so, and GET /evaluation lists the report."""
    r = client.post("/evaluation", json={"benchmark": "forum-answers-accepted"}, headers=ADMIN)
    job = wait_job(client, r.json()["job"]["id"])
    assert r.status_code == 202 and job["state"] == "failed" and "none of the store's 40 threads can be judged by accepted" in job["error"]
    r = client.post("/evaluation", json={"benchmark": "forum-answers-votes", "ranker": "nope"}, headers=ADMIN)
    assert r.status_code == 422 and "unknown ranker 'nope'" in r.json()["error"]["message"]
    voted = [{"id": f"voted{i}", "subject": f"visa renewal {i}", "body": "how long does it take?", "author_id": "ask",
              "answers": [{"id": f"v{i}-{j}", "text": f"about {j} weeks for the visa renewal {'x' * j}",
                           "author_id": f"u{j}", "meta": {"score": s}} for j, s in enumerate((0, 2, -1, 1))]}
             for i in range(3)]
    assert client.post("/threads", json={"threads": voted}, headers=ADMIN).status_code == 200
    job = wait_job(client, client.post("/evaluation", json={"benchmark": "forum-answers-votes"}, headers=ADMIN)
                   .json()["job"]["id"])
    assert job["state"] == "succeeded", job
    assert job["result"]["questions"] == 3 and job["result"]["comments"] == 12
    report = json.loads((Path(job["result"]["folder"]) / "report.json").read_text())
    for t in voted:
        served = client.get(f"/threads/{t['id']}/answers").json()
        up = {a["id"]: a["meta"]["score"] > 0 for a in t["answers"]}
        assert report["per_question_ap"][t["id"]] == average_precision([up[x["id"]] for x in served["results"]])
        assert served["reranker"] == report["ranker"]
    listed = client.get("/evaluation").json()["benchmarks"]["forum-answers-votes"]
    assert listed["MAP"] == job["result"]["MAP"] and listed["questions"] == 3 and listed["P@1"] == report["P@1"]
    named = wait_job(client, client.post("/evaluation", json={"benchmark": "forum-answers-votes", "ranker": "bm25"},
                                         headers=ADMIN).json()["job"]["id"])  # another preset, as it would serve
    assert named["state"] == "succeeded" and named["result"]["ranker"] == "bm25" and named["result"]["questions"] == 3
    assert client.get("/evaluation").json()["benchmarks"]["forum-answers-votes"]["ranker"] == "bm25"
    r = client.post("/evaluation", json={"benchmark": "forum-answers"}, headers=ADMIN)
    assert r.status_code == 422 and "forum-answers-accepted, forum-answers-votes" in r.json()["error"]["message"]


@pytest.mark.parametrize("args, message", [
    (["--judged-by", "votes"], "--judged-by goes with --answers"),
    (["--answers", "--duplicates"], "one at a time"),
    (["--answers", "--benchmark", "semeval2016-dev-A"], "--answers is its own evaluation"),
    (["--answers", "--inference", "int8"], "a ranker's variant goes in its name"),
    (["--answers", "--limit", "-1"], "--limit: 0 (all) or more"),
    (["--limit", "3"], "--limit goes with --duplicates or --answers"),
    (["--answers"], "no store at"),
    (["--answers", "--ranker", "bm25", "--compare", "bm25"], "the ranker itself"),
])
def test_cqa_evaluate_answers_refuses_what_does_not_go_with_it(cli_env, args, message):
    p = subprocess.run(CQA + ["evaluate", *args], cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_a_thread_deleted_before_its_turn_is_counted_not_ranked(settings):
    """The threads asked are listed first, then each read from the store when its turn comes, as the endpoint reads
    it: one deleted meanwhile (here by the ranker of the thread before it) is counted, not ranked from a stale copy."""
    from indexing.store import ThreadStore
    acc = {"meta": {"accepted": True}}
    with ThreadStore(settings.store_path) as store:
        store.upsert([thread("a", acc, {}), thread("b", {}, acc), thread("c", acc, {})])

    class DeletesB(Reversed):
        def score(self, queries):
            with ThreadStore(settings.store_path) as store:
                store.delete("b")
            return super().score(queries)
    ranker = DeletesB()
    r = run_forum_answers(settings, "accepted", progress=False, served=(None, ranker, None))
    assert (r["questions"], r["changed_meanwhile"]) == (2, 1) and set(r["per_question_ap"]) == {"a", "c"}
    assert [q.candidates[0].id for q in ranker.queries] == ["a-0", "c-0"]
