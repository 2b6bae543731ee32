"""The automatic refresh ($CQA_REFRESH_S): a thread a service accepts becomes searchable, and one it deletes stops
being found, without anyone calling POST /reindex; also after a kill -9. The pieces: the store's change counter,
`reindex(if_stale=True)` / `cqa reindex --if-stale`, and a real uvicorn process that refreshes by itself."""
from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request

import numpy as np
import pytest

from app.settings import Settings
from indexing.models import Answer, Thread
from indexing.reindex import ReindexError, _Lock, reindex, why_stale
from indexing.store import ThreadStore

from .conftest import CQA, ROOT
from .test_api import TOKEN, free_port, http, start_server, stop_server, wait_ready
from .test_indexes import fake_encode, fill_store

ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def test_the_store_counts_the_writes_that_change_it(tmp_path):
    path = tmp_path / "threads.sqlite3"
    t = Thread(id="a", subject="visa", answers=[Answer(id="a1", text="go to the office")])
    with ThreadStore(path) as store, ThreadStore(path) as other:  # another handle: another process's view
        assert store.change_count() == 0
        store.upsert([t, Thread(id="b", subject="rent")])
        assert store.change_count() == other.change_count() == 1  # one write, however many threads
        store.upsert([t])  # the same content: nothing changed
        assert other.change_count() == 1
        store.upsert([t.model_copy(update={"subject": "visa renewal"})])
        assert other.change_count() == 2
        assert not store.delete("nope") and other.change_count() == 2
        assert store.delete("b") and other.change_count() == 3
        with pytest.raises(Exception):
            store.upsert([Thread(id="c", subject="x", answers=[Answer(id="a1", text="clash")])])  # refused: rolled back
        assert other.change_count() == 3


def test_reindex_if_stale_builds_only_when_the_store_moved(settings):
    fill_store(settings, n=10)
    assert why_stale(settings) == "no live generation"
    first = reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True)
    assert "skipped" not in first and why_stale(settings) is None
    again = reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True)
    assert again == {"skipped": "the live generation holds the store as it is", "generation": first["generation"]}
    with ThreadStore(settings.store_path) as store:
        store.delete("t3")
    assert first["generation"] in why_stale(settings)
    lock = _Lock(settings.index_root).acquire()  # another process building
    try:
        busy = reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True)
        assert "another reindex is running" in busy["skipped"] and busy["generation"] == first["generation"]
        with pytest.raises(ReindexError, match="another reindex is running"):
            reindex(settings, progress=False, encode_fn=fake_encode)  # asked for: an error, as before
    finally:
        lock.__exit__()
    built = reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True)
    assert built["generation"] != first["generation"] and built["documents"]["questions"] == 9


def test_a_generation_an_earlier_release_built_is_rebuilt_once_with_its_threads_tags(settings):
    """A live generation whose documents an earlier release made (before the tags column) serves, refuses a tag
    filter with what to run, and counts as stale (``documents``): `cqa reindex --if-stale`, which the automatic refresh
    runs, builds once, reusing its vectors, and the new generation filters by tags; `cqa status` says so meanwhile."""
    from indexing.documents import Documents
    from indexing.reindex import staleness
    from indexing.searcher import load_current
    from indexing.status import folder_status
    from ranking.retriever import Filters, Retriever, TagsNotIndexed
    fill_store(settings, n=6)
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id="tagged", subject="gecko food", meta={"tags": ["Pets"]},
                             answers=[Answer(id="tagged_a", text="crickets")])])
    first = reindex(settings, progress=False, encode_fn=fake_encode)
    folder = settings.index_root / first["generation"]
    docs = Documents.load(folder / "documents.bin")
    old = Documents(**{k: list(v) for k, v in docs.__dict__.items()})
    del old.__dict__["tags"]  # as an earlier release wrote them
    (folder / "documents.bin").unlink()
    old.save(folder / "documents.bin")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "documents_made": 1}))
    retriever = Retriever(load_current(settings.index_root))
    assert retriever.search("gecko", 5, "questions").hits  # it serves
    with pytest.raises(TagsNotIndexed, match="automatic refresh"):
        retriever.search("gecko", 5, "questions", Filters(tags=("pets",)))
    stale = staleness(settings)
    assert stale.behind == "documents" and "tag filter waits for the next build" in stale.reason
    assert any("tag filter waits" in a for a in folder_status(settings).attention)
    built = reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True)
    assert "skipped" not in built and built["generation"] != first["generation"] and why_stale(settings) is None
    parts = built["indexes"]  # every thread read again, every document's tokens and vector reused
    assert parts["documents"]["read_threads"] == 7 and parts["analyse"]["analysed"] == 0, parts
    assert parts["dense"]["encoded"] == 0, parts
    fresh = Retriever(load_current(settings.index_root))
    assert [h.doc_id for h in fresh.search("gecko", 5, "questions", Filters(tags=("pets",))).hits] == ["q:tagged"]
    assert reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True)["skipped"]


