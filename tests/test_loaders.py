import gzip
import json
import subprocess
from pathlib import Path

import pytest

from indexing.ingest import ingest_paths
from indexing.loaders import LoadError, load
from indexing.store import ThreadStore

from .conftest import CQA

# (file, threads, answers) as README.md of the shared data states them (Arabic: QA pairs).
OFFICIAL_COUNTS = [
    ("test/SemEval2016-Task3-CQA-QL-test.xml", 700, 7000),
    ("dev/SemEval2016-Task3-CQA-QL-dev.xml", 500, 5000),
    ("dev/SemEval2016-Task3-CQA-QL-dev-subtaskA.xml", 244, 2440),
    ("train/SemEval2016-Task3-CQA-QL-train-part2.xml", 670, 6700),
    ("train/SemEval2016-Task3-CQA-QL-train-part2-subtaskA.xml", 379, 3790),
    ("train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskB.xml", 1999, 0),
    ("train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskA.xml", 98, 980),
    ("train2015/SemEval2015-Task3-CQA-QL-train-recovered-subtaskA.xml", 2499, 14918),
    ("train2015/SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml", 238, 1205),
    ("train2015/SemEval2015-Task3-CQA-QL-test-reformatted-excluding-2016-questions-multiline.xml", 315, 1844),
    ("arabic/SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.gz", 7384, 7384),
]
ORG_QUESTIONS = {"test/SemEval2016-Task3-CQA-QL-test.xml": 70, "dev/SemEval2016-Task3-CQA-QL-dev.xml": 50,
                 "train/SemEval2016-Task3-CQA-QL-train-part2.xml": 67,
                 "train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskB.xml": 200}


def test_every_shared_file_is_covered(semeval):
    files = {str(p.relative_to(semeval)) for p in semeval.rglob("*.xml*") if not p.name.endswith(".relevancy")}
    assert files == {f for f, _, _ in OFFICIAL_COUNTS}


@pytest.mark.parametrize("rel,threads,answers", OFFICIAL_COUNTS)
def test_official_counts(semeval, rel, threads, answers):
    r = load(semeval / rel, strict=True)
    assert (len(r.threads), r.answers, len(r.errors)) == (threads, answers, 0)
    if rel in ORG_QUESTIONS:
        assert len(r.org_questions) == ORG_QUESTIONS[rel]
        assert sum(len(o.thread_ids) for o in r.org_questions.values()) == threads


def test_semeval_fields_and_labels_are_kept(semeval):
    r = load(semeval / "test/SemEval2016-Task3-CQA-QL-test.xml")
    t = next(t for t in r.threads if t.id == "Q318_R4")
    assert t.category == "Opportunities" and t.created_at == "2012-11-12 13:06:59" and t.author_id == "U1929"
    assert t.meta["relevance2orgq"] == "PerfectMatch" and t.meta["subtaskA_skip_same_as"] == "Q56_R4"
    assert t.answers[0].id == "Q318_R4_C1" and t.answers[0].label == "Bad"
    assert t.answers[0].meta["relevance2orgq"] == "PotentiallyUseful"
    rec = load(semeval / "train/SemEval2016-Task3-CQA-QL-train-part1-recovered-subtaskA.xml").threads[0]
    assert rec.author_id is None and rec.created_at is None and rec.category is None  # empty attributes


XML_HEAD = '<?xml version="1.0" encoding="utf-8"?>\n<xml version="1.0">\n'
GOOD_THREAD = ('<Thread THREAD_SEQUENCE="T1"><RelQuestion RELQ_ID="T1" RELQ_CATEGORY="c" RELQ_DATE="" '
               'RELQ_USERID="" RELQ_USERNAME=""><RelQSubject>s</RelQSubject><RelQBody>b</RelQBody></RelQuestion>'
               '<RelComment RELC_ID="T1_C1" RELC_RELEVANCE2RELQ="Good"><RelCText>yes</RelCText></RelComment>'
               '</Thread>\n')
BAD_THREAD = ('<Thread THREAD_SEQUENCE="T2"><RelQuestion RELQ_ID="T2"><RelQSubject>s</RelQSubject></RelQuestion>'
              '<RelComment RELC_DATE=""><RelCText>no id</RelCText></RelComment></Thread>\n')


def test_truncated_xml_is_a_clear_error(tmp_path):
    f = tmp_path / "cut.xml"
    f.write_text(XML_HEAD + GOOD_THREAD + GOOD_THREAD[:60])
    with pytest.raises(LoadError, match=r"cut\.xml: line \d+: not well-formed XML"):
        load(f)


