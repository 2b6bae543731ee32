"""Searching within tags (`POST /search`'s `filters.tags`) as a forum's users get it, against the filter it is measured
beside, `filters.category`, side by side in one run.

The forum: the full 2016 corpus as a StackExchange site publishes it. Its threads are written as a dump's folder by
`scripts/make_stackexchange_dump.py` (a thread's category becomes its one tag), `cqa ingest` reads the dump into an
empty data folder and `cqa reindex` builds its generation, both as subprocesses, as an operator runs them. The corpus
folder's embedding cache is copied in first, so the build encodes nothing. Each thread's category is then its first
tag, so a search within one tag must return exactly what the same search within that category returns.

Each original question of the 2016 --split /search benchmark is asked with the tag of the thread that the unfiltered
first stage ranks first for it: the tag a user narrowing that search would most likely pick. The question is then
sent to one real `cqa serve` for answers and for similar questions, in four arms: no filter, `filters.category`,
`filters.tags`, `filters.any_tags` with the tag and one no thread carries (round 56), and `filters.tags` with a
synonym of the tag that no thread carries (`cqa tag-synonyms --add`, round 57). Over --rounds rounds the arms
take turns, their order rotating. Reported:
- each arm's p50 and p95 in ms, and the tags arms' p50 over the category arm's p50;
- whether every tags, any_tags and synonym result equals the category result (ids, ranks and scores), and whether
  every thread those arms return carries the tag.

The in-process part (--scale-threads) times `Retriever.allowed_rows`, the filter's own work, on a synthetic forum
whose threads carry 1-5 tags drawn from a Zipf law over --scale-tags tags, as a large site's threads do:
- any of three tags (two popular, one rare), whose rows must be each tag's rows joined, beside one tag;
- two groups of alternatives (round 57), (a popular or the rare) and (two popular), whose rows must be each group's
  rows joined, then intersected;
- a tag's synonyms (round 57): a family of three whose rows must be its members' joined, and what making the
  families of 5,000 synonyms (StackExchange's order of magnitude) and expanding a filter with them cost;
- the tags filter (one popular tag, one rare tag, two tags), against the category filter on the same rows (category =
  a thread's first tag), and the category filter against the same filter as it was before round 55 (an array of
  strings compared with the category: the reference, the same rows required);
- the retriever's start, and what a service builds before it serves a generation for tags (each row's set of tags
  coded, each tag's list of sets, the tag counts of GET /tags);
- GET /tags's list for a prefix (bisection over the tags by name) against reading every tag, the same list required;
  and with the 5,000 synonyms (round 58), each listed tag's family counted (`with_synonyms`), beside the list alone,
  each count required to be the threads a questions search within the tag is filtered to: counted afresh (`first`)
  and as a page asked again reads them (the generation keeps each family's count, round 59).

Prints a JSON object last.

    python bench/tag_filter.py [--data-dir var | --forum-dir FOLDER] [--split test] [--rounds 3]
                               [--scale-threads 200000]
"""
from __future__ import annotations

import argparse
import json
import platform
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load import add_forum_arguments, judged_forum, post_json, server  # noqa: E402

TARGETS = ("answers", "questions")
ARMS = ("none", "category", "tags", "any_tags", "synonym")
NO_SUCH_TAG = "no thread carries this tag"


def cqa(data_dir: Path, *command: str) -> tuple[float, dict]:
    """`cqa COMMAND` on ``data_dir`` as an operator runs it: its wall seconds and its last line (JSON)."""
    env = {**os.environ, "CQA_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app.cli", *command], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"cqa {' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - t0, json.loads(done.stdout.strip().splitlines()[-1])


