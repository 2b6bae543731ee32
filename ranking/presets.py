"""Ranker presets as typed specs, and the one builder that turns a spec into a ranker.

A preset names what a ranker is (its kind), where its weights live (a checkpoint setting, or a file of
learned/tuned parameters beside this module) and which other presets it combines. Variants are fields
(``inference``, ``max_length``), never suffixes in a name; composite rankers receive their built parts.
First-stage retriever configurations of the full-corpus benchmarks are presets too (kind "retriever")."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class UnknownRanker(Exception):
    pass


@dataclass(frozen=True)
class RankerSpec:
    kind: str  # a key of BUILDERS, or "retriever"
    description: str
    checkpoint: str | None = None  # the setting that holds the checkpoint directory (MiniLM, BiLSTM)
    inference: str | None = None  # MiniLM: a variant of ranking/neural/inference.py; None: the setting (auto)
    # ``auto`` runs this ranker's MiniLM parts but its bi-encoders in torch-bf16 on a CPU with bf16 instructions:
    # cleared on dev, where it lost at most 0.005 MAP against torch-fp32, and faster through a real server
    # (docs/BENCHMARKS.md, "Round 22": the cascade). Only where it is served or evaluated itself: as a part of another
    # ranker it runs what that one runs. related-answers was cleared too (round 23) until round 53 kept every
    # bi-encoder in fp32, the index's precision: it runs no other MiniLM model.
    auto_bf16: bool = False
    max_length: int | None = None  # MiniLM word pieces per input; None: the checkpoint's
    parts: tuple[str, ...] = ()  # presets this one combines (or read from ``file``)
    weights: tuple[float, ...] = ()
    method: str = "zscore"  # fusion: zscore, minmax or rrf
    file: str | None = None  # learned or tuned parameters, beside ranking/
    options: dict[str, Any] = field(default_factory=dict)  # kind-specific: lexical model, first-stage source...

    def params(self) -> dict:
        """The parameters file, read (once per process)."""
        return _read_params(self.file) if self.file else {}

    def part_names(self) -> tuple[str, ...]:
        """The presets it combines: given, or named by its parameters file."""
        if self.parts or not self.file:
            return self.parts
        p = self.params()
        if self.kind == "combination":
            return tuple(p["parts"])
        if self.kind == "fusion":  # the parts either weight set uses ("unordered": see FusedRanker)
            sets = [p["weights"], _unordered(p) or {}]
            return tuple(dict.fromkeys(n for ws in sets for n, w in ws.items() if w))
        if self.kind == "related":
            return tuple(p[k] for k in RELATED_PARTS if p.get(k))
        return ()

    def summary(self) -> str:
        bits = [f"kind={self.kind}"]
        for name in ("checkpoint", "inference", "max_length", "file"):
            if getattr(self, name) is not None:
                bits.append(f"{name}={getattr(self, name)}")
        if self.auto_bf16:
            bits.append("auto_bf16")
        if self.part_names():
            bits.append("parts=" + "+".join(self.part_names()))
        bits += [f"{k}={v}" for k, v in self.options.items()]
        return " ".join(bits)


# a related-answers parameters file names its parts under these keys, in this order (the last three optional)
RELATED_PARTS = ("answer_ranker", "thread_ranker", "quality_ranker", "answer_model")


@lru_cache(maxsize=None)
def _read_params(file: str) -> dict:
    return json.loads((HERE / file).read_text(encoding="utf-8"))


def _lexical(model: str, what: str) -> RankerSpec:
    return RankerSpec("lexical", what, options={"model": model})


def _retriever(what: str, sources: tuple[str, ...], fusion: str = "rrf", expansion: str = "none") -> RankerSpec:
    return RankerSpec("retriever", what, options={"sources": sources, "fusion": fusion, "expansion": expansion})


PRESETS: dict[str, RankerSpec] = {
    "ir-baseline": RankerSpec("ir-baseline", "the given order (the official IR baseline)"),
    "minilm-cosine": RankerSpec("minilm-cosine", "zero-shot all-MiniLM-L6-v2 cosine similarity (at /search: the "
                                "cosine of the generation's dense encoder, $CQA_DENSE_ENCODER)"),
    "dense": RankerSpec("minilm-cosine", "the dense source alone: the dense encoder's cosine (same as minilm-cosine)"),
    "minilm-cosine-subjects": RankerSpec("minilm-cosine", "zero-shot all-MiniLM-L6-v2 cosine of the two questions' "
                                         "subjects (their whole texts where either has none)",
                                         options={"subjects": True}),
    "bm25": _lexical("bm25", "BM25 of the question against each given candidate"),
    "lm": _lexical("lm", "Dirichlet query likelihood of the question for each candidate"),
    "translation-lm": RankerSpec("translation-lm", "translation-based LM (Xue et al. 2008), IBM Model 1 learned "
                                 "on the training files"),
    "fusion": RankerSpec("fusion", "per-question z-score fusion of ir-baseline, bm25, lm, translation-lm and "
                         "minilm-cosine, weights tuned on dev-B", file="candidate_fusion_defaults.json"),
    "fusion-rrf": RankerSpec("fusion", "reciprocal rank fusion of the same parts and weights",
                             method="rrf", file="candidate_fusion_defaults.json"),
    "bilstm": RankerSpec("bilstm", "BiLSTM with attention (Tan et al. 2016), cosine hinge loss",
                         checkpoint="bilstm_checkpoint"),
    "cross-encoder": RankerSpec("minilm", "all-MiniLM-L6-v2 cross-encoder, [CLS] q [SEP] a, pairwise hinge loss "
                                "on subtask A", checkpoint="cross_encoder_checkpoint"),
    "bi-encoder": RankerSpec("minilm", "all-MiniLM-L6-v2 fine-tuned with the cosine hinge loss on subtask A, "
                             "cos(q, a)", checkpoint="bi_encoder_checkpoint"),
    "question-bi-encoder": RankerSpec("minilm", "all-MiniLM-L6-v2 fine-tuned with the cosine hinge loss on subtask B "
                                      "question-question pairs (2016 train), cos(q, q')",
                                      checkpoint="question_bi_encoder_checkpoint"),
    "related-bi-encoder": RankerSpec("minilm", "the subtask A bi-encoder fine-tuned further with the cosine hinge "
                                     "loss on subtask C pairs (new question, comment of a related thread; 2016 train "
                                     "part 2), cos(q, c)", checkpoint="related_bi_encoder_checkpoint"),
    "question-cross-encoder": RankerSpec("minilm", "all-MiniLM-L6-v2 cross-encoder trained on subtask B "
                                         "question-question pairs (`cqa train --model cross-encoder --task B`; not "
                                         "shipped: $CQA_QUESTION_CROSS_ENCODER_CHECKPOINT names one)",
                                         checkpoint="question_cross_encoder_checkpoint"),
    "adapted-cosine": RankerSpec("minilm", "zero-shot cosine of all-MiniLM-L6-v2 adapted to the forum's (subject, "
                                 "body) pairs with in-batch negatives, no labels (scripts/adapt_minilm.py; not "
                                 "shipped: $CQA_ADAPTED_ENCODER_CHECKPOINT names one)",
                                 checkpoint="adapted_encoder_checkpoint"),
    "question-centrality": RankerSpec("comment-centrality", "a candidate question's mean question-bi-encoder cosine "
                                      "with the new question's other candidates (how much the rest of the search "
                                      "agrees with it)", parts=("question-bi-encoder",)),
    "closest-question": RankerSpec("closest-comment", "a candidate question's highest question-bi-encoder cosine "
                                   "with another candidate of the new question (a near-duplicate among them)",
                                   parts=("question-bi-encoder",)),
    "question-fusion": RankerSpec("fusion", "subtask B: per-question z-score fusion of the IR order, lexical scores, "
                                  "the zero-shot cosine, the question-question bi-encoder and the A-trained models, "
                                  "weights tuned on dev-B", file="question_fusion_defaults.json"),
    "question-fusion+answers": RankerSpec("fusion", "subtask B where the candidates carry their comments: the "
                                          "question-question bi-encoder and the subtask A bi-encoder's best cosine "
                                          "between the new question and a candidate's comments (answers-model-max), "
                                          "z-scored, weights tuned on dev-B (docs/BENCHMARKS.md, round 36, rule 12)",
                                          file="question_answers_fusion_defaults.json"),
    "question-answers-fusion": RankerSpec("by-comments", "subtask B, not the default (rule 12b refused it on "
                                          "latency where the comments are not indexed): question-fusion+answers for a "
                                          "new question any of whose candidates carries its thread's comments (one "
                                          "without scores 0 on the comments' part), question-fusion (unchanged) for "
                                          "one whose candidates carry none",
                                          parts=("question-fusion+answers", "question-fusion")),
    "question-answers-fusion-indexed": RankerSpec(
        "by-comments", "subtask B, the default: question-fusion+answers for a new question whose candidates' comments "
        "all come with their stored vectors (threads the forum's index holds with those comments: nothing encoded but "
        "the new question), question-fusion for any other (docs/BENCHMARKS.md, round 37, rule 14)",
        parts=("question-fusion+answers", "question-fusion"), options={"stored_only": True}),
    "neural-fusion": RankerSpec("fusion", "per-question z-score fusion of the cross-encoder and the bi-encoder, "
                                "equal weights, no signals (the ablation's 'with fusion' row)",
                                parts=("cross-encoder", "bi-encoder"), weights=(1.0, 1.0)),
    "bilstm+signals": RankerSpec("combination", "logistic regression over bilstm, bm25, the given order and forum "
                                 "signals; trained on training threads, C chosen on dev-A",
                                 file="combination_A.json"),
    "cross-encoder+signals": RankerSpec("combination", "logistic regression over cross-encoder, bi-encoder, bm25, "
                                        "the given order and the forum signals; trained on the training file the "
                                        "MiniLM rankers never saw, C chosen on dev-A (the subtask A default, "
                                        "POST /rerank)", file="combination_cross_A.json"),
    "cascade": RankerSpec("cascade", "bilstm+signals orders every candidate, cross-encoder+signals rescores its "
                          "top $CQA_CASCADE_TOP (N chosen on dev-A from the MAP-against-latency curve)",
                          parts=("bilstm+signals", "cross-encoder+signals"), auto_bf16=True),
    "related-answers": RankerSpec("related", "subtask C: the answer ranker on (new question, comment) and (thread "
                                  "question, comment), the thread's rank and its question's similarity by the B "
                                  "fusion, the comment's quality in its own thread by an A ranker with forum "
                                  "signals, weights tuned on dev-C", file="related_defaults.json"),
    "search-answers": RankerSpec("related", "POST /search answers: the related-answers features over the first "
                                 "stage's comments and the similar threads' comments, with first-stage scores and "
                                 "the comment's forum-signal quality; weights tuned end to end on "
                                 "semeval2016-dev-search-answers", file="search_answers_defaults.json"),
    "search-questions": RankerSpec("fusion", "POST /search questions: z-score fusion of the first-stage scores and "
                                   "what answered each thread (question-comment cosines); weights tuned end to end "
                                   "on semeval2016-dev-search-questions", file="search_questions_defaults.json"),
    "search-questions-neutral": RankerSpec("fusion", "search-questions, where a thread without comments gets 0 from "
                                           "the parts that read what answered it (no evidence either way) instead of "
                                           "their score for no comments", file="search_questions_defaults.json",
                                           options={"missing": 0.0}),
    **{f"stage-{src}": RankerSpec("first-stage-score", f"a search candidate's {what} over the whole corpus "
                                  "(0 outside /search)", options={"source": src})
       for src, what in (("bm25", "BM25 score"), ("lm", "query-likelihood score"), ("dense", "MiniLM cosine"),
                         ("fused", "fused first-stage score"))},
    "answers-cosine-max": RankerSpec("answers-cosine", "a question candidate's best MiniLM cosine between the "
                                     "question and its thread's comments", options={"how": "max"}),
    "answers-cosine-top3": RankerSpec("answers-cosine", "the mean of a question candidate's three best "
                                      "question-comment MiniLM cosines", options={"how": "top3"}),
    **{f"answers-model-{how}": RankerSpec("answers-model", f"{what} subtask A bi-encoder cosine between the question "
                                          "and a question candidate's thread comments (at /search from the comment "
                                          "vectors the generation stores)", parts=("bi-encoder",), options={"how": how})
       for how, what in (("max", "a question candidate's best"), ("top3", "the mean of the three best"))},
    "bm25-arabic": RankerSpec("arabic-bm25", "BM25 of the question against each candidate with Arabic words "
                              "stemmed (Snowball's Arabic stemmer), its statistics from the forum's Arabic documents "
                              "in the live generation, or from the candidates given where the forum has fewer: what "
                              "POST /rerank and the head of POST /search rank Arabic input with ($CQA_ARABIC_RANKER, "
                              "chosen on dev-D)"),
    "bm25-arabic-candidates": RankerSpec("lexical", "BM25 with the Arabic analyzer, its statistics from the "
                                         "candidates given", options={"model": "bm25", "analyzer": "arabic"}),
    "lm-arabic": RankerSpec("lexical", "the Dirichlet query-likelihood LM with the Arabic analyzer, its statistics "
                            "from the candidates given", options={"model": "lm", "analyzer": "arabic"}),
    "comment-centrality": RankerSpec("comment-centrality", "a comment's mean subtask A bi-encoder cosine with the "
                                     "question's other candidates (what the rest of its thread says; no metadata "
                                     "needed)", parts=("bi-encoder",)),
    "closest-comment": RankerSpec("closest-comment", "a comment's highest subtask A bi-encoder cosine with another "
                                  "candidate of the question (its closest neighbour in the thread; no metadata "
                                  "needed)", parts=("bi-encoder",)),
    "closest-comment-margin": RankerSpec("closest-comment", "closest-comment minus the comment's bi-encoder cosine "
                                         "with the question: above 0, it is closer to another comment than to the "
                                         "question (a reply to the thread, not an answer; no metadata needed)",
                                         parts=("bi-encoder",), options={"margin": True}),
    "bi-encoder-in-context": RankerSpec("in-context", "the subtask A bi-encoder on a comment followed by its thread's "
                                        "question (subtask C candidates carry it), the comment alone otherwise "
                                        "(docs/BENCHMARKS.md, round 38, rule 19)", parts=("bi-encoder",)),
    # first-stage retrievers over a whole corpus (the full-corpus benchmarks)
    "first-stage": RankerSpec("retriever", "the tuned first stage of the service (ranking/retriever_defaults.json)",
                              file="retriever_defaults.json"),
    "first-stage-bm25": _retriever("BM25 over the corpus", ("bm25",)),
    "first-stage-lm": _retriever("query likelihood over the corpus", ("lm",)),
    "first-stage-dense": _retriever("FAISS MiniLM over the corpus", ("dense",)),
    "first-stage-bm25+rm3": _retriever("BM25 with RM3 expansion", ("bm25",), expansion="rm3"),
    "first-stage-lm+rm3": _retriever("query likelihood with RM3 expansion", ("lm",), expansion="rm3"),
    "first-stage-bm25+translation": _retriever("BM25 with translation expansion", ("bm25",), expansion="translation"),
    "first-stage-lm+translation": _retriever("query likelihood with translation expansion", ("lm",),
                                             expansion="translation"),
    "first-stage-rrf": _retriever("RRF of bm25, lm and dense", ("bm25", "lm", "dense")),
    "first-stage-combsum": _retriever("CombSUM of bm25, lm and dense", ("bm25", "lm", "dense"), "combsum"),
    "first-stage-combmnz": _retriever("CombMNZ of bm25, lm and dense", ("bm25", "lm", "dense"), "combmnz"),
    "first-stage-lexical": _retriever("RRF of bm25 and lm", ("bm25", "lm")),
}


def spec_of(name: str) -> RankerSpec:
    if name not in PRESETS:
        raise UnknownRanker(f"unknown ranker {name!r}; known: {', '.join(sorted(PRESETS))}")
    return PRESETS[name]


def register(name: str, spec: RankerSpec) -> None:
    """Add a preset (tests, plug-ins); its kind must be one the builder knows, or ``factory`` in options."""
    PRESETS[name] = spec


def retriever_config(name: str):
    """The RetrieverConfig of a "retriever" preset."""
    from .config import load_retriever_defaults
    from .retriever import RetrieverConfig
    spec = spec_of(name)
    if spec.kind != "retriever":
        raise UnknownRanker(f"{name!r} is a {spec.kind} ranker of given candidates, not a first-stage retriever; "
                            f"retrievers: {', '.join(n for n, s in PRESETS.items() if s.kind == 'retriever')}")
    if spec.file:
        return load_retriever_defaults(HERE / spec.file)
    o = spec.options
    return RetrieverConfig(tuple(o["sources"]), o["fusion"], expansion=o["expansion"])


# Why a model of a ranker cleared for bf16 runs torch-bf16 (GET /ready's note). One text for every such ranker, so a
# model two of them share is built once and keeps one memo. Their bi-encoders stay torch-fp32 (``VECTORS_NOTE``),
# built as the plain preset is, so every ranker that runs one shares it.
AUTO_BF16_NOTE = ("auto: torch-bf16 on this CPU's AVX512-BF16 instructions (no AMX), in the rankers cleared on dev against torch-fp32 "
                  "(" + ", ".join(n for n, s in PRESETS.items() if s.auto_bf16) + "), but for their bi-encoders")


def build(name: str, settings, inference: str | None = None, max_length: int | None = None,
          built: dict | None = None, chosen_by: str | None = None, part: bool = False):
    """The ranker of a preset, its parts built first (each once per ``built`` cache). ``inference`` (a
    variant of ranking/neural/inference.py, or an alias such as ``int8``) and ``max_length`` apply to every
    MiniLM ranker in it; the ranker's name then says so (``name[onnx-int8]``). Without ``inference`` the
    MiniLM rankers run ``settings.inference`` (``auto``: what the device runs best), except in a ranker cleared
    for bf16 (``RankerSpec.auto_bf16``) on a CPU with AVX512-BF16 and no AMX, whose MiniLM parts ``auto`` runs in
    torch-bf16; its name stays the preset's, and each such model's ``note`` (``GET /ready``) says why.
    ``chosen_by``: that note, for the parts of such a ranker; ``part``: built as a part of another ranker, which
    decided its variant."""
    built = {} if built is None else built
    spec = spec_of(name)
    if spec.kind == "retriever":
        raise UnknownRanker(f"{name!r} is a first-stage retriever; run it with a fullcorpus benchmark")
    if inference is not None:
        inference = _variant(inference, name)
    if not _has_minilm(name):  # nothing in it runs a MiniLM model: one instance (and one memo) whatever was asked
        inference = max_length = chosen_by = None
    elif inference is None and not part and spec.auto_bf16 and _auto_bf16(settings):
        inference, chosen_by = "torch-bf16", AUTO_BF16_NOTE
    if chosen_by == AUTO_BF16_NOTE and spec.kind == "minilm" and _bi_encoder(spec, settings):
        inference = chosen_by = None  # auto's bf16 is for pair scores: a bi-encoder's vectors stay the index's
    key = (name, inference, max_length, chosen_by)
    if key in built:
        return built[key]
    if spec.kind == "minilm":
        spec = replace(spec, inference=inference or spec.inference, max_length=max_length or spec.max_length)
    parts = [build(p, settings, inference, max_length, built, chosen_by, part=True) for p in spec.part_names()]
    shown = None if chosen_by and spec.kind != "minilm" else inference  # a chosen variant shows on its models
    label = name + "".join(f"[{v}]" for v in (shown, max_length and f"len{max_length}") if v)
    built[key] = ranker = BUILDERS[spec.kind](spec, settings, parts, label)
    if chosen_by and spec.kind == "minilm":
        ranker.note = ranker.note or chosen_by
    return ranker


def _bi_encoder(spec: RankerSpec, settings) -> bool:
    """Whether a MiniLM preset's checkpoint is a bi-encoder (False where there is none: its builder says so)."""
    path = Path(getattr(settings, spec.checkpoint)) / "config.json" if spec.checkpoint else None
    return path is not None and path.exists() and json.loads(path.read_text()).get("kind") == "bi-encoder"


