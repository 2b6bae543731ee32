"""Each request's id (X-Request-ID) in its response, its error body, its log lines and the job it starts; the access
log; JSON log lines; and the cross-origin headers a forum's own pages need (CQA_CORS_ORIGINS). The last test runs a
real `cqa serve` with two workers."""
import json
import logging
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest
from fastapi.testclient import TestClient
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app.access import RequestIdFilter, accepted_id
from app.main import create_app

from .conftest import ADMIN, ROOT, STUB_RANKERS, TOKEN

HEX32 = re.compile(r"[0-9a-f]{32}")


class Kept(logging.Handler):
    """The records logged while it is attached to the root logger, with the service's request-id filter."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(RequestIdFilter())

    def emit(self, record):
        self.records.append(record)


@pytest.fixture()
def kept():
    handler = Kept()
    root, access = logging.getLogger(), logging.getLogger("cqa.access")
    levels = root.level, access.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    access.setLevel(logging.INFO)  # it reaches the root's handlers (the service's own configuration sends it apart)
    yield handler.records
    root.removeHandler(handler)
    root.setLevel(levels[0])
    access.setLevel(levels[1])


def access_lines(records, rid):
    return [r for r in records if r.name == "cqa.access" and r.request_id == rid]


def test_each_request_has_an_id_in_its_response_its_error_body_and_its_access_line(client, kept):
    r = client.get("/health")
    rid = r.headers["x-request-id"]
    assert r.status_code == 200 and HEX32.fullmatch(rid)
    assert client.get("/health").headers["x-request-id"] != rid  # a new one each time
    # the id the forum's proxy or backend sent is kept, and comes back in the error body
    r = client.get("/threads/nope", headers={"X-Request-ID": "forum-7f3a.12:9"})
    assert r.status_code == 404 and r.headers["x-request-id"] == "forum-7f3a.12:9"
    assert r.json()["error"]["request_id"] == "forum-7f3a.12:9"
    [line] = access_lines(kept, "forum-7f3a.12:9")
    assert (line.method, line.path, line.status) == ("GET", "/threads/nope", 404) and line.ms >= 0
    assert line.getMessage().startswith('testclient "GET /threads/nope" 404 ')
    # one a log line could not carry as it is (a space, a newline, too long, not ASCII) is replaced, never echoed
    for sent in ("two words", "x\nINFO forged line", "a" * 129, "forum-\u00e9".encode("latin-1"), ""):
        r = client.post("/search", json={"k": 0}, headers={"X-Request-ID": sent})
        assert r.status_code == 422 and HEX32.fullmatch(r.headers["x-request-id"]), sent
        assert r.json()["error"]["request_id"] == r.headers["x-request-id"]
    # a 413 of the body limit (outside the routes) carries it too, and a query string is in the access line
    r = client.post("/search?explain=1", content=b"x" * 60_000, headers={"X-Request-ID": "big-1",
                                                                        "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["request_id"] == "big-1"
    assert [(x.path, x.status) for x in access_lines(kept, "big-1")] == [("/search?explain=1", 413)]
    # a user's id is not written to the access log, which an erasure cannot reach; a thread's id is
    for path in ("/authors/U268/posts", "/erasures/U268", "/takedowns/T9"):
        method = "DELETE" if path.startswith("/takedowns") else "GET"
        r = client.request(method, path, headers={**ADMIN, "X-Request-ID": "who-" + path.split("/")[1]})
        assert r.status_code in (200, 404), r.text
    assert [x.path for x in access_lines(kept, "who-authors")] == ["/authors/{author_id}/posts"]
    assert [x.path for x in access_lines(kept, "who-erasures")] == ["/erasures/{author_id}"]
    assert [x.path for x in access_lines(kept, "who-takedowns")] == ["/takedowns/T9"]
    assert not [x for x in kept if "U268" in x.getMessage() and not x.name.startswith("httpx")]  # the client's own


def test_an_unexpected_error_is_a_500_whose_id_finds_its_log_line(client, kept, monkeypatch):
    svc = client.app.state.service

    def broken(thread_id):
        raise RuntimeError("the disk said no")
    monkeypatch.setattr(svc.store, "get_tagged", broken)
    r = client.get("/threads/t1", headers={"X-Request-ID": "bug-report-42"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "bug-report-42"
    body = r.json()["error"]
    assert body == {"status": 500, "code": "internal_error",
                    "message": "internal error; the server log has the details", "request_id": "bug-report-42"}
    assert "disk" not in r.text  # never the cause to the client
    [logged] = [x for x in kept if x.levelno == logging.ERROR and x.request_id == "bug-report-42"]
    assert logged.exc_info and "the disk said no" in str(logged.exc_info[1])
    assert [x.status for x in access_lines(kept, "bug-report-42")] == [500]
    metrics = client.get("/metrics").text  # counted as a 500 of its endpoint
    assert 'cqa_errors_total{endpoint="/threads/{thread_id}",status="500"} 1.0' in metrics


def test_a_job_keeps_the_id_of_the_request_that_started_it_and_its_lines_carry_it(client, kept):
    r = client.post("/reindex", headers={**ADMIN, "X-Request-ID": "nightly-reindex-3"})
    assert r.status_code == 202, r.text
    job = r.json()["job"]
    assert job["request_id"] == "nightly-reindex-3"
    deadline = time.time() + 120
    while (state := client.get(f"/jobs/{job['id']}").json())["state"] in ("queued", "running"):
        assert time.time() < deadline
        time.sleep(0.2)
    assert state["state"] == "succeeded" and state["request_id"] == "nightly-reindex-3"
    # what the reindex logged from the job's thread names the request, after that request had been answered
    lines = [x for x in kept if x.request_id == "nightly-reindex-3" and x.name != "cqa.access"]
    assert any(x.getMessage().startswith("serving index generation") for x in lines), [
        (x.name, x.request_id, x.getMessage()) for x in kept][-20:]
    # a job file written before jobs kept ids reads as one without
    folder = client.app.state.service.jobs.folder
    old = {k: v for k, v in json.loads((folder / f"{job['id']}.json").read_text()).items() if k != "request_id"}
    (folder / "0ld.json").write_text(json.dumps({**old, "id": "0ld"}))
    assert client.get("/jobs/0ld").json()["request_id"] is None


def test_cross_origin_pages_of_the_listed_origins_only(settings, fast_encoder):
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    forum, other = "https://forum.example.org", "https://elsewhere.example"
    search = {"question": {"body": "visa"}, "k": 3, "rerank": False}
    listed = settings.model_copy(update={"cors_origins": [forum], "api_token": TOKEN, **STUB_RANKERS})
    with TestClient(create_app(listed)) as c:
        # a browser's preflight of a search with a request id of its own
        r = c.options("/search", headers={"Origin": forum, "Access-Control-Request-Method": "POST",
                                          "Access-Control-Request-Headers": "content-type,x-request-id"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == forum
        assert {"content-type", "x-request-id"} <= {h.strip().lower() for h in
                                                    r.headers["access-control-allow-headers"].split(",")}
        r = c.post("/search", json=search, headers={"Origin": forum})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == forum
        exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
        assert {"x-request-id", "etag"} <= exposed  # the page can read the id and a thread's ETag
        r = c.post("/search", json={"k": 0}, headers={"Origin": forum})  # an error answer carries them too
        assert r.status_code == 422 and r.headers["access-control-allow-origin"] == forum
        # a page of another site: no header lets the browser read the answer, and its preflight is refused
        r = c.post("/search", json=search, headers={"Origin": other})
        assert "access-control-allow-origin" not in r.headers
        r = c.options("/search", headers={"Origin": other, "Access-Control-Request-Method": "POST"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        # the admin token is never a listed page's to send: its preflight with Authorization is refused, and a
        # browser's request from another site is refused with a valid token too; a server's, or /docs's, is answered
        r = c.options("/reindex", headers={"Origin": forum, "Access-Control-Request-Method": "POST",
                                           "Access-Control-Request-Headers": "authorization"})
        assert r.status_code == 400 and "authorization" not in r.headers.get("access-control-allow-headers", "").lower()
        for site in ("cross-site", "same-site"):
            r = c.get("/status", headers={**ADMIN, "Origin": forum, "Sec-Fetch-Site": site})
            assert r.status_code == 403 and "browser page" in r.json()["error"]["message"], r.json()
        assert c.get("/status", headers=ADMIN).status_code == 200
        assert c.get("/status", headers={**ADMIN, "Sec-Fetch-Site": "same-origin"}).status_code == 200
    with TestClient(create_app(settings.model_copy(update=STUB_RANKERS))) as c:  # the default: none
        r = c.post("/search", json=search, headers={"Origin": forum})
        assert r.status_code == 200 and not any(h.startswith("access-control-") for h in r.headers)


def test_origins_are_read_from_a_list_or_commas_and_a_wrong_one_is_refused(monkeypatch):
    from pydantic import ValidationError

    from app.settings import Settings
    monkeypatch.setenv("CQA_CORS_ORIGINS", "https://forum.example.org, http://localhost:3000")
    assert Settings().cors_origins == ["https://forum.example.org", "http://localhost:3000"]
    monkeypatch.setenv("CQA_CORS_ORIGINS", '["*"]')
    assert Settings().cors_origins == ["*"]
    for wrong in ("https://forum.example.org/", "forum.example.org", '["https://a.org"'):
        monkeypatch.setenv("CQA_CORS_ORIGINS", wrong)
        with pytest.raises(ValidationError, match="cors_origins"):
            Settings()
    assert accepted_id("Root-1.abc:9") == "Root-1.abc:9"


def test_a_real_service_logs_json_lines_each_with_the_request_id_from_every_worker(tmp_path):
    """`cqa serve --workers 2` on a new data folder with CQA_LOG_FORMAT=json: both workers start (they open the new
    store at the same moment), every line on standard error is a JSON object, the workers' own lines included, and
    the access lines on standard output carry each request's id. CQA_FORWARDED_ALLOW_IPS reaches the app (which reads
    the proxy headers itself, `ProxiedClient`): from 127.0.0.1, not named, a request's X-Forwarded-For is not believed
    (uvicorn's own default would believe it), so the client logged, and counted for its share, is the connection's;
    from 127.0.0.2, named, it is, and the client logged is the one it names. CQA_RATE_LIMIT_PER_MIN holds a client
    to one rate between the two workers (round 59): a burst of 3, spent through both workers, answers 3 in all."""
    import http.client
    from .test_api import free_port, stop_server
    port = free_port()
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    env = {**os.environ, "CQA_DATA_DIR": str(tmp_path / "var"), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "CQA_LOG_FORMAT": "json", "CQA_WORKERS": "2", "CQA_REFRESH_S": "0",
           "CQA_FORWARDED_ALLOW_IPS": "10.0.0.1, 192.168.0.0/16, 127.0.0.2",
           "CQA_RATE_LIMIT_PER_MIN": "1", "CQA_RATE_LIMIT_BURST": "3", "CQA_OVER_SHARE_DELAY_MS": "0"}
    with open(out, "w") as fo, open(err, "w") as fe:
        p = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--no-bootstrap", "--port", str(port)],
                             env=env, cwd=ROOT, stdout=fo, stderr=fe, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:  # no generation yet: /health answers once a worker is up
            assert p.poll() is None, err.read_text()[-3000:]
            try:
                with urllib.request.urlopen(base + "/health", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.time() < deadline, err.read_text()[-3000:]
                time.sleep(0.5)
        sent = [f"probe-{i}" for i in range(12)]
        for rid in sent:
            req = urllib.request.Request(base + "/threads/none", headers={"X-Request-ID": rid,
                                                                         "X-Forwarded-For": "203.0.113.7"})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=30)
            assert e.value.code == 404 and e.value.headers["X-Request-ID"] == rid
            assert json.loads(e.value.read())["error"]["request_id"] == rid
        proxied = [f"proxied-{i}" for i in range(4)]
        for rid in proxied:  # through the proxy named
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.2", 0))
            conn.request("GET", "/threads/none", headers={"X-Request-ID": rid, "X-Forwarded-For": "203.0.113.7"})
            assert conn.getresponse().status == 404
            conn.close()
        # both workers accepting (a worker still loading its models would leave every request to the other)
        deadline = time.time() + 180
        while sum("Application startup complete" in line for line in err.read_text().splitlines()) < 2:
            assert p.poll() is None and time.time() < deadline, err.read_text()[-3000:]
            time.sleep(0.2)
        # a scraper's /rerank requests, each on a new connection, until both workers have answered some of them
        limited: dict[str, int] = {}  # request id -> status
        body = json.dumps({"question": {"body": "cheap furniture"},
                           "candidates": [{"id": "x", "text": "The Friday market sells cheap furniture"}]})
        while len(limited) < 200:
            rid = f"limited-{len(limited)}"
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=("127.0.0.3", 0))
            conn.request("POST", "/rerank", body=body,
                         headers={"X-Request-ID": rid, "Content-Type": "application/json"})
            limited[rid] = conn.getresponse().status
            conn.close()
            lines = [json.loads(line) for line in out.read_text().splitlines() if '"limited-' in line]
            if len(limited) >= 10 and len({a["pid"] for a in lines}) == 2:
                break
        # GET /metrics adds up both workers' counts, whichever answers the scrape, and lists each one's own
        scrapes, workers_own = [], set()
        deadline = time.time() + 60
        while len(scrapes) < 6 or len(workers_own) < 2:
            assert time.time() < deadline, f"never both workers' own metrics: {workers_own}"
            with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
                text = r.read().decode()
            scrapes.append(sorted(line for line in text.splitlines() if line.startswith("cqa_requests_total{")
                                  and ('"/rerank"' in line or '"/threads/{thread_id}"' in line)))
            workers_own = {m for m in re.findall(r'process_resident_memory_bytes\{pid="(\d+)"\}', text)}
            time.sleep(0.5)
        time.sleep(2)  # both workers warmed up and said so
    finally:
        stop_server(p)
    errors = [json.loads(line) for line in err.read_text().splitlines() if line.strip()]
    assert {"time", "level", "logger", "message", "pid"} <= set(errors[0])
    assert len({e["pid"] for e in errors if e["logger"] == "app.warmup"}) == 2  # each worker's own lines, named
    started = [e for e in errors if e["logger"] == "uvicorn.error" and "Application startup complete" in e["message"]]
    assert len(started) == 2, [e["message"] for e in errors][-30:]  # both workers, neither failed
    assert not [e for e in errors if e["level"] == "ERROR"], [e for e in errors if e["level"] == "ERROR"]
    assert any(e["logger"] == "app.warmup" for e in errors)  # a worker's own INFO lines are written
    access = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    probes = [a for a in access if a.get("request_id", "").startswith("probe-")]
    assert sorted(a["request_id"] for a in probes) == sorted(sent)
    assert all((a["logger"], a["method"], a["path"], a["status"], a["client"]) ==
               ("cqa.access", "GET", "/threads/none", 404, "127.0.0.1") and a["ms"] >= 0 for a in probes)
    assert sorted(a["client"] for a in access if a.get("request_id", "").startswith("proxied-")) == ["203.0.113.7"] * 4
    assert sorted(limited.values()).count(200) == 3 and set(limited.values()) == {200, 429}, limited
    by_worker = {a["pid"] for a in access if a.get("request_id", "").startswith("limited-")}
    assert len(by_worker) == 2, "one worker answered every /rerank: the shared rate was not tested"
    statuses = Counter(limited.values())
    assert all(s == scrapes[0] for s in scrapes), scrapes  # every scrape the same totals, whichever worker answered
    assert scrapes[0] == sorted([
        f'cqa_requests_total{{endpoint="/rerank",method="POST",status="{code}"}} {float(n)}'
        for code, n in statuses.items()] + [
        f'cqa_requests_total{{endpoint="/threads/{{thread_id}}",method="GET",status="404"}} {float(len(sent) + 4)}']), \
        scrapes[0]
    assert workers_own == {str(pid) for pid in by_worker}, (workers_own, by_worker)  # each worker's own, by pid


def test_the_proxies_believed_are_addresses_or_networks_and_a_mistyped_one_is_refused(monkeypatch):
    from pydantic import ValidationError

    from app.settings import Settings
    assert Settings().forwarded_allow_ips is None  # uvicorn's default: a proxy on the same host
    monkeypatch.setenv("CQA_FORWARDED_ALLOW_IPS", " 10.0.0.5 , 10.1.0.0/16,fd00::/8,*")
    assert Settings().forwarded_allow_ips == "10.0.0.5,10.1.0.0/16,fd00::/8,*"
    for wrong in ("10.0.0.300", "proxy.example.org", "10.0.0.0/33", " , "):
        monkeypatch.setenv("CQA_FORWARDED_ALLOW_IPS", wrong)
        with pytest.raises(ValidationError, match="forwarded_allow_ips"):
            Settings()


def test_a_trusted_proxy_names_the_user_a_request_is_for_and_nobody_else_can():
    """ProxiedClient: from a proxy of CQA_FORWARDED_ALLOW_IPS, CQA_CLIENT_HEADER names the client (as a digest), and
    X-Forwarded-For the address; from anyone else, or without the setting, or empty, the header is ignored."""
    import asyncio
    import hashlib

    from app.limits import ProxiedClient, client_key

    def seen(peer: str, headers: dict, trusted: str = "10.0.0.0/8, ::1", header: str | None = "X-Forum-User"):
        got = {}

        async def inner(scope, receive, send):
            got.update(key=client_key(scope), client=scope["client"][0])
        scope = {"type": "http", "client": (peer, 5000), "scheme": "http",
                 "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
        asyncio.run(ProxiedClient(inner, trusted, header)(scope, None, None))
        return got["key"], got["client"]
    alice = "user:" + hashlib.sha256(b"alice").hexdigest()[:16]
    assert seen("10.1.2.3", {"X-Forum-User": "alice"}) == (alice, "10.1.2.3")
    assert seen("10.1.2.3", {"X-Forum-User": " alice ", "X-Forwarded-For": "203.0.113.7"}) == (alice, "203.0.113.7")
    assert seen("::1", {"x-forum-user": "bob"})[0] == "user:" + hashlib.sha256(b"bob").hexdigest()[:16]
    assert seen("203.0.113.9", {"X-Forum-User": "alice", "X-Forwarded-For": "198.51.100.1"}) == \
        ("203.0.113.9", "203.0.113.9")  # not a proxy named: neither header believed
    assert seen("10.1.2.3", {"X-Forum-User": ""}) == ("10.1.2.3", "10.1.2.3")  # empty: the address
    assert seen("10.1.2.3", {"X-Forum-User": "alice"}, header=None) == ("10.1.2.3", "10.1.2.3")  # not set
    assert seen("testclient", {"X-Forum-User": "alice"}, trusted="*")[0] == alice  # *: any peer


def test_users_behind_one_proxy_count_as_clients_of_their_own_when_it_names_them(settings, fast_encoder):
    """Through the app: with CQA_CLIENT_HEADER, two users' searches through one trusted proxy are two clients in GET
    /ready, and a request without the header counts as the proxy's address; a proxy not named is one client."""
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    question = {"question": {"body": "visa"}}
    for trusted, clients in (("*", 3), ("10.0.0.1", 1)):  # the test client's peer is "testclient"
        app = create_app(settings.model_copy(update={"forwarded_allow_ips": trusted, "client_header": "X-Forum-User",
                                                     **STUB_RANKERS}))
        with TestClient(app) as c:
            for user in ("alice", "bob"):
                assert c.post("/search", json=question, headers={"X-Forum-User": user}).status_code == 200
            assert c.post("/search", json=question).status_code == 200
            assert c.get("/ready").json()["admission"]["clients"] == clients, trusted


def test_the_client_header_is_a_header_name_of_its_own(monkeypatch):
    from pydantic import ValidationError

    from app.settings import Settings
    monkeypatch.setenv("CQA_CLIENT_HEADER", " X-Forum-User ")
    assert Settings().client_header == "X-Forum-User"
    for bad in ("X Forum User", "X-Forwarded-For", "Authorization", "x-user:"):
        monkeypatch.setenv("CQA_CLIENT_HEADER", bad)
        with pytest.raises(ValidationError, match="client_header"):
            Settings()


def test_past_its_bound_a_worker_refuses_a_ranking_request_at_once_and_takes_the_next(settings, fast_encoder,
                                                                                       monkeypatch):
    """CQA_MAX_IN_FLIGHT=1: while one /rerank waits for its (slow) model, another ranking request is answered 503
    `overloaded` with Retry-After at once, counted in /metrics and GET /ready; requests that rank nothing are not held
    back; once the first is answered, the next is taken."""
    import threading

    from indexing.reindex import reindex

    from .conftest import OverlapRanker
    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    release, scoring = threading.Event(), threading.Event()
    plain = OverlapRanker.score

    def slow(self, queries):
        scoring.set()
        release.wait(30)
        return plain(self, queries)
    body = {"question": {"body": "visa renewal"}, "candidates": [{"id": "a", "text": "visa office"},
                                                                 {"id": "b", "text": "beach"}]}
    with TestClient(create_app(settings.model_copy(update={"max_in_flight": 1, **STUB_RANKERS}))) as c:
        monkeypatch.setattr(OverlapRanker, "score", slow)
        first = {}
        waiting = threading.Thread(target=lambda: first.update(r=c.post("/rerank", json=body)))
        waiting.start()
        assert scoring.wait(30)
        t0 = time.perf_counter()
        r = c.post("/rerank", json=body)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        assert r.json()["error"]["code"] == "overloaded" and "CQA_MAX_IN_FLIGHT" in r.json()["error"]["message"]
        assert time.perf_counter() - t0 < 5  # at once, not after the first
        r = c.get("/threads/nope/similar")  # any ranking endpoint
        assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
        assert c.get("/health").status_code == 200 and c.get("/threads").status_code == 200  # not held back
        admission = c.get("/ready").json()["admission"]
        assert admission == {"limit": 1, "in_flight": 1, "most": 1, "refused": 2, "fair_share": True, "clients": 1,
                             "refused_share": 0, "spare": 1, "slots": 2, "alone_slots": 0, "running": 1, "waiting": 0, "queued": 0,
                             "most_waiting": 0, "overfull_entered": 0, "rate_limit_per_min": 0, "rate_burst": 0,
                             "rate_limited": 0, "rate_clients": 0, "rate_shared": False,
                             "rate_store_errors": 0}
        release.set()
        waiting.join(30)
        assert first["r"].status_code == 200 and first["r"].json()["results"][0]["id"] == "a"
        monkeypatch.setattr(OverlapRanker, "score", plain)
        assert c.post("/rerank", json=body).status_code == 200  # taken again
        # a request refused by its own fault or its thread's absence gives its place back: the bound of 1 still takes
        for bad in (c.post("/search", json={"question": {"body": "x"}, "offset": 100}),
                    c.post("/rerank", json={"question": {"body": "x"}, "candidates": []}),
                    c.get("/threads/none/similar"), c.get("/threads/none/answers")):
            assert bad.status_code in (404, 422), bad.text
        assert c.post("/search", json={"question": {"body": "visa"}}).status_code == 200
        assert c.get("/ready").json()["admission"]["in_flight"] == 0
        metrics = c.get("/metrics").text
        assert 'cqa_overloaded_total{endpoint="/rerank"} 1.0' in metrics
        assert 'cqa_overloaded_total{endpoint="/threads/{thread_id}/similar"} 1.0' in metrics
        assert "cqa_ranking_in_flight 0.0" in metrics


def admission_reaches(client: TestClient, field: str, n: int, pause: float = 0.05) -> bool:
    """Whether GET /ready's ``admission[field]`` comes to ``n`` within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if client.get("/ready").json()["admission"][field] == n:
            return True
        time.sleep(pause)
    return False


class Forwarded:
    """A test client's requests as a proxy forwards one client's (X-Forwarded-For)."""

    def __init__(self, client: TestClient, address: str):
        self.client, self.headers = client, {"X-Forwarded-For": address}

    def post(self, url: str, **kw):
        return self.client.post(url, headers=self.headers, **kw)

    def get(self, url: str, **kw):
        return self.client.get(url, headers=self.headers, **kw)


def test_fair_share_refuses_a_client_past_its_share_only_while_others_search_and_the_worker_is_busy(monkeypatch):
    """Admission's fair share: a client alone takes the whole bound; once another has asked, the first is refused (429
    OverShare) past the bound divided by the clients, but only from an eighth of the bound on; a newcomer is taken,
    past a full bound into a spare place; a client that has not asked for recent_s no longer counts;
    CQA_FAIR_SHARE=false gives the bound alone."""
    from app import limits
    from app.errors import OverShare, Overloaded
    clock = [100.0]
    monkeypatch.setattr(limits.time, "monotonic", lambda: clock[0])
    a = limits.Admission(8)
    for _ in range(8):
        a.take("greedy")  # alone: the whole bound
    with pytest.raises(Overloaded):
        a.take("greedy")  # full
    a.take("polite")  # a client holding nothing takes the spare place past the full bound (8 // 8 = 1)
    with pytest.raises(Overloaded):
        a.take("polite")  # only one
    with pytest.raises(Overloaded):
        a.take("third")  # the spare place is taken
    assert (a.in_flight, a.refused, a.spare) == (9, 3, 1)
    a.done("polite")
    for _ in range(8):
        a.done("greedy")
    a.seen.pop("third")
    for _ in range(4):
        a.take("greedy")  # up to its share
    with pytest.raises(OverShare) as e:
        a.take("greedy")  # two clients: a share is 4
    assert (e.value.held, e.value.share, e.value.clients, e.value.limit) == (4, 4, 2, 8)
    assert "CQA_FAIR_SHARE" in str(e.value) and "(greedy)" in str(e.value)
    for _ in range(4):
        a.take("polite")  # the other client is taken up to the bound
    with pytest.raises(Overloaded):
        a.take("polite")  # it holds some: no spare place
    assert a.stats() == {"limit": 8, "in_flight": 8, "most": 9, "refused": 4, "fair_share": True, "clients": 2,
                         "refused_share": 1, "spare": 1}
    for _ in range(4):
        a.done("polite")
    clock[0] += 11  # polite has not asked for 11 s: greedy is alone again
    assert a.clients() == 1
    for _ in range(4):
        a.take("greedy")
    assert a.held == {"greedy": 8} and a.in_flight == 8
    for _ in range(8):
        a.done("greedy")
    assert a.held == {} and a.in_flight == 0
    # a client still holding a request counts even when it has not asked lately
    a.take("slow")
    clock[0] += 30
    for _ in range(4):
        a.take("greedy")
    assert a.clients() == 2
    with pytest.raises(OverShare):
        a.take("greedy")
    # with many clients a share is small: below an eighth of the bound (4 of 32) nobody is refused for it
    many = limits.Admission(32)
    for i in range(10):
        many.take(f"c{i}")
        many.done(f"c{i}")  # ten clients seen: a share is 32 // 10 = 3
    assert (many.busy, many.clients()) == (4, 10)
    for _ in range(3):
        many.take("c0")
    many.take("c0")  # 3 held, its share, but the worker holds 3 < 4: taken
    with pytest.raises(OverShare) as e:
        many.take("c0")  # 4 in flight: the share counts
    assert (e.value.held, e.value.share, e.value.clients) == (4, 3, 10)
    many.take("c1")  # another client is taken
    off = limits.Admission(8, fair_share=False)
    off.take("polite")
    for _ in range(7):
        off.take("greedy")
    with pytest.raises(Overloaded):
        off.take("greedy")
    with pytest.raises(Overloaded):
        off.take("newcomer")  # no spare place without fair share
    assert limits.Admission(0).take("x") is None  # no bound: no share either


def test_client_key_counts_an_ipv6_client_as_its_64_and_names_others_as_they_are():
    from app.limits import client_key
    assert client_key({"client": ("203.0.113.9", 5000)}) == "203.0.113.9"
    assert client_key({"client": ("2001:db8:1:2:aaaa::1", 5000)}) == \
        client_key({"client": ("2001:db8:1:2:bbbb::7", 6000)}) == "2001:db8:1:2::/64"
    assert client_key({"client": ("2001:db8:1:3::1", 5000)}) == "2001:db8:1:3::/64"
    assert client_key({"client": ("::ffff:198.51.100.4", 1)}) == "198.51.100.4"
    assert client_key({"client": ("testclient", 50000)}) == "testclient"
    assert client_key({}) == "-"


def test_a_client_over_its_share_gets_429_while_another_client_is_served(settings, fast_encoder, monkeypatch):
    """Through the app: a client holding 2 of CQA_MAX_IN_FLIGHT=4 (two /rerank waiting for a slow model) while another
    client has searched gets 429 `over_share` with Retry-After for a third, after CQA_OVER_SHARE_DELAY_MS; the other
    client is taken; GET /ready and /metrics count it; with CQA_FAIR_SHARE=false the same third request is taken.
    CQA_RUN_SLOTS=0: every request taken runs at once (the next test has the queue)."""
    import threading

    from indexing.reindex import reindex

    from .conftest import OverlapRanker
    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    plain = OverlapRanker.score
    body = {"question": {"body": "visa renewal"}, "candidates": [{"id": "a", "text": "visa office"},
                                                                 {"id": "b", "text": "beach"}]}
    for fair in (True, False):
        release, scoring = threading.Event(), threading.Semaphore(0)

        def slow(self, queries):
            scoring.release()
            release.wait(30)
            return plain(self, queries)
        app = create_app(settings.model_copy(update={"max_in_flight": 4, "fair_share": fair, "batch_max": 1,
                                                     "over_share_delay_ms": 300, "run_slots": 0, **STUB_RANKERS}))
        # as `cqa serve` runs it behind a proxy it trusts (CQA_FORWARDED_ALLOW_IPS): the client its header names
        with TestClient(ProxyHeadersMiddleware(app, trusted_hosts="*")) as c:
            greedy, other = Forwarded(c, "198.51.100.1"), Forwarded(c, "198.51.100.2")
            assert other.post("/search", json={"question": {"body": "visa"}}).status_code == 200  # other is seen
            monkeypatch.setattr(OverlapRanker, "score", slow)
            held = [threading.Thread(target=lambda: greedy.post("/rerank", json=body)) for _ in range(2)]
            answered: list[int] = []

            def in_flight(n: int) -> bool:  # the model scores one batch at a time: the second waits for it, taken
                return admission_reaches(c, "in_flight", n)
            try:
                for t in held:
                    t.start()
                assert scoring.acquire(timeout=30) and in_flight(2)
                if fair:
                    t0 = time.perf_counter()
                    r = greedy.post("/rerank", json=body)
                    assert time.perf_counter() - t0 >= 0.3  # CQA_OVER_SHARE_DELAY_MS: the answer waited
                    assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
                    err = r.json()["error"]
                    assert err["code"] == "over_share" and "198.51.100.1" in err["message"], err
                    ready = c.get("/ready").json()["admission"]
                    assert (ready["refused_share"], ready["clients"], ready["in_flight"]) == (1, 2, 2)
                    assert 'cqa_over_share_total{endpoint="/rerank"} 1.0' in c.get("/metrics").text
                    monkeypatch.setattr(OverlapRanker, "score", plain)
                    taken = threading.Thread(target=lambda: answered.append(
                        other.post("/search", json={"question": {"body": "visa"}}).status_code))
                    taken.start()  # the other client is taken, beside greedy's two
                    held.append(taken)
                    taken.join(30)
                    assert answered == [200]
                else:
                    third = threading.Thread(target=lambda: greedy.post("/rerank", json=body))
                    third.start()
                    held.append(third)
                    assert in_flight(3)  # the third was taken
            finally:
                release.set()
                for t in held:
                    t.join(30)
            monkeypatch.setattr(OverlapRanker, "score", plain)


def test_a_freed_run_slot_goes_to_the_client_running_fewest_then_to_the_one_whose_turn_came_longest_ago():
    """FairQueue: past its slots a request waits; a freed slot goes to the client running fewest, then to the one whose
    turn came longest ago (or never), its earliest request first; a request cancelled while it waits leaves the queue, and one cancelled as it was given its slot
    gives it on; a client alone runs past the slots while nobody waits; 0 slots: nobody waits."""
    import asyncio

    from app.limits import FairQueue

    async def run():
        q, order = FairQueue(2), []

        async def wait(client: str, tag: str):
            await q.enter(client)
            order.append(tag)

        async def settle():
            for _ in range(3):
                await asyncio.sleep(0)
        await q.enter("greedy")
        await q.enter("greedy")  # both slots taken
        tasks = {tag: asyncio.create_task(wait("greedy", tag)) for tag in ("g1", "g2", "g3")}
        await settle()
        tasks["u"] = asyncio.create_task(wait("user", "u"))
        tasks["v"] = asyncio.create_task(wait("other", "v"))
        await settle()
        assert q.stats() == {"slots": 2, "alone_slots": 0, "running": 2, "waiting": 5, "queued": 5, "most_waiting": 5,
                             "overfull_entered": 0}
        q.leave("greedy")
        await settle()
        assert order == ["u"]  # it came after greedy's three, and its client runs none
        q.leave("greedy")
        await settle()
        assert order == ["u", "v"]  # greedy and v's client run none now: v's client has not had a turn yet
        q.leave("user")
        await settle()
        assert order == ["u", "v", "g1"]  # only greedy waits
        assert q.running == {"greedy": 1, "other": 1} and q.stats()["waiting"] == 2
        assert set(q._given) == {"greedy", "other"}  # the user, idle, is forgotten
        tasks["g2"].cancel()  # its client went away while it waited
        await settle()
        assert tasks["g2"].cancelled() and q.stats()["waiting"] == 1
        q.leave("other")  # g3 is given the slot ...
        tasks["g3"].cancel()  # ... and cancelled before it ran: the slot is free again
        await settle()
        assert tasks["g3"].cancelled() and order == ["u", "v", "g1"]
        assert q.stats() == {"slots": 2, "alone_slots": 0, "running": 1, "waiting": 0, "queued": 5, "most_waiting": 5,
                             "overfull_entered": 0}
        await q.enter("late")  # taken at once: a slot is free and nobody waits
        assert q.running == {"greedy": 1, "late": 1}
        q.leave("greedy")
        q.leave("late")
        assert q.stats()["running"] == 0 and q.running == {} and q._given == {}

        await q.enter("solo", alone=True)
        await q.enter("solo", alone=True)
        await q.enter("solo", alone=True)  # a client alone runs past the slots ...
        assert q.stats()["running"] == 3 and q.stats()["waiting"] == 0
        waiter = asyncio.create_task(q.enter("solo", alone=False))  # ... until another client shares the worker
        await settle()
        assert not waiter.done() and q.stats()["waiting"] == 1
        alone = asyncio.create_task(q.enter("solo", alone=True))  # and behind a request waiting, it waits its turn
        await settle()
        assert not alone.done() and q.stats()["waiting"] == 2
        await q.enter("user")  # a newcomer running nothing runs at once beside the overfull slots, not after them
        assert q.stats()["running"] == 4 and q.stats()["overfull_entered"] == 1
        second = asyncio.create_task(q.enter("user"))  # its next one waits its turn
        await settle()
        assert not second.done() and q.stats()["waiting"] == 3
        q.leave("solo")
        q.leave("solo")
        await settle()
        assert not (waiter.done() or second.done())  # 2 running: the slots are full
        q.leave("user")
        await settle()
        assert second.done() and not waiter.done()  # the user runs none now: its turn comes first
        q.leave("solo")
        await settle()
        assert waiter.done() and not alone.done()  # then the first of solo's waiting
        q.leave("user")
        await settle()
        assert alone.done()
        q.leave("solo")
        q.leave("solo")
        assert q.stats()["running"] == 0 and q._given == {} and q.stats()["overfull_entered"] == 1

        alone = [True]  # CQA_RUN_SLOTS_ALONE: a client alone runs up to 3 at once, as slots free too
        capped = FairQueue(2, alone_slots=3, alone_now=lambda: alone[0])
        for _ in range(3):
            await capped.enter("solo", alone=True)
        fourth = asyncio.create_task(capped.enter("solo", alone=True))
        await settle()
        assert not fourth.done() and capped.stats()["running"] == 3
        capped.leave("solo")
        await settle()
        assert fourth.done() and capped.stats()["running"] == 3  # still alone when the slot freed: its next runs
        fifth = asyncio.create_task(capped.enter("solo", alone=True))
        await settle()
        alone[0] = False
        await capped.enter("user")  # a newcomer beside the three, past the slots
        capped.leave("solo")
        await settle()
        assert not fifth.done()  # not alone now: held to the 2 slots, 3 running
        capped.leave("user")
        capped.leave("solo")
        await settle()
        assert fifth.done() and capped.stats()["running"] == 2
        unbounded = FairQueue(0)
        for _ in range(100):
            await unbounded.enter("greedy")  # no slots: nobody waits, nothing counted
        assert unbounded.stats() == {"slots": 0, "alone_slots": 0, "running": 0, "waiting": 0, "queued": 0, "most_waiting": 0,
                                     "overfull_entered": 0}
    asyncio.run(run())


def test_a_rate_limiter_holds_each_client_to_its_rate_and_burst(tmp_path):
    """RateLimiter (CQA_RATE_LIMIT_PER_MIN, round 58): a token bucket per client, refilled at the rate; a refused
    request takes no token and is told when one is back; another client has its own; a bucket full again is
    forgotten. In the file the workers share (round 59; round 58 kept the buckets in each process's memory); with no
    limit the file is never opened."""
    from app.errors import RateLimited
    from app.limits import RateLimiter
    path = tmp_path / "cache" / "rate-limits.sqlite3"
    r = RateLimiter(60, path, burst=3)  # one a second
    for _ in range(3):
        r.take("a", now=0.0)
    with pytest.raises(RateLimited) as e:
        r.take("a", now=0.0)
    assert e.value.retry_after_s == pytest.approx(1.0) and "(a)" in str(e.value) and "60" in str(e.value)
    r.take("b", now=0.0)  # its own bucket
    with pytest.raises(RateLimited) as e:
        r.take("a", now=0.5)
    assert e.value.retry_after_s == pytest.approx(0.5)  # half a token back: the refused ones took none
    r.take("a", now=1.0)
    with pytest.raises(RateLimited):
        r.take("a", now=1.5)
    with pytest.raises(RateLimited):
        r.take("a", now=0.2)  # the clock went back: no time passed, no token given
    assert r.clients(now=1.5) == 2 and r.refused == 4 and r.store_errors == 0
    for _ in range(3):
        r.take("a", now=10.0)  # idle long enough: the whole burst again
    assert r.clients(now=10.0) == 1  # b, full again since 3 s, is forgotten
    assert path.exists()
    stats = r.stats()
    assert (stats["rate_limit_per_min"], stats["rate_burst"], stats["rate_shared"]) == (60, 3, True)
    assert (RateLimiter(120, path).burst, RateLimiter(3, path).burst) == (20, 1)  # ten seconds' worth, at least 1
    path.unlink()
    off = RateLimiter(0, path)
    for _ in range(1000):
        off.take("a")
    assert off.stats() == {"rate_limit_per_min": 0, "rate_burst": 0, "rate_limited": 0, "rate_clients": 0,
                           "rate_shared": False, "rate_store_errors": 0}
    assert not path.exists()  # no limit: the file never opened


def test_the_workers_hold_a_client_to_one_rate_between_them_and_a_broken_file_lets_requests_through(tmp_path):
    """Two RateLimiters on one file, as two workers of `cqa serve --workers 2` (each its own connection): the
    client's burst is spent across both, the refill is shared, the last token is taken once (the upsert takes it only
    where one is left, 200 takes from two threads at the same instant give exactly the burst), and a bucket one
    forgets is forgotten for both. A file that cannot be opened lets each request through (the limit fails open),
    counted."""
    import threading

    from app.errors import RateLimited
    from app.limits import RateLimiter
    path = tmp_path / "rate-limits.sqlite3"
    one, two = RateLimiter(60, path, burst=4), RateLimiter(60, path, burst=4)
    taken = []
    for limiter in (one, two, one, two, one, two):
        try:
            limiter.take("scraper", now=100.0)
            taken.append(limiter is one)
        except RateLimited:
            pass
    assert taken == [True, False, True, False]  # four between them, not four each
    two.take("scraper", now=101.0)  # a second's refill, whichever worker it reaches
    with pytest.raises(RateLimited):
        one.take("scraper", now=101.0)
    assert one.refused + two.refused == 3
    assert one.clients(now=101.0) == two.clients(now=101.0) == 1

    won = []
    start = threading.Barrier(2)

    def burst(limiter: RateLimiter) -> None:
        start.wait()
        for _ in range(100):
            try:
                limiter.take("racer", now=200.0)
                won.append(1)
            except RateLimited:
                pass
    threads = [threading.Thread(target=burst, args=(lim,)) for lim in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(won) == 4 and one.store_errors == two.store_errors == 0

    one.take("x", now=300.0)
    one.take("x", now=400.0)  # one forgets the full buckets it finds; two sees the same file
    assert two.clients(now=400.0) == 1

    (tmp_path / "not-a-folder").write_text("")
    broken = RateLimiter(60, tmp_path / "not-a-folder" / "rate-limits.sqlite3", burst=1)
    for _ in range(5):
        broken.take("a", now=0.0)  # let through: the limit fails open, the service does not
    assert broken.store_errors == 5 and broken.refused == 0 and broken.stats()["rate_store_errors"] == 5


def test_rate_limit_refuses_a_client_past_its_rate_and_burst_and_no_one_else(settings, fast_encoder):
    """Through the app (CQA_RATE_LIMIT_PER_MIN): 429 `rate_limited` with Retry-After for the client past it, nothing
    for another or for a request that ranks nothing, counted in GET /ready and /metrics, in the data folder's shared
    file."""
    from indexing.reindex import reindex

    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    app = create_app(settings.model_copy(update={"rate_limit_per_min": 60, "rate_limit_burst": 2,
                                                 "over_share_delay_ms": 0, **STUB_RANKERS}))
    with TestClient(ProxyHeadersMiddleware(app, trusted_hosts="*")) as c:
        scraper, user = Forwarded(c, "198.51.100.1"), Forwarded(c, "198.51.100.2")
        assert [scraper.get("/threads/nope/similar").status_code for _ in range(2)] != [429, 429]  # its burst
        r = scraper.get("/threads/nope/similar")
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited", r.json()
        assert r.headers["Retry-After"] == "1" and "CQA_RATE_LIMIT_PER_MIN" in r.json()["error"]["message"]
        assert user.get("/threads/nope/similar").status_code != 429  # another client
        assert scraper.get("/threads").status_code == 200  # a request that ranks nothing is not counted
        admission = c.get("/ready").json()["admission"]
        assert (admission["rate_limit_per_min"], admission["rate_burst"], admission["rate_limited"],
                admission["rate_clients"], admission["rate_shared"]) == (60, 2, 1, 2, True), admission
        assert settings.rate_limit_file.exists()
        assert 'cqa_rate_limited_total{endpoint="/threads/{thread_id}/similar"} 1.0' in c.get("/metrics").text


def test_a_users_request_runs_before_the_ones_a_busier_client_sent_earlier(settings, fast_encoder, monkeypatch, kept):
    """Through the app, CQA_RUN_SLOTS=1: while a greedy client's /rerank holds the slot (a slow model) and two more of
    its requests wait, another client's request, sent last, is scored next; every request is answered; GET /ready,
    /metrics, the access lines and /search's timings_ms count the waits."""
    import threading

    from indexing.reindex import reindex

    from .conftest import OverlapRanker
    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    plain = OverlapRanker.score
    release, scoring = threading.Event(), threading.Event()
    scored: list[str] = []

    def slow(self, queries):
        scored.extend(q.candidates[0].id for q in queries)
        scoring.set()
        release.wait(30)
        return plain(self, queries)

    def body(who: str) -> dict:
        return {"question": {"body": "visa renewal"}, "candidates": [{"id": who, "text": "visa office"},
                                                                     {"id": who + "-b", "text": "beach"}]}
    app = create_app(settings.model_copy(update={"max_in_flight": 8, "run_slots": 1, "batch_max": 1,
                                                 **STUB_RANKERS}))
    with TestClient(ProxyHeadersMiddleware(app, trusted_hosts="*")) as c:
        greedy, user = Forwarded(c, "198.51.100.1"), Forwarded(c, "198.51.100.2")
        assert user.post("/search", json={"question": {"body": "visa"}}).status_code == 200  # two clients now
        monkeypatch.setattr(OverlapRanker, "score", slow)
        answers: list[tuple[str, int]] = []
        sent = []

        def send(who: str, client: Forwarded) -> None:
            t = threading.Thread(target=lambda: answers.append((who, client.post("/rerank", json=body(who))
                                                                .status_code)))
            t.start()
            sent.append(t)

        def waiting(n: int) -> bool:
            return admission_reaches(c, "waiting", n, pause=0.02)
        try:
            send("g1", greedy)
            assert scoring.wait(30)  # g1 holds the slot
            send("g2", greedy)
            assert waiting(1)
            send("g3", greedy)
            assert waiting(2)
            send("u", user)
            assert waiting(3)
            admission = c.get("/ready").json()["admission"]
            assert (admission["slots"], admission["running"], admission["in_flight"]) == (1, 1, 4)
            release.set()
        finally:
            release.set()
            for t in sent:
                t.join(30)
        assert scored == ["g1", "u", "g2", "g3"]
        assert sorted(answers) == [("g1", 200), ("g2", 200), ("g3", 200), ("u", 200)]
        admission = c.get("/ready").json()["admission"]
        assert (admission["running"], admission["waiting"], admission["queued"], admission["most_waiting"]) == \
            (0, 0, 3, 3)
        assert "cqa_ranking_queue_seconds_count 5.0" in c.get("/metrics").text  # each request's wait, 0 included
        # each ranking request's access line says how long it waited for its slot; /search's timings too
        waits = {r.path: [] for r in kept if r.name == "cqa.access"}
        for r in kept:
            if r.name == "cqa.access":
                waits[r.path].append(getattr(r, "queued_ms", None))
        assert len(waits["/rerank"]) == 4 and sorted(waits["/rerank"])[-1] > 0  # g2, g3, u waited for g1's model
        assert all(w is None for w in waits["/ready"])  # not a ranking request: not queued
        line = next(r for r in kept if r.name == "cqa.access" and r.path == "/rerank" and r.queued_ms > 0)
        assert f"(queued {line.queued_ms:.1f} ms, batch wait {line.batch_wait_ms:.1f} ms)" in line.getMessage()
        searched = user.post("/search", json={"question": {"body": "visa"}}).json()
        assert searched["timings_ms"]["queued"] >= 0
    monkeypatch.setattr(OverlapRanker, "score", plain)


