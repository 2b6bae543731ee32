"""The BiLSTM as a ranker: cos(o_q, o_a) for each candidate, with per-token attention kept."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from indexing.encoder import bi_encoder_id, checkpoint_digest

from ..candidates import Query, stored, stored_vector
from .bilstm import BiLSTMAttention, pad
from .inference import EXPORT_VERSION, VECTORS_NOTE, Inference, auto_bf16, onnx_runner, resolve
from .memo import ScoreMemo, ScoreStore, VectorStore, memo_vectors
from .vocab import encode_texts, id_to_token

if TYPE_CHECKING:
    from .minilm import MiniLMRankerModel


@dataclass
class BiLSTMRanker:
    model: BiLSTMAttention
    device: str = "cpu"
    batch_size: int = 256
    name: str = "bilstm"
    memo: ScoreMemo | None = None  # serving: recent pairs' scores (ranking.rankers.for_serving sets it)
    cache_key: str | None = None  # what its scores depend on: weights, config, scoring code, device

    @classmethod
    def from_checkpoint(cls, folder: Path, device: str = "auto") -> "BiLSTMRanker":
        import hashlib

        from indexing.encoder import resolve_device

        from .checkpoint import load
        dev = resolve_device(device)
        model, _ = load(folder, dev)
        key = hashlib.sha256(f"bilstm|{checkpoint_digest(Path(folder))}|code{BILSTM_SCORING_CODE_VERSION}|{dev}".encode())
        return cls(model, dev, cache_key=key.hexdigest()[:24])

    @torch.no_grad()
    def _run(self, queries: list[Query], with_attention: bool):
        self.model.eval()
        cfg = self.model.config
        q_ids = encode_texts([q.text for q in queries], cfg.max_question_len)
        pairs = [qi for qi, q in enumerate(queries) for _ in q.candidates]
        a_ids = encode_texts([c.text for q in queries for c in q.candidates], cfg.max_answer_len) if pairs else []
        scores: list[float] = []
        attention: list[list[tuple[str, float]]] = []
        for s in range(0, len(pairs), self.batch_size):
            chunk = range(s, min(s + self.batch_size, len(pairs)))
            qb, ql = pad([q_ids[pairs[i]] for i in chunk], self.device)
            ab, al = pad([a_ids[i] for i in chunk], self.device)
            cos, att = self.model(qb, ql, ab, al)
            scores += cos.float().cpu().tolist()
            if with_attention:
                att = att.float().cpu()
                for j, i in enumerate(chunk):
                    toks = id_to_token(a_ids[i])
                    attention.append(list(zip(toks, att[j, : len(toks)].tolist())))
        return _split(scores, queries), _split(attention, queries) if with_attention else None

    def score_with_attention(self, queries: list[Query]) -> tuple[list[list[float]], list[list[list[tuple[str, float]]]]]:
        """Scores, and each candidate's (token, attention weight) pairs."""
        return self._run(queries, with_attention=True)

    def score(self, queries: list[Query]) -> list[list[float]]:
        if self.memo is None:
            return self._run(queries, with_attention=False)[0]
        pairs = [(q.text, c.text) for q in queries for c in q.candidates]
        return _split(self.memo.scores(pairs, self._score_pairs), queries)

    def _score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        """One score per (question, answer) text pair (the LSTM runs packed: a pair's score is the same in any
        batch)."""
        from ..candidates import Candidate
        by_question: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_question.setdefault(q, []).append(i)  # each question tokenised once
        queries = [Query(str(k), q, tuple(Candidate(str(i), pairs[i][1]) for i in idx))
                   for k, (q, idx) in enumerate(by_question.items())]
        out = [0.0] * len(pairs)
        for idx, scores in zip(by_question.values(), self._run(queries, with_attention=False)[0]):
            for i, v in zip(idx, scores):
                out[i] = v
        return out


def _split(flat: list, queries: list[Query]) -> list[list]:
    out, at = [], 0
    for q in queries:
        out.append(flat[at: at + len(q.candidates)])
        at += len(q.candidates)
    return out


