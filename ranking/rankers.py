"""Named rankers for ``cqa evaluate --ranker`` and ``cqa predict --ranker``.

A ranker scores the candidates of each query; higher is better. Rankers are built by name
from a mapping, so adding one is one entry, never a flag.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .candidates import Query


class Ranker(Protocol):
    name: str

    def score(self, queries: list[Query]) -> list[list[float]]:
        """One list of scores per query, aligned with its candidates."""
        ...


class UnknownRanker(Exception):
    pass


@dataclass
class IRBaseline:
    """The order the task gives: chronological for A, the search engine's for B and C."""
    name: str = "ir-baseline"

    def score(self, queries: list[Query]) -> list[list[float]]:
        return [[1.0 / (i + 1) for i in range(len(q.candidates))] for q in queries]


@dataclass
class MiniLMCosine:
    """Zero-shot: cosine of all-MiniLM-L6-v2 embeddings of the question and each candidate."""
    device: str = "auto"
    batch_size: int = 64
    name: str = "minilm-cosine"

    def score(self, queries: list[Query]) -> list[list[float]]:
        """Candidates that carry their stored embedding (meta "vector", e.g. from the FAISS index)
        are not encoded again; everything else is encoded in one batch."""
        from indexing.encoder import encode
        texts = [q.text for q in queries]
        slots: list[tuple[int, int, int]] = []  # (query, candidate, row in the encoded batch)
        for qi, q in enumerate(queries):
            for ci, c in enumerate(q.candidates):
                if c.meta.get("vector") is None:
                    slots.append((qi, ci, len(texts)))
                    texts.append(c.text)
        emb = encode(texts, batch_size=self.batch_size, device=self.device, progress=len(texts) > 1000)
        out = []
        for qi, q in enumerate(queries):
            vecs = np.zeros((len(q.candidates), emb.shape[1]), dtype=np.float32)
            for ci, c in enumerate(q.candidates):
                if c.meta.get("vector") is not None:
                    vecs[ci] = c.meta["vector"]
            out.append(vecs)
        for qi, ci, row in slots:
            out[qi][ci] = emb[row]
        return [(out[qi] @ emb[qi]).astype(float).tolist() for qi in range(len(queries))]


RANKERS: dict[str, tuple[str, Callable[..., Ranker]]] = {
    "ir-baseline": ("the given order (the official IR baseline)", lambda settings: IRBaseline()),
    "minilm-cosine": ("zero-shot all-MiniLM-L6-v2 cosine similarity",
                      lambda settings: MiniLMCosine(device=settings.device,
                                                    batch_size=settings.embedding_batch_size)),
}


def _lexical(model):
    def make(settings):
        from .candidate_rankers import LexicalRanker
        return LexicalRanker(model=model, name=model)
    return make


def _translation(settings):
    from .candidate_rankers import TranslationLMRanker
    return TranslationLMRanker(semeval_dir=settings.semeval_dir, cache_dir=settings.cache_dir)


def _fusion(settings, method: str = "zscore", name: str = "fusion", per_query: bool = False):
    """The dev-tuned fusion of the given-candidate rankers; ``per_query`` takes lexical statistics from
    each question's own candidates, so a service request's scores do not depend on its batch."""
    from .candidate_rankers import FusedRanker, LexicalRanker, fusion_weights
    weights = {n: w for n, w in fusion_weights().items() if w > 0}
    parts = [get_ranker(n, settings) for n in weights]
    for r in parts:
        if isinstance(r, LexicalRanker):
            r.per_query = per_query
    return FusedRanker(parts, list(weights.values()), method=method, name=name)


def _bilstm(settings):
    from .neural.ranker import BiLSTMRanker
    return BiLSTMRanker.from_checkpoint(settings.bilstm_checkpoint, settings.device)


def _combination(name: str, int8: bool = False):
    def make(settings):
        from .combination import combination_file, load_combination
        return load_combination(settings, combination_file(name), int8=int8)
    return make


def _minilm(kind: str, name: str | None = None, quantize: bool = False, max_length: int | None = None):
    def make(settings):
        from .neural.ranker import MiniLMRanker
        folder = settings.cross_encoder_checkpoint if kind == "cross-encoder" else settings.bi_encoder_checkpoint
        return MiniLMRanker.from_checkpoint(folder, settings.device, name=name or kind, quantize=quantize,
                                            max_length=max_length, cache_dir=settings.cache_dir / "scores")
    return make


def _neural_fusion(settings):
    from .candidate_rankers import FusedRanker
    return FusedRanker([get_ranker("cross-encoder", settings), get_ranker("bi-encoder", settings)], [1.0, 1.0],
                       method="zscore", name="neural-fusion")


def _related(settings):
    from .related import load_related
    return load_related(settings)


