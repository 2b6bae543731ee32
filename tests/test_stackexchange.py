"""A StackExchange data dump read by `cqa ingest`: Posts.xml as threads, PostLinks.xml's duplicate links, the dump's
other files passed over, HTML bodies as text, and bad rows named and skipped (or stopping the file with --strict)."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from indexing.loaders import LoadError, load
from indexing.stackexchange import html_text, root_of, tags_of
from indexing.store import ThreadStore
from scripts.make_stackexchange_dump import tag_of, write_dump

from .conftest import CQA, ROOT

DEMO = ROOT / "data" / "demo" / "threads.jsonl"


def _shape(t, category=None):
    return (t.id, t.subject, t.body, category if category is not None else t.category, t.created_at, t.author_id,
            [(a.id, a.text, a.author_id, a.created_at) for a in t.answers])


@pytest.mark.parametrize("markup, text", [
    ("<p>How do I <em>renew</em> it?</p>\n\n<p>Soon.</p>", "How do I renew it?\n\nSoon."),
    ("<pre><code>x = 1\ny = 2\n</code></pre>", "x = 1\ny = 2"),
    ("<ul>\n<li>one</li>\n<li>two &amp; three</li>\n</ul>", "one\ntwo & three"),
    ("<p>a<br>b<!-- hidden --> c</p>", "a\nb c"),
    ("<p>see <img src='x.png' alt='the form'> here</p>", "see the form here"),
    ("<blockquote><p>quoted</p></blockquote><p>mine</p>", "quoted\n\nmine"),
    ("no markup at all  ", "no markup at all"),
    ("a &lt; b", "a < b"),
    ("<div>" * 3000 + "deep" + "</div>" * 3000, "deep"),  # past libxml2's depth limit: the text is kept
])
def test_a_posts_html_body_is_read_as_text(markup, text):
    assert html_text(markup) == text


def test_tags_in_both_spellings_and_the_root_element():
    assert tags_of("<visa><work-permit>") == ["visa", "work-permit"]
    assert tags_of("|visa|work-permit|") == ["visa", "work-permit"]
    assert tags_of(None) == [] and tags_of("") == []
    assert root_of(b'\xef\xbb\xbf<?xml version="1.0"?>\n<!-- c -->\n<posts>\n<row/>') == "posts"
    assert root_of(b"<root><Thread/></root>") == "root"


def test_a_dump_folder_gives_the_forums_threads_and_passes_the_rest_over(tmp_path):
    """The demo corpus written as a dump (some answers before their questions) reads back as the same threads, each
    question's answers in the order they were posted, the category its tag; the duplicate link kept in meta."""
    demo = load(DEMO).threads
    write_dump(demo, tmp_path / "dump", duplicates={demo[5].id: [demo[0].id]}, answers_first=3)
    (tmp_path / "dump" / "Votes.xml").write_text('<?xml version="1.0"?>\n<votes>\n<row Id="1"/>\n</votes>\n')
    result = load(tmp_path / "dump" / "Posts.xml")
    assert not result.errors and result.passed_over == {"tag wiki excerpt": 1}
    assert [_shape(t) for t in result.threads] == [_shape(t, tag_of(t.category)) for t in demo]
    assert result.threads[5].meta["duplicate_of"] == [demo[0].id]
    assert all("duplicate_of" not in t.meta for i, t in enumerate(result.threads) if i != 5)
    assert result.threads[0].meta["tags"] == [tag_of(demo[0].category)]
    for other in ("Users.xml", "Votes.xml", "PostLinks.xml"):  # told by their root element, read no further
        assert load(tmp_path / "dump" / other).threads == []
        assert load(tmp_path / "dump" / other).passed_over == {f"StackExchange {other} (no threads)": 1}


