"""A forum user's rights over what they wrote. Access (`ThreadStore.posts_by`, `cqa export --author`, GET
/authors/{id}/posts): every post of theirs and nothing of others'. Erasure (`ThreadStore.erase_authors`, `cqa erase`,
POST /erasures): what the store holds of them goes, from its tables and from its files' bytes, and so does everything
derived from it: index generations, embedding cache vectors, shared memos, the backups that began before. The store's
ledger keeps it so: what an erased user wrote, sent again, is stored as the erasure said."""
from __future__ import annotations

import gzip
import json
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest


from app.jobs import Job
from app.settings import Settings
from indexing.backup import backup, dated_name, export
from indexing.embcache import EmbeddingCache, text_key
from indexing.erasure import forget, forget_derived, rewrite_backups
from indexing.ingest import ingest_paths
from indexing.ledger import Rule, takedowns
from indexing.models import Answer, Thread
from indexing.store import StoreError, ThreadStore, read_only

from .conftest import ADMIN, CQA, ROOT
from .test_api import wait_job

SECRET = "Zanzibar-7731 is my flat and my phone"  # what the erased user wrote: a string no other text holds


def _bytes_under(folder: Path, skip: str = "\0") -> bytes:
    """Every file under ``folder`` (but those whose path holds ``skip``), concatenated: what the disk holds."""
    return b"".join(gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()  # exports unzipped
                    for p in sorted(folder.rglob("*")) if p.is_file() and skip not in str(p))


def _forum() -> list[Thread]:
    """Three threads: one asked by the user to erase (``gone``), one where they commented among others, one
    without them; their comment is edited once, so an older version of it was written too."""
    return [
        Thread(id="t1", subject="Where to rent near the Pearl", body=f"{SECRET}, asking", author_id="gone",
               revision=5, answers=[Answer(id="t1a", text="Try the agents by the marina", author_id="other")]),
        Thread(id="t2", subject="Renewing a visa", body="Which office?", author_id="other", meta={"n": 2},
               answers=[Answer(id="t2a", text="The office in Al Sadd", author_id="third"),
                        Answer(id="t2b", text=f"Old draft {SECRET}", author_id="gone", meta={"username": "Gina"}),
                        Answer(id="t2c", text="Bring two photos", author_id="other", meta={"username": "Oz"})]),
        Thread(id="t3", subject="Best karak tea", body="Any tips?", author_id="third",
               answers=[Answer(id="t3a", text="The stall by the souq", author_id="other")]),
    ]


def _filled(path: Path, secure_delete: bool = True) -> ThreadStore:
    store = ThreadStore(path)
    if not secure_delete:  # as the store was before this setting: the control of the tests below
        store._conn.execute("PRAGMA secure_delete=OFF")
    store.upsert(_forum())
    store.upsert_answers("t2", [Answer(id="t2b", text=f"Edited: {SECRET}", author_id="gone",
                                       meta={"username": "Gina"})])  # the draft is the older version now
    return store