def test_cqa_reindex_if_stale_says_skipped(settings, cli_env):
    fill_store(settings, n=5)
    env = {**cli_env, "CQA_DATA_DIR": str(settings.data_dir), "CQA_TRANSLATION_RETRAIN_CHANGED": "0"}
    runs = [subprocess.run(CQA + ["reindex", "--no-dense", "--if-stale", "--nice", "5", "-q"], env=env,
                           capture_output=True, text=True, cwd=ROOT) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    built, skipped = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert "skipped" not in built and skipped["generation"] == built["generation"] and "skipped" in skipped
    with ThreadStore(settings.store_path) as store:  # a new comment: new question-answer pairs
        store.upsert([Thread(id="t1", subject="question 1 about visa 1", body="body text",
                             answers=[Answer(id="t1_new", text="the permit office renews it")])])
    later = subprocess.run(CQA + ["reindex", "--no-dense", "--if-stale", "--translation-later", "-q"], env=env,
                           capture_output=True, text=True, cwd=ROOT)
    assert later.returncode == 0, later.stderr
    live, summary = (json.loads(line) for line in later.stdout.strip().splitlines())  # the live line, then the summary
    assert live["translation"] == "training" and live["live"] == summary["live_before_translation"]["generation"]
    assert summary["generation"] not in (live["live"], built["generation"])
    assert summary["indexes"]["translation"]["trained_after"] == live["live"]
    bad = subprocess.run(CQA + ["reindex", "--nice", "25"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--nice" in bad.stderr


def _search_ids(base, question):
    status, out = http("POST", base + "/search", {"question": {"body": question}, "k": 10, "target": "questions",
                                                  "rerank": False})
    assert status == 200, out
    return {r["thread_id"] for r in out["results"]}


def _until(predicate, what, timeout=240):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.5)


QUESTION = "Where can my pet quokka get a xylophone lesson in Zanzibar?"


def test_a_thread_the_service_accepts_becomes_searchable_by_itself_also_after_kill_9(tmp_path):
    """A real `cqa serve` on the demo corpus with the automatic refresh every 5 s: a POSTed thread is found by
    /search, a DELETEd one no longer, with no POST /reindex; the second build waits out the interval; a thread
    acknowledged just before a kill -9 is found after the restart, the restarted service refreshing by itself."""
    assert Settings.model_fields["refresh_s"].default > 0  # on by default (the tests' conftest turns it off)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # the comment below trains the translation table again (0 of the pairs may change before it does)
    env = {"CQA_REFRESH_S": "5", "CQA_GENERATION_POLL_S": "0.5", "CQA_TRANSLATION_RETRAIN_CHANGED": "0"}
    p = start_server(tmp_path, port, env)
    try:
        ready = wait_ready(p, base)
        assert ready["refresh"]["interval_s"] == 5 and ready["refresh"]["pending"] is False
        assert "qz1" not in _search_ids(base, QUESTION)
        thread = {"id": "qz1", "subject": "Quokka music lessons", "body": QUESTION,
                  "answers": [{"id": "qz1a", "text": "Try the xylophone school near Stone Town."}]}
        status, out = http("POST", base + "/threads", {"threads": [thread]}, ADMIN)
        assert status == 200 and "automatic refresh" in out["note"]
        _until(lambda: "qz1" in _search_ids(base, QUESTION), "the posted thread found by /search")
        # live as soon as the child publishes (the poll may see it before the child has exited)
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["last_outcome"] != "running", "the build's end")
        refresh = http("GET", base + "/ready")[1]["refresh"]
        assert refresh["last_outcome"] == "built" and refresh["pending"] is False, refresh
        job = http("GET", f"{base}/jobs/{refresh['last_job']}")[1]
        assert job["state"] == "succeeded" and job["kind"] == "reindex" and job["result"]["trigger"] == "refresh"
        assert job["result"]["generation"] != ready["generation"]
        # the comment changed the translation table's pairs: live first, the table trained after (--translation-later)
        early = job["result"]["live_before_translation"]["generation"]
        assert early not in (ready["generation"], job["result"]["generation"])
        assert job["result"]["indexes"]["translation"]["trained_after"] == early
        assert job["result"]["served_before_translation"] == early  # from the child's line, not at its end
        assert http("GET", base + "/ready")[1]["generation"] == job["result"]["generation"]
        # POST /threads encoded the new texts before its write ($CQA_ENCODE_AHEAD_TEXTS): the build loaded no model
        built = job["result"]["indexes"]
        assert built["dense"]["encoded"] == 0 and built["answer_vectors"]["encoded"] == 0, built
        with urllib.request.urlopen(base + "/metrics") as r:
            assert 'cqa_encode_ahead_texts_total{outcome="encoded"} 3.0' in r.read().decode()  # question, comment x2
        ended = refresh["last_finished_at"]

        assert http("DELETE", base + "/threads/qz1", headers=ADMIN)[0] == 200
        assert "qz1" not in _search_ids(base, QUESTION)  # at once: a search checks what it shows against the store

        def rebuilt() -> bool:  # the build the delete started (after the gap) has ended
            now = http("GET", base + "/ready")[1]["refresh"]
            return now["last_job"] != refresh["last_job"] and now["last_outcome"] != "running"
        _until(rebuilt, "the build after the delete")
        assert "qz1" not in _search_ids(base, QUESTION)
        second = http("GET", base + "/ready")[1]["refresh"]
        # the gap: the first build's length * 4 ($CQA_REFRESH_DUTY 0.2), at most the interval
        assert 0 < refresh["gap_s"] <= 5 and refresh["interval_s"] == 5, refresh
        assert second["last_job"] != refresh["last_job"] and second["last_started_at"] >= ended + refresh["gap_s"] - 0.5
        with urllib.request.urlopen(base + "/metrics") as r:
            assert 'cqa_refreshes_total{outcome="built"} 2.0' in r.read().decode()

        status, _ = http("POST", base + "/threads", {"threads": [{**thread, "id": "qz2"}]}, ADMIN)
        assert status == 200
        p.send_signal(signal.SIGKILL)  # acknowledged, and maybe not yet refreshed
        p.wait(timeout=20)
        p = start_server(tmp_path, port, env)
        wait_ready(p, base)
        _until(lambda: "qz2" in _search_ids(base, QUESTION), "the thread acknowledged before kill -9 found")
    finally:
        p.terminate()
        p.wait(timeout=20)



def test_the_refresh_gap_keeps_building_to_its_share_of_the_time():
    from app.refresh import refresh_gap
    assert refresh_gap(2.0, 0.2, 60) == 8.0  # building 2 s of every 10
    assert refresh_gap(20.0, 0.2, 60) == 60  # never longer than $CQA_REFRESH_S
    assert refresh_gap(2.0, 0.5, 60) == 2.0 and refresh_gap(2.0, 1.0, 60) == 0
    assert refresh_gap(2.0, 0.0, 60) == 60  # 0: always the interval


def test_a_write_right_after_a_build_waits_for_the_gap_not_the_interval(tmp_path):
    """With a 10-minute CQA_REFRESH_S and CQA_REFRESH_DUTY 0.5, a thread posted right after a build is searchable
    about a build's length later, not ten minutes later; GET /ready says the gap."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port, {"CQA_REFRESH_S": "600", "CQA_REFRESH_DUTY": "0.5"})
    try:
        ready = wait_ready(p, base)
        assert ready["refresh"]["gap_s"] == ready["refresh"]["interval_s"] == 600  # no build yet
        post = {"threads": [{"id": "qz5", "subject": "Quokka lessons", "body": QUESTION}]}
        assert http("POST", base + "/threads", post, ADMIN)[0] == 200
        _until(lambda: "qz5" in _search_ids(base, QUESTION), "the posted thread found by /search", 60)
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["last_outcome"] != "running", "the build's end", 60)
        first = http("GET", base + "/ready")[1]["refresh"]
        took = first["last_finished_at"] - first["last_started_at"]
        assert 0 < first["gap_s"] <= took + 1, first
        t1 = time.time()
        post = {"threads": [{"id": "qz6", "subject": "Quokka lessons again", "body": QUESTION + " Urgent."}]}
        assert http("POST", base + "/threads", post, ADMIN)[0] == 200
        _until(lambda: "qz6" in _search_ids(base, QUESTION + " Urgent."), "the second thread found", 120)
        second = http("GET", base + "/ready")[1]["refresh"]
        assert second["last_job"] != first["last_job"] and second["last_started_at"] - t1 < first["gap_s"] + 5
    finally:
        stop_server(p)


def test_a_write_starts_the_refresh_without_waiting_for_the_poll(tmp_path):
    """With a 60 s generation poll, the build of a POSTed thread still starts within seconds, and so does a DELETE's
    once the interval has passed: the write wakes this process's refresh (``Service.nudge``)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port, {"CQA_REFRESH_S": "1", "CQA_GENERATION_POLL_S": "60"})
    try:
        wait_ready(p, base)
        t0 = time.time()
        status, _ = http("POST", base + "/threads", {"threads": [{"id": "qz4", "subject": "Quokka lessons",
                                                                  "body": QUESTION}]}, ADMIN)
        assert status == 200
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["last_job"] is not None, "a refresh started", 20)
        first = http("GET", base + "/ready")[1]["refresh"]
        assert first["last_started_at"] - t0 < 10, first
        _until(lambda: "qz4" in _search_ids(base, QUESTION), "the posted thread found by /search", 60)
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["last_outcome"] != "running", "the build's end", 60)
        time.sleep(1)  # the interval
        t1 = time.time()
        assert http("DELETE", base + "/threads/qz4", headers=ADMIN)[0] == 200
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["last_job"] != first["last_job"],
               "a second refresh started", 20)
        assert http("GET", base + "/ready")[1]["refresh"]["last_started_at"] - t1 < 10
        _until(lambda: "qz4" not in _search_ids(base, QUESTION), "the deleted thread gone from /search", 60)
    finally:
        stop_server(p)


