"""One encoder per generation ($CQA_DENSE_ENCODER): a dense index built with the fine-tuned bi-encoder, its
digest in the manifest, queries encoded with the generation's encoder, and rankers that reuse stored vectors
only when they are their own model's."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from indexing.encoder import MODEL_NAME, EncoderSpec, encode, encoder_spec
from indexing.engines import LocalEngine
from indexing.generations import IndexFormatError
from indexing.models import question_text
from indexing.reindex import ReindexError, reindex
from indexing.searcher import load_current
from ranking.candidates import VECTOR_ENCODER, Candidate, Query
from ranking.pipeline import SearchRequest, build_pipeline
from ranking.rankers import MiniLMCosine

from .test_indexes import fake_encode, fill_store

ROOT = Path(__file__).resolve().parent.parent
BI = ROOT / "models" / "bi-encoder"
TEXTS = ["Where can I renew my residence permit in Doha?",
         "Go to the immigration office in Al Gharrafa early in the morning, bring your passport and photos.",
         "no idea", "Try Qatar Insurance, they were the cheapest for my car last year " * 12]


@pytest.fixture(scope="module")
def bi_ranker():
    from ranking.neural.ranker import MiniLMRanker
    return MiniLMRanker.from_checkpoint(BI, device="cpu", inference="torch-fp32")


def reranked_query(settings, gen, text: str, target: str = "answers") -> Query:
    """What /search hands its ``target``'s reranker for ``text`` over ``gen`` (a spy reranker keeps the query)."""
    seen = []

    class Spy:
        name = "spy"

        def score(self, queries):
            seen.extend(queries)
            return [[0.0] * len(q.candidates) for q in queries]
    from indexing.store import ThreadStore
    with ThreadStore(settings.store_path) as store:  # the threads' metadata, as the service reads it
        build_pipeline(settings, gen, store, rerankers={"answers": Spy(), "questions": Spy()}).search(
            SearchRequest(text=text, target=target, k=5))
    return seen[0]


def test_the_setting_names_the_package_or_a_bi_encoder_and_refuses_anything_else(settings, tmp_path):
    assert encoder_spec("base") == encoder_spec(MODEL_NAME) == EncoderSpec()
    from indexing.config import IndexSettings
    assert IndexSettings().encoder.checkpoint == ROOT / "models" / "question-bi-encoder"  # the default, chosen on dev
    assert EncoderSpec().id == MODEL_NAME and EncoderSpec().to_dict()["checkpoint"] is None
    spec = encoder_spec("models/bi-encoder")  # relative to the project
    assert spec.checkpoint == BI and spec.max_length == 128 and len(spec.digest) == 24
    assert spec.id == f"bi-encoder@{spec.digest}-len128"
    # recorded relative to the project, so another checkout of it (or a container) finds it again
    assert spec.to_dict()["checkpoint"] == "models/bi-encoder"
    assert EncoderSpec.from_manifest({"encoder": spec.to_dict()}) == spec
    with pytest.raises(ValueError, match="holds a 'cross-encoder' checkpoint"):
        encoder_spec("models/cross-encoder")
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        encoder_spec(tmp_path)
    from app.settings import Settings
    with pytest.raises(ValidationError, match="dense_encoder"):
        Settings(data_dir=tmp_path, dense_encoder="models/cross-encoder")
    assert Settings(data_dir=tmp_path, dense_encoder=str(BI)).encoder == spec


def test_the_index_encoder_gives_the_bi_encoder_rankers_vectors(bi_ranker):
    """The reindex path (plain transformers graph over the checkpoint) and the ranker's own torch module
    agree: a score from stored vectors is the score the ranker computes from the texts."""
    spec = encoder_spec(str(BI))
    v = encode(TEXTS, device="cpu", spec=spec)
    base = encode(TEXTS, device="cpu")
    assert v.shape == base.shape and float(np.abs(v - base).max()) > 0.05  # really other weights
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    q = Query("q", TEXTS[0], tuple(Candidate(str(i), t) for i, t in enumerate(TEXTS[1:])))
    from_texts = bi_ranker.score([q])[0]
    assert np.allclose(from_texts, v[1:] @ v[0], atol=1e-5)


