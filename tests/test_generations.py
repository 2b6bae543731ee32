"""A generation published by any process goes live in every serving process within seconds, and a generation
a live reader serves is never pruned; a killed reader's lease expires."""
from __future__ import annotations

import json
import signal
import subprocess
import time

from fastapi.testclient import TestClient

from app.main import create_app
from indexing.generations import (LEASES, current_generation, drop_lease, leased_generations, list_generations,
                                  prune, write_lease)
from indexing.reindex import reindex

from .conftest import CQA, ROOT, STUB_RANKERS, rerank_model
from .test_api import free_port, http, start_server, stop_server, wait_ready
from .test_indexes import fake_encode, fill_store


def _gens(root, names):
    for n in names:
        (root / n).mkdir(parents=True)
        (root / n / "manifest.json").write_text("{}")


def test_prune_leaves_leased_generations_until_the_lease_expires(tmp_path):
    _gens(tmp_path, ["gen-1", "gen-2", "gen-3", "gen-4"])
    (tmp_path / "current").write_text("gen-4\n")
    write_lease(tmp_path, "reader-a", "gen-1", ttl_s=60)
    write_lease(tmp_path, "reader-b", "gen-2", ttl_s=-1)  # already expired: its holder died
    (tmp_path / LEASES / "broken.json").write_text("{not json")
    assert leased_generations(tmp_path) == {"gen-1"}
    assert not (tmp_path / LEASES / "reader-b.json").exists()  # expired leases are cleaned up
    assert sorted(prune(tmp_path, keep=1)) == ["gen-2", "gen-3"]
    assert list_generations(tmp_path) == ["gen-1", "gen-4"]
    drop_lease(tmp_path, "reader-a")
    assert prune(tmp_path, keep=1) == ["gen-1"] and current_generation(tmp_path) == "gen-4"


def _app_settings(settings, **kw):
    return settings.model_copy(update={**STUB_RANKERS, **kw})