def test_two_workers_refresh_with_one_build(tmp_path):
    """`cqa serve --workers 2` with the automatic refresh: both workers see the posted thread, each may ask for a
    build, and exactly one generation is built (the other worker's `cqa reindex --if-stale` skips); both go live on
    it and neither is left pending. Then 24 comments posted to the thread alone at the same time, by 8 clients over
    the two workers' port, are all kept, and of 24 whole snapshots of another thread with their revisions, delivered
    at once out of order, the latest stays."""
    from indexing.generations import list_generations
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port, {"CQA_REFRESH_S": "5", "CQA_GENERATION_POLL_S": "0.5", "CQA_WORKERS": "2"})
    root = tmp_path / "var" / "indexes"
    try:
        first = wait_ready(p, base)["generation"]
        seen: dict[str, dict] = {}
        _until(lambda: len({http("GET", base + "/ready")[1]["worker"] for _ in range(10)}) == 2, "both workers up")
        status, _ = http("POST", base + "/threads", {"threads": [{"id": "qz3", "subject": "Quokka lessons",
                                                                  "body": QUESTION}]}, ADMIN)
        assert status == 200

        def both_live() -> bool:
            for _ in range(10):
                ready = http("GET", base + "/ready")[1]
                seen[ready["worker"]] = ready
            return len(seen) == 2 and all(r["generation"] != first and not r["refresh"]["pending"]
                                          and r["refresh"]["last_outcome"] != "running" for r in seen.values())
        _until(both_live, "both workers live on a refreshed generation")
        assert len({r["generation"] for r in seen.values()}) == 1
        assert len(list_generations(root)) == 2  # the first and one refresh, not one per worker
        outcomes = sorted(r["refresh"]["last_outcome"] or "none" for r in seen.values())
        assert outcomes in (["built", "none"], ["built", "skipped"]), outcomes
        assert "qz3" in _search_ids(base, QUESTION)
        # then comments posted to that thread at once through both workers, each alone: every one acknowledged is kept
        from concurrent.futures import ThreadPoolExecutor

        def comment(i: int) -> int:
            return http("POST", base + "/threads/qz3/answers",
                        {"answers": [{"id": f"qz3_c{i}", "text": f"quokka lesson tip {i}"}]}, ADMIN)[0]
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(comment, range(24))) == [200] * 24
        stored = http("GET", base + "/threads/qz3")[1]["answers"]
        assert sorted(a["id"] for a in stored) == sorted(f"qz3_c{i}" for i in range(24))
        # and 24 whole snapshots of one thread, each with its revision, delivered at once in a shuffled order: the
        # latest is what stays, every other one written before it or superseded
        import random

        def snapshot(rev: int) -> dict:
            return http("POST", base + "/threads", {"threads": [{
                "id": "qz5", "subject": "Quokka feeding", "body": QUESTION, "revision": rev,
                "answers": [{"id": f"qz5_c{i}", "text": f"feeding tip {i}"} for i in range(rev)]}]}, ADMIN)[1]
        revisions = random.Random(5).sample(range(1, 25), 24)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(snapshot, revisions))
        assert sum(r["inserted"] + r["updated"] + len(r["superseded"]) for r in answers) == 24, answers
        assert any(r["superseded"] for r in answers)
        final = http("GET", base + "/threads/qz5")[1]
        assert final["revision"] == 24 and [a["id"] for a in final["answers"]] == [f"qz5_c{i}" for i in range(24)]
    finally:
        stop_server(p)


