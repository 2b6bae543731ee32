"""All settings of the service in one place (pydantic-settings).

Every path, port, model name and limit has a default and an environment variable
(``CQA_`` + the field name in upper case); the README lists them.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_shared_data() -> Path:
    return PROJECT_ROOT.parent / "shared" / "data"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CQA_", extra="ignore")

    data_dir: Path = Field(Path("./var"), description="Store, index generations, caches, reports.")
    shared_data_dir: Path = Field(default_factory=_default_shared_data,
                                  description="The SemEval data folder (../shared/data).")
    demo_corpus: Path = Field(PROJECT_ROOT / "data" / "demo" / "threads.jsonl",
                              description="Corpus used when the SemEval data is absent.")
    bilstm_checkpoint: Path = Field(PROJECT_ROOT / "models" / "bilstm",
                                    description="BiLSTM ranker checkpoint directory (shipped; `cqa train` rebuilds it).")
    default_ranker: str = Field("cross-encoder+signals", description="Ranker of subtask A benchmarks, "
                                "`cqa predict` and the service when none is named.")
    default_ranker_b: str = Field("fusion", description="Default ranker of subtask B (question similarity).")
    default_ranker_c: str = Field("related-answers", description="Default ranker of subtask C.")
    search_ranker_answers: str = Field("search-answers", description="Reranker of POST /search, target answers.")
    search_ranker_questions: str = Field("search-questions",
                                         description="Reranker of POST /search, target questions.")
    cross_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "cross-encoder",
                                           description="MiniLM cross-encoder checkpoint directory (shipped; "
                                           "`cqa train --model cross-encoder` rebuilds it).")
    bi_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "bi-encoder",
                                        description="MiniLM bi-encoder checkpoint directory (shipped; "
                                        "`cqa train --model bi-encoder` rebuilds it).")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_token: str | None = Field(None, description="Bearer token for admin endpoints; unset = disabled.")
    embedding_batch_size: int = Field(64, ge=1, le=4096)
    device: str = Field("auto", pattern="^(auto|cpu|cuda)$")
    keep_generations: int = Field(3, ge=1, le=100, description="Index generations kept after a reindex.")
    dense_exact_max_docs: int = Field(200_000, ge=0,
                                      description="Up to this many docs the FAISS index is exact (flat IP).")
    dense_index_kind: str = Field("auto", pattern="^(auto|flat|hnsw|ivf)$")
    bm25_k1: float = Field(1.2, gt=0)
    bm25_b: float = Field(0.75, ge=0, le=1)
    lm_smoothing: str = Field("dirichlet", pattern="^(dirichlet|jelinek-mercer)$",
                              description="Smoothing of the query-likelihood LM built by reindex.")
    lm_mu: float = Field(2000.0, gt=0, description="Dirichlet prior (lm_smoothing=dirichlet).")
    lm_lambda: float = Field(0.7, gt=0, lt=1, description="Collection weight (lm_smoothing=jelinek-mercer).")
    max_request_bytes: int = Field(1_000_000, ge=1024, description="Larger request bodies get 413.")
    max_text_chars: int = Field(20_000, ge=100, description="Longest question, answer or candidate text.")
    max_candidates: int = Field(200, ge=1, description="Most candidates one /rerank request may send.")
    max_threads_per_request: int = Field(1000, ge=1, description="Most threads one POST /threads may send.")
    rerank_depth: int = Field(30, ge=1, le=100, description="First-stage results /search reranks.")
    search_thread_depth: int = Field(10, ge=0, le=50, description="/search answers: the most similar threads "
                                     "whose comments join the reranked candidates (0: none).")
    batch_max: int = Field(16, ge=1, le=256, description="Most rerank requests scored in one model call.")
    batch_wait_ms: float = Field(5.0, ge=0, le=1000, description="How long a rerank batch waits to fill.")

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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
