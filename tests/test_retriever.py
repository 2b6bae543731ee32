import numpy as np
import pytest

from indexing.models import Answer, Thread
from indexing.reindex import reindex
from indexing.searcher import load_current
from indexing.store import ThreadStore
from indexing.translation import TranslationTable
from ranking.expansion import rm3, translation_expansion
from ranking.retriever import Filters, Retriever, RetrieverConfig, TagSynonyms, TagsNotIndexed

from .test_indexes import fake_encode


def test_ibm_model1_learns_a_translation():
    # "visa" questions are always answered with "permit"; "car" questions with "licence".
    pairs = [(["visa", "how"], ["permit", "office"]), (["visa", "renew"], ["permit", "fee"]),
             (["visa", "family"], ["permit", "salary"]), (["car", "how"], ["licence", "office"]),
             (["car", "buy"], ["licence", "dealer"]), (["car", "renew"], ["licence", "fee"])] * 2
    tm = TranslationTable.train(pairs, iterations=10, min_count=1)
    assert tm.translations("visa", 1)[0][0] == "permit"
    assert tm.translations("car", 1)[0][0] == "licence"
    assert tm.prob("permit", "visa") > 0.5
    row_sums = np.asarray(tm.table.sum(axis=1)).ravel()
    np.testing.assert_allclose(row_sums[row_sums > 0], 1.0)  # each source word's t(.|e) is a distribution


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_unique_inverse_is_numpys(dtype):
    """IBM Model 1's keys come in runs (one per question-answer pair) with many repeats; the stable sort must give
    np.unique's own arrays, so a table trained now is the table trained before, bit for bit."""
    from indexing.translation import unique_inverse
    rng = np.random.default_rng(5)
    runs = [np.sort(rng.integers(0, 50_000, size=rng.integers(1, 300))) for _ in range(400)]
    key = np.concatenate(runs + [rng.integers(0, 2**31 - 1, size=5_000)]).astype(dtype)
    uniq, inv = unique_inverse(key)
    ref_uniq, ref_inv = np.unique(key, return_inverse=True)
    assert uniq.dtype == key.dtype
    np.testing.assert_array_equal(uniq, ref_uniq)
    np.testing.assert_array_equal(inv, ref_inv)
    assert unique_inverse(np.zeros(0, dtype=dtype))[0].size == 0


@pytest.mark.parametrize("cells_per_key", [0.5, 8])  # a table of cells, and the sort when it would be larger
def test_index_keys_is_numpys(cells_per_key):
    from indexing.translation import index_keys
    rng = np.random.default_rng(7)
    cells = 60_000
    key = rng.integers(0, cells, size=int(cells / cells_per_key)).astype(np.int32)
    uniq, inv = index_keys(key, cells)
    ref_uniq, ref_inv = np.unique(key, return_inverse=True)
    np.testing.assert_array_equal(uniq, ref_uniq)
    np.testing.assert_array_equal(inv, ref_inv)
    assert uniq.dtype == key.dtype and inv.dtype == np.intp