def test_a_bi_encoder_reuses_only_its_own_vectors(bi_ranker, monkeypatch):
    spec = encoder_spec(str(BI))
    v = encode(TEXTS, device="cpu", spec=spec)
    fake = np.zeros_like(v)
    fake[:, 0] = 1.0  # vectors no model gives: a ranker that uses them scores every candidate 1.0

    def query(vectors, encoder):
        meta = lambda i: {"vector": vectors[i], VECTOR_ENCODER: encoder}  # noqa: E731
        return Query("q", TEXTS[0], tuple(Candidate(str(i), t, meta(i)) for i, t in enumerate(TEXTS[1:], 1)), meta(0))

    calls = []
    real = bi_ranker._score_texts
    monkeypatch.setattr(bi_ranker, "_score_texts", lambda qs: calls.append(len(qs)) or real(qs))
    assert bi_ranker.score([query(fake, spec)])[0] == [1.0, 1.0, 1.0] and calls == []
    # the packaged model's vectors (or none said) are not the bi-encoder's: it encodes the texts
    got = bi_ranker.score([query(fake, EncoderSpec()), Query("q2", TEXTS[0], (Candidate("1", TEXTS[1], {"vector": fake[1]}),),
                                                             {"vector": fake[0]})])
    assert calls == [2] and np.allclose(got[0], v[1:] @ v[0], atol=1e-5)


def test_the_cosine_rankers_follow_the_encoder_of_the_query():
    """minilm-cosine (and answers-cosine) score with the encoder whose vectors the query carries: the index's
    at /search, the packaged model's elsewhere; they never mix one model's vectors with another's."""
    spec = encoder_spec(str(BI))
    v, base = encode(TEXTS, device="cpu", spec=spec), encode(TEXTS, device="cpu")
    fake = np.zeros_like(v)
    fake[:, 0] = 1.0
    cos = MiniLMCosine(device="cpu")

    def query(qmeta, cmeta):
        return Query("q", TEXTS[0], tuple(Candidate(str(i), t, cmeta(i)) for i, t in enumerate(TEXTS[1:], 1)), qmeta)

    tagged = lambda enc: lambda i: {"vector": fake[i], VECTOR_ENCODER: enc}  # noqa: E731
    assert cos.score([query(tagged(spec)(0), tagged(spec))])[0] == [1.0, 1.0, 1.0]  # reused
    # the query says the bi-encoder; candidates' vectors of the packaged model are not reused: encoded by it
    assert np.allclose(cos.score([query({VECTOR_ENCODER: spec}, tagged(EncoderSpec()))])[0], v[1:] @ v[0], atol=1e-5)
    # no encoder said: the packaged model, and bi-encoder vectors are not taken for its own
    assert np.allclose(cos.score([query({}, tagged(spec))])[0], base[1:] @ base[0], atol=1e-5)
    both = cos.score([query({}, lambda i: {}), query({VECTOR_ENCODER: spec}, lambda i: {})])  # one batch, two encoders
    assert np.allclose(both[0], base[1:] @ base[0], atol=1e-5) and np.allclose(both[1], v[1:] @ v[0], atol=1e-5)
    from ranking.rankers import AnswersCosine
    thread = Candidate("t", "a thread", {"comments": tuple(TEXTS[1:]), "comment_vectors": list(fake[1:]),
                                         VECTOR_ENCODER: EncoderSpec()})
    got = AnswersCosine("max", device="cpu").score([Query("q", TEXTS[0], (thread,), {VECTOR_ENCODER: spec})])
    assert np.isclose(got[0][0], float((v[1:] @ v[0]).max()), atol=1e-5)


def test_reindex_with_the_bi_encoder_records_it_and_searches_with_it(settings, tmp_path):
    ckpt = tmp_path / "my-bi-encoder"
    shutil.copytree(BI, ckpt)
    fill_store(settings, 6)
    # no answer vectors here: they are this checkpoint's vectors too (the same weights), so the embedding cache would
    # rightly hand them to the dense stage below (the next test covers them)
    settings = settings.model_copy(update={"answer_encoder": "none"})
    first = reindex(settings.model_copy(update={"dense_encoder": "base"}), progress=False)  # the package's model
    bi = settings.model_copy(update={"dense_encoder": str(ckpt)})
    summary = reindex(bi, progress=False)
    # its own cache entries: every text encoded again, nothing read from the package model's
    assert summary["indexes"]["dense"]["encoded"] == first["indexes"]["dense"]["encoded"] == 24
    g = load_current(settings.index_root, "cpu")
    spec = encoder_spec(str(ckpt))
    assert g.manifest["encoder"] == spec.to_dict() and g.manifest["model"] == spec.id
    assert g.dense.encoder == spec
    text = "question 3 about visa 0"
    assert np.allclose(g.dense.embed(text), encode([text], device="cpu", spec=spec)[0], atol=1e-6)
    stored = g.dense.index.index.reconstruct(g.row["q:t3"])
    assert np.allclose(stored, encode([g.docs.texts[g.row["q:t3"]]], device="cpu", spec=spec)[0], atol=1e-5)

    # /search hands the reranker the generation's vectors, labelled with its encoder
    q = reranked_query(bi, g, text)
    assert q.meta[VECTOR_ENCODER] == spec and np.allclose(q.meta["vector"], g.dense.embed(text))
    assert q.candidates and all(c.meta[VECTOR_ENCODER] == spec for c in q.candidates)

    # weights changed after the build: the generation refuses to serve vectors queries no longer match
    cfg = ckpt / "config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "note": "retrained"}))
    with pytest.raises(IndexFormatError, match="run `cqa reindex`"):
        load_current(settings.index_root, "cpu")
    # `cqa serve` rebuilds such a generation at start instead of serving nothing
    from app.bootstrap import bootstrap
    out = bootstrap(bi, progress=False)
    assert out["reindex"]["indexes"]["dense"]["encoded"] == 24  # new weights: nothing cached
    assert load_current(settings.index_root, "cpu").dense.encoder == encoder_spec(str(ckpt))
    assert "reindex" not in bootstrap(bi, progress=False)  # and only then