def _auto_bf16(settings) -> bool:
    from indexing.encoder import resolve_device

    from .neural.inference import auto_bf16
    return auto_bf16(settings.inference, resolve_device(settings.device))


def _variant(text: str, label: str) -> str:
    from .neural.inference import Inference, InferenceError
    try:
        return Inference.parse(text).label
    except InferenceError as e:
        raise UnknownRanker(f"in {label!r}: {e}") from None


def parsed_label(label: str) -> tuple[str, str | None, int | None]:
    """A ranker's name split into its preset, inference variant and length (``build_label``); ``UnknownRanker``
    where the preset or a variant is unknown."""
    name, _, rest = label.partition("[")
    variants = [v.rstrip("]") for v in rest.split("[")] if rest else []
    length = next((int(v[3:]) for v in variants if v.startswith("len") and v[3:].isdigit()), None)
    others = [v for v in variants if not (v.startswith("len") and v[3:].isdigit())]
    if len(others) > 1:
        raise UnknownRanker(f"more than one inference variant in {label!r}")
    spec_of(name)
    return name, _variant(others[0], label) if others else None, length


def build_label(label: str, settings, built: dict | None = None):
    """A preset by the name its built ranker carries: ``cross-encoder+signals[int8]``, ``cross-encoder[len96]``,
    ``bi-encoder[onnx-int8][len128]``."""
    name, inference, length = parsed_label(label)
    return build(name, settings, inference, length, built)


