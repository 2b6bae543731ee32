import json
import math
import subprocess
import sys
import zlib
from collections import Counter

import numpy as np
import pytest

from indexing.bm25 import BM25Index
from indexing.generations import IndexFormatError, current_generation, list_generations
from indexing.lm import LMIndex
from indexing.loaders import load
from indexing.models import Answer, Thread
from indexing.reindex import ReindexError, reindex
from indexing.searcher import load_current
from indexing.store import ThreadStore
from indexing.termmatrix import TermMatrix, TokenIds, token_digests
from indexing.text import _TOKEN, Analyzer

from .conftest import ROOT

CORPUS = [["visa", "renew", "office"], ["visa", "visa", "family", "salary"], ["beach", "weekend"],
          ["salary", "bank", "account", "open"], ["family", "beach"]]


def test_analyzer_english_and_arabic():
    a = Analyzer()
    assert a("The Visas were RENEWED, quickly!") == ["visa", "renew", "quick"]
    raw = Analyzer(stopwords=False, stemmer=None)
    # diacritics and tatweel stripped; alef forms, ta marbuta and alef maqsura unified
    assert raw("أَحْمَد إبراهيم آمنة مـستشفى") == ["احمد", "ابراهيم", "امنه", "مستشفي"]
    assert raw("ﬁle Ｆｕｌｌ") == ["file", "full"]  # NFKC


def test_the_index_analyzer_stems_arabic_words_with_the_arabic_stemmer_and_an_older_manifest_did_not():
    """The index's analyzer gives words in Arabic script Snowball's Arabic stem (a plural meets its singular), the
    others the English one; the default analyzer (the rankers trained on English, and a manifest written before the
    setting existed) leaves Arabic words whole, so an older generation is queried as it was built, and its
    fingerprint differs, so the next build analyses every document again."""
    import Stemmer

    from indexing.text import INDEX_ANALYZER as a
    arabic = Stemmer.Stemmer("arabic")
    assert a("العلاجات renewed") == [arabic.stemWord("العلاجات"), "renew"]
    assert a("العلاجات") == a("علاج") and Analyzer()("العلاجات") == ["العلاجات"]
    older = {k: v for k, v in a.to_dict().items() if k != "arabic_stem"}
    assert Analyzer.from_dict(older) == Analyzer() and Analyzer.from_dict(a.to_dict()) == a
    assert Analyzer.from_dict(older).fingerprint() != a.fingerprint()
    assert Analyzer(stemmer="arabic")("العلاجات") == a("العلاجات")  # the Arabic analyzer: every word Arabic-stemmed
    assert Analyzer(stemmer=None, arabic_stem=True)("العلاجات") == ["العلاجات"]  # no stemmer: nothing stemmed


@pytest.mark.parametrize("language", ["english", "arabic"])
def test_compiled_stemmer_stems_every_corpus_word_as_snowball_does(language, semeval, comments):
    """The analyzer stems with PyStemmer (C), which snowballstemmer hands out when it is installed, about 20x
    faster than its pure-Python stemmers; both are generated from the same Snowball algorithms. Every word of the
    English questions and comments the corpus and the search benchmarks hold (2016 train part 2, dev, test) and of
    the Arabic dev file (subtask D) must get the stem the pure-Python one gives."""
    import gzip
    import importlib

    import Stemmer
    assert isinstance(Analyzer(stemmer=language)._stem, Stemmer.Stemmer)
    if language == "english":
        files = ["train/SemEval2016-Task3-CQA-QL-train-part2.xml", "dev/SemEval2016-Task3-CQA-QL-dev.xml",
                 "test/SemEval2016-Task3-CQA-QL-test.xml"]
        docs = [load(semeval / f) for f in files]
        texts = comments + [t.question_text for d in docs for t in d.threads] + [q.text for d in docs
                                                                                for q in d.org_questions.values()]
    else:
        with gzip.open(semeval / "arabic" / "SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.gz", "rt", encoding="utf-8") as f:
            texts = [f.read()]
    words = sorted({w for t in texts for w in _TOKEN.findall(Analyzer().normalize(t))})
    assert len(words) > 20_000
    pure = getattr(importlib.import_module(f"snowballstemmer.{language}_stemmer"), f"{language.title()}Stemmer")()
    compiled = Stemmer.Stemmer(language)
    differ = [(w, a, b) for w, a, b in zip(words, (pure.stemWord(w) for w in words), compiled.stemWords(words)) if a != b]
    assert differ == []


