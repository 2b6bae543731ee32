"""The ``cqa`` command line: ingest, backup, export, erase, reindex, serve, search, train, evaluate, predict.

Each subcommand that produces figures prints, as its last line, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

log = logging.getLogger("cqa")


def _settings(args: argparse.Namespace):
    """The settings, with the command's options over the environment; a bad value (an option or a CQA_
    variable) ends the command with its message and exit code 2."""
    from pydantic import ValidationError

    from .settings import Settings
    overrides = {k: v for k in ("data_dir", "dense_encoder") if (v := getattr(args, k, None))}
    try:
        return Settings(**overrides)
    except ValidationError as e:
        for err in e.errors():
            print(f"error: {'.'.join(map(str, err['loc']))}: {err['msg']}", file=sys.stderr)
        raise SystemExit(2) from None


def _emit(obj: dict) -> None:
    print(json.dumps(obj, ensure_ascii=False, sort_keys=False), flush=True)


# --- ingest ---------------------------------------------------------------------------
def _removal_limit(text: str):
    """``--max-remove``: a count or a share, or argparse's usage error saying what is expected."""
    from indexing.ingest import RemovalLimit
    try:
        return RemovalLimit.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _progress_lines(at) -> None:
    """``--progress-json``: where the ingest is (``IngestProgress``), a JSON line on standard error."""
    print(json.dumps({"progress": at.as_dict()}), file=sys.stderr, flush=True)


def cmd_ingest(args: argparse.Namespace) -> int:
    from indexing.generations import current_generation
    from indexing.ingest import DEFAULT_REMOVAL_LIMIT, ingest_paths
    from indexing.loaders import LoadError
    from indexing.store import StoreError, ThreadStore

    if args.max_remove is not None and not args.mirror:
        print("error: --max-remove limits --mirror's removals; pass --mirror too, or drop it", file=sys.stderr)
        return 2
    settings = _settings(args)
    before_write = None
    if not args.dry_run and (args.encode == "always" or (args.encode == "auto" and
                                                         current_generation(settings.index_root) is not None)):
        from functools import partial

        from indexing.reindex import encode_ahead
        before_write = partial(encode_ahead, settings, max_texts=None, progress=not args.quiet)
    # encoding beside a service: no more CPU than its automatic refresh gets, so its searches come first
    nice = args.nice if args.nice is not None else settings.refresh_nice if before_write is not None else 0
    if nice:
        os.nice(nice)
    with ThreadStore(settings.store_path) as store:
        try:
            report = ingest_paths(store, [Path(p) for p in args.paths], fmt=args.format,
                                  strict=args.strict, progress=not args.quiet, before_write=before_write,
                                  mirror=(args.max_remove or DEFAULT_REMOVAL_LIMIT) if args.mirror else None,
                                  dry_run=args.dry_run, on_progress=_progress_lines if args.progress_json else None)
        except (LoadError, StoreError) as e:
            print(f"error: {e}", file=sys.stderr)
            done = getattr(e, "written_before", 0)
            print((f"{done} threads of that file were written before it, each whole; nothing after"
                   if done else "nothing from that file was written") +
                  ("; fix it or drop --strict to skip bad records" if args.strict else ""), file=sys.stderr)
            return 2
        totals = store.counts()
    for e in report.errors[:20]:
        print(f"skipped: {e}", file=sys.stderr)
    if len(report.errors) > 20:
        print(f"... and {len(report.errors) - 20} more skipped records", file=sys.stderr)
    _emit({**report.as_dict(), "store": totals})
    if args.dry_run:
        print("dry run: nothing was written; the counts are what this ingest would do to the store as it is",
              file=sys.stderr)
    if report.mirror is not None and report.mirror.refused:
        print(f"mirror: {report.mirror.refused}", file=sys.stderr)
        return 3
    return 0


# --- backup, export -------------------------------------------------------------------
def _copy_errors() -> tuple[type[Exception], ...]:
    """What a backup or an export reports as a message and status 2: a refusal, the file system's, SQLite's."""
    import sqlite3

    from indexing.store import StoreError
    return StoreError, OSError, sqlite3.Error


def cmd_backup(args: argparse.Namespace) -> int:
    from indexing.backup import backup, dated_name
    from ranking.evaluation.feedback import carried_by_backups
    settings = _settings(args)
    dest = Path(args.dest)
    if dest.is_dir():
        dest = dest / dated_name("store")
    try:
        _emit(backup(settings.store_path, dest, beside=carried_by_backups(settings.feedback_file)))
    except _copy_errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from indexing.backup import export
    settings = _settings(args)
    to_stdout = args.output in (None, "-")
    try:
        with tqdm(unit="thread", desc="export", disable=args.quiet, file=sys.stderr) as bar:
            summary = export(settings.store_path, None if to_stdout else Path(args.output),
                             on_thread=lambda n: bar.update(1), authors=args.author,
                             with_ledger=not args.no_ledger)
    except BrokenPipeError:  # `cqa export | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141
    except _copy_errors() as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if to_stdout:  # stdout holds the threads: the summary goes to stderr
        print(json.dumps(summary), file=sys.stderr)
    else:
        _emit(summary)
    return 0


# --- erase, takedown ------------------------------------------------------------------
def _no_store(settings) -> bool:
    """True, and says so, when the data folder holds no store (a command that changes one then exits 2)."""
    if settings.store_path.exists():
        return False
    print(f"error: {settings.store_path}: no store here", file=sys.stderr)
    return True


def _forget_derived(settings, erased, args: argparse.Namespace, what: str, summary: dict) -> int:
    """After an erasure's or a takedown's part in the store: what was derived from it forgotten
    (``indexing.erasure.forget_derived``, with --backups, --wait, --quiet), ``summary`` and that emitted; exit 1 when
    an older generation was still served, or a backup still being written, after --wait."""
    from indexing.erasure import forget_derived
    from ranking.evaluation.feedback import KeptRequests, ShownPosts
    from ranking.rankers import memo_files
    backups = args.backups or settings.erase_backups
    derived = forget_derived(settings, erased, memo_files=memo_files(settings), backups=settings.backups_folder,
                             rewrite_backups_too=backups == "rewrite", wait_s=args.wait, progress=not args.quiet,
                             holders=[KeptRequests(settings.feedback_file), ShownPosts(settings.feedback_file)])
    if derived.get("backups_before"):
        log.warning("%d backups began before %s and still hold what it took out: %s", len(derived["backups_before"]),
                    what, ", ".join(derived["backups_before"]))
    _emit({**summary, "backups": backups, **derived})
    return 0 if not (derived.get("generations_still_served") or derived.get("backups_being_written")) else 1