def misnamed_rankers(settings) -> list[str]:
    """What is wrong with each ranker the settings name (``settings.RANKER_SETTINGS``), by its variable: checked
    without building anything, so `cqa serve` says it before it starts rather than a worker failing to load."""
    from .settings import RANKER_SETTINGS
    errors = []
    for field_name in RANKER_SETTINGS:
        if value := getattr(settings, field_name, None):
            try:
                parsed_label(value)
            except UnknownRanker as e:
                errors.append(f"CQA_{field_name.upper()}: {e}")
    return errors


def _has_minilm(name: str) -> bool:
    spec = PRESETS[name]
    return spec.kind == "minilm" or any(_has_minilm(p) for p in spec.part_names())


# --- one builder per kind: (spec, settings, built parts, name) -> ranker -------------------------------
def _ir_baseline(spec, settings, parts, name):
    from .rankers import IRBaseline
    return IRBaseline(name=name)


def _minilm_cosine(spec, settings, parts, name):
    from .rankers import MiniLMCosine
    return MiniLMCosine(device=settings.device, batch_size=settings.embedding_batch_size, name=name,
                        cache_dir=settings.cache_dir, subjects=bool(spec.options.get("subjects")))


def _lexical_ranker(spec, settings, parts, name):
    from .candidate_rankers import LexicalRanker
    if spec.options.get("analyzer") == "arabic":
        from .arabic import ARABIC
        return LexicalRanker(model=spec.options["model"], name=name, analyzer=ARABIC)
    return LexicalRanker(model=spec.options["model"], name=name)


