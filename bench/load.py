"""Load test of a real uvicorn process over loopback: throughput and p50/p95/p99 latency at several
concurrencies. POST /search per target with reranking on and off (side by side in one run), over each
--search-configs data folder in turn (e.g. generations built with two dense encoders); with
--rerank-configs, POST /rerank with each 2016 test-A thread's question and comments (asker, authors, thread
order: what a forum sends to sort a thread) for each configuration in turn, one server each, in one run (and
POST /rerank/questions and /rerank/answers with the test-B and test-C questions, --rerank-inputs questions,answers);
each rerank configuration also reports its server's resident memory after its requests (resident_mb).
Bounded by request count and time.
Defaults to the SemEval full corpus built by the fullcorpus benchmark. Prints a JSON object last.

    python bench/load.py --requests 60 --max-seconds 45
    python bench/load.py --search-configs "base=var/benchmarks/fullcorpus-2016-base,default=var/benchmarks/fullcorpus-2016"
    python bench/load.py --targets none --rerank-configs "before=cross-encoder+signals@torch-fp32,default"
    python bench/load.py --targets none --rerank-inputs questions,answers --rerank-configs default
    python bench/load.py --targets none --levels 1 --rerank-inputs revisits \
        --rerank-configs "no-memo=;CQA_SCORE_MEMO_PAIRS=0,default"
    python bench/load.py --targets none --levels 1 --rerank-inputs answers-revisits \
        --rerank-configs "no-vector-memo=;CQA_VECTOR_MEMO_TEXTS=0,default"
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bodies import body_of, related_threads  # noqa: E402  (bench/, beside this file)


class PacedClient(threading.Thread):
    """One client sending requests one after another with a pause between them, while something else is timed:
    ``send(i)`` returns the status; ``samples`` holds (wall start, wall end, ms, status) of each."""

    def __init__(self, send, pause: float):
        super().__init__(daemon=True)
        self.send, self.pause, self.samples = send, pause, []
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            w0, t0 = time.time(), time.perf_counter()
            status = self.send(i)
            self.samples.append((w0, time.time(), 1000 * (time.perf_counter() - t0), status))
            i += 1
            self.stop.wait(self.pause)


def latency_of(ms: list[float]) -> dict:
    """Requests, p50 and p95 ms of the latencies ``ms`` (None for the percentiles of none)."""
    return {"requests": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 1) if ms else None,
            "p95_ms": round(float(np.percentile(ms, 95)), 1) if ms else None}


def beside_reference(ms: dict[str, list[float]], reference: str = "reference") -> dict:
    """Each side's ``latency_of`` its latencies ``ms`` with its p50's ratio to the ``reference`` side's."""
    ref_p50 = float(np.percentile(ms[reference], 50))
    return {side: {**latency_of(v), "p50_over_reference": round(float(np.percentile(v, 50)) / ref_p50, 3)}
            for side, v in ms.items()}


def judge(base: str, search_id: str, judgements: list[dict], ms: list[float] | None = None) -> None:
    """POST /feedback of ``judgements`` of the search (or order) ``search_id`` to the server at ``base``, its ms
    appended to ``ms`` where given; any answer but 201 stops the bench."""
    t0 = time.perf_counter()
    status, answer = post_json(base + "/feedback", {"search_id": search_id, "judgements": judgements})
    if ms is not None:
        ms.append(1000 * (time.perf_counter() - t0))
    if status != 201:
        raise SystemExit(f"POST /feedback answered {status}: {answer}")


def interleaving_agreement(logged: dict[str, dict], ids: dict[str, str], aps: dict[str, dict[str, float]],
                           challenger: str) -> dict:
    """Per question (or thread): the interleaving's winner (its judged search ``logged[ids[question]]``, the log's
    teams) against the ranker whose own list had the higher AP (``aps``: ``reranker`` and ``challenger``, by
    question); those where either is a tie are left out."""
    from ranking.evaluation.feedback import interleaving
    agree = disagree = 0
    for question, sid in ids.items():
        verdict = interleaving([logged[sid]], challenger)
        won = "A" if verdict["reranker_wins"] else "B" if verdict["challenger_wins"] else None
        better = aps["reranker"][question] - aps["challenger"][question]
        if won is None or better == 0:
            continue
        agree += (won == "A") == (better > 0)
        disagree += (won == "A") != (better > 0)
    return {"both_decided": agree + disagree, "interleaving_agrees": agree, "interleaving_disagrees": disagree}


