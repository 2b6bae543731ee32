"""The service's warm-up at its start (app/warmup.py, CQA_WARM_UP): what the first requests would load is loaded
before the service takes one, and nothing the warm-up scored stays in a memo. The real app with the default rankers
(real weights) over the demo corpus."""
import pytest
from fastapi.testclient import TestClient

from app.main import create_app

QUESTION = {"subject": "Cheap furniture", "body": "Where can I buy second-hand furniture?"}
# one request of each kind a user sends
FIRST_REQUESTS = [
    ("POST", "/search", {"question": QUESTION}),
    ("POST", "/search", {"question": QUESTION, "target": "questions"}),
    ("POST", "/rerank", {"question": QUESTION, "candidates": [{"id": "a", "text": "The Friday market sells it cheap"},
                                                              {"id": "b", "text": "no idea"}]}),
    ("POST", "/rerank/questions", {"question": QUESTION, "candidates": [
        {"id": "q", "subject": "Used furniture", "body": "Any shop that sells used sofas?"}]}),
    ("POST", "/rerank/answers", {"question": QUESTION, "threads": [
        {"id": "t", "subject": "Used furniture", "body": "", "comments": [{"id": "c", "text": "Try the souq"}]}]}),
    ("GET", "/threads/demo003/answers", None),
    ("GET", "/threads/demo003/similar", None),
]
WARMED = {"POST /rerank", "POST /rerank/questions", "POST /rerank/answers", "POST /search answers",
          "POST /search questions"}


def loads_recorded(monkeypatch) -> list[str]:
    """Every model load from now on, in order: an encoder (``indexing.encoder.TextEncoder``, by its id) or a network's
    weights (``BertModel.from_pretrained``, which every MiniLM model and encoder loads through)."""
    import indexing.bert as bert
    import indexing.encoder as enc
    loads: list[str] = []
    init, pretrained = enc.TextEncoder.__init__, bert.BertModel.from_pretrained.__func__

    def recording_init(self, device, spec=enc.EncoderSpec()):
        loads.append(f"encoder {spec.id}")
        init(self, device, spec)

    def recording_pretrained(cls, folder):
        loads.append(f"network {folder}")
        return pretrained(cls, folder)
    monkeypatch.setattr(enc.TextEncoder, "__init__", recording_init)
    monkeypatch.setattr(bert.BertModel, "from_pretrained", classmethod(recording_pretrained))
    return loads


@pytest.mark.parametrize("warm", [True, False], ids=["warm-up", "no-warm-up"])
def test_the_first_requests_load_no_model_after_the_warm_up(demo_served, monkeypatch, tmp_path, warm):
    """With the warm-up (the default), no request of any kind loads a model, and the memos, the score store and the
    vector store are as empty as before it; without it (CQA_WARM_UP=false), a first request loads the zero-shot
    encoder the subtask B ranker reads: what the warm-up spares a user."""
    from indexing.encoder import load_encoder
    load_encoder.cache_clear()  # what earlier tests of this process loaded: this app's start loads its own
    # score and vector stores of its own: what another app on the folder scored would spare this one's first requests
    settings = demo_served.model_copy(update={"warm_up": warm, "score_store": tmp_path / "scores.sqlite3",
                                              "vector_store": tmp_path / "vectors.sqlite3"})
    with TestClient(create_app(settings)) as c:
        ready = c.get("/ready").json()
        loads = loads_recorded(monkeypatch)
        for method, path, body in FIRST_REQUESTS:
            r = c.request(method, path, json=body)
            assert r.status_code == 200, (path, r.text[:300])
            assert r.json()["results"], path
    if warm:
        assert loads == []
        assert set(ready["warm_up_ms"]) == WARMED and all(ms > 0 for ms in ready["warm_up_ms"].values())
        assert all(m["pairs"] == m["hits"] == m["misses"] == 0 for m in ready["score_memos"].values())
        assert ready["score_store"]["written"] == ready["vector_store"]["written"] == 0
    else:
        assert ready["warm_up_ms"] is None
        assert "encoder all-MiniLM-L6-v2" in loads, loads


class FailsOnce:
    """A reranker whose first call fails (a model that breaks on its first input), then ranks as the stub does."""
    name = "fails-once"

    def __init__(self):
        from tests.conftest import OverlapRanker
        self.calls, self.stub = 0, OverlapRanker()

    def score(self, queries):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("broke on its first input")
        return self.stub.score(queries)


def test_a_failed_warm_up_request_is_logged_and_the_service_serves(settings, fast_encoder, caplog):
    """A warm-up request that fails costs the start nothing: the service starts, `warm_up_ms` names the failed one
    (null) beside the others, the log says which and why, and the endpoint serves its requests."""
    from indexing.reindex import reindex
    from ranking.presets import PRESETS, RankerSpec, register
    from tests.conftest import STUB_RANKERS

    from .test_indexes import fake_encode, fill_store
    if "fails-once" not in PRESETS:
        register("fails-once", RankerSpec("factory", "tests: fails on its first call",
                                          options={"factory": lambda s: FailsOnce()}))
    settings = settings.model_copy(update={**STUB_RANKERS, "default_ranker": "fails-once"})
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    with caplog.at_level("WARNING", logger="app.warmup"), TestClient(create_app(settings)) as c:
        warm = c.get("/ready").json()["warm_up_ms"]
        assert warm["POST /rerank"] is None and set(warm) == WARMED
        assert all(ms is not None for name, ms in warm.items() if name != "POST /rerank")
        assert "warm-up: POST /rerank failed" in caplog.text and "broke on its first input" in caplog.text
        r = c.post("/rerank", json={"question": QUESTION, "candidates": [{"id": "a", "text": "cheap furniture"}]})
        assert r.status_code == 200 and r.json()["results"][0]["id"] == "a"
