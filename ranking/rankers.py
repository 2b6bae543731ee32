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
        """Questions and candidates that carry their embedding (meta "vector": the FAISS index's, or the
        first stage's of the question) are not encoded again; everything else is encoded in one batch."""
        from indexing.encoder import encode
        texts = [q.text for q in queries if q.meta.get("vector") is None]
        qrow = {}
        for qi, q in enumerate(queries):
            if q.meta.get("vector") is None:
                qrow[qi] = len(qrow)
        slots: list[tuple[int, int, int]] = []  # (query, candidate, row in the encoded batch)
        for qi, q in enumerate(queries):
            for ci, c in enumerate(q.candidates):
                if c.meta.get("vector") is None:
                    slots.append((qi, ci, len(texts)))
                    texts.append(c.text)
        emb = (encode(texts, batch_size=self.batch_size, device=self.device, progress=len(texts) > 1000) if texts
               else np.zeros((0, 384), dtype=np.float32))
        qvec = [np.asarray(q.meta["vector"], dtype=np.float32) if qi not in qrow else emb[qrow[qi]]
                for qi, q in enumerate(queries)]
        out = []
        for qi, q in enumerate(queries):
            vecs = np.zeros((len(q.candidates), len(qvec[qi])), dtype=np.float32)
            for ci, c in enumerate(q.candidates):
                if c.meta.get("vector") is not None:
                    vecs[ci] = c.meta["vector"]
            out.append(vecs)
        for qi, ci, row in slots:
            out[qi][ci] = emb[row]
        return [(out[qi] @ qvec[qi]).astype(float).tolist() for qi in range(len(queries))]


@dataclass
class FirstStageScore:
    """A search candidate's score from one first-stage source (bm25, lm, dense) or the fusion of them
    ("fused"), computed over the whole corpus; a candidate the source did not return gets the lowest score
    of its query. Candidates that come from no search score 0."""
    source: str
    name: str = ""

    def __post_init__(self):
        self.name = self.name or f"stage-{self.source}"

    def score(self, queries: list[Query]) -> list[list[float]]:
        out = []
        for q in queries:
            raw = [(c.meta.get("first_stage") or {}).get(self.source) for c in q.candidates]
            present = [v for v in raw if v is not None]
            floor = min(present) if present else 0.0
            out.append([float(v) if v is not None else floor for v in raw])
        return out


@dataclass
class AnswersCosine:
    """A question candidate scored by what answered it: the MiniLM cosine of the question and each comment
    of the candidate's thread (meta "comments"; stored embeddings in "comment_vectors" when a search
    gives them), reduced by ``how``: the best one, or the mean of the best three. 0 without comments."""
    how: str = "max"
    device: str = "auto"
    name: str = ""

    def __post_init__(self):
        self.name = self.name or f"answers-cosine-{self.how}"

    def score(self, queries: list[Query]) -> list[list[float]]:
        from indexing.encoder import encode
        todo = [q.text for q in queries if q.meta.get("vector") is None]
        todo += [t for q in queries for c in q.candidates if c.meta.get("comment_vectors") is None
                 for t in c.meta.get("comments", ())]
        emb = iter(encode(todo, device=self.device, progress=len(todo) > 1000) if todo else [])
        qv = [np.asarray(q.meta["vector"]) if q.meta.get("vector") is not None else next(emb) for q in queries]
        out = []
        for q, v in zip(queries, qv):
            row = []
            for c in q.candidates:
                vecs = c.meta.get("comment_vectors")
                if vecs is None:
                    vecs = [next(emb) for _ in c.meta.get("comments", ())]
                cos = sorted((float(np.dot(v, x)) for x in vecs), reverse=True)
                row.append(0.0 if not cos else cos[0] if self.how == "max" else float(np.mean(cos[:3])))
            out.append(row)
        return out


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


def _tuned_fusion(defaults: str):
    """A z-score fusion whose parts and weights a tuning script wrote to ``defaults`` (beside this file)."""
    def make(settings):
        import json
        from pathlib import Path

        from .candidate_rankers import FusedRanker
        d = json.loads(Path(__file__).with_name(defaults).read_text(encoding="utf-8"))
        weights = {n: w for n, w in d["weights"].items() if w}
        return FusedRanker([get_ranker(n, settings) for n in weights], list(weights.values()), method="zscore",
                           name=d["name"])
    return make