POSTS = """<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1" PostTypeId="1" AcceptedAnswerId="3" CreationDate="2010-07-19T19:12:12.510" Score="12" ViewCount="900"
       Body="&lt;p&gt;How do I renew my permit?&lt;/p&gt;" OwnerUserId="8" Title="Renewing a &lt;permit&gt; if x&lt;y"
       Tags="&lt;visa&gt;&lt;permits&gt;" />
  <row Id="3" PostTypeId="2" ParentId="1" CreationDate="2010-07-19T20:00:00.000" Score="5"
       Body="&lt;p&gt;At the ministry.&lt;/p&gt;" OwnerUserId="9" />
  <row Id="2" PostTypeId="2" ParentId="1" CreationDate="2010-07-19T19:30:00.000" Score="-1"
       Body="&lt;p&gt;Online.&lt;/p&gt;" OwnerDisplayName="a deleted user" />
  <row Id="4" PostTypeId="5" Body="&lt;p&gt;the visa tag&lt;/p&gt;" />
  <row Id="5" PostTypeId="2" ParentId="99" CreationDate="2011-01-01T00:00:00" Body="&lt;p&gt;no question&lt;/p&gt;" />
  <row PostTypeId="1" Title="no id" Body="x" />
  <row Id="6" PostTypeId="1" Title="" Body="" />
  <row Id="1" PostTypeId="1" Title="the same id again" Body="x" />
</posts>
"""


def test_a_posts_rows_fields_and_its_bad_rows(tmp_path):
    (tmp_path / "Posts.xml").write_text(POSTS)
    result = load(tmp_path / "Posts.xml")
    [t] = result.threads
    assert (t.id, t.subject, t.body, t.category, t.author_id) == ("1", "Renewing a <permit> if x<y",  # plain text
                                                                   "How do I renew my permit?", "visa", "8")
    assert t.meta == {"source": "stackexchange", "tags": ["visa", "permits"], "score": 12, "view_count": 900,
                      "accepted_answer_id": "3"}
    assert [a.id for a in t.answers] == ["2", "3"]  # the order they were posted, not the file's
    assert t.answers[0].author_id is None and t.answers[0].meta["username"] == "a deleted user"
    assert t.answers[1].meta == {"source": "stackexchange", "score": 5, "accepted": True}
    assert result.passed_over == {"tag wiki": 1}
    errors = sorted(str(e) for e in result.errors)
    assert len(errors) == 4, errors
    assert any("answer 5 names question 99, which this file does not hold" in e for e in errors)
    assert any("a row without an Id" in e for e in errors)
    assert any("post 1 appears twice" in e for e in errors)
    assert any("<row Id=6>" in e and "neither subject nor body" in e for e in errors)
    with pytest.raises(LoadError):
        load(tmp_path / "Posts.xml", strict=True)


def test_a_truncated_dump_or_a_foreign_root_is_a_clear_error(tmp_path):
    (tmp_path / "Posts.xml").write_text(POSTS[:400])
    with pytest.raises(LoadError, match="not well-formed XML"):
        load(tmp_path / "Posts.xml")
    (tmp_path / "other.xml").write_text("<root><Thread/></root>")
    with pytest.raises(LoadError, match="<root> is not a StackExchange dump's"):
        load(tmp_path / "other.xml", "stackexchange")


def test_cqa_ingest_of_a_dump_folder_gzipped_stdin_and_strict(tmp_path, cli_env):
    """What an operator runs: `cqa ingest` of the unpacked dump's folder; again changes nothing; Posts.xml.gz from
    standard input is told apart by its root element; --strict stops at a bad row with nothing written."""
    demo = load(DEMO).threads
    write_dump(demo, tmp_path / "dump", duplicates={demo[1].id: [demo[0].id]})

    def ingest(*args, data="var", **kw):
        env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / data)}
        return subprocess.run(CQA + ["ingest", *args, "-q"], env=env, capture_output=True, cwd=ROOT, **kw)

    run = ingest(str(tmp_path / "dump"), text=True)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["threads"], summary["answers"], summary["skipped"], summary["inserted"]) == (33, 166, 0, 33)
    assert summary["passed_over"] == {"StackExchange PostLinks.xml (no threads)": 1, "tag wiki excerpt": 1,
                                      "StackExchange Users.xml (no threads)": 1}
    with ThreadStore(tmp_path / "var" / "threads.sqlite3") as store:
        assert store.get(demo[1].id).meta["duplicate_of"] == [demo[0].id]
        assert _shape(store.get(demo[7].id)) == _shape(demo[7], tag_of(demo[7].category))
    again = json.loads(ingest(str(tmp_path / "dump"), text=True).stdout.strip().splitlines()[-1])
    assert (again["inserted"], again["updated"], again["unchanged"]) == (0, 0, 33)

    piped = ingest("-", data="var2", input=gzip.compress((tmp_path / "dump" / "Posts.xml").read_bytes()))
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout.decode().strip().splitlines()[-1])["inserted"] == 33

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "Posts.xml").write_text(POSTS)
    strict = ingest(str(tmp_path / "bad"), "--strict", data="var3", text=True)
    assert strict.returncode != 0 and "line 11 <row Id=5>: answer 5 names question 99" in strict.stderr
    assert not (tmp_path / "var3" / "threads.sqlite3").exists() or \
        ThreadStore(tmp_path / "var3" / "threads.sqlite3").counts()["threads"] == 0
    lenient = json.loads(ingest(str(tmp_path / "bad"), data="var4", text=True).stdout.strip().splitlines()[-1])
    assert (lenient["threads"], lenient["skipped"], lenient["passed_over"]) == (1, 4, {"tag wiki": 1})