def test_a_users_posts_and_nothing_of_anyone_elses(tmp_path, cli_env):
    with _filled(tmp_path / "var" / "threads.sqlite3") as store:
        posts = store.posts_by(["gone", "nobody"])
        assert [(p.kind, p.thread_id, p.id) for p in posts] == [("question", "t1", "t1"), ("comment", "t2", "t2b")]
        assert posts[0].as_json() == {"kind": "question", "thread_id": "t1", "id": "t1", "author_id": "gone",
                                      "created_at": None, "meta": {}, "subject": "Where to rent near the Pearl",
                                      "body": f"{SECRET}, asking"}  # no category: left out
        assert posts[1].as_json()["text"] == f"Edited: {SECRET}" and "subject" not in posts[1].as_json()
        assert store.posts_by(["nobody"]) == []
    env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "var")}
    run = subprocess.run(CQA + ["export", "--author", "gone", "--author", "third", "-q"], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [(p["author_id"], p["id"]) for p in lines] == [("gone", "t1"), ("third", "t3"), ("third", "t2a"),
                                                          ("gone", "t2b")]  # questions, then comments by place
    assert json.loads(run.stderr.strip().splitlines()[-1])["posts"] == {"question": 2, "comment": 2}


def test_remove_takes_the_authors_posts_out_of_the_stores_files(tmp_path):
    path = tmp_path / "threads.sqlite3"
    with _filled(path) as store:
        assert SECRET.encode() in _bytes_under(tmp_path)
        store.upsert_answers("t3", [Answer(id="t3b", text="Bring two photos", author_id="gone")])  # as t2c says
        etag, changes = store.get_tagged("t2")[1], store.change_count()
        erased = store.erase_authors(["gone", "never-posted"], remove=True)
        assert erased.summary() == {"threads_deleted": 1, "threads_changed": 2, "answers_removed": 2,
                                    "posts_anonymized": 0, "wal_truncated": True}
        assert erased.threads_deleted == ["t1"] and erased.threads_changed == ["t2", "t3"]
        # what a cache keyed by text forgets: not a text another comment still holds
        assert any(SECRET in t for t in erased.texts) and "Bring two photos" not in erased.texts
        assert "Try the agents by the marina" in erased.texts  # another's comment, gone with the thread
        assert store.get("t1") is None  # the thread they asked, with the other user's comment
        t2 = store.get("t2")
        assert [a.id for a in t2.answers] == ["t2a", "t2c"] and store.get_tagged("t2")[1] != etag
        assert store.get("t3") == _forum()[2] and store.change_count() == changes + 1  # t3b gone
        # gone from the bytes of the database and its write-ahead log, the edit's older version included
        assert SECRET.encode() not in _bytes_under(tmp_path) and b"Old draft" not in _bytes_under(tmp_path)
        again = store.erase_authors(["gone"], remove=True)  # nothing left of them: nothing changes
        assert not again.changed and store.change_count() == changes + 1
    # the control: the same writes and erasure without secure_delete leave the text in the file's free space
    (tmp_path / "control").mkdir()
    with _filled(tmp_path / "control" / "threads.sqlite3", secure_delete=False) as store:
        store.erase_authors(["gone"], remove=True)
        assert store.get("t1") is None and SECRET.encode() in _bytes_under(tmp_path / "control")


def test_anonymize_keeps_the_posts_without_the_authors_id_or_user_name(tmp_path):
    with _filled(tmp_path / "threads.sqlite3") as store:
        before = {t.id: t for t in store.iter_threads()}
        erased = store.erase_authors(["gone"], meta_keys=["username"])
        assert erased.summary()["posts_anonymized"] == 2 and sorted(erased.threads_changed) == ["t1", "t2"]
        assert not erased.threads_deleted and not erased.texts
        t1, t2 = store.get("t1"), store.get("t2")
        assert t1.author_id is None and t1.body == before["t1"].body and t1.revision == 5  # revision kept
        gina = t2.answers[1]
        assert gina.author_id is None and gina.meta == {} and gina.text.endswith(SECRET)
        assert t2.answers[2] == before["t2"].answers[2]  # another user's name stays
        assert b'"Gina"' not in _bytes_under(tmp_path) and b"gone" not in _bytes_under(tmp_path)


def test_what_an_erased_user_wrote_stays_out_when_it_is_sent_again(tmp_path):
    """The store's ledger: a forum's sync, an import or an edit that sends an erased user's posts again stores them
    as the erasure said (left out, or without the id), and the ledger does not name the user in clear."""
    with _filled(tmp_path / "threads.sqlite3") as store:
        store.erase_authors(["gone"], remove=True)
        store.erase_authors(["third"], meta_keys=["username"])
        forum = _forum()
        r = store.upsert(forum)  # the sync job sends every thread again, as the forum still holds them
        assert (r.suppressed, r.answers_suppressed, r.posts_anonymized) == (["t1"], 1, 2), r
        assert store.get("t1") is None and [a.id for a in store.get("t2").answers] == ["t2a", "t2c"]
        assert store.get("t2").answers[0].author_id is None and store.get("t3").author_id is None
        assert store.posts_by(["gone", "third"]) == []
        assert store.upsert(forum[1:]).unchanged == 2  # sent again: what it stores equals what it holds
        a = store.upsert_answers("t3", [Answer(id="t3n", text=f"New: {SECRET}", author_id="gone"),
                                        Answer(id="t3m", text="Same here", author_id="third", meta={"username": "T"}),
                                        Answer(id="t3o", text="Agreed", author_id="other")])
        assert (a.inserted, a.answers_suppressed, a.posts_anonymized, a.answers) == (2, 1, 1, 3)
        assert store.get("t3").answers[1].meta == {} and store.get("t3").answers[1].author_id is None
        with pytest.raises(StoreError, match="erased"):
            store.update_question("t3", {"author_id": "gone"})
        assert not store.update_question("t3", {"author_id": "third"})  # anonymized: nothing to change
        assert store.admitted(forum) == [store.get("t2").model_copy(update={"answers": store.get("t2").answers[:1] + [
            forum[1].answers[2]]}), store.get("t3").model_copy(update={"answers": store.get("t3").answers[:1]})]
        # a later erasure of a removed user as anonymize keeps remove; the meta keys add up
        store.erase_authors(["gone"], meta_keys=["nick"])
        assert store.erased(["gone", "third", "other"]) == {
            "gone": Rule(True, frozenset({"nick"})), "third": Rule(False, frozenset({"username"}))}
        rows = store._conn.execute("SELECT * FROM erasures").fetchall()
        assert len(rows) == 2 and not any(v in str(rows) for v in ("gone", "third"))  # keyed hashes, not ids
    with ThreadStore(tmp_path / "threads.sqlite3") as again:  # another process: the ledger is in the file
        assert again.upsert([forum[0]]).suppressed == ["t1"]
    assert SECRET.encode() not in _bytes_under(tmp_path)
    # the control: a store that erased no one stores them
    with ThreadStore(tmp_path / "control.sqlite3") as other:
        assert other.upsert(forum).inserted == 3 and other.get("t1").author_id == "gone"


def test_a_takedown_stays_down_when_the_forum_sends_it_again(tmp_path):
    """A thread or comment deleted as a takedown is kept on record in the ledger, in the delete's own transaction: the
    forum's sync, an import or a new comment sending it again leaves it out and counts it, until the takedown is
    lifted. A plain delete (the control) records nothing, and the thread sent again comes back."""
    with _filled(tmp_path / "threads.sqlite3") as store:
        assert store.delete("t1", takedown=True).id == "t1"
        assert store.delete_answer("t2", "t2c", takedown=True).left == 2
        assert store.delete("t3") is not None  # not a takedown
        forum = _forum()
        r = store.upsert(forum)
        assert (r.taken_down, r.answers_taken_down, r.inserted, r.updated, r.suppressed) == (["t1"], 1, 1, 1, []), r
        assert store.get("t1") is None and [a.id for a in store.get("t2").answers] == ["t2a", "t2b"]
        assert store.get("t3") is not None  # the control: deleted without a takedown, sent again, stored
        a = store.upsert_answers("t2", [forum[1].answers[2], Answer(id="t2d", text="New", author_id="other")])
        assert (a.inserted, a.answers_taken_down, a.answers) == (1, 1, 3), a
        assert [t.id for t in store.admitted(forum)] == ["t2", "t3"]
        assert "t2c" not in [a.id for a in store.admitted(forum)[0].answers]
        assert [(t.thread_id, t.answer_id) for t in store.takedowns()] == [("t1", None), ("t2", "t2c")]
        page = store.takedowns(limit=1)
        assert [(t.thread_id, t.answer_id) for t in store.takedowns(after=(page[0].thread_id, ""))] == [("t2", "t2c")]
        assert [t.answer_id for t in store.takedowns("t2")] == ["t2c"]
    with ThreadStore(tmp_path / "threads.sqlite3") as again:  # another process: the record is in the file
        assert again.upsert([forum[0]]).taken_down == ["t1"]
        assert not again.lift_takedown("t2", "t1a") and not again.lift_takedown("t3")  # none on record
        assert again.lift_takedown("t1") and again.lift_takedown("t2", "t2c")
        r = again.upsert(forum[:2])
        assert (r.taken_down, r.answers_taken_down, r.inserted, r.updated) == ([], 0, 1, 1), r
        assert again.takedowns() == [] and [a.id for a in again.get("t2").answers] == ["t2a", "t2b", "t2c"]


def _backups_of(store: ThreadStore, folder: Path) -> dict[str, Path]:
    """A store backup and an export of ``store`` in ``folder``, named as POST /backups names them."""
    paths = {kind: folder / dated_name(kind) for kind in ("store", "export")}
    backup(store.path, paths["store"])
    export(store.path, paths["export"])
    return paths


def _export_text(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return fh.read()


def test_backups_that_began_before_an_erasure_are_written_again_without_it(tmp_path):
    folder = tmp_path / "backups"
    with _filled(tmp_path / "threads.sqlite3") as store:
        paths = _backups_of(store, folder)
        time.sleep(0.01)
        erased = store.erase_authors(["gone"], remove=True)
        time.sleep(0.01)  # a name is to the millisecond: one made in the erasure's own millisecond may have begun before
        after = folder / dated_name("store")  # began after: left alone
        backup(store.path, after)
        untouched = after.read_bytes()
        (folder / f".{dated_name('export', datetime.fromtimestamp(erased.at - 5, timezone.utc))}.tmp").write_text(
            "half")  # a backup that began before and is still being written
        done = rewrite_backups(folder, erased, wait_s=0.3, poll_s=0.05, live=store.ledger())
    assert sorted(b["backup"] for b in done["backups_rewritten"]) == sorted(p.name for p in paths.values())
    assert len(done["backups_being_written"]) == 1  # waited for, then named: it holds what was erased
    for b in done["backups_rewritten"]:
        assert (b["threads_deleted"], b["threads_changed"], b["answers_removed"]) == (1, 1, 1), b
    assert SECRET not in _export_text(paths["export"]) and SECRET.encode() not in paths["store"].read_bytes()
    assert "Bring two photos" in _export_text(paths["export"])  # the others' posts stay
    assert after.read_bytes() == untouched
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith("half")) == sorted(
        [p.name for p in paths.values()] + [after.name, f".{done['backups_being_written'][0]}.tmp"])  # one file each
    with ThreadStore(paths["store"]) as restored:  # a service restored from it keeps the user erased
        assert restored.get("t1") is None and restored.upsert([_forum()[0]]).suppressed == ["t1"]
    first = json.loads(_export_text(paths["export"]).splitlines()[0])  # the export gained the store's ledger line
    assert len(first["ledger"]["erasures"]) == 1 and "gone" not in json.dumps(first)
    assert [b.get("ledger") for b in done["backups_rewritten"] if "ledger" in b] == [{"erasures": 1, "takedowns": 0}]
    with ThreadStore(tmp_path / "from-export.sqlite3") as restored:  # restored by ingest: the sync keeps them out
        assert ingest_paths(restored, [paths["export"]], progress=False).ledgers[0]["taken"]
        assert restored.counts() == {"threads": 2, "answers": 3} and restored.posts_by(["gone"]) == []
        assert restored.upsert([_forum()[0]]).suppressed == ["t1"]


def test_a_backup_deleted_while_the_erasure_rewrites_is_not_brought_back(tmp_path, monkeypatch):
    import indexing.erasure as erasure
    folder = tmp_path / "backups"
    with _filled(tmp_path / "threads.sqlite3") as store:
        paths = _backups_of(store, folder)
        time.sleep(0.01)
        erased = store.erase_authors(["gone"], remove=True)
    listed = erasure.backups_in(folder)
    paths["export"].unlink()  # deleted after it was listed (DELETE /backups, rotation)
    monkeypatch.setattr(erasure, "backups_in", lambda f: listed)
    done = rewrite_backups(folder, erased, wait_s=0)
    assert {b["backup"]: "deleted_meanwhile" in b for b in done["backups_rewritten"]} == {
        paths["export"].name: True, paths["store"].name: False}
    assert sorted(p.name for p in folder.iterdir()) == [paths["store"].name]


def test_keep_names_the_backups_and_leaves_them_as_they_were(tmp_path):
    """The control of the test above, and CQA_ERASE_BACKUPS=keep: the same backups, not rewritten, hold it."""
    folder = tmp_path / "backups"
    with _filled(tmp_path / "var" / "threads.sqlite3") as store:
        paths = _backups_of(store, folder)
        time.sleep(0.01)
        erased = store.erase_authors(["gone"], remove=True)
    settings = Settings(data_dir=tmp_path / "var")
    done = forget_derived(settings, erased, backups=folder, rewrite_backups_too=False)
    assert sorted(done["backups_before"]) == sorted(p.name for p in paths.values())
    assert SECRET in _export_text(paths["export"]) and SECRET.encode() in paths["store"].read_bytes()


def test_the_cache_forgets_texts_under_every_encoder_it_names(tmp_path):
    path = tmp_path / "embeddings.sqlite3"
    import numpy as np
    for model in ("enc-a", "enc-b"):
        cache = EmbeddingCache(path, model)
        cache.put_many([text_key(model, t) for t in (SECRET, "kept")], np.ones((2, 384), dtype=np.float32))
        cache.close()
    assert forget(path, [SECRET, "not cached"]) == 2
    cache = EmbeddingCache(path, "enc-a")
    assert set(cache.get_many([text_key("enc-a", SECRET), text_key("enc-a", "kept")])) == {text_key("enc-a", "kept")}
    cache.close()
    # a cache written before it named its encoders forgets under the encoders in use
    import sqlite3
    with sqlite3.connect(path) as c:
        c.execute("DELETE FROM models")
        c.execute("INSERT INTO emb VALUES (?, ?)", (text_key("enc-c", SECRET), b"\0" * 1536))
    assert forget(path, [SECRET]) == 0 and forget(path, [SECRET], ["enc-c"]) == 1


def test_post_erasures_removes_a_user_from_the_store_the_indexes_and_the_caches(client, tmp_path):
    svc = client.app.state.service
    folder = svc.settings.data_dir
    body = {"author_ids": ["gone"], "content": "remove"}
    assert client.post("/erasures", json=body).status_code == 401
    for bad in ({"author_ids": [], "content": "remove"}, {"author_ids": ["gone"]}, {"author_ids": [" "], "content":
                "remove"}, {"author_ids": ["gone"], "content": "shred"}, {**body, "to": "x"}):
        r = client.post("/erasures", json=bad, headers=ADMIN)
        assert r.status_code == 422, (bad, r.json())
    assert client.post("/threads", json={"threads": [json.loads(t.model_dump_json()) for t in _forum()]},
                       headers=ADMIN).status_code == 200
    assert client.get("/authors/gone/posts").status_code == 401
    theirs = client.get("/authors/gone/posts", headers=ADMIN).json()
    assert (theirs["questions"], theirs["comments"]) == (1, 1) and theirs["posts"][1]["text"].endswith(SECRET)
    made = client.post("/backups", headers=ADMIN).json()["job"]["id"]
    assert wait_job(client, made)["state"] == "succeeded"
    built = wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])
    assert built["state"] == "succeeded"
    hits = client.post("/search", json={"question": {"body": "Zanzibar-7731 flat phone"}, "k": 3, "rerank": False,
                                        "target": "questions"}).json()["results"]
    assert hits[0]["thread_id"] == "t1"
    older = sorted(p.name for p in svc.settings.index_root.glob("gen-*"))
    assert len(older) >= 2 and SECRET.encode() in _bytes_under(folder, skip="backups")
    time.sleep(0.01)
    r = client.post("/erasures", json=body, headers=ADMIN)
    assert r.status_code == 202, r.json()
    assert r.json()["erased"] == {"threads_deleted": 1, "threads_changed": 1, "answers_removed": 1,
                                  "posts_anonymized": 0, "wal_truncated": True, "cache_vectors_deleted": 5,
                                  "feedback_requests": 0, "feedback_searches": 1,
                                  "vacuumed": False, "backups": "rewrite"}  # 3 texts by the dense encoder, 2
    # comments by the answer one; the search above showed t1; the backups by CQA_ERASE_BACKUPS
    assert client.get("/threads/t1").status_code == 404  # before the job: the store's part is done
    job = wait_job(client, r.json()["job"]["id"])
    assert job["state"] == "succeeded", job
    done = job["result"]
    assert client.get("/ready").json()["generation"] == done["generation"]
    assert sorted(done["generations_deleted"]) == older and done["generations_still_served"] == []
    assert [p.name for p in svc.settings.index_root.glob("gen-*")] == [done["generation"]]
    # the backup made before was written again without them, under its name, and a store restored from it keeps
    # them erased
    (rewritten,) = done["backups_rewritten"]
    assert rewritten["threads_deleted"] == 1 and rewritten["answers_removed"] == 1 and not done["backups_being_written"]
    assert [b["name"] for b in client.get("/backups", headers=ADMIN).json()["backups"]] == [rewritten["backup"]]
    with ThreadStore(svc.settings.backups_folder / rewritten["backup"]) as restored:
        assert restored.get("t1") is None and set(restored.erased(["gone", "other"])) == {"gone"}
    # nothing under the data folder holds the text, its vectors are gone from the cache
    assert SECRET.encode() not in _bytes_under(folder)
    hits = client.post("/search", json={"question": {"body": "Zanzibar-7731 flat phone"}, "k": 3, "rerank": False,
                                        "target": "questions"}).json()["results"]
    assert "t1" not in {h["thread_id"] for h in hits}
    assert "gone" not in json.dumps(job)  # the job's record names no author
    assert client.get("/authors/gone/posts", headers=ADMIN).json() == {"author_id": "gone", "questions": 0,
                                                                        "comments": 0, "posts": []}
    # the forum's sync sends their thread and comment again, and a new comment of theirs: none of it is stored
    r = client.post("/threads", json={"threads": [json.loads(t.model_dump_json()) for t in _forum()]}, headers=ADMIN)
    assert r.status_code == 200 and (r.json()["suppressed"], r.json()["answers_suppressed"]) == (["t1"], 1), r.json()
    r = client.post("/threads/t3/answers", json={"answers": [{"id": "t3z", "text": SECRET, "author_id": "gone"},
                                                           {"id": "t3y", "text": "Try the corniche", "author_id": "x"}]},
                    headers=ADMIN)
    assert r.status_code == 200 and (r.json()["inserted"], r.json()["answers_suppressed"]) == (1, 1), r.json()
    r = client.patch("/threads/t3", json={"author_id": "gone"}, headers=ADMIN)
    assert r.status_code == 409 and "erased" in r.json()["error"]["message"]
    r = client.get("/erasures/gone", headers=ADMIN)
    assert r.json() == {"author_id": "gone", "erased": True, "content": "remove", "meta_keys": ["username"]}, r.json()
    assert client.get("/erasures/other", headers=ADMIN).json()["erased"] is False
    assert client.get("/erasures/gone").status_code == 401
    assert SECRET.encode() not in _bytes_under(folder)  # nothing encoded ahead either
    assert client.get("/authors/gone/posts", headers=ADMIN).json()["posts"] == []


