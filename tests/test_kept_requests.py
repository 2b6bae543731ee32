"""What a user typed, kept by the feedback log (CQA_FEEDBACK_QUERIES), goes when it should: past
CQA_FEEDBACK_QUERY_DAYS whether or not anyone searches (read as gone at once, dropped by each worker's sweep and by a
restore), and with an erasure or a takedown whose removed post it carried (a user's search with the question they
posted after), from the log and from the store backups' copies of it."""
from __future__ import annotations

import json
import re
import sqlite3
import time

import pytest

from app.settings import Settings
from ranking.evaluation import feedback
from ranking.evaluation.feedback import (REMOVED_POST, ErasedTexts, FeedbackLog, Served, _first_words, _words,
                                         copy_into, feedback_report, forget_posts, forget_requests,
                                         judgements_in_order, merge_from)

from .conftest import ADMIN, STUB_RANKERS
from .test_api import wait_job
from .test_erasure import SECRET, _bytes_under, _forum

DAY = 86400.0


def asked(subject: str = "", body: str = "") -> str:
    return json.dumps({"text": f"{subject}\n{body}".strip(), "subject": subject, "body": body, "k": 10})


def served(request: str | None, ids=("a", "b")) -> Served:
    return Served("/search", "answers", "r", "g", 0, tuple(ids), tuple(range(len(ids))), request=request)


def test_words_of_ascii_text_are_what_the_expression_finds_in_it_case_folded():
    """The erasure's scan splits ASCII text without the regular expression (``_words``): the same words, any
    punctuation, digit, underscore, case or control character between them; other text takes the expression."""
    for text in ["Hello, World! It's 2026_12-07\tok\n\x1cend", "  ", "", "A.B;C", "snake_case and CAPS99x",
                 "Straße in KÖLN: ﬁne", "نعم، شكرا جزيلا", "caf\u00e9 au lait"]:
        assert _words(text) == tuple(re.findall(r"\w+", text.casefold())), text
    long_body = "word " * 39 + "longword" * 10  # a word cut where the first characters read end
    assert _first_words(long_body) == _words(long_body)[:5]
    assert _first_words("one two three four fivefivefive" + "e" * 300) == ("one", "two", "three", "four",
                                                                           "fivefivefive" + "e" * 300)


@pytest.mark.parametrize("few_keys", [feedback.FEW_KEYS, 0], ids=["strings-first", "words-only"])
def test_the_texts_an_erasure_took_find_the_requests_that_carry_them(monkeypatch, few_keys):
    """Both ways of looking (a request first read as a string where the texts are few, or always by its words)
    find the same requests."""
    monkeypatch.setattr(feedback, "FEW_KEYS", few_keys)
    long_draft = "I moved here in March and " + "the paperwork took ages, " * 12 + "then my sponsor left"
    late = long_draft[long_draft.index("the paperwork", 200):]  # the post's words from past 200 characters
    erased = ErasedTexts([SECRET, "Bring two photos", "Where to rent near the Pearl", "Straße Köln ist schön heute",
                          long_draft])
    assert erased.few is (few_keys > 0)
    carries = [asked(body=f"{SECRET}, any advice?"),  # the post inside the search
               asked(body="ZANZIBAR 7731 is my   flat, and my phone!"),  # case, spaces and punctuation aside
               asked(subject="Where to rent near the Pearl", body="hello"),  # its subject
               asked(body="Zanzibar-7731 is my flat"),  # a draft: the search inside the post, 5 words
               json.dumps({"text": f"x\n{SECRET}", "k": 3}),  # a request of before subject and body were kept apart
               asked(subject="Hi", body="STRASSE KÖLN IST SCHÖN heute!"),  # case-folded: ß is ss
               asked(subject="Moving", body=late),  # a body held by a long post, begun past 200 characters
               asked(subject="My story, long", body=long_draft[:250])]  # the draft, cut in a word at 200
    for request in carries:
        assert erased.in_request(request), request
    for request in [asked(body="bring two photos please"),  # 3 words: what many users type, not anyone's post
                    asked(body="Zanzibar-7731 is my"),  # 4 words of it
                    asked(body="where is my flat and phone"),  # the words, not in its order
                    asked(subject="Renewing a visa", body="Which office?"),
                    asked(subject="Hi", body="Straße Köln ist nicht schön"),
                    asked(subject="Moving", body=late.replace("paperwork took ages, then", "x")),
                    json.dumps({"like_thread": "t1", "k": 10})]:  # a similar search keeps the thread's id only
        assert not erased.in_request(request), request
    assert not ErasedTexts(["ok thanks", ""])  # nothing long enough to look for