def _archive(kind: str, path: Path, members: dict[str, bytes]) -> Path:
    """An archive holding ``members`` (a name in the archive to its bytes), as 7z or zip."""
    if kind == "zip":
        import zipfile
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members.items():
                z.writestr(name, data)
        return path
    import py7zr  # written from a folder, as `7z a` writes one: a folder is a member of its own
    src = path.with_name(path.name + ".members")
    for name, data in members.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    with py7zr.SevenZipFile(path, "w") as z:
        for top in sorted(src.iterdir()):
            z.writeall(top, arcname=top.name)
    return path


@pytest.mark.parametrize("kind, folder", [("7z", ""), ("7z", "site.example.com/"), ("zip", "site.example.com/")])
def test_cqa_ingest_of_a_dump_as_the_site_publishes_it_one_archive(tmp_path, cli_env, kind, folder):
    """A site's dump as downloaded (one .7z archive; a .zip too): `cqa ingest` of the archive, or of it on standard
    input, gives the store the unpacked folder gives, duplicate links included; the other files are passed over and
    nothing unpacked is left in $TMPDIR. An archive that is not one dump is refused with what it holds, and a bad row
    is named inside the archive."""
    demo = load(DEMO).threads
    write_dump(demo, tmp_path / "dump", duplicates={demo[1].id: [demo[0].id]})
    files = {f"{folder}{p.name}": p.read_bytes() for p in sorted((tmp_path / "dump").iterdir())}
    archive = _archive(kind, tmp_path / f"site.{kind}", {**files, f"{folder}readme.txt": b"the license"})
    spools = tmp_path / "tmpdir"
    spools.mkdir()

    def ingest(*args, data="var", **kw):
        env = {**cli_env, "CQA_DATA_DIR": str(tmp_path / data), "TMPDIR": str(spools)}
        return subprocess.run(CQA + ["ingest", *args, "-q"], env=env, capture_output=True, cwd=ROOT, **kw)

    run = ingest(str(archive), text=True)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["threads"], summary["answers"], summary["skipped"], summary["inserted"]) == (33, 166, 0, 33)
    assert summary["passed_over"] == {"StackExchange Users.xml (no threads)": 1, "tag wiki excerpt": 1,
                                      "files not of a StackExchange dump": 1}
    assert ingest(str(tmp_path / "dump"), data="unpacked").returncode == 0
    with ThreadStore(tmp_path / "var" / "threads.sqlite3") as a, \
            ThreadStore(tmp_path / "unpacked" / "threads.sqlite3") as b:
        assert a.get(demo[1].id).meta["duplicate_of"] == [demo[0].id]
        assert [(_shape(t), t.meta) for t in a.iter_threads()] == [(_shape(t), t.meta) for t in b.iter_threads()]
    piped = ingest("-", data="piped", input=archive.read_bytes())
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout.decode().strip().splitlines()[-1])["inserted"] == 33
    assert list(spools.iterdir()) == []

    refusals = {
        "no Posts.xml": ({f"{folder}Users.xml": files[f"{folder}Users.xml"]}, "holds no Posts.xml"),
        "two sites": ({"a/Posts.xml": files[f"{folder}Posts.xml"], "b/Posts.xml": files[f"{folder}Posts.xml"]},
                      "one site's dump at a time"),
        "bad row": ({f"{folder}Posts.xml": POSTS.encode()}, f"site-bad row.{kind}/Posts.xml: line 11 <row Id=5>"),
    }
    if kind == "zip":  # a member named outside the archive's folder (py7zr will not write one)
        refusals["outside"] = ({"../Posts.xml": files[f"{folder}Posts.xml"]}, "outside the archive's folder")
    for case, (members, why) in refusals.items():
        bad = _archive(kind, tmp_path / f"site-{case}.{kind}", members)
        refused = ingest(str(bad), "--strict", data=f"refused-{case}", text=True)
        assert refused.returncode == 2 and why in refused.stderr, (case, refused.stderr)
        assert not (tmp_path / f"refused-{case}" / "threads.sqlite3").exists() or \
            ThreadStore(tmp_path / f"refused-{case}" / "threads.sqlite3").counts()["threads"] == 0
    cut = tmp_path / f"cut.{kind}"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    refused = ingest(str(cut), data="cut", text=True)
    assert refused.returncode == 2 and f"cut.{kind}: " in refused.stderr, refused.stderr
    damaged = bytearray(archive.read_bytes())  # whole, its compressed data garbled: found as it is unpacked
    for i in range(200, 400):
        damaged[i] ^= 0x5A
    (tmp_path / f"damaged.{kind}").write_bytes(bytes(damaged))
    refused = ingest(str(tmp_path / f"damaged.{kind}"), data="damaged", text=True)
    assert refused.returncode == 2 and f"damaged.{kind}: {kind}: cannot read it" in refused.stderr, refused.stderr
    assert list(spools.iterdir()) == []


