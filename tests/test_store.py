import signal
import subprocess
import sys

import numpy as np
import pytest

from indexing.models import Answer, Thread
from indexing.store import NotInStore, PreconditionFailed, Snapshot, StoreError, ThreadStore


def make(tid: str, n: int = 2, subject: str = "How to renew a visa?") -> Thread:
    return Thread(id=tid, subject=subject, body="details", category="Visas",
                  answers=[Answer(id=f"{tid}_c{i}", text=f"answer {i}", label="Good") for i in range(n)])


def test_upsert_is_idempotent_and_updates_by_id(tmp_path):
    with ThreadStore(tmp_path / "s.db") as store:
        r = store.upsert([make("t1"), make("t2", 3)])
        assert (r.inserted, r.updated, r.unchanged) == (2, 0, 0)
        assert store.counts() == {"threads": 2, "answers": 5}
        r = store.upsert([make("t1"), make("t2", 3)])
        assert (r.inserted, r.updated, r.unchanged) == (0, 0, 2)
        r = store.upsert([make("t2", 1, subject="changed")])
        assert (r.inserted, r.updated, r.unchanged) == (0, 1, 0)
        assert store.counts() == {"threads": 2, "answers": 3}
        got = store.get("t2")
        assert got.subject == "changed" and [a.id for a in got.answers] == ["t2_c0"]
        assert store.get("t1").answers[1].label == "Good"


def test_survives_reopen_and_delete(tmp_path):
    with ThreadStore(tmp_path / "s.db") as store:
        store.upsert([make("a"), make("b")])
    with ThreadStore(tmp_path / "s.db") as store:
        assert [t.id for t in store.iter_threads(batch=1)] == ["a", "b"]
        assert store.delete("a") == make("a")  # the thread as it was
        assert store.delete("a") is None
        assert store.counts() == {"threads": 1, "answers": 2}


def test_answer_id_clash_is_refused_and_writes_nothing(tmp_path):
    with ThreadStore(tmp_path / "s.db") as store:
        store.upsert([make("a")])
        clash = Thread(id="b", subject="q", answers=[Answer(id="a_c0", text="x")])
        with pytest.raises(StoreError, match="a_c0.*already belongs"):
            store.upsert([make("c"), clash])
        assert store.counts() == {"threads": 1, "answers": 2}  # the batch is all or nothing


def test_whole_threads_sent_with_revisions_out_of_order_keep_the_latest(tmp_path):
    """A forum that syncs whole snapshots sends each with its revision: a snapshot whose revision is not above the
    stored one's is not written (listed as superseded), so two snapshots that arrive out of order keep the later
    one's comments. The same content again is unchanged (a higher revision kept, with no new write number and no
    change counted); a snapshot without a revision replaces the thread as always; the comment endpoints keep it."""
    early = make("t", 1).model_copy(update={"revision": 5})
    late = make("t", 2).model_copy(update={"revision": 6})
    with ThreadStore(tmp_path / "s.db") as store:
        assert store.upsert([late]).inserted == 1
        changes, fingerprint = store.change_count(), store.fingerprint()
        assert store.superseded([early, late, make("t", 3), make("u").model_copy(update={"revision": 1})]) == {"t"}
        r = store.upsert([early, make("u").model_copy(update={"revision": 1})])  # the earlier one, delivered last
        assert (r.inserted, r.updated, r.unchanged, r.superseded) == (1, 0, 0, ["t"])
        assert store.get("t") == late
        same_rev = late.model_copy(update={"subject": "another edit, same revision"})
        assert store.upsert([same_rev]).superseded == ["t"]  # a revision must grow with each change
        assert store.upsert([late]).unchanged == 1
        bumped = late.model_copy(update={"revision": 9})
        assert store.upsert([bumped]).unchanged == 1 and store.get("t").revision == 9
        assert store.change_count() == changes + 1 and store.fingerprint() != fingerprint  # u only, not the bump
        fingerprint = store.fingerprint()
        assert store.upsert([late]).superseded == [] and store.fingerprint() == fingerprint  # same content: unchanged
        assert store.get("t").revision == 9
        assert store.upsert_answers("t", [Answer(id="t_c9", text="alone")]).inserted == 1
        assert store.update_question("t", {"body": "edited"}) and store.get("t").revision == 9
        assert store.delete_answer("t", "t_c9").left == 2 and store.get("t").revision == 9
        newer = make("t", 3).model_copy(update={"revision": 10})
        assert store.upsert([newer]).updated == 1 and store.get("t") == newer
        assert store.upsert([make("t", 1)]).updated == 1 and store.get("t").revision is None  # no revision: replaced
        assert store.upsert([late]).updated == 1  # and the next one with a revision is written
    with ThreadStore(tmp_path / "s.db") as store:  # kept on disk
        assert store.get("t") == late and [t.revision for t in store.iter_threads()] == [1, 6]