def test_comment_without_id_is_named_and_skipped_or_fatal(tmp_path):
    f = tmp_path / "bad.xml"
    f.write_text(XML_HEAD + GOOD_THREAD + BAD_THREAD + "</xml>\n")
    r = load(f)
    assert [t.id for t in r.threads] == ["T1"]
    assert len(r.errors) == 1 and "RELC_ID" in str(r.errors[0]) and "line 4" in str(r.errors[0])
    with pytest.raises(LoadError, match="RelComment> has no RELC_ID"):
        load(f, strict=True)


def test_invalid_utf8_xml(tmp_path):
    f = tmp_path / "enc.xml"
    f.write_bytes((XML_HEAD + GOOD_THREAD).encode() + b"<Thread>\xff\xfe</Thread></xml>")
    with pytest.raises(LoadError, match="not well-formed XML"):
        load(f)


def test_jsonl_bad_lines(tmp_path):
    good = {"id": "j1", "subject": "s", "answers": [{"id": "j1a", "text": "t"}]}
    f = tmp_path / "t.jsonl"
    f.write_bytes(json.dumps(good).encode() + b"\n[1, 2]\n" + b'{"id": "j2", "subject": "\xff"}\n'
                  + b'{"id": "j3", "subject": "s", "colour": 1}\n' + b"{not json\n")
    r = load(f)
    assert [t.id for t in r.threads] == ["j1"]
    msgs = [str(e) for e in r.errors]
    assert "line 2" in msgs[0] and "expected a JSON object" in msgs[0]
    assert "line 3" in msgs[1] and "invalid UTF-8" in msgs[1]
    assert "line 4" in msgs[2] and "colour" in msgs[2]
    assert "line 5" in msgs[3] and "invalid JSON" in msgs[3]


def test_jsonl_unpaired_surrogate_is_named_and_skipped(tmp_path):
    """A JSON escape of half a UTF-16 pair decodes to text no UTF-8 store can hold: that record is skipped with
    the field named, the rest of the file is loaded."""
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"id": "s1", "subject": "s", "answers": [{"id": "s1a", "text": "bad \ud800"}]}) + "\n"
                 + json.dumps({"id": "s2", "subject": "fine"}) + "\n", encoding="ascii")
    r = load(f)
    assert [t.id for t in r.threads] == ["s2"]
    (err,) = [str(e) for e in r.errors]
    assert "line 1" in err and "answers[0].text has an unpaired surrogate (U+D800 at character 4)" in err


def test_ingest_writes_a_file_whose_encoding_ahead_failed(tmp_path, caplog):
    """Encoding ahead only fills a cache: when it fails, the file is written all the same and the failure said."""
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "ok", "subject": "s", "answers": [{"id": "a", "text": "t"}]}) + "\n")
    seen = []

    def fails(threads):
        seen.append([t.id for t in threads])
        raise RuntimeError("no encoder here")
    with ThreadStore(tmp_path / "s.db") as store:
        rep = ingest_paths(store, [f], progress=False, before_write=fails)
        assert seen == [["ok"]] and store.counts() == {"threads": 1, "answers": 1}
    assert rep.as_dict()["encode_ahead_failed"] == ["t.jsonl: RuntimeError: no encoder here"]
    assert "encoded_ahead" not in rep.as_dict() and "encoding ahead failed" in caplog.text


def test_strict_failure_writes_nothing(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"id": "ok", "subject": "s"}) + "\n42\n")
    with ThreadStore(tmp_path / "s.db") as store:
        with pytest.raises(LoadError):
            ingest_paths(store, [f], strict=True, progress=False)
        assert store.counts() == {"threads": 0, "answers": 0}
        rep = ingest_paths(store, [f], progress=False)
        assert (rep.threads, rep.skipped) == (1, 1)


