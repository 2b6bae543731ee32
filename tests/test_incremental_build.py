"""A rebuild reuses what the live generation computed for documents it holds as they are (indexing.reindex.Carried):
their term ids (analyse_carried: the indexes are byte for byte a full analysis's), and their vectors in the live HNSW
or IVF index, which it grows rather than building its own (grow_plan, DenseIndex.grown): only new texts are added,
gone and edited documents are never returned, and every document is found as a full build finds it."""
import filecmp
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from indexing.dense import DenseIndex
from indexing.documents import Documents
from indexing.models import Answer, Thread
from indexing.reindex import reindex
from indexing.rowvectors import RowVectors
from indexing.searcher import load_current
from indexing.store import ThreadStore

from .conftest import ROOT
from .test_indexes import fake_encode


def clustered(n, dim=32, seed=3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    x = (centres[rng.integers(0, 40, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("kind,fold_at", [("hnsw", 10_000), ("hnsw", 0), ("ivf", 10_000), ("ivf", 0)])
def test_a_grown_index_maps_its_rows_and_never_returns_a_removed_one(kind, fold_at, tmp_path):
    """Grown with its added vectors kept beside the FAISS index (the delta, searched exactly) or added to it
    (folded, ``fold_at`` 0): the same documents found, never a removed one."""
    x = clustered(2000)
    live = DenseIndex.build(x[:1500], kind=kind)
    # the new documents: old rows 0..1499 with every fifth gone, then 500 new ones; the order shifts
    keep = np.full(1500, -1, dtype=np.int64)
    kept = [f for f in range(1500) if f % 5]
    keep[kept] = np.arange(len(kept))
    added_rows = np.arange(len(kept), len(kept) + 500)
    grown = DenseIndex.grown(live, keep, added_rows, x[1500:], fold_at)  # a fresh build: its rows are its documents'
    assert len(grown.delta) == (500 if fold_at else 0) and grown.index.ntotal == (1500 if fold_at else 2000)
    vecs = np.concatenate([x[kept], x[1500:]])  # the new documents' vectors, by their row
    ids = [f"d{i}" for i in range(len(vecs))]
    assert grown.n_docs == len(vecs) and grown.removed == 300
    grown.save(tmp_path / "dense")
    loaded = DenseIndex.load(tmp_path / "dense")
    assert json.loads((tmp_path / "dense" / "manifest.json").read_text())["removed_rows"] == 300
    exact = DenseIndex.build(vecs, kind="flat")
    for index in (grown, loaded):
        np.testing.assert_array_equal(index.vector(17), vecs[17])
        np.testing.assert_array_equal(index.vector(len(vecs) - 1), vecs[-1])
        assert index.vector(len(vecs)) is None
        found = overlap = 0
        for row in range(0, len(vecs), 23):
            hits = index.search_vectors(vecs[row], 10, ids)
            assert len(hits) == 10 and len({h.doc_id for h in hits}) == 10
            found += hits[0].doc_id == ids[row]
            overlap += len({h.doc_id for h in hits} & {h.doc_id for h in exact.search_vectors(vecs[row], 10, ids)})
        n = len(range(0, len(vecs), 23))
        assert found >= 0.95 * n and overlap >= 0.8 * 10 * n, (found, overlap, n)
        allowed = np.arange(0, len(vecs), 4)
        got = index.search_vectors(vecs[8], 10, ids, allowed)
        assert got[0].doc_id == "d8" and all(int(h.doc_id[1:]) % 4 == 0 for h in got)
        # a removed vector is searched past: its own query finds a kept neighbour, never an unknown row
        for f in range(0, 1500, 5):
            assert all(h.doc_id in ids for h in index.search_vectors(x[f], 5, ids))


def hnsw_settings(settings, **more):
    return settings.model_copy(update={"dense_exact_max_docs": 0, **more})  # HNSW whatever the size


def threads(n, start=0, word="visa"):
    return [Thread(id=f"t{i}", subject=f"question {i} about {word} {i % 7}", body=f"body {i}",
                   answers=[Answer(id=f"t{i}_a{j}", text=f"answer {j} on rent {i} {word}") for j in range(2)])
            for i in range(start, start + n)]


def own_top(g, texts_by_id):
    """How many documents are their own text's top dense hit."""
    return sum(g.dense.index.search_vectors(fake_encode([t])[0], 1, g.docs.ids)[0].doc_id == d
               for d, t in texts_by_id.items())


def test_a_rebuild_grows_the_live_index_and_serves_what_a_full_build_serves(settings):
    s = hnsw_settings(settings)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(60))
    first = reindex(s, progress=False, encode_fn=fake_encode)
    assert first["indexes"]["dense"]["built"] == "hnsw" and first["indexes"]["dense"]["encoded"] == 180
    with ThreadStore(s.store_path) as st:
        st.delete("t3")
        edited = threads(1, start=5)[0]
        edited = edited.model_copy(update={"answers": [edited.answers[0], Answer(id="t5_a1", text="moved to doha")]})
        st.upsert([edited] + threads(10, start=100, word="beach"))
    second = reindex(s, progress=False, encode_fn=fake_encode)
    d = second["indexes"]["dense"]
    # t3's three documents and t5's edited comment marked removed; 30 new documents and the edit added
    assert d["grown_from"] == first["generation"]
    assert (d["kept"], d["added"], d["removed_rows"], d["encoded"]) == (176, 31, 4, 31)
    # the added vectors beside the FAISS file, which the new generation shares with the first (a hard link)
    assert (d["delta"], d["base"]) == (31, "linked")
    files = [s.index_root / gen / "dense" / "index.faiss" for gen in (first["generation"], second["generation"])]
    assert files[0].stat().st_ino == files[1].stat().st_ino
    g = load_current(s.index_root)
    assert g.dense.index.n_docs == len(g.docs) == 207
    texts = dict(zip(g.docs.ids, g.docs.texts))
    assert "q:t3" not in texts and texts["a:t5_a1"] == "moved to doha"
    gone = fake_encode(["answer 1 on rent 5 visa"])[0]  # the edited comment's old text
    assert all(h.score < 0.999 for h in g.dense.index.search_vectors(gone, 5, g.docs.ids))  # its row: never returned
    grown_found = own_top(g, {k: v for k, v in texts.items() if k.startswith("q:")})
    full = reindex(s, progress=False, encode_fn=fake_encode, grow_dense=False)
    assert full["indexes"]["dense"]["built"] == "hnsw" and full["indexes"]["dense"]["encoded"] == 0
    f = load_current(s.index_root)
    assert f.dense.index.removed == 0 and not (s.index_root / full["generation"] / "dense" / "rows.npy").exists()
    assert grown_found == own_top(f, {k: v for k, v in texts.items() if k.startswith("q:")}) == 69
    assert np.array_equal(g.dense_vector(g.row["a:t5_a1"]), f.dense_vector(f.row["a:t5_a1"]))


def test_too_many_removed_rows_build_the_index_anew(settings):
    s = hnsw_settings(settings, dense_grow_max_removed=0.2)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(20))
    reindex(s, progress=False, encode_fn=fake_encode)
    with ThreadStore(s.store_path) as st:
        for t in ("t1", "t2", "t3"):  # 9 of 60 rows: 15%
            st.delete(t)
    grown = reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]
    assert grown["removed_rows"] == 9
    with ThreadStore(s.store_path) as st:
        for t in ("t4", "t5"):  # 15 of 60 rows would be removed: 25%
            st.delete(t)
    rebuilt = reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]
    assert rebuilt["built"] == "hnsw" and "removed_rows" not in rebuilt
    assert load_current(s.index_root).dense.index.removed == 0