@pytest.mark.parametrize("language", ["english", "arabic"])
def test_one_analyzers_stemmer_shared_by_threads_stems_as_it_does_alone(language):
    """The serving threads (searches, /rerank, a build's analysis) share each analyzer's compiled stemmer, which keeps
    the word it is stemming in itself. PyStemmer holds the GIL while it stems, so threads cannot interleave inside
    a word: six threads, each stemming 60,000 words in its own order with the stemmer's own cache off, must get every
    stem a stemmer of their own gives."""
    import random
    import threading

    import Stemmer
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz" if language == "english" else "ابتثجحخدذرزسشصضطظعغفقكلمنهوي"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 24))) for _ in range(60_000)]
    alone = dict(zip(words, Stemmer.Stemmer(language).stemWords(words)))
    shared = Analyzer(stemmer=language)._stem
    shared.maxCacheSize = 0  # every call stems
    wrong: list[int] = []

    def stem_all(seed: int) -> None:
        order = words[:]
        random.Random(seed).shuffle(order)
        wrong.append(sum(shared.stemWord(w) != alone[w] for w in order))
    threads = [threading.Thread(target=stem_all, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [0] * 6
    assert sum(alone[w] != w for w in words) > 1000  # the words do get stemmed: the check can see a wrong stem


def test_token_ids_carried_over_are_what_analysing_every_document_gives(tmp_path):
    """A build carries a kept document's term ids from the live generation's term matrix (``TokenIds.carried``): kept
    documents in another order, some gone (with the only use of a term), new ones with new terms, an empty one. The
    ids, vocabulary order, offsets and digests must be those of numbering every token list afresh (``TokenIds.of``),
    and so must the term matrix saved from them, file for file."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    live_lists = [list(rng.choice(words, size=rng.integers(0, 12))) for _ in range(40)] + [["only_here", "w1"]]
    live = TokenIds.of(live_lists, digest=True)
    assert live.lists() == live_lists and live.vocab[:2] == [live_lists[0][0], live_lists[0][1]]
    keep = rng.permutation(40)[:30]  # the last live document, the only one with "only_here", is gone
    fresh = [["brand", "new", "w3"], [], ["new", "w59", "again"]]
    live_row = np.concatenate([keep[:10], [-1], keep[10:25], [-1, -1], keep[25:]])
    now_lists, fresh_left = [], iter(fresh)
    for r in live_row.tolist():
        now_lists.append(live_lists[r] if r >= 0 else next(fresh_left))
    live_folder = tmp_path / "live"
    TermMatrix.of(live).save(live_folder)
    carried = TokenIds.carried(TokenIds.load(live_folder), live_row, fresh)
    expected = TokenIds.of(now_lists, digest=True)
    assert carried.vocab == expected.vocab and "only_here" not in carried.vocab
    np.testing.assert_array_equal(carried.ids, expected.ids)
    np.testing.assert_array_equal(carried.offsets, expected.offsets)
    np.testing.assert_array_equal(carried.digests, expected.digests)
    assert carried.lists(np.array([10, 3])) == [fresh[0], now_lists[3]]
    for name, ids in (("carried", carried), ("fresh", expected)):
        TermMatrix.of(ids).save(tmp_path / name)
    for f in sorted(p.name for p in (tmp_path / "fresh").iterdir()):
        assert (tmp_path / "carried" / f).read_bytes() == (tmp_path / "fresh" / f).read_bytes(), f
    with pytest.raises(ValueError, match="2 token lists"):
        TokenIds.carried(live, live_row, fresh[:2])


def test_token_digests_tell_token_bounds_and_order():
    d = token_digests([["a b"], ["a", "b"], ["b", "a"], ["a", "b"], []])
    assert d.shape == (5, 2) and d.dtype == np.uint64
    assert len({tuple(r) for r in d.tolist()}) == 4 and (d[1] == d[3]).all()


def test_bm25_by_hand():
    tm = TermMatrix.build(CORPUS)
    bm = BM25Index.build(tm, k1=1.2, b=0.75, idf="lucene")
    n, avgdl = 5, 15 / 5
    idf = math.log1p((n - 2 + 0.5) / (2 + 0.5))  # "visa" is in 2 documents
    dl = 4
    expected = idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * dl / avgdl))
    assert bm.scores(["visa"])[1] == pytest.approx(expected)
    assert bm.scores(["unknown"]).sum() == 0


@pytest.fixture(scope="module")
def comments(semeval):
    files = ["train/SemEval2016-Task3-CQA-QL-train-part2.xml", "dev/SemEval2016-Task3-CQA-QL-dev.xml",
             "test/SemEval2016-Task3-CQA-QL-test.xml"]
    return [a.text for f in files for t in load(semeval / f).threads for a in t.answers]


def test_bm25_matches_rank_bm25_on_every_semeval_comment(comments):
    from rank_bm25 import BM25Okapi
    an = Analyzer()
    tokens = [an(c) for c in comments]
    assert len(tokens) == 18700
    ref = BM25Okapi(tokens, k1=1.2, b=0.75)
    ours = BM25Index.build(TermMatrix.build(tokens), k1=1.2, b=0.75, idf="okapi")
    rng = np.random.default_rng(7)
    for qi in rng.choice(len(tokens), 25, replace=False):
        q = tokens[qi][:12] or ["visa"]
        a, b = ref.get_scores(q), ours.scores(q)
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-9)
        top_ref = np.argsort(-a, kind="stable")[:10]
        top_ours = np.argsort(-b, kind="stable")[:10]
        assert list(top_ref) == list(top_ours)


def test_lm_against_direct_log_likelihood():
    tm = TermMatrix.build(CORPUS)
    cf = Counter(t for d in CORPUS for t in d)
    total = sum(cf.values())
    query = ["visa", "salary", "visa"]
    for smoothing, mu, lam in (("dirichlet", 3.0, 0.7), ("jelinek-mercer", 3.0, 0.4)):
        lm = LMIndex(tm, smoothing, mu=mu, lam=lam)
        got = lm.scores(query)
        for i, d in enumerate(CORPUS):
            c = Counter(d)
            direct = 0.0
            for w in query:
                pc = cf[w] / total
                if smoothing == "dirichlet":
                    direct += math.log((c[w] + mu * pc) / (len(d) + mu))
                else:
                    direct += math.log((1 - lam) * c[w] / len(d) + lam * pc)
            assert got[i] == pytest.approx(direct, rel=1e-9)


def fake_encode(texts):
    """A deterministic stand-in for the encoder: hashed bag of words, normalised (fast, no model)."""
    out = np.zeros((len(texts), 384), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, zlib.crc32(w.encode()) % 384] += 1.0  # not hash(): the same in every process
        out[i] /= max(np.linalg.norm(out[i]), 1e-9)
    return out


def fill_store(settings, n=40):
    with ThreadStore(settings.store_path) as s:
        s.upsert([Thread(id=f"t{i}", subject=f"question {i} about visa {i % 3}", body="body text",
                         category="Visas" if i % 2 else "Housing",
                         answers=[Answer(id=f"t{i}_a{j}", text=f"answer {j} on rent {i}") for j in range(3)])
                  for i in range(n)])


def test_build_save_load_same_results(settings):
    fill_store(settings)
    summary = reindex(settings, progress=False, encode_fn=fake_encode)
    assert summary["documents"] == {"total": 160, "questions": 40, "answers": 120}
    g = load_current(settings.index_root)
    assert g.name == summary["generation"]
    bm = BM25Index.build(g.terms, k1=settings.bm25_k1, b=settings.bm25_b)
    np.testing.assert_allclose(g.bm25.index.scores(["visa"]), bm.scores(["visa"]))
    hits = g.bm25.search("visa question 7", 5)
    assert hits[0].doc_id == "q:t7"
    assert g.lm.search("visa question 7", 5)[0].doc_id == "q:t7"
    q = fake_encode(["question 7 about visa 1 body text"])[0]
    assert g.dense.index.search_vectors(q, 3, g.docs.ids)[0].doc_id == "q:t7"
    again = load_current(settings.index_root)
    assert [h.doc_id for h in again.bm25.search("rent 3", 10)] == [h.doc_id for h in g.bm25.search("rent 3", 10)]


def test_cache_skips_unchanged_documents(settings):
    fill_store(settings)
    first = reindex(settings, progress=False, encode_fn=fake_encode)
    assert first["indexes"]["dense"]["encoded"] == 160
    with ThreadStore(settings.store_path) as s:
        s.upsert([Thread(id="new", subject="a new question", answers=[Answer(id="new_a", text="fresh")])])
    second = reindex(settings, progress=False, encode_fn=fake_encode)
    assert second["indexes"]["dense"]["encoded"] == 2 and second["indexes"]["dense"]["from_cache"] == 160


def test_generations_are_pruned_and_unknown_formats_refused(settings):
    fill_store(settings, 5)
    settings = settings.model_copy(update={"keep_generations": 2})
    names = [reindex(settings, progress=False, skip_dense=True)["generation"] for _ in range(3)]
    assert list_generations(settings.index_root) == sorted(names[1:])
    assert current_generation(settings.index_root) == names[-1]
    m = settings.index_root / names[-1] / "bm25" / "manifest.json"
    m.write_text(json.dumps({**json.loads(m.read_text()), "format_version": 99}))
    with pytest.raises(IndexFormatError, match="format version 99 of 'bm25' is unknown"):
        load_current(settings.index_root)


def test_empty_store_is_a_clear_error(settings):
    with pytest.raises(ReindexError, match="store is empty"):
        reindex(settings, progress=False, skip_dense=True)


def test_killed_reindex_leaves_live_generation(settings, cli_env):
    fill_store(settings, 5)
    live = reindex(settings, progress=False, skip_dense=True)["generation"]
    env = {**cli_env, "CQA_DATA_DIR": str(settings.data_dir), "CQA_TEST_CRASH_BEFORE_PUBLISH": "1"}
    p = subprocess.run([sys.executable, "-m", "app.cli", "reindex", "--no-dense", "-q"], env=env,
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == -9
    assert current_generation(settings.index_root) == live
    assert any(x.name.startswith(".tmp-") for x in settings.index_root.iterdir())
    assert load_current(settings.index_root).bm25.search("question", 3)
    nxt = reindex(settings, progress=False, skip_dense=True)  # cleans the debris and publishes
    assert not any(x.name.startswith(".tmp-") for x in settings.index_root.iterdir())
    assert current_generation(settings.index_root) == nxt["generation"]


def test_lm_smoothing_setting_reaches_the_built_index(settings):
    """CQA_LM_SMOOTHING / CQA_LM_LAMBDA are read by reindex: Jelinek-Mercer scores differ from Dirichlet."""
    fill_store(settings)
    reindex(settings, progress=False, skip_dense=True)
    dirichlet = load_current(settings.index_root)
    assert dirichlet.lm.index.params == {"smoothing": "dirichlet", "mu": 2000.0, "lambda": 0.7}
    jm = settings.model_copy(update={"lm_smoothing": "jelinek-mercer", "lm_lambda": 0.3})
    reindex(jm, progress=False, skip_dense=True)
    g = load_current(settings.index_root)
    assert g.lm.index.params == {"smoothing": "jelinek-mercer", "mu": 2000.0, "lambda": 0.3}
    assert not np.allclose(g.lm.index.scores(["visa", "rent"]), dirichlet.lm.index.scores(["visa", "rent"]))


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_indexes_search_inside_the_filter(kind):
    """HNSW and IVF (the kinds above CQA_DENSE_EXACT_MAX_DOCS) return only allowed rows, and nearly the
    exact top 10 among them (a plain search-parameter object made IVF refuse every filtered search)."""
    from indexing.dense import DenseIndex
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(60, 32))  # clustered, as sentence embeddings are
    x = (centres[rng.integers(0, 60, 3000)] + 0.3 * rng.normal(size=(3000, 32))).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(len(x))]
    allowed = np.arange(0, len(x), 3)
    approx, exact = DenseIndex.build(x, kind=kind), DenseIndex.build(x, kind="flat")
    overlap = []
    for q in x[rng.choice(len(x), 20, replace=False)] + 0.1 * rng.normal(size=(20, 32)).astype(np.float32):
        got = approx.search_vectors(q, 10, ids, allowed)
        assert got and all(int(h.doc_id[1:]) % 3 == 0 for h in got)
        want = {h.doc_id for h in exact.search_vectors(q, 10, ids, allowed)}
        overlap.append(len(want & {h.doc_id for h in got}) / 10)
    assert np.mean(overlap) >= 0.8, overlap


def test_documents_file_round_trips_and_reads_the_older_json_files(tmp_path):
    """documents.bin: the same documents back, with newlines, any script, a lone surrogate, None and repeated values
    in the coded columns; its texts decoded as they are read (``Texts``: indexing, negative indexes, slices, equal to
    the list, pickled as it); a generation's documents.json from before (JSON lines, or one JSON object) still loads;
    a file cut short or with offsets that do not fit is an error, not fewer or wrong documents."""
    import json
    import pickle

    from indexing.documents import Documents, Texts, TextRuns, documents_file
    d = Documents()
    arabic = "\u0627\u0644\u0641\u064a\u0632\u0627"
    for i in range(8):
        d._add(f"a:{i}", "answer" if i else "question", f"t{i // 3}", None if i % 2 else "Visas",
               None if i == 3 else f"2016-01-0{i // 2 + 1}", f"line one\nline {i} {arabic} \"q\"",
               None if i // 3 == 1 else "python\nvisas and permits")
    d.texts[5] = "a lone surrogate \ud800 and an emoji \U0001F600"
    d.save(tmp_path / "documents.bin")
    got = Documents.load(tmp_path / "documents.bin")
    assert got == d and got.__dict__ == d.__dict__ and isinstance(got.texts, Texts) and isinstance(got.ids, list)
    assert got.texts[5] == d.texts[5] and got.texts[-1] == d.texts[7] and got.texts[2:4] == d.texts[2:4]
    for cut in (slice(None), slice(3, None), slice(-3, -1), slice(5, 2), slice(6, 99), slice(1, 7, 2),
                slice(None, None, -1), slice(99, 100)):
        assert got.texts[cut] == d.texts[cut], cut
    # runs of mapped texts and of plain ones (what a build copies of a live generation): read as the list they
    # stand for, and saved as the same bytes without decoding the mapped ones
    runs, want = TextRuns(), []
    for texts, first, end in ((got.texts, 5, 8), (["fresh \ud800 one", "two"], 0, 2), (got.texts, 0, 3),
                              (got.texts, 4, 4), (["three"], 0, 1), (got.texts, 3, 5)):
        runs.extend(texts, first, end)
        want += list(texts[first:end])
    assert runs == want and list(runs) == want and len(runs) == 11 and runs[-1] == want[-1] and runs[4] == "two"
    assert runs[2:9] == want[2:9] and runs[::-3] == want[::-3] and pickle.loads(pickle.dumps(runs)) == want
    with pytest.raises(IndexError):
        runs[11]
    columns = {"ids": [f"x{i}" for i in range(11)], "kinds": ["answer"] * 11, "thread_ids": ["t"] * 11,
               "categories": [None] * 11, "created_at": [None] * 11, "tags": [None] * 11}
    copied, plain = Documents(**columns, texts=runs), Documents(**columns, texts=want)
    copied.save(tmp_path / "runs.bin")
    plain.save(tmp_path / "plain.bin")
    assert (tmp_path / "runs.bin").read_bytes() == (tmp_path / "plain.bin").read_bytes()
    assert Documents.load(tmp_path / "runs.bin").texts == want
    assert list(got.texts) == d.texts and len(got.texts) == 8 and got.texts != d.texts[:7]
    with pytest.raises(IndexError):
        got.texts[8]
    assert pickle.loads(pickle.dumps(got.texts)) == d.texts
    assert got.categories[1] is None and got.created_at[3] is None and got.categories[0] == "Visas"
    assert got.tags[3] is None and got.tags[0] == "python\nvisas and permits"
    # a file written before the tags column (round 55) reads None in every row
    before = Documents(**{k: list(v) for k, v in d.__dict__.items()})
    del before.__dict__["tags"]
    before.save(tmp_path / "before-tags.bin")
    assert Documents.load(tmp_path / "before-tags.bin") == Documents(**{**d.__dict__, "tags": [None] * 8})
    head = (tmp_path / "documents.bin").read_bytes().split(b"\n", 1)[0]
    assert (len(head) + 1) % 8 == 0 and json.loads(head)["documents"] == 8
    plain = {k: v for k, v in d.__dict__.items() if k != "texts"}  # JSON cannot hold the lone surrogate
    plain["texts"] = [t.replace("\ud800", "?") for t in d.texts]
    d.texts = plain["texts"]
    # version 2 (round 18): a header line, then the columns of a chunk of documents a line
    lines = [json.dumps({"format": "documents", "version": 2, "documents": 8, "chunk": 3})]
    lines += [json.dumps({k: v[lo:lo + 3] for k, v in plain.items()}, ensure_ascii=False) for lo in range(0, 8, 3)]
    (tmp_path / "documents.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert Documents.load(tmp_path / "documents.json") == d
    (tmp_path / "old.json").write_text(json.dumps(plain, ensure_ascii=False), encoding="utf-8")  # before round 18
    assert Documents.load(tmp_path / "old.json") == d
    untagged = {k: v for k, v in plain.items() if k != "tags"}  # both written before the tags column
    (tmp_path / "old-untagged.json").write_text(json.dumps(untagged, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "v2-untagged.json").write_text("\n".join(lines[:1] + [json.dumps(
        {k: v[lo:lo + 3] for k, v in untagged.items()}, ensure_ascii=False) for lo in range(0, 8, 3)]) + "\n")
    for name in ("old-untagged.json", "v2-untagged.json"):
        assert Documents.load(tmp_path / name) == Documents(**{**d.__dict__, "tags": [None] * 8}), name
    (tmp_path / "cut.json").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="8 documents announced"):
        Documents.load(tmp_path / "cut.json")
    whole = (tmp_path / "documents.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(whole[:-9])
    with pytest.raises(ValueError, match="cut short"):
        Documents.load(tmp_path / "cut.bin")
    place = json.loads(head)["sections"]["texts.offsets"]
    at = len(head) + 1 + place[0] + 8 * 8  # the last text's end offset, past its bytes
    (tmp_path / "bad.bin").write_bytes(whole[:at] + (10 ** 9).to_bytes(8, "little") + whole[at + 8:])
    with pytest.raises(ValueError, match="offsets do not fit"):
        Documents.load(tmp_path / "bad.bin")
    empty = Documents()
    empty.save(tmp_path / "empty.bin")
    assert Documents.load(tmp_path / "empty.bin") == empty
    assert documents_file(tmp_path) == tmp_path / "documents.bin"
    (tmp_path / "documents.bin").unlink()
    assert documents_file(tmp_path) == tmp_path / "documents.json"