def test_a_build_reuses_the_translation_table_when_no_question_answer_pair_changed(settings):
    """A new question without answers, or a delete of an unanswered thread, leaves IBM Model 1's training pairs as they
    were: the next build copies the live generation's table (byte for byte what training gives) instead of training
    again; a new answer changes the pairs, and the table is trained."""
    settings = retrain_on_any_change(settings)
    fill_store(settings, n=12)
    first = reindex(settings, progress=False, encode_fn=fake_encode)
    assert "reused_from" not in first["indexes"]["translation"]
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id="new", subject="a brand new visa question")])
    second = reindex(settings, progress=False, encode_fn=fake_encode)
    t = second["indexes"]["translation"]
    assert t["reused_from"] == first["generation"] and t["pairs_digest"] == first["indexes"]["translation"]["pairs_digest"]
    root = settings.index_root
    for f in ("data.npy", "indices.npy", "indptr.npy", "vocab.json"):
        assert (root / second["generation"] / "translation_qa" / f).read_bytes() == \
            (root / first["generation"] / "translation_qa" / f).read_bytes()
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id="new", subject="a brand new visa question",
                             answers=[Answer(id="new_a", text="renew the visa at the office")])])
    third = reindex(settings, progress=False, encode_fn=fake_encode)
    assert "reused_from" not in third["indexes"]["translation"]
    assert third["indexes"]["translation"]["pairs"] == first["indexes"]["translation"]["pairs"] + 1