def test_a_flat_or_other_kind_of_live_index_is_not_grown(settings):
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(10))
    assert reindex(settings, progress=False, encode_fn=fake_encode)["indexes"]["dense"]["built"] == "flat"
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(1, start=50))
    s = hnsw_settings(settings)
    assert reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]["built"] == "hnsw"
    ivf = s.model_copy(update={"dense_index_kind": "ivf"})
    assert reindex(ivf, progress=False, encode_fn=fake_encode)["indexes"]["dense"]["built"] == "ivf"
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(1, start=60))
    assert "grown_from" in reindex(ivf, progress=False, encode_fn=fake_encode)["indexes"]["dense"]


def test_cqa_reindex_full_builds_anew(settings, cli_env):
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(10))
    env = {**cli_env, "CQA_DENSE_EXACT_MAX_DOCS": "0", "CQA_DENSE_ENCODER": "base", "CQA_ANSWER_ENCODER": "none"}
    runs = []
    for extra in ([], [], ["--full"]):
        with ThreadStore(settings.store_path) as st:
            st.upsert(threads(1, start=20 + len(runs)))
        p = subprocess.run([sys.executable, "-m", "app.cli", "reindex", "-q", *extra], env=env, capture_output=True,
                           text=True, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        runs.append(json.loads(p.stdout.strip().splitlines()[-1])["indexes"]["dense"])
    assert runs[0]["built"] == "hnsw" and runs[0]["encoded"] == 33
    assert runs[1]["added"] == runs[1]["encoded"] == 3 and runs[1]["kept"] == 33
    assert runs[2]["built"] == "hnsw" and (runs[2]["encoded"], runs[2]["from_cache"]) == (3, 36)


def test_a_rebuild_carries_kept_documents_term_ids_and_builds_the_same_indexes(settings, tmp_path):
    settings = settings.model_copy(update={"translation_retrain_changed": 0.0})  # the table trained, not kept
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(30))
    first = reindex(settings, progress=False, skip_dense=True)
    assert first["indexes"]["analyse"] == {**first["indexes"]["analyse"], "analysed": 90}
    with ThreadStore(settings.store_path) as st:
        st.delete("t2")
        st.upsert([threads(1, start=4, word="beach")[0]] + threads(3, start=40, word="salary"))  # t4 edited
    second = reindex(settings, progress=False, skip_dense=True)
    a = second["indexes"]["analyse"]
    assert (a["carried_from"], a["carried"], a["analysed"]) == (first["generation"], 84, 12)
    # the same store analysed from nothing, in another data folder
    alone = settings.model_copy(update={"data_dir": tmp_path / "alone"})
    alone.data_dir.mkdir()
    shutil.copy(settings.store_path, alone.store_path)
    full = reindex(alone, progress=False, skip_dense=True)
    assert full["indexes"]["analyse"] == {**full["indexes"]["analyse"], "analysed": 96}
    for part in ("terms", "bm25", "lm", "translation_qa"):
        ours, theirs = settings.index_root / second["generation"] / part, alone.index_root / full["generation"] / part
        names = sorted(p.name for p in theirs.iterdir())
        assert names == sorted(p.name for p in ours.iterdir()) and names
        assert all(filecmp.cmp(ours / n, theirs / n, shallow=False) for n in names), part
    assert "tokens.npy" in {p.name for p in (settings.index_root / second["generation"] / "terms").iterdir()}