def tagged_forum(corpus, work: Path) -> tuple[Path, dict]:
    """The corpus's threads as a StackExchange dump, ingested and indexed in a data folder of their own."""
    from indexing.store import ThreadStore
    from scripts.make_stackexchange_dump import write_dump
    with ThreadStore(corpus.store_path) as store:
        threads = list(store.iter_threads())
    dump = write_dump(threads, work / "dump")
    folder = work / "var"
    (folder / "cache").mkdir(parents=True)
    if (cached := corpus.data_dir / "cache" / "embeddings.sqlite3").exists():
        shutil.copy2(cached, folder / "cache" / "embeddings.sqlite3")
    ingest_s, ingested = cqa(folder, "ingest", str(work / "dump"), "-q")
    reindex_s, built = cqa(folder, "reindex", "-q")
    return folder, {"threads": dump["threads"], "answers": dump["answers"], "ingest_s": round(ingest_s, 1),
                    "reindex_s": round(reindex_s, 1), "ingested": {k: ingested.get(k) for k in ("threads", "answers")},
                    "encoded": built["indexes"]["dense"].get("encoded"), "generation": built["generation"]}


def synonym(tag: str) -> str:
    return f"synonym of {tag}"


def served(folder: Path, questions: dict[str, tuple[str, str]], rounds: int) -> dict:
    """The three arms through one real server (module docstring)."""
    from indexing.models import tag_key, thread_tags
    from indexing.store import ThreadStore
    with ThreadStore(folder / "threads.sqlite3") as store:
        tags_of = {t.id: set(thread_tags(t.meta.get("tags"))) for t in store.iter_threads()}
    # each tag gains a synonym no thread carries (round 57), as an operator adds them: a search within the synonym
    # must be the search within its tag
    every = sorted(set().union(*tags_of.values()))
    cqa(folder, "tag-synonyms", *[a for t in every for a in ("--add", f"{synonym(t)}={t}")])
    ms = {(target, arm): [] for target in TARGETS for arm in ARMS}
    results: dict[tuple, list] = {}
    sizes = {arm: [] for arm in ARMS}
    with server(folder, {}) as (base, _):
        post_json(base + "/search", {"question": {"body": "warm up"}})
        chosen = {}
        for qid, (subject, body) in questions.items():
            status, first = post_json(base + "/search", {"question": {"subject": subject, "body": body}, "k": 1,
                                                         "target": "questions", "rerank": False})
            top = first["results"][0]["thread_id"] if status == 200 and first["results"] else None
            if top is not None and tags_of.get(top):
                chosen[qid] = sorted(tags_of[top])[0]
        for r in range(rounds):
            for n, (qid, tag) in enumerate(chosen.items()):
                subject, body = questions[qid]
                filters = {"none": None, "category": {"category": tag}, "tags": {"tags": [tag]},
                           "any_tags": {"any_tags": [NO_SUCH_TAG, tag]}, "synonym": {"tags": [synonym(tag)]}}
                for target in TARGETS:
                    turn = (r + n) % len(ARMS)
                    order = ARMS[turn:] + ARMS[:turn]
                    for arm in order:
                        ask = {"question": {"subject": subject, "body": body}, "target": target}
                        if filters[arm]:
                            ask["filters"] = filters[arm]
                        t0 = time.perf_counter()
                        status, resp = post_json(base + "/search", ask)
                        ms[(target, arm)].append(1000 * (time.perf_counter() - t0))
                        if status != 200:
                            raise SystemExit(f"POST /search {arm} answered {status} for {qid}: {resp}")
                        if r == 0:
                            results[(qid, target, arm)] = [(x["id"], x["rank"], x["score"]) for x in resp["results"]]
                            sizes[arm].append(len(resp["results"]))
                            if arm in ("tags", "any_tags", "synonym"):
                                assert all(tag_key(tag) in tags_of[x["thread_id"]] for x in resp["results"]), qid
    same = sum(results[(q, t, "tags")] == results[(q, t, "category")] for q in chosen for t in TARGETS)
    same_any = sum(results[(q, t, "any_tags")] == results[(q, t, "category")] for q in chosen for t in TARGETS)
    same_synonym = sum(results[(q, t, "synonym")] == results[(q, t, "category")] for q in chosen for t in TARGETS)
    out = {"questions": len(questions), "asked_with_a_tag": len(chosen), "distinct_tags": len(set(chosen.values())),
           "tags_equal_category": f"{same} of {len(chosen) * len(TARGETS)}",
           "any_tags_equal_category": f"{same_any} of {len(chosen) * len(TARGETS)}",
           "synonym_equal_category": f"{same_synonym} of {len(chosen) * len(TARGETS)}",
           "every_tags_result_carries_the_tag": True,
           "mean_results": {arm: round(float(np.mean(v)), 2) for arm, v in sizes.items()}, "targets": {}}
    for target in TARGETS:
        lat = {arm: np.asarray(ms[(target, arm)]) for arm in ARMS}
        p50 = {arm: float(np.percentile(v, 50)) for arm, v in lat.items()}
        out["targets"][target] = {
            **{f"{arm}_p50_ms": round(p50[arm], 1) for arm in ARMS},
            **{f"{arm}_p95_ms": round(float(np.percentile(v, 95)), 1) for arm, v in lat.items()},
            "tags_over_category_p50": round(p50["tags"] / p50["category"], 3),
            "any_tags_over_category_p50": round(p50["any_tags"] / p50["category"], 3),
            "synonym_over_tags_p50": round(p50["synonym"] / p50["tags"], 3),
            "tags_over_none_p50": round(p50["tags"] / p50["none"], 3), "requests_per_arm": len(lat["tags"])}
        print(json.dumps({target: out["targets"][target]}), file=sys.stderr, flush=True)
    return out