def test_a_store_written_before_revisions_opens_reads_and_writes_them(tmp_path):
    """A store file made before threads had revisions (no such column) opens as it is in a read-only snapshot, and
    a writing handle adds the column: its threads read back with no revision and their content hashes unchanged, so
    the same threads sent again are unchanged and no index would rebuild them."""
    import sqlite3
    path = tmp_path / "old.db"
    with ThreadStore(path) as store:
        store.upsert([make("a"), make("b", 3)])
        fingerprint = store.fingerprint()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE threads DROP COLUMN revision")  # as round 41's code made it
    conn.commit()
    conn.close()
    with Snapshot(path) as snap:
        assert [t.model_dump() for t in snap.threads()] == [make("a").model_dump(), make("b", 3).model_dump()]
    with ThreadStore(path) as store:
        assert store.fingerprint() == fingerprint and store.get("b") == make("b", 3)
        assert store.upsert([make("a"), make("b", 3)]).unchanged == 2
        assert store.upsert([make("a").model_copy(update={"revision": 3})]).unchanged == 1
        assert store.get("a").revision == 3


def test_single_thread_writes_made_on_the_etag_read_refuse_a_thread_changed_since(tmp_path):
    """``if_match``: each single-thread write (a comment added or removed, the question edited, the thread deleted)
    happens only while the thread's ETag (its content hash) is one of those given, checked inside its transaction;
    otherwise ``PreconditionFailed`` carries the ETag now and nothing is written. Each write returns its new ETag,
    the one the thread then reads back with."""
    with ThreadStore(tmp_path / "s.db") as store:
        store.upsert([make("t", 2)])
        read = store.get("t").content_hash()
        r = store.upsert_answers("t", [Answer(id="t_c2", text="first")], if_match=[read])
        assert r.inserted == 1 and r.etag == store.get("t").content_hash() != read
        before, changes = store.get("t"), store.change_count()
        for write in (lambda: store.upsert_answers("t", [Answer(id="t_c3", text="late")], if_match=[read]),
                      lambda: store.update_question("t", {"subject": "stale edit"}, if_match=[read, "other"]),
                      lambda: store.delete_answer("t", "t_c0", if_match=[read]),
                      lambda: store.delete("t", if_match=[read])):
            with pytest.raises(PreconditionFailed) as e:
                write()
            assert e.value.etag == r.etag and "has changed since it was read" in str(e.value)
        assert store.get("t") == before and store.change_count() == changes  # nothing written
        edited = store.update_question("t", {"subject": "edited"}, if_match=["x", r.etag])
        assert edited.changed and edited.etag == store.get("t").content_hash()
        same = store.update_question("t", {"subject": "edited"}, if_match=[edited.etag])
        assert not same and same.etag == edited.etag
        removed = store.delete_answer("t", "t_c2", if_match=["*"])
        assert removed.left == 2 and removed.etag == store.get("t").content_hash() and removed.text
        with pytest.raises(NotInStore):
            store.upsert_answers("gone", [Answer(id="g", text="x")], if_match=["*"])
        assert store.delete("gone", if_match=["*"]) is None
        assert store.delete("t", if_match=[removed.etag]).id == "t"


