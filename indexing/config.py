"""The settings of the indexing room (pydantic-settings). Each room declares the settings it reads:
``IndexSettings`` here, ``ranking.settings.RankingSettings`` on top of it, and the service's
``app.settings.Settings`` on top of that, one object in the end. Every path, port, model name and limit has
a default and an environment variable (``CQA_`` + the field name in upper case); the README lists them.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_shared_data() -> Path:
    return PROJECT_ROOT.parent / "shared" / "data"


class IndexSettings(BaseSettings):
    """What building and reading indexes needs: folders, the encoder, index parameters."""

    model_config = SettingsConfigDict(env_prefix="CQA_", extra="ignore")

    data_dir: Path = Field(Path("./var"), description="Store, index generations, caches, reports.")
    shared_data_dir: Path = Field(default_factory=_default_shared_data,
                                  description="The SemEval data folder (../shared/data).")
    demo_corpus: Path = Field(PROJECT_ROOT / "data" / "demo" / "threads.jsonl",
                              description="Corpus used when the SemEval data is absent.")
    dense_encoder: str = Field("models/question-bi-encoder", description="What encodes texts for the dense (FAISS) "
                               "index and the question at /search: a fine-tuned MiniLM bi-encoder checkpoint folder "
                               "(relative to the project; default the subtask B question-question model, chosen on "
                               "dev, docs/BENCHMARKS.md) or base (the packaged all-MiniLM-L6-v2). Each generation "
                               "records it with its digest; queries and the /search cosines use the same one.")
    answer_encoder: str = Field("models/bi-encoder", description="A second bi-encoder whose vectors of every comment "
                                "reindex stores in the generation, so /search can rerank answers with it without "
                                "encoding them per request: default the subtask A question-comment model; none: "
                                "store none (the answers reranker then encodes the comments it scores).")
    embedding_batch_size: int = Field(64, ge=1, le=4096)
    device: str = Field("auto", pattern="^(auto|cpu|cuda)$")
    keep_generations: int = Field(3, ge=1, le=100, description="Index generations kept after a reindex.")
    erase_meta_keys: list[str] = Field(["username"], description="The keys of a question's or comment's `meta` that "
                                       "an erasure which keeps an author's posts (anonymize) removes with their "
                                       "author id: where a loader or a forum kept a user's name (the SemEval loader "
                                       "keeps `username`). JSON, e.g. '[\"username\", \"display_name\"]'.")
    dense_exact_max_docs: int = Field(200_000, ge=0,
                                      description="Up to this many docs the FAISS index is exact (flat IP).")
    dense_index_kind: str = Field("auto", pattern="^(auto|flat|hnsw|ivf)$")
    dense_grow: bool = Field(True, description="A rebuild grows the live generation's HNSW or IVF index (keeps the new "
                             "documents' vectors beside it, marks the gone ones removed) instead of building it again: "
                             "a second instead of half a minute at 235k documents; false, or `cqa reindex --full`, "
                             "builds anew.")
    dense_grow_max_removed: float = Field(0.1, ge=0, le=0.5, description="Growing stops, and the build builds the "
                                          "index anew, when more than this fraction of its rows would be marked "
                                          "removed (each costs search time); likewise the stored comment vectors "
                                          "are written anew past this fraction of dead rows in their linked file.")
    dense_grow_fold_docs: int = Field(10_000, ge=0, description="A grown index keeps the vectors added since its FAISS "
                                      "file was written beside it (searched exactly, so a build writes only them and "
                                      "links the file); past this many it adds them to the FAISS index and writes it "
                                      "anew. The stored comment vectors keep their new rows beside the linked live "
                                      "file up to the same count.")
    translation_retrain_changed: float = Field(0.02, ge=0, le=1, description="A build trains the translation table "
                                               "(IBM Model 1, read by `expand: translation` alone) again only when "
                                               "more than this share of the store's question-answer pairs changed "
                                               "since the live table was trained (a new, edited or removed comment: "
                                               "each pair gone or new counts); below it the build keeps the live "
                                               "table, trained on the rest. 0: train whenever a pair changed; "
                                               "`cqa reindex --full` always trains.")
    bm25_k1: float = Field(1.2, gt=0)
    bm25_b: float = Field(0.75, ge=0, le=1)
    lm_smoothing: str = Field("dirichlet", pattern="^(dirichlet|jelinek-mercer)$",
                              description="Smoothing of the query-likelihood LM built by reindex.")
    lm_mu: float = Field(2000.0, gt=0, description="Dirichlet prior (lm_smoothing=dirichlet).")
    lm_lambda: float = Field(0.7, gt=0, lt=1, description="Collection weight (lm_smoothing=jelinek-mercer).")

    @field_validator("dense_encoder")
    @classmethod
    def _known_encoder(cls, v: str) -> str:
        return _checked_encoder(v)

    @field_validator("answer_encoder")
    @classmethod
    def _known_answer_encoder(cls, v: str) -> str:
        if v.strip().lower() == "none":
            return "none"
        from .encoder import BASE, MODEL_NAME
        if v in (BASE, MODEL_NAME):
            raise ValueError("answer encoder: name a fine-tuned bi-encoder checkpoint folder (the packaged model's "
                             "vectors are the dense index's already) or none")
        return _checked_encoder(v)

    @property
    def answer_spec(self):
        """The answer encoder (indexing.encoder.EncoderSpec) whose comment vectors a generation stores, or None."""
        from .encoder import encoder_spec
        return None if self.answer_encoder == "none" else encoder_spec(self.answer_encoder)

    @property
    def answer_encoder_id(self) -> str | None:
        """The id of the answer encoder's vectors a generation built now stores (None: none)."""
        spec = self.answer_spec
        return spec.id if spec is not None else None

    @property
    def encoder(self):
        """The dense index's encoder (indexing.encoder.EncoderSpec) this setting names."""
        from .encoder import encoder_spec
        return encoder_spec(self.dense_encoder)

    @property
    def store_path(self) -> Path:
        return self.data_dir / "threads.sqlite3"

    @property
    def index_root(self) -> Path:
        return self.data_dir / "indexes"

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def semeval_dir(self) -> Path:
        return self.shared_data_dir / "semeval2016"


def _checked_encoder(v: str) -> str:
    """The setting as given, or a ValueError that says why no encoder goes by that name."""
    from .encoder import EncoderError, encoder_spec
    try:
        encoder_spec(v)
    except EncoderError as e:
        raise ValueError(str(e)) from None
    return v