def retrain_on_any_change(settings):
    """Settings whose builds train the translation table whenever a question-answer pair changed (by default a build
    keeps the live table while few did, ``test_a_build_keeps_the_live_table_while_few_pairs_changed``)."""
    return settings.model_copy(update={"translation_retrain_changed": 0.0})


def _files(folder):
    return {str(f.relative_to(folder)): f for f in sorted(folder.rglob("*")) if f.is_file()}


def test_a_build_goes_live_before_it_trains_the_translation_table(settings, tmp_path):
    """``translation_later`` (the refresh's ``--translation-later``): a new answer changes IBM Model 1's pairs; the
    build goes live first with the live table, says so (``on_live``), then trains the table and publishes a second
    generation: byte for byte the files of a build without the option, all but the table shared with the first as
    hard links. In between, ``why_stale`` says the table is behind."""
    settings = retrain_on_any_change(settings)
    import shutil

    from indexing.generations import current_generation
    from indexing.searcher import load_current
    fill_store(settings, n=12)
    first = reindex(settings, progress=False, encode_fn=fake_encode)
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id="new", subject="a brand new visa question",
                             answers=[Answer(id="new_a", text="renew the visa permit at the office")])])
    plain = Settings(data_dir=tmp_path / "plain")  # the same store, built the usual way
    plain.index_root.mkdir(parents=True)
    shutil.copy(settings.store_path, plain.store_path)
    expected = reindex(plain, progress=False, encode_fn=fake_encode)

    root, seen = settings.index_root, []

    def on_live(said):
        seen.append(said)
        assert current_generation(root) == said["generation"]
        assert "translation table" in why_stale(settings)
        status = load_current(root).translation_status()  # what GET /ready's translation says meanwhile
        assert status == {"state": "training", "pairs": 37, "trained_on_pairs": 36, "changed_pairs": None}
        live_table = _files(root / said["generation"] / "translation_qa")
        assert {k: f.read_bytes() for k, f in live_table.items()} == \
            {k: f.read_bytes() for k, f in _files(root / first["generation"] / "translation_qa").items()}
    out = reindex(settings, progress=False, encode_fn=fake_encode, translation_later=True, on_live=on_live)
    assert [s["generation"] for s in seen] == [out["live_before_translation"]["generation"]]
    early = seen[0]["generation"]
    assert current_generation(root) == out["generation"] not in (early, first["generation"])
    assert why_stale(settings) is None
    t = out["indexes"]["translation"]
    assert t["trained_after"] == early and t["pairs"] == first["indexes"]["translation"]["pairs"] + 1
    assert t["pairs_digest"] == expected["indexes"]["translation"]["pairs_digest"]
    got, want = _files(root / out["generation"]), _files(plain.index_root / expected["generation"])
    assert got.keys() == want.keys()
    assert {k for k in got if got[k].read_bytes() != want[k].read_bytes()} == {"manifest.json"}
    shared = _files(root / early)
    for k, f in got.items():
        if not k.startswith("translation_qa/") and k != "manifest.json":
            assert f.stat().st_ino == shared[k].stat().st_ino, k  # a hard link, no copy
    # a new question without answers changes no pair: one generation, the table copied as before
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id="new2", subject="another question")])
    again = reindex(settings, progress=False, encode_fn=fake_encode, translation_later=True, on_live=on_live)
    assert "live_before_translation" not in again and again["indexes"]["translation"]["reused_from"] == out["generation"]
    assert len(seen) == 1


def test_a_build_stopped_before_it_trained_the_table_leaves_it_to_the_next(settings, monkeypatch):
    """Killed (here: failing) between its two generations, a ``translation_later`` build leaves one live whose table is
    behind its pairs: ``why_stale`` says so, so the next ``--if-stale`` build (the refresh's) does not skip, and
    trains it."""
    settings = retrain_on_any_change(settings)
    from indexing.generations import current_generation
    from indexing.translation import TranslationTable
    fill_store(settings, n=12)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id="new", subject="a visa question", answers=[Answer(id="new_a", text="renew it")])])
    train = TranslationTable.train

    def stopped(*a, **k):
        raise RuntimeError("stopped")
    monkeypatch.setattr(TranslationTable, "train", stopped)
    seen = []
    with pytest.raises(RuntimeError):
        reindex(settings, progress=False, encode_fn=fake_encode, translation_later=True, on_live=seen.append)
    assert current_generation(settings.index_root) == seen[0]["generation"]
    assert "translation table" in why_stale(settings)
    # a service's refresh says so, and that every thread is searchable; a write then puts the store behind
    from app.metrics import Metrics
    from app.refresh import Refresher
    with ThreadStore(settings.store_path) as store:
        svc = type("Svc", (), {"settings": Settings(data_dir=settings.data_dir), "store": store, "metrics": Metrics()})
        refresher = Refresher(svc)
        refresher._compare()
        assert refresher.report.pending and refresher.report.behind == "translation"
        store.upsert([Thread(id="newer", subject="one more question")])
        refresher._compare()
        assert refresher.report.pending and refresher.report.behind == "store"
    monkeypatch.setattr(TranslationTable, "train", train)
    out = reindex(settings, progress=False, encode_fn=fake_encode, if_stale=True, translation_later=True)
    assert "skipped" not in out and why_stale(settings) is None
    assert out["indexes"]["translation"]["pairs"] == 12 * 3 + 1


