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


# A first build stores the answer encoder's comment vectors at once up to this many comments (seconds of encoding);
# above it, it leaves them out, so the service is ready sooner, and `cqa serve` adds them with a background reindex
# (the SemEval corpus: 19,680 comments, about 2 minutes on 2 cores).
ANSWERS_NOW_MAX = 2000


def bootstrap(settings: Settings, progress: bool = True, answers_now_max: int = ANSWERS_NOW_MAX) -> dict:
    """Ingest the default corpus into an empty store and build a generation if none can serve. The result says
    what it did; ``answer_vectors_pending`` names the answer encoder whose comment vectors the live generation
    lacks (a first build above ``answers_now_max`` comments leaves them out; a generation built before the setting,
    or with another encoder, has none), which `cqa serve` then adds with a background reindex."""
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
        first = settings
        if settings.answer_spec is not None and out["store"]["answers"] > answers_now_max:
            log.info("no live index generation: building one without the answer vectors of its %d comments, "
                     "which come with the next reindex", out["store"]["answers"])
            first = settings.model_copy(update={"answer_encoder": "none"})
        else:
            log.info("no live index generation: building one")
        out["reindex"] = reindex(first, progress=progress)
    elif (problem := _unsearchable(settings)) is not None:
        log.warning("the live generation %s cannot be searched (%s): building a new one", name, problem)
        out["reindex"] = reindex(settings, progress=progress)
    if (lacking := _lacks_answer_vectors(settings)) is not None:
        out["answer_vectors_pending"] = lacking
    return out


def child_command(settings: Settings, *args: str) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a ``cqa`` command this service runs as a child process, on its data folder with its
    encoders whatever the environment says (a build's, an import's ingest, which encodes ahead with them)."""
    import os
    import sys
    env = {**os.environ, "CQA_DATA_DIR": str(settings.data_dir), "CQA_ANSWER_ENCODER": settings.answer_encoder,
           "CQA_DENSE_ENCODER": settings.dense_encoder}
    return [sys.executable, "-m", "app.cli", *args], env


def reindex_command(settings: Settings, *flags: str) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a ``cqa reindex`` of this data folder with this service's encoders, run as a
    child process (its log lines go to this process's stderr; its last stdout line is the summary)."""
    return child_command(settings, "reindex", "--quiet", *flags)


def reindex_in_background(settings: Settings):
    """A ``cqa reindex`` of this data folder in a child process. A service follows the generation it publishes, so it
    switches over without a restart."""
    import subprocess
    argv, env = reindex_command(settings)
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)


def _lacks_answer_vectors(settings: Settings) -> str | None:
    """The answer encoder whose vectors the live generation should store and does not (None when it does)."""
    from indexing.searcher import manifest_of, stored_answer_encoder
    want = settings.answer_encoder_id
    if want is None or stored_answer_encoder(manifest_of(settings.index_root) or {}) == want:
        return None
    return want


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