def test_the_dump_writer_script_runs(tmp_path):
    run = subprocess.run([sys.executable, "scripts/make_stackexchange_dump.py", str(DEMO), str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["threads"] == 33 and (tmp_path / "out" / "Posts.xml").exists()


def test_duplicate_groups_join_links_either_way_and_name_what_is_not_stored():
    from indexing.models import Thread
    from ranking.evaluation.duplicates import duplicate_groups, linked

    def t(tid, dup=None):
        return Thread(id=tid, subject=tid, meta={} if dup is None else {"duplicate_of": dup})
    groups = duplicate_groups([t("a"), t("b", ["a"]), t("c", "b"), t("d", ["zz"]), t("e", [1.5]), t("f", ["f"]),
                               t("g"), t("h", ["g", "a"])])
    assert groups.judged == {"b": {"a": 1, "c": 1, "g": 1, "h": 1}, "c": {"a": 1, "b": 1, "g": 1, "h": 1},
                             "h": {"a": 1, "b": 1, "c": 1, "g": 1}}
    assert (groups.links, groups.unstored, groups.malformed) == (5, 1, ["e"])
    assert linked({"duplicate_of": 7}) == ["7"] and linked({}) is None
    with pytest.raises(ValueError):
        linked({"duplicate_of": {"a": 1}})


def test_cqa_evaluate_duplicates_on_a_forum_imported_from_its_dump(tmp_path, cli_env):
    """A forum's dump whose PostLinks.xml closes three reposts as duplicates (one of them of another repost): after
    `cqa ingest` and `cqa reindex`, `cqa evaluate --duplicates` asks each repost for its similar questions as
    GET /threads/{id}/similar does and finds its group first: each repost's question is the original's word for word
    (or one question mark apart), and the unanswered repost folded with the original does not sink it (rule 29)."""
    demo = load(DEMO).threads
    voted = {(2, 1): {"accepted": True, "score": 3}, (9, 0): {"score": 2}}  # the forum's judgements of two answers
    demo = [t.model_copy(update={"answers": [a.model_copy(update={"meta": {**a.meta, **voted.get((i, j), {})}})
                                             for j, a in enumerate(t.answers)]}) for i, t in enumerate(demo)]
    reposts = [demo[2].model_copy(update={"id": "r1", "answers": []}),
               demo[9].model_copy(update={"id": "r2", "answers": []}),
               demo[9].model_copy(update={"id": "r3", "answers": [], "subject": demo[9].subject + "?"})]
    write_dump(demo + reposts, tmp_path / "dump",
               duplicates={"r1": [demo[2].id, "gone"], "r2": [demo[9].id], "r3": ["r2"], "r9": [demo[1].id]})
    run = lambda *a: subprocess.run(CQA + list(a), env=cli_env, capture_output=True, text=True, cwd=ROOT)  # noqa: E731
    for cmd in (["ingest", str(tmp_path / "dump"), "-q"], ["reindex", "-q"]):
        done = run(*cmd)
        assert done.returncode == 0, done.stderr
    refused = run("evaluate", "--duplicates", "--benchmark", "semeval2016-test-A")
    assert refused.returncode == 2 and "its own evaluation" in refused.stderr
    refused = run("evaluate", "--benchmark", "semeval2016-test-A", "--limit", "2")
    assert refused.returncode == 2 and "--limit goes with --duplicates or --answers" in refused.stderr
    done = run("evaluate", "--duplicates", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["questions"], out["links"], out["links_to_unstored"]) == (3, 4, 1)  # r9 is not stored, "gone" neither
    assert out["P@1"] == 1.0 and out["compare"]["figures"]["P@1"] == 1.0
    assert 0.5 <= out["MAP@10"] <= 1.0 and out["ranker"] == "search-questions"
    report = json.loads((Path(out["report"]) / "report.json").read_text())
    assert set(report["per_question_ap"]) == {"r1", "r2", "r3"}
    from app.schemas import LiveFigure  # what GET /evaluation lists, from latest.json
    live = LiveFigure.model_validate(json.loads((Path(out["report"]).parent / "latest.json").read_text()))
    assert (live.MAP, live.P_at_1, live.questions, live.ranker) == (out["MAP@10"], 1.0, 3, "search-questions")
    # the answers the forum judged useful in a duplicate's group answer it: demo[2]'s accepted answer answers r1
    # (demo[9]'s group holds no accepted answer: r2 and r3 are not asked); by votes, demo[9]'s voted one too
    refused = run("evaluate", "--duplicates", "--judged-by", "votes")
    assert refused.returncode == 2 and "--judged-by goes with --answers, or with --duplicates --target answers" in \
        refused.stderr
    done = run("evaluate", "--duplicates", "--target", "answers", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["benchmark"], out["judged_by"], out["questions"], out["ranker"]) == \
        ("forum-duplicates-answers-accepted", "accepted", 1, "search-answers")
    report = json.loads((Path(out["report"]) / "report.json").read_text())
    assert set(report["per_question_ap"]) == {"r1"} and report["linked_without_a_judged_answer"] == 2
    assert [line.split()[2] for line in (Path(out["report"]) / "qrels.trec").read_text().splitlines()] == \
        [demo[2].answers[1].id]
    done = run("evaluate", "--duplicates", "--target", "answers", "--judged-by", "votes", "--json")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    report = json.loads((Path(out["report"]) / "report.json").read_text())
    assert set(report["per_question_ap"]) == {"r1", "r2", "r3"} and out["benchmark"] == "forum-duplicates-answers-votes"
    assert 0 < out["MAP@10"] <= 1 and out["compare"]["run"] == "first-stage"


def test_cqa_ingest_mirror_removes_what_the_site_removed_and_keeps_the_forums_newer_threads(tmp_path, cli_env):
    """A forum re-imported from its site's next dump with --mirror: the questions the site removed go, the answers it
    removed go with their thread's new version, a thread or a comment the forum got after the dump was made stays; a
    removed thread sent again is stored again (a removal is not a takedown)."""
    from indexing.models import Answer, Thread
    demo = load(DEMO).threads
    store_path = tmp_path / "var" / "threads.sqlite3"

    def ingest(*args):
        run = subprocess.run(CQA + ["ingest", *args, "-q"], env=cli_env, capture_output=True, cwd=ROOT, text=True)
        return run.returncode, json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else None, \
            run.stderr

    write_dump(demo, tmp_path / "week1")
    assert ingest(str(tmp_path / "week1"))[0] == 0
    newer = Thread(id="forum-1", subject="Posted on the forum after the dump", body="Where do I renew it?",
                   created_at="2016-01-03T09:00:00", answers=[Answer(id="forum-1_c1", text="At the ministry.")])
    older = Thread(id="forum-0", subject="Removed on the site long ago", body="?", created_at="2015-02-01T09:00:00")
    undated = Thread(id="forum-u", subject="No date, no copy in the dump", body="?")
    with ThreadStore(store_path) as store:
        store.upsert([newer, older, undated])
        store.upsert_answers(demo[6].id, [Answer(id="forum-c1", text="Still true?", created_at="2016-01-04T08:00:00")])
        store.upsert_answers(demo[7].id, [Answer(id="site-c9", text="Removed on the site.",
                                                 created_at="2015-06-01T08:00:00")])
    site = [t for i, t in enumerate(demo) if i not in (3, 4)]
    site[3] = site[3].model_copy(update={"answers": site[3].answers[1:]})  # demo[5]: its first answer removed
    write_dump(site, tmp_path / "week2")

    code, summary, err = ingest(str(tmp_path / "week2"), "--mirror")  # 4 of 36 is more than the default 10%
    assert code == 3 and "would remove 4 of the 36 threads stored, more than the limit (10%)" in err
    assert summary["mirror"]["removed"] == 0 and summary["store"]["threads"] == 36 and summary["updated"] == 2
    with ThreadStore(store_path) as store:
        fingerprint = store.fingerprint()
    code, summary, err = ingest(str(tmp_path / "week2"), "--mirror", "--max-remove", "4", "--dry-run")
    assert code == 0 and "dry run: nothing was written" in err, err
    assert summary["dry_run"] and summary["mirror"]["removed"] == 4 and summary["store"]["threads"] == 36
    with ThreadStore(store_path) as store:
        assert store.fingerprint() == fingerprint and "forum-0" in store.dated_ids()
    code, summary, err = ingest(str(tmp_path / "week2"), "--mirror", "--max-remove", "4")
    assert code == 0 and "dry_run" not in summary, err
    assert summary["mirror"] == {"removed": 4, "absent": 5, "kept_newer": 1, "newest_post": "2016-01-02T17:05:00",
                                 "limit": "4", "comments_kept_newer": 1}
    assert summary["updated"] == 0 and summary["store"]["threads"] == 32
    with ThreadStore(store_path) as store:
        held = set(store.dated_ids())
        assert {demo[3].id, demo[4].id, "forum-0", "forum-u"}.isdisjoint(held) and "forum-1" in held
        assert [a.id for a in store.get(demo[5].id).answers] == [a.id for a in demo[5].answers[1:]]
        assert [a.id for a in store.get(demo[6].id).answers] == [a.id for a in demo[6].answers] + ["forum-c1"]
        assert [a.id for a in store.get(demo[7].id).answers] == [a.id for a in demo[7].answers]
    again = ingest(str(tmp_path / "week2"), "--mirror", "--max-remove", "0")[1]  # the same dump: nothing to do
    assert (again["inserted"], again["updated"], again["mirror"]["removed"]) == (0, 0, 0)
    assert ingest(str(tmp_path / "week1"))[1]["inserted"] == 2  # sent again, stored again

    write_dump(sorted(demo, key=lambda t: t.created_at)[-10:], tmp_path / "part")  # 23 of 34 threads would go
    code, summary, err = ingest(str(tmp_path / "part"), "--mirror", "--max-remove", "50%")
    assert code == 3 and "would remove 23 of the 34 threads stored, more than the limit (50%)" in err
    assert summary["mirror"]["removed"] == 0 and summary["store"]["threads"] == 34
    code, summary, err = ingest(str(tmp_path / "part"), "--mirror", "--max-remove", "23")
    assert code == 0 and summary["store"]["threads"] == 11, err  # ten of the dump's and the newer one

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "Posts.xml").write_text(POSTS)
    code, summary, err = ingest(str(tmp_path / "bad"), "--mirror", "--max-remove", "100%")
    assert code == 3 and "4 records were skipped" in err and summary["store"]["threads"] == 12

    code, _, err = ingest(str(tmp_path / "week1"), "--max-remove", "5")
    assert code == 2 and "--max-remove limits --mirror" in err
    code, _, err = ingest(str(tmp_path / "week1"), "--mirror", "--max-remove", "150%")
    assert code == 2 and "a share is at most 100%" in err


@pytest.mark.parametrize("text, count, share", [("25", 25, None), ("10%", None, 0.1), (" 0 ", 0, None),
                                                ("2.5%", None, 0.025)])
def test_a_removal_limit_is_a_count_or_a_share(text, count, share):
    from indexing.ingest import RemovalLimit
    limit = RemovalLimit.parse(text)
    assert (limit.count, limit.share) == (count, share)
    cap = count if count is not None else int(1000 * share)
    assert limit.allows(cap, 1000) and not limit.allows(cap + 1, 1000)
    for bad in ("", "ten", "2.5", "-3", "150%"):
        with pytest.raises(ValueError):
            RemovalLimit.parse(bad)


def test_a_dump_is_written_a_batch_at_a_time_as_it_would_be_whole(tmp_path, monkeypatch):
    """`cqa ingest` makes a dump's threads a batch at a time from its staged rows: the store is the one the whole
    file gives; a mirror's horizon is the whole dump's newest post, known before the first batch is written (a comment
    the site removed, dated before it, goes even from the first batch's threads); a batch the store refuses leaves
    the batches before it written, and says how many threads they held."""
    import indexing.stackexchange as se
    from indexing.ingest import RemovalLimit, ingest_paths
    from indexing.models import Answer, Thread
    from indexing.store import StoreError
    demo = load(DEMO).threads
    write_dump(demo, tmp_path / "dump", answers_first=3)  # some answers before their questions
    whole = load(tmp_path / "dump" / "Posts.xml")
    assert whole.batches is None and len(whole.threads) == 33
    monkeypatch.setattr(se, "BATCH_THREADS", 5)
    streamed = load(tmp_path / "dump" / "Posts.xml", stream=True)
    sizes = [len(b) for b in streamed.parts()]
    assert sizes == [5] * 6 + [3] and streamed.threads == [] and streamed.newest.isoformat() == "2016-01-02T17:05:00"

    with ThreadStore(tmp_path / "a.sqlite3") as store:
        store.upsert([demo[0].model_copy(update={"answers": [*demo[0].answers, Answer(
            id="gone-c1", text="Removed on the site.", created_at="2015-06-01T08:00:00")]})])
        told = []
        report = ingest_paths(store, [tmp_path / "dump"], progress=False, mirror=RemovalLimit(count=0),
                              on_progress=told.append)
        assert (report.threads, report.answers, report.mirror.removed, report.comments_kept_newer) == (33, 166, [], 0)
        # where it is, after each batch: the dump's questions made into threads, of its 33
        made = [(t.share, t.threads) for t in told if t.file == "Posts.xml" and t.share]
        assert made == [(k / 33, k) for k in (5, 10, 15, 20, 25, 30, 33)]
        assert told[-1].overall == 1.0 and told[-1].threads == 33
        assert [_shape(t) for t in store.iter_threads()] == [_shape(t) for t in whole.threads]

    with ThreadStore(tmp_path / "b.sqlite3") as store:
        clash = demo[20].answers[0].id
        store.upsert([Thread(id="other", subject="s", body="b", answers=[Answer(id=clash, text="mine")])])
        with pytest.raises(StoreError) as refused:
            ingest_paths(store, [tmp_path / "dump"], progress=False)
        assert refused.value.written_before == 20 and store.counts()["threads"] == 21


def test_a_dump_that_cannot_be_staged_is_a_clear_error(tmp_path, monkeypatch):
    """The temporary folder a dump is staged in cannot take it (full, or not writable): a LoadError naming the folder
    and TMPDIR, and nothing written."""
    import sqlite3

    import indexing.stackexchange as se
    write_dump(load(DEMO).threads, tmp_path / "dump")

    def full(*a, **k):
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(se.Staged, "_add", full)
    with pytest.raises(LoadError, match="cannot stage its rows in .*: database or disk is full; set TMPDIR"):
        load(tmp_path / "dump" / "Posts.xml", stream=True)