RANKERS.update({
    "bilstm+signals": ("logistic regression over bilstm, bm25, the given order and forum signals "
                       "(asker, position, length, URLs, phones, question marks, thanks); trained on training "
                       "threads, C chosen on dev-A (ranking/combination_A.json)", _combination("bilstm+signals")),
    "cross-encoder+signals": ("logistic regression over cross-encoder, bi-encoder, bm25, the given order "
                              "and the forum signals; trained on the training file the MiniLM rankers never saw, C "
                              "chosen on dev-A (ranking/combination_cross_A.json)", _combination("cross-encoder+signals")),
    "cross-encoder+signals-int8": ("cross-encoder+signals with its MiniLM parts in int8 on the CPU (2x faster; "
                                   "dev-A MAP 0.0051 lower, so not the default)", _combination("cross-encoder+signals", True)),
    "cross-encoder": ("all-MiniLM-L6-v2 cross-encoder, [CLS] q [SEP] a, pairwise hinge loss; checkpoint "
                      "$CQA_CROSS_ENCODER_CHECKPOINT", _minilm("cross-encoder")),
    "cross-encoder-int8": ("the cross-encoder with int8 dynamic quantisation of its linear layers (CPU)",
                           _minilm("cross-encoder", "cross-encoder-int8", quantize=True)),
    "cross-encoder-96": ("the cross-encoder reading at most 96 word pieces per pair",
                         _minilm("cross-encoder", "cross-encoder-96", max_length=96)),
    "bi-encoder-int8": ("the bi-encoder with int8 dynamic quantisation of its linear layers (CPU)",
                        _minilm("bi-encoder", "bi-encoder-int8", quantize=True)),
    "bi-encoder": ("all-MiniLM-L6-v2 fine-tuned with the cosine hinge loss, cos(q, a); checkpoint "
                   "$CQA_BI_ENCODER_CHECKPOINT", _minilm("bi-encoder")),
    "neural-fusion": ("per-question z-score fusion of the cross-encoder and the bi-encoder, equal weights, no "
                      "signals (the ablation's 'with fusion' row)", _neural_fusion),
    "related-answers": ("subtask C: the answer ranker on (new question, comment) and (thread question, comment), "
                        "the thread's rank and its question's similarity by the B fusion, weights tuned on dev-C "
                        "(ranking/related_defaults.json)", _related),
    "bilstm": ("BiLSTM with attention (Tan et al. 2016), cosine hinge loss; checkpoint $CQA_BILSTM_CHECKPOINT",
               _bilstm),
    "dense": ("the dense source alone: all-MiniLM-L6-v2 cosine (same as minilm-cosine)",
              lambda settings: MiniLMCosine(device=settings.device, batch_size=settings.embedding_batch_size,
                                            name="dense")),
    "bm25": ("BM25 of the question against each given candidate", _lexical("bm25")),
    "lm": ("Dirichlet query likelihood of the question for each candidate", _lexical("lm")),
    "translation-lm": ("translation-based LM (Xue et al. 2008), IBM Model 1 learned on the training files",
                       _translation),
    "fusion": ("per-question z-score fusion of ir-baseline, bm25, lm, translation-lm and minilm-cosine, "
               "weights tuned on dev (ranking/candidate_fusion_defaults.json)", _fusion),
    "fusion-rrf": ("reciprocal rank fusion of the same parts and weights", lambda s: _fusion(s, "rrf", "fusion-rrf")),
})


def service_reranker(settings) -> Ranker:
    """The reranker the service uses: the default ranker ($CQA_DEFAULT_RANKER), set up for serving."""
    return for_serving(get_ranker(settings.default_ranker, settings))


def for_serving(ranker: Ranker) -> Ranker:
    """Lexical statistics taken per request (a request's scores never depend on its batch) and no
    evaluation score cache, in the ranker and every part of it."""
    stack = [ranker]
    while stack:
        r = stack.pop()
        if hasattr(r, "per_query"):
            r.per_query = True
        if getattr(r, "cache_dir", None) is not None:
            r.cache_dir = None
        stack += list(getattr(r, "parts", []))
    return ranker


def register(name: str, description: str, factory: Callable[..., Ranker]) -> None:
    RANKERS[name] = (description, factory)


def get_ranker(name: str, settings) -> Ranker:
    if name not in RANKERS:
        raise UnknownRanker(f"unknown ranker {name!r}; known: {', '.join(sorted(RANKERS))}")
    return RANKERS[name][1](settings)


def labels_from_scores(scores: list[float]) -> list[bool]:
    """The true|false column: a candidate is called relevant when it scores at or above its
    question's mean, a threshold-free rule that works for any score scale."""
    if not scores:
        return []
    m = float(np.mean(scores))
    return [s >= m for s in scores]