def test_the_listing_walks_every_thread_in_id_order_with_its_revision_and_etag(tmp_path):
    """``listing`` pages through the store by id (what a sync job compares with its own threads), each thread with
    its revision, its ETag (the content hash stored with it, which ``get_tagged`` and every condition use, also for
    a row whose stored hash an older version of the model computed) and its number of comments."""
    with ThreadStore(tmp_path / "s.db") as store:
        ids = ["b", "a", "c10", "c9", "é"]
        store.upsert([make(t, i).model_copy(update={"revision": i or None}) for i, t in enumerate(ids)])
        pages, after = [], None
        while True:
            page = store.listing(after, 2)
            pages.append([x.id for x in page])
            if len(page) < 2:
                break
            after = page[-1].id
        assert pages == [["a", "b"], ["c10", "c9"], ["é"]]
        got = {x.id: x for x in store.listing(limit=10)}
        assert (got["a"].revision, got["a"].answers, got["b"].revision, got["é"].answers) == (1, 1, None, 4)
        assert all(got[t].etag == store.get(t).content_hash() == store.get_tagged(t)[1] for t in ids)
        assert store.listing("é") == [] and store.get_tagged("nope") is None
        store._conn.execute("UPDATE threads SET content_hash='older' WHERE id='a'")  # a hash another model made
        assert store.get_tagged("a")[1] == store.listing(limit=1)[0].etag == "older"
        with pytest.raises(PreconditionFailed):
            store.upsert_answers("a", [Answer(id="a_new", text="x")], if_match=[store.get("a").content_hash()])
        same = store.update_question("a", {"category": "Visas"}, if_match=["older"])  # no change: the stored ETag
        assert not same and same.etag == "older"
        edited = store.update_question("a", {"category": "Other"}, if_match=["older"])
        assert edited.etag == store.get_tagged("a")[1] == store.get("a").content_hash()


def test_comments_added_replaced_and_deleted_one_by_one_store_what_the_whole_thread_would(tmp_path):
    """``upsert_answers`` adds a comment after the thread's others or replaces one in place, ``delete_answer`` removes
    one, ``update_question`` edits the thread's own fields and keeps its comments; each stores exactly what an upsert of the whole thread would (its content hash too, so sending that thread
    afterwards changes nothing) and counts a change, and a refused write writes nothing."""
    with ThreadStore(tmp_path / "s.db") as store:
        store.upsert([make("t", 2), make("u", 1)])
        changes = store.change_count()
        new = Answer(id="t_c2", text="a third answer", author_id="u9", created_at="2026-11-28 13:00:00")
        edited = Answer(id="t_c0", text="answer 0, edited", label="Good")
        r = store.upsert_answers("t", [new, edited, make("t", 2).answers[1]])
        assert (r.inserted, r.updated, r.unchanged, r.answers) == (1, 1, 1, 3)
        whole = make("t", 2).model_copy(update={"answers": [edited, make("t", 2).answers[1], new]})
        assert store.get("t") == whole and store.change_count() == changes + 1
        assert store.upsert([whole]).unchanged == 1  # the same content hash as the whole thread's
        r = store.upsert_answers("t", [new])
        assert (r.inserted, r.updated, r.unchanged) == (0, 0, 1) and store.change_count() == changes + 1
        assert store.delete_answer("t", "t_c1").left == 2
        assert [a.id for a in store.get("t").answers] == ["t_c0", "t_c2"] and store.change_count() == changes + 2
        fingerprint = store.fingerprint()
        with pytest.raises(NotInStore, match="no answer with id 't_c1'"):
            store.delete_answer("t", "t_c1")
        with pytest.raises(NotInStore, match="no thread with id 'gone'"):
            store.upsert_answers("gone", [new])
        with pytest.raises(NotInStore, match="no thread with id 'gone'"):
            store.delete_answer("gone", "t_c0")
        with pytest.raises(StoreError, match="u_c0.*already belongs to thread 'u'"):
            store.upsert_answers("t", [Answer(id="t_c9", text="fine"), Answer(id="u_c0", text="taken")])
        assert store.fingerprint() == fingerprint and store.change_count() == changes + 2  # nothing written
        assert store.counts() == {"threads": 2, "answers": 3}
        assert store.update_question("t", {"body": "new details", "category": None})
        assert store.get("t") == whole.model_copy(update={"body": "new details", "category": None,
                                                          "answers": store.get("t").answers})
        assert [a.id for a in store.get("t").answers] == ["t_c0", "t_c2"] and store.change_count() == changes + 3
        assert not store.update_question("t", {"body": "new details"}) and store.change_count() == changes + 3
        with pytest.raises(ValueError, match="neither subject nor body"):
            store.update_question("t", {"subject": "", "body": ""})
        with pytest.raises(NotInStore):
            store.update_question("gone", {"subject": "x"})
        with pytest.raises(ValueError, match="not a field of the question: answers, id"):
            store.update_question("t", {"id": "u", "answers": []})
        assert store.get("t").subject == "How to renew a visa?" and store.change_count() == changes + 3