def test_encode_ahead_fills_the_cache_a_build_reads(settings):
    """``encode_ahead`` puts the vectors of a thread's texts in the embedding cache under each encoder's id, the
    vectors the build's own encoding gives (float noise only), so the build that follows encodes nothing; a request
    whose texts the cache lacks more of than the limit is left to the build, and texts it holds do not count."""
    import numpy as np

    from indexing.embcache import EmbeddingCache, text_key
    from indexing.encoder import encode
    from indexing.reindex import encode_ahead
    fill_store(settings, n=4)
    reindex(settings, progress=False)
    thread = Thread(id="ahead", subject="Quokka music lessons", body=QUESTION,
                    answers=[Answer(id="ahead_a", text="Try the xylophone school near Stone Town.")])
    assert encode_ahead(settings, [thread], max_texts=2) == {
        "texts": 3, "skipped": "3 texts, more than 2 ($CQA_ENCODE_AHEAD_TEXTS): the build encodes them"}
    done = encode_ahead(settings, [thread], max_texts=3)
    assert done["texts"] == 3 and done["encoded"] == 3
    assert encode_ahead(settings, [thread], max_texts=3)["encoded"] == 0  # cached now
    # the thread sent again with one more comment: 5 texts, over the limit of 2, but the cache lacks only the new
    # comment's 2 (the dense index's and the answer encoder's), so they are encoded ahead
    again = thread.model_copy(update={"answers": [*thread.answers, Answer(id="ahead_b", text="Or the drum circle.")]})
    assert encode_ahead(settings, [again], max_texts=2) | {"seconds": 0} == {"texts": 5, "encoded": 2, "seconds": 0}
    no_answer_encoder = settings.model_copy(update={"answer_encoder": "none"})  # the dense index's vectors only
    only_dense = encode_ahead(no_answer_encoder, [thread], max_texts=2)
    assert only_dense["texts"] == 2 and only_dense["encoded"] == 0, only_dense
    answer = settings.answer_spec
    for spec, text in ((settings.encoder, thread.question_text), (settings.encoder, thread.answers[0].text),
                       (answer, thread.answers[0].text)):
        cache = EmbeddingCache(settings.cache_dir / "embeddings.sqlite3", spec.id)
        try:
            got = cache.get_many([text_key(spec.id, text)])[text_key(spec.id, text)]
        finally:
            cache.close()
        np.testing.assert_allclose(got, encode([text], device="cpu", spec=spec)[0], atol=1e-5)
    with ThreadStore(settings.store_path) as store:
        store.upsert([thread])
    built = reindex(settings, progress=False)["indexes"]
    assert built["dense"]["encoded"] == 0 and built["answer_vectors"]["encoded"] == 0, built


def test_changed_pairs_counts_pairs_gone_and_new_as_multisets():
    from indexing.reindex import changed_pairs, pair_hashes
    q, r = ["visa", "renew"], ["rent", "flat"]
    before = [(q, ["office"]), (q, ["office"]), (q, ["permit"]), (r, ["agent"])]
    assert changed_pairs(pair_hashes(before), pair_hashes(before)) == 0
    assert changed_pairs(pair_hashes(before), pair_hashes(before + [(r, ["deposit"])])) == 1  # a new comment
    assert changed_pairs(pair_hashes(before), pair_hashes(before[1:])) == 1  # one of two equal pairs removed
    edited = [(q, ["office"]), (q, ["office"]), (q, ["permits"]), (r, ["agent"])]
    assert changed_pairs(pair_hashes(before), pair_hashes(edited)) == 2  # the old pair gone, the new one added
    asked_again = [(["visa", "renewal"], a) for _, a in before[:3]] + before[3:]  # a question edited: all its pairs
    assert changed_pairs(pair_hashes(before), pair_hashes(asked_again)) == 6
    assert pair_hashes([(["a b"], ["c"])])[0] != pair_hashes([(["a"], ["b c"])])[0]  # token bounds count
    assert changed_pairs(pair_hashes([]), pair_hashes(before)) == 4


