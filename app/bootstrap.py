"""First start: ingest the default corpus into an empty store, and build indexes if none are live."""
from __future__ import annotations

import logging
from pathlib import Path

from indexing.catalog import CORPUS_FILES
from indexing.ingest import ingest_paths
from indexing.store import ThreadStore

from .settings import Settings

log = logging.getLogger(__name__)

def default_corpus(settings: Settings) -> list[Path]:
    """The SemEval 2016 English threads when the shared data is there (the corpus the full-corpus and
    /search benchmarks index), else the shipped demo."""
    files = [settings.semeval_dir / f for f in CORPUS_FILES]
    return files if all(f.exists() for f in files) else [settings.demo_corpus]


def bootstrap(settings: Settings, progress: bool = True) -> dict:
    out: dict = {}
    with ThreadStore(settings.store_path) as store:
        if store.counts()["threads"] == 0:
            files = default_corpus(settings)
            log.info("store is empty: ingesting the default corpus (%s)", ", ".join(f.name for f in files))
            out["ingest"] = ingest_paths(store, files, progress=progress).as_dict()
        out["store"] = store.counts()
    try:
        from indexing.generations import current_generation
        from indexing.reindex import reindex
    except ImportError:  # indexes not built in this version
        return out
    name = current_generation(settings.index_root)
    if name is None:
        log.info("no live index generation: building one")
        out["reindex"] = reindex(settings, progress=progress)
    elif (problem := _unsearchable(settings)) is not None:
        log.warning("the live generation %s cannot be searched (%s): building a new one", name, problem)
        out["reindex"] = reindex(settings, progress=progress)
    elif (lacking := _lacks_answer_vectors(settings)) is not None:
        log.warning("the live generation %s stores no comment vectors of %s ($CQA_ANSWER_ENCODER): /search "
                    "answers encode the comments they rerank on each request, which is slower; run `cqa reindex`",
                    name, lacking)
    return out


def _lacks_answer_vectors(settings: Settings) -> str | None:
    """The answer encoder whose vectors the live generation should store and does not (None when it does)."""
    from indexing.searcher import manifest_of, stored_answer_encoder
    spec = settings.answer_spec
    if spec is None or stored_answer_encoder(manifest_of(settings.index_root) or {}) == spec.id:
        return None
    return spec.id


def _unsearchable(settings: Settings) -> str | None:
    """Why the live generation's dense index can no longer be searched: the bi-encoder that built it is gone
    or retrained, so new queries would not match its vectors (None when it can)."""
    from indexing.encoder import EncoderError, EncoderSpec
    from indexing.searcher import manifest_of
    try:
        EncoderSpec.from_manifest(manifest_of(settings.index_root) or {})
    except EncoderError as e:
        return str(e)
    except (OSError, ValueError):
        return None  # not this check's business: loading reports it with its own message
    return None