def _translation(spec, settings, parts, name):
    from .candidate_rankers import TranslationLMRanker
    return TranslationLMRanker(semeval_dir=settings.semeval_dir, cache_dir=settings.cache_dir, name=name)


def _checkpoint_folder(spec, settings, name) -> Path:
    """The checkpoint folder a preset's setting names; where it holds none, the checkpoint reader's error with the
    preset and the setting that would name one."""
    from .neural.checkpoint import NoCheckpoint, require
    folder = Path(getattr(settings, spec.checkpoint))
    try:
        require(folder)
    except NoCheckpoint:
        raise NoCheckpoint(f"{name}: no checkpoint at {folder}; set CQA_{spec.checkpoint.upper()} to a checkpoint "
                           f"folder (`cqa train` writes one)") from None
    return folder


def _minilm(spec, settings, parts, name):
    from .neural.ranker import MiniLMRanker
    return MiniLMRanker.from_checkpoint(_checkpoint_folder(spec, settings, name), settings.device, name=name,
                                        inference=spec.inference or settings.inference, max_length=spec.max_length,
                                        cache_dir=settings.cache_dir / "scores", export_dir=settings.cache_dir)


def _bilstm(spec, settings, parts, name):
    from .neural.ranker import BiLSTMRanker
    return BiLSTMRanker.from_checkpoint(_checkpoint_folder(spec, settings, name), settings.device)


