"""Restoring the store from a backup (`cqa restore`, `indexing.restore`): a backup made before an erasure or a
takedown, kept where the erasure does not rewrite backups (a copy off the machine), comes back without what was
erased or taken down since, because the ledgers of the stores that know better are applied to it first."""
from __future__ import annotations

import gzip
import json
import subprocess

import pytest

from app.settings import Settings
from indexing.backup import backup, export
from indexing.generations import write_lease
from indexing.ingest import ingest_paths
from indexing.ledger import Rule
from indexing.loaders import LoadError, load_jsonl
from indexing.restore import RestoreError, restore
from indexing.store import ThreadStore

from .conftest import CQA
from .test_erasure import SECRET, _bytes_under, _filled, _forum


def _erased_since(store: ThreadStore) -> None:
    """After the backups: ``gone`` erased with remove, ``third`` anonymized, t3 taken down, t2c's comment too."""
    store.erase_authors(["gone"], remove=True)
    store.erase_authors(["third"], meta_keys=["username"])
    store.delete("t3", takedown=True)
    store.delete_answer("t2", "t2c", takedown=True)


def _as_the_ledgers_say(store: ThreadStore) -> None:
    """What a store restored with the ledgers holds and keeps: the erasures applied and on record, the takedowns."""
    assert store.get("t1") is None and store.get("t3") is None
    assert [(a.id, a.author_id) for a in store.get("t2").answers] == [("t2a", None)]
    assert store.posts_by(["gone", "third"]) == []
    assert store.erased(["gone", "third"]) == {"gone": Rule(True), "third": Rule(False, frozenset({"username"}))}
    assert [(t.thread_id, t.answer_id) for t in store.takedowns()] == [("t2", "t2c"), ("t3", None)]
    r = store.upsert(_forum())  # the forum's sync sends everything again
    assert (r.suppressed, r.taken_down, r.answers_taken_down, r.inserted) == (["t1"], ["t3"], 1, 0), r


def test_a_backup_from_before_an_erasure_comes_back_without_it(tmp_path):
    settings = Settings(data_dir=tmp_path / "var")
    offsite = tmp_path / "offsite"  # not the backups folder: the erasure does not rewrite these
    offsite.mkdir()
    with _filled(settings.store_path) as store:
        backup(store.path, offsite / "old.sqlite3")
        export(store.path, offsite / "old.jsonl.gz")
        _erased_since(store)
    assert SECRET.encode() in (offsite / "old.sqlite3").read_bytes()  # the control: the copy itself holds it
    with pytest.raises(RestoreError, match="--replace"):
        restore(settings, offsite / "old.sqlite3", reindex=False)
    done = restore(settings, offsite / "old.sqlite3", replace=True, reindex=False)
    assert done["kind"] == "store" and done["ledgers_read"] == [str(settings.store_path)], done
    assert (done["authors_erased"], done["takedowns"], done["takedowns_applied"], done["erasures_carried"]) == (
        2, 2, 2, 2), done
    assert done["replaced_as"].startswith("threads.sqlite3.replaced-")
    with ThreadStore(settings.store_path) as restored:
        _as_the_ledgers_say(restored)
        carried = restored.ledger()
    with ThreadStore(settings.data_dir / done["replaced_as"]) as replaced:  # moved aside, not lost
        assert replaced.counts() == {"threads": 1, "answers": 1}
        assert replaced.ledger() == carried  # the records as they were, their times included
    assert SECRET.encode() not in _bytes_under(settings.data_dir, skip="replaced")

    # an export, into an empty data folder, with the restored store's ledger named
    other = Settings(data_dir=tmp_path / "var2")
    done = restore(other, offsite / "old.jsonl.gz", extra_ledgers=[settings.store_path], reindex=False)
    assert done["kind"] == "export" and done["export"] == {"inserted": 1, "suppressed": 1, "answers_suppressed": 1,
                                                           "posts_anonymized": 1, "taken_down": 1,
                                                           "answers_taken_down": 1}, done
    with ThreadStore(other.store_path) as restored:
        _as_the_ledgers_say(restored)
    assert SECRET.encode() not in _bytes_under(other.data_dir)