def test_an_engine_with_another_encoder_is_refused(settings):
    fill_store(settings, 2)
    bi = settings.model_copy(update={"dense_encoder": str(BI)})
    engine = LocalEngine(fake_encode, encoder=EncoderSpec())
    with pytest.raises(ReindexError, match="dense encoder is bi-encoder@"):
        reindex(bi, progress=False, engine=engine)
    old = reindex(settings, progress=False, encode_fn=fake_encode)  # a generation from before the setting
    m = settings.index_root / old["generation"] / "manifest.json"
    d = json.loads(m.read_text())
    d.pop("encoder")
    m.write_text(json.dumps(d))
    assert load_current(settings.index_root).dense.encoder == EncoderSpec()


def test_cqa_reindex_takes_the_encoder_and_refuses_a_wrong_one(settings, cli_env):
    import subprocess
    import sys
    fill_store(settings, 2)
    env = {**cli_env, "CQA_DATA_DIR": str(settings.data_dir)}
    cqa = [sys.executable, "-m", "app.cli", "reindex", "--quiet"]
    bad = subprocess.run(cqa + ["--dense-encoder", "models/cross-encoder"], env=env, capture_output=True, text=True,
                         cwd=ROOT)
    assert bad.returncode == 2 and "holds a 'cross-encoder' checkpoint" in bad.stderr
    ok = subprocess.run(cqa + ["--dense-encoder", "base"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert load_current(settings.index_root).manifest["encoder"] == EncoderSpec().to_dict()


def test_evaluation_cosines_keep_their_embeddings_in_the_reindex_cache(tmp_path, monkeypatch):
    """With a cache folder (evaluation runs; serving clears it), minilm-cosine encodes a text once: a second
    run reads every vector back, keyed by the encoder, and scores the same."""
    import indexing.encoder as enc
    from indexing.embcache import EmbeddingCache, text_key
    q = Query("q", TEXTS[0], tuple(Candidate(str(i), t) for i, t in enumerate(TEXTS[1:])))
    cos = MiniLMCosine(device="cpu", cache_dir=tmp_path)
    first = cos.score([q])
    cache = EmbeddingCache(tmp_path / "embeddings.sqlite3", MODEL_NAME)
    stored_vecs = cache.get_many([text_key(MODEL_NAME, t) for t in TEXTS])
    cache.close()
    assert len(stored_vecs) == len(TEXTS)
    assert np.allclose(stored_vecs[text_key(MODEL_NAME, TEXTS[1])], encode([TEXTS[1]], device="cpu")[0], atol=1e-6)

    def no_model(*a, **kw):
        raise AssertionError("encoded again")
    monkeypatch.setattr(enc, "encode", no_model)
    assert cos.score([q]) == first
    from ranking.rankers import for_serving
    assert for_serving(cos).cache_dir is None  # a request never writes to the cache


def test_the_subjects_cosine_compares_two_questions_by_their_subjects_where_both_have_one(settings):
    """``minilm-cosine-subjects``: the zero-shot cosine of the question's subject and each candidate's, each text
    encoded once; where either subject is blank, the two whole texts, as ``minilm-cosine`` scores them (a stored
    whole-text vector serving there, never for a subject)."""
    from ranking.rankers import get_ranker
    ranker = get_ranker("minilm-cosine-subjects", settings)
    assert ranker.subjects
    cands = (Candidate("a", "Driving licence\nI lost mine at the mall", {"subject": "Driving licence"}),
             Candidate("b", "Nightlife\nwhere to go on Friday", {"subject": "Nightlife"}),
             Candidate("c", "no subject: a body alone about a driving licence", {"subject": " "}))
    q = Query("q", "Driving License\nHow do I get one in Doha?", cands, {"subject": "Driving License"})
    got = ranker.score([q])[0]
    s = encode(["Driving License", "Driving licence", "Nightlife"], device="cpu")
    b = encode([q.text, cands[2].text], device="cpu")
    assert got[:2] == pytest.approx([float(s[0] @ s[1]), float(s[0] @ s[2])], abs=1e-5)
    assert got[2] == pytest.approx(float(b[0] @ b[1]), abs=1e-5)  # the candidate has no subject: whole texts
    assert got[0] > got[1] and got[0] > MiniLMCosine(device="cpu").score([q])[0][0]  # titles alone agree more
    # no subject on the question's side: every pair by whole texts, the whole-text vector a question carries used
    plain = Query("q", q.text, cands, {"subject": "", "vector": s[1], VECTOR_ENCODER: EncoderSpec()})
    assert ranker.score([plain])[0] == pytest.approx([float(s[1] @ v) for v in
                                                      encode([x.text for x in cands], device="cpu")], abs=1e-5)


def test_reindex_stores_the_answer_encoders_comment_vectors_and_search_scores_with_them(settings, tmp_path, bi_ranker,
                                                                                          monkeypatch):
    """$CQA_ANSWER_ENCODER: reindex stores the A bi-encoder's vector of every comment in the generation; /search
    hands them to the reranker, labelled, and the bi-encoder then encodes only the question, with the scores it
    would compute from the texts."""
    from app.settings import Settings
    from indexing.generations import ANSWER_VECTORS
    with pytest.raises(ValidationError, match="answer_encoder"):
        Settings(data_dir=tmp_path, answer_encoder="base")  # the dense index's vectors already
    with pytest.raises(ValidationError, match="holds a 'cross-encoder' checkpoint"):
        Settings(data_dir=tmp_path, answer_encoder="models/cross-encoder")
    assert Settings(data_dir=tmp_path, answer_encoder="None").answer_spec is None
    assert settings.answer_spec == encoder_spec("models/bi-encoder")  # the default: the subtask A model

    fill_store(settings, 6)
    plain = settings.model_copy(update={"dense_encoder": "base"})
    summary = reindex(plain, progress=False)
    assert summary["indexes"]["answer_vectors"]["answers"] == summary["indexes"]["answer_vectors"]["encoded"] == 18
    g = load_current(settings.index_root, "cpu")
    spec = settings.answer_spec
    assert g.manifest["answer_encoder"] == spec.to_dict() and g.answer_encoder == spec
    assert g.sizes()["answer_vectors"] == 18  # GET /ready and the index-size gauge say they are there
    rows = [i for i, k in enumerate(g.docs.kinds) if k == "answer"]
    want = bi_ranker.text_vectors([g.docs.texts[i] for i in rows])
    assert np.allclose(g.answer_vectors[rows], want, atol=1e-5)
    assert not np.asarray(g.answer_vectors[[i for i in range(len(g.docs)) if i not in rows]]).any()
    assert np.allclose(want, encode([g.docs.texts[i] for i in rows], device="cpu", spec=spec), atol=1e-5)
    # a second reindex reads every comment vector from the embedding cache
    assert reindex(plain, progress=False)["indexes"]["answer_vectors"]["encoded"] == 0

    # /search: the comments carry their stored vectors; the bi-encoder encodes the question only
    q = reranked_query(plain, load_current(settings.index_root, "cpu"), "answer on rent 3")
    assert q.candidates and all(c.meta["answer_encoder_id"] == spec.id for c in q.candidates)
    expected = bi_ranker._score_texts([q])[0]

    def no_pairs(*a, **k):
        raise AssertionError("the stored comment vectors were not used")
    monkeypatch.setattr(bi_ranker, "_score_texts", no_pairs)
    assert np.allclose(bi_ranker.score([q])[0], expected, atol=1e-5)
    monkeypatch.undo()
    # another model's stored vectors are not its own: the ranker encodes the texts itself
    other = Query(q.id, q.text, tuple(Candidate(c.id, c.text, {**c.meta, "answer_encoder_id": "another"})
                                      for c in q.candidates), q.meta)
    assert np.allclose(bi_ranker.score([other])[0], expected, atol=1e-5)

    # with none, nothing is stored, and `cqa serve` says why /search would be slower rather than failing
    none = plain.model_copy(update={"answer_encoder": "none"})
    summary = reindex(none, progress=False)
    g = load_current(settings.index_root, "cpu")
    assert "answer_vectors" not in summary["indexes"] and g.manifest["answer_encoder"] is None
    assert g.answer_vectors is None and not (g.folder / ANSWER_VECTORS).exists() and g.sizes()["answer_vectors"] == 0
    from app.bootstrap import _lacks_answer_vectors
    assert _lacks_answer_vectors(Settings(data_dir=settings.data_dir, dense_encoder="base")) == spec.id
    assert _lacks_answer_vectors(Settings(data_dir=settings.data_dir, dense_encoder="base", answer_encoder="none")) is None

    # the answer checkpoint retrained after the build: its stored vectors are no longer used, the rest serves
    ckpt = tmp_path / "my-bi-encoder"
    shutil.copytree(BI, ckpt)
    mine = plain.model_copy(update={"answer_encoder": str(ckpt)})
    reindex(mine, progress=False)
    cfg = ckpt / "config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "note": "retrained"}))
    g = load_current(settings.index_root, "cpu")
    assert g.answer_vectors is None and g.answer_encoder is None and g.dense is not None


def test_search_questions_score_threads_by_their_comments_stored_answer_vectors(settings, bi_ranker, monkeypatch):
    """answers-model-max/top3: a question candidate scored by the A bi-encoder's cosines of the question and its
    thread's comments. /search hands each question candidate its comments' stored answer vectors, so only the
    question is encoded, with the scores the texts give."""
    from ranking.candidates import ANSWER_ENCODER
    from ranking.rankers import AnswersModel, get_ranker
    fill_store(settings, 6)
    plain = settings.model_copy(update={"dense_encoder": "base"})
    reindex(plain, progress=False)
    q = reranked_query(plain, load_current(settings.index_root, "cpu"), "answer on rent 3", "questions")
    assert q.candidates
    for c in q.candidates:
        assert c.meta[ANSWER_ENCODER] == plain.answer_spec.id
        assert len(c.meta["comment_answer_vectors"]) == len(c.meta["comments"]) == 3
    bare = Query(q.id, q.text, tuple(Candidate(c.id, c.text, {"comments": c.meta["comments"]}) for c in q.candidates)
                 + (Candidate("empty", "a thread nobody answered", {}),))
    cos = [bi_ranker.text_vectors(list(c.meta.get("comments", ()))) @ bi_ranker.text_vectors([q.text])[0]
           if c.meta.get("comments") else np.zeros(0) for c in bare.candidates]
    top, top3 = AnswersModel(bi_ranker, "max"), AnswersModel(bi_ranker, "top3")
    assert np.allclose(top.score([bare])[0], [float(v.max()) if len(v) else 0.0 for v in cos], atol=1e-5)
    assert np.allclose(top3.score([bare])[0], [float(np.sort(v)[::-1][:3].mean()) if len(v) else 0.0 for v in cos],
                       atol=1e-5)
    encoded = []
    real = bi_ranker.text_vectors
    monkeypatch.setattr(bi_ranker, "text_vectors", lambda texts: encoded.append(list(texts)) or real(texts))
    assert np.allclose(top.score([q])[0], top.score([bare])[0][:-1], atol=1e-5)
    assert encoded[0] == [q.text]  # with the stored vectors: the question alone
    monkeypatch.undo()
    assert get_ranker("answers-model-max", plain).model.vector_id == plain.answer_spec.id  # the preset: the A model
    with pytest.raises(ValueError, match="needs a bi-encoder"):
        AnswersModel(type("CrossEncoder", (), {"name": "cross-encoder", "vector_id": None})())


def test_rerank_questions_candidates_bring_their_indexed_comments_stored_vectors(settings, bi_ranker, monkeypatch):
    """POST /rerank/questions with each candidate's comments: where the live generation indexes that thread with
    exactly those comments, they come with their stored answer vectors (as /search hands them), so answers-model-*
    encodes only the new question; an edited comment or an unknown thread brings none. The scores are the texts'."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from indexing.store import ThreadStore
    from ranking.candidates import ANSWER_ENCODER
    from ranking.pipeline import SearchPipeline
    from ranking.rankers import AnswersModel
    from tests.conftest import STUB_RANKERS
    fill_store(settings, 6)
    plain = settings.model_copy(update={**STUB_RANKERS, "dense_encoder": "base",
                                        "default_ranker_b": "answers-model-max"})
    reindex(plain, progress=False)
    with ThreadStore(plain.store_path) as store:
        threads = [store.get(t) for t in ("t1", "t3", "t4")]
    cands = [{"id": t.id, "subject": t.subject, "body": t.body, "comments": [a.text for a in t.answers]}
             for t in threads]
    cands[1]["comments"][0] += " (edited)"
    cands.append({"id": "elsewhere", "body": "a thread of another forum", "comments": ["the office opens at 8"]})
    metas = []
    real = SearchPipeline.comment_meta
    monkeypatch.setattr(SearchPipeline, "comment_meta",
                        lambda self, tid, cs: metas.append(real(self, tid, cs)) or metas[-1])
    new = {"subject": "rent", "body": "how much is the rent of a flat"}
    with TestClient(create_app(plain)) as client:
        metas.clear()  # what the start's warm-up read (app/warmup.py)
        r = client.post("/rerank/questions", json={"question": new, "candidates": cands})
    assert r.status_code == 200 and r.json()["reranker"] == "answers-model-max", r.text
    # t1 and t4 as indexed, t3 with a comment edited, a thread the forum does not index
    assert [len(m.get("comment_answer_vectors", ())) for m in metas] == [3, 0, 3, 0]
    assert metas[0][ANSWER_ENCODER] == metas[2][ANSWER_ENCODER] == plain.answer_spec.id and metas[1] == metas[3] == {}
    bare = Query("q", question_text(new["subject"], new["body"]), tuple(
        Candidate(c["id"], "", {"comments": tuple(c["comments"])}) for c in cands))
    served = {x["id"]: x["score"] for x in r.json()["results"]}
    assert np.allclose([served[c["id"]] for c in cands], AnswersModel(bi_ranker).score([bare])[0], atol=1e-4)
    assert r.json()["comments_read"] is True
    # rule 14's router reads them only where every candidate's comments come stored: t1 and t4 as indexed, not with
    # the edited t3 (nor without comments); the response says which
    indexed = plain.model_copy(update={"default_ranker_b": "question-answers-fusion-indexed"})
    with TestClient(create_app(indexed)) as client:
        read = [client.post("/rerank/questions", json={"question": new, "candidates": cs}).json()
                for cs in ([cands[0], cands[2]], cands[:3], [{**cands[0], "comments": []}])]
    assert [x["reranker"] for x in read] == ["question-answers-fusion-indexed"] * 3
    assert [x["comments_read"] for x in read] == [True, False, False]


def test_a_large_first_build_leaves_the_answer_vectors_to_a_background_reindex(settings):
    """`cqa serve` on a big empty data folder is ready before the answer vectors are: the first build leaves them
    out, and a background `cqa reindex` (a real child process) publishes a generation that has them."""
    from app.bootstrap import bootstrap, reindex_in_background
    fill_store(settings, 6)
    plain = settings.model_copy(update={"dense_encoder": "base"})
    out = bootstrap(plain, progress=False, answers_now_max=10)  # 18 comments: more than it builds at once
    g = load_current(settings.index_root, "cpu")
    assert "answer_vectors" not in out["reindex"]["indexes"] and g.answer_vectors is None
    assert out["answer_vectors_pending"] == plain.answer_spec.id
    child = reindex_in_background(plain)
    assert child.wait(timeout=300) == 0
    g = load_current(settings.index_root, "cpu")
    assert g.answer_vectors is not None and g.answer_encoder == plain.answer_spec
    assert "answer_vectors_pending" not in bootstrap(plain, progress=False, answers_now_max=10)
    # a small first build stores them at once
    fresh = plain.model_copy(update={"data_dir": settings.data_dir.parent / "small"})
    fill_store(fresh, 2)
    out = bootstrap(fresh, progress=False)
    assert out["reindex"]["indexes"]["answer_vectors"]["answers"] == 6 and "answer_vectors_pending" not in out


def test_rerank_questions_candidates_the_generation_indexes_bring_their_stored_vector(settings, bi_ranker,
                                                                                      monkeypatch):
    """POST /rerank/questions: a candidate whose thread the live generation indexes with the same question text
    carries the dense index's vector of it, so a ranker that is the index's encoder encodes only the new question,
    and scores as it would from the texts. A changed text or an unknown thread carries nothing."""
    from ranking.candidates import indexed_question_meta
    fill_store(settings, 6)
    reindex(settings.model_copy(update={"dense_encoder": str(BI), "answer_encoder": "none"}), progress=False)
    g = load_current(settings.index_root, "cpu")
    texts = {t: g.docs.texts[g.row[f"q:{t}"]] for t in ("t3", "t4")}
    metas = {t: indexed_question_meta(g, t, text) for t, text in texts.items()}
    assert all(m[VECTOR_ENCODER] == encoder_spec(str(BI)) for m in metas.values())
    assert indexed_question_meta(g, "t3", texts["t3"] + " (edited)") == {} and indexed_question_meta(g, "t99", "x") == {}
    assert indexed_question_meta(None, "t3", texts["t3"]) == {}
    new = "how do I renew a visa"
    plain = Query("q", new, tuple(Candidate(t, text) for t, text in texts.items()))
    from_texts = bi_ranker.score([plain])[0]
    calls = []
    real = bi_ranker._score_texts
    monkeypatch.setattr(bi_ranker, "_score_texts", lambda qs: calls.append(len(qs)) or real(qs))
    stored = Query("q", new, tuple(Candidate(t, text, metas[t]) for t, text in texts.items()))
    assert np.allclose(bi_ranker.score([stored])[0], from_texts, atol=1e-5) and calls == []


def test_a_bi_encoder_encodes_each_text_once_per_call(bi_ranker, monkeypatch):
    """Subtask C scores each comment against the new question and against its own thread's question in one call:
    the bi-encoder encodes each distinct comment once (not once per pair), and each distinct question once, in one
    batch when the comments carry their stored vectors; the scores are those of the texts scored one query at a
    time."""
    from ranking.candidates import ANSWER_ENCODER, ANSWER_VECTOR
    comments = (Candidate("c1", TEXTS[1]), Candidate("c2", TEXTS[3]))
    queries = [Query("new", TEXTS[0], comments), Query("own", "Which insurance is the cheapest?", comments)]
    alone = [bi_ranker.score([q])[0] for q in queries]
    encoded = []
    real = bi_ranker._vectors
    monkeypatch.setattr(bi_ranker, "_vectors", lambda wps: encoded.append(len(wps)) or real(wps))
    together = bi_ranker.score(queries)
    assert encoded == [4]  # two questions and two comments, not 2 + 4
    assert np.allclose(together, alone, atol=1e-5)

    vecs = {c.id: bi_ranker.text_vectors([c.text])[0] for c in comments}
    carried = tuple(Candidate(c.id, c.text, {ANSWER_VECTOR: vecs[c.id], ANSWER_ENCODER: bi_ranker.vector_id})
                    for c in comments)
    encoded.clear()
    stored_too = bi_ranker.score([Query(q.id, q.text, carried) for q in queries + queries[:1]])
    assert encoded == [2]  # only the two distinct questions, in one batch
    assert np.allclose(stored_too, alone + alone[:1], atol=1e-5)


def test_a_serving_encoder_encodes_a_text_met_again_once(bi_ranker, monkeypatch):
    """Serving (``for_serving`` with ``memo_texts``), a bi-encoder and the dense encoder's cosine keep the vectors of
    the texts they encoded: the same comments sent with another question cost one encoding, the new question's,
    and score as without the memo; a cross-encoder gets no such memo (its scores are not dot products)."""
    import dataclasses

    import indexing.encoder as enc
    from ranking.rankers import encodes_texts, for_serving
    comments = (Candidate("c1", TEXTS[1]), Candidate("c2", TEXTS[3]), Candidate("c3", TEXTS[1]))
    first, second = Query("q1", TEXTS[0], comments), Query("q2", "Which insurance is the cheapest?", comments)
    plain = [bi_ranker.score([q])[0] for q in (first, second)]
    served = for_serving(dataclasses.replace(bi_ranker, memo=None, vector_memo=None), memo_texts=10)
    assert encodes_texts(served) and served.vector_memo.capacity == 10
    encoded = []
    real = served._vectors
    monkeypatch.setattr(served, "_vectors", lambda wps: encoded.append(len(wps)) or real(wps))
    assert np.allclose(served.score([first])[0], plain[0], atol=1e-5) and encoded == [3]  # 2 distinct comments
    assert np.allclose(served.score([second])[0], plain[1], atol=1e-5) and encoded == [3, 1]  # only the question
    assert served.vector_memo.stats()["hits"] == 2
    assert all(v.base is None for v in served.vector_memo._scores.values())  # a kept row keeps no batch alive

    cosine = MiniLMCosine(device="cpu")
    texts = []
    real_encode = enc.encode
    monkeypatch.setattr(enc, "encode", lambda t, **kw: texts.append(list(t)) or real_encode(t, **kw))
    expected = [cosine.score([q])[0] for q in (first, second)]
    texts.clear()
    for_serving(cosine, memo_texts=10)
    assert np.allclose([cosine.score([q])[0] for q in (first, second)], expected, atol=1e-6)
    assert texts == [[TEXTS[0], TEXTS[1], TEXTS[3]], [second.text]]  # each text once, then only the new question
    assert all(v.base is None for v in cosine.vector_memo._scores.values())
    cross = dataclasses.replace(bi_ranker, vector_id=None)  # what a cross-encoder's ranker looks like to for_serving
    assert not encodes_texts(cross) and for_serving(cross, memo_texts=10).vector_memo is None


def test_a_text_one_serving_process_encoded_is_read_by_another(bi_ranker, tmp_path, monkeypatch):
    """Behind a vector store (``serving_vector_store``), the texts one serving process's bi-encoder encoded are
    read, not encoded, by another process's (the other worker, or the process after a restart): the same comments
    with a new question cost it that question only, with the scores the first process gives to the bit. The vectors
    are keyed by what made them: the same weights run otherwise (another cache_key) read none, and the dense
    encoder's cosine keys its own by the device it encodes on."""
    import dataclasses

    from ranking.neural.memo import VectorStore
    from ranking.rankers import for_serving, vector_identity
    comments = (Candidate("c1", TEXTS[1]), Candidate("c2", TEXTS[3]), Candidate("c3", TEXTS[2]))
    later = Query("q2", "Which insurance is the cheapest?", comments)
    path = tmp_path / "cache" / "vector-store.sqlite3"

    def process(ranker):
        return for_serving(dataclasses.replace(ranker, memo=None, vector_memo=None), memo_texts=10,
                           vector_store=VectorStore(path, capacity=100))
    first = process(bi_ranker)
    assert vector_identity(first) == f"bi-encoder:{bi_ranker.cache_key}" == first.vector_memo.model
    first.score([Query("q1", TEXTS[0], comments)])
    first.vector_memo.store.flush()
    second = process(bi_ranker)
    encoded = []
    real = second._vectors
    monkeypatch.setattr(second, "_vectors", lambda wps: encoded.append(len(wps)) or real(wps))
    assert second.score([later])[0] == first.score([later])[0] and encoded == [1]  # the new question only
    assert second.vector_memo.stats()["shared_hits"] == 3
    other = process(dataclasses.replace(bi_ranker, cache_key="the same weights in another variant"))
    monkeypatch.setattr(other, "_vectors", lambda wps: encoded.append(len(wps)) or real(wps))
    other.score([later])
    assert encoded == [1, 4] and other.vector_memo.stats()["shared_hits"] == 0
    assert vector_identity(MiniLMCosine(device="cpu")) == "index-encoder:cpu"
    assert for_serving(MiniLMCosine(device="cpu"), memo_texts=10).vector_memo.store is None  # no store asked for


def test_an_evaluation_bi_encoder_keeps_its_vectors_for_its_other_parts_and_the_next_run(bi_ranker, tmp_path,
                                                                                          monkeypatch):
    """An evaluation run's bi-encoder (a ``cache_dir``, no serving memo) keeps the vectors it encodes in a vector store
    beside its pair scores: closest-comment over it, after its own scores, encodes nothing, and a later run (a new
    ranker on the same cache folder: a benchmark's metadata-free variant, the same texts) reads them, the vectors
    of encoding anew; the same weights run otherwise (another cache_key) read none."""
    import dataclasses

    from ranking.rankers import ClosestComment
    comments = (Candidate("c1", TEXTS[1]), Candidate("c2", TEXTS[3]), Candidate("c3", TEXTS[2]))
    query = Query("q1", TEXTS[0], comments)
    encoded = []

    def run(ranker):
        ranker = dataclasses.replace(ranker, memo=None, vector_memo=None, cache_dir=tmp_path / "cache")
        real = ranker._vectors
        monkeypatch.setattr(ranker, "_vectors", lambda wps: encoded.append(len(wps)) or real(wps))
        return ranker
    first = run(bi_ranker)
    scores = first.score([query])[0]
    assert encoded == [4]  # the question and the three comments, once
    closest = ClosestComment(first).score([query])[0]
    assert encoded == [4]  # its vectors are the ones the scores encoded
    assert list((tmp_path / "cache").glob(f"text-vectors-{bi_ranker.cache_key}.sqlite3"))
    later = run(bi_ranker)
    assert np.allclose(later.vectors_of([c.text for c in comments])[1], bi_ranker.text_vectors([TEXTS[3]])[0], atol=1e-6)
    assert ClosestComment(later).score([query])[0] == closest and encoded == [4]  # read, not encoded
    assert later.score([Query("q2", "Which insurance is the cheapest?", comments)]) and encoded == [4, 1]
    assert np.allclose(later.score([query])[0], scores, atol=0)
    other = run(dataclasses.replace(bi_ranker, cache_key="the same weights in another variant"))
    other.vectors_of([TEXTS[1]])
    assert encoded == [4, 1, 1]


def test_rerank_answers_candidates_carry_what_the_generation_stores(settings):
    """POST /rerank/answers builds each comment as the subtask C files give it (``answer_candidates``: position,
    author, asker, dialogue, thread rank), plus the stored vectors of the live generation: the comment's
    answer-encoder vector and its thread question's dense vector, each only where the indexed text is the same."""
    from indexing.store import ThreadStore
    from ranking.candidates import ANSWER_VECTOR, answer_candidates, related_comment_candidates
    fill_store(settings, 6)
    reindex(settings.model_copy(update={"dense_encoder": str(BI)}), progress=False)
    g = load_current(settings.index_root, "cpu")
    with ThreadStore(settings.store_path) as store:
        t3, t4 = store.get("t3"), store.get("t4")
    edited = t4.model_copy(update={"body": "another body",
                                   "answers": [t4.answers[0].model_copy(update={"text": "changed"}), *t4.answers[1:]]})
    served = related_comment_candidates([t3, edited], g)
    given = answer_candidates(t3, 1) + answer_candidates(edited, 2)
    assert [c.id for c in served] == [c.id for c in given]
    vector_keys = {"thread_vector", VECTOR_ENCODER, ANSWER_VECTOR, "answer_encoder_id"}
    assert all({k: v for k, v in s.meta.items() if k not in vector_keys} == c.meta for s, c in zip(served, given))
    for c in served[:3]:  # t3 as indexed
        assert np.allclose(c.meta["thread_vector"], g.question_vector("t3", t3.question_text))
        assert np.allclose(c.meta[ANSWER_VECTOR], g.answer_vector(c.id, c.text))
    assert all("thread_vector" not in c.meta for c in served[3:])  # t4's question was edited
    assert ANSWER_VECTOR not in served[3].meta and all(ANSWER_VECTOR in c.meta for c in served[4:])
    assert [c.meta for c in related_comment_candidates([t3, edited])] == [c.meta for c in given]  # no generation