def test_a_comment_delivered_late_takes_its_place_in_the_thread_by_its_time(tmp_path):
    """Comments that carry ISO 8601 times, in a thread whose comments all do, go in time order whatever order they
    arrive in (formats mixed, a zone given); without a time, or beside a comment without one, a new comment goes
    last."""
    at = [("c1", "2015-03-01 10:01:00"), ("c2", "2015-03-01T10:02:00"), ("c3", "2015-03-01 10:03:00"),
          ("c4", "2015-03-01T12:04:00+02:00")]  # c4 is 10:04 UTC
    with ThreadStore(tmp_path / "s.db") as store:
        store.upsert([Thread(id="t", subject="q", answers=[Answer(id="c3", text="3", created_at=at[2][1])])])
        for i in (1, 3, 0):  # c2, c4, c1: late, later, earliest
            store.upsert_answers("t", [Answer(id=at[i][0], text=at[i][0], created_at=at[i][1])])
        assert [a.id for a in store.get("t").answers] == ["c1", "c2", "c3", "c4"]
        store.upsert_answers("t", [Answer(id="c0", text="no time"), Answer(id="c5", text="early",
                                                                          created_at="2015-03-01 09:00:00")])
        assert [a.id for a in store.get("t").answers] == ["c1", "c2", "c3", "c4", "c0", "c5"]


def test_comments_added_to_one_thread_at_once_by_several_writers_are_all_kept(tmp_path):
    """Writers adding comments to the same thread at the same time, through one handle (a worker's requests) and
    through others (other workers, another process's connection), each read and write the thread in one transaction:
    every comment acknowledged is stored, in the thread, once."""
    from concurrent.futures import ThreadPoolExecutor
    db = tmp_path / "s.db"
    with ThreadStore(db) as shared, ThreadStore(db) as other, ThreadStore(db) as third:
        shared.upsert([make("t", 0)])
        handles = [shared, other, third]

        def add(i: int) -> int:  # and, between them, the question edited alone
            if i % 5 == 4:
                assert handles[i % 3].update_question("t", {"subject": f"edit {i}"})
            return handles[i % 3].upsert_answers("t", [Answer(id=f"t_n{i}", text=f"comment {i}")]).inserted
        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(add, range(60))) == 60
        got = shared.get("t")
        assert sorted(a.id for a in got.answers) == sorted(f"t_n{i}" for i in range(60))
        assert shared.counts()["answers"] == 60 and got.subject.startswith("edit ") and got.body == "details"