def test_an_older_export_ingested_after_a_newer_one_changes_nothing(tmp_path, caplog):
    """JSONL threads with a ``revision``: a file holding an earlier revision of a stored thread leaves it as stored,
    and the ingest's summary counts it as superseded and logs which."""
    import logging
    newer, older = tmp_path / "newer.jsonl", tmp_path / "older.jsonl"
    newer.write_text(json.dumps({"id": "t", "subject": "s", "revision": 2,
                                 "answers": [{"id": "a1", "text": "x"}, {"id": "a2", "text": "y"}]}) + "\n")
    older.write_text(json.dumps({"id": "t", "subject": "s", "revision": 1, "answers": [{"id": "a1", "text": "x"}]})
                     + "\n" + json.dumps({"id": "u", "subject": "new"}) + "\n")
    with ThreadStore(tmp_path / "s.db") as store, caplog.at_level(logging.INFO, logger="indexing.ingest"):
        ingest_paths(store, [newer], progress=False)
        rep = ingest_paths(store, [older], progress=False).as_dict()
        assert (rep["inserted"], rep["updated"], rep["superseded"]) == (1, 0, 1)
        assert [a.id for a in store.get("t").answers] == ["a1", "a2"] and store.get("t").revision == 2
    assert "older.jsonl: 1 threads left as stored, which holds a later revision of each (t)" in caplog.text
    with ThreadStore(tmp_path / "other.db") as fresh:  # nothing superseded, nothing said
        assert "superseded" not in ingest_paths(fresh, [older], progress=False).as_dict()


def test_gzip_jsonl_and_demo_corpus(tmp_path):
    from indexing.config import PROJECT_ROOT
    demo = PROJECT_ROOT / "data/demo/threads.jsonl"
    r = load(demo, strict=True)
    assert len(r.threads) >= 30 and r.answers >= 150
    gz = tmp_path / "d.jsonl.gz"
    gz.write_bytes(gzip.compress(demo.read_bytes()))
    assert len(load(gz).threads) == len(r.threads)


def _jsonl_forum(n: int, bad_at: tuple[int, ...] = ()) -> bytes:
    """``n`` threads a line (thread ``k`` posted on day ``k`` of 2016), with a bad record after each thread of
    ``bad_at``."""
    lines = []
    for k in range(1, n + 1):
        lines.append(json.dumps({"id": f"t{k}", "subject": f"question {k}", "created_at": f"2016-01-{k:02d} 10:00:00",
                                 "answers": [{"id": f"t{k}a", "text": f"answer {k}",
                                              "created_at": f"2016-01-{k:02d} 11:00:00"}]}))
        if k in bad_at:
            lines.append("[not, a thread")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("dated", [False, True])
def test_streamed_jsonl_comes_in_batches_and_gives_what_a_whole_read_gives(tmp_path, monkeypatch, dated):
    """A streamed JSONL file's threads come BATCH_THREADS at a time, the same threads and errors as a whole read, each
    bad record reported once (a dated read checks it twice); the ledger is known before the batches, and with
    ``dated`` the newest post too."""
    from indexing import loaders
    from indexing.ledger import Held, ledger_line
    monkeypatch.setattr(loaders, "BATCH_THREADS", 3)
    f = tmp_path / "t.jsonl.gz"  # a ledger line on line 2, not first: a bad record
    forum = _jsonl_forum(7, bad_at=(2, 7)).replace(b"\n", b"\n" + ledger_line(Held(None)).encode(), 1)
    f.write_bytes(gzip.compress(forum))
    whole = load(f)
    streamed = load(f, stream=True, dated=dated)
    assert streamed.threads == [] and len(streamed.errors) == (3 if dated else 0)  # only what its first pass read
    assert streamed.newest == (whole.threads[-1].newest_post() if dated else None)
    batches = [[t.id for t in b] for b in streamed.batches]
    assert batches == [["t1", "t2", "t3"], ["t4", "t5", "t6"], ["t7"]]
    assert [t.id for t in whole.threads] == [t for b in batches for t in b]
    assert [str(e) for e in streamed.errors] == [str(e) for e in whole.errors]
    assert [e.where for e in whole.errors] == ["line 2", "line 4", "line 10"]
    assert "ledger line" in whole.errors[0].message and "first line" in whole.errors[0].message


def test_streamed_jsonl_reads_an_exports_ledger_line_first(tmp_path):
    from indexing.ledger import Held, ledger_line
    f = tmp_path / "export.jsonl"
    f.write_bytes(b"\n" + ledger_line(Held(None)).encode() + _jsonl_forum(2))  # after a blank line, still the first
    r = load(f, stream=True)
    assert r.ledger is not None and r.errors == []
    assert [t.id for b in r.batches for t in b] == ["t1", "t2"] and r.errors == []