def preferred(reranker: float, challenger: float, p: float) -> str:
    """The side with more (MAP, wins), where its test says so (p < 0.05); else neither."""
    if p >= 0.05 or reranker == challenger:
        return "neither"
    return "reranker" if reranker > challenger else "challenger"


def searches_in_turns(bases: dict[str, str], bodies: list[tuple[str, dict]], rounds: int,
                      ms: dict[str, list[float]]):
    """Each (question id, POST /search body) of ``bodies`` sent to every server of ``bases`` (side -> base URL), one
    request at a time, the servers' order rotating from one question to the next so that the machine's noise falls on
    every side alike, ``rounds`` times; each request's ms appended to ``ms[side]``. Yields (round, question id,
    {side: response}) once every side answered a question; any status but 200 stops the bench."""
    yield from in_turns(bases, bodies, rounds, ms, lambda base, body: post_json(base + "/search", body), "POST /search")


def in_turns(bases: dict[str, str], items: list[tuple[str, object]], rounds: int, ms: dict[str, list[float]],
             ask, what: str):
    """``searches_in_turns`` with any request: ``ask(base URL, item)`` gives (status, JSON answered) for each (id,
    item) of ``items``; ``what`` names it in an error."""
    sides, turn = list(bases), 0
    for rnd in range(rounds):
        for qid, item in items:
            got: dict[str, dict] = {}
            for side in sides[turn % len(sides):] + sides[:turn % len(sides)]:
                t0 = time.perf_counter()
                status, resp = ask(bases[side], item)
                ms[side].append(1000 * (time.perf_counter() - t0))
                if status != 200:
                    raise SystemExit(f"{side}: {what} answered {status} for {qid}: {resp}")
                got[side] = resp
            turn += 1
            yield rnd, qid, got


def split_latency(samples: list[tuple[float, float, float, int]], windows: list[tuple[float, float]],
                  inside: str = "during", outside: str = "outside") -> dict:
    """A ``PacedClient``'s latencies split by whether each request overlapped one of ``windows`` (wall start, end):
    requests, p50 and p95 ms on each side, the failed, and the p50 ratio inside / outside."""
    parts: dict[str, list[float]] = {inside: [], outside: []}
    for w0, w1, ms, status in samples:
        if status == 200:
            parts[inside if any(a <= w1 and w0 <= b for a, b in windows) else outside].append(ms)
    out: dict = {k: latency_of(v) for k, v in parts.items()}
    out["failed"] = sum(status != 200 for *_, status in samples)
    if parts[inside] and parts[outside]:
        out["p50_ratio"] = round(out[inside]["p50_ms"] / out[outside]["p50_ms"], 2)
    return out


def built_corpus(data_dir: Path):
    """The settings of the full 2016 corpus's own data folder under ``data_dir`` (DATA/benchmarks/fullcorpus-2016,
    what `cqa evaluate` builds), built first if missing."""
    from app.settings import Settings
    from ranking.fullcorpus import corpus_settings, ensure_corpus
    settings = Settings(data_dir=data_dir.resolve())  # absolute: a reference revision's server runs in its worktree
    ensure_corpus(settings, progress=True)
    return corpus_settings(settings)


def add_forum_arguments(ap) -> None:
    """The options of a bench that asks a 2016 /search benchmark's questions of a forum (``judged_forum``)."""
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var",
                    help="the data folder cqa evaluate uses; the forum is DATA/benchmarks/fullcorpus-2016")
    ap.add_argument("--forum-dir", type=Path, help="this data folder as the forum instead (one with a live "
                    "generation)")
    ap.add_argument("--split", choices=["dev", "test"], default="test", help="whose /search questions are asked")
    ap.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")