def test_a_delete_with_purge_leaves_nothing_of_the_post_on_disk(client, monkeypatch):
    """A moderator's takedown (`DELETE ...?purge=true`): the comment, then the thread, gone from the store and from
    every file under the data folder, through the erasure's job; 409 with nothing removed while an erasure runs."""
    svc = client.app.state.service
    folder = svc.settings.data_dir
    assert client.post("/threads", json={"threads": [json.loads(t.model_dump_json()) for t in _forum()]},
                       headers=ADMIN).status_code == 200
    assert wait_job(client, client.post("/reindex", headers=ADMIN).json()["job"]["id"])["state"] == "succeeded"
    for kind in ("store", "export"):  # the backups, which the takedown's job writes again without it
        assert wait_job(client, client.post("/backups", json={"kind": kind}, headers=ADMIN).json()["job"]["id"])[
            "state"] == "succeeded"
    draft = f"Old draft {SECRET}".encode()  # t2b's text
    assert draft in _bytes_under(svc.settings.backups_folder)
    time.sleep(0.01)
    with monkeypatch.context() as m:  # an erasure job runs
        m.setattr(svc.jobs, "running", lambda kind: Job(id="j1", kind=kind))
        r = client.delete("/threads/t2/answers/t2b?purge=true", headers=ADMIN)
        assert r.status_code == 409 and "nothing was removed" in r.json()["error"]["message"]
    assert [a["id"] for a in client.get("/threads/t2").json()["answers"]] == ["t2a", "t2b", "t2c"]
    r = client.delete("/threads/t2/answers/t2b?purge=true", headers=ADMIN)
    assert r.status_code == 200 and r.headers["etag"], r.json()
    done = wait_job(client, r.json()["job"]["id"])
    assert done["state"] == "succeeded" and done["result"]["generations_deleted"], done
    assert [(b["threads_changed"], b["answers_removed"]) for b in done["result"]["backups_rewritten"]] == [(1, 1)] * 2
    assert draft not in _bytes_under(folder) and SECRET.encode() in _bytes_under(folder)  # t1 still says it
    r = client.delete("/threads/t1?purge=true", headers=ADMIN)
    done = wait_job(client, r.json()["job"]["id"])
    assert r.status_code == 200 and done["state"] == "succeeded"
    assert [b["threads_deleted"] for b in done["result"]["backups_rewritten"]] == [1, 1]
    assert SECRET.encode() not in _bytes_under(folder)
    assert [p.name for p in svc.settings.index_root.glob("gen-*")] == [client.get("/ready").json()["generation"]]
    assert client.delete("/threads/t1?purge=true", headers=ADMIN).status_code == 404
    assert client.delete("/threads/t2/answers/t2b?purge=true", headers=ADMIN).status_code == 404
    # kept on record: the forum sends both again (its sync) and they stay out, in the store and in its backup
    listed = client.get("/takedowns", headers=ADMIN).json()
    assert [(t["thread_id"], t["answer_id"]) for t in listed["takedowns"]] == [("t1", None), ("t2", "t2b")]
    page = client.get("/takedowns?limit=1", headers=ADMIN).json()
    assert [t["thread_id"] for t in client.get("/takedowns", params={"after": page["next"]}, headers=ADMIN).json()[
        "takedowns"]] == ["t2"] and page["takedowns"][0]["thread_id"] == "t1"
    for bad in ("t1", "null", "5", '"ab"', "[" * 1000 + "]" * 1000, '["t1", 2]'):  # not a page's `next`
        assert client.get("/takedowns", params={"after": bad}, headers=ADMIN).status_code == 422, bad
    r = client.post("/threads", json={"threads": [json.loads(t.model_dump_json()) for t in _forum()]}, headers=ADMIN)
    assert r.status_code == 200 and (r.json()["taken_down"], r.json()["answers_taken_down"]) == (["t1"], 1), r.json()
    assert "taken down" in client.get("/threads/t1").json()["error"]["message"]  # a 404 that says why
    assert "taken down" not in client.get("/threads/never-stored").json()["error"]["message"]
    assert SECRET.encode() not in _bytes_under(folder)
    conn = read_only(next(svc.settings.backups_folder.glob("threads-*.sqlite3")))
    try:  # a service restored from the rewritten backup keeps both down
        assert [(t.thread_id, t.answer_id) for t in takedowns(conn.cursor())] == [("t1", None), ("t2", "t2b")]
    finally:
        conn.close()
    exported = _export_text(next(svc.settings.backups_folder.glob("threads-*.jsonl.gz"))).splitlines()[0]
    assert [(t["thread_id"], t["answer_id"]) for t in json.loads(exported)["ledger"]["takedowns"]] == [
        ("t1", None), ("t2", "t2b")]  # and so does one restored from the rewritten export
    # lifted: the forum's next send stores it again
    assert client.delete("/takedowns/t2?answer_id=t2b", headers=ADMIN).json()["lifted"] is True
    assert client.delete("/takedowns/t2?answer_id=t2b", headers=ADMIN).status_code == 404
    r = client.post("/threads/t2/answers", json={"answers": [json.loads(_forum()[1].answers[1].model_dump_json())]},
                    headers=ADMIN)
    assert r.status_code == 200 and (r.json()["inserted"], r.json()["answers_taken_down"]) == (1, 0), r.json()
    assert client.get("/takedowns", headers=ADMIN).json()["takedowns"][0]["thread_id"] == "t1"