def test_a_request_waiting_for_its_rerankers_batch_says_how_long(settings, fast_encoder, monkeypatch, kept):
    """Round 59: with no run queue (CQA_RUN_SLOTS=0) and batches of one, a /rerank sent while another's model call
    runs waits for that call to end before its own begins: its access line says so (``batch_wait_ms``, at least the
    time the first held the model), the first's says it waited next to nothing, /metrics counts both waits
    (``cqa_rerank_batch_wait_seconds``), and a reranked /search reports its own in ``timings_ms["batch_wait"]``; a
    request that reaches no model has none."""
    import threading

    from indexing.reindex import reindex

    from .conftest import OverlapRanker
    from .test_indexes import fake_encode, fill_store
    fill_store(settings)
    reindex(settings, progress=False, encode_fn=fake_encode)
    plain = OverlapRanker.score
    release, scoring = threading.Event(), threading.Event()

    def slow(self, queries):
        if any(q.candidates[0].id == "first" for q in queries):
            scoring.set()
            release.wait(30)
        return plain(self, queries)

    def body(who: str) -> dict:
        return {"question": {"body": "visa renewal"}, "candidates": [{"id": who, "text": "visa office"}]}
    app = create_app(settings.model_copy(update={"run_slots": 0, "batch_max": 1, **STUB_RANKERS}))
    with TestClient(app) as c:
        monkeypatch.setattr(OverlapRanker, "score", slow)
        answers: dict[str, int] = {}
        first = threading.Thread(target=lambda: answers.update(first=c.post("/rerank", json=body("first")).status_code))
        first.start()
        assert scoring.wait(30)  # the first holds the model
        second = threading.Thread(target=lambda: answers.update(second=c.post("/rerank", json=body("second"))
                                                                .status_code))
        second.start()
        time.sleep(0.3)  # the second is waiting for the model
        release.set()
        first.join(30)
        second.join(30)
        assert answers == {"first": 200, "second": 200}
        lines = [r for r in kept if r.name == "cqa.access" and r.path == "/rerank"]
        waited = sorted(r.batch_wait_ms for r in lines)
        assert len(waited) == 2 and waited[0] < 50 and waited[1] >= 250, waited
        assert f"batch wait {waited[1]:.1f} ms)" in next(r for r in lines if r.batch_wait_ms == waited[1]).getMessage()
        assert "cqa_rerank_batch_wait_seconds_count 2.0" in c.get("/metrics").text
        monkeypatch.setattr(OverlapRanker, "score", plain)
        searched = c.post("/search", json={"question": {"body": "visa"}}).json()
        assert 0 <= searched["timings_ms"]["batch_wait"] < searched["timings_ms"]["total"] + 50
        assert "batch_wait" not in c.post("/search", json={"question": {"body": "visa"}, "rerank": False}).json()[
            "timings_ms"]
        unranked = [r for r in kept if r.name == "cqa.access" and r.path == "/search"][-1]
        assert unranked.queued_ms >= 0 and not hasattr(unranked, "batch_wait_ms")  # it reached no model


