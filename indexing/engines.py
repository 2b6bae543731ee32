"""Where a reindex does its heavy work: analysing every text and embedding the texts the cache lacks.

``LocalEngine`` runs both in this process. ``RayEngine`` runs them on a Ray cluster with Ray Data: the texts
go out in blocks, ``map_batches`` analyses them over a task pool and embeds them over an actor pool (one
model per actor, on a GPU when the cluster has GPUs), and the results come back to the driver, which merges
the lexical statistics and writes the generation through the same publishing code as the local engine
(``indexing.reindex``). Both produce the same generation: identical lexical indexes, the same vectors up to
floating-point noise; the manifest names the engine that built it.

Ray is an optional extra (``pip install -e '.[ray]'``); nothing here imports it unless a RayEngine is made.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np
from tqdm import tqdm

from .encoder import EncoderSpec
from .text import Analyzer

log = logging.getLogger(__name__)

# (positions in the list given, their vectors): what an engine yields as embeddings arrive, in any order
EmbeddedBatch = tuple[np.ndarray, np.ndarray]
EmbedFn = Callable[[list[str]], Iterator[EmbeddedBatch]]
_SEP = "\x1f"  # joins one document's tokens for the trip back from a Ray worker (tokens never contain it)


class Engine(Protocol):
    name: str
    encoder: EncoderSpec | None  # whose vectors ``embed`` gives (None: a test's own encode function)

    def analyse(self, texts: list[str], analyzer: Analyzer, progress: bool) -> list[list[str]]:
        """Each text's tokens, in the order given."""

    def embed(self, texts: list[str]) -> Iterator[EmbeddedBatch]:
        """L2-normalised embeddings of ``texts``, batch by batch as they are ready."""

    def embedder(self, encoder: EncoderSpec) -> EmbedFn | None:
        """``embed`` with another encoder (the answer encoder's comment vectors), on this engine's workers;
        None where this engine cannot load it, and the caller encodes in its own process."""

    def describe(self) -> dict:
        """What the manifest records about the engine."""

    def close(self) -> None: ...


EncodeFn = Callable[[list[str]], np.ndarray]


def embed_block(encoder_batch: int) -> int:
    """Texts per embedding call (and per Ray block): the same for every engine, so each encodes the same
    batches and their vectors agree."""
    return max(encoder_batch * 4, 64)


class LocalEngine:
    """Everything in this process: the analyzer in a loop, the encoder in batches."""
    name = "local"

    def __init__(self, encode_fn: EncodeFn, batch_size: int = 256, encoder: EncoderSpec | None = None):
        self.encode_fn, self.batch_size, self.encoder = encode_fn, batch_size, encoder

    def analyse(self, texts, analyzer, progress):
        return [analyzer(t) for t in tqdm(texts, unit="doc", desc="analyse", disable=not progress)]

    def embed(self, texts):
        for s in range(0, len(texts), self.batch_size):
            chunk = texts[s:s + self.batch_size]
            yield np.arange(s, s + len(chunk)), self.encode_fn(chunk)

    def embedder(self, encoder):
        """Only its own encoder: another one is loaded by ``indexing.reindex.local_engine``."""
        return self.embed if encoder == self.encoder else None

    def describe(self) -> dict:
        return {"name": self.name}

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class RayOptions:
    """How the Ray engine uses its cluster."""
    address: str | None = None  # None: start a local cluster in this process; "auto" or "ray://host:10001": join one
    workers: int = 2            # embedding actors (and concurrent analysis tasks)
    cpus_per_worker: float = 0.5  # below 1 on small machines: Ray Data's read tasks need CPU left over
    local_cpus: int | None = None  # CPUs of a local cluster (default: this machine's)
    block_size: int = 1024      # texts per block and per batch of analysis
    embed_batch: int | None = None  # texts per block and per embedding call (default: embed_block())


def _analyse_batch(batch: dict, spec: dict) -> dict:
    analyzer = Analyzer.from_dict(spec)
    return {"pos": batch["pos"], "tokens": np.array([_SEP.join(analyzer(str(t))) for t in batch["text"]],
                                                   dtype=object)}