def test_cqa_erase_anonymizes_and_says_what_it_did(tmp_path, cli_env):
    env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / "var")}
    with _filled(tmp_path / "var" / "threads.sqlite3"):
        pass
    run = subprocess.run(CQA + ["erase", "gone", "--content", "anonymize", "-q"], env=env, capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["authors"] == 1 and out["posts_anonymized"] == 2 and out["threads_changed"] == 2
    assert "generation" not in out  # never indexed: no generation to rebuild
    assert out["backups"] == "rewrite" and out["backups_rewritten"] == []  # CQA_ERASE_BACKUPS; none made
    with ThreadStore(tmp_path / "var" / "threads.sqlite3") as store:
        assert store.get("t1").author_id is None
    # an import of the forum's threads as they were (an old export) stores their posts without their id
    old = tmp_path / "old.jsonl"
    old.write_text("".join(t.model_dump_json() + "\n" for t in _forum()))
    run = subprocess.run(CQA + ["ingest", str(old), "-q"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1])["posts_anonymized"] == 2
    with ThreadStore(tmp_path / "var" / "threads.sqlite3") as store:
        assert store.posts_by(["gone"]) == [] and store.get("t2").answers[1].meta == {}
    bad = subprocess.run(CQA + ["erase", "gone"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--content" in bad.stderr


def test_an_erasure_reaches_both_workers_and_leaves_no_older_generation(tmp_path, cli_env):
    """`cqa serve --workers 2` with the automatic refresh: a user's thread becomes searchable on both workers; POST
    /erasures (remove) then leaves the store, the job's generation (which both workers serve) and no older one, and
    nothing under the data folder holds the text; `cqa erase` from the command line beside the running service
    anonymizes another user and deletes the generations the workers left."""
    from indexing.generations import list_generations

    from .test_api import free_port, http, start_server, stop_server, wait_ready
    from .test_refresh import _search_ids, _until
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port, {"CQA_REFRESH_S": "5", "CQA_GENERATION_POLL_S": "0.5", "CQA_WORKERS": "2"})
    folder, root = tmp_path / "var", tmp_path / "var" / "indexes"
    question = "Zanzibar-7731 flat phone near the Pearl"
    try:
        wait_ready(p, base)
        threads = [json.loads(t.model_dump_json()) for t in _forum()]
        assert http("POST", base + "/threads", {"threads": threads}, ADMIN)[0] == 200

        def on_both(check) -> bool:
            return all(check() for _ in range(8))  # requests land on either worker
        _until(lambda: on_both(lambda: "t1" in _search_ids(base, question)), "the thread searchable on both workers")
        status, out = http("POST", base + "/erasures", {"author_ids": ["gone"], "content": "remove"}, ADMIN)
        assert status == 202 and out["erased"]["threads_deleted"] == 1, out
        job = out["job"]
        _until(lambda: http("GET", f"{base}/jobs/{job['id']}")[1]["state"] in ("succeeded", "failed"), "the job")
        job = http("GET", f"{base}/jobs/{job['id']}")[1]
        if job["state"] == "failed":  # the other worker answered: its process keeps no record of this job
            pytest.fail(f"erasure job: {job}")
        done = job["result"]
        assert done["generations_still_served"] == [] and list_generations(root) == [done["generation"]]
        assert on_both(lambda: http("GET", base + "/ready")[1]["generation"] == done["generation"])
        assert on_both(lambda: "t1" not in _search_ids(base, question))
        assert SECRET.encode() not in _bytes_under(folder)
        env = {**cli_env, "CQA_DATA_DIR": str(folder), "CQA_GENERATION_POLL_S": "0.5"}
        run = subprocess.run(CQA + ["erase", "other", "--content", "anonymize", "-q", "--wait", "60"], env=env,
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout.strip().splitlines()[-1])
        assert out["posts_anonymized"] == 3 and out["generations_still_served"] == []
        assert list_generations(root) == [out["generation"]]
        assert on_both(lambda: http("GET", base + "/threads/t2")[1]["author_id"] is None)
    finally:
        stop_server(p)


def test_an_erasure_cut_off_by_kill_9_is_kept_and_sending_it_again_finishes_it(tmp_path):
    """The store's part is durable at the 202: a kill -9 right after it loses none of it. The restarted service
    reports the job interrupted (or done, if it ended first), and the erasure sent again changes nothing in the store
    and leaves one generation, built after it, with nothing under the data folder holding the text."""
    import signal

    from indexing.generations import list_generations

    from .test_api import free_port, http, start_server, wait_ready
    from .test_refresh import _search_ids, _until
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"CQA_REFRESH_S": "5", "CQA_GENERATION_POLL_S": "0.5"}
    p = start_server(tmp_path, port, env)
    folder = tmp_path / "var"
    question = "Zanzibar-7731 flat phone near the Pearl"
    try:
        wait_ready(p, base)
        threads = [json.loads(t.model_dump_json()) for t in _forum()]
        assert http("POST", base + "/threads", {"threads": threads}, ADMIN)[0] == 200
        _until(lambda: "t1" in _search_ids(base, question), "the thread searchable")
        status, out = http("POST", base + "/erasures", {"author_ids": ["gone"], "content": "remove"}, ADMIN)
        assert status == 202 and out["erased"]["threads_deleted"] == 1, out
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=20)
        with ThreadStore(folder / "threads.sqlite3") as store:
            assert store.get("t1") is None and store.posts_by(["gone"]) == []
        assert SECRET.encode() not in _bytes_under(folder, skip="indexes")  # the store and the caches
        p = start_server(tmp_path, port, env)
        wait_ready(p, base)
        first = http("GET", f"{base}/jobs/{out['job']['id']}")[1]
        assert first["state"] in ("failed", "succeeded"), first
        assert first["state"] == "succeeded" or "interrupted" in first["error"]
        status, again = http("POST", base + "/erasures", {"author_ids": ["gone"], "content": "remove"}, ADMIN)
        assert status == 202 and again["erased"]["threads_deleted"] == again["erased"]["answers_removed"] == 0
        ended = ("succeeded", "failed")
        _until(lambda: http("GET", f"{base}/jobs/{again['job']['id']}")[1]["state"] in ended, "the job")
        done = http("GET", f"{base}/jobs/{again['job']['id']}")[1]
        assert done["state"] == "succeeded", done
        assert list_generations(folder / "indexes") == [done["result"]["generation"]]
        assert SECRET.encode() not in _bytes_under(folder)
        assert "t1" not in _search_ids(base, question)
    finally:
        p.terminate()
        p.wait(timeout=20)