def test_tokens_of_another_analysis_are_not_reused(settings, monkeypatch):
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(5))
    reindex(settings, progress=False, skip_dense=True)
    monkeypatch.setattr("indexing.text.ANALYSIS_VERSION", 999)  # as a release that analyses otherwise
    again = reindex(settings, progress=False, skip_dense=True)["indexes"]["analyse"]
    assert again["analysed"] == 15 and "carried" not in again


def test_kept_comments_vectors_are_copied_from_the_live_generation(settings):
    from indexing.encoder import encode
    from indexing.generations import ANSWER_VECTORS
    plain = settings.model_copy(update={"dense_encoder": "base"})
    with ThreadStore(plain.store_path) as st:
        st.upsert(threads(4))
    first = reindex(plain, progress=False)
    assert first["indexes"]["answer_vectors"]["encoded"] == 8 and "copied" not in first["indexes"]["answer_vectors"]
    with ThreadStore(plain.store_path) as st:
        edited = threads(1, start=1)[0]
        edited = edited.model_copy(update={"answers": [edited.answers[0], Answer(id="t1_a1", text="moved to doha")]})
        st.upsert([edited] + threads(1, start=10))
    second = reindex(plain, progress=False)["indexes"]["answer_vectors"]
    assert (second["copied"], second["encoded"], second["copied_from"]) == (7, 3, first["generation"])
    old = RowVectors.open(plain.index_root / first["generation"] / ANSWER_VECTORS)
    g = load_current(plain.index_root, "cpu")
    old_row = {d: i for i, d in enumerate(Documents.load(plain.index_root / first["generation"] / "documents.bin")
                                          .ids)}
    rows = [i for i, k in enumerate(g.docs.kinds) if k == "answer"]
    for i in rows:
        d = g.docs.ids[i]
        if d in old_row and d != "a:t1_a1":  # kept: the live generation's row, bit for bit
            assert np.array_equal(g.answer_vectors[i], old[old_row[d]])
    want = encode([g.docs.texts[i] for i in rows], device="cpu", spec=plain.answer_spec)
    assert np.allclose(g.answer_vectors[rows], want, atol=1e-5)
    assert not np.asarray(g.answer_vectors[[i for i in range(len(g.docs)) if i not in rows]]).any()


