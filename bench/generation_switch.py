"""What going live on a new generation costs the searches a service answers meanwhile, apart from any build: a real
`cqa serve` (automatic refresh off) on a data folder holding two generations with the same indexes (the live one,
and a copy under another name whose files are hard links), its `current` pointer flipped between them every
--every seconds (as a publish flips it, nothing being built; the server polls for it every --poll-s), while one
client sends a reranked POST /search (target answers) every --pace seconds (0.25). Each switch window runs from the flip until
GET /ready names the new generation; latency is split by whether a request overlapped one.

Side by side in one run, one server per --formats entry and --faiss entry. --formats: the generations' documents in that
format, `binary` (documents.bin: the columns' UTF-8 bytes and offsets, the texts decoded as they are read, what a build
writes since round 20), `lines` (documents.json, a header and 2,000 documents a line, rounds 18-19) or `object`
(documents.json as one JSON object, before). --faiss: the second generation's FAISS file `linked` (a hard link, as a
build that grew the live index writes it: since round 19 the service then shares the index it has in memory rather than
reading the file again) or `copied` (another file, as a build that wrote its index anew). Beside each, the server's
resident memory (GET /metrics) once ready and after the last switch, and in this process: the seconds `load_current`
takes (the documents and the term matrix alone too, and the second generation loaded after the first, as the service
loads it), `build_pipeline` with the rerankers a service loads at its start, the longest a thread that wakes every
millisecond waited while `load_current` ran (how long loading held Python's lock at a stretch: what a search's Python
waits), and the first reranked /search answers on a generation just loaded, without and with `SearchPipeline.prepare`
(which the service runs while it loads one, since round 18), beside a second search; and what ``prepare`` builds, built
again row by row as before round 22 (the reference), with whether both agree.
Prints a JSON object last.

    python bench/generation_switch.py --data-dir /tmp/cqa-full --switches 6
    python bench/generation_switch.py --index-of /tmp/big10 --switches 6   # any data folder with a live generation
    python bench/generation_switch.py --index-of /tmp/big10 --switches 6 --formats binary --faiss copied,linked
    python bench/generation_switch.py --index-of /tmp/big10 --switches 12 --formats lines,binary --faiss linked
    python bench/generation_switch.py --index-of /tmp/big10 --switches 12 --faiss linked --switch-interval-levels 0,0.5

With --switch-interval-levels each $CQA_LOAD_SWITCH_INTERVAL_MS (Python's switch interval while the server loads a
generation; 0: Python's own, 5 ms) gets its own server, in the order given.

The data folder is not changed: each server gets a temporary one, its store copied and its indexes hard-linked.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from indexing.documents import documents_file  # noqa: E402
from indexing.generations import point_current  # noqa: E402
from load import (PacedClient, get_json, post_json, resident_mb, save_documents_lines, server,  # noqa: E402
                  split_latency)

QUESTIONS = ["where can I renew my residence permit", "cheap flights to Manila in December",
             "is the metro open on Friday", "which bank gives the best car loan",
             "visa renewal for my wife", "where to buy a used car in Doha",
             "best school for kids near the pearl", "how do I get a driving licence"]


def two_generations(source: Path, folder: Path, documents_format: str, faiss_file: str = "linked") -> tuple[str, str]:
    """``folder`` a data folder serving ``source``'s live generation: the store copied, the generation's files hard
    links but the documents, written in ``documents_format``, and a second generation beside it, the same files
    under another name (its manifest says so), its FAISS file a copy when ``faiss_file`` is ``copied``."""
    from indexing.documents import FILE, OLD_FILE, Documents
    from indexing.generations import current_generation
    live = current_generation(source / "indexes")
    if live is None:
        raise SystemExit(f"{source}: no live generation")
    (folder / "indexes").mkdir(parents=True)
    shutil.copy2(source / "threads.sqlite3", folder / "threads.sqlite3")
    if (source / "cache").is_dir():
        shutil.copytree(source / "cache", folder / "cache", copy_function=os.link)
    twin = live + "-twin"
    top = str(source / "indexes" / live)
    docs = Documents.load(documents_file(source / "indexes" / live))
    docs.texts = list(docs.texts)
    def copy_function(name):
        def put(src, dst):
            (shutil.copy2 if name == twin and faiss_file == "copied" and Path(src).name == "index.faiss"
             else os.link)(src, dst)
        return put
    for name in (live, twin):  # every file a hard link but the manifest, which names the generation, and documents
        shutil.copytree(top, folder / "indexes" / name, copy_function=copy_function(name),
                        ignore=lambda d, names: ["manifest.json", FILE, OLD_FILE] if d == top else [])
        m = json.loads((source / "indexes" / live / "manifest.json").read_text())
        gen = folder / "indexes" / name
        (gen / "manifest.json").write_text(json.dumps({**m, "generation": name}))
        if documents_format == "binary":
            docs.save(gen / FILE)
        elif documents_format == "lines":
            save_documents_lines(docs, gen / OLD_FILE)
        else:
            (gen / OLD_FILE).write_text(json.dumps(docs.__dict__, ensure_ascii=False), encoding="utf-8")
    point_current(folder / "indexes", live)
    return live, twin


def longest_stall(fn) -> tuple[float, float]:
    """Seconds ``fn`` takes, and the longest a thread sleeping 1 ms at a time waited to run again meanwhile."""
    stop, gaps = threading.Event(), [0.0]

    def ticker():
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    fn()
    took = time.perf_counter() - t0
    stop.set()
    t.join()
    return took, max(gaps)


def load_parts(folder: Path, settings, twin: str) -> dict:
    """Seconds of what the serving process does to go live on ``folder``'s generation, by part, and on ``twin``
    after it."""
    from indexing.documents import Documents
    from indexing.searcher import Generation
    from indexing.termmatrix import TermMatrix
    from indexing.store import ThreadStore
    from ranking.pipeline import SearchRequest, build_pipeline
    from ranking.rankers import search_rerankers
    gen_folder = folder / "indexes" / (folder / "indexes" / "current").read_text().strip()
    Generation(gen_folder, settings.device)  # the files in the page cache, as a build just wrote them
    out = {}
    t0 = time.perf_counter()
    Documents.load(documents_file(gen_folder))
    out["documents_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    TermMatrix.load(gen_folder / "terms")
    out["term_matrix_s"] = round(time.perf_counter() - t0, 3)
    loaded = []
    took, stall = longest_stall(lambda: loaded.append(Generation(gen_folder, settings.device)))
    out["load_current_s"], out["longest_stall_ms"] = round(took, 3), round(1000 * stall, 1)
    after = []
    took, stall = longest_stall(lambda: after.append(Generation(folder / "indexes" / twin, settings.device,
                                                                loaded[0])))
    out["load_after_live_s"], out["load_after_live_stall_ms"] = round(took, 3), round(1000 * stall, 1)
    out["faiss_index_shared"] = (loaded[0].dense is not None and after[0].dense is not None
                                 and after[0].dense.index.index is loaded[0].dense.index.index)
    after.clear()
    rerankers = search_rerankers(settings)  # the service loads them once, at its start
    t0 = time.perf_counter()
    build_pipeline(settings, loaded[0], lambda thread_id: None, rerankers)
    out["build_pipeline_s"] = round(time.perf_counter() - t0, 3)
    out["documents"] = len(loaded[0].docs)

    # the first reranked /search answers on a generation just loaded, without and with SearchPipeline.prepare (what
    # the service runs while it loads), each question asked once, after one search that warms the models
    def searched(pipe, question: str) -> float:
        t0 = time.perf_counter()
        pipe.search(SearchRequest(question, target="answers"))
        return round(1000 * (time.perf_counter() - t0), 1)
    with ThreadStore(folder / "threads.sqlite3") as store:
        searched(build_pipeline(settings, loaded[0], store, rerankers), QUESTIONS[0])
        plain = build_pipeline(settings, Generation(gen_folder, settings.device), store, rerankers)
        out["first_search_ms"] = searched(plain, QUESTIONS[1])
        out["second_search_ms"] = searched(plain, QUESTIONS[2])
        ready = build_pipeline(settings, Generation(gen_folder, settings.device), store, rerankers)
        t0 = time.perf_counter()
        ready.prepare()
        out["prepare_s"] = round(time.perf_counter() - t0, 3)
        out["first_search_prepared_ms"] = searched(ready, QUESTIONS[3])
        t0 = time.perf_counter()
        reference = rows_row_by_row(ready.gen)
        out["prepare_row_by_row_s"] = round(time.perf_counter() - t0, 3)
        out["prepare_same_rows"] = reference == tuple({t: list(r) for t, r in d.items()} for d in ready.retriever.thread_runs)
    return out


def rows_row_by_row(gen) -> tuple[dict, dict]:
    """The reference for ``prepare``: each thread's rows and its comments' rows as it built them before round 22, in a
    pass over every row (now ranges from the question rows, ``Retriever.thread_runs``)."""
    from indexing.documents import ANSWER
    rows: dict[str, list[int]] = {}
    for row, tid in enumerate(gen.docs.thread_ids):
        rows.setdefault(tid, []).append(row)
    kinds = gen.docs.kinds
    return rows, {tid: [i for i in r if kinds[i] == ANSWER] for tid, r in rows.items()}


def run_server(folder: Path, names: tuple[str, str], args, interval: str | None = None
               ) -> tuple[list[float], dict, dict]:
    """The switches against a real server on ``folder``: each one's seconds to go live, the search latency, and the
    server's resident memory once ready and after the last switch. ``interval``: its $CQA_LOAD_SWITCH_INTERVAL_MS."""
    env = {"CQA_REFRESH_S": "0", "CQA_GENERATION_POLL_S": str(args.poll_s),
           **({"CQA_LOAD_SWITCH_INTERVAL_MS": interval} if interval is not None else {})}
    windows, lags = [], []
    with server(folder, env) as (base, ready):
        post_json(base + "/search", {"question": {"body": "warm up"}, "target": "answers"})
        memory = {"ready_mb": resident_mb(base)}
        client = PacedClient(lambda i: post_json(base + "/search", {"question": {"body": QUESTIONS[4 + i % 4]},
                                                                    "k": 10, "target": "answers"})[0], args.pace)
        client.start()
        try:
            time.sleep(args.every)
            for n in range(args.switches):
                name = names[(n + 1) % 2]
                flipped = time.time()
                point_current(folder / "indexes", name)
                while get_json(base + "/ready")[1].get("generation") != name:
                    if time.time() - flipped > args.timeout:
                        raise SystemExit(f"the server did not go live on {name} within {args.timeout} s")
                    time.sleep(0.05)
                live = time.time()
                windows.append((flipped, live))
                lags.append(round(live - flipped, 3))
                print(json.dumps({"switch": n + 1, "to": name, "live_after_s": lags[-1]}), file=sys.stderr,
                      flush=True)
                time.sleep(max(0.0, args.every - (live - flipped)))
        finally:
            client.stop.set()
            client.join()
        memory["after_switches_mb"] = resident_mb(base)
    return lags, split_latency(client.samples, windows, "during_switch", "no_switch"), memory


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "var",
                    help="the data folder cqa evaluate uses: serves its full 2016 corpus (built if missing)")
    ap.add_argument("--index-of", type=Path, default=None, help="serve this data folder's live generation instead")
    ap.add_argument("--switches", type=int, default=6, help="flips of the current pointer")
    ap.add_argument("--every", type=float, default=8.0, help="seconds from one flip to the next")
    ap.add_argument("--pace", type=float, default=0.25, help="seconds between the client's searches (the pause after "
                    "each answer): shorter, more of them meet a switch window, which is short on a small corpus")
    ap.add_argument("--poll-s", type=float, default=0.25, help="the server's CQA_GENERATION_POLL_S (default 2): "
                    "short, so a switch window is mostly the loading rather than the wait for the next poll")
    ap.add_argument("--formats", default="binary", help="the documents' formats, comma-separated: binary (a "
                    "build's since round 20), lines (rounds 18-19), object (before)")
    ap.add_argument("--faiss", default="copied,linked", help="the second generation's FAISS file, comma-separated: "
                    "linked (a grown index's build: shared in memory since round 19), copied (a new file)")
    ap.add_argument("--switch-interval-levels", default=None, help="each server's CQA_LOAD_SWITCH_INTERVAL_MS, "
                    "comma-separated, one server each (default: the server's default only)")
    ap.add_argument("--timeout", type=float, default=120, help="longest wait for the server to go live, seconds")
    args = ap.parse_args()
    intervals = args.switch_interval_levels.split(",") if args.switch_interval_levels else [None]

    formats, faiss_files = args.formats.split(","), args.faiss.split(",")
    if not formats or set(formats) - {"binary", "lines", "object"}:
        raise SystemExit("--formats: comma-separated, each binary, lines or object")
    if not faiss_files or set(faiss_files) - {"linked", "copied"}:
        raise SystemExit("--faiss: comma-separated, each linked or copied")

    from app.settings import Settings
    if args.index_of is not None:
        source = args.index_of
    else:
        from load import built_corpus
        source = built_corpus(args.data_dir).data_dir
    runs = []
    for documents_format, faiss_file, interval in itertools.product(formats, faiss_files, intervals):
        with tempfile.TemporaryDirectory(prefix="cqa-switch-") as tmp:
            folder = Path(tmp) / "data"
            names = two_generations(source, folder, documents_format, faiss_file)
            parts = load_parts(folder, Settings(data_dir=folder), names[1])
            print(json.dumps({"documents_format": documents_format, "faiss": faiss_file, "in_process": parts}),
                  file=sys.stderr, flush=True)
            size = documents_file(folder / "indexes" / names[0]).stat().st_size
            lags, latency, memory = run_server(folder, names, args, interval)
        runs.append({"documents_format": documents_format, "faiss": faiss_file, "load_switch_interval_ms": interval,
                     "documents": parts["documents"],
                     "documents_file_bytes": size, "live_after_s": lags, "in_process": parts,
                     "search_latency": latency, "server_resident": memory})
    out = {"bench": "generation_switch", "machine": f"{platform.processor() or platform.machine()}, "
           f"{platform.system()}", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cpus": os.cpu_count(), "source": str(source), "switches": args.switches, "every_s": args.every,
           "generation_poll_s": args.poll_s, "runs": runs}
    by = {r["documents_format"]: r for r in runs if r["faiss"] == faiss_files[-1] and
          r["load_switch_interval_ms"] == intervals[-1]}
    for new_format, old_format in (("lines", "object"), ("binary", "lines")):
        if {new_format, old_format} <= set(by):
            new, old = by[new_format], by[old_format]
            key = f"{new_format}_vs_{old_format}"
            out[f"{key}_stall_ratio"] = round(old["in_process"]["longest_stall_ms"]
                                              / max(new["in_process"]["longest_stall_ms"], 1e-3), 2)
            out[f"{key}_load_ratio"] = round(old["in_process"]["load_current_s"]
                                             / max(new["in_process"]["load_current_s"], 1e-3), 2)
            for q in ("p50_ms", "p95_ms"):
                pair = [r["search_latency"]["during_switch"][q] for r in (old, new)]
                if all(pair):
                    out[f"{key}_switch_{q[:3]}_ratio"] = round(pair[0] / pair[1], 2)
            out[f"{key}_live_after_s_median_ratio"] = round(
                float(np.median(old["live_after_s"])) / max(float(np.median(new["live_after_s"])), 1e-3), 2)
    by = {r["faiss"]: r for r in runs if r["documents_format"] == formats[-1] and
          r["load_switch_interval_ms"] == intervals[-1]}
    if {"linked", "copied"} <= set(by):
        new, old = by["linked"], by["copied"]
        out["faiss_load_after_live_ratio"] = round(old["in_process"]["load_after_live_s"]
                                                   / max(new["in_process"]["load_after_live_s"], 1e-3), 2)
        for q in ("p50_ms", "p95_ms"):
            pair = [r["search_latency"]["during_switch"][q] for r in (old, new)]
            if all(pair):
                out[f"faiss_switch_{q[:3]}_ratio"] = round(pair[0] / pair[1], 2)
        out["faiss_live_after_s_median_ratio"] = round(
            float(np.median(old["live_after_s"])) / max(float(np.median(new["live_after_s"])), 1e-3), 2)
    if len(intervals) > 1:  # the first level against each other, during the switches
        first = next(r for r in runs if r["load_switch_interval_ms"] == intervals[0])
        for r in runs:
            if r["load_switch_interval_ms"] != intervals[0] and r["faiss"] == first["faiss"] \
                    and r["documents_format"] == first["documents_format"]:
                for q in ("p50_ms", "p95_ms"):
                    pair = [x["search_latency"]["during_switch"][q] for x in (first, r)]
                    if all(pair):
                        key = f"switch_interval_{intervals[0]}_vs_{r['load_switch_interval_ms']}_switch_{q[:3]}_ratio"
                        out[key] = round(pair[0] / pair[1], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