def test_cqa_takedown_removes_a_comment_everywhere_and_keeps_it_out_until_lifted(tmp_path, cli_env):
    """`cqa takedown`: DELETE ...?purge=true from the command line, through the same code (``erasure.take_down``)."""
    data = tmp_path / "var"
    env = {**cli_env, "CQA_DATA_DIR": str(data), "CQA_DENSE_ENCODER": "base", "CQA_ANSWER_ENCODER": "none"}

    def cqa(*args: str) -> tuple[int, list[str], str]:
        run = subprocess.run([*CQA, *args], env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
        return run.returncode, run.stdout.strip().splitlines(), run.stderr

    with _filled(data / "threads.sqlite3") as store:
        export(store.path, data / "backups" / dated_name("export"))  # began before: rewritten
        export(store.path, tmp_path / "old.jsonl")  # off-site: the forum's copy, sent again later
    from ranking.evaluation.feedback import FeedbackLog, Served
    log = FeedbackLog(data / "feedback.sqlite3")  # a search that quoted the comment (CQA_FEEDBACK_QUERIES)
    log.record(Served("/search", "answers", "r", "g", 0, ("t2a",), (0,), request=json.dumps(
        {"text": f"Edited: {SECRET} is it true", "subject": "", "body": f"Edited: {SECRET} is it true"})))
    log.close()
    assert cqa("reindex", "-q")[0] == 0
    time.sleep(0.01)
    rc, out, err = cqa("takedown", "t2", "--answer", "t2b", "-q")
    assert rc == 0, err
    said = json.loads(out[-1])
    assert (said["threads_changed"], said["answers_removed"], said["generation"]) == (1, 1, said["generation"]), said
    assert said["feedback_requests"] == 1  # the search keeps its ids, not the comment's words
    assert said["generations_deleted"] and [b.get("ledger") for b in said["backups_rewritten"]] == [
        {"erasures": 0, "takedowns": 1}], said
    on_disk = _bytes_under(data)  # the store, the generation, the cache, the backup
    assert f"Edited: {SECRET}".encode() not in on_disk and b"Old draft" not in on_disk
    assert SECRET.encode() in on_disk  # the control: t1's body, which was not taken down
    rc, out, _ = cqa("ingest", str(tmp_path / "old.jsonl"), "-q")  # the forum sends it again
    assert rc == 0 and json.loads(out[-1])["answers_taken_down"] == 1
    rc, out, _ = cqa("takedowns")
    assert [json.loads(line)["answer_id"] for line in out[:-1]] == ["t2b"] and json.loads(out[-1]) == {"takedowns": 1}
    rc, _, err = cqa("takedown", "t9", "-q")  # not stored: refused, unless recorded on purpose
    assert rc == 2 and "--record-absent" in err
    assert json.loads(cqa("takedown", "t9", "--record-absent", "-q")[1][-1])["recorded"] is True
    assert [json.loads(line)["thread_id"] for line in cqa("takedowns", "--thread", "t9")[1][:-1]] == ["t9"]
    assert cqa("takedown", "t2", "--answer", "t2b", "--lift")[0] == 0
    rc, _, err = cqa("takedown", "t2", "--answer", "t2b", "--lift")
    assert rc == 2 and "no takedown" in err
    rc, out, _ = cqa("ingest", str(tmp_path / "old.jsonl"), "-q")  # lifted: stored again
    assert rc == 0 and "answers_taken_down" not in json.loads(out[-1])
    with ThreadStore(data / "threads.sqlite3") as store:
        assert "t2b" in [a.id for a in store.get("t2").answers]