def synthetic_generation(threads: int, tags: int, rows_per_thread: int = 5, seed: int = 7):
    """What ``Retriever`` reads of a generation: the documents of a forum of ``threads`` threads of
    ``rows_per_thread`` rows each (a question, then comments), each thread tagged with 1-5 tags drawn from a Zipf law
    over ``tags`` tags, its category its first tag; and each thread's number of tags."""
    from indexing.documents import ANSWER, MADE, QUESTION, Documents, tags_value
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, tags + 1) ** 1.1
    weights /= weights.sum()
    counts = rng.integers(1, 6, size=threads)
    drawn = rng.choice(tags, size=int(counts.sum()), p=weights)
    docs, at = Documents(), 0
    for t, c in enumerate(counts.tolist()):
        names = [f"tag{i}" for i in dict.fromkeys(drawn[at:at + c].tolist())]
        at += c
        value = tags_value(names)
        for row in range(rows_per_thread):
            docs._add(f"d{t}_{row}", ANSWER if row else QUESTION, f"t{t}", names[0], None, "", value)
    return SimpleNamespace(docs=docs, manifest={"documents_made": MADE}, name="synthetic",
                           sources={"bm25": None}), counts


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def at_scale(threads: int, tags: int, repeats: int) -> dict:
    """``Retriever.allowed_rows`` with each filter on the synthetic forum (module docstring), beside the category
    filter as it was before round 55 (an array of strings compared with the category) as the category's reference."""
    from ranking.retriever import Filters, Retriever, RetrieverConfig
    gen, counts = synthetic_generation(threads, tags)
    t0 = time.perf_counter()
    retriever = Retriever(gen, RetrieverConfig(("bm25",)))
    start_ms = 1000 * (time.perf_counter() - t0)
    t0 = time.perf_counter()
    retriever.prepare()  # what the service's SearchPipeline.prepare builds before it serves a generation
    listed = retriever.tag_counts
    prepare_ms = 1000 * (time.perf_counter() - t0)
    strings = np.array([c or "" for c in gen.docs.categories], dtype=object)
    answers = np.array([k == "answer" for k in gen.docs.kinds], dtype=bool)
    rare = listed[-1][0]  # the least carried tag
    cases = {"popular": ("tag0",), "rare": (rare,), "two": ("tag0", "tag1")}
    either = ("tag0", "tag1", rare)  # any of them (round 56): the rows of each, joined
    joined = np.union1d(np.union1d(retriever.allowed_rows("answers", Filters(tags=either[:1])),
                                   retriever.allowed_rows("answers", Filters(tags=either[1:2]))),
                        retriever.allowed_rows("answers", Filters(tags=either[2:])))
    any_rows = retriever.allowed_rows("answers", Filters(any_tags=either))
    assert np.array_equal(any_rows, joined)
    any_ms = timed(lambda: retriever.allowed_rows("answers", Filters(any_tags=either)), repeats)
    single_ms = timed(lambda: retriever.allowed_rows("answers", Filters(tags=either[:1])), repeats)
    groups = (("tag0", rare), ("tag1", "tag2"))  # (a or b) and (c or d) (round 57): each group's rows, intersected

    def rows_of(*tags_):
        return reduce(np.union1d, [retriever.allowed_rows("answers", Filters(tags=(t,))) for t in tags_])
    grouped = retriever.allowed_rows("answers", Filters(tag_groups=groups))
    assert np.array_equal(grouped, np.intersect1d(rows_of(*groups[0]), rows_of(*groups[1])))
    groups_ms = timed(lambda: retriever.allowed_rows("answers", Filters(tag_groups=groups)), repeats)
    # tag synonyms (round 57): a family of three (tag0 and two synonyms, one carried: tag1) allows the rows of its
    # members joined; and what making the families and expanding a filter cost with StackExchange's number of them
    from ranking.retriever import TagSynonyms
    family = TagSynonyms.of({"tag1": "tag0", "no such synonym": "tag0"})
    by_family = retriever.allowed_rows("answers", Filters(tags=("tag1",)).with_synonyms(family))
    assert np.array_equal(by_family, rows_of("tag0", "tag1"))
    family_ms = timed(lambda: retriever.allowed_rows("answers", Filters(tags=("tag1",)).with_synonyms(family)),
                      repeats)
    many = {f"synonym {i}": f"tag{i % 2000}" for i in range(5000)}
    made_ms = timed(lambda: TagSynonyms.of(many), repeats)
    made = TagSynonyms.of(many)
    expand_ms = timed(lambda: Filters(tags=("tag7", "tag8"), exclude_tags=("tag9",)).with_synonyms(made), repeats)
    out = {"threads": threads, "rows": len(gen.docs), "tags_drawn_from": tags, "tags_held": len(listed),
           "distinct_tag_sets": len(retriever._tags_coded[0]), "mean_tags_per_thread": round(float(counts.mean()), 2),
           "retriever_start_ms": round(start_ms, 1), "tags_prepared_ms": round(prepare_ms, 1), "cases": {},
           "any_of_three": {"tags": list(either), "rows_allowed": int(any_rows.size),
                            "equal_to_the_rows_of_each_joined": True,
                            "p50_ms": round(float(np.median(any_ms)), 2),
                            "one_tag_p50_ms": round(float(np.median(single_ms)), 2)},
           "two_groups": {"tag_groups": [list(g) for g in groups], "rows_allowed": int(grouped.size),
                          "equal_to_each_groups_rows_joined_then_intersected": True,
                          "p50_ms": round(float(np.median(groups_ms)), 2)},
           "synonyms": {"family": list(family.family("tag1")), "rows_allowed": int(by_family.size),
                        "equal_to_the_rows_of_each_member_joined": True,
                        "p50_ms": round(float(np.median(family_ms)), 2),
                        "made_of_5000_p50_ms": round(float(np.median(made_ms)), 2),
                        "filter_expanded_p50_ms": round(float(np.median(expand_ms)), 4)}}
    for name, asked in cases.items():
        tags_ms = timed(lambda: retriever.allowed_rows("answers", Filters(tags=asked)), repeats)
        cat_ms = timed(lambda: retriever.allowed_rows("answers", Filters(category=asked[0])), repeats)
        before_ms = timed(lambda: np.flatnonzero(answers & (strings == asked[0])), repeats)
        rows = retriever.allowed_rows("answers", Filters(tags=asked))
        by_cat = retriever.allowed_rows("answers", Filters(category=asked[0]))
        assert np.array_equal(by_cat, np.flatnonzero(answers & (strings == asked[0])))
        p50 = {k: float(np.median(v)) for k, v in (("tags", tags_ms), ("category", cat_ms), ("before", before_ms))}
        out["cases"][name] = {"tags": list(asked), "rows_allowed": 0 if rows is None else int(rows.size),
                              "category_rows_allowed": int(by_cat.size),
                              "tags_p50_ms": round(p50["tags"], 2), "category_p50_ms": round(p50["category"], 2),
                              "category_before_p50_ms": round(p50["before"], 2),
                              "tags_over_category": round(p50["tags"] / p50["category"], 3),
                              "category_over_before": round(p50["category"] / p50["before"], 3)}
    # GET /tags as a user types: bisection over the tags by name, beside reading every tag (before; the same list)
    out["tags_beginning"] = {}
    for prefix in ("t", "tag1", "tag12", "tag123", "zz"):
        listed, matching = retriever.tags_beginning(prefix, 50)
        scan = [tc for tc in retriever.tag_counts if tc[0].startswith(prefix)]
        assert listed == scan[:50] and matching == len(scan), prefix
        now = timed(lambda: retriever.tags_beginning(prefix, 50), repeats)
        before = timed(lambda: [tc for tc in retriever.tag_counts if tc[0].startswith(prefix)][:50], repeats)
        out["tags_beginning"][prefix] = {"matching": matching, "p50_ms": round(float(np.median(now)), 3),
                                         "scan_p50_ms": round(float(np.median(before)), 3)}
    # GET /tags with the 5,000 synonyms (round 58): a listed tag with synonyms also counts its family's threads, each
    # once (``tag_rows``), which must be how many threads a questions search within the tag is filtered to
    from ranking.retriever import tag_rows
    out["tags_with_synonyms"] = {}
    for prefix in ("", "tag1"):
        listed, _ = retriever.tags_beginning(prefix, 50)
        rows = tag_rows(retriever, listed, made)
        fams = [r for r in rows if "with_synonyms" in r]
        assert fams and all(r["with_synonyms"] == retriever.allowed_rows(
            "questions", Filters(tags=(r["tag"],)).with_synonyms(made)).size for r in fams), prefix
        def first_view():  # the families' counts not kept yet (round 59 keeps them per generation)
            retriever._families.clear()
            return tag_rows(retriever, retriever.tags_beginning(prefix, 50)[0], made)
        first_ms = timed(first_view, repeats)
        with_ms = timed(lambda: tag_rows(retriever, retriever.tags_beginning(prefix, 50)[0], made), repeats)
        plain_ms = timed(lambda: retriever.tags_beginning(prefix, 50), repeats)
        assert tag_rows(retriever, listed, made) == rows  # a kept count is the count
        out["tags_with_synonyms"][prefix or "(none)"] = {
            "listed": len(rows), "with_synonyms": len(fams), "equal_to_the_threads_a_search_filters_to": True,
            "first_p50_ms": round(float(np.median(first_ms)), 3), "p50_ms": round(float(np.median(with_ms)), 3),
            "without_p50_ms": round(float(np.median(plain_ms)), 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_forum_arguments(ap)
    ap.add_argument("--rounds", type=int, default=3, help="times each question is asked in each arm")
    ap.add_argument("--scale-threads", type=int, default=200_000, help="threads of the synthetic forum (0: skip)")
    ap.add_argument("--scale-tags", type=int, default=50_000, help="tags the synthetic forum's are drawn from")
    ap.add_argument("--repeats", type=int, default=20, help="timings of each in-process case")
    args = ap.parse_args()

    out = {"bench": "tag_filter", "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d")}
    corpus, _, questions = judged_forum(args, "questions")
    with tempfile.TemporaryDirectory(prefix="cqa-tags-") as work:
        folder, out["forum"] = tagged_forum(corpus, Path(work))
        print(json.dumps({"forum": out["forum"]}), file=sys.stderr, flush=True)
        out["served"] = served(folder, questions, args.rounds)
    if args.scale_threads:
        out["at_scale"] = at_scale(args.scale_threads, args.scale_tags, args.repeats)
        print(json.dumps({"at_scale": out["at_scale"]}), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