def test_thread_without_text_or_with_duplicate_answers_is_invalid():
    with pytest.raises(ValueError, match="neither subject nor body"):
        Thread(id="x", subject=" ", body="")
    with pytest.raises(ValueError, match="twice"):
        Thread(id="x", subject="q", answers=[Answer(id="a", text="1"), Answer(id="a", text="2")])


def test_accepted_threads_survive_kill_9(tmp_path):
    """A writer is killed with SIGKILL right after upsert returns: the thread is on disk."""
    db = tmp_path / "s.db"
    code = f"""
import sys, time
from indexing.models import Thread
from indexing.store import ThreadStore
s = ThreadStore({str(db)!r})
i = 0
while True:
    s.upsert([Thread(id=f"t{{i}}", subject="q", body=str(i))])
    print(i, flush=True)
    i += 1
"""
    with ThreadStore(db) as s:  # what makes an acknowledged write survive a power cut, not only a kill
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    acked = -1
    for line in p.stdout:
        acked = int(line)
        if acked >= 30:
            break
    p.send_signal(signal.SIGKILL)
    p.wait()
    with ThreadStore(db) as store:
        ids = {t.id for t in store.iter_threads()}
        assert store.counts()["threads"] == len(ids)
    assert acked >= 30 and all(f"t{i}" in ids for i in range(acked + 1))


def test_writes_and_reads_find_the_insertion_order_by_its_index_also_in_a_store_made_before_it(tmp_path):
    """Every upsert asks for the next insertion number (MAX(seq)) and every batch of a reindex's read goes on from the
    last one (seq > ?): without an index on seq each is a scan of the whole table, so ingesting got slower with every
    thread already stored (bench/store_scale.py: 128 against 7,224 threads/s at 35k threads). A store made before the
    index gains it when opened."""
    import sqlite3
    path = tmp_path / "threads.sqlite3"
    with ThreadStore(path) as s:
        s.upsert([Thread(id=f"t{i}", subject=f"q{i}") for i in range(5)])
    with sqlite3.connect(path) as c:
        c.execute("DROP INDEX threads_seq")  # as a store of an earlier release
    with ThreadStore(path) as s:
        plans = {sql: " ".join(row[-1] for row in s._conn.execute("EXPLAIN QUERY PLAN " + sql, args))
                 for sql, args in (("SELECT COALESCE(MAX(seq), 0) + 1 FROM threads", ()),
                                   ("SELECT * FROM threads WHERE seq > ? ORDER BY seq LIMIT ?", (0, 1000)))}
        assert all("threads_seq" in plan for plan in plans.values()), plans
        s.upsert([Thread(id="t9", subject="later")])
        assert [t.id for t in s.iter_threads(batch=2)] == ["t0", "t1", "t2", "t3", "t4", "t9"]