def test_a_build_keeps_the_live_table_while_few_pairs_changed(settings, monkeypatch):
    """$CQA_TRANSLATION_RETRAIN_CHANGED: a build keeps the live translation table (its files as they are, what it was
    trained on included) while the pairs that changed since that table was trained stay within the share; the
    changes add up over builds until one trains; `--full` (``carry_translation=False``) trains on any change, and
    so does a build whose live table kept no pairs (an older release's)."""
    from indexing.translation import TranslationTable
    fill_store(settings, n=12)
    first = reindex(settings, progress=False, encode_fn=fake_encode)
    pairs = first["indexes"]["translation"]["pairs"]
    assert pairs == 36
    s = settings.model_copy(update={"translation_retrain_changed": 2.5 / pairs})  # 2 changed pairs kept, 3 not
    trained = []
    train = TranslationTable.train
    monkeypatch.setattr(TranslationTable, "train", lambda *a, **k: trained.append(1) or train(*a, **k))
    root = s.index_root

    def table_files(generation):
        return {k: f.read_bytes() for k, f in _files(root / generation / "translation_qa").items()}

    with ThreadStore(s.store_path) as store:
        store.upsert([Thread(id="new", subject="a brand new visa question",
                             answers=[Answer(id="new_a", text="renew the visa permit at the office")])])
    second = reindex(s, progress=False, encode_fn=fake_encode, translation_later=True)
    t = second["indexes"]["translation"]
    assert (t["carried_from"], t["changed_pairs"], t["trained_on"], t["pairs"]) == (first["generation"], 1, 36, 37)
    assert "trains_after_publish" not in t and "live_before_translation" not in second and trained == []
    assert table_files(second["generation"]) == table_files(first["generation"])
    assert "pairs.npy" in table_files(first["generation"])
    assert why_stale(s) is None  # a kept table is not a table behind
    from indexing.searcher import load_current
    assert load_current(root).translation_status() == {"state": "kept", "pairs": 37, "trained_on_pairs": 36,
                                                       "changed_pairs": 1}
    with ThreadStore(s.store_path) as store:  # an edited comment: its old pair gone, its new one added
        store.upsert([Thread(id="t1", subject="question 1 about visa 1", body="body text", category="Visas",
                             answers=[Answer(id=f"t1_a{j}", text=f"answer {j} on rent {1}") for j in range(2)]
                             + [Answer(id="t1_a2", text="an edited answer on the deposit")])])
    third = reindex(s, progress=False, encode_fn=fake_encode)
    t = third["indexes"]["translation"]
    assert "carried_from" not in t and t["pairs"] == 37 and trained == [1]  # 3 changed since the table was trained
    assert table_files(third["generation"]) != table_files(first["generation"])
    with ThreadStore(s.store_path) as store:
        store.delete("new")
    full = reindex(s, progress=False, encode_fn=fake_encode, carry_translation=False)
    assert "carried_from" not in full["indexes"]["translation"] and trained == [1, 1]
    (root / full["generation"] / "translation_qa" / "pairs.npy").unlink()  # a table trained before round 18
    with ThreadStore(s.store_path) as store:
        store.delete("t3")
    older = reindex(s, progress=False, encode_fn=fake_encode)
    assert "carried_from" not in older["indexes"]["translation"] and trained == [1, 1, 1]


def test_a_generation_without_token_digests_is_digested_once_and_its_table_trained_once(settings, monkeypatch):
    """A live generation built before round 20 saved no token digests, and digested its translation table's pairs
    another way. The next build digests every document's carried tokens once and trains the table (pairs digested
    two ways cannot be compared); the build after that carries both, and its digests are those of the tokens."""
    from indexing.termmatrix import TokenIds, token_digests
    from indexing.translation import TranslationTable
    fill_store(settings, n=12)
    first = reindex(settings, progress=False, encode_fn=fake_encode)
    live = settings.index_root / first["generation"]
    (live / "terms" / "token_digests.npy").unlink()
    manifest = json.loads((live / "manifest.json").read_text())
    del manifest["build"]["translation"]["pair_hash"]
    (live / "manifest.json").write_text(json.dumps(manifest))
    trained = []
    train = TranslationTable.train
    monkeypatch.setattr(TranslationTable, "train", lambda *a, **k: trained.append(1) or train(*a, **k))
    s = settings.model_copy(update={"translation_retrain_changed": 0.5})  # one new pair of 37 would be kept

    def one_more(n):
        with ThreadStore(s.store_path) as store:
            store.upsert([Thread(id=f"new{n}", subject="a brand new visa question",
                                 answers=[Answer(id=f"new{n}_a", text=f"renew the visa permit {n} at the office")])])
        return reindex(s, progress=False, encode_fn=fake_encode)

    second = one_more(1)
    a, t = second["indexes"]["analyse"], second["indexes"]["translation"]
    assert (a["carried"], a["analysed"], a["digested"]) == (48, 2, 50)
    assert "carried_from" not in t and t["pair_hash"] == 2 and trained == [1]
    third = one_more(2)
    a, t = third["indexes"]["analyse"], third["indexes"]["translation"]
    assert (a["carried"], a["analysed"]) == (50, 2) and "digested" not in a
    assert (t["carried_from"], t["changed_pairs"], t["pair_hash"]) == (second["generation"], 1, 2) and trained == [1]
    saved = TokenIds.load(settings.index_root / third["generation"] / "terms")
    np.testing.assert_array_equal(saved.digests, token_digests(saved.lists()))