def forum_settings(args):
    """The forum's settings of a bench's ``--forum-dir`` and ``--data-dir``: ``--forum-dir`` as it is (a test's small
    folder), else the full 2016 corpus's own folder under ``--data-dir`` (``built_corpus``)."""
    if args.forum_dir is None:
        return built_corpus(args.data_dir)
    from app.settings import Settings
    return Settings(data_dir=args.forum_dir.resolve())


def judged_forum(args, target: str):
    """(the forum's settings, the judgements, each question's (subject, body)) of ``add_forum_arguments``' options
    (``forum_settings``); the 2016 ``--split`` /search ``target`` benchmark's questions, the first ``--limit``."""
    from ranking.search_benchmark import qrels_for
    settings = forum_settings(args)
    qrels, questions = qrels_for(settings, args.split, target)
    if args.limit:
        questions = dict(list(questions.items())[: args.limit])
    return settings, qrels, questions


def add_serve_arguments(ap) -> None:
    """The options of a bench whose servers serve a forum asked the 2016 test questions (``served_forum``)."""
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var", help="the data folder cqa evaluate uses (the "
                    "full corpus's is built under it if missing)")
    ap.add_argument("--serve-dir", type=Path, help="the data folder the servers serve (default: the full 2016 "
                    "corpus's)")


def served_forum(args):
    """(the served folder's settings, the 2016 test /search questions' texts) of ``add_serve_arguments``' options:
    ``--serve-dir`` as it is, else the full 2016 corpus's folder under ``--data-dir`` (``built_corpus``)."""
    from app.settings import Settings
    from ranking.fullcorpus import qrels_and_queries
    settings = Settings(data_dir=args.serve_dir.resolve()) if args.serve_dir else built_corpus(args.data_dir)
    _, queries = qrels_and_queries(settings, "test")
    return settings, list(queries.values())