def test_a_build_links_the_live_comment_vectors_and_writes_only_the_new_ones(settings):
    """The comment vectors (345 MB at 235k documents) are not written again by each build: the live generation's
    file is hard-linked and only the new or edited comments' vectors are written beside it, until the base is written
    anew (``cqa reindex --full``, a generation in the older one-file layout, or too many dead rows)."""
    import os

    from indexing.encoder import encode
    from indexing.generations import ANSWER_VECTORS
    plain = settings.model_copy(update={"dense_encoder": "base"})
    with ThreadStore(plain.store_path) as st:
        st.upsert(threads(20))
    gens = [reindex(plain, progress=False)["generation"]]

    def base(gen):
        return plain.index_root / gen / ANSWER_VECTORS / "base.npy"

    def served():
        g = load_current(plain.index_root, "cpu")
        rows = [i for i, k in enumerate(g.docs.kinds) if k == "answer"]
        got = g.answer_vectors[rows]
        assert np.allclose(got, encode([g.docs.texts[i] for i in rows], device="cpu", spec=plain.answer_spec),
                           atol=1e-5)
        assert not np.asarray(g.answer_vectors[[i for i in range(len(g.docs)) if i not in rows]]).any()
        return g, dict(zip([g.docs.ids[i] for i in rows], got))

    _, before = served()
    with ThreadStore(plain.store_path) as st:  # a new thread and a comment more on t0
        t0 = threads(1)[0]
        st.upsert(threads(1, start=20) + [t0.model_copy(update={"answers": t0.answers + [
            Answer(id="t0_a9", text="the new office is near the souq")]})])
    summary = reindex(plain, progress=False)
    built = summary["indexes"]["answer_vectors"]
    assert built["base"] == "linked" and (built["copied"], built["encoded"], built["added"], built["dead"]) == \
        (40, 3, 3, 0), built
    assert os.path.samefile(base(gens[0]), base(summary["generation"]))
    gens.append(summary["generation"])
    _, after = served()
    assert all(np.array_equal(after[d], v) for d, v in before.items())  # kept: bit for bit
    with ThreadStore(plain.store_path) as st:  # an edit: its base row dead, its new vector added
        t1 = threads(1, start=1)[0]
        st.upsert([t1.model_copy(update={"answers": [t1.answers[0], Answer(id="t1_a1", text="moved to doha")]})])
    summary = reindex(plain, progress=False)
    built = summary["indexes"]["answer_vectors"]
    assert built["base"] == "linked" and (built["copied"], built["encoded"], built["added"], built["dead"]) == \
        (42, 1, 4, 1), built
    gens.append(summary["generation"])
    served()

    full = reindex(plain, progress=False, grow_dense=False)  # `cqa reindex --full`: one compact base, written
    built = full["indexes"]["answer_vectors"]
    assert built["base"] == "written" and (built["copied"], built["encoded"], built["added"], built["dead"]) == \
        (43, 0, 0, 0), built
    assert not os.path.samefile(base(gens[-1]), base(full["generation"]))
    served()

    # a generation in the older layout (one row per document) serves as before; the next build writes a compact base
    g = load_current(plain.index_root, "cpu")
    old = np.asarray(g.answer_vectors[list(range(len(g.docs)))])
    shutil.rmtree(g.folder / ANSWER_VECTORS)
    np.save(g.folder / "answer_vectors.npy", old)
    _, legacy = served()
    with ThreadStore(plain.store_path) as st:
        st.upsert(threads(1, start=30))
    built = reindex(plain, progress=False)["indexes"]["answer_vectors"]
    assert built["base"] == "written" and (built["copied"], built["encoded"]) == (43, 2), built  # 21 dead question rows
    _, now = served()
    assert all(np.array_equal(now[d], v) for d, v in legacy.items())