@dataclass
class MiniLMRanker:
    """A fine-tuned MiniLM (ranking/neural/minilm.py) as a ranker. Pairs are scored in batches sorted by
    length, so padding stays small; in torch-bf16 on a CPU each input is padded to a multiple of 32 tokens
    (``pad_multiple``), so its score does not depend on what it is batched with. ``inference`` says how it runs
    (ranking/neural/inference.py: torch or an ONNX Runtime export, fp32, bf16 or int8); ``model`` is then the
    torch module or the ONNX session, both called the same way. With a ``cache_dir`` (evaluation runs), scores are
    kept in a score store keyed by the checkpoint's weights, the settings and the pair's texts (``cached_scores``),
    so a benchmark re-run only scores pairs it has not seen. A serving ranker has a ``memo`` instead (ranking/neural/memo.py): the pairs it
    scored lately, in memory and in the data folder's shared score store, so a thread sorted again costs the
    model only its new comments; a serving bi-encoder also has a ``vector_memo``: the vectors of the texts it encoded
    lately, so a text met again with another question (a thread's comments, a candidate question) is not encoded
    again."""
    model: "MiniLMRankerModel"
    device: str = "cpu"
    batch_size: int = 32
    name: str = "cross-encoder"
    cache_key: str | None = None
    cache_dir: Path | None = None
    inference: Inference = field(default_factory=Inference)
    note: str = ""  # why the variant run differs from the one asked for, if it does
    vector_id: str | None = None  # a bi-encoder: the id of its vectors (indexing.encoder.EncoderSpec.id)
    memo: ScoreMemo | None = None  # serving: recent pairs' scores (ranking.rankers.for_serving sets it)
    # serving, a bi-encoder: recent texts' vectors (questions and candidates), keyed by (text, vector_id)
    vector_memo: ScoreMemo | None = None
    # 0: each batch is padded to its longest input; N: each input to the next multiple of N (``pad_multiple``)
    pad_multiple: int = 0

    @classmethod
    def from_checkpoint(cls, folder: Path, device: str = "auto", name: str | None = None, inference: str = "auto",
                        max_length: int | None = None, cache_dir: Path | None = None,
                        export_dir: Path | None = None) -> "MiniLMRanker":
        """``inference``: ``auto`` or a variant (``torch-fp32``, ``torch-bf16``, ``onnx-fp32``, ``onnx-int8``);
        ONNX exports are written once under ``export_dir`` (default: the system's temporary folder)."""
        import tempfile

        from indexing.encoder import resolve_device

        dev = resolve_device(device)
        model, config = shared_model(Path(folder), dev, max_length)
        bi = config["kind"] == "bi-encoder"
        resolved = resolve(inference, dev, vectors=bi)
        runner = model
        if resolved.inference.backend == "onnx":
            export_dir = export_dir or Path(tempfile.gettempdir()) / "cqa"
            runner = onnx_runner(model, checkpoint_digest(Path(folder)), resolved.inference, export_dir)
        key = score_cache_key(Path(folder), dev, model.config.max_length, resolved.inference)
        vector_id = (vectors_id(checkpoint_digest(Path(folder)), model.config.max_length, resolved.inference)
                     if bi else None)
        # under auto, a bi-encoder says why it runs fp32 where auto runs other models in bf16 (CUDA, a bf16 CPU)
        vectors_note = bi and inference == "auto" and (dev == "cuda" or auto_bf16(inference, dev))
        note = resolved.note or (VECTORS_NOTE if vectors_note else "")
        return cls(runner, dev, batch_size=CPU_BATCH if dev == "cpu" else 32, name=name or config["kind"],
                   cache_key=key, cache_dir=cache_dir, inference=resolved.inference, note=note,
                   vector_id=vector_id, pad_multiple=pad_multiple(resolved.inference, dev))

    def score(self, queries: list[Query]) -> list[list[float]]:
        """A bi-encoder reuses the vectors a query and its candidates carry when they are its own (a dense
        index built with this checkpoint, ``$CQA_DENSE_ENCODER``, or the comment vectors a generation stores for
        ``$CQA_ANSWER_ENCODER``); when every candidate has its vector, only the question is encoded here (the
        questions of a batch together), and otherwise everything is."""
        given = self._given(queries)
        todo = [q for q, g in zip(queries, given) if g is None]
        fresh = iter(self._score_texts(todo) if todo else [])
        return [g if g is not None else next(fresh) for g in given]

    def _given(self, queries: list[Query]) -> list[list[float] | None]:
        """Per query, its scores from stored candidate vectors, or None when a candidate lacks its own."""
        if self.vector_id is None:
            return [None] * len(queries)
        usable: dict[int, tuple[list, object]] = {}  # query index -> (its candidates' vectors, its own or None)
        for i, q in enumerate(queries):
            cv = [stored_vector(c.meta, self.vector_id) for c in q.candidates]
            if cv and all(v is not None for v in cv):
                usable[i] = (cv, stored(q.meta, "vector", self.vector_id))
        missing = list(dict.fromkeys(queries[i].text for i, (_, qv) in usable.items() if qv is None))
        encoded = dict(zip(missing, self.vectors_of(missing)))
        out: list[list[float] | None] = []
        for i, q in enumerate(queries):
            if not q.candidates:
                out.append([])
            elif i not in usable:
                out.append(None)
            else:
                cv, qv = usable[i]
                qv = np.asarray(qv if qv is not None else encoded[q.text], dtype=np.float32)
                out.append((np.stack(cv).astype(np.float32) @ qv).astype(float).tolist())
        return out

    def vectors_of(self, texts: list[str]) -> list:
        """A bi-encoder's vectors of distinct texts, in one model call for those a serving ``vector_memo`` lacks. An
        evaluation run (a ``cache_dir``, no memo) keeps them in a vector store beside its pair scores
        (``cached_vectors``), so its other parts over the same model (closest-comment, comment-centrality) and the
        next run on the same texts (a benchmark's metadata-free variant) read them instead of encoding them again."""
        if not texts:
            return []
        if self.vector_memo is None and self.cache_dir and self.cache_key:
            return cached_vectors(self.cache_dir / f"text-vectors-{self.cache_key}.sqlite3",
                                  bi_encoder_identity(self.cache_key), texts, self.vector_id or "", self.text_vectors)
        return memo_vectors(self.vector_memo, texts, self.vector_id or "", self.text_vectors)

    @torch.no_grad()
    def text_vectors(self, texts: list[str]) -> np.ndarray:
        """A bi-encoder's vector of each text, as its scores use them (and as the index's encoder makes them)."""
        from .minilm import word_pieces
        self.model.eval()
        with self._autocast():
            return self._vectors(word_pieces(texts)).numpy()

    def _autocast(self):
        bf16 = self.inference.backend == "torch" and self.inference.precision == "bf16"
        return torch.autocast(device_type=self.device, dtype=torch.bfloat16, enabled=bf16)

    def _score_texts(self, queries: list[Query]) -> list[list[float]]:
        pairs = [(q.text, c.text) for q in queries for c in q.candidates]
        if not (self.cache_dir and self.cache_key):
            scores = self.score_pairs(pairs) if self.memo is None else self.memo.scores(pairs, self.score_pairs)
            return _split(scores, queries)
        path = self.cache_dir / f"pair-scores-{self.cache_key}.sqlite3"
        return _split(cached_scores(path, self.cache_key, pairs, self.score_pairs), queries)

    @torch.no_grad()
    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        """One score per (question, answer) text pair."""
        from .minilm import word_pieces
        if not pairs:
            return []
        if self.model.config.kind == "bi-encoder":  # each distinct text encoded once (or read from the vector memo)
            texts = list(dict.fromkeys(t for pair in pairs for t in pair))
            vecs = dict(zip(texts, self.vectors_of(texts)))
            return [float(np.dot(vecs[q], vecs[a])) for q, a in pairs]
        self.model.eval()
        q_texts = list(dict.fromkeys(q for q, _ in pairs))
        q_index = {t: i for i, t in enumerate(q_texts)}
        q_wp = word_pieces(q_texts)
        a_wp = word_pieces([a for _, a in pairs])
        owner = [q_index[q] for q, _ in pairs]
        with self._autocast():
            return self._cross(q_wp, a_wp, owner)

    def _cross(self, q_wp, a_wp, owner) -> list[float]:
        from .minilm import collate, pair_ids
        pairs = [pair_ids(q_wp[owner[i]], a, self.model.config) for i, a in enumerate(a_wp)]
        return self._batched([p[0] for p in pairs], lambda idx, width: self.model.pair_score(
            *collate([pairs[i][0] for i in idx], self.device, [pairs[i][1] for i in idx], width=width)))

    def _vectors(self, wps: list[list[int]]) -> torch.Tensor:
        """A bi-encoder's vector of each text given as word pieces, in batches of similar length."""
        from .minilm import collate, single_ids
        seqs = [single_ids(t, self.model.config) for t in wps]
        return torch.stack(self._batched(seqs, lambda idx, width: self.model.text_vector(
            *collate([seqs[i] for i in idx], self.device, width=width)[:2]), stack=True))

    def _batched(self, seqs: list[list[int]], run, stack: bool = False) -> list:
        """``run(idx, width)`` over batches of at most ``batch_size`` inputs sorted by length. Without
        ``pad_multiple`` a batch is padded to its longest input; with it, each batch holds inputs of one padded
        width (``padded_width``), so an input's score does not depend on what else is scored beside it."""
        width = [padded_width(len(s), self.pad_multiple) for s in seqs]
        order = sorted(range(len(seqs)), key=lambda i: (width[i], len(seqs[i])))
        out: list = [None] * len(seqs)
        for idx in _batches(order, width, self.batch_size):
            res = run(idx, width[idx[0]] or None).float().cpu()
            for j, i in enumerate(idx):
                out[i] = res[j] if stack else float(res[j])
        return out