def test_a_store_from_before_the_ledger_tables_restores_and_its_ledger_reads(tmp_path):
    """A backup of a store written before round 44 (no erasures table) or round 45 (no takedowns table): it restores,
    gaining both tables and the records, and a ledger read from a round-44 store keeps its erasures."""
    settings = Settings(data_dir=tmp_path / "var")
    with _filled(tmp_path / "old.sqlite3") as old:
        old.erase_authors(["gone"], remove=True)
        old._conn.execute("DROP TABLE takedowns")  # as round 44 wrote it
    with ThreadStore(tmp_path / "now.sqlite3") as now:
        now.erase_authors(["third"])
        now.record_takedown("t3")
    done = restore(settings, tmp_path / "old.sqlite3", extra_ledgers=[tmp_path / "old.sqlite3",
                                                                     tmp_path / "now.sqlite3"], reindex=False)
    assert (done["erasures_carried"], done["erasures_not_carried"], done["authors_erased"]) == (1, 0, 1), done
    # "third", under another key, found among the copy's authors
    with ThreadStore(settings.store_path) as restored:
        assert set(restored.erased(["gone", "third"])) == {"gone", "third"} and restored.get("t3") is None
    with _filled(tmp_path / "older.sqlite3") as older:
        older._conn.executescript("DROP TABLE takedowns; DROP TABLE erasures")  # as round 43 wrote it
    done = restore(Settings(data_dir=tmp_path / "var2"), tmp_path / "older.sqlite3",
                   extra_ledgers=[tmp_path / "older.sqlite3", tmp_path / "now.sqlite3"], reindex=False)
    assert done["threads"] == 2 and done["takedowns"] == 1, done


def test_a_ledger_of_another_lineage_still_finds_its_users(tmp_path):
    """A store rebuilt from an export (no ledger) drew its own key at its own first erasure: the other store's
    records cannot be copied across, but its users are found among the restored posts by their hashes and erased;
    a record whose user the copy does not hold is counted as not carried."""
    settings = Settings(data_dir=tmp_path / "var")
    with _filled(tmp_path / "a.sqlite3") as a:
        a.erase_authors(["gone", "nobody"], remove=True)
    with _filled(tmp_path / "b.sqlite3") as b:
        b.erase_authors(["third"])  # its own key
        backup(b.path, tmp_path / "b-backup.sqlite3")
    done = restore(settings, tmp_path / "b-backup.sqlite3", extra_ledgers=[tmp_path / "a.sqlite3"], reindex=False)
    assert (done["erasures_carried"], done["erasures_not_carried"], done["authors_erased"]) == (0, 1, 1), done
    with ThreadStore(settings.store_path) as restored:
        assert restored.get("t1") is None and restored.posts_by(["gone"]) == []
        assert set(restored.erased(["gone", "third", "nobody"])) == {"gone", "third"}


def test_a_restore_is_refused_while_served_and_reads_past_a_damaged_store(tmp_path):
    settings = Settings(data_dir=tmp_path / "var")
    with _filled(tmp_path / "good.sqlite3") as good:
        backup(good.path, tmp_path / "backup.sqlite3")
    settings.store_path.parent.mkdir(parents=True)
    settings.store_path.write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)  # damaged: why one restores
    (settings.index_root / "gen-1").mkdir(parents=True)
    write_lease(settings.index_root, "worker-1", "gen-1", ttl_s=60)
    with pytest.raises(RestoreError, match="stop it"):
        restore(settings, tmp_path / "backup.sqlite3", replace=True, reindex=False)
    for lease in (settings.index_root / ".leases").iterdir():
        lease.unlink()
    with pytest.raises(RestoreError, match="cannot read the ledger"):  # named by the operator: stops the restore
        restore(settings, tmp_path / "backup.sqlite3", replace=True, extra_ledgers=[settings.store_path],
                reindex=False)
    done = restore(settings, tmp_path / "backup.sqlite3", replace=True, reindex=False)
    assert list(done["ledgers_unreadable"]) == [str(settings.store_path)] and done["threads"] == 3, done
    assert (settings.data_dir / done["replaced_as"]).read_bytes().endswith(b"\xff" * 100)  # kept as it was
    (tmp_path / "notes.txt").write_text("not a backup")
    export(tmp_path / "good.sqlite3", tmp_path / "plain.jsonl")  # not gzipped: its end cannot be checked
    for path, why in ((tmp_path / "notes.txt", "neither"), (tmp_path / "missing.sqlite3", "no such file"),
                      (tmp_path / "plain.jsonl", r"not gzipped.*gzip FILE.*cqa ingest FILE")):
        with pytest.raises(RestoreError, match=why):
            restore(Settings(data_dir=tmp_path / "v3"), path, reindex=False)
    assert not (tmp_path / "v3").exists()  # refused before anything was made
    export(tmp_path / "good.sqlite3", tmp_path / "good.jsonl.gz")
    whole = gzip.decompress((tmp_path / "good.jsonl.gz").read_bytes())
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(whole + b'{"id": "t9"}\n'))  # a line that is no thread
    (tmp_path / "cut.jsonl.gz").write_bytes((tmp_path / "good.jsonl.gz").read_bytes()[:-20])  # a copy cut short
    for path, why in ((tmp_path / "bad.jsonl.gz", "line 4: not a thread"), (tmp_path / "cut.jsonl.gz", "cut short")):
        with pytest.raises(RestoreError, match=why):
            restore(Settings(data_dir=tmp_path / "v4"), path, reindex=False)
        assert [p.name for p in (tmp_path / "v4").iterdir()] == []  # nothing placed, nothing left half-written