def test_a_byte_order_mark_before_the_first_record_is_read_past(tmp_path):
    """A file written by a Windows tool that puts a UTF-8 byte-order mark first: its first thread is read, whole or
    streamed; one anywhere else is still a bad record."""
    f = tmp_path / "bom.jsonl"
    forum = _jsonl_forum(3)
    f.write_bytes(b"\xef\xbb\xbf" + forum + b"\xef\xbb\xbf" + forum.splitlines()[0].replace(b"t1", b"t9") + b"\n")
    whole, streamed = load(f), load(f, stream=True)
    assert [t.id for t in whole.threads] == [t.id for b in streamed.batches for t in b] == ["t1", "t2", "t3"]
    assert [e.where for e in whole.errors] == [e.where for e in streamed.errors] == ["line 4"]


def test_streamed_jsonl_strict_raises_before_any_batch(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_bytes(_jsonl_forum(5, bad_at=(5,)))
    with pytest.raises(LoadError, match="line 6: invalid JSON"):
        load(f, strict=True, stream=True)


def test_a_gzip_jsonl_cut_short_writes_nothing(tmp_path, cli_env):
    """A gzip file cut short (a copy interrupted) is an error before its first batch is written, streamed or not."""
    f = tmp_path / "cut.jsonl.gz"
    whole = gzip.compress(_jsonl_forum(9) * 200)
    f.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(LoadError, match="cut.jsonl.gz: file: cannot read"):
        load(f, stream=True)
    p = subprocess.run(CQA + ["ingest", str(f), "-q"], env=cli_env, capture_output=True, text=True)
    assert p.returncode == 2 and "cannot read" in p.stderr
    with ThreadStore(Path(cli_env["CQA_DATA_DIR"]) / "threads.sqlite3") as store:
        assert store.counts() == {"threads": 0, "answers": 0}


def test_ingest_of_a_jsonl_file_writes_a_batch_a_transaction(tmp_path, monkeypatch):
    """A batch the store refuses stops the file: the batches before it stay written, and the error says how many."""
    from indexing import loaders
    from indexing.store import StoreError
    monkeypatch.setattr(loaders, "BATCH_THREADS", 4)
    f = tmp_path / "t.jsonl"
    f.write_bytes(_jsonl_forum(10))
    with ThreadStore(tmp_path / "s.db") as store:
        real, calls = store.upsert, []

        def refuses_the_second(threads, **kw):
            calls.append(len(threads))
            if len(calls) == 2:
                raise StoreError("disk full")
            return real(threads, **kw)
        monkeypatch.setattr(store, "upsert", refuses_the_second)
        with pytest.raises(StoreError) as e:
            ingest_paths(store, [f], progress=False)
        assert e.value.written_before == 4 and calls == [4, 4]
        assert store.counts() == {"threads": 4, "answers": 4}


@pytest.mark.parametrize("gz", [False, True])
def test_an_ingest_says_where_it_is_after_each_batch_and_each_file(tmp_path, monkeypatch, gz):
    """``on_progress`` is told after each batch written (the share of the file read, the threads written) and after
    each file: the share of the whole ingest only grows, and ends at 1 with every thread counted."""
    from indexing import loaders
    monkeypatch.setattr(loaders, "BATCH_THREADS", 25)
    lines = b"".join(json.dumps({"id": f"p{k}", "subject": f"question {k} " + "words " * 30}).encode() + b"\n"
                     for k in range(210))  # the last batch, of 10, made once the file is read to its end
    big = tmp_path / ("a-big.jsonl.gz" if gz else "a-big.jsonl")
    big.write_bytes(gzip.compress(lines) if gz else lines)
    small = tmp_path / "b-small.jsonl"
    small.write_bytes(_jsonl_forum(3))
    told = []
    with ThreadStore(tmp_path / "s.db") as store:
        ingest_paths(store, [big, small], progress=False, on_progress=told.append)
    of_big = [t for t in told if t.file == big.name]
    assert [t.threads for t in of_big] == [25 * k for k in range(1, 9)] + [210, 210]
    assert [(t.files_done, t.files) for t in of_big] == [(0, 2)] * 9 + [(1, 2)]
    shares = [t.share for t in of_big[:-1]]
    assert shares == sorted(shares) and shares[-1] == 1.0
    if not gz:  # a plain file's bytes read, to the line: the first batch is its first 25 lines of 210
        assert abs(shares[0] - 25 / 210) < 0.01, shares
    overall = [t.overall for t in told]
    assert overall == sorted(overall) and told[-1].overall == 1.0 and told[-1].threads == 213
    assert told[-1].as_dict() == {"file": small.name, "files_done": 2, "files": 2, "share": 0.0, "threads": 213,
                                  "overall": 1.0}


def test_cli_ingest_of_jsonl_from_stdin_streamed_strict_and_mirrored(tmp_path, cli_env):
    """Standard input is spooled, so it is read twice like a file: strict refuses a bad record before writing, and a
    mirror knows its newest post; no spool is left behind in $TMPDIR."""
    forum = _jsonl_forum(6)
    spools = tmp_path / "tmpdir"
    spools.mkdir()
    cli_env = {**cli_env, "TMPDIR": str(spools)}
    bad = subprocess.run(CQA + ["ingest", "-", "-q", "--strict"], input=_jsonl_forum(6, bad_at=(6,)), env=cli_env,
                         capture_output=True)
    assert bad.returncode == 2 and b"-: line 7: invalid JSON" in bad.stderr
    ok = subprocess.run(CQA + ["ingest", "-", "-q"], input=gzip.compress(forum), env=cli_env, capture_output=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout.decode().splitlines()[-1])["inserted"] == 6
    smaller = b"".join(line + b"\n" for line in forum.splitlines()[1:])  # t1 removed from the site
    m = subprocess.run(CQA + ["ingest", "-", "-q", "--mirror", "--max-remove", "1"], input=smaller, env=cli_env,
                       capture_output=True)
    assert m.returncode == 0, m.stderr
    summary = json.loads(m.stdout.decode().splitlines()[-1])
    assert summary["mirror"]["removed"] == 1 and summary["mirror"]["newest_post"] == "2016-01-06T11:00:00"
    assert list(spools.iterdir()) == []


@pytest.mark.parametrize("stream", [False, True])
def test_standard_input_is_spooled_in_tmpdir_until_its_threads_are_read(tmp_path, monkeypatch, stream):
    import io
    import sys
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(_jsonl_forum(4)))))
    r = load("-", stream=stream)
    assert len(list(tmp_path.glob("cqa-stdin-*"))) == (1 if stream else 0)  # a streamed file's batches still to read
    assert [t.id for t in (r.threads if not stream else [t for b in r.batches for t in b])] == ["t1", "t2", "t3", "t4"]
    assert r.path == "-" and list(tmp_path.iterdir()) == []