class _Embedder:
    """One per actor: loads the sentence encoder once, then embeds every batch it is given."""

    def __init__(self, device: str, batch_size: int, encoder: EncoderSpec):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from .encoder import load_encoder
        self.device, self.batch_size, self.encoder = device, batch_size, encoder
        load_encoder(device, encoder)

    def __call__(self, batch: dict) -> dict:
        from .encoder import encode
        vecs = encode([str(t) for t in batch["text"]], batch_size=self.batch_size, device=self.device,
                      spec=self.encoder)
        return {"pos": batch["pos"], "vec": vecs}


class RayEngine:
    """Analysis and embedding on a Ray cluster through Ray Data."""
    name = "ray"

    def __init__(self, options: RayOptions, device: str = "auto", encoder_batch: int = 64,
                 encoder: EncoderSpec = EncoderSpec()):
        try:
            import ray
        except ImportError:
            raise RuntimeError("the Ray engine needs Ray: pip install -e '.[ray]'") from None
        self.options, self.encoder_batch, self.encoder = options, encoder_batch, encoder
        self._owns_cluster = False
        if not ray.is_initialized():
            env = {"env_vars": {k: os.environ.get(k, "1") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}}
            if options.address:
                ray.init(address=options.address, runtime_env=env, log_to_driver=False)
            else:
                ray.init(num_cpus=options.local_cpus or os.cpu_count() or 1, include_dashboard=False,
                         runtime_env=env, log_to_driver=False)
                self._owns_cluster = True
        import ray.data
        ray.data.DataContext.get_current().enable_progress_bars = False
        self.gpus = float(ray.cluster_resources().get("GPU", 0))
        self.device = "cuda" if self.gpus >= 1 and device != "cpu" else "cpu"
        log.info("Ray engine: %s cluster, %s CPUs, %s GPUs, %d workers on %s",
                 "local" if self._owns_cluster else options.address, ray.cluster_resources().get("CPU"),
                 self.gpus, options.workers, self.device)

    @staticmethod
    def _dataset(texts: list[str], block: int):
        """The texts in blocks of ``block``: the unit a task or an actor takes, so small blocks keep every
        worker of the pool busy to the end."""
        import ray.data
        items = [{"pos": i, "text": t} for i, t in enumerate(texts)]
        return ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // block)))

    def analyse(self, texts, analyzer, progress):
        import ray.data
        if not texts:
            return []
        o = self.options
        out: list[list[str] | None] = [None] * len(texts)
        ds = self._dataset(texts, o.block_size).map_batches(
            _analyse_batch, fn_kwargs={"spec": analyzer.to_dict()}, batch_size=o.block_size, batch_format="numpy",
            compute=ray.data.TaskPoolStrategy(size=o.workers), num_cpus=o.cpus_per_worker)
        with tqdm(total=len(texts), unit="doc", desc="analyse (ray)", disable=not progress) as bar:
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                for p, toks in zip(batch["pos"], batch["tokens"]):
                    out[int(p)] = toks.split(_SEP) if toks else []
                bar.update(len(batch["pos"]))
        missing = sum(t is None for t in out)
        if missing:
            raise RuntimeError(f"the Ray engine lost {missing} analysed documents")
        return out

    def embed(self, texts):
        return self._embed(texts, self.encoder)

    def embedder(self, encoder):
        """Any encoder the cluster's workers can load: its own actor pool, like the dense encoder's."""
        return lambda texts: self._embed(texts, encoder)

    def _embed(self, texts: list[str], encoder: EncoderSpec) -> Iterator[EmbeddedBatch]:
        import ray.data
        o = self.options
        if not texts:
            return
        gpu = self.device == "cuda"
        block = o.embed_batch or embed_block(self.encoder_batch)
        ds = self._dataset(texts, block).map_batches(
            _Embedder, fn_constructor_kwargs={"device": self.device, "batch_size": self.encoder_batch,
                                             "encoder": encoder},
            batch_size=block, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=o.workers),
            num_cpus=0 if gpu else o.cpus_per_worker, num_gpus=1 if gpu else 0)
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            yield np.asarray(batch["pos"], dtype=np.int64), np.asarray(batch["vec"], dtype=np.float32)

    def describe(self) -> dict:
        o = asdict(self.options)
        return {"name": self.name, **o, "address": o["address"] or "local", "device": self.device,
                "embed_batch": o["embed_batch"] or embed_block(self.encoder_batch)}

    def close(self) -> None:
        if self._owns_cluster:
            import ray
            ray.shutdown()