def test_a_reindex_by_another_process_goes_live_without_a_restart(settings, cli_env):
    s = _app_settings(settings, generation_poll_s=0.2)
    fill_store(s)
    reindex(s, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(s)) as client:
        before = client.get("/ready").json()["generation"]
        p = subprocess.run(CQA + ["reindex", "--no-dense", "-q"], env={**cli_env, "CQA_DATA_DIR": str(s.data_dir)},
                           capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        published = json.loads(p.stdout.strip().splitlines()[-1])["generation"]
        deadline = time.time() + 20
        while client.get("/ready").json()["generation"] != published:
            assert time.time() < deadline, "the service did not go live on the published generation"
            time.sleep(0.1)
        assert published != before
        metrics = client.get("/metrics").text
        assert f'cqa_generation_served{{generation="{published}"}} 1.0' in metrics and before not in metrics
        r = client.post("/search", json={"question": {"body": "question 7 about visa"}, "k": 3})
        assert r.status_code == 200 and r.json()["generation"] == published


def test_reindexes_never_prune_the_generation_a_reader_serves(settings):
    s = _app_settings(settings, generation_poll_s=3600, keep_generations=1)  # this reader does not move on
    fill_store(s)
    reindex(s, progress=False, encode_fn=fake_encode)
    with TestClient(create_app(s)) as client:
        served = client.get("/ready").json()["generation"]
        for _ in range(4):
            reindex(s, progress=False, encode_fn=fake_encode)
        assert current_generation(s.index_root) != served
        assert (s.index_root / served / "manifest.json").exists()  # still there: leased
        r = client.post("/search", json={"question": {"body": "question 7 about visa"}, "k": 3})
        assert r.status_code == 200 and r.json()["generation"] == served
        assert len(list_generations(s.index_root)) == 2  # the served one and the live one
    reindex(s, progress=False, encode_fn=fake_encode)  # the reader stopped: its lease is gone, so is the folder
    assert served not in list_generations(s.index_root)


def test_a_killed_servers_lease_expires(tmp_path):
    port = free_port()
    p = start_server(tmp_path, port, {"CQA_GENERATION_POLL_S": "0.5"})
    try:
        ready = wait_ready(p, f"http://127.0.0.1:{port}")
        root = tmp_path / "var" / "indexes"
        assert leased_generations(root) == {ready["generation"]}
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    # no process renews it now: held for the lease's lifetime (30 s at this poll interval), then free
    assert leased_generations(root) == {ready["generation"]}
    assert leased_generations(root, now=time.time() + 31) == set()


def _leases(root) -> dict[str, str]:
    """holder -> the generation it leases, for every lease file (expired or not)."""
    return {p.stem: json.loads(p.read_text())["generation"] for p in (root / LEASES).glob("*.json")}


def test_two_workers_both_go_live_on_a_reindex_by_another_process(tmp_path, cli_env):
    """`cqa serve --workers 2`: two uvicorn worker processes on one port, each with its own lease; a `cqa reindex`
    in another shell goes live in both without a restart, and the old generation is free once both moved on."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    p = start_server(tmp_path, port, {"CQA_GENERATION_POLL_S": "0.5", "CQA_WORKERS": "2"})
    root = tmp_path / "var" / "indexes"
    try:
        first = wait_ready(p, base)["generation"]
        deadline = time.time() + 120
        while len(_leases(root)) < 2:  # the second worker may still be loading its models
            assert time.time() < deadline, f"two workers never both served: leases {_leases(root)}"
            time.sleep(0.5)
        workers = set(_leases(root))
        assert len(workers) == 2 and set(_leases(root).values()) == {first}
        r = subprocess.run(CQA + ["reindex", "-q"], env={**cli_env, "CQA_DATA_DIR": str(tmp_path / "var")},
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr
        published = json.loads(r.stdout.strip().splitlines()[-1])["generation"]
        assert published != first
        deadline = time.time() + 30
        while set(_leases(root).values()) != {published}:
            assert time.time() < deadline, f"not every worker went live: {_leases(root)}"
            time.sleep(0.2)
        assert set(_leases(root)) == workers  # the same two processes, no restart
        seen = set()
        for _ in range(20):  # every answer, whichever worker gives it, is on the new generation
            status, ready = http("GET", base + "/ready")
            assert status == 200 and ready["generation"] == published
            seen.add(ready["worker"])
        assert seen <= workers
        status, out = http("POST", base + "/search", {"question": {"body": "How do I renew my residence permit?"},
                                                      "k": 3})
        assert status == 200 and out["generation"] == published and len(out["results"]) == 3
        assert first not in leased_generations(root)
        # one thread sorted again and again: the workers share the score store, so whichever worker answers, its
        # two pairs cost the cross-encoder two model calls in all
        body = {"question": {"body": "cheap furniture"}, "candidates": [
            {"id": "x", "text": "The Friday market sells cheap second-hand furniture"},
            {"id": "y", "text": "I love the beach"}]}
        for _ in range(8):
            status, ranked = http("POST", base + "/rerank", body)
            assert status == 200 and ranked["results"][0]["id"] == "x"
            time.sleep(0.2)  # the store is written off the request's path
        memos: dict[str, dict] = {}
        for _ in range(60):
            ready = http("GET", base + "/ready")[1]
            memos[ready["worker"]] = ready["score_memos"][rerank_model("cross-encoder")]
            if len(memos) == 2:
                break
        assert len(memos) == 2, "one worker never answered /ready"
        assert sum(m["misses"] for m in memos.values()) == 2, memos
        assert sum(m["hits"] + m["misses"] for m in memos.values()) == 16
        for m in memos.values():
            if m["hits"] and not m["misses"]:  # a worker that never scored them read them from the store
                assert m["shared_hits"] == 2
    finally:
        stop_server(p)
    assert _leases(root) == {}  # both workers dropped their leases on a clean stop