def test_alignment_links_are_the_per_pair_outer_products():
    """The flat-array links, in the order one outer product per pair makes them, so the table's sums run as before:
    a question shared by answers (one list, as translation_pairs hands it), unknown words, a pair without a known
    target (skipped), a repeated word and a question longer than max_len."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from build_parts import reference_alignment_keys

    from indexing.translation import alignment_keys
    q1 = ["visa", "permit", "visa", "zzz", "renew", "fee"]
    q2 = ["salary", "bank"] + ["fee"] * 50
    pairs = [(q1, ["permit", "office", "visa"]), (q1, ["qqq"]), (q1, ["fee", "fee"]), (q2, ["bank", "visa"]),
             (["nothing", "known"], ["office"]), ([], ["renew", "bank", "salary"] * 20)]
    sid = {w: i for i, w in enumerate(["<null>", "bank", "fee", "permit", "renew", "salary", "visa"])}
    tid = {w: i for i, w in enumerate(["bank", "fee", "office", "permit", "renew", "salary", "visa"])}
    key, grp, g = alignment_keys(pairs, sid, tid, max_len=40)
    ref_key, ref_grp, ref_g = reference_alignment_keys(pairs, sid, tid, max_len=40)
    assert g == ref_g and key.dtype == ref_key.dtype
    np.testing.assert_array_equal(key, ref_key)
    np.testing.assert_array_equal(grp, ref_grp)
    assert alignment_keys([(q1, ["qqq"])], sid, tid, max_len=40) == (None, None, 0)


    class Fresh(list):  # each pair made anew when read: a freed list's id comes back for another question
        def __iter__(self):
            return ((list(q), list(a)) for q, a in super().__iter__())
    fresh = Fresh([(["visa"], ["permit"]), (["bank"], ["permit"]), (["fee"], ["permit"])] * 50)
    key, grp, g = alignment_keys(fresh, sid, tid, max_len=40)
    np.testing.assert_array_equal(key, reference_alignment_keys(list(fresh), sid, tid, max_len=40)[0])

    from indexing.reindex import pair_hashes
    np.testing.assert_array_equal(pair_hashes(fresh), pair_hashes(list(fresh)))


@pytest.fixture()
def gen(settings):
    threads = [
        Thread(id="v1", subject="visa renewal", body="how to renew my visa", category="Visas",
               created_at="2014-03-01 10:00:00", meta={"tags": ["Visa", "renewal", "visa", 7]},
               answers=[Answer(id="v1a", text="go to the immigration office for the residence permit",
                               created_at="2014-03-01 11:00:00"),
                        Answer(id="v1b", text="the residence permit costs 500", created_at="2014-03-02 11:00:00")]),
        Thread(id="v2", subject="family visa", body="visa for my wife", category="Visas",
               created_at="2015-06-01 10:00:00", meta={"tags": ["visa", "Family  Visit"]},
               answers=[Answer(id="v2a", text="you need a residence permit and salary letter",
                               created_at="2015-06-01 12:00:00")]),
        Thread(id="c1", subject="buy a car", body="cheap used car", category="Driving",
               created_at="2015-01-01 10:00:00", meta={"tags": "cars"},
               answers=[Answer(id="c1a", text="check the car history before you buy", created_at="2015-01-02 09:00:00")]),
    ]
    with ThreadStore(settings.store_path) as s:
        s.upsert(threads)
    reindex(settings, progress=False, encode_fn=fake_encode)
    g = load_current(settings.index_root)
    g.dense.embed = lambda q: fake_encode([q])[0]
    return g


def test_rm3_adds_feedback_terms(gen):
    e = rm3(gen, gen.analyzer("renew visa"), fb_docs=3, fb_terms=8)
    assert e.method == "rm3" and e.terms
    assert abs(sum(e.weights.values()) - 1.0) < 1e-9
    assert "visa" in e.weights and any(t not in ("renew", "visa") for t, _ in e.terms)


def test_translation_expansion_finds_permit_for_visa(gen):
    tm = TranslationTable.train([(gen.analyzer(q), gen.analyzer(a)) for q, a in [
        ("visa renewal", "residence permit office"), ("family visa", "residence permit salary")] * 3], min_count=1)
    e = translation_expansion(tm, gen.analyzer("visa"))
    assert {"resid", "permit"} & {t for t, _ in e.terms}
    # the generation's own model was trained by the reindex job from the store's pairs
    assert gen.translation_qa is not None and gen.translation_qa.translations("visa")


def test_targets_filters_and_fusion(gen):
    r = Retriever(gen, RetrieverConfig(("bm25", "lm", "dense"), "rrf"))
    ans = r.search("residence permit for visa", 10, "answers")
    assert ans.hits and all(h.doc_id.startswith("a:") for h in ans.hits)
    qs = r.search("visa", 10, "questions")
    assert {h.doc_id for h in qs.hits} <= {"q:v1", "q:v2", "q:c1"} and qs.hits[0].doc_id in ("q:v1", "q:v2")
    threads = r.search("residence permit", 10, "threads")
    assert threads.hits[0].doc_id in ("t:v1", "t:v2") and len({h.doc_id for h in threads.hits}) == len(threads.hits)
    only_driving = r.search("visa permit car", 10, "answers", Filters(category="Driving"))
    assert [h.doc_id for h in only_driving.hits] == ["a:c1a"]
    in_2015 = r.search("permit", 10, "answers", Filters(since="2015-01-01", until="2015-12-31"))
    assert {h.doc_id for h in in_2015.hits} <= {"a:v2a", "a:c1a"} and "a:v2a" in {h.doc_id for h in in_2015.hits}
    assert r.search("permit", 10, "answers", Filters(category="Nothing")).hits == []
    left_out = r.search("residence permit visa", 10, "answers", Filters(exclude_threads=("v1", "unknown")))
    assert left_out.hits and {h.doc_id for h in left_out.hits} <= {"a:v2a", "a:c1a"}  # neither of v1's comments
    others = r.search("renew my visa", 10, "threads", Filters(exclude_threads=("v1",)))
    assert others.hits and "t:v1" not in {h.doc_id for h in others.hits}
    expanded = r.search("visa", 5, "answers", expansion="rm3")
    assert expanded.expansion.method == "rm3" and set(expanded.timings_ms) >= {"bm25", "lm", "dense", "fusion"}
    with pytest.raises(ValueError, match="unknown target"):
        r.search("x", 3, "everything")


def test_tag_filters_keep_the_threads_that_carry_every_tag(gen):
    """``meta.tags`` (a list, or one string) reach the generation as each thread's tags, case and spacing ignored;
    a tag filter keeps the threads that carry every tag asked, for every target; a generation built before the
    tags column refuses the filter with what to run rather than finding nothing."""
    r = Retriever(gen, RetrieverConfig(("bm25", "lm", "dense"), "rrf"))
    assert [gen.docs.tags[gen.row[d]] for d in ("q:v1", "a:v1b", "q:v2", "a:c1a")] == [
        "renewal\nvisa", "renewal\nvisa", "family visit\nvisa", "cars"]

    def found(target, *tags, query="visa permit car renew family"):
        return {h.doc_id for h in r.search(query, 10, target, Filters(tags=tags)).hits}

    assert found("questions", "visa") == {"q:v1", "q:v2"}
    assert found("answers", "VISA", " family   visit ") == {"a:v2a"}
    assert found("threads", "cars") == {"t:c1"}
    assert found("questions", "visa", "cars") == set() and found("answers", "nothing") == set()
    left_out = r.search("visa permit car renew family", 10, "questions", Filters(exclude_tags=("Renewal", "cars")))
    assert {h.doc_id for h in left_out.hits} == {"q:v2"}
    both = r.search("visa permit car renew family", 10, "questions", Filters(tags=("visa",), exclude_tags=("renewal",)))
    assert {h.doc_id for h in both.hits} == {"q:v2"}
    both = r.search("residence permit", 10, "answers", Filters(category="Visas", tags=("renewal",)))
    assert {h.doc_id for h in both.hits} == {"a:v1a", "a:v1b"}

    def any_of(target, *tags, **more):
        return {h.doc_id for h in r.search("visa permit car renew family", 10, target,
                                           Filters(any_tags=tags, **more)).hits}
    assert any_of("questions", "Renewal", "cars") == {"q:v1", "q:c1"}  # one of them at least
    assert any_of("questions", "renewal") == found("questions", "renewal")
    assert any_of("questions", "renewal", "family visit", tags=("visa",)) == {"q:v1", "q:v2"}
    assert any_of("questions", "renewal", "cars", tags=("visa",)) == {"q:v1"}  # every one of tags, and one of these
    assert any_of("questions", "renewal", "cars", exclude_tags=("cars",)) == {"q:v1"}
    assert any_of("threads", "nothing", "cars") == {"t:c1"} and any_of("answers", "nothing") == set()

    def groups(*groups, **more):
        return {h.doc_id for h in r.search("visa permit car renew family", 10, "questions",
                                           Filters(tag_groups=groups, **more)).hits}
    # (a or b) and (c or d): q:v1 carries renewal and visa, q:v2 family visit and visa, q:c1 cars
    assert groups(("renewal", "cars"), ("visa", "nothing")) == {"q:v1"}
    assert groups(("renewal", "cars")) == any_of("questions", "renewal", "cars")  # one group: any of
    assert groups(("renewal", "family visit"), ("cars",)) == set()  # no thread carries one of each
    assert groups(("visa",), ("family visit", "cars"), any_tags=("renewal", "family visit")) == {"q:v2"}
    assert Filters(any_tags=("a",), tag_groups=(("b", "c"),)).alternatives() == [("a",), ("b", "c")]
    # synonyms: each tag stands for its family (its target, and the target's synonyms)
    synonyms = TagSynonyms.of({"visas": "visa", "auto": "cars", "automobile": "cars"})
    wide = Filters(tags=("Visas", "renewal"), exclude_tags=("auto",), any_tags=("cars",),
                   tag_groups=(("visa", "x"),)).with_synonyms(synonyms)
    assert wide == Filters(tags=("renewal",), exclude_tags=("cars", "auto", "automobile"),
                           any_tags=("cars", "auto", "automobile"), tag_groups=(("visa", "visas"),
                                                                                ("visa", "visas", "x")))
    plain = Filters(category="Visas")
    assert plain.with_synonyms(synonyms) is plain and wide.with_synonyms(TagSynonyms()) is wide
    assert synonyms.family(" AUTO ") == ("cars", "auto", "automobile") and synonyms.family("x") == ("x",)
    found_by = {h.doc_id for h in r.search("visa permit car renew family", 10, "questions",
                                           Filters(tags=("visas",)).with_synonyms(synonyms)).hits}
    assert found_by == found("questions", "visa")
    assert r.prepare().tag_counts == [("visa", 2), ("cars", 1), ("family visit", 1), ("renewal", 1)]
    assert r.tags_beginning() == (r.tag_counts, 4) and r.tags_beginning("", 1) == ([("visa", 2)], 4)
    assert r.tags_beginning(" VI") == ([("visa", 2)], 1) and r.tags_beginning("c") == ([("cars", 1)], 1)
    assert r.tags_beginning("family v") == ([("family visit", 1)], 1) and r.tags_beginning("x") == ([], 0)
    gen.manifest = {**gen.manifest, "documents_made": 1}
    with pytest.raises(TagsNotIndexed, match="cqa reindex"):
        Retriever(gen).search("visa", 10, "answers", Filters(tags=("visa",)))
    assert Retriever(gen).search("visa", 10, "answers", Filters(category="Visas")).hits  # other filters still serve


def test_thread_rows_are_ranges_from_the_question_rows_and_fall_back_row_by_row():
    """A generation holds each thread as consecutive rows from its question: the retriever's thread rows are ranges
    made from the question rows alone. Rows laid out otherwise are grouped row by row, with the same result."""
    from types import SimpleNamespace

    from indexing.documents import ANSWER, QUESTION
    from ranking.retriever import Retriever

    def retriever(tids, kinds):
        r = Retriever.__new__(Retriever)  # only what the thread rows read
        r.gen = SimpleNamespace(name="g", docs=SimpleNamespace(thread_ids=tids))
        r._kinds = np.array([k == ANSWER for k in kinds], dtype=bool)  # as Retriever makes it
        return r

    Q, A = QUESTION, ANSWER
    r = retriever(["t1", "t1", "t1", "t2", "t3", "t3"], [Q, A, A, Q, Q, A])
    assert all(isinstance(v, range) for v in r.thread_rows.values())
    assert {t: list(v) for t, v in r.thread_rows.items()} == {"t1": [0, 1, 2], "t2": [3], "t3": [4, 5]}
    assert {t: list(v) for t, v in r.thread_answer_rows.items()} == {"t1": [1, 2], "t2": [], "t3": [5]}
    r = retriever(["t1", "t1", "t2", "t1"], [Q, A, Q, A])  # t1's second comment after t2: not consecutive
    assert r.thread_rows == {"t1": [0, 1, 3], "t2": [2]} and r.thread_answer_rows == {"t1": [1, 3], "t2": []}
    assert retriever([], []).thread_rows == {}