def _unordered(d: dict):
    """A parameters file's weights for candidates in no search order (its "unordered" section), or None."""
    return d.get("unordered", {}).get("weights")


def _fusion(spec, settings, parts, name):
    from .candidate_rankers import FusedRanker
    if spec.weights:
        return FusedRanker(parts, list(spec.weights), method=spec.method, name=name)
    d, names = spec.params(), spec.part_names()
    unordered = _unordered(d)
    return FusedRanker(parts, [d["weights"].get(n, 0.0) for n in names], method=spec.method, name=name,
                       unordered_weights=None if unordered is None else [unordered.get(n, 0.0) for n in names],
                       missing=spec.options.get("missing", d.get("missing")))


def _combination(spec, settings, parts, name):
    import numpy as np

    from .combination import LearnedCombination
    d = spec.params()
    signals = tuple(d["features"][len(d["parts"]):])
    regimes = {r: (np.asarray(w["coef"], dtype=float), float(w["intercept"])) for r, w in d.get("regimes", {}).items()}
    return LearnedCombination(parts, np.asarray(d["coef"], dtype=float), d["intercept"], name, d, signals, regimes)


def _related(spec, settings, parts, name):
    from .related import RelatedAnswersRanker
    d = spec.params()
    by = dict(zip((k for k in RELATED_PARTS if d.get(k)), parts))
    unordered = _unordered(d)
    return RelatedAnswersRanker(by["answer_ranker"], tuple(d["weights"]), name, d, by.get("thread_ranker"),
                                by.get("quality_ranker"), by.get("answer_model"),
                                None if unordered is None else tuple(unordered))


