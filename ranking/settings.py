"""The settings the ranking room reads: checkpoints, the ranker of each task and target, reranking depths."""
from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from indexing.config import PROJECT_ROOT, IndexSettings

MAX_RESULTS = 100  # the most results one search returns (POST /search k, cqa search -k, the search page)
# the settings that name a ranker (a preset, with variants: ``cross-encoder+signals[int8]``), which `cqa serve` checks
# before it starts (``presets.misnamed_rankers``); empty or unset: none
RANKER_SETTINGS = ("default_ranker", "default_ranker_b", "default_ranker_c", "arabic_ranker", "search_ranker_answers",
                   "search_ranker_questions", "interleave_answers", "interleave_questions", "interleave_comments")


class RankingSettings(IndexSettings):
    bilstm_checkpoint: Path = Field(PROJECT_ROOT / "models" / "bilstm",
                                    description="BiLSTM ranker checkpoint directory (shipped; `cqa train` rebuilds it).")
    default_ranker: str = Field("cascade", description="Ranker of subtask A benchmarks, "
                                "`cqa predict` and the service when none is named.")
    default_ranker_b: str = Field("question-answers-fusion-indexed", description="Default ranker of subtask B "
                                  "(question similarity): question-fusion+answers where the candidates' comments come "
                                  "with their stored vectors (threads the live generation indexes with those "
                                  "comments), question-fusion otherwise (docs/BENCHMARKS.md, round 37, rule 14).")
    default_ranker_c: str = Field("related-answers", description="Default ranker of subtask C.")
    arabic_ranker: str = Field("bm25-arabic", description="The ranker of Arabic input (most letters in Arabic "
                               "script), which the English models rank worse (dev-D): POST /rerank's, and the reranker "
                               "of a POST /search whose question is Arabic, whose first stage then also leaves the "
                               "dense index out; empty: Arabic is ranked and searched as any text.")
    search_ranker_answers: str = Field("search-answers", description="Reranker of POST /search, target answers.")
    search_ranker_questions: str = Field("search-questions",
                                         description="Reranker of POST /search, target questions.")
    interleave_answers: str | None = Field(None, description="A challenger to the reranker of POST /search, target "
                                           "answers (a preset): for CQA_INTERLEAVE_SHARE of the questions, the served "
                                           "head is both rankers' orders merged by team-draft interleaving, and the "
                                           "users' judgements (POST /feedback) say which ranker they prefer (GET "
                                           "/evaluation/feedback: interleaving). Unset: none.")
    interleave_questions: str | None = Field(None, description="As CQA_INTERLEAVE_ANSWERS, for target questions (and "
                                             "threads, which it ranks).")
    interleave_comments: str | None = Field(None, description="A challenger to the default ranker of a thread's "
                                            "comments (a preset): GET /threads/{id}/answers and POST /rerank. For "
                                            "CQA_INTERLEAVE_SHARE of the threads, the comments shown are both "
                                            "rankers' orders merged by team-draft interleaving, and the readers' "
                                            "judgements say which ranker they prefer (GET /evaluation/feedback, "
                                            "target comments: interleaving). Unset: none.")
    interleave_share: float = Field(0.5, ge=0.0, le=1.0, description="The share of questions (and threads) "
                                    "interleaved where a challenger is set, the same ones on every page and worker "
                                    "(the text's hash decides); the others are served by the reranker alone, and so "
                                    "is whatever the feedback log does not keep (CQA_FEEDBACK=false, a request's "
                                    "feedback=false), which nobody could judge.")
    cross_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "cross-encoder",
                                           description="MiniLM cross-encoder checkpoint directory (shipped; "
                                           "`cqa train --model cross-encoder` rebuilds it).")
    bi_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "bi-encoder",
                                        description="MiniLM bi-encoder checkpoint directory (shipped; "
                                        "`cqa train --model bi-encoder` rebuilds it).")
    question_bi_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "question-bi-encoder",
                                                 description="MiniLM bi-encoder trained on subtask B question-question "
                                                 "pairs (shipped; `cqa train --model bi-encoder --task B` rebuilds it).")
    related_bi_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "related-bi-encoder",
                                                description="Where `cqa train --model bi-encoder --task C` writes a "
                                                "MiniLM bi-encoder of subtask C (new question, related comment) pairs "
                                                "(the related-bi-encoder preset).")
    adapted_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "adapted-minilm",
                                             description="Where scripts/adapt_minilm.py writes all-MiniLM-L6-v2 "
                                             "adapted to the forum's (subject, body) pairs, no labels read (the "
                                             "adapted-cosine preset; not shipped: round 42, rules 27 and 28).")
    question_cross_encoder_checkpoint: Path = Field(PROJECT_ROOT / "models" / "question-cross-encoder",
                                                    description="Where `cqa train --model cross-encoder --task B` writes a "
                                                    "MiniLM cross-encoder of subtask B question pairs (not shipped: "
                                                    "dev-B 0.6263, weight 0 in the dev-tuned question fusion).")
    inference: str = Field("auto", description="How the MiniLM rankers run: auto (what this device runs best: "
                           "torch-bf16 on CUDA; on a CPU torch-fp32, except the cascade's cross-encoder, which "
                           "runs torch-bf16 where the CPU has bf16 instructions, as measured on dev; every bi-encoder "
                           "torch-fp32 on every device, the precision the index stores their vectors in), "
                           "torch-fp32, torch-bf16, onnx-fp32 or onnx-int8 (ranking/neural/inference.py).")
    cascade_top: int = Field(10, ge=0, le=100, description="The cascade ranker: how many of the cheap stage's "
                             "top candidates the cross-encoder rescores (0: none).")
    score_memo_pairs: int = Field(100_000, ge=0, description="Serving: the (question, answer) pairs whose scores "
                                  "each neural model (the BiLSTM and the MiniLM models) keeps in memory, least "
                                  "recently used dropped first, so a thread sorted again costs the models only its "
                                  "new comments (about 180 bytes a pair, 18 MB per model at the default; 0: none).")
    vector_memo_texts: int = Field(10_000, ge=0, description="Serving: the texts whose vectors each encoder of the "
                                   "rerankers (the MiniLM bi-encoders, the dense encoder's cosine) keeps in memory, "
                                   "least recently used dropped first, so a text met again (a thread's comments sent "
                                   "with another question, a question asked again) is not encoded again (about 1.8 KB "
                                   "a text, 18 MB per encoder at the default; 0: none).")
    score_store_pairs: int = Field(1_000_000, ge=0, description="Serving: the pair scores kept in one SQLite file "
                                   "in the data folder (the score store), shared by every serving process of it (the "
                                   "workers of `cqa serve --workers N`, and the processes after a restart); the oldest "
                                   "written go first (about 113 bytes a pair on disk; 0: none, each process keeps only "
                                   "its own memo).")
    score_store: Path | None = Field(None, description="The score store's file (default: score-store.sqlite3 in the "
                                     "data folder's cache/).")
    vector_store_texts: int = Field(100_000, ge=0, description="Serving: the text vectors the encoders' vector memos "
                                    "keep in one SQLite file in the data folder (the vector store), shared by every "
                                    "serving process of it, as the score store shares pair scores: a text any of them "
                                    "encoded (a forum's thread sent again, to another worker or after a restart) is "
                                    "read, not encoded; the oldest written go first (about 1.6 KB a text on disk; 0: "
                                    "none).")
    vector_store: Path | None = Field(None, description="The vector store's file (default: vector-store.sqlite3 in "
                                      "the data folder's cache/).")
    rerank_depth: int = Field(30, ge=1, le=100, description="First-stage results /search reranks.")
    search_thread_depth: int = Field(10, ge=0, le=50, description="/search answers: the most similar threads "
                                     "whose comments join the reranked candidates (0: none).")

    @field_validator("inference")
    @classmethod
    def _known_inference(cls, v: str) -> str:
        from .neural.inference import Inference
        return v if v == "auto" else Inference.parse(v).label