@pytest.mark.parametrize("feedback", [True, False])
def test_a_request_past_its_period_is_not_read_and_goes_without_a_search(tmp_path, feedback):
    """With CQA_FEEDBACK=false too: the log written while it was on still drops what is past its period."""
    settings = Settings(data_dir=tmp_path / "var", feedback_query_days=1, feedback=feedback, **STUB_RANKERS)
    log = FeedbackLog.of(settings)
    now = time.time()
    fresh = log.record(served(asked(body="what I asked today")), now=now - 60)  # its write forgets what is due then
    log.judge(fresh, [("b", True)], now=now - 60)
    old = log.record(served(asked(body="my own words from before")), now=now - 2 * DAY)  # as if the last written
    log.judge(old, [("a", True)], now=now - 2 * DAY)
    log.close()
    with sqlite3.connect(log.path) as db:  # nobody has written since: both still on disk
        assert db.execute("SELECT count(*) FROM served WHERE request IS NOT NULL").fetchone() == (2,)
    # read as gone at once (the report's replayable, and the replay, read it so)
    assert {s["id"]: s["request"] is not None for s in log.judged_searches()} == {old: False, fresh: True}
    # a service started on the folder drops it without a search (its sweep, at once and every FEEDBACK_SWEEP_S)
    from fastapi.testclient import TestClient

    from app.main import create_app
    with TestClient(create_app(settings)) as c:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with sqlite3.connect(log.path) as db:
                kept = dict(db.execute("SELECT id, request IS NOT NULL FROM served"))
            if not kept[old]:
                break
            time.sleep(0.05)
        assert kept == {old: 0, fresh: 1}
        if feedback:
            (g,) = c.get("/evaluation/feedback").json()["groups"]
            assert (g["searches"], g["replayable"]) == (2, 1)


def test_a_restore_brings_back_no_request_past_its_period_and_no_unjudged_search_past_its_own(tmp_path):
    now = time.time()
    source = FeedbackLog(tmp_path / "source.sqlite3", keep_days=30, keep_request_days=30)
    ids = {}
    for name, days in (("kept", 1), ("old", 10), ("unjudged", 40), ("judged", 40)):
        ids[name] = source.record(served(asked(body=f"{name} words typed by a user")), now=now - days * DAY)
        if name != "unjudged":
            source.judge(ids[name], [("a", True)], now=now - days * DAY + 1)
    source.close()
    backup = tmp_path / "backup.sqlite3"
    sqlite3.connect(backup).close()
    assert copy_into(backup, source.path)["feedback"] == {"searches": 4, "judgements": 3}
    target = FeedbackLog(tmp_path / "restored.sqlite3", keep_days=30, keep_request_days=5)
    merged = merge_from(backup, target, now=now)
    assert (merged["searches_added"], merged["judgements_merged"]) == (3, 3)
    with sqlite3.connect(target.path) as db:
        assert dict(db.execute("SELECT id, request IS NOT NULL FROM served")) == {
            ids["kept"]: 1, ids["old"]: 0, ids["judged"]: 0}
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("restored.sqlite3*"))
    assert b"kept words" in on_disk and b"old words" not in on_disk and b"unjudged words" not in on_disk