def test_a_reindex_reads_the_documents_the_thread_objects_give_in_one_transaction(tmp_path):
    """``ThreadStore.documents`` (one query, what a reindex reads) gives the documents of
    ``Documents.from_threads(iter_threads())``: questions and answers in stored order, an answer without a date taking
    its thread's, a thread without answers, one moved last by an update; with the fingerprint and count. While another
    connection keeps updating threads (each update moves a thread last), every read holds each thread once, as its
    fingerprint says: batches read one by one could meet a moved thread twice."""
    import threading
    import time

    from indexing.documents import Documents
    path = tmp_path / "threads.sqlite3"
    with ThreadStore(path) as s:
        s.upsert([make(f"t{i}", n=i % 3) for i in range(30)])
        s.upsert([Thread(id="t4", subject="", body="body only, edited", created_at="2015-02-01T10:00:00",
                         answers=[Answer(id="t4_x", text="dated by its thread"),
                                  Answer(id="t4_y", text="its own date", created_at="2015-02-02T10:00:00")],
                         meta={"tags": ["Python", "pandas", "python", None, " "], "score": 3}),
                  Thread(id="t5", subject="one tag as a string", meta={"tags": "C#"}),
                  Thread(id="t6", subject="tags not a list", meta={"tags": {"python": 1}})])
        read = s.documents()
        docs, fingerprint, n = read.documents, read.fingerprint, len(read.threads)
        want = Documents.from_threads(s.iter_threads())
        assert docs.__dict__ == want.__dict__ and fingerprint == s.fingerprint() and n == 30
        assert docs.ids[-5:] == ["q:t4", "a:t4_x", "a:t4_y", "q:t5", "q:t6"]
        assert docs.created_at[-4] == "2015-02-01T10:00:00"
        assert docs.tags[-5:] == ["pandas\npython"] * 3 + ["c#", None] and docs.tags[0] is None
    stop = threading.Event()

    def edit():
        with ThreadStore(path) as w:
            k = 0
            while not stop.is_set():
                w.upsert([make(f"t{k % 30}", n=2, subject=f"edited {k}")])
                k += 1
    writer = threading.Thread(target=edit)
    writer.start()
    try:
        with ThreadStore(path) as r:
            reads, deadline = [], time.time() + 10
            while (len(reads) < 20 or len({f for _, f, _ in reads}) < 3) and time.time() < deadline:
                read = r.documents()
                reads.append((read.documents, read.fingerprint, len(read.threads)))
    finally:
        stop.set()
        writer.join()
    for docs, fingerprint, n in reads:
        questions = [i for i in docs.ids if i.startswith("q:")]
        assert len(questions) == len(set(questions)) == n == 30 and len(docs.ids) == len(set(docs.ids))
    assert len({f for _, f, _ in reads}) > 1  # the writer did move the store meanwhile


def test_documents_read_only_what_a_known_record_lacks(tmp_path):
    """With the record of the threads a generation was built from (``ThreadRows``), ``documents`` reads only the
    threads written since: new ones and edited ones (which move last), a thread written again as it was after its
    deletion (last now, so its place changed), and a thread that took the write number of a deleted one (the same
    number, other content). The others it says it did not read; their documents are the known generation's."""
    from indexing.documents import Documents
    with ThreadStore(tmp_path / "s.db") as s:
        s.upsert([make(f"t{i}", n=i % 3) for i in range(6)])
        before = s.documents()
        assert before.read.all() and len(before.threads) == 6 and before.threads.hashes.dtype == np.dtype("S32")
        assert s.documents(before.threads).read.sum() == 0 and len(s.documents(before.threads).documents) == 0
        s.delete("t5")  # the last written: its write number is free again
        s.upsert([make("t9", n=1)])  # takes it
        s.delete("t1")
        s.upsert([make("t1", n=1)])  # as it was: written last now
        s.upsert([make("t3", n=4, subject="edited")])
        s.delete("t0")
        now = s.documents(before.threads)
        assert now.threads.ids == ["t2", "t4", "t9", "t1", "t3"]
        assert dict(zip(now.threads.ids, now.read.tolist())) == {"t2": False, "t4": False, "t9": True, "t1": True,
                                                                 "t3": True}
        assert now.threads.seqs[2] == before.threads.seqs[5]  # t9 has t5's number, and is read all the same
        full = s.documents()
        assert now.fingerprint == full.fingerprint == s.fingerprint()
        assert now.documents.__dict__ == Documents.from_threads(
            [s.get("t9"), s.get("t1"), s.get("t3")]).__dict__
        assert full.documents.__dict__ == Documents.from_threads(s.iter_threads()).__dict__


def test_thread_rows_round_trip_and_refuse_another_count(tmp_path):
    from indexing.store import ThreadRows
    with ThreadStore(tmp_path / "s.db") as s:
        s.upsert([make("t1"), make("t2")])
        rows = s.documents().threads
    rows.save(tmp_path / "rows.npy")
    back = ThreadRows.load(tmp_path / "rows.npy", ["t1", "t2"])
    assert back.ids == rows.ids and np.array_equal(back.seqs, rows.seqs) and np.array_equal(back.hashes, rows.hashes)
    assert not back.differ(rows).any()
    with pytest.raises(ValueError, match="3 threads expected"):
        ThreadRows.load(tmp_path / "rows.npy", ["t1", "t2", "t3"])


