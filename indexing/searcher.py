"""A loaded generation and its first-stage sources, each answering ``search(query, k) -> list[Hit]``."""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .bm25 import BM25Index
from .dense import DenseIndex
from .documents import Documents, answer_doc_id, documents_file, question_doc_id
from .encoder import EncoderError, EncoderSpec
from .generations import (
    ANSWER_VECTORS,
    FORMAT,
    FORMAT_VERSION,
    IndexFormatError,
    current_generation,
    read_manifest,
)
from .hits import Hit
from .lm import LMIndex
from .rowvectors import RowVectors
from .termmatrix import TermMatrix
from .text import Analyzer
from .translation import TranslationTable

log = logging.getLogger(__name__)


@dataclass
class LexicalSource:
    name: str
    index: BM25Index | LMIndex
    analyzer: Analyzer
    ids: list[str]

    def search(self, query: str, k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        return self.index.search_tokens(self.analyzer(query), k, self.ids, allowed)

    def search_tokens(self, tokens: list[str], k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        return self.index.search_tokens(tokens, k, self.ids, allowed)


@dataclass
class DenseSource:
    """The FAISS index, searched with the encoder that built it (``encoder``, from the manifest)."""
    index: DenseIndex
    ids: list[str]
    device: str = "auto"
    name: str = "dense"
    encoder: EncoderSpec = field(default_factory=EncoderSpec)
    _recent: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def embed(self, query: str) -> np.ndarray:
        """The query's embedding; the last few are kept (as many as requests in flight, not a result cache),
        so a search's later stages reuse the first stage's."""
        with self._lock:
            if query in self._recent:
                return self._recent[query]
        from .encoder import encode
        v = encode([query], device=self.device, spec=self.encoder)[0]
        with self._lock:
            self._recent[query] = v
            while len(self._recent) > 16:
                self._recent.pop(next(iter(self._recent)))
        return v

    def search(self, query: str, k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        return self.index.search_vectors(self.embed(query), k, self.ids, allowed)


class Generation:
    """Everything one index generation holds, loaded read-only (arrays memory-mapped). ``previous``, a generation
    loaded before (the one a service served until now), lends what both hold from the same file: its FAISS index,
    when a build grew it and linked its file (``DenseIndex.load``)."""

    def __init__(self, folder: Path, device: str = "auto", previous: "Generation | None" = None):
        self.folder = folder
        self.manifest = read_manifest(folder, FORMAT, FORMAT_VERSION)
        self.name = self.manifest["generation"]
        self.docs = Documents.load(documents_file(folder))
        self.row = {d: i for i, d in enumerate(self.docs.ids)}
        self.analyzer = Analyzer.from_dict(self.manifest["analyzer"])
        self.terms = TermMatrix.load(folder / "terms")
        self.bm25 = LexicalSource("bm25", BM25Index.load(folder / "bm25", self.terms), self.analyzer, self.docs.ids)
        self.lm = LexicalSource("lm", LMIndex.load(folder / "lm", self.terms), self.analyzer, self.docs.ids)
        self.dense = None
        if (folder / "dense").exists():
            try:
                encoder = EncoderSpec.from_manifest(self.manifest)
            except EncoderError as e:
                raise IndexFormatError(f"{folder}: {e}") from None
            live = previous.dense.index if previous is not None and previous.dense is not None else None
            self.dense = DenseSource(DenseIndex.load(folder / "dense", live), self.docs.ids, device, encoder=encoder)
        self.translation_qa = (TranslationTable.load(folder / "translation_qa")
                               if (folder / "translation_qa").exists() else None)
        self.answer_vectors, self.answer_encoder = self._answer_vectors(folder)

    def _answer_vectors(self, folder: Path) -> tuple[RowVectors | None, EncoderSpec | None]:
        """The answer encoder's stored comment vectors (memory-mapped, by document row) and that encoder;
        (None, None) when the generation has none or its checkpoint changed since (then they would not match
        the model's own vectors, and the answers reranker encodes the comments it scores instead)."""
        d = self.manifest.get("answer_encoder")
        if not d:
            return None, None
        try:
            spec = EncoderSpec.from_manifest({"encoder": d})
        except EncoderError as e:
            log.warning("%s: stored answer vectors not used: %s", folder.name, e)
            return None, None
        vectors = RowVectors.open(folder / ANSWER_VECTORS)
        return (vectors, spec) if vectors is not None else (None, None)

    def answer_vector(self, answer_id: str, text: str) -> np.ndarray | None:
        """The answer encoder's stored vector of comment ``answer_id``, when this generation indexes that comment
        with exactly ``text``; else None (not indexed, edited since, or no stored vectors)."""
        if self.answer_vectors is None:
            return None
        row = self.row.get(answer_doc_id(answer_id))
        if row is None or self.docs.texts[row] != text:
            return None
        return np.asarray(self.answer_vectors[row])

    def dense_vector(self, row: int) -> np.ndarray | None:
        """The embedding the dense index stores for a row (made by ``dense.encoder``), so a ranker that is that
        encoder need not encode the text again; None without a dense index or one that cannot give it back."""
        return None if self.dense is None else self.dense.index.vector(row)

    def question_vector(self, thread_id: str, text: str) -> np.ndarray | None:
        """The dense index's vector of thread ``thread_id``'s question, when this generation indexes it with exactly
        ``text`` (subject and body as ``Thread.question_text`` joins them); else None."""
        row = self.row.get(question_doc_id(thread_id))
        if row is None or self.docs.texts[row] != text:
            return None
        return self.dense_vector(row)

    @property
    def sources(self) -> dict[str, LexicalSource | DenseSource]:
        out = {"bm25": self.bm25, "lm": self.lm}
        if self.dense is not None:
            out["dense"] = self.dense
        return out

    def translation_status(self) -> dict | None:
        """Where the translation table (what ``expand: "translation"`` reads) stands, from the build's record: state
        ``trained`` (on this generation's question-answer pairs), ``kept`` (an earlier generation's, while at most
        ``translation_retrain_changed`` of the pairs changed since it was trained) or ``training`` (an earlier
        one's, a new one being trained: ``reindex``'s ``translation_later``); the generation's pairs, those the
        table was trained on, and how many changed between them. None without a table."""
        record = self.manifest.get("build", {}).get("translation")
        if self.translation_qa is None or record is None:
            return None
        state = ("training" if record.get("trains_after_publish") else "kept" if "carried_from" in record
                 else "trained")
        return {"state": state, "pairs": record.get("pairs"),
                "trained_on_pairs": self.translation_qa.params.get("pairs"),
                "changed_pairs": record.get("changed_pairs", 0) if state != "training" else None}

    def sizes(self) -> dict[str, int]:
        return {"documents": len(self.docs), "terms": len(self.terms.vocab),
                "dense": self.dense.index.n_docs if self.dense else 0,
                "answer_vectors": self.docs.counts()["answers"] if self.answer_vectors is not None else 0}


def load_current(root: Path, device: str = "auto", previous: Generation | None = None) -> Generation:
    """The live generation; ``previous``, the one served until now, lends it what they share (``Generation``)."""
    name = current_generation(root)
    if name is None:
        raise IndexFormatError(f"no live index generation under {root}; run `cqa reindex`")
    return Generation(root / name, device, previous)


def stored_answer_encoder(manifest: dict) -> str | None:
    """The id of the answer encoder whose comment vectors a generation stores (None: it stores none)."""
    return (manifest.get("answer_encoder") or {}).get("id")


def manifest_of(root: Path) -> dict | None:
    name = current_generation(root)
    return json.loads((root / name / "manifest.json").read_text()) if name else None