@pytest.mark.parametrize("apart", [False, True], ids=["here", "in-a-process-of-its-own"])
def test_forget_requests_overwrites_what_it_drops_and_keeps_the_judgements(tmp_path, monkeypatch, apart):
    """Both where the scan runs here and where it runs in a process of its own (a large log: ``carrying``), which
    the scan broken here shows it did."""
    if apart:
        monkeypatch.setattr(feedback, "APART_FROM", 0)

        def broken(self, request):
            raise AssertionError("scanned in this process")
        monkeypatch.setattr(ErasedTexts, "in_request", broken)
    log = FeedbackLog(tmp_path / "f.sqlite3")
    theirs = log.record(served(asked("Where to rent near the Pearl", f"{SECRET}, asking")))
    others = log.record(served(asked("Renewing a visa", "Which office do I go to?")))
    log.judge(theirs, [("a", True)])
    log.close()
    assert forget_requests(log.path, [SECRET]) == 1
    assert forget_requests(log.path, [SECRET]) == 0  # nothing left to drop
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("f.sqlite3*"))
    with sqlite3.connect(log.path) as db:
        assert dict(db.execute("SELECT id, request IS NOT NULL FROM served")) == {theirs: 0, others: 1}
    (s,) = FeedbackLog(log.path).judged_searches()
    assert judgements_in_order(s, None, condensed=True) == [True]  # the judgement stays, as after the period
    assert forget_requests(tmp_path / "none.sqlite3", [SECRET]) == 0


def test_forget_posts_replaces_a_removed_posts_id_where_it_was_shown_and_judged_and_keeps_each_map(tmp_path):
    """An erased or taken-down post's id, in every search that showed it and in its judgements, becomes
    ``removed-<its place>``: distinct within the search, so the report's MAP and counts stay, and the log no longer
    says which post was shown or judged; searches that did not show it are untouched."""
    log = FeedbackLog(tmp_path / "f.sqlite3")
    first = log.record(served(None, ids=("a", "gone1", "c", "gone2")))
    second = log.record(served(None, ids=("gone2", "d")))
    other = log.record(served(None, ids=("d", "e")))
    similar = log.record(served(json.dumps({"k": 10, "like_thread": "gone-thread"}), ids=("d",)))
    comments = log.record(served(json.dumps({"comments_of": "gone-thread"}), ids=("e",)))
    kept = log.record(served(json.dumps({"like_thread": "t9"}), ids=("e",)))
    log.judge(first, [("gone1", True), ("c", False), ("gone2", True)])
    log.judge(second, [("gone2", False), ("d", True)])
    log.judge(other, [("e", True)])
    before = feedback_report(log)
    log.close()
    assert forget_posts(log.path, ["gone1", "gone2", "gone-thread", "never-shown"]) == 4
    with sqlite3.connect(log.path) as db:  # a request naming a removed thread goes; the search stays
        requests = dict(db.execute("SELECT id, request FROM served"))
    assert (requests[similar], requests[comments]) == (None, None) and json.loads(requests[kept])["like_thread"] == "t9"
    assert forget_posts(log.path, ["gone1", "gone2", "gone-thread"]) == 0  # nothing left to replace
    searches = {s["id"]: s for s in FeedbackLog(log.path).judged_searches()}
    assert searches[first]["results"] == ["a", f"{REMOVED_POST}1", "c", f"{REMOVED_POST}3"]
    assert searches[first]["judged"] == {f"{REMOVED_POST}1": True, "c": False, f"{REMOVED_POST}3": True}
    assert searches[second]["results"] == [f"{REMOVED_POST}0", "d"]
    assert searches[second]["judged"] == {f"{REMOVED_POST}0": False, "d": True}
    assert searches[other]["results"] == ["d", "e"] and searches[other]["judged"] == {"e": True}
    assert feedback_report(FeedbackLog(log.path))["groups"] == before["groups"]
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("f.sqlite3*"))
    assert b"gone1" not in on_disk and b"gone2" not in on_disk and b"gone-thread" not in on_disk  # overwritten
    assert forget_posts(tmp_path / "none.sqlite3", ["gone1"]) == 0