def test_a_request_cancelled_before_its_answer_is_logged_as_such(kept):
    """The access line of a request cancelled before any answer began (its client gone, the service stopping) says 499,
    not a 500 the client never got, nor a 200."""
    import asyncio

    from app.access import CANCELLED, RequestIds

    async def app(scope, receive, send):
        raise asyncio.CancelledError

    async def run():
        sent = []

        async def send(message):
            sent.append(message)
        with pytest.raises(asyncio.CancelledError):
            await RequestIds(app)({"type": "http", "method": "GET", "path": "/search", "headers": [
                (b"x-request-id", b"gone-1")]}, None, send)
        return sent
    assert asyncio.run(run()) == []  # nothing answered
    [line] = access_lines(kept, "gone-1")
    assert line.status == CANCELLED == 499


def test_the_workers_metrics_leave_out_a_dead_workers_own_and_live_gauges_and_keep_its_counters(tmp_path, monkeypatch):
    """Metrics with a shared folder ($PROMETHEUS_MULTIPROC_DIR, as `cqa serve --workers N` sets): a scrape lists each
    live worker's own metrics labelled pid, and the files of a worker that died without stopping (kill -9) are swept:
    its own metrics and live gauges leave the scrape, its counters stay in the totals. ``retire`` removes a stopping
    worker's own. (In this process prometheus_client was imported without the folder, so its own values are not in
    files: the files here stand for the other workers'.)"""
    from prometheus_client import CollectorRegistry, Gauge, values
    from prometheus_client import Counter as PromCounter

    from app.metrics import Metrics
    folder = tmp_path / "metrics"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process has now
    for pid, requests in ((dead.pid, 5.0), (os.getppid(), 2.0)):  # a dead worker's files, and a live one's
        monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda pid=pid: pid))
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
        registry = CollectorRegistry()
        PromCounter("cqa_requests_total", "HTTP requests", ["endpoint"], registry=registry).labels("/search").inc(
            requests)
        Gauge("cqa_ranking_in_flight", "in flight", registry=registry, multiprocess_mode="livesum").set(1)
        (folder / f"own-{pid}.prom").write_text(
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            f"process_resident_memory_bytes {pid * 10.0}\n")
    monkeypatch.setattr(values, "ValueClass", values.get_value_class())
    metrics = Metrics()
    assert metrics.shared == folder
    body, media_type = metrics.exposition()
    text = body.decode()
    assert 'cqa_requests_total{endpoint="/search"} 7.0' in text  # both workers' counts, the dead one's kept
    assert "cqa_ranking_in_flight 1.0" in text  # the live one's gauge alone
    assert f'process_resident_memory_bytes{{pid="{os.getppid()}"}} {os.getppid() * 10.0}' in text
    assert f'pid="{dead.pid}"' not in text and not (folder / f"own-{dead.pid}.prom").exists()
    assert f'process_resident_memory_bytes{{pid="{os.getpid()}"}}' in text  # this worker's own, published at once
    assert media_type.startswith("text/plain")
    metrics.retire()
    assert not (folder / f"own-{os.getpid()}.prom").exists()