def test_cqa_ingest_encodes_ahead_into_a_served_data_folder(cli_env, tmp_path):
    """`cqa ingest` into a data folder with a live generation (a service's) puts every text in the embedding cache
    before it writes, so the build that takes the import in encodes nothing; a first import leaves encoding to
    `cqa reindex`; --encode overrides either way."""
    def jsonl(name, threads):
        f = tmp_path / name
        f.write_text("".join(t.model_dump_json() + "\n" for t in threads))
        return str(f)

    def cqa(*argv, env=cli_env):
        p = subprocess.run(CQA + list(argv), env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    first = [Thread(id=f"f{i}", subject=f"visa renewal question {i}", body=f"how long does renewal {i} take",
                    answers=[Answer(id=f"f{i}_a{j}", text=f"it took {3 * i + j + 2} weeks for me") for j in range(2)])
             for i in range(3)]
    assert "encoded_ahead" not in cqa("ingest", "-q", jsonl("first.jsonl", first))  # no live generation yet
    built = cqa("reindex", "-q")["indexes"]
    assert built["dense"]["encoded"] == 9 and built["answer_vectors"]["encoded"] == 6, built

    more = [Thread(id="m1", subject="Quokka music lessons", body="Where can my son learn the xylophone?",
                   answers=[Answer(id="m1_a", text="Try the xylophone school near Stone Town."),
                            Answer(id="m1_b", text="Ask at the cultural centre on Friday.")])]
    out = cqa("ingest", "-q", "--nice", "5", jsonl("more.jsonl", more))
    assert out["inserted"] == 1 and out["encoded_ahead"]["texts"] == out["encoded_ahead"]["encoded"] == 5, out
    assert cqa("ingest", "-q", jsonl("more.jsonl", more))["encoded_ahead"]["encoded"] == 0  # cached, unchanged
    built = cqa("reindex", "-q")["indexes"]
    assert built["dense"]["encoded"] == 0 and built["answer_vectors"]["encoded"] == 0, built

    late = [Thread(id="l1", subject="Parking at the airport", body="Is long stay parking cheap?",
                   answers=[Answer(id="l1_a", text="Use the blue lot, it is half the price.")])]
    assert "encoded_ahead" not in cqa("ingest", "-q", "--encode", "never", jsonl("late.jsonl", late))
    assert cqa("reindex", "-q")["indexes"]["dense"]["encoded"] == 2  # left to the build, as asked
    empty = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "empty")}
    forced = cqa("ingest", "-q", "--encode", "always", jsonl("late.jsonl", late), env=empty)
    assert forced["encoded_ahead"]["texts"] == 3 and forced["store"] == {"threads": 1, "answers": 1}


def test_the_next_build_waits_started_and_ends_with_the_service(tmp_path, cli_env):
    """With $CQA_REFRESH_PRESTART (default on) the next build's process is started and waits, its imports done: a
    write's build is told to that process (``child: prestarted``), a new one waits after it, and the one waiting ends
    with the service. `cqa reindex --when-told` at the end of its input exits without building."""
    from pathlib import Path
    told = subprocess.run([*CQA, "reindex", "--if-stale", "-q", "--when-told"], cwd=ROOT, env=cli_env, input="",
                          capture_output=True, text=True, timeout=120)
    assert told.returncode == 0 and json.loads(told.stdout.splitlines()[-1])["skipped"].startswith("not told")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port, {"CQA_REFRESH_S": "1", "CQA_GENERATION_POLL_S": "0.5"})
    try:
        wait_ready(p, base)
        spare = http("GET", base + "/ready")[1]["refresh"]["spare_pid"]
        assert spare and Path(f"/proc/{spare}").exists()
        status, _ = http("POST", base + "/threads", {"threads": [{"id": "qz7", "subject": "Quokka lessons",
                                                                  "body": QUESTION}]}, ADMIN)
        assert status == 200
        _until(lambda: "qz7" in _search_ids(base, QUESTION), "the posted thread found by /search", 120)
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["last_outcome"] == "built", "the build's end", 60)
        refresh = http("GET", base + "/ready")[1]["refresh"]
        job = http("GET", base + f"/jobs/{refresh['last_job']}")[1]
        assert job["result"]["child"] == "prestarted"
        _until(lambda: http("GET", base + "/ready")[1]["refresh"]["spare_pid"] not in (None, spare),
               "the next build's process started", 30)
        after = http("GET", base + "/ready")[1]["refresh"]["spare_pid"]
    finally:
        stop_server(p)

    def ended(pid: int) -> bool:
        try:
            return "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        except FileNotFoundError:
            return True
    _until(lambda: ended(after), "the waiting process ended with the service", 30)
