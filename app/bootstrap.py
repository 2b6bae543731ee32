"""First start: ingest the default corpus into an empty store, and build indexes if none are live."""
from __future__ import annotations

import logging
from pathlib import Path

from indexing.config import Settings
from indexing.ingest import ingest_paths
from indexing.store import ThreadStore

log = logging.getLogger(__name__)

SEMEVAL_DEFAULT = ("train", "dev", "test")


def default_corpus(settings: Settings) -> list[Path]:
    """The SemEval 2016 English threads when the shared data is there, else the shipped demo."""
    sem = settings.semeval_dir
    if sem.exists():
        files = []
        for sub in SEMEVAL_DEFAULT:
            files += sorted(p for p in (sem / sub).glob("*.xml") if "subtaskA" not in p.name)
        files += sorted((sem / "train").glob("*part1-recovered-subtaskA.xml"))
        if files:
            return files
    return [settings.demo_corpus]


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
    if current_generation(settings.index_root) is None:
        log.info("no live index generation: building one")
        out["reindex"] = reindex(settings, progress=progress)
    return out