def test_a_mirror_of_several_files_takes_the_newest_post_of_them_all(tmp_path):
    """A site's dump in two JSONL files: the horizon is the newest post of both, known before the first file is
    written, so a stored comment older than it that the first file lacks is the site's removal, not the forum's own."""
    from indexing.ingest import RemovalLimit
    from indexing.models import Answer, Thread
    lines = _jsonl_forum(6).splitlines(keepends=True)
    (tmp_path / "dump").mkdir()
    (tmp_path / "dump" / "a.jsonl").write_bytes(b"".join(lines[:3]))  # newest: 2016-01-03 11:00
    (tmp_path / "dump" / "b.jsonl").write_bytes(b"".join(lines[3:]))  # newest: 2016-01-06 11:00
    with ThreadStore(tmp_path / "s.db") as store:
        ingest_paths(store, [tmp_path / "dump"], progress=False)
        t2 = store.get("t2")
        store.upsert([t2.model_copy(update={"answers": [*t2.answers, Answer(id="late", text="seen on day 4",
                                                                             created_at="2016-01-04 12:00:00")]}),
                      Thread(id="x", subject="removed on the site", created_at="2016-01-05 12:00:00"),
                      Thread(id="y", subject="the forum's own", created_at="2016-01-07 09:00:00")])
        report = ingest_paths(store, [tmp_path / "dump"], progress=False, mirror=RemovalLimit(count=1))
        assert report.mirror.removed == ["x"] and report.comments_kept_newer == 0
        assert [a.id for a in store.get("t2").answers] == ["t2a"] and store.get("y") is not None


def test_cli_ingest_twice(semeval, cli_env, tmp_path):
    f = semeval / "test/SemEval2016-Task3-CQA-QL-test.xml"
    outs = []
    for _ in range(2):
        p = subprocess.run(CQA + ["ingest", str(f)], env=cli_env, capture_output=True, text=True, check=True)
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    for o in outs:
        assert (o["threads"], o["answers"], o["skipped"]) == (700, 7000, 0)
        assert o["store"] == {"threads": 700, "answers": 7000}
    assert outs[1]["unchanged"] == 700 and outs[1]["inserted"] == outs[1]["updated"] == 0


def test_cli_strict_error_exit_code(cli_env, tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text("not json\n")
    p = subprocess.run(CQA + ["ingest", "--strict", str(f)], env=cli_env, capture_output=True, text=True)
    assert p.returncode == 2 and "x.jsonl: line 1: invalid JSON" in p.stderr