def _first_stage_score(spec, settings, parts, name):
    from .rankers import FirstStageScore
    return FirstStageScore(spec.options["source"], name=name)


def _answers_cosine(spec, settings, parts, name):
    from .rankers import AnswersCosine
    return AnswersCosine(spec.options["how"], settings.device, name=name, cache_dir=settings.cache_dir)


def _answers_model(spec, settings, parts, name):
    from .rankers import AnswersModel
    return AnswersModel(parts[0], spec.options["how"], name=name)


def _arabic_bm25(spec, settings, parts, name):
    from .arabic import ArabicBM25
    return ArabicBM25(name=name)


def _comment_centrality(spec, settings, parts, name):
    from .rankers import CommentCentrality
    return CommentCentrality(parts[0], name=name)


def _closest_comment(spec, settings, parts, name):
    from .rankers import ClosestComment
    return ClosestComment(parts[0], margin=spec.options.get("margin", False), name=name)


def _cascade(spec, settings, parts, name):
    from .cascade import Cascade
    return Cascade(parts, settings.cascade_top, name)


def _in_context(spec, settings, parts, name):
    from .rankers import InContext
    return InContext(parts[0], name=name)


def _by_comments(spec, settings, parts, name):
    from .candidate_rankers import ByComments
    return ByComments(list(parts), name, stored_only=spec.options.get("stored_only", False))


def _factory(spec, settings, parts, name):
    return spec.options["factory"](settings)


BUILDERS = {"ir-baseline": _ir_baseline, "minilm-cosine": _minilm_cosine, "lexical": _lexical_ranker,
            "translation-lm": _translation, "minilm": _minilm, "bilstm": _bilstm, "fusion": _fusion,
            "combination": _combination, "related": _related, "first-stage-score": _first_stage_score,
            "answers-cosine": _answers_cosine, "answers-model": _answers_model, "cascade": _cascade,
            "comment-centrality": _comment_centrality, "closest-comment": _closest_comment,
            "arabic-bm25": _arabic_bm25, "by-comments": _by_comments, "in-context": _in_context,
            "factory": _factory}