def _bilstm(settings):
    from .neural.ranker import BiLSTMRanker
    return BiLSTMRanker.from_checkpoint(settings.bilstm_checkpoint, settings.device)


def _combination(name: str, int8: bool = False):
    def make(settings):
        from .combination import combination_file, load_combination
        return load_combination(settings, combination_file(name), int8=int8)
    return make


def _minilm(kind: str, name: str | None = None, quantize: bool = False, max_length: int | None = None,
            checkpoint: str | None = None):
    def make(settings):
        from .neural.ranker import MiniLMRanker
        folder = getattr(settings, checkpoint or kind.replace("-", "_") + "_checkpoint")
        return MiniLMRanker.from_checkpoint(folder, settings.device, name=name or kind, quantize=quantize,
                                            max_length=max_length, cache_dir=settings.cache_dir / "scores")
    return make


def _neural_fusion(settings):
    from .candidate_rankers import FusedRanker
    return FusedRanker([get_ranker("cross-encoder", settings), get_ranker("bi-encoder", settings)], [1.0, 1.0],
                       method="zscore", name="neural-fusion")


def _related(settings, defaults: str = "related_defaults.json"):
    from pathlib import Path

    from .related import load_related
    return load_related(settings, Path(__file__).with_name(defaults))


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
    "question-cross-encoder": ("all-MiniLM-L6-v2 cross-encoder of question-question similarity, pairwise hinge loss on "
                               "2016 train subtask B pairs, selected on dev-B; checkpoint "
                               "$CQA_QUESTION_CROSS_ENCODER_CHECKPOINT",
                               _minilm("cross-encoder", "question-cross-encoder",
                                       checkpoint="question_cross_encoder_checkpoint")),
    "bi-encoder-int8": ("the bi-encoder with int8 dynamic quantisation of its linear layers (CPU)",
                        _minilm("bi-encoder", "bi-encoder-int8", quantize=True)),
    "bi-encoder": ("all-MiniLM-L6-v2 fine-tuned with the cosine hinge loss, cos(q, a); checkpoint "
                   "$CQA_BI_ENCODER_CHECKPOINT", _minilm("bi-encoder")),
    "neural-fusion": ("per-question z-score fusion of the cross-encoder and the bi-encoder, equal weights, no "
                      "signals (the ablation's 'with fusion' row)", _neural_fusion),
    "related-answers": ("subtask C: the answer ranker on (new question, comment) and (thread question, comment), "
                        "the thread's rank and its question's similarity by the B fusion, weights tuned on dev-C "
                        "(ranking/related_defaults.json)", _related),
    "search-answers": ("/search, target answers: the related-answers features plus the first-stage rank and the "
                       "comment's forum-signal quality, weights tuned end to end on semeval2016-dev-search-answers "
                       "(ranking/search_answers_defaults.json)", lambda s: _related(s, "search_answers_defaults.json")),
    "search-questions": ("/search, target questions: z-score fusion of the first-stage order and question-question "
                         "scores, weights tuned end to end on semeval2016-dev-search-questions "
                         "(ranking/search_questions_defaults.json)", _tuned_fusion("search_questions_defaults.json")),
    **{f"stage-{src}": (f"a search candidate's {what} over the whole corpus (0 outside /search)",
                        lambda settings, src=src: FirstStageScore(src))
       for src, what in (("bm25", "BM25 score"), ("lm", "query-likelihood score"), ("dense", "MiniLM cosine"),
                         ("fused", "fused first-stage score"))},
    "answers-cosine-max": ("a question candidate's best MiniLM cosine between the question and its thread's comments",
                           lambda settings: AnswersCosine("max", settings.device)),
    "answers-cosine-top3": ("the mean of a question candidate's three best question-comment MiniLM cosines",
                            lambda settings: AnswersCosine("top3", settings.device)),
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
    """The reranker of POST /rerank (one thread's comments, subtask A): $CQA_DEFAULT_RANKER, set up for serving."""
    return for_serving(get_ranker(settings.default_ranker, settings))


def search_rerankers(settings) -> dict[str, Ranker]:
    """The reranker of each /search target, set up for serving: answers ($CQA_SEARCH_RANKER_ANSWERS,
    measured on the search-answers benchmarks) and questions ($CQA_SEARCH_RANKER_QUESTIONS). Threads
    are not reranked."""
    return {"answers": for_serving(get_ranker(settings.search_ranker_answers, settings)),
            "questions": for_serving(get_ranker(settings.search_ranker_questions, settings))}


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