def test_requests_dropped_while_workers_log_searches_leave_nothing_on_disk(tmp_path):
    """The workers log searches while an erasure drops requests from the same file. A checkpoint that meets another
    connection's write or checkpoint answers "busy" at once; the write-ahead log then still held the dropped
    requests' older pages (5 of 30 drops here, before ``indexing.store.empty_wal`` tried again)."""
    import threading
    for round_ in range(30):
        folder = tmp_path / str(round_)
        log = FeedbackLog(folder / "feedback.sqlite3", keep_days=365, keep_request_days=365)
        for i in range(300):
            log.record(served(asked(body=SECRET if i % 50 == 0 else f"question {i} about visas and flats")))
        stop = threading.Event()

        def worker() -> None:
            while not stop.is_set():
                log.record(served(asked(body="hello there, how are you today")))
        workers = [threading.Thread(target=worker) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            time.sleep(0.05)
            assert forget_requests(folder / "feedback.sqlite3", [SECRET]) == 6
        finally:
            stop.set()
            for w in workers:
                w.join()
            log.close()
        assert SECRET.encode() not in _bytes_under(folder), round_


def test_an_erasure_drops_the_requests_that_carried_the_users_post_from_the_log_and_its_backups(settings, fast_encoder):
    """A user searched with the question they then posted (a forum's "ask" page searches the draft first), and
    asked for erasure: the request goes from the feedback log and from the store backup that carries a copy of it,
    nothing under the data folder holds the text after the job, and the other searches keep theirs."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.reindex import reindex

    from .conftest import TOKEN
    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={"api_token": TOKEN, "feedback_queries": True, **STUB_RANKERS})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    folder = settings.data_dir
    with TestClient(create_app(settings)) as client:
        searches = {"theirs": client.post("/search", json={"question": {"subject": "Where to rent near the Pearl",
                                                                        "body": f"{SECRET}, asking"}}).json(),
                    "other": client.post("/search", json={"question": {"subject": "Renewing a visa",
                                                                       "body": "Which office?"}}).json()}
        assert client.post("/threads", json={"threads": [json.loads(t.model_dump_json()) for t in _forum()]},
                           headers=ADMIN).status_code == 200
        assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
        searches["similar"] = client.get("/threads/t1/similar").json()  # kept by the thread's id
        searches["showed"] = client.post("/search", json={"question": {"body": f"Old draft {SECRET}"}, "k": 5,
                                                          "rerank": False}).json()  # their comment, t2b
        assert "t2b" in [x["id"] for x in searches["showed"]["results"]]
        for out in searches.values():
            assert client.post("/feedback", json={"search_id": out["search_id"], "judgements": [
                {"result_id": out["results"][0]["id"], "helpful": True}]}).status_code == 201
        made = wait_job(client, client.post("/backups", json={"kind": "store"}, headers=ADMIN).json()["job"]["id"])
        assert made["state"] == "succeeded" and made["result"]["feedback"]["searches"] == 4
        assert SECRET.encode() in _bytes_under(settings.backups_folder)
        removed = {"t1", "t1a", "t2b"}  # their thread with its comment, and their comment of another thread
        showed = {sid for sid, results in sqlite3.connect(settings.feedback_file).execute(
            "SELECT id, results FROM served") if removed & set(json.loads(results))}
        assert searches["showed"]["search_id"] in showed
        showed.add(searches["similar"]["search_id"])  # its request names t1: it goes, the search stays
        report = client.get("/evaluation/feedback").json()["groups"]
        time.sleep(0.01)
        r = client.post("/erasures", json={"author_ids": ["gone"], "content": "remove"}, headers=ADMIN)
        assert r.status_code == 202, r.json()
        assert r.json()["erased"]["feedback_requests"] == 2  # before the answer: a kill -9 now leaves none
        assert r.json()["erased"]["feedback_searches"] == len(showed)  # their posts' ids, before the answer too
        done = wait_job(client, r.json()["job"]["id"])
        assert done["state"] == "succeeded", done
        assert done["result"]["feedback_requests"] == 0  # gone before the answer: the job finds none left in the log
        assert done["result"]["feedback_searches"] == 0
        (rewritten,) = done["result"]["backups_rewritten"]
        assert rewritten["feedback_requests"] == 2 and rewritten["feedback_searches"] == len(showed)
        for path, table, judged in ((settings.feedback_file, "served", "judged"),
                                    (settings.backups_folder / rewritten["backup"], "feedback_served",
                                     "feedback_judged")):
            with sqlite3.connect(path) as db:
                assert not removed & {i for (r_,) in db.execute(f"SELECT results FROM {table}") for i in json.loads(r_)}
                assert not removed & {i for (i,) in db.execute(f"SELECT result FROM {judged}")}
        # the report reads the same: each search's judgements follow the stand-ins of what they judged
        assert [{k: g[k] for k in ("searches", "judgements", "MAP")} for g in
                client.get("/evaluation/feedback").json()["groups"]] == \
            [{k: g[k] for k in ("searches", "judgements", "MAP")} for g in report]
        assert SECRET.encode() not in _bytes_under(folder)  # the log, its write-ahead log and the backup included
        with sqlite3.connect(settings.feedback_file) as db:
            kept = dict(db.execute("SELECT id, request IS NOT NULL FROM served"))
        assert kept == {searches["theirs"]["search_id"]: 0, searches["other"]["search_id"]: 1,
                        searches["similar"]["search_id"]: 0, searches["showed"]["search_id"]: 0}
        (g,) = [g for g in client.get("/evaluation/feedback").json()["groups"] if g["endpoint"] == "/search" and
                g["reranker"]]  # "showed" is the group without one
        assert (g["searches"], g["judgements"], g["replayable"]) == (2, 2, 1)  # judgements stay
        with sqlite3.connect(settings.backups_folder / rewritten["backup"]) as db:
            assert db.execute("SELECT count(*) FROM feedback_served WHERE request IS NOT NULL").fetchone() == (1,)
        # a moderator's takedown of a comment another user quoted in a search: it says so at once, as the erasure did
        quoted = client.post("/search", json={"question": {"subject": "Agents?",
                                                           "body": "someone said: try the agents by the marina!"}})
        r = client.delete("/threads/t1/answers/t1a?purge=true", headers=ADMIN)  # t1 went with its asker: 404
        assert r.status_code == 404
        assert client.post("/threads", json={"threads": [json.loads(_forum()[2].model_copy(update={
            "answers": [*_forum()[2].answers, *_forum()[0].answers]}).model_dump_json())]},
            headers=ADMIN).status_code == 200
        r = client.delete("/threads/t3/answers/t1a?purge=true", headers=ADMIN)
        assert r.status_code == 200 and r.json()["feedback_requests"] == 1, r.json()
        assert r.json()["feedback_searches"] == 0  # no search showed it since it came back
        assert wait_job(client, r.json()["job"]["id"])["state"] == "succeeded"
        with sqlite3.connect(settings.feedback_file) as db:
            assert db.execute("SELECT request FROM served WHERE id = ?", (quoted.json()["search_id"],)).fetchone() \
                == (None,)
        r = client.delete("/threads/t2?purge=true", headers=ADMIN)  # the thread the other search asked, word for word
        assert r.status_code == 200 and r.json()["feedback_requests"] == 1, r.json()
        assert wait_job(client, r.json()["job"]["id"])["state"] == "succeeded"


def test_the_erasure_job_drops_a_request_logged_after_the_answer_scanned_the_log(settings, fast_encoder, monkeypatch):
    """A search carrying the user's post, in flight as the erasure came (another worker's), is logged after the
    service's scan before its answer: the job looks at the log again and drops it, and nothing under the data folder
    holds the text once the job is done. A user who judges a search that showed the removed comment has the others
    recorded, and is told which went."""
    from fastapi.testclient import TestClient

    import indexing.erasure
    from app.main import create_app
    from indexing.reindex import reindex

    from .conftest import TOKEN
    from .test_indexes import fake_encode, fill_store
    settings = settings.model_copy(update={"api_token": TOKEN, "feedback_queries": True, **STUB_RANKERS})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    late: list[str | None] = []
    job_of = indexing.erasure.forget_derived

    def logged_late_then_job(*args, **kwargs):  # between the answer's scan and the job's
        log = FeedbackLog(settings.feedback_file)
        late.append(log.record(served(asked("Where to rent near the Pearl", f"{SECRET}, asking"))))  # their question
        log.close()
        return job_of(*args, **kwargs)
    monkeypatch.setattr(indexing.erasure, "forget_derived", logged_late_then_job)
    with TestClient(create_app(settings)) as client:
        assert client.post("/threads", json={"threads": [json.loads(t.model_dump_json()) for t in _forum()]},
                           headers=ADMIN).status_code == 200
        assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
        showed = client.post("/search", json={"question": {"body": f"Old draft {SECRET}"}, "k": 5,
                                              "rerank": False}).json()  # their comment t2b among others
        ids = [x["id"] for x in showed["results"]]
        assert "t2b" in ids and len(ids) > 1
        r = client.post("/erasures", json={"author_ids": ["gone"], "content": "remove"}, headers=ADMIN)
        assert r.status_code == 202 and r.json()["erased"]["feedback_requests"] == 1, r.json()  # the search below
        done = wait_job(client, r.json()["job"]["id"])
        assert done["state"] == "succeeded", done
        # its user judges what the search showed them: the removed comment is left out and said so, the rest kept
        other = next(i for i in ids if i != "t2b")
        for bad in (["t2b", "nope"], ["t2b", "t1"]):  # more than it showed that went (t1 was removed, not shown)
            r = client.post("/feedback", json={"search_id": showed["search_id"], "judgements": [
                {"result_id": i, "helpful": True} for i in bad]})
            assert r.status_code == 422 and "did not show" in r.json()["error"]["message"], (bad, r.json())
        r = client.post("/feedback", json={"search_id": showed["search_id"], "judgements": [
            {"result_id": "t2b", "helpful": True}, {"result_id": other, "helpful": False}]})
        assert r.status_code == 201 and r.json() == {"search_id": showed["search_id"], "recorded": 1, "judged": 1,
                                                     "removed": ["t2b"]}, r.json()
        with sqlite3.connect(settings.feedback_file) as db:
            assert db.execute("SELECT result, helpful FROM judged WHERE search = ?",
                              (showed["search_id"],)).fetchall() == [(other, 0)]
    assert late[0] is not None and done["result"]["feedback_requests"] == 1
    with sqlite3.connect(settings.feedback_file) as db:
        assert db.execute("SELECT request FROM served WHERE id = ?", late).fetchone() == (None,)  # the search stays
    assert SECRET.encode() not in _bytes_under(settings.data_dir)


def test_a_later_look_reads_only_the_requests_logged_since_the_earlier_scan(tmp_path):
    """``since`` (the erasure job's second look): a request logged before it is left to the earlier scan, one logged
    at it or after goes."""
    log = FeedbackLog(tmp_path / "feedback.sqlite3")
    now = time.time()
    old = log.record(served(asked("Where to rent near the Pearl", SECRET)), now=now - 1000)
    new = log.record(served(asked("Where to rent near the Pearl", SECRET)), now=now)
    log.close()
    assert forget_requests(log.path, [SECRET], since=now - 10) == 1
    with sqlite3.connect(log.path) as db:
        assert dict(db.execute("SELECT id, request IS NOT NULL FROM served")) == {old: 1, new: 0}
    assert forget_requests(log.path, [SECRET]) == 1  # without it, the whole log
