import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from fastapi.testclient import TestClient

from app.main import create_app

from .conftest import ROOT
from .test_indexes import fake_encode, fill_store


@pytest.fixture()
def client(settings):
    fill_store(settings)
    from indexing.reindex import reindex
    reindex(settings, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(settings)) as c:
        yield c


def test_health_ready_threads(client):
    assert client.get("/health").json() == {"status": "ok"}
    r = client.get("/ready")
    assert r.status_code == 200 and r.json()["sizes"]["documents"] == 160
    t = client.get("/threads/t3").json()
    assert t["id"] == "t3" and len(t["answers"]) == 3
    r = client.get("/threads/nope")
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"]


def test_not_ready_without_generation(settings):
    with TestClient(create_app(settings)) as c:
        r = c.get("/ready")
        assert r.status_code == 503 and "cqa reindex" in r.json()["error"]["message"]


def test_search_lexical(client, monkeypatch):
    import indexing.encoder as enc
    monkeypatch.setattr(enc, "encode", lambda texts, **kw: fake_encode(texts))
    r = client.post("/search", json={"question": {"body": "question 7 about visa"}, "k": 3, "target": "questions",
                                     "explain": True, "expand": "rm3", "filters": {"category": "Visas"}})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert r.json()["expansion"]["method"] == "rm3"
    res = client.post("/search", json={"question": {"body": "question 7 about visa"}, "k": 3,
                                       "target": "questions"}).json()["results"]
    assert res[0]["id"] == "t7" and [x["rank"] for x in res] == [1, 2, 3] and "stages" not in res[0]
    res = r.json()["results"]
    assert set(res[0]["stages"]) == {"bm25", "lm", "dense"}
    for bad in ({"question": {"body": "   "}}, {"question": {"body": "x"}, "k": 0},
                {"question": {"body": "x"}, "colour": 1}, {"question": {"body": "x"}, "filters": {"since": "May"}}):
        assert client.post("/search", json=bad).status_code == 422


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_uvicorn_serves_demo_corpus(tmp_path):
    """`cqa serve` bootstraps the demo corpus (SemEval hidden), builds real indexes, answers HTTP."""
    port = free_port()
    env = {**os.environ, "CQA_DATA_DIR": str(tmp_path / "var"), "CQA_SHARED_DATA_DIR": str(tmp_path / "none"),
           "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    p = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env=env, cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 240
        while time.time() < deadline:
            assert p.poll() is None, p.stderr.read()
            try:
                with urllib.request.urlopen(base + "/ready", timeout=2) as r:
                    ready = json.loads(r.read())
                    break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(1)
        else:
            pytest.fail("server did not become ready")
        assert ready["sizes"]["documents"] >= 180
        req = urllib.request.Request(base + "/search", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"question": {"body": "How do I renew my residence permit?"},
                                                      "k": 5}).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            out = json.loads(r.read())
        assert len(out["results"]) == 5
        assert "demo003" in {x["thread_id"] for x in out["results"]}  # the residence-permit thread
    finally:
        p.terminate()
        p.wait(timeout=20)