def run_header(bench: str) -> dict:
    """What a bench's JSON line starts with: its name, the machine, when (UTC) and the CPUs."""
    import platform
    return {"bench": bench, "machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count()}


def save_documents_lines(docs, path: Path, chunk: int = 2000) -> None:
    """``docs`` as rounds 18 and 19 saved a generation's documents.json (version 2: a header line, then the columns
    of ``chunk`` documents a line), the reference the binary documents.bin of round 20 is measured against."""
    lines = [json.dumps({"format": "documents", "version": 2, "documents": len(docs), "chunk": chunk})]
    lines += [json.dumps({k: list(v[lo:lo + chunk]) for k, v in docs.__dict__.items()}, ensure_ascii=False)
              for lo in range(0, len(docs), chunk)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def renamed(thread, tag: str):
    """A copy of ``thread`` under new ids (its own and its comments', each + "~" + ``tag``): how the benches grow a
    store by whole copies of the corpus."""
    return thread.model_copy(update={"id": f"{thread.id}~{tag}", "answers": [
        a.model_copy(update={"id": f"{a.id}~{tag}"}) for a in thread.answers]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, body: dict, headers: dict[str, str] | None = None) -> urllib.request.Request:
    return urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                  headers={"Content-Type": "application/json", **(headers or {})})


def post_json(url: str, body: dict, timeout: float = 120, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    """POST a JSON body; the status and the JSON answered (an error's too). For the quality benches, which read
    what the server returns; ``post`` below only times a request."""
    return get_json(_request(url, body, headers), timeout)


def get_json(request: str | urllib.request.Request, timeout: float = 120) -> tuple[int, dict]:
    """GET a URL (or send a prepared request); the status and the JSON answered, an error's too."""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def post(url: str, body: dict, source: str | None = None) -> tuple[int, float]:
    """POST a JSON body on a new connection, as a browser or a forum's backend sends one; (status, seconds), status 0
    where no answer came. ``source``: the local address the connection comes from (any of 127.0.0.0/8 over loopback),
    so one machine stands for several clients."""
    import http.client
    import urllib.parse
    parts = urllib.parse.urlsplit(url)
    payload = json.dumps(body).encode()
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request("POST", parts.path, body=payload, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        status = r.status
    except Exception:
        status = 0
    finally:
        conn.close()
    return status, time.perf_counter() - t0


def run_level(url: str, bodies: list[dict], concurrency: int, requests: int, max_seconds: float, **labels) -> dict:
    lat: list[float] = []
    failed = [0]
    lock = threading.Lock()
    counter = iter(range(requests))
    deadline = time.perf_counter() + max_seconds

    def worker():
        while time.perf_counter() < deadline:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            status, dt = post(url, bodies[i % len(bodies)])
            with lock:
                if status == 200:
                    lat.append(dt)
                else:
                    failed[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    a = np.asarray(lat) * 1000 if lat else np.zeros(1)
    return {**labels, "concurrency": concurrency, "requests": len(lat), "failed": failed[0],
            "throughput_rps": round(len(lat) / wall, 2), "p50_ms": round(float(np.percentile(a, 50)), 1),
            "p95_ms": round(float(np.percentile(a, 95)), 1), "p99_ms": round(float(np.percentile(a, 99)), 1)}


@contextlib.contextmanager
def server(data_dir: Path, env_extra: dict[str, str], bootstrap: bool = False, timeout: float = 300,
           root: Path = ROOT, poll_s: float = 1.0, logs: Path | None = None):
    """A real ``cqa serve`` on a free port with ``env_extra`` set (``bootstrap``: an empty data folder gets
    the default corpus and a first index, as ``make serve`` does), run from the code at ``root`` (another revision's
    checkout, for a bench that compares two); yields (base URL, GET /ready), asked every ``poll_s``. Each server
    starts with an empty score store and vector store of its own (unless ``env_extra`` names them), so the scores
    and vectors an earlier run left in the data folder never answer a request that stands for a first view. ``logs``:
    a folder its standard output and error are written to (``stdout.log``, ``stderr.log``), as a deployment keeps
    them; by default they are dropped."""
    port = free_port()
    store = tempfile.TemporaryDirectory(prefix="cqa-bench-store-")
    env = {**os.environ, "CQA_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root),
           "CQA_SCORE_STORE": str(Path(store.name) / "score-store.sqlite3"),
           "CQA_VECTOR_STORE": str(Path(store.name) / "vector-store.sqlite3"), **env_extra}
    cmd = [sys.executable, "-m", "app.cli", "serve", "--port", str(port)] + ([] if bootstrap else ["--no-bootstrap"])
    outputs = [open(logs / name, "w") for name in ("stdout.log", "stderr.log")] if logs is not None else []
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=outputs[0] if outputs else subprocess.DEVNULL,
                            stderr=outputs[1] if outputs else subprocess.DEVNULL)
    for f in outputs:
        f.close()  # the server holds its own copies
    base = f"http://127.0.0.1:{port}"
    deadline = time.perf_counter() + timeout
    try:
        while True:
            try:
                with urllib.request.urlopen(base + "/ready", timeout=2) as r:
                    ready = json.loads(r.read())
                    break
            except Exception:
                if proc.poll() is not None:
                    raise SystemExit(f"the server stopped (exit {proc.returncode}) with {env_extra}")
                if time.perf_counter() > deadline:
                    raise SystemExit("server did not become ready")
                time.sleep(poll_s)
        yield base, ready
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        store.cleanup()


def reference_checkout(stack: contextlib.ExitStack, rev: str, folder: Path) -> Path:
    """A git worktree of ``rev`` in ``folder`` (removed when ``stack`` closes): the reference side of a bench whose
    servers run another revision's code (``server(root=...)``)."""
    ref = folder / "reference"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(ref), rev], cwd=ROOT, check=True)
    stack.callback(subprocess.run, ["git", "worktree", "remove", "--force", str(ref)], cwd=ROOT, check=False)
    return ref


def reference_module(rev: str, path: str, folder: Path):
    """The module at ``path`` (``package/name.py``, or deeper: ``package/sub/name.py``) as it was at ``rev``, loaded
    in its package as ``package._reference_name``: a bench measures it beside this tree's in one process."""
    import importlib.util
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    *packages, name = path.removesuffix(".py").split("/")
    package = ".".join(packages)
    copy = folder / f"{name}_ref.py"
    copy.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"{package}._reference_{name}", copy)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def every_worker_up(base: str, workers: int, timeout: float = 300) -> None:
    """Back once each of a server's ``workers`` has answered GET /ready (each asked on a new connection, which the
    kernel gives to any of them), so a measure does not start while one is still loading."""
    seen: set[str] = set()
    deadline = time.time() + timeout
    while len(seen) < workers:
        if time.time() > deadline:
            raise SystemExit(f"only {len(seen)} of {workers} workers answered within {timeout:g} s")
        seen.add(get_json(base + "/ready", timeout=30)[1].get("worker", ""))


def resident_mb(base: str) -> float | None:
    """The server's resident memory (``process_resident_memory_bytes`` of GET /metrics; where there are several
    workers, each listed with its pid since round 59, the largest worker's), MB; None off Linux, where the platform
    does not report it."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        found = [float(line.split()[1]) for line in r.read().decode().splitlines()
                 if line.startswith(("process_resident_memory_bytes ", "process_resident_memory_bytes{"))]
    return round(max(found) / 2**20, 1) if found else None


def memo_report(base: str, workers: int) -> dict:
    """What the score memos answered: GET /ready's ``score_memos`` (and the two stores), one worker's; with
    several workers, each worker's under ``by_worker`` (asked until each has answered, at most 100 times)."""
    seen: dict[str, dict] = {}
    for _ in range(100):
        ready = get_json(base + "/ready", timeout=10)[1]
        seen[ready.get("worker", "")] = {"score_memos": ready.get("score_memos", {}),
                                         "score_store": ready.get("score_store"),
                                         "vector_store": ready.get("vector_store")}
        if len(seen) >= workers:
            break
    if workers == 1:
        return next(iter(seen.values()))
    return {"by_worker": seen}


def thread_bodies(settings) -> list[dict]:
    """POST /rerank bodies: each 2016 test-A thread's question and its comments, as a forum sends them."""
    from indexing.catalog import split_file
    from indexing.loaders import load
    bodies = []
    for t in load(settings.semeval_dir / split_file("test")).threads:
        if t.answers:
            bodies.append({"question": {"subject": t.subject, "body": t.body}, "asker_id": t.author_id,
                           "thread_order": True,
                           "candidates": [{"id": a.id, "text": a.text, "author_id": a.author_id} for a in t.answers]})
    return bodies


def related_bodies(settings, n: int = 30) -> list[dict]:
    """POST /rerank bodies of n candidates: each 2016 test-C question with the first n comments of its related
    threads (several threads, so not one thread's order): a long list to sort."""
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    xml, _ = BENCHMARKS["semeval2016-test-C"].paths(settings.semeval_dir)
    return [{"question": {"body": q.text}, "thread_order": False,
             "candidates": [{"id": c.id, "text": c.text} for c in q.candidates[:n]]} for q in queries_for(xml, "C")]


def subtask_bodies(settings, benchmark: str) -> list[dict]:
    """The bodies bench/rerank_quality.py sends for each question of a subtask B file (POST /rerank/questions: its
    related questions in the search engine's order) or C file (POST /rerank/answers: its related threads with their
    comments, 10 threads of up to 10 comments)."""
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    bench = BENCHMARKS[benchmark]
    xml, _ = bench.paths(settings.semeval_dir)
    threads = related_threads(xml) if bench.subtask == "C" else {}
    return [body_of(q, None, bench.subtask, threads.get(q.id)) for q in queries_for(xml, bench.subtask)]


# The endpoint each --rerank-inputs input posts to, and the GET /ready field naming its reranker (others: /rerank)
INPUT_ENDPOINTS = {"questions": ("/rerank/questions", "question_reranker"),
                   "answers": ("/rerank/answers", "answers_reranker")}


def answers_revisit_bodies(settings) -> dict[str, list[dict]]:
    """A forum whose own search returns threads it returned before, for another new question: POST /rerank/answers
    bodies of the 2016 test-C questions (each with its 10 related threads), then the same threads again, each list
    with the next question of the file (the last with the first). Run the rounds in this order, over the same
    threads: the second is what the encoders' vector memos (CQA_VECTOR_MEMO_TEXTS) are for."""
    first = subtask_bodies(settings, "semeval2016-test-C")
    return {"answers-first": first,
            "answers-other-question": [{**b, "question": first[(i + 1) % len(first)]["question"]}
                                       for i, b in enumerate(first)]}


def revisit_bodies(settings) -> dict[str, list[dict]]:
    """A forum showing its threads again: POST /rerank bodies of the 2016 test-A threads with two or more comments,
    in three rounds: each thread without its last comment (a first view), with it (one new comment), and the same
    again (a view with nothing new). Run the rounds in this order, over the same threads."""
    threads = [b for b in thread_bodies(settings) if len(b["candidates"]) >= 2]
    return {"revisit-first": [{**b, "candidates": b["candidates"][:-1]} for b in threads],
            "revisit-new-comment": threads, "revisit-same": threads}


def parse_configs(text: str) -> list[tuple[str, dict[str, str]]]:
    """``label=RANKER@INFERENCE;VAR=VALUE;...`` entries (each part may be left out; ``default``: the settings'
    own; the ``VAR=VALUE`` parts set more of the server's environment, e.g. ``CQA_SCORE_MEMO_PAIRS=0``)."""
    out = []
    for entry in filter(None, text.split(",")):
        label, _, spec = entry.partition("=")
        spec, *extra = spec.split(";")
        ranker, _, inference = spec.partition("@")
        env = {k: v for k, v in (("CQA_DEFAULT_RANKER", ranker), ("CQA_INFERENCE", inference)) if v}
        env.update(e.split("=", 1) for e in extra if e)
        out.append((label, env))
    return out


def parse_search_configs(text: str, default: Path) -> list[tuple[str, Path]]:
    """``label=DATA_DIR`` entries; none given: the --data-dir folder, labelled ``default``."""
    out = [(label, Path(folder)) for label, _, folder in (e.partition("=") for e in filter(None, text.split(",")))]
    return out or [("default", default)]


def load_search(folder: Path, label: str, questions: list[str], targets: list[str], concurrencies: list[int],
                args, levels: list[dict]) -> dict:
    """POST /search on a real server over ``folder``: each target, reranking off then on, at each concurrency
    (rows appended to ``levels``); returns what the server said it serves."""
    with server(folder, {}) as (base, ready):
        for rerank in (False, True):  # warm-up: load the encoder
            post(base + "/search", {"question": {"body": "warm up"}, "rerank": rerank})
        for target in targets:
            for rerank in (False, True):
                bodies = [{"question": {"body": q}, "k": 10, "rerank": rerank, "target": target} for q in questions]
                for c in concurrencies:
                    r = run_level(base + "/search", bodies, c, args.requests, args.max_seconds,
                                  endpoint="search", config=label, target=target, rerank=rerank)
                    print(json.dumps(r), file=sys.stderr, flush=True)
                    levels.append(r)
    return {"data_dir": str(folder), "generation": ready["generation"], "dense_encoder": ready.get("dense_encoder"),
            "documents": ready["sizes"]["documents"], "rerankers": ready["search_rerankers"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var/benchmarks/fullcorpus-2016",
                    help="a data folder with a store and a live index generation")
    ap.add_argument("--requests", type=int, default=100, help="requests per level")
    ap.add_argument("--max-seconds", type=float, default=60, help="time cap per level")
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--targets", default="answers,questions", help="POST /search targets to load ('none': skip)")
    ap.add_argument("--rerank-inputs", default="threads,related30",
                    help="POST /rerank bodies: threads (each test-A thread's 10 comments with their metadata), "
                         "related30 (each test-C question with 30 comments of its related threads), revisits (test-A "
                         "threads shown again: first without their last comment, then with it, then the same again; "
                         "what the score memos, CQA_SCORE_MEMO_PAIRS, are for), questions (POST /rerank/questions: "
                         "each test-B question with its 10 related questions), answers (POST /rerank/answers: each "
                         "test-C question with its 10 related threads and their comments), answers-revisits (the "
                         "answers bodies, then the same threads again with another test-C question; what the vector "
                         "memos, CQA_VECTOR_MEMO_TEXTS, are for)")
    ap.add_argument("--search-configs", default="",
                    help="POST /search against each LABEL=DATA_DIR in turn (comma-separated), each folder served with "
                         "its own live generation (e.g. one built with CQA_DENSE_ENCODER=base); default: "
                         "default=--data-dir")
    ap.add_argument("--rerank-configs", default="",
                    help="POST /rerank under each LABEL=RANKER@INFERENCE in turn (comma-separated; an empty part "
                         "keeps the default, e.g. 'before=cross-encoder+signals@torch-fp32,default')")
    args = ap.parse_args()
    from app.settings import Settings
    from ranking.fullcorpus import qrels_and_queries
    settings = Settings()
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the servers (finally above)
    levels_ = [int(x) for x in args.levels.split(",")]
    levels, out = [], {"cpus": os.cpu_count()}
    targets = [t for t in args.targets.split(",") if t and t != "none"]
    if targets:
        _, queries = qrels_and_queries(settings, "test")
        questions = list(queries.values())
        out["search"] = {label: load_search(folder, label, questions, targets, levels_, args, levels)
                         for label, folder in parse_search_configs(args.search_configs, args.data_dir)}
    if args.rerank_configs:
        for same in ({"threads", "revisits"}, {"answers", "answers-revisits"}):
            if same <= set(args.rerank_inputs.split(",")):
                raise SystemExit(f"--rerank-inputs: {' and '.join(sorted(same))} send the same threads, so the memos "
                                 "would answer the second from the first; run them one at a time")
        inputs = {"threads": lambda s: {"threads": thread_bodies(s)},
                  "related30": lambda s: {"related30": related_bodies(s)}, "revisits": revisit_bodies,
                  "questions": lambda s: {"questions": subtask_bodies(s, "semeval2016-test-B")},
                  "answers": lambda s: {"answers": subtask_bodies(s, "semeval2016-test-C")},
                  "answers-revisits": answers_revisit_bodies}
        bodies = {k: v for name in args.rerank_inputs.split(",") for k, v in inputs[name](settings).items()}
        out["rerank"] = {}
        for label, env in parse_configs(args.rerank_configs):
            with server(args.data_dir, env) as (base, ready):
                out["rerank"][label] = {"reranker": ready["reranker"], "question_reranker": ready["question_reranker"],
                                        "answers_reranker": ready["answers_reranker"],
                                        "inference": ready.get("inference"), "env": env}
                workers = int(env.get("CQA_WORKERS", os.environ.get("CQA_WORKERS", "1")))
                for i in range(4 * workers):  # each worker's first model calls; new texts, so no memo answers them
                    post(base + "/rerank", {"question": {"body": f"warm up {i}"},
                                            "candidates": [{"id": "w", "text": f"warm up {i}"}]})
                # Each level takes the next bodies of its input, never ones sent before, so a server's score memos
                # never answer a request that stands for a first view (the revisit rounds share their threads).
                start: dict[str, int] = {}
                for c in levels_:
                    for name, items in bodies.items():
                        group = name.split("-")[0]
                        at = start.get(group, 0)
                        chunk = items[at: at + args.requests]
                        if not chunk:
                            print(f"{name}: no bodies left for concurrency {c}", file=sys.stderr)
                            continue
                        endpoint, field = INPUT_ENDPOINTS.get(group, ("/rerank", "reranker"))
                        r = run_level(base + endpoint, chunk, c, len(chunk), args.max_seconds,
                                      endpoint=endpoint.lstrip("/"), config=label, reranker=ready[field], input=name)
                        print(json.dumps(r), file=sys.stderr, flush=True)
                        levels.append(r)
                    for group in {name.split("-")[0] for name in bodies}:
                        start[group] = start.get(group, 0) + args.requests
                out["rerank"][label].update(memo_report(base, workers), resident_mb=resident_mb(base))
    out["levels"] = levels
    print(json.dumps(out))


if __name__ == "__main__":
    main()