def test_answers_after_reads_each_comments_time_in_utc_and_remove_takes_threads_whole(tmp_path):
    """What `cqa ingest --mirror` reads and writes: the comments posted after a time (one written with an offset that
    names the day before its UTC day too), and threads removed with their comments in one transaction, the ids of
    those stored; a dry run's removal leaves them."""
    from datetime import datetime
    with ThreadStore(tmp_path / "s.sqlite3") as store:
        store.upsert([Thread(id="t", subject="s", body="b", created_at="2015-03-01 08:00:00", answers=[
            Answer(id="a1", text="x", created_at="2015-03-12T23:00:00-05:00"),  # 04:00 UTC on the 13th
            Answer(id="a2", text="y", created_at="2015-03-13T00:30:00"),
            Answer(id="a3", text="z", created_at="2015-03-12T10:00:00"), Answer(id="a4", text="w")]),
            Thread(id="u", subject="s2", body="b2", answers=[Answer(id="b1", text="v", created_at="2016-01-01")])])
        after = store.answers_after(datetime(2015, 3, 13, 1, 0))
        assert {k: [a.id for a in v] for k, v in after.items()} == {"t": ["a1"], "u": ["b1"]}
        assert store.dated_ids() == {"t": "2015-03-01 08:00:00", "u": None}
        changes = store.change_count()
        assert store.remove(["u", "gone"], dry_run=True) == ["u"] and store.get("u") is not None
        assert store.change_count() == changes
        assert store.remove(["u", "gone"]) == ["u"] and store.get("u") is None
        assert store.counts() == {"threads": 1, "answers": 4} and store.change_count() == changes + 1


@pytest.mark.parametrize("opener", ["store", "embedding cache", "score store"])
def test_a_new_file_opens_while_another_process_holds_a_write_on_it(tmp_path, opener):
    """The workers of `cqa serve --workers N` open a new data folder's SQLite files at the same moment. The change to
    WAL is refused at once ("database is locked", no busy wait) while another connection holds a write; before, one
    worker then failed to start and took the service down (the store, the embedding cache) or ran without the shared
    score store. Now each waits for the other, as a write does."""
    import sqlite3
    import threading
    import time

    from indexing.embcache import EmbeddingCache
    from ranking.neural.memo import ScoreStore
    path = tmp_path / "new.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's first write on the new file, under way
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    t0 = time.perf_counter()
    if opener == "store":
        with ThreadStore(path) as s:
            s.upsert([make("t1")])
            assert s.get("t1") is not None
    elif opener == "embedding cache":
        cache = EmbeddingCache(path, "m")
        cache.put_many([b"k"], np.ones((1, 384), dtype=np.float32))
        assert list(cache.get_many([b"k"])) == [b"k"]
        cache.close()
    else:
        store = ScoreStore(path, 10)
        assert store.error == "" and store._db is not None, store.error  # on, shared with the other workers
    assert time.perf_counter() - t0 >= 0.25  # it waited for the other write, rather than passing it by
    other.close()


def test_processes_opening_a_new_store_at_once_all_open_it(tmp_path):
    """Four processes open one new store at the same moment, ten times over: every one opens it (before, about one
    round in six had one fail with "database is locked")."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    for n in range(10):
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(tmp_path / f"{n}.sqlite3", barrier, results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert sorted(results.get(timeout=5) for _ in procs) == ["ok"] * 4


def _open_at_once(path, barrier, results) -> None:
    barrier.wait()
    try:
        ThreadStore(path).close()
        results.put("ok")
    except Exception as e:  # noqa: BLE001 - reported to the test
        results.put(f"{type(e).__name__}: {e}")