def _forget_options(s: argparse.ArgumentParser, what: str) -> None:
    """The options of a command that forgets what was derived from ``what`` (``_forget_derived``)."""
    s.add_argument("--wait", type=float, default=60.0, metavar="S",
                   help="seconds to wait for running services to leave the older generations, and for backups being "
                   "written to complete (default 60)")
    s.add_argument("--backups", choices=["rewrite", "keep"], default=None,
                   help=f"the backups that began before {what}: rewrite them without it, or keep them as they are "
                   "and name them (default: $CQA_ERASE_BACKUPS, rewrite)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def cmd_erase(args: argparse.Namespace) -> int:
    from indexing.store import ThreadStore
    settings = _settings(args)
    if _no_store(settings):
        return 2
    authors = list(dict.fromkeys(args.author_ids))  # exactly as the threads carry them
    if not all(a.strip() for a in authors):
        print("error: an author id is blank", file=sys.stderr)
        return 2
    with ThreadStore(settings.store_path) as store:
        erased = store.erase_authors(authors, remove=args.content == "remove",
                                     meta_keys=settings.erase_meta_keys + (args.meta_key or []))
        log.info("erased in the store: %s", erased.summary())
        if args.vacuum:
            store.vacuum()
    return _forget_derived(settings, erased, args, "the erasure", {"authors": len(authors), "content": args.content,
                                                                   **erased.summary(), "vacuumed": args.vacuum})


def cmd_takedown(args: argparse.Namespace) -> int:
    from indexing.erasure import take_down
    from indexing.store import NotInStore, ThreadStore
    settings = _settings(args)
    if _no_store(settings):
        return 2
    what = f"thread {args.thread_id!r}" if args.answer is None else f"comment {args.answer!r} of thread " \
                                                                      f"{args.thread_id!r}"
    with ThreadStore(settings.store_path) as store:
        if args.lift:
            if not store.lift_takedown(args.thread_id, args.answer):
                print(f"error: no takedown of the {what} is on record", file=sys.stderr)
                return 2
            _emit({"lifted": True, "thread_id": args.thread_id, "answer_id": args.answer,
                   "note": "what the forum sends of it is stored again; nothing is restored here"})
            return 0
        try:
            done = take_down(store, args.thread_id, args.answer)
        except NotInStore:
            done = None
        if done is None:
            if not args.record_absent:
                print(f"error: the {what} is not stored; --record-absent records its takedown all the same, so "
                      "that what the forum sends of it later is left out", file=sys.stderr)
                return 2
            store.record_takedown(args.thread_id, args.answer)
            _emit({"recorded": True, "stored": False, "thread_id": args.thread_id, "answer_id": args.answer})
            return 0
        erased = done[0]
        log.info("taken down in the store: %s", erased.summary())
    return _forget_derived(settings, erased, args, "the takedown",
                           {"thread_id": args.thread_id, "answer_id": args.answer, **erased.summary()})


def cmd_takedowns(args: argparse.Namespace) -> int:
    from indexing.store import ThreadStore
    settings = _settings(args)
    if _no_store(settings):
        return 2
    with ThreadStore(settings.store_path) as store:
        rows = store.takedowns(args.thread, limit=-1)
    for t in rows:
        print(json.dumps(t.__dict__))  # as GET /takedowns lists them
    _emit({"takedowns": len(rows)})
    return 0


# --- tags -----------------------------------------------------------------------------
def cmd_tag_synonyms(args: argparse.Namespace) -> int:
    from indexing.store import TagSynonymConflict, ThreadStore
    settings = _settings(args)
    with ThreadStore(settings.store_path) as store:
        for pair in args.add:
            source, sep, target = pair.partition("=")
            try:
                if not sep:
                    raise ValueError(f"--add {pair!r}: give SYNONYM=TAG, e.g. js=javascript")
                store.set_tag_synonym(source, target)
            except (ValueError, TagSynonymConflict) as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
        for source in args.remove:
            if store.delete_tag_synonym(source) is None:
                print(f"error: {source!r} is no tag synonym", file=sys.stderr)
                return 2
        for source, target in store.tag_synonyms().items():
            print(json.dumps({"source": source, "target": target}, ensure_ascii=False))  # as GET /tags/synonyms
    return 0


def _store_synonyms(settings) -> dict[str, str]:
    """The data folder's tag synonyms (none where it has no store yet)."""
    from indexing.store import ThreadStore
    if not settings.store_path.exists():
        return {}
    with ThreadStore(settings.store_path) as store:
        return store.tag_synonyms()


def cmd_tags(args: argparse.Namespace) -> int:
    from indexing.generations import IndexFormatError
    from indexing.searcher import load_current
    from ranking.pipeline import default_config
    from ranking.retriever import Retriever, TagsNotIndexed, TagSynonyms, tag_rows
    settings = _settings(args)
    try:
        gen = load_current(settings.index_root, settings.device)
    except IndexFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    retriever = Retriever(gen, default_config(gen))
    try:
        listed, matching = retriever.tags_beginning(args.prefix, args.limit or None)
    except TagsNotIndexed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    synonyms = TagSynonyms.of(_store_synonyms(settings))
    for row in tag_rows(retriever, listed, synonyms):
        print(json.dumps(row, ensure_ascii=False))  # as GET /tags lists them
    _emit({"generation": gen.name, "matching": matching})
    return 0


# --- status ---------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    from indexing.status import folder_status, lines
    settings = _settings(args)
    s = folder_status(settings, settings.backups_folder, check=args.check)
    if not args.json:
        print("\n".join(lines(s)))
    print(json.dumps(s.as_dict()))
    if s.store is None:
        return 2
    return 1 if s.attention else 0


# --- restore --------------------------------------------------------------------------
def cmd_restore(args: argparse.Namespace) -> int:
    import sqlite3

    from indexing.restore import RestoreError, restore
    from indexing.store import StoreError
    settings = _settings(args)
    try:
        summary = restore(settings, Path(args.backup), ledgers=[] if args.no_default_ledgers else None,
                          extra_ledgers=[Path(p) for p in args.ledger_from or []],
                          backups_folder=settings.backups_folder, replace=args.replace, reindex=not args.no_reindex,
                          progress=not args.quiet)
    except (RestoreError, StoreError, OSError, sqlite3.Error) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary["feedback"] = _restore_feedback(Path(args.backup), settings)
    if summary["ledgers_unreadable"]:
        log.warning("%d ledgers could not be read and were not applied: %s", len(summary["ledgers_unreadable"]),
                    ", ".join(summary["ledgers_unreadable"]))
    _emit(summary)
    return 1 if "build_error" in summary else 0


def _restore_feedback(backup: Path, settings) -> dict:
    """The feedback log's tables a store backup carries (round 60 on) merged into the data folder's log; an export
    carries none. A failure is reported and logged, the store's restore stands."""
    import sqlite3

    from indexing.restore import sniffed_kind
    from ranking.evaluation.feedback import FeedbackLog, FeedbackUnavailable, drop_copies, merge_from
    if sniffed_kind(backup) != "store":
        return {"searches_added": 0, "judgements_merged": 0, "in_backup": False}
    try:
        merged = merge_from(backup, FeedbackLog.of(settings))
        drop_copies(settings.store_path)
        return merged
    except (sqlite3.Error, OSError, FeedbackUnavailable) as e:
        log.warning("the backup's feedback log could not be merged into %s: %s", settings.feedback_file, e)
        return {"error": str(e)}


# --- reindex --------------------------------------------------------------------------
def cmd_reindex(args: argparse.Namespace) -> int:
    from indexing.reindex import ReindexError, reindex
    settings = _settings(args)  # with --dense-encoder, validated as $CQA_DENSE_ENCODER is
    if args.nice:
        os.nice(args.nice)  # before the build starts its threads, which inherit it
    if args.when_told:  # the imports above done: wait to be told (the automatic refresh's spare build process)
        if not sys.stdin.readline().strip():
            print(json.dumps({"skipped": "not told to build (end of input)"}))
            return 0
    if args.engine == "local" and (args.address or args.ray_workers):
        print("error: --address and --ray-workers go with --engine ray", file=sys.stderr)
        return 2
    engine = None
    if args.engine == "ray":
        from indexing.engines import RayOptions
        from indexing.reindex import ray_engine
        if args.ray_workers is not None and args.ray_workers < 1:
            print("error: --ray-workers must be at least 1", file=sys.stderr)
            return 2
        options = RayOptions(address=args.address, workers=args.ray_workers or 2, cpus_per_worker=args.cpus_per_worker)
        try:
            engine = ray_engine(settings, options)
        except (RuntimeError, ConnectionError) as e:
            print(f"error: could not start the Ray engine: {e}", file=sys.stderr)
            return 2
    try:
        summary = reindex(settings, progress=not args.quiet, skip_dense=args.no_dense, engine=engine,
                          if_stale=args.if_stale, translation_later=args.translation_later, on_live=_emit_live,
                          grow_dense=not args.full, carry_translation=not args.full)
    except ReindexError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if engine is not None:
            engine.close()
    _emit(summary)
    return 0


def _emit_live(first: dict) -> None:
    """``--translation-later``: a line the moment the first generation is live (a service running this command reads
    it to go live at once); the summary stays the last line."""
    print(json.dumps({"live": first["generation"], "seconds": first["seconds"], "translation": "training"}),
          flush=True)


# --- serve ----------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn
    settings = _settings(args)
    if args.data_dir:
        os.environ["CQA_DATA_DIR"] = str(args.data_dir)
    workers = args.workers or settings.workers
    if workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    from ranking.presets import misnamed_rankers
    if misnamed := misnamed_rankers(settings):  # before anything starts: a worker would fail to load it
        for e in misnamed:
            print(f"error: {e}", file=sys.stderr)
        return 2
    background = None
    if not args.no_bootstrap:
        from app.bootstrap import bootstrap, reindex_in_background
        out = bootstrap(settings)
        if "answer_vectors_pending" in out:
            background = reindex_in_background(settings)
            print(f"the service starts now; a background `cqa reindex` (pid {background.pid}) adds the comment "
                  f"vectors of {out['answer_vectors_pending']}, and the service switches to its generation when it "
                  "is published (until then /search answers encode the comments they rerank)", file=sys.stderr)
    if workers > 1:
        shared_metrics(settings)
    try:
        # each worker is its own process with its own models and lease; all follow the same `current` pointer
        # each worker logs as this process does (app.access): the request id on each line, cqa.access's own
        # access line in place of uvicorn's
        from app.access import log_config
        level = log_level(args)
        uvicorn.run("app.main:create_app", factory=True, host=args.host or settings.host,
                    port=args.port or settings.port, workers=workers, log_level=level.lower(),
                    log_config=log_config(settings.log_format, level), access_log=False,
                    proxy_headers=False)  # the app reads them itself (app.limits.ProxiedClient)
    finally:
        if background is not None and background.poll() is None:
            background.terminate()  # what it encoded stays in the embedding cache for the next reindex
    return 0


def shared_metrics(settings) -> None:
    """Several workers: their /metrics add up over all of them (app/metrics.py) in prometheus_client's multiprocess
    files, in $PROMETHEUS_MULTIPROC_DIR where the operator set it, else in ``run/metrics/PID`` of the data folder, a
    folder of this `cqa serve`'s own: another one serving the same data folder (a second instance on another port, the
    next release started before this one stops) counts its own workers, and the folders of those that have stopped
    are removed. Set before the workers start: prometheus_client reads it as it is imported."""
    import shutil

    from app.jobs import process_alive
    from app.metrics import SHARED_ENV, shared_folder
    folder = shared_folder()
    if folder is None:
        runs = settings.data_dir / "run" / "metrics"
        for old in runs.iterdir() if runs.is_dir() else ():
            if old.is_dir() and old.name.isdigit() and not process_alive(int(old.name)):
                shutil.rmtree(old, ignore_errors=True)  # what the workers of a stopped `cqa serve` counted
        folder = runs / str(os.getpid())
        os.environ[SHARED_ENV] = str(folder)
    folder.mkdir(parents=True, exist_ok=True)


# --- search ---------------------------------------------------------------------------
def cmd_search(args: argparse.Namespace) -> int:
    from indexing.generations import IndexFormatError
    from indexing.models import MAX_TAG_CHARS, alternatives, tag_key
    from indexing.searcher import load_current
    from indexing.store import ThreadStore
    from ranking.pipeline import SearchRequest, build_pipeline
    from ranking.rankers import UnknownRanker
    from ranking.retriever import Filters, TagSynonyms, TagsNotIndexed
    settings = _settings(args)
    body = " ".join(args.question).strip()
    asked = bool(body or args.subject.strip())
    if asked == bool(args.like_thread):
        print("error: give the question's text (and optionally --subject), or --like-thread, not both",
              file=sys.stderr)
        return 2
    try:
        gen = load_current(settings.index_root, settings.device)
    except IndexFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    groups = tuple(alternatives(g) for g in args.tag_group)
    for flag, given in (("--tag", args.tag), ("--not-tag", args.not_tag), ("--any-tag", args.any_tag),
                        ("--tag-group", [t for g in groups for t in g])):
        if (bad := next((t for t in given if not tag_key(t) or len(t) > MAX_TAG_CHARS), None)) is not None:
            print(f"error: {flag} {ascii(bad[:40])}: a tag is 1-{MAX_TAG_CHARS} characters, not all spaces",
                  file=sys.stderr)
            return 2
    filters = Filters(args.category, args.since, args.until, tuple(args.exclude_thread), tuple(args.tag),
                      tuple(args.not_tag), tuple(args.any_tag), groups)
    filters = None if filters == Filters() else filters  # none given
    if filters is not None:  # a tag stands for its synonyms' family, as at /search
        filters = filters.with_synonyms(TagSynonyms.of(_store_synonyms(settings)))
    how = dict(k=args.k, offset=args.offset, target=args.target, filters=filters, expansion=args.expand,
               rerank=not args.no_rerank,
               collapse=not args.no_collapse, explain=args.explain)
    attention = None
    if args.explain and (settings.bilstm_checkpoint / "config.json").exists():
        from ranking.neural.ranker import BiLSTMRanker
        attention = BiLSTMRanker.from_checkpoint(settings.bilstm_checkpoint, settings.device)
    with ThreadStore(settings.store_path) as store:
        if asked:
            req = SearchRequest.asking(args.subject, body, **how)
        elif (thread := store.get(args.like_thread)) is not None:
            req = SearchRequest.like_thread(thread, **how)
        else:
            print(f"error: no thread with id {args.like_thread!r} in the store", file=sys.stderr)
            return 2
        try:
            rerankers = None if req.rerank else {}
            out = build_pipeline(settings, gen, store, rerankers, attention).search(req)
        except (UnknownRanker, ValueError, TagsNotIndexed) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.json:
        print(out.model_dump_json())
        return 0
    print(f"{len(out.results)} {args.target} from generation {out.generation} "
          f"(reranker: {out.reranker or 'none'}, {out.collapsed} duplicates collapsed, "
          f"{out.timings_ms['total']:.0f} ms)")
    bold = sys.stdout.isatty()  # the question's words in bold on a terminal, as the search page marks them
    for r in out.results:
        print(f"{r.rank:3d}. [{r.score:.3f}] {r.kind} {r.id} (thread {r.thread_id}: {r.thread_title or ''})"
              + (f" [{', '.join(r.thread_tags)}]" if r.thread_tags else ""))
        print(f"     {_shown(r, bold)}")
        if r.duplicates:
            print(f"     also: {', '.join(r.duplicates)}")
        if r.stages:
            print("     stages: " + ", ".join(f"{k}={v:.3f}" for k, v in r.stages.items() if v is not None))
    if out.next_offset is not None:
        print(f"more: --offset {out.next_offset}")
    return 0


def _shown(result, bold: bool) -> str:
    """A result's snippet on one line (its text's first 300 characters without one), "..." where the text goes on,
    the question's words in bold with ``bold``."""
    snip = result.snippet
    if snip is None:
        text = " ".join(result.text.split())
        return text[:300] + ("..." if len(text) > 300 else "")
    parts, at = [], 0
    for a, b in snip.highlights:
        parts += [snip.text[at:a], f"\033[1m{snip.text[a:b]}\033[0m" if bold else snip.text[a:b]]
        at = b
    parts.append(snip.text[at:])
    after = (snip.parts[-1][1] if snip.parts else snip.start + len(snip.text)) < len(result.text)
    return ("..." if snip.start else "") + " ".join("".join(parts).split()) + ("..." if after else "")


# --- train ----------------------------------------------------------------------------
# `cqa train` flags that become MiniLMTrainConfig fields (all but --task mean nothing to --average-of)
MINILM_TRAIN_FLAGS = ("epochs", "margin", "seed", "device", "lr", "batch_size", "negatives", "max_steps", "loss",
                      "max_pairs", "eval_every", "max_length", "task", "init_from")


def _minilm_checkpoint(settings, model: str, task: str) -> Path:
    """Where a MiniLM model of ``task`` is written unless --out says otherwise: the configured checkpoint."""
    where = {("cross-encoder", "A"): settings.cross_encoder_checkpoint,
             ("bi-encoder", "A"): settings.bi_encoder_checkpoint,
             ("cross-encoder", "B"): settings.question_cross_encoder_checkpoint,
             ("bi-encoder", "B"): settings.question_bi_encoder_checkpoint,
             ("bi-encoder", "C"): settings.related_bi_encoder_checkpoint}.get((model, task))
    if where is None:
        raise ValueError(f"no configured checkpoint for a {model} of task {task}; give --out")
    return where


def cmd_train(args: argparse.Namespace) -> int:
    settings = _settings(args)
    given = {k: v for k, v in vars(args).items() if v is not None}
    try:
        if args.mix is not None and not args.average_of:
            raise ValueError("--mix weighs the checkpoints of --average-of; give them")
        if args.model == "bilstm":
            if args.init_from or args.average_of:
                raise ValueError("--init-from and --average-of are for the MiniLM models (cross-encoder, bi-encoder)")
            from ranking.neural.train import TrainConfig, train_from_semeval
            cfg = TrainConfig(**{k: given[k] for k in ("epochs", "margin", "seed", "device", "lr", "batch_size",
                                                       "negatives", "max_steps") if k in given})
            out = args.out or settings.bilstm_checkpoint
            m = train_from_semeval(settings.semeval_dir, out, cfg, progress=not args.quiet)
            summary = {"best_epoch": m["best_epoch"], "dev_MAP": m["dev_MAP"], "epochs": len(m["epochs"]),
                       "seconds_per_epoch": [e["seconds"] for e in m["epochs"]]}
        elif args.average_of:
            from ranking.neural.train_minilm import average_from_semeval
            training = [f"--{k.replace('_', '-')}" for k in MINILM_TRAIN_FLAGS if k in given and k != "task"]
            if training:
                raise ValueError(f"--average-of trains nothing, so {', '.join(training)} would be ignored; "
                                 "leave them out")
            task = args.task or "A"
            out = args.out or _minilm_checkpoint(settings, args.model, task)
            m = average_from_semeval(settings.semeval_dir, args.average_of, out, task, args.model, args.mix)
            summary = {"dev_MAP": m["dev_MAP"], "ingredients_dev_MAP": m["ingredients_dev_MAP"], "mix": m["mix"],
                       "seconds": m["seconds"]}
        else:
            from ranking.neural.train import stop_on_sigterm
            from ranking.neural.train_minilm import (
                MiniLMTrainConfig,
                train_minilm_from_semeval,
            )
            cfg = MiniLMTrainConfig(kind=args.model, **{k: given[k] for k in MINILM_TRAIN_FLAGS if k in given})
            out = args.out or _minilm_checkpoint(settings, args.model, cfg.task)
            stop_on_sigterm()  # a job's time limit stops training as Ctrl-C does: the best point so far is kept
            m = train_minilm_from_semeval(settings.semeval_dir, out, cfg, progress=not args.quiet)
            summary = {"best": m["best"], "dev_MAP": m["dev_MAP"], "evaluations": len(m["evaluations"]),
                       "train_seconds": m["train_seconds"],
                       **({"interrupted_at": m["interrupted_at"]} if "interrupted_at" in m else {})}
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    _emit({"model": args.model, "out": str(out), **summary})
    return 0


# --- evaluate / predict ---------------------------------------------------------------
def cmd_evaluate(args: argparse.Namespace) -> int:
    from ranking.evaluation.cli import evaluate_command
    return evaluate_command(args, _settings(args), _emit)


def cmd_predict(args: argparse.Namespace) -> int:
    from ranking.evaluation.cli import predict_command
    return predict_command(args, _settings(args), _emit)


def _shares(text: str) -> list[float]:
    """An argparse type: comma-separated shares of a mix (``0.75,0.25``), or a one-line error that says so."""
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _count(most: int):
    """An argparse type: a whole number from 1 to ``most``, or a one-line error that says so."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not 1 <= n <= most:
            raise argparse.ArgumentTypeError(f"{n} is out of range: 1 to {most}")
        return n
    return parse


def build_parser() -> argparse.ArgumentParser:
    from ranking.settings import MAX_RESULTS
    p = argparse.ArgumentParser(
        prog="cqa", description="Community question answering service: ingest forum threads, build "
        "indexes, serve ranked answers over HTTP, and evaluate ranking on SemEval.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Settings come from CQA_* environment variables (see README). Typical first run:\n"
               "  cqa ingest ../shared/data/semeval2016/test/SemEval2016-Task3-CQA-QL-test.xml\n"
               "  cqa reindex\n  cqa serve\nThen `cqa status` says what the data folder holds and what needs you.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--data-dir", type=Path, help="data folder (default: $CQA_DATA_DIR or ./var)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("ingest", help="read thread files into the store",
                       description="Read SemEval XML (.xml, .xml.gz), JSONL thread files, or a StackExchange data "
                       "dump (its Posts.xml: each question a thread, its answers the comments, in the order posted; "
                       "the duplicate links of the PostLinks.xml beside it kept; the dump's other files passed over; "
                       "the site's .7z archive as downloaded, or a .zip, is read too, its Posts.xml and PostLinks.xml "
                       "unpacked into $TMPDIR), "
                       "or folders of them, and upsert every thread into the store. Ingesting the same file twice "
                       "changes nothing. Every write goes through the store's ledger: what an erasure or a takedown "
                       "took out is left out again, and counted. An export's ledger line (`cqa export`) is taken into "
                       "a store that holds no thread yet, before the file's threads (a restore by ingest); into one "
                       "that holds threads it is reported (`ledgers`), not taken; its tag synonyms line is taken into any store "
                       "(`tag_synonyms`: taken, held already, and refused with why where the store's own conflict). "
                       "With --mirror (a forum re-imported "
                       "from each new dump of its site), the stored threads that none of the files holds are then "
                       "removed, as the site removed them. A JSONL file is read as a stream, after a first pass that "
                       "checks it (a gzip file decompressed to its end; with --strict or --mirror every record), and a "
                       "dump's Posts.xml is staged in $TMPDIR as it is parsed; both are written 2,000 threads at a "
                       "time, each batch in one transaction, so their size is not bounded by memory. A SemEval file "
                       "is read whole and written in one transaction. Prints a JSON line with the counts "
                       "last. Exit status: 0; "
                       "2 when a file could not be read (nothing of it written) or a write was refused (the file's "
                       "batches before it stay written, and it says how many threads they held); 3 when --mirror "
                       "removed nothing "
                       "because it was not safe (the files' threads are written; the reason is printed).")
    s.add_argument("paths", nargs="+", metavar="PATH",
                   help="files or folders to read; - reads standard input (gzipped or not; XML or JSONL told by its "
                   "first byte unless --format; spooled to a file in $TMPDIR as it comes): `cqa export | cqa ingest "
                   "-`, or over ssh from another machine")
    s.add_argument("--format", choices=["semeval", "jsonl", "stackexchange"],
                   help="force a format (default: by file name, and an XML file by its root element: <posts> is a "
                   "StackExchange dump's Posts.xml)")
    s.add_argument("--strict", action="store_true",
                   help="stop at the first malformed record (default: skip it, count it, and go on)")
    s.add_argument("--encode", choices=["auto", "always", "never"], default="auto",
                   help="put each file's texts in the embedding cache before writing it, so the build that takes "
                   "it in (a serving instance's automatic refresh) encodes nothing and a forum's own new posts do "
                   "not wait behind a build encoding the whole import; auto (default): when the data folder has a "
                   "live index generation (a first import leaves encoding to `cqa reindex`, which can spread it "
                   "over a Ray cluster); never: leave it to the next build, e.g. `cqa reindex --engine ray` for an "
                   "import too large for this machine")
    s.add_argument("--nice", type=int, default=None, choices=range(0, 20), metavar="N",
                   help="lower this command's CPU priority by N (0-19), so a service on the same machine answers "
                   "first; default: $CQA_REFRESH_NICE (10) when it encodes, as the service's own automatic refresh "
                   "builds, else 0")
    s.add_argument("--mirror", action="store_true",
                   help="the files are the whole forum: after writing them, remove each thread stored before this "
                   "command that none of them holds, unless it was posted after the newest post they hold (the "
                   "forum's own since the dump was made). Nothing is removed when a record was skipped, when the "
                   "files hold no thread, or beyond --max-remove; a removal is not a takedown (a thread sent again "
                   "is stored again)")
    s.add_argument("--max-remove", type=_removal_limit, default=None, metavar="N|P%",
                   help="with --mirror: the most threads it may remove, a count (25) or a share of those stored "
                   "(default: 10%%); over it, it removes none and says how many it would have")
    s.add_argument("--dry-run", action="store_true",
                   help="write nothing: read the files and say what the ingest would insert, update and leave "
                   "unchanged, and with --mirror what it would remove (each file's writes rolled back; an export's "
                   "ledger line is not taken in); the exit status is the ingest's")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.add_argument("--progress-json", action="store_true",
                   help="also print where the ingest is, after each batch written and each file ended, as a JSON line "
                   "on standard error ({\"progress\": {file, files_done, files, share, threads, overall}}), for a "
                   "program that runs this command (the service's POST /imports reports it as its job's progress)")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("backup", help="copy the store, consistent, while it serves",
                       description="Copy the thread store (the data folder's threads.sqlite3) into one new SQLite file, "
                       "consistent as of the moment the copy began, while `cqa serve`, `cqa ingest` or anything else "
                       "goes on writing (SQLite's VACUUM INTO: one read transaction, no writer waits). The copy is "
                       "checked (PRAGMA integrity_check), flushed to disk and only then given its name; an existing "
                       "file is never replaced. The copy also carries the feedback log (the searches served and their "
                       "users' judgements, CQA_FEEDBACK_STORE) as its tables feedback_served and feedback_judged. To "
                       "restore: `cqa restore FILE`, which applies the erasures and takedowns made since and merges the "
                       "judgements back into the log. Last line: JSON with the file, its threads, answers, "
                       "fingerprint, bytes, seconds and the feedback log's searches and judgements copied.")
    s.add_argument("dest", help="the new file, or a folder to put threads-YYYYmmddTHHMMSS.mmmZ.sqlite3 in (UTC)")
    s.set_defaults(func=cmd_backup)

    s = sub.add_parser("export", help="write every thread as JSONL, which `cqa ingest` reads back",
                       description="Write every thread of the store, with its answers, as one JSON line each "
                       "(docs/data-format.md), in the order they were stored, from one consistent snapshot while "
                       "anything goes on writing. `cqa ingest` of the file into an empty data folder gives the same "
                       "threads in the same order. Where the store has erased a user or taken content down, the "
                       "first line is its ledger (the erasures by keyed hash, with the key, and the takedowns; "
                       "docs/data-format.md): `cqa ingest` of the file into an empty data folder, and `cqa restore` "
                       "of it, keep those out of later writes too. The store's tag synonyms come next, in one line, which "
                       "both set again. To stdout (the summary then goes to stderr), or to "
                       "a new file (gzipped if it ends in .gz; written aside and named only when complete; never "
                       "replacing one).")
    s.add_argument("-o", "--output", metavar="PATH", help="the new file (default: stdout)")
    s.add_argument("--no-ledger", action="store_true",
                   help="leave the ledger line out: threads only, for a file that leaves the operator's hands (the "
                   "ledger's key tells whether a given id was erased)")
    s.add_argument("--author", action="append", metavar="AUTHOR_ID",
                   help="instead of the threads, every question and comment this user wrote, one JSON object each "
                   "(kind, thread_id, id, author_id, created_at, meta, and subject, body, category or text, label), "
                   "nothing of other users': what a user's access request gets; repeatable")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_export)

    s = sub.add_parser("erase", help="erase forum users: their posts, or their ids, and all derived from them",
                       description="What a user's right-to-erasure request needs. In the store, in one transaction: "
                       "with --content remove, the users' comments are removed from every thread and the threads they "
                       "asked are deleted with all their comments; with --content anonymize, their questions and "
                       "comments stay, without their author id and the meta keys of $CQA_ERASE_META_KEYS. Deleted "
                       "values are overwritten with zeros and the write-ahead log is emptied. Then what was made from "
                       "them: a generation built from scratch and made live (running services switch to it), the "
                       "erased texts' vectors deleted from the embedding cache, every older generation deleted once "
                       "no service serves it (waiting up to --wait seconds), and with remove, the shared score and "
                       "vector memos emptied. In the feedback log, the searches' kept requests that carry a removed "
                       "text or name a removed thread are dropped, and the removed posts' ids in what each search "
                       "showed and its users judged become removed-<place>. Searches stop showing removed posts as "
                       "soon as the store's part is done. Backups in the backups folder ($CQA_BACKUP_DIR) that began "
                       "before the erasure are written again without it (--backups rewrite, the default of "
                       "$CQA_ERASE_BACKUPS), or named and left (keep). The erasure is recorded in the store (by a keyed hash of each id, "
                       "not the id): whatever of theirs is written later, by a forum's sync or an import, is left out "
                       "or anonymized in the same way. Runs while `cqa serve` serves. Last line: JSON with the counts "
                       "(no text, no author id); exit 1 when an older generation was still served, or a backup was "
                       "still being written, after --wait.")
    s.add_argument("author_ids", nargs="+", metavar="AUTHOR_ID", help="the users' ids, as the threads carry them")
    s.add_argument("--content", choices=["anonymize", "remove"], required=True,
                   help="anonymize: keep their posts without their ids; remove: delete their comments, and the "
                   "threads they asked")
    s.add_argument("--meta-key", action="append", metavar="KEY",
                   help="with anonymize, one more meta key to remove from their posts (repeatable)")
    s.add_argument("--vacuum", action="store_true",
                   help="write the store's file anew (VACUUM): also gone is what writes made before this version "
                   "left in its free pages; writers wait for it")
    _forget_options(s, "the erasure")
    s.set_defaults(func=cmd_erase)

    s = sub.add_parser("takedown", help="take a thread or a comment down: gone, with all derived from it, and kept out",
                       description="What content that must be gone needs (a legal request, say): DELETE "
                       "/threads/{id}?purge=true (or /threads/{id}/answers/{aid}?purge=true) from the command line. "
                       "In the store, in one transaction: the thread with all its comments, or one comment, removed "
                       "and the takedown recorded in its ledger (by id); deleted values overwritten with zeros and the "
                       "write-ahead log emptied. Then what was made from it, as `cqa erase` does: a generation built "
                       "from scratch and made live, its texts' vectors deleted from the embedding cache, every older "
                       "generation deleted once no service serves it (waiting up to --wait seconds), and the backups "
                       "in $CQA_BACKUP_DIR that began before written again without it (--backups). Whatever the forum "
                       "sends of it later (its sync, an old export) is left out and counted, until --lift. Runs while "
                       "`cqa serve` serves. Last line: JSON with the counts (no text); exit 2 when the thread or "
                       "comment is not stored (or, with --lift, no such takedown is on record); exit 1 when an older "
                       "generation was still served, or a backup was still being written, after --wait.")
    s.add_argument("thread_id", metavar="THREAD_ID", help="the thread's id")
    s.add_argument("--answer", metavar="ANSWER_ID", help="one comment of the thread instead of the whole thread")
    s.add_argument("--lift", action="store_true",
                   help="lift the takedown instead: what the forum sends of it later is stored again (nothing is "
                   "restored here)")
    s.add_argument("--record-absent", action="store_true",
                   help="when the thread or comment is not stored, record its takedown all the same, so that what "
                   "the forum sends of it later is left out")
    _forget_options(s, "the takedown")
    s.set_defaults(func=cmd_takedown)

    s = sub.add_parser("status", help="what the data folder holds, and whether anything needs you",
                       description="Read the data folder without changing it, while a service serves and builds go on: "
                       "the store (threads, comments, size, fingerprint, the ledger's erasures and takedowns), the "
                       "live generation (when it was built, its documents and dense encoder, whether it is behind the "
                       "store), the generations on disk and the processes serving them (their leases), builds under "
                       "way, the embedding cache, and the backups folder ($CQA_BACKUP_DIR). Then what needs you, each "
                       "with what to do: no store or one that fails --check, no live generation or one behind the "
                       "store, a build or a backup left by a process that died, an expired lease. In words, then "
                       "one JSON line last (--json: the JSON line only). Exit 0: nothing needs you; 1: something "
                       "does (the `attention` list); 2: no store, or it cannot be read. Fit for a monitoring check.")
    s.add_argument("--check", action="store_true",
                   help="also run SQLite's quick_check on the store (reads it whole: seconds on a large forum)")
    s.add_argument("--json", action="store_true", help="only the JSON line")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("takedowns", help="list the takedowns on record",
                       description="Every thread or comment taken down (`cqa takedown`, DELETE ?purge=true) that the "
                       "store keeps out of later writes, one JSON line each as GET /takedowns lists them (thread_id, "
                       "answer_id or null, at in seconds since the epoch), by "
                       "thread id, a thread's own first; last line: {\"takedowns\": N}.")
    s.add_argument("--thread", metavar="THREAD_ID", help="only this thread's (itself and its comments)")
    s.set_defaults(func=cmd_takedowns)

    s = sub.add_parser("tags", help="list the forum's tags with how many threads carry each",
                       description="The tags the live generation's threads carry (their meta.tags), most threads "
                       "first, one JSON line each as GET /tags lists them (tag, threads); last line: "
                       "{\"generation\": ..., \"matching\": N}. Exit 2 without a live generation, or with one "
                       "built before tags (the automatic refresh, or `cqa reindex`, builds a new one).")
    s.add_argument("--prefix", default="", help="only tags that begin with this (case and spacing ignored)")
    s.add_argument("--limit", type=int, default=0, metavar="N", help="at most N tags (0, the default: all)")
    s.set_defaults(func=cmd_tags)

    s = sub.add_parser("tag-synonyms", help="list, add or remove the forum's tag synonyms (js for javascript)",
                       description="A synonym stands for its tag in every tag filter (POST /search, GET "
                       "/threads/{id}/similar, cqa search): a search within either takes the threads carrying any tag "
                       "of the family, at once, with no thread written again and no index rebuilt (StackExchange's tag "
                       "synonyms). A tag that is a synonym cannot have synonyms, nor a target be one. Prints each "
                       "synonym as a JSON line (source, target) after the changes; exit 2 on a refused one. The same "
                       "as GET, PUT and DELETE /tags/synonyms.")
    s.add_argument("--add", action="append", default=[], metavar="SYNONYM=TAG",
                   help="make SYNONYM stand for TAG (e.g. js=javascript); repeat for more")
    s.add_argument("--remove", action="append", default=[], metavar="SYNONYM", help="a synonym a tag of its own again")
    s.set_defaults(func=cmd_tag_synonyms)

    s = sub.add_parser("restore", help="restore the store from a backup, without what was erased or taken down since",
                       description="Make the data folder's store a copy of BACKUP (a `cqa backup` file or a `cqa "
                       "export` file, told apart by their bytes), without bringing back what was erased (`cqa erase`, "
                       "POST /erasures) or taken down (DELETE ?purge=true) after it was made. The ledgers of the "
                       "backup itself (an export's first line), of the data folder's store (the one replaced), of "
                       "every backup in the backups folder ($CQA_BACKUP_DIR), and of each --ledger-from, are applied "
                       "to the copy before it goes in "
                       "place: their erasures and takedowns are recorded in its ledger and applied to its posts (an "
                       "erasure recorded by a store of another lineage, under its own key, still finds its users "
                       "among the copy's authors). A store already there is refused unless --replace, which moves it "
                       "aside as threads.sqlite3.replaced-<UTC time> (nothing is deleted). Then a generation is built "
                       "from scratch and made live, and the older ones deleted. Stop the service first: a data folder "
                       "a service serves is refused. Last line: JSON with what was restored and what the ledgers "
                       "changed (no text, no author id); exit 2, nothing changed, when refused (or the backup is "
                       "damaged); exit 1 when the store was restored but the build failed.")
    s.add_argument("backup", help="the backup file: a store copy (.sqlite3) or an export (.jsonl.gz)")
    s.add_argument("--replace", action="store_true",
                   help="replace the data folder's store, which is moved aside and whose ledger is applied")
    s.add_argument("--ledger-from", action="append", metavar="PATH",
                   help="one more store, store backup or export, whose erasures and takedowns apply (repeatable); "
                   "one that cannot be read stops the restore")
    s.add_argument("--no-default-ledgers", action="store_true",
                   help="read no ledger but those of --ledger-from (not the replaced store's, not the backups "
                   "folder's)")
    s.add_argument("--no-reindex", action="store_true",
                   help="do not build a generation: run `cqa reindex --full` before serving")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    s.set_defaults(func=cmd_restore)

    s = sub.add_parser("reindex", help="build a new index generation and make it live",
                       description="Build BM25, query-likelihood LM and FAISS indexes from the store into a "
                       "new generation, with the comment vectors of $CQA_ANSWER_ENCODER (the /search answers "
                       "reranker's second model; 'none' to skip), publish it atomically, and prune old generations. "
                       "A reindex that fails or is killed leaves the live generation untouched, and what it "
                       "encoded stays in the embedding cache.")
    s.add_argument("--no-dense", action="store_true", help="skip the embedding index and the comment vectors "
                   "(lexical only)")
    s.add_argument("--dense-encoder", metavar="ENC", help="what encodes the FAISS index (and, once live, the queries "
                   "searching it): base (the packaged all-MiniLM-L6-v2) or a fine-tuned bi-encoder checkpoint folder; "
                   "default $CQA_DENSE_ENCODER (models/question-bi-encoder)")
    s.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="where analysis and embedding (the dense index's and the comment vectors') run: this process "
                   "(default) or a Ray cluster through Ray Data (needs pip install -e '.[ray]'; pays off on a cluster "
                   "bigger than this machine, see docs/scale-out.md); the generation is the same, its manifest names "
                   "the engine")
    s.add_argument("--address", help="the Ray cluster to join ('auto', or ray://HOST:10001); default: start a local "
                   "one on this machine's CPUs for the job")
    s.add_argument("--ray-workers", type=int, metavar="N",
                   help="embedding actors and concurrent analysis tasks on Ray (default 2); one GPU each where "
                   "the cluster has GPUs")
    s.add_argument("--cpus-per-worker", type=float, default=0.5, metavar="C",
                   help="CPUs each Ray worker reserves (default 0.5, which leaves Ray Data's read tasks room on a "
                   "small machine; use 1 or more on a real cluster)")
    s.add_argument("--if-stale", action="store_true", help="build only if a thread was added, changed or deleted "
                   "since the live generation was built, and exit 0 without building when another reindex is running "
                   "(what a serving process's automatic refresh runs, $CQA_REFRESH_S; also fit for cron); the last "
                   "line then says skipped and why")
    s.add_argument("--translation-later", action="store_true",
                   help="when question-answer pairs changed, publish first with the live generation's translation "
                   "table (which only `expand: translation` searches read) and print a line saying so, then train "
                   "the table and publish again: the same final generation, searchable seconds sooner (what the "
                   "automatic refresh runs)")
    s.add_argument("--full", action="store_true",
                   help="build the HNSW or IVF dense index anew rather than grow the live generation's (a build "
                   "keeps the new documents' vectors beside it and marks the gone ones removed, while at most "
                   "$CQA_DENSE_GROW_MAX_REMOVED of its rows are): drops the removed rows, at a large forum's full "
                   "build time (29-41 s for 235k documents on 2 cores); write the stored comment vectors in one "
                   "file anew rather than link the live one; and train the translation table on the "
                   "store's pairs as they are rather than keep the live one while at most "
                   "$CQA_TRANSLATION_RETRAIN_CHANGED of them changed")
    s.add_argument("--nice", type=int, default=0, choices=range(0, 20), metavar="N",
                   help="lower this build's CPU priority by N (0-19), so a service on the same machine answers first")
    s.add_argument("--when-told", action="store_true",
                   help="start, import what a build needs, then wait until a line arrives on stdin and build; at "
                   "the end of input exit without building (what a serving process's automatic refresh keeps "
                   "started, $CQA_REFRESH_PRESTART, so a change does not wait for Python to start)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    s.set_defaults(func=cmd_reindex)

    s = sub.add_parser("serve", help="run the HTTP API under uvicorn",
                       description="Start the API. Unless --no-bootstrap, first ingest the default corpus "
                       "if the store is empty and build the indexes if there is no live generation. With "
                       "--workers N, N processes share the port; each loads the models, follows the `current` "
                       "generation pointer every $CQA_GENERATION_POLL_S seconds and holds its own lease on what it "
                       "serves, so a reindex by any process goes live in all of them without a restart. Each "
                       "warms up before it takes its first request (one request of each kind through its rankers; "
                       "$CQA_WARM_UP=false: off): once GET /ready answers, no request waits for a model to load or "
                       "to run for the first time.")
    s.add_argument("--host", help="bind address (default: $CQA_HOST or 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default: $CQA_PORT or 8000)")
    s.add_argument("--no-bootstrap", action="store_true", help="do not ingest or index before starting")
    s.add_argument("--workers", type=int, metavar="N",
                   help="serving processes sharing the port (default: $CQA_WORKERS or 1); each holds its own "
                   "copy of the models, about 0.5 GB")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("search", help="search the live generation as POST /search does",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Search the live index generation with the same pipeline that serves POST "
                       "/search: first stage, reranking of the top $CQA_RERANK_DEPTH candidates by the target's "
                       "reranker, duplicate collapse. Prints the ranked results, or with --json the response "
                       "of POST /search.",
                       epilog="example:\n  cqa search --subject 'car insurance' 'Which company gives the cheapest "
                       "comprehensive car insurance in Doha?'")
    s.add_argument("question", nargs="*", help="the question's body")
    s.add_argument("--subject", default="", help="the question's subject line")
    s.add_argument("-k", "--k", type=_count(MAX_RESULTS), default=10, metavar="K",
                   help=f"results to return (1-{MAX_RESULTS}, default 10)")
    s.add_argument("--offset", type=int, default=0, metavar="N", help=f"a later page: the results from rank N + 1 "
                   f"on, up to rank {MAX_RESULTS} (0-{MAX_RESULTS - 1}; the last line says the next page's offset)")
    s.add_argument("--target", choices=["answers", "questions", "threads"], default="answers",
                   help="answers (default), similar questions, or whole threads")
    s.add_argument("--no-rerank", action="store_true", help="first stage only")
    s.add_argument("--no-collapse", action="store_true", help="keep identical and near-identical texts apart")
    s.add_argument("--expand", choices=["none", "rm3", "translation"], help="query expansion (default: tuned)")
    s.add_argument("--category", help="only this category")
    s.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="only threads that carry this tag (their meta.tags: a StackExchange dump's, or a forum's "
                        "JSONL; case and spacing ignored); repeat for threads that carry every one")
    s.add_argument("--not-tag", action="append", default=[], metavar="TAG",
                   help="no thread that carries this tag; repeat for more")
    s.add_argument("--any-tag", action="append", default=[], metavar="TAG",
                   help="only threads that carry at least one of the tags given so (StackExchange's [a] or [b]); "
                        "repeat for each alternative")
    s.add_argument("--tag-group", action="append", default=[], metavar="A|B",
                   help="alternatives joined by |: only threads that carry one of them at least; repeat for more "
                        "groups, each to be met (--tag-group 'a|b' --tag-group 'c|d': (a or b) and (c or d))")
    s.add_argument("--since", help="only documents on or after this ISO date")
    s.add_argument("--until", help="only documents on or before this ISO date")
    s.add_argument("--like-thread", metavar="THREAD_ID", help="instead of a question: what is most similar to this "
                   "stored thread, the thread itself left out (what GET /threads/{id}/similar serves)")
    s.add_argument("--exclude-thread", action="append", default=[], metavar="THREAD_ID",
                   help="leave this thread's question and comments out, e.g. the thread the search is for (its "
                        "near-copies stay); repeat for more")
    s.add_argument("--explain", action="store_true", help="per-stage scores (and BiLSTM word weights)")
    s.add_argument("--json", action="store_true", help="print the response as JSON, as POST /search returns it")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("train", help="train a neural reranker on the SemEval training files",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Train a neural ranker on SemEval subtask A training threads (2016 train, 2015 "
                       "train/dev/test), pick the best evaluation point by 2016 dev-A MAP (official scorer), never\n"
                       "read 2016 test, and write a checkpoint directory (config.json, model.safetensors, "
                       "training_log.jsonl, metrics.json).\n\n"
                       "  bilstm         BiLSTM with attention, cosine hinge loss (defaults: 6 epochs, lr 1e-3, batch "
                       "64, margin 0.2, 2 negatives)\n"
                       "  cross-encoder  all-MiniLM-L6-v2 reading [CLS] q [SEP] a with a scoring head; pairwise hinge "
                       "(--loss hinge, margin 1) or BCE\n"
                       "                 (--loss bce); holds out the 2015 test file for the learned combination "
                       "(defaults: 1 epoch, lr 3e-5, batch 16)\n"
                       "  bi-encoder     the same MiniLM fine-tuned with the cosine hinge loss on cos(q, a) (margin "
                       "0.2)\n\n"
                       "CUDA with bf16 autocast is used when present. Ctrl-C or SIGTERM stops a MiniLM run and keeps "
                       "its best evaluation point so far.\nThe committed checkpoints' exact commands are "
                       "in docs/BENCHMARKS.md.")
    s.add_argument("--model", choices=["bilstm", "cross-encoder", "bi-encoder"], default="bilstm")
    s.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                   help="cuda (bf16 autocast) when available with auto (the default)")
    s.add_argument("--epochs", type=int, default=None)
    s.add_argument("--margin", type=float, default=None, help="M in max(0, M - s(q,a+) + s(q,a-))")
    s.add_argument("--loss", choices=["hinge", "bce"], default=None, help="cross-encoder loss (default hinge)")
    s.add_argument("--task", choices=["A", "B", "C"], default=None,
                   help="MiniLM: A (default) question-comment pairs of subtask A; B question-question pairs of "
                        "subtask B (2016 train part 2 and recovered part 1, selected on dev-B); C (new question, "
                        "comment of a related thread) pairs of subtask C (2016 train part 2, selected on dev-C)")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--lr", type=float, default=None)
    s.add_argument("--batch-size", type=int, default=None, help="triplets per step")
    s.add_argument("--negatives", type=int, default=None, help="bad answers drawn per good answer and epoch")
    s.add_argument("--max-pairs", type=int, default=None,
                   help="MiniLM: at most this many triplets per epoch (a CPU budget; default all)")
    s.add_argument("--eval-every", type=int, default=None, help="MiniLM: also evaluate on dev every N steps")
    s.add_argument("--max-length", type=int, default=None, help="MiniLM: word pieces per input (default 128)")
    s.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (smoke runs)")
    s.add_argument("--init-from", type=str, default=None, metavar="CHECKPOINT",
                   help="MiniLM: start from this checkpoint directory of the same --model instead of "
                        "all-MiniLM-L6-v2 (a further epoch with fresh negatives, or the A model as the start of "
                        "the B model); the learning-rate schedule starts over")
    s.add_argument("--average-of", nargs="+", default=None, metavar="CHECKPOINT",
                   help="MiniLM: train nothing; write the mean of these checkpoints' weights (a model soup: like "
                        "models of this --model and --task from the same start, such as the fold models of "
                        "scripts/cv_question_model.py beside the shipped one) and score it on the task's dev set; "
                        "'base' names the packaged all-MiniLM-L6-v2 itself (bi-encoders), so `--average-of "
                        "CHECKPOINT base --mix 0.5,0.5` is WiSE-FT, the fine-tuned weights pulled back toward "
                        "the zero-shot ones")
    s.add_argument("--mix", type=_shares, default=None, metavar="W1,W2,...",
                   help="with --average-of: each checkpoint's share of the mean, in order, summing to 1 "
                        "(default: equal shares)")
    s.add_argument("--out", type=Path, default=None,
                   help="checkpoint directory (default: the configured checkpoint of that model)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    s.set_defaults(func=cmd_train)

    from ranking.evaluation.cli import add_evaluate_args, add_predict_args
    s = sub.add_parser("evaluate", help="score a prediction file, or run a benchmark",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Score an official-format prediction file against its gold (--gold, "
                       "--pred), or run a ranker on a named benchmark (--benchmark, --ranker), exactly as "
                       "the SemEval-2016 Task 3 scorer does; or judge this data folder's similar-question search "
                       "by the forum's own duplicate links (--duplicates), or how it sorts its threads' comments by "
                       "the forum's own acceptance or votes (--answers). --list shows benchmarks and rankers.")
    add_evaluate_args(s)
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("predict", help="write official-format predictions for a SemEval XML file")
    add_predict_args(s)
    s.set_defaults(func=cmd_predict)
    return p


EXIT_WITH = "CQA_EXIT_WITH"  # set by the service for the commands it runs (an import's ingest): its process id


def _exit_with_service() -> None:
    """A command the service runs as a child (``POST /imports``' ingest) ends when the service does: killed with it
    (Linux's parent-death signal), and never started once it has gone. A restarted service then ingests the upload
    again alone, never beside a child of the killed one. Elsewhere the child runs on, and the import lock it holds
    keeps a second ingest from starting until it ends."""
    parent = os.environ.pop(EXIT_WITH, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:  # the service died before the signal was set
        os._exit(128 + int(signal.SIGKILL))


def main(argv: list[str] | None = None) -> int:
    _exit_with_service()
    args = build_parser().parse_args(argv)
    from app.access import configure
    configure(log_format(), log_level(args))
    return args.func(args)


def log_level(args: argparse.Namespace) -> str:
    return "DEBUG" if args.verbose else "INFO"


def log_format() -> str:
    """``CQA_LOG_FORMAT`` (``app.access.LogFormat``), read before any command's settings: where it is none of them,
    text, and the command's settings then refuse it with the reason."""
    from typing import get_args

    from app.access import LogFormat
    fmt = os.environ.get("CQA_LOG_FORMAT", "text")
    return fmt if fmt in get_args(LogFormat) else "text"


if __name__ == "__main__":
    sys.exit(main())