def test_damaged_live_comment_vectors_are_taken_from_the_cache_not_reused(settings, caplog):
    from indexing.generations import ANSWER_VECTORS
    plain = settings.model_copy(update={"dense_encoder": "base"})
    with ThreadStore(plain.store_path) as st:
        st.upsert(threads(6))
    first = reindex(plain, progress=False)
    rows = plain.index_root / first["generation"] / ANSWER_VECTORS / "rows.npy"
    rows.write_bytes(rows.read_bytes()[:40])  # cut short
    with ThreadStore(plain.store_path) as st:
        st.upsert(threads(1, start=6))
    built = reindex(plain, progress=False)["indexes"]["answer_vectors"]
    assert built["base"] == "written" and "copied" not in built and built["encoded"] == 2, built  # the rest: cached
    assert "not reusing its comment vectors" in caplog.text
    g = load_current(plain.index_root, "cpu")
    want = {d: v for d, v in zip(g.docs.ids, RowVectors.open(g.folder / ANSWER_VECTORS)[list(range(len(g.docs)))])}
    fresh = reindex(plain, progress=False, grow_dense=False)  # compact, written anew: the same vectors
    g = load_current(plain.index_root, "cpu")
    assert fresh["indexes"]["answer_vectors"]["copied"] == 14
    assert all(np.array_equal(g.answer_vectors[i], want[d]) for i, d in enumerate(g.docs.ids))


@pytest.mark.parametrize("damaged", ["terms/tokens.npy", "dense/index.faiss", "dense/rows.npy", "documents.bin"])
def test_a_damaged_live_generation_is_computed_again_not_reused(settings, damaged, caplog):
    """What a build reuses is an optimisation: a live generation it cannot read (a damaged file, another release's)
    costs the reuse and a warning, never the build."""
    s = hnsw_settings(settings)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(20))
    reindex(s, progress=False, encode_fn=fake_encode)
    with ThreadStore(s.store_path) as st:
        st.delete("t1")
    assert reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]["removed_rows"] == 3  # rows.npy
    live = load_current(s.index_root).folder
    (live / damaged).write_bytes(b"not what it was")
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(1, start=30))
    out = reindex(s, progress=False, encode_fn=fake_encode)["indexes"]
    assert "not reusing" in caplog.text
    if damaged in ("terms/tokens.npy", "documents.bin"):
        assert out["analyse"]["analysed"] == 60 and "carried" not in out["analyse"]
    if damaged != "terms/tokens.npy":
        assert out["dense"]["built"] == "hnsw"
    g = load_current(s.index_root)
    assert g.bm25.search("question 30 about visa", 1)[0].doc_id == "q:t30"
    assert g.dense.index.search_vectors(fake_encode(["question 30 about visa 2 body 30"])[0], 1,
                                        g.docs.ids)[0].doc_id == "q:t30"


def test_saved_token_ids_that_do_not_fit_the_live_documents_are_not_carried(settings, caplog):
    """Term ids saved for fewer documents than the live generation holds (here: one document's offsets, and no
    digests, as an older build saved them) are not carried: a warning, and every document analysed."""
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(5))
    reindex(settings, progress=False, skip_dense=True)
    terms = load_current(settings.index_root).folder / "terms"
    n_tokens = len(np.load(terms / "tokens.npy"))
    np.save(terms / "token_offsets.npy", np.array([0, n_tokens], dtype=np.int64))
    (terms / "token_digests.npy").unlink()
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(1, start=30))
    again = reindex(settings, progress=False, skip_dense=True)["indexes"]["analyse"]
    assert "not reusing" in caplog.text and again["analysed"] == 18 and "carried" not in again


def test_growth_across_builds_keeps_a_delta_until_it_folds_it_in(settings):
    s = hnsw_settings(settings, dense_grow_fold_docs=10)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(20))
    reindex(s, progress=False, encode_fn=fake_encode)
    seen = []
    for step in range(4):  # 3 new documents a build: 3, 6, 9, then 12 > 10 folds
        with ThreadStore(s.store_path) as st:
            st.upsert(threads(1, start=100 + step, word="beach"))
            if step == 1:
                st.delete("t0")
        d = reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]
        seen.append((d["delta"], d["base"], d["removed_rows"], d["encoded"]))
    assert seen == [(3, "linked", 0, 3), (6, "linked", 3, 3), (9, "linked", 3, 3), (0, "written", 3, 3)]
    g = load_current(s.index_root)
    assert g.dense.index.n_docs == len(g.docs) == 69 and g.dense.index.index.ntotal == 72
    texts = dict(zip(g.docs.ids, g.docs.texts))
    assert own_top(g, {k: v for k, v in texts.items() if k.startswith("q:")}) == 23
    assert "q:t0" not in {h.doc_id for h in g.dense.index.search_vectors(fake_encode([threads(1)[0].question_text])[0],
                                                                          69, g.docs.ids)}