def test_each_cqa_serve_gets_its_own_metrics_folder_and_a_stopped_ones_is_removed(tmp_path, monkeypatch):
    """`cqa serve --workers N` (``shared_metrics``): the workers' multiprocess files go to ``run/metrics/PID`` of the
    data folder, this `cqa serve`'s own, so a second instance on the same folder is not mixed in; a stopped instance's
    folder is removed, a running one's kept; an operator's own $PROMETHEUS_MULTIPROC_DIR is used as it is."""
    from app.cli import shared_metrics
    from app.metrics import SHARED_ENV
    from app.settings import Settings
    settings = Settings(data_dir=tmp_path / "var")
    runs = settings.data_dir / "run" / "metrics"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for pid in (dead.pid, os.getppid()):
        (runs / str(pid)).mkdir(parents=True)
        (runs / str(pid) / "counter_1.db").write_bytes(b"")
    monkeypatch.setenv(SHARED_ENV, "")  # restored after the test
    monkeypatch.delenv(SHARED_ENV)
    shared_metrics(settings)
    assert os.environ[SHARED_ENV] == str(runs / str(os.getpid())) and (runs / str(os.getpid())).is_dir()
    assert not (runs / str(dead.pid)).exists() and (runs / str(os.getppid()) / "counter_1.db").exists()
    own = tmp_path / "operator-metrics"
    monkeypatch.setenv(SHARED_ENV, str(own))
    shared_metrics(settings)
    assert os.environ[SHARED_ENV] == str(own) and own.is_dir()