def padded_width(length: int, multiple: int) -> int:
    """The width an input of ``length`` tokens is padded to: the next multiple of ``multiple`` (0 when unset)."""
    return -(-length // multiple) * multiple if multiple else 0


def _batches(order: list[int], width: list[int], size: int) -> list[list[int]]:
    """``order`` cut into runs of at most ``size`` with one ``width`` each."""
    out: list[list[int]] = []
    for i in order:
        if not out or len(out[-1]) == size or width[out[-1][0]] != width[i]:
            out.append([])
        out[-1].append(i)
    return out


# bf16 inputs are padded to a multiple of 32 tokens. A bf16 score moves with the width its input is padded to (the
# attention's sums run over the padded width and round differently), not with the other inputs of its batch
# (bench/bf16_padding.py, ``cause``). Padded to the longest of its batch, a dev-A pair's cross-encoder score differed
# by up to 0.031 between scored alone and scored with its thread; padded to a multiple of 32, by 0.0, and no slower
# (60 dev-A threads, docs/BENCHMARKS.md, "Round 23"). A thread's order then no longer depends on the requests the
# micro-batcher scores beside it, and a served thread scores as the same thread in process. fp32 moves by about 1e-6
# either way and keeps batch padding, so its scores and figures stay as they were.
BF16_PAD_MULTIPLE = 32


def pad_multiple(inference: Inference, device: str) -> int:
    """How a variant pads its inputs on ``device``: ``BF16_PAD_MULTIPLE`` for torch-bf16 on a CPU, where it was
    measured; 0 (each batch to its longest input) otherwise."""
    return BF16_PAD_MULTIPLE if inference.label == "torch-bf16" and device == "cpu" else 0


_LOADED: "weakref.WeakValueDictionary[tuple, torch.nn.Module]" = weakref.WeakValueDictionary()
_LOADING = threading.Lock()


def shared_model(folder: Path, device: str, max_length: int | None = None) -> tuple["MiniLMRankerModel", dict]:
    """A MiniLM checkpoint's torch module and config, loaded once per process while a ranker holds it: rankers that
    run the same weights in other variants (a ranker ``auto`` runs in bf16 beside one in fp32, ranking/presets.py)
    share one copy (22.6M parameters, 90 MB in fp32). Keyed by the weights' digest, so a retrained checkpoint loads
    anew."""
    from .checkpoint import require
    from .minilm import load
    require(folder)  # a clear error before the digest reads the weights' file
    key = (str(folder.resolve()), checkpoint_digest(folder), device, max_length)
    with _LOADING:
        model = _LOADED.get(key)
        if model is None:
            model, config = load(folder, device)
            model.checkpoint_config = config  # kept as long as the module is
            if max_length:
                model.config.max_length = max_length
            _LOADED[key] = model
        return model, model.checkpoint_config


# Inputs per model call on a CPU. Batches hold texts of similar length (sorted), and smaller ones pad less:
# at 30 candidates, p50 311 against 629 ms (bi-encoder) and 472 against 533 ms (cross-encoder) in batches
# of 8 against 32 (docs/BENCHMARKS.md, "Inference variants"; bench/rerank_speed.py --batch-sizes 32).
CPU_BATCH = 8

# Bump when the code that turns a BiLSTM's (question, answer) pair into a score changes (tokens, lengths):
# the scores the shared store (ranking/neural/memo.py) keeps for the old code are then never read.
BILSTM_SCORING_CODE_VERSION = 1

# Bump when the code that turns a (question, answer) pair into a score changes (word pieces, pair layout,
# pooling, the head): cached scores of the old code are then never read.
SCORING_CODE_VERSION = 2


def score_cache_key(folder: Path, device: str, max_length: int, inference: Inference) -> str:
    """What a model's scores depend on: the weights, the checkpoint's config, the scoring code, the device
    (CUDA runs torch in bf16, and a bi-encoder under ``auto`` in fp32), the inference variant (backend, precision,
    export, padding) and the input length. It keys the model's scores in the evaluation cache and in the serving score
    store. torch-fp32 and CUDA's bf16 keep the key they had before there were variants."""
    import hashlib

    from indexing.loaders import file_digest
    if device == "cuda":  # CUDA runs torch; its bf16 keeps the key it had, its fp32 (a bi-encoder's) has its own
        variant = "fp32" if inference.label == "torch-bf16" else f"cuda-{inference.label}"
    else:
        variant = "fp32" if inference.label == "torch-fp32" else inference.label
    if inference.backend == "onnx":
        variant += f"-export{EXPORT_VERSION}"
    padding = pad_multiple(inference, device)
    if padding:
        variant += f"-pad{padding}"
    parts = [file_digest(folder / "model.safetensors"), file_digest(folder / "config.json"),
             f"code{SCORING_CODE_VERSION}", device, variant, f"len{max_length}"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def vectors_id(digest: str, max_length: int, inference: Inference) -> str:
    """The id of the vectors a bi-encoder of weights ``digest`` makes in variant ``inference``: in fp32 (torch or ONNX,
    equal to float precision) the index's own id (``indexing.encoder.bi_encoder_id``), so the ranker reads the vectors
    a reindex stored with that encoder; in bf16 or int8 that id and the variant, which no stored vector carries, so
    the ranker encodes every text itself and never ranks its own vectors beside the index's fp32 ones."""
    same = bi_encoder_id(digest, max_length)
    return same if inference.precision == "fp32" else f"{same}~{inference.label}"


# Evaluation runs keep every pair score they compute (the store's bound never bites)
EVALUATION_PAIRS = 10**12


def bi_encoder_identity(cache_key: str) -> str:
    """What keys a MiniLM bi-encoder's text vectors in a vector store, serving (``ranking.rankers.vector_identity``)
    or evaluating (``cached_vectors``): its scores' key, which names its weights, scoring code, device and variant."""
    return f"bi-encoder:{cache_key}"


def cached_vectors(path: Path, model: str, texts: list[str], encoder: str, encode) -> list:
    """The vectors of distinct ``texts`` kept in the vector store at ``path`` (keyed by ``model``, the bi-encoder's
    identity, as a serving ``vector_memo`` keys them); ``encode`` sees only the texts no earlier call encoded, in one
    call. Written before it returns, as ``cached_scores``."""
    memo = ScoreMemo(max(1, len(texts)), model=model, store=VectorStore.at(path, EVALUATION_PAIRS))
    vectors = memo_vectors(memo, texts, encoder, encode)
    memo.store.flush()
    return vectors


def cached_scores(path: Path, model: str, pairs: list[tuple[str, str]], compute) -> list[float]:
    """Scores of (question, answer) pairs kept in the score store at ``path`` under ``model``'s key; ``compute``
    sees only the pairs no earlier run scored, each once. Written before it returns, so the next run reads them."""
    memo = ScoreMemo(max(1, len(pairs)), model=model, store=ScoreStore.at(path, EVALUATION_PAIRS))
    scores = memo.scores(pairs, compute)
    memo.store.flush()
    return scores