def test_cqa_restore_rebuilds_the_indexes_and_refuses_without_replace(tmp_path, cli_env):
    data = tmp_path / "var"
    env = {**cli_env, "CQA_DATA_DIR": str(data)}
    with _filled(data / "threads.sqlite3") as store:
        backup(store.path, tmp_path / "old.sqlite3")
        _erased_since(store)
    run = subprocess.run([*CQA, "restore", str(tmp_path / "old.sqlite3"), "-q"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 2 and "--replace" in run.stderr, run.stderr
    run = subprocess.run([*CQA, "restore", str(tmp_path / "old.sqlite3"), "--replace", "-q"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["threads"] == 1 and out["authors_erased"] == 2 and out["generation"], out
    assert [p.name for p in (data / "indexes").glob("gen-*")] == [out["generation"]]
    assert SECRET.encode() not in _bytes_under(data, skip="replaced") and "gone" not in run.stdout + run.stderr


# --- the ledger an export carries (its first line) ------------------------------------------------------------------
def _exported_after(store: ThreadStore, path, **kw) -> dict:
    """An export made after ``_erased_since``: what a forum keeps off the machine, all that is left if the machine
    is lost."""
    _erased_since(store)
    return export(store.path, path, **kw)


def test_an_export_carries_its_stores_ledger_which_an_ingest_into_an_empty_store_takes(tmp_path):
    with _filled(tmp_path / "live.sqlite3") as store:
        said = _exported_after(store, tmp_path / "all.jsonl.gz")
        export(store.path, tmp_path / "bare.jsonl.gz", with_ledger=False)  # as exports were before they carried it
    assert said["ledger"] == {"erasures": 2, "takedowns": 2}, said
    first, *threads = gzip.decompress((tmp_path / "all.jsonl.gz").read_bytes()).decode().splitlines()
    assert threads == gzip.decompress((tmp_path / "bare.jsonl.gz").read_bytes()).decode().splitlines()
    line = json.loads(first)["ledger"]
    assert len(line["erasures"]) == 2 and len(line["key"]) == 64 and "gone" not in first and "third" not in first
    assert [(t["thread_id"], t["answer_id"]) for t in line["takedowns"]] == [("t2", "t2c"), ("t3", None)]

    with ThreadStore(tmp_path / "new.sqlite3") as restored:  # the machine lost: the export into an empty folder
        report = ingest_paths(restored, [tmp_path / "all.jsonl.gz"], progress=False)
        assert report.skipped == 0 and report.as_dict()["ledgers"] == [
            {"file": "all.jsonl.gz", "taken": True, "erasures": 2, "takedowns": 2, "erasures_not_carried": 0}]
        _as_the_ledgers_say(restored)  # and the forum's sync sending everything again brings nothing back
        report = ingest_paths(restored, [tmp_path / "all.jsonl.gz"], progress=False)  # into a store with threads
        assert report.ledgers[0]["taken"] is False and "holds threads already (1)" in report.ledgers[0]["reason"]
    with ThreadStore(tmp_path / "control.sqlite3") as control:  # the control: the export without it
        ingest_paths(control, [tmp_path / "bare.jsonl.gz"], progress=False)
        r = control.upsert(_forum())
        assert (r.suppressed, r.taken_down, r.inserted) == ([], [], 2), r
        assert control.posts_by(["gone"]) != []

    bad = first.replace(line["key"], "not-a-key")  # a damaged ledger line: a bad record, named
    (tmp_path / "bad.jsonl").write_text("\n".join([bad, *threads]) + "\n", encoding="utf-8")
    (tmp_path / "twice.jsonl").write_text("\n".join([first, *threads, first]) + "\n", encoding="utf-8")
    assert "line 1: a ledger line that cannot be read: ledger.key" in str(
        load_jsonl(tmp_path / "bad.jsonl").errors[0])
    twice = load_jsonl(tmp_path / "twice.jsonl")  # two exports joined: the second's ledger line is a bad record
    assert f"line {2 + len(threads)}: a ledger line (an export's erasures and takedowns) is read only as a file's " \
           "first line" in str(twice.errors[0]) and twice.ledger is not None and len(twice.errors) == 1
    with pytest.raises(LoadError, match="ledger.key"):
        load_jsonl(tmp_path / "bad.jsonl", strict=True)


def test_an_export_alone_restores_with_its_ledger_and_lends_it_to_another_restore(tmp_path):
    settings = Settings(data_dir=tmp_path / "var")
    with _filled(tmp_path / "live.sqlite3") as store:
        backup(store.path, tmp_path / "old.sqlite3")  # made before: no record of what follows
        _exported_after(store, tmp_path / "all.jsonl.gz")
    done = restore(settings, tmp_path / "all.jsonl.gz", ledgers=[], reindex=False)  # no other ledger anywhere
    assert done["ledgers_read"] == [str(tmp_path / "all.jsonl.gz")] and done["erasures_carried"] == 2, done
    with ThreadStore(settings.store_path) as restored:
        _as_the_ledgers_say(restored)

    other = Settings(data_dir=tmp_path / "var2")  # the old store backup, with the export's ledger named
    done = restore(other, tmp_path / "old.sqlite3", ledgers=[], extra_ledgers=[tmp_path / "all.jsonl.gz"],
                   reindex=False)
    assert (done["authors_erased"], done["takedowns_applied"]) == (2, 2), done
    with ThreadStore(other.store_path) as restored:
        _as_the_ledgers_say(restored)
    assert SECRET.encode() not in _bytes_under(other.data_dir)

    whole = gzip.decompress((tmp_path / "all.jsonl.gz").read_bytes())
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(whole.replace(b'"remove":true', b'"remove":"sure"', 1)))
    for call in (lambda: restore(Settings(data_dir=tmp_path / "v3"), tmp_path / "bad.jsonl.gz", reindex=False),
                 lambda: restore(Settings(data_dir=tmp_path / "v3"), tmp_path / "old.sqlite3",
                                 extra_ledgers=[tmp_path / "bad.jsonl.gz"], reindex=False)):
        with pytest.raises(RestoreError, match=r"line 1: .*ledger\.erasures\.\d\.remove: Input should be a valid"):
            call()
        assert not (tmp_path / "v3" / "threads.sqlite3").exists()  # refused before anything was placed


def test_cqa_export_writes_the_ledger_unless_told_not_to_and_cqa_ingest_takes_it(tmp_path, cli_env):
    data = tmp_path / "var"
    with _filled(data / "threads.sqlite3") as store:
        _erased_since(store)
    env = {**cli_env, "CQA_DATA_DIR": str(data)}
    run = subprocess.run([*CQA, "export", "-o", str(tmp_path / "all.jsonl.gz"), "-q"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and json.loads(run.stdout.splitlines()[-1])["ledger"] == {"erasures": 2,
                                                                                          "takedowns": 2}, run.stderr
    bare = subprocess.run([*CQA, "export", "--no-ledger", "-q"], env=env, capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0 and '"ledger"' not in bare.stdout and len(bare.stdout.splitlines()) == 1, bare.stderr
    env["CQA_DATA_DIR"] = str(tmp_path / "var2")
    run = subprocess.run([*CQA, "ingest", str(tmp_path / "all.jsonl.gz"), "-q"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["skipped"] == 0 and out["ledgers"][0]["taken"] and out["ledgers"][0]["erasures"] == 2, out
    with ThreadStore(tmp_path / "var2" / "threads.sqlite3") as restored:
        _as_the_ledgers_say(restored)


def test_an_export_carries_the_tag_synonyms_which_ingest_and_restore_set_again(tmp_path):
    """A forum's tag synonyms (round 58) travel in an export's line before its threads, after its ledger line: an
    ingest takes them into any store (those it holds counted, those that conflict with its own refused and named, a
    dry run none), a restore sets them, and an erasure that rewrites the export copies the line even where a
    synonym is spelled as an erased user's id."""
    from indexing.erasure import rewrite_backup
    with _filled(tmp_path / "live.sqlite3") as store:
        store.set_tag_synonym("JS", "javascript")
        store.set_tag_synonym("ecmascript", "javascript")
        store.set_tag_synonym("gone", "farewell")  # the erased user's id, as a tag
        said = _exported_after(store, tmp_path / "all.jsonl.gz")
        bare = export(store.path, tmp_path / "bare.jsonl.gz", with_ledger=False)
        erased = store.erase_authors(["other"], remove=True)  # a later erasure rewrites the export as a backup
        live = store.ledger()
    assert said["tag_synonyms"] == bare["tag_synonyms"] == 3, said
    first, second, *threads = gzip.decompress((tmp_path / "all.jsonl.gz").read_bytes()).decode().splitlines()
    assert "ledger" in json.loads(first) and json.loads(second) == {
        "tag_synonyms": {"ecmascript": "javascript", "gone": "farewell", "js": "javascript"}}
    assert gzip.decompress((tmp_path / "bare.jsonl.gz").read_bytes()).decode().splitlines()[0] == second

    for name in ("all.jsonl.gz", "bare.jsonl.gz"):  # after the ledger line, or first
        with ThreadStore(tmp_path / f"new-{name}.sqlite3") as fresh:
            report = ingest_paths(fresh, [tmp_path / name], progress=False)
            assert report.skipped == 0 and report.as_dict()["tag_synonyms"] == [
                {"file": name, "taken": 3, "held": 0}], report.as_dict()
            assert fresh.tag_synonyms() == {"ecmascript": "javascript", "gone": "farewell", "js": "javascript"}
            version = fresh.tag_synonyms_version()
            again = ingest_paths(fresh, [tmp_path / name], progress=False)  # the same file again changes nothing
            assert again.tag_synonyms == [{"file": name, "taken": 0, "held": 3}]
            assert fresh.tag_synonyms_version() == version
    with ThreadStore(tmp_path / "other.sqlite3") as other:  # a store whose own synonyms conflict
        other.set_tag_synonym("javascript", "js")
        report = ingest_paths(other, [tmp_path / "all.jsonl.gz"], progress=False)
        (taken,) = report.tag_synonyms
        assert (taken["taken"], taken["held"], sorted(taken["refused"])) == (1, 0, ["ecmascript", "js"]), taken
        assert taken["refused"]["js"] == "'javascript' is a synonym of 'js' already: remove it first"
        assert other.tag_synonyms() == {"gone": "farewell", "javascript": "js"}
    with ThreadStore(tmp_path / "dry.sqlite3") as dry:
        report = ingest_paths(dry, [tmp_path / "all.jsonl.gz"], progress=False, dry_run=True)
        assert report.tag_synonyms[0]["taken"] == 0 and "dry run" in report.tag_synonyms[0]["reason"]
        assert dry.tag_synonyms() == {}

    settings = Settings(data_dir=tmp_path / "var")
    done = restore(settings, tmp_path / "all.jsonl.gz", ledgers=[], reindex=False)
    assert done["tag_synonyms"] == 3 and done["export"]["inserted"] == len(threads), done
    with ThreadStore(settings.store_path) as restored:
        assert restored.tag_synonyms()["js"] == "javascript"
        _as_the_ledgers_say(restored)

    rewritten = rewrite_backup(tmp_path / "all.jsonl.gz", erased, live)
    assert rewritten["threads_deleted"] + rewritten["threads_changed"] > 0, rewritten
    lines = gzip.decompress((tmp_path / "all.jsonl.gz").read_bytes()).decode().splitlines()
    assert lines[1] == second and '"other"' not in "\n".join(lines[2:])

    bad = tmp_path / "bad.jsonl"  # a chain, a synonym of itself, a line after a thread: bad records, named
    bad.write_text("\n".join(['{"tag_synonyms":{"a":"b","b":"c"}}', '{"tag_synonyms":{"x":" X "}}', threads[0],
                              second]) + "\n", encoding="utf-8")
    loaded = load_jsonl(bad)
    assert [(e.where, e.message) for e in loaded.errors] == [
        ("line 1", "'b' is a target and a synonym (of 'c'): a target is a tag of its own"),
        ("line 2", "'x' cannot be a synonym of itself"),
        ("line 4", "a tag synonyms line (an export's) is read only before the file's first thread")], [
            str(e) for e in loaded.errors]
    assert loaded.tag_synonyms is None and len(loaded.threads) == 1