def test_a_generation_loaded_after_a_grown_one_shares_its_faiss_index(settings):
    """The service loads each new generation with the one it served (``load_current(..., previous)``): a grown index's
    FAISS file is a hard link of the live one, so the index in memory is shared, not read again, and the generation
    searches as one loaded alone; after a fold (a file written anew) it is read."""
    s = hnsw_settings(settings, dense_grow_fold_docs=4)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(20))
    reindex(s, progress=False, encode_fn=fake_encode)
    served = load_current(s.index_root)
    probes = [fake_encode([t.question_text])[0] for t in threads(3, start=100, word="beach")] + \
        [fake_encode([threads(1, start=5)[0].question_text])[0]]
    for step, shared in ((0, True), (1, False)):  # 3 new documents, then 6 > 4: folded, written anew
        with ThreadStore(s.store_path) as st:
            st.upsert(threads(1, start=100 + step, word="beach"))
        assert reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]["base"] == \
            ("linked" if shared else "written")
        alone, lent = load_current(s.index_root), load_current(s.index_root, previous=served)
        assert (lent.dense.index.index is served.dense.index.index) is shared
        assert alone.dense.index.index is not served.dense.index.index
        for q in probes:
            assert lent.dense.index.search_vectors(q, 5, lent.docs.ids) == \
                alone.dense.index.search_vectors(q, 5, alone.docs.ids)
        served = lent


def test_a_delta_is_searched_with_the_base_inside_a_filter(tmp_path):
    x = clustered(600)
    live = DenseIndex.build(x[:500], kind="hnsw")
    now_row = np.arange(500)
    grown = DenseIndex.grown(live, now_row, np.arange(500, 600), x[500:], fold_at=1000)
    ids = [f"d{i}" for i in range(600)]
    allowed = np.arange(0, 600, 2)
    for row in (10, 510, 598):
        hits = grown.search_vectors(x[row], 5, ids, allowed)
        assert hits[0].doc_id == f"d{row}" and all(int(h.doc_id[1:]) % 2 == 0 for h in hits)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    only_delta = grown.search_vectors(x[550], 3, ids, np.array([550, 551, 552]))
    assert sorted(h.doc_id for h in only_delta) == ["d550", "d551", "d552"] and only_delta[0].doc_id == "d550"
    np.testing.assert_array_equal(grown.vector(550), x[550])
    assert grown.n_docs == 600 and grown.holds([0, 550, 600]).tolist() == [True, True, False]


def test_a_rebuild_copies_the_kept_threads_documents_and_writes_what_a_full_read_writes(settings, tmp_path):
    """A build reads from the store only the threads the live generation lacks as they are (``read_documents``, the
    live generation's ``store_threads.npy``) and copies the others' documents from it. Through a new thread, a
    comment added to an old thread, a thread deleted while last written and another taking its write number, a thread
    deleted and written again as it was, and a comment moved to another thread, each generation's documents, record
    and indexes are byte for byte what a build from nothing writes."""
    from indexing.reindex import THREADS_FILE
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(12))
    first = reindex(settings, progress=False, skip_dense=True)
    assert first["indexes"]["documents"]["read_threads"] == 12 and "copied_from" not in first["indexes"]["documents"]
    t2 = threads(1, start=2)[0]
    t7 = threads(1, start=7)[0]
    changes = [
        (lambda st: st.upsert(threads(1, start=40, word="salary")), 12, 1),
        (lambda st: st.upsert([t2.model_copy(update={"answers": t2.answers + [Answer(id="t2_new", text="new")]})]),
         12, 1),
        (lambda st: (st.delete("t2"), st.upsert(threads(1, start=50, word="beach"))), 12, 1),
        (lambda st: (st.delete("t5"), st.upsert(threads(1, start=5))), 12, 1),
        (lambda st: (st.upsert([t7.model_copy(update={"answers": t7.answers[:1]})]),
                     st.upsert([Thread(id="t60", subject="moved here", body="b",
                                       answers=[Answer(id="t7_a1", text=t7.answers[1].text)])])), 12, 2),
    ]
    for k, (change, copied, read) in enumerate(changes):
        with ThreadStore(settings.store_path) as st:
            change(st)
        out = reindex(settings, progress=False, skip_dense=True)
        d = out["indexes"]["documents"]
        assert (d["copied_threads"], d["read_threads"]) == (copied, read), (k, d)
        alone = settings.model_copy(update={"data_dir": tmp_path / f"alone{k}"})
        alone.data_dir.mkdir()
        shutil.copy(settings.store_path, alone.store_path)
        full = reindex(alone, progress=False, skip_dense=True)
        ours, theirs = settings.index_root / out["generation"], alone.index_root / full["generation"]
        for name in ("documents.bin", THREADS_FILE, "terms/tokens.npy", "terms/token_digests.npy", "bm25/weights.npy"):
            if (theirs / name).exists() or name == "documents.bin":
                assert filecmp.cmp(ours / name, theirs / name, shallow=False), (k, name)
        for part in ("bm25", "lm"):
            assert all(filecmp.cmp(ours / part / p.name, theirs / part / p.name, shallow=False)
                       for p in (theirs / part).iterdir()), (k, part)
    # the edited thread's documents and the moved comment were read, and matched with their live rows by id and
    # text: their tokens were carried, and only the new question analysed
    assert out["indexes"]["analyse"]["analysed"] == 1
    g = load_current(settings.index_root)
    assert g.docs.thread_ids[g.docs.ids.index("a:t7_a1")] == "t60"


def test_a_live_generation_without_its_record_of_the_threads_is_read_again(settings, caplog):
    """A generation built before round 21 (no ``store_threads.npy``), one whose documents were made otherwise
    (``documents_made``), or whose record does not fit its documents: every thread read, the documents matched one by
    one, and a damaged record says so."""
    from indexing.reindex import THREADS_FILE
    with ThreadStore(settings.store_path) as st:
        st.upsert(threads(6))
    reindex(settings, progress=False, skip_dense=True)
    for k, spoil in enumerate(("gone", "made", "damaged")):
        live = load_current(settings.index_root).folder
        if spoil == "gone":
            (live / THREADS_FILE).unlink()
        elif spoil == "made":
            m = json.loads((live / "manifest.json").read_text())
            (live / "manifest.json").write_text(json.dumps({**m, "documents_made": 0}))
        else:
            np.save(live / THREADS_FILE, np.zeros(2, dtype=[("seq", "<i8"), ("hash", "S32")]))
        with ThreadStore(settings.store_path) as st:
            st.upsert(threads(1, start=20 + k))
        out = reindex(settings, progress=False, skip_dense=True)["indexes"]
        assert "copied_from" not in out["documents"] and out["documents"]["read_threads"] == 7 + k
        assert out["analyse"]["analysed"] == 3  # matched one by one: only the new thread analysed
    assert "not reusing its record of the store's threads" in caplog.text


def test_a_growing_build_does_not_read_the_live_faiss_file(settings, monkeypatch):
    """A build that grows the live HNSW index and keeps its file links the file without reading it (``DenseIndex.load``
    with ``lazy``: the size and rows its build recorded checked instead); the generation it publishes searches as
    before."""
    import faiss
    s = hnsw_settings(settings)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(20))
    reindex(s, progress=False, encode_fn=fake_encode)
    read = faiss.read_index

    def refused(*a, **k):
        raise AssertionError("the live FAISS file was read")
    monkeypatch.setattr(faiss, "read_index", refused)
    with ThreadStore(s.store_path) as st:
        st.upsert(threads(1, start=30))
    out = reindex(s, progress=False, encode_fn=fake_encode)["indexes"]["dense"]
    assert (out["base"], out["added"]) == ("linked", 3)
    monkeypatch.setattr(faiss, "read_index", read)
    g = load_current(s.index_root)
    assert g.dense.index.search_vectors(fake_encode(["question 30 about visa 2 body 30"])[0], 1,
                                        g.docs.ids)[0].doc_id == "q:t30"
    live = DenseIndex.load(g.folder / "dense", lazy=True)
    assert live._index is None and live.ntotal == 60 and live.index.ntotal == 60  # read when first used
    m = json.loads((g.folder / "dense" / "manifest.json").read_text())
    (g.folder / "dense" / "manifest.json").write_text(json.dumps({**m, "params": {**m["params"], "dim": 385}}))
    with pytest.raises(ValueError, match="60 vectors of 384 dimensions, 60 of 385 recorded"):
        DenseIndex.load(g.folder / "dense", lazy=True).index  # a file that is not the one recorded: said when read
