"""Request and response bodies. Unknown fields are refused everywhere."""
from __future__ import annotations

import unicodedata
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from indexing.models import MAX_TAG_CHARS, Answer, Thread, invalid_unicode, question_text
from ranking.settings import MAX_RESULTS

DATE = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$"
ThreadId = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]  # as Thread.id takes it
Tag = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TAG_CHARS, pattern=r"\S")]
MAX_FILTER_TAGS = 10


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*")
    @classmethod
    def _valid_unicode(cls, v, info):
        """A 422 for text no UTF-8 can carry (a JSON \\ud800 escape), before it reaches an analyzer or the store."""
        bad = invalid_unicode(v, info.field_name)
        if bad:
            raise ValueError(f"{bad}: not valid Unicode text; send UTF-8 text")
        return v


def blank(text: str) -> bool:
    """Nothing a reader or a ranker can read: whitespace and invisible format characters only (zero-width spaces,
    byte-order marks, direction marks: Unicode category Cf), which ``str.strip`` keeps."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


# Text lengths and list sizes are limited by the settings (CQA_MAX_TEXT_CHARS, CQA_MAX_CANDIDATES,
# CQA_MAX_THREADS_PER_REQUEST), checked in app/limits.py, so one number governs each limit.
class QuestionIn(Strict):
    """A forum question: its subject (title) and body; either may be empty, not both (many forum questions are a
    title alone). Where a request asks about a new question (`question`), a string stands for its body:
    `{"question": "How do I renew my permit?"}`."""
    subject: str = Field("", description="at most CQA_MAX_TEXT_CHARS characters")
    body: str = Field("", description="at most CQA_MAX_TEXT_CHARS characters")

    @model_validator(mode="before")
    @classmethod
    def _given_as_text(cls, data):
        if cls is not QuestionIn:  # a candidate question has an id: an object, always
            return data
        if isinstance(data, str):
            return {"body": data}
        if not isinstance(data, (dict, QuestionIn)):
            raise ValueError("a question is an object with a subject and a body (either may be left out), or a "
                             "string: its body")
        return data

    @model_validator(mode="after")
    def _not_blank(self) -> "QuestionIn":
        if blank(self.subject) and blank(self.body):
            raise ValueError("the question needs a subject or a body that is not empty, whitespace or invisible "
                             "characters")
        return self

    @property
    def text(self) -> str:
        return question_text(self.subject, self.body)

    def fields(self, prefix: str = "question"):
        return [(f"{prefix}.subject", self.subject), (f"{prefix}.body", self.body)]


class FiltersIn(Strict):
    category: str | None = Field(None, max_length=200)
    since: str | None = Field(None, pattern=DATE, description="ISO date or date-time, inclusive")
    until: str | None = Field(None, pattern=DATE, description="ISO date or date-time, inclusive")
    exclude_threads: list[ThreadId] = Field(
        default_factory=list, max_length=100, description="thread ids whose question and comments never come back, "
        "e.g. the thread whose page shows the search (its near-copies still do: they are not folded into it); an id "
        "not indexed excludes nothing")

    tags: list[Tag] = Field(
        default_factory=list, max_length=MAX_FILTER_TAGS, description="only threads that carry every one of these tags "
        "(their meta.tags: a StackExchange dump's, or a forum's JSONL), compared with case and spacing ignored")

    exclude_tags: list[Tag] = Field(
        default_factory=list, max_length=MAX_FILTER_TAGS, description="no thread that carries any of these tags "
        "(StackExchange's -[tag])")

    any_tags: list[Tag] = Field(
        default_factory=list, max_length=MAX_FILTER_TAGS, description="only threads that carry at least one of these "
        "tags (StackExchange's [a] or [b]); with tags, threads carry every one of those and one of these at least")

    tag_groups: list[Annotated[list[Tag], Field(min_length=1, max_length=MAX_FILTER_TAGS)]] = Field(
        default_factory=list, max_length=MAX_FILTER_TAGS, description="groups of alternatives: only threads that "
        "carry at least one tag of each group, [[\"a\", \"b\"], [\"c\", \"d\"]] being (a or b) and (c or d); "
        "any_tags is one more such group")

    def to_filters(self):
        from ranking.retriever import Filters
        return Filters(self.category, self.since, self.until, tuple(dict.fromkeys(self.exclude_threads)),
                       tuple(dict.fromkeys(self.tags)), tuple(dict.fromkeys(self.exclude_tags)),
                       tuple(dict.fromkeys(self.any_tags)),
                       tuple(dict.fromkeys(tuple(dict.fromkeys(g)) for g in self.tag_groups)))


class SearchIn(Strict):
    question: QuestionIn
    k: int = Field(10, ge=1, le=MAX_RESULTS)
    offset: int = Field(0, ge=0, le=MAX_RESULTS - 1, description="a later page: the results from rank offset + 1 on "
                        "(the answer's next_offset); a search ranks MAX_RESULTS results, so a page ends there")
    target: Literal["answers", "questions", "threads"] = Field(
        "answers", description="answers: existing comments that answer it; questions: similar questions; threads: the "
        "threads of similar questions (reranked as questions; with rerank false, the first stage grouped by thread)")
    filters: FiltersIn | None = None
    rerank: bool = True
    expand: bool | Literal["rm3", "translation"] | None = Field(
        None, description="query expansion: true = rm3, or name a method; default: the tuned retriever's")
    explain: bool = False
    collapse: bool = Field(True, description="fold identical or near-identical texts into one result")
    snippets: bool = Field(True, description="each result's snippet: the part of its text (up to 300 characters) "
                           "where the question's words are, with those words marked")

    def request(self):
        from ranking.pipeline import SearchRequest
        return SearchRequest.asking(
            self.question.subject, self.question.body, k=self.k, offset=self.offset, target=self.target,
            filters=self.filters.to_filters() if self.filters else None,
            expansion={True: "rm3", False: "none", None: None}.get(self.expand, self.expand),
            rerank=self.rerank, collapse=self.collapse, explain=self.explain, snippets=self.snippets)


class CandidateIn(Strict):
    id: str = Field(..., min_length=1, max_length=200)
    text: str = Field(..., description="at most CQA_MAX_TEXT_CHARS characters")
    author_id: str | None = Field(None, max_length=200)
    created_at: str | None = Field(None, max_length=40)


class RerankIn(Strict):
    question: QuestionIn
    candidates: list[CandidateIn] = Field(..., min_length=1, description="at most CQA_MAX_CANDIDATES")
    asker_id: str | None = Field(None, max_length=200, description="who asked the question; with every candidate's "
                                 "author_id, the ranker uses who wrote what (e.g. the asker's own comments)")
    thread_order: bool | None = Field(None, description="true: the candidates come in their thread's order; false: "
                                      "they do not (e.g. another search's order, newest first); unset: judged from created_at "
                                      "(every candidate has one and none goes back in time). Candidates not in "
                                      "their thread's order that all carry an ISO 8601 created_at are put back in "
                                      "it by their times, so the ranker still reads each one's place in the thread")

    @field_validator("candidates")
    @classmethod
    def _unique(cls, v: list[CandidateIn]) -> list[CandidateIn]:
        return unique_ids(v)


def unique_ids(candidates: list, what: str = "candidate"):
    seen = set()
    for c in candidates:
        if c.id in seen:
            raise ValueError(f"{what} id {c.id!r} appears twice")
        seen.add(c.id)
    return candidates


class QuestionCandidateIn(QuestionIn):
    """An existing question, e.g. one the forum's own search found: its id, and its subject and body (not both
    empty)."""
    id: str = Field(..., min_length=1, max_length=200)


class SearchOrdered(Strict):
    search_order: bool = Field(True, description="true: the candidates (or threads) come best first, as a search "
                               "ranked them; false: their order means nothing (a hand-picked list, ids from "
                               "elsewhere), and the ranker uses weights chosen for that case, which ignore it")


class SimilarQuestionIn(QuestionCandidateIn):
    """A candidate of POST /rerank/questions: an existing question (its id, subject and body), and, where the forum
    has them, the texts of the comments that answered it."""
    comments: list[Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]] = Field(
        default_factory=list, description="the texts of its thread's comments, if any (at most CQA_MAX_CANDIDATES "
        "in all, each at most CQA_MAX_TEXT_CHARS characters): the default B ranker weighs how well they answer the new "
        "question where the live generation indexes the thread with exactly these comments (question-answers-fusion-"
        "indexed; question-answers-fusion reads them always, question-fusion never); comments_read says whether it did")

    def fields(self, prefix: str = "candidate"):
        return super().fields(prefix) + [(f"{prefix}.comments.{j}", c) for j, c in enumerate(self.comments)]


class RerankQuestionsIn(SearchOrdered):
    question: QuestionIn
    candidates: list[SimilarQuestionIn] = Field(
        ..., min_length=1, description="at most CQA_MAX_CANDIDATES, in the order the caller's search ranked them "
        "(the ranker weighs that order, as subtask B weighs the search engine's), unless search_order is false")

    @field_validator("candidates")
    @classmethod
    def _unique(cls, v: list[SimilarQuestionIn]) -> list[SimilarQuestionIn]:
        return unique_ids(v)


class RelatedThreadIn(QuestionCandidateIn):
    """A thread the caller's search found for the new question: its id, its question (subject and body, not both
    empty), who asked it and its category where known, and its comments in the thread's order."""
    asker_id: str | None = Field(None, max_length=200, description="who asked the thread's question")
    category: str | None = Field(None, max_length=200)
    comments: list[CandidateIn] = Field(..., description="the thread's comments in the order the thread shows them "
                                        "(the ranker reads each one's position, author and the dialogue around it); "
                                        "may be empty, so that the threads after it keep their rank")

    def fields(self, prefix: str = "thread"):
        return super().fields(prefix) + [(f"{prefix}.comments.{j}.text", c.text) for j, c in enumerate(self.comments)]

    def thread(self) -> Thread:
        """As the subtask C files give a related thread. Validated here, so built as given (ids kept exactly)."""
        return Thread.model_construct(
            id=self.id, subject=self.subject, body=self.body, category=self.category, author_id=self.asker_id,
            answers=[Answer.model_construct(id=c.id, text=c.text, author_id=c.author_id, created_at=c.created_at)
                     for c in self.comments])


class RerankAnswersIn(SearchOrdered):
    question: QuestionIn
    threads: list[RelatedThreadIn] = Field(
        ..., min_length=1, description="the threads in the order the caller's search ranked them (the ranker weighs "
        "that order, as subtask C weighs the search engine's), unless search_order is false; at most "
        "CQA_MAX_CANDIDATES comments in all")

    @field_validator("threads")
    @classmethod
    def _unique(cls, v: list[RelatedThreadIn]) -> list[RelatedThreadIn]:
        unique_ids(v, "thread")
        if not unique_ids([c for t in v for c in t.comments], "comment"):
            raise ValueError("no thread has a comment: there is nothing to rank")
        return v

    def comments(self) -> list[tuple[str, "CandidateIn"]]:
        """(thread id, comment) for every comment, threads in the order given."""
        return [(t.id, c) for t in self.threads for c in t.comments]


class ThreadsIn(Strict):
    threads: list[Thread] = Field(..., min_length=1, description="at most CQA_MAX_THREADS_PER_REQUEST")


class QuestionEditIn(Strict):
    """A stored thread's own fields, each one sent replacing the stored value; its comments are kept."""
    subject: str | None = None
    body: str | None = None
    category: str | None = None
    created_at: str | None = None
    author_id: str | None = None
    meta: dict | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> "QuestionEditIn":
        if not self.model_fields_set:
            raise ValueError(f"send at least one of {', '.join(type(self).model_fields)}")
        for name, instead in (("subject", '""'), ("body", '""'), ("meta", "{}")):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name}: not null ({instead} clears it)")
        return self

    def fields(self) -> dict:
        return self.model_dump(exclude_unset=True)


class AnswersIn(Strict):
    """Comments of one stored thread, each added after its others (at its place in time where it and they carry ISO
    8601 times) or, where the thread holds its id, replacing it in place."""
    answers: list[Answer] = Field(..., min_length=1, description="at most CQA_MAX_CANDIDATES; ids unique across threads")

    @field_validator("answers")
    @classmethod
    def _answers(cls, v: list[Answer]) -> list[Answer]:
        bad = invalid_unicode([a.model_dump() for a in v], "answers")
        if bad:
            raise ValueError(f"{bad}: not valid Unicode text; send UTF-8 text")
        return unique_ids(v, "answer")


class BackupIn(Strict):
    kind: Literal["store", "export"] = Field("store", description="store: a consistent copy of the SQLite store "
                                            "(`cqa backup`), which serves again from an empty data folder; export: "
                                            "every thread as gzipped JSONL (`cqa export`), which `cqa ingest` reads")


AuthorId = Annotated[str, StringConstraints(min_length=1, max_length=1000, pattern=r"\S")]


class ErasureIn(Strict):
    """A right-to-erasure request for one or more forum users (POST /erasures)."""
    author_ids: list[AuthorId] = Field(..., min_length=1, max_length=1000, description="the users' ids exactly as "
                                       "the threads carry them (author_id); up to 1,000 in one request, which costs "
                                       "one rebuild")
    content: Literal["anonymize", "remove"] = Field(..., description="anonymize: their questions and comments stay, "
                                                    "without their author id and the meta keys of "
                                                    "CQA_ERASE_META_KEYS; remove: their comments are removed from "
                                                    "every thread and the threads they asked are deleted with all "
                                                    "their comments")
    meta_keys: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=100, description="with anonymize, more meta keys to remove from their posts")
    vacuum: bool = Field(False, description="also write the store's file anew (VACUUM), so nothing that writes made "
                         "before this version left in its free pages remains; writers wait for it")
    backups: Literal["rewrite", "keep"] | None = Field(None, description="the backups in CQA_BACKUP_DIR that began "
                                                       "before the erasure: rewrite (each written again without it, "
                                                       "under its name) or keep (named in the job's result); default "
                                                       "CQA_ERASE_BACKUPS (rewrite)")


class EvaluationIn(Strict):
    benchmark: str = Field(..., max_length=100, description="a SemEval benchmark (`cqa evaluate --list`), or one of "
                           "the forum's own judgements of this data folder: forum-duplicates (similar questions, by "
                           "its duplicate links), forum-duplicates-answers-accepted or -votes (answers for a "
                           "duplicate, by its group's accepted or voted-up answers), forum-answers-accepted or "
                           "-votes (a thread's comments, by its accepted or voted-up answers), feedback-replay-answers "
                           "or -questions (the searches its users judged, searched again with `ranker` beside the "
                           "served reranker: `cqa evaluate --feedback --ranker`; CQA_FEEDBACK_QUERIES), "
                           "feedback-replay-comments (the threads whose comments its readers judged, ranked again "
                           "with `ranker` as the default ranker)")
    ranker: str | None = Field(None, max_length=100, description="a ranker preset instead of the default (not with "
                               "forum-duplicates*, which measure the served search; required by feedback-replay-*)")


# --- responses (documented in /openapi.json) --------------------------------------------------------
class HealthOut(BaseModel):
    status: Literal["ok"]


class InferenceOut(BaseModel):
    model: str = Field(description="a MiniLM ranker the rerankers run")
    variant: str = Field(description="how it runs: torch-fp32, torch-bf16, onnx-fp32 or onnx-int8")
    device: str
    note: str = Field("", description="why it differs from what $CQA_INFERENCE asked for, if it does")


class ScoreMemoOut(BaseModel):
    pairs: int = Field(description="(question, answer) pairs whose scores it holds")
    capacity: int = Field(description="the most it holds ($CQA_SCORE_MEMO_PAIRS); the least recently used go first")
    hits: int = Field(description="pairs answered from it since the start, without a model call")
    shared_hits: int = Field(0, description="of those, the pairs found in the score store that the data folder's "
                             "serving processes share (another worker, or a process before a restart, scored them); "
                             "for `NAME vectors`, the texts found in the vector store")
    misses: int = Field(description="pairs the model scored since the start")


class ScoreStoreOut(BaseModel):
    """A file the data folder's serving processes share behind their memos: pair scores (the score store) or text
    vectors (the vector store)."""
    path: str = Field(description="the SQLite file ($CQA_SCORE_STORE, $CQA_VECTOR_STORE)")
    capacity: int = Field(description="the most entries it keeps ($CQA_SCORE_STORE_PAIRS pair scores, "
                          "$CQA_VECTOR_STORE_TEXTS text vectors); the oldest written go first")
    written: int = Field(description="entries this process wrote to it since the start")
    dropped: int = Field(description="entries this process could not write (it is a cache: nothing else is lost)")
    read_errors: int = Field(description="reads that failed (their entries were computed by the model)")
    error: str = Field(description="why the store is off in this process, if it is (each process then keeps only "
                       "its own memo)")


class RefreshOut(BaseModel):
    """The automatic refresh as one serving process sees it: app/refresh.py keeps one and updates it."""

    interval_s: float = Field(description="CQA_REFRESH_S: the longest time from one automatic build's end to the "
                              "next's start")
    gap_s: float = Field(description="the time from the last automatic build's end to the next's start now: its "
                         "length * (1 / CQA_REFRESH_DUTY - 1), at most interval_s (interval_s before any build)")
    pending: bool = Field(description="the store holds changes (threads added, changed or deleted) the live "
                          "generation lacks, so search does not see them yet")
    pending_since: float | None = Field(None, description="since when (unix time) this process has seen them")
    reason: str | None = Field(None, description="why the live generation is behind the store")
    behind: Literal["generation", "store", "documents", "translation"] | None = Field(
        None, description="what is behind while pending: store (threads search does not see yet), documents (every "
        "thread is searchable; the live generation was built by an earlier release, and a tag filter waits for the "
        "next build), translation (every thread is searchable; only the translation table that expand: translation "
        "reads is being trained again), or generation (the live one could not be read)")
    last_job: str | None = Field(None, description="this process's last automatic build (GET /jobs/{id})")
    last_outcome: Literal["running", "built", "skipped", "failed"] | None = Field(
        None, description="built; skipped (another process was building, or had built what the store holds); failed "
        "(the live generation is unchanged, the next tick tries again)")
    last_started_at: float | None = None
    last_finished_at: float | None = None
    last_generation: str | None = Field(None, description="the generation it built, or the live one it found")
    last_error: str | None = None
    spare_pid: int | None = Field(None, description="the process of the next automatic build, started and waiting to "
                                  "be told to build, its imports done (CQA_REFRESH_PRESTART); None: none is waiting")


class TranslationOut(BaseModel):
    """The translation table of the live generation: what `expand: "translation"` reads (no default search does)."""

    state: Literal["trained", "kept", "training"] = Field(
        description="trained: on this generation's question-answer pairs; kept: an earlier generation's, kept while "
        "at most CQA_TRANSLATION_RETRAIN_CHANGED of the pairs changed since it was trained; training: an earlier "
        "generation's while a new one trains (refresh behind: translation)")
    pairs: int | None = Field(None, description="the generation's question-answer pairs (one per comment)")
    trained_on_pairs: int | None = Field(None, description="the pairs the table was trained on")
    changed_pairs: int | None = Field(None, description="pairs added or removed between the two (an edited comment "
                                      "counts two); null while training")


class AdmissionOut(BaseModel):
    limit: int = Field(description="CQA_MAX_IN_FLIGHT: ranking requests this worker takes at once (0: no bound)")
    in_flight: int = Field(description="ranking requests taken and not answered yet, this one not counted")
    most: int = Field(description="the most in flight at once since the start")
    refused: int = Field(description="ranking requests refused at once with 503 overloaded since the start")
    fair_share: bool = Field(description="CQA_FAIR_SHARE: whether a client holding its share of the limit is refused "
                             "while others are searching")
    clients: int = Field(description="the clients sharing the limit: those that sent a ranking request in the last 10 s, "
                         "or still hold one (an IPv6 client counts as its /64)")
    refused_share: int = Field(description="ranking requests refused at once with 429 over_share since the start: "
                               "their client held its share while the worker held an eighth of the limit or more")
    spare: int = Field(description="places past the limit for a client that holds none when it is full (an eighth of "
                       "the limit, with fair share; 0 without), so a newcomer is not refused because one client "
                       "filled the worker")
    slots: int = Field(description="CQA_RUN_SLOTS: ranking requests this worker works on at once (0: every one taken)")
    alone_slots: int = Field(description="CQA_RUN_SLOTS_ALONE: how many a client alone in the worker runs at once "
                             "(0: no bound)")
    running: int = Field(description="ranking requests in a slot now")
    waiting: int = Field(description="ranking requests taken and waiting for a slot now")
    queued: int = Field(description="ranking requests that waited for a slot since the start")
    most_waiting: int = Field(description="the most waiting at once since the start")
    rate_limit_per_min: int = Field(description="CQA_RATE_LIMIT_PER_MIN: ranking requests a client may send a "
                                    "minute, to all the workers of the data folder together (0: no limit)")
    rate_burst: int = Field(description="how many it may send at once above that (0 with no limit)")
    rate_limited: int = Field(description="ranking requests refused at once with 429 rate_limited since the start")
    rate_clients: int = Field(description="the clients whose rate is being counted now, by every worker (those "
                              "that asked lately: a bucket full again is forgotten)")
    rate_shared: bool = Field(description="whether the rate is counted in the file the workers share "
                              "(CQA_RATE_LIMIT_STORE), so a client is held to one rate whichever worker it reaches")
    rate_store_errors: int = Field(description="ranking requests taken without counting their rate, since the start, "
                                   "because the shared file could not be read or written (the limit fails open)")
    overfull_entered: int = Field(description="ranking requests run at once past the slots since the start: their "
                                  "client ran nothing, and the slots were overfull with the requests of a client that "
                                  "had been alone in the worker (held to CQA_RUN_SLOTS_ALONE, not to the slots), so none "
                                  "would free soon")


class FeedbackStatsOut(BaseModel):
    recorded: int = Field(description="searches this process wrote to the feedback log under a search_id")
    judgements: int = Field(description="judgements this process recorded (POST /feedback)")
    store_errors: int = Field(description="searches answered without a search_id and judgements refused because the "
                              "log's file could not be written")
    keep_days: float = Field(description="how long a search nobody judged is kept and may be judged (CQA_FEEDBACK_DAYS)")


class ReadyOut(BaseModel):
    status: Literal["ready"]
    generation: str
    sizes: dict[str, int]
    dense_encoder: str | None = Field(None, description="the encoder of the generation's dense index and of the "
                                      "question at /search (its id: the packaged model's name, or the fine-tuned "
                                      "bi-encoder's digest and input length); null without a dense index")
    reranker: str = Field(description="the reranker of POST /rerank (one thread's comments)")
    question_reranker: str = Field(description="the reranker of POST /rerank/questions (given candidate questions)")
    answers_reranker: str = Field(description="the reranker of POST /rerank/answers (the comments of given threads)")
    arabic_reranker: str | None = Field(None, description="the reranker of Arabic input at POST /rerank, "
                                        "/rerank/questions, /rerank/answers and /search ($CQA_ARABIC_RANKER; null: "
                                        "the default rankers rank it)")
    search_rerankers: dict[str, str] = Field(description="the reranker of each POST /search target")
    search_challengers: dict[str, str] = Field(default_factory=dict, description="the challenger interleaved with a "
                                               "target's reranker (CQA_INTERLEAVE_ANSWERS / _QUESTIONS); empty: none")
    comments_challenger: str | None = Field(None, description="the challenger interleaved with the default ranker "
                                            "of a thread's comments, GET /threads/{id}/answers and POST /rerank "
                                            "(CQA_INTERLEAVE_COMMENTS); null: none")
    interleave_share: float | None = Field(None, description="the share of questions (and threads) interleaved "
                                           "(CQA_INTERLEAVE_SHARE); null without a challenger")
    inference: list[InferenceOut] = Field(default_factory=list, description="the MiniLM models loaded, and how each runs")
    score_memos: dict[str, ScoreMemoOut] = Field(default_factory=dict, description="each neural model's memory of "
                                                 "recent pair scores, by model: a thread sorted again costs the model "
                                                 "only its new comments")
    score_store: ScoreStoreOut | None = Field(None, description="the score store behind the memos, shared by the "
                                              "data folder's serving processes; null when off")
    vector_store: ScoreStoreOut | None = Field(None, description="the vector store behind the encoders' vector "
                                               "memos (`NAME vectors` in score_memos), shared by the data folder's "
                                               "serving processes; null when off")
    translation: TranslationOut | None = Field(None, description="the generation's translation table; null "
                                               "without one")
    refresh: RefreshOut | None = Field(None, description="the automatic refresh (CQA_REFRESH_S) as this process "
                                       "sees it; null when off")
    admission: AdmissionOut | None = Field(None, description="the ranking requests this worker holds against "
                                           "CQA_MAX_IN_FLIGHT")
    feedback: FeedbackStatsOut | None = Field(None, description="this process's feedback log (CQA_FEEDBACK); null "
                                              "when off")
    worker: str = Field(description="the serving process that answered (host-pid-nonce); with several workers, "
                        "each has its own and holds its own lease on the generation it serves")
    warm_up_ms: dict[str, float | None] | None = Field(
        None, description="the warm-up at this process's start (CQA_WARM_UP): one request of each kind, run through "
        "the served rankers and search before the first request was taken, and the milliseconds each took (null where "
        "it failed: see the log); nothing it scored is kept in the memos. Null when off")


class RerankResult(BaseModel):
    id: str
    score: float
    rank: int


def kept_order():
    """A ranking's ``search_id`` field (GET /threads/{id}/answers and the /rerank endpoints)."""
    return Field(None, exclude_if=lambda v: v is None,
                 description="this order's id in the feedback log: send it with a reader's judgement of a result "
                 "(POST /feedback); GET /evaluation/feedback reports the judged orders' MAP beside the order the "
                 "ranker was given (a stored thread's own, or the request's). Absent where the log is off "
                 "(CQA_FEEDBACK=false) or could not be written, the request said feedback=false, or nothing was "
                 "ranked")


class RerankOut(BaseModel):
    results: list[RerankResult]
    reranker: str = Field(description="the ranker that scored them: $CQA_DEFAULT_RANKER, or $CQA_ARABIC_RANKER when "
                          "most letters of the question and candidates are Arabic script")
    metadata: Literal["full", "no-users", "no-order", "none"] = Field(
        description="what forum metadata the input carried, and so which weights ranked it: user ids and thread "
        "order (full), thread order only (no-users), user ids only (no-order), neither (none); the Arabic ranker "
        "reads none of it")
    timings_ms: dict[str, float]
    search_id: str | None = kept_order()
    interleaved_with: str | None = Field(None, description="where this thread is one of those interleaved "
                                         "(CQA_INTERLEAVE_COMMENTS): the challenger whose order was merged with the "
                                         "reranker's by team-draft interleaving; then `rank` is the merged order's and "
                                         "`score` the reranker's. Null otherwise")


class OrderWeighed(BaseModel):
    search_order: bool = Field(description="whether the order given was weighed: the request's search_order, "
                               "false when the Arabic ranker (which reads the texts only) scored them")


class RerankQuestionsOut(OrderWeighed):
    results: list[RerankResult]
    comments_read: bool = Field(description="whether the candidates' comments were weighed: the subtask B ranker "
                                "reads them where it has a part for them (question-answers-fusion; "
                                "question-answers-fusion-indexed only where the forum's index holds those comments, "
                                "so nothing but the new question is encoded)")
    reranker: str = Field(description="the ranker that scored them: the subtask B ranker ($CQA_DEFAULT_RANKER_B), or "
                          "$CQA_ARABIC_RANKER when most letters of the question and candidates are Arabic script")
    timings_ms: dict[str, float]
    search_id: str | None = kept_order()


class RerankAnswerResult(RerankResult):
    thread_id: str = Field(description="the thread the comment belongs to")


class RerankAnswersOut(OrderWeighed):
    results: list[RerankAnswerResult] = Field(description="every comment of every thread sent, the most useful first")
    reranker: str = Field(description="the ranker that scored them: the subtask C ranker ($CQA_DEFAULT_RANKER_C), or "
                          "$CQA_ARABIC_RANKER when most letters of the question and comments are Arabic script")
    timings_ms: dict[str, float]
    search_id: str | None = kept_order()


class ThreadsOut(BaseModel):
    accepted: int
    inserted: int
    updated: int
    unchanged: int
    superseded: list[str] = Field(description="ids of threads sent with a revision not above the stored one's: the "
                                  "store keeps the later snapshot it holds, and these were not written")
    suppressed: list[str] = Field(default_factory=list, description="ids of threads not written because their asker "
                                  "was erased with their posts removed (POST /erasures)")
    answers_suppressed: int = Field(0, description="comments left out because their author was erased with their "
                                    "posts removed")
    posts_anonymized: int = Field(0, description="questions and comments written without their author's id (and "
                                  "the erasure's meta keys), because their author was erased with anonymize")
    taken_down: list[str] = Field(default_factory=list, description="ids of threads not written because they were "
                                  "taken down (DELETE /threads/{id}?purge=true; GET /takedowns)")
    answers_taken_down: int = Field(0, description="comments left out because each was taken down (DELETE "
                                    "/threads/{id}/answers/{answer_id}?purge=true)")
    note: str


class ListedOut(BaseModel):
    id: str
    revision: int | None = Field(description="the forum's revision the store holds (null: sent without one)")
    etag: str = Field(description="the thread's ETag, as GET /threads/{id} sends it (without the quotes)")
    subject: str
    answers: int = Field(description="how many comments it has")


class ThreadListOut(BaseModel):
    threads: list[ListedOut] = Field(description="in id order (by code point)")
    next: str | None = Field(description="the `after` of the next page; null on the last")


class TagSynonymIn(Strict):
    target: Tag = Field(description="the tag it stands for (a tag of its own, not a synonym)")


class TagSynonymOut(BaseModel):
    source: str = Field(description="the synonym, as a filter compares it (case and spacing ignored)")
    target: str = Field(description="the tag it stands for")


class TagSynonymsOut(BaseModel):
    synonyms: list[TagSynonymOut] = Field(description="every synonym, by synonym: a tag filter on a synonym or its "
                                          "target takes the threads carrying any tag of the family")


class TagOut(BaseModel):
    tag: str = Field(description="as a filter compares it: case folded, spacing collapsed")
    threads: int = Field(description="how many of the live generation's threads carry it")
    with_synonyms: int | None = Field(None, description="where it has tag synonyms (it is a target, or a synonym of "
                                      "one): how many threads carry it or any tag of its family, each once, which is "
                                      "what a search within it finds; absent otherwise")


class TagsOut(BaseModel):
    generation: str = Field(description="the live generation the counts are of")
    tags: list[TagOut] = Field(description="most threads first, then by tag")
    matching: int = Field(description="how many tags the prefix matches (all of them without one)")
    synonyms: list[TagSynonymOut] = Field(default_factory=list, description="the tag synonyms that begin with the "
                                          "prefix (at most limit; none without a prefix), each with the tag it stands "
                                          "for: typing js, a page can offer javascript")


class AnswersOut(BaseModel):
    thread_id: str
    inserted: int = Field(description="comments added to the thread")
    updated: int = Field(description="comments whose id the thread held, replaced in place")
    unchanged: int = Field(description="comments sent as the thread already held them")
    answers: int = Field(description="how many comments the thread has now")
    answers_suppressed: int = Field(0, description="comments left out because their author was erased with their "
                                    "posts removed (POST /erasures)")
    posts_anonymized: int = Field(0, description="comments written without their author's id, because their author "
                                  "was erased with anonymize")
    answers_taken_down: int = Field(0, description="comments left out because each was taken down (DELETE "
                                    "/threads/{id}/answers/{answer_id}?purge=true; GET /takedowns)")
    note: str


class EditedOut(BaseModel):
    thread_id: str
    changed: bool = Field(description="false when the thread already held these values")
    note: str


class DeletedOut(BaseModel):
    deleted: str
    note: str
    job: JobOut | None = Field(None, description="with purge: the job that deletes what held it beyond the store")
    feedback_requests: int | None = Field(None, description="with purge: the feedback log's kept requests that carried "
                                          "its text, dropped before the answer (CQA_FEEDBACK_QUERIES), as "
                                          "POST /erasures reports them")
    feedback_searches: int | None = Field(None, description="with purge: the searches of the feedback log that "
                                          "showed it, its id (and each of its comments') replaced there before the "
                                          "answer by one that names no post, as POST /erasures reports them")


class JobOut(BaseModel):
    id: str
    kind: str
    state: Literal["queued", "running", "succeeded", "failed"]
    stage: str | None = None
    progress: float = 0.0
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    result: dict | None = None
    error: str | None = None
    request_id: str | None = Field(None, description="The request that submitted it (its X-Request-ID): the lines "
                                   "the job logs carry it too")


class JobSubmitted(BaseModel):
    job: JobOut
    started: bool
    message: str | None = None


class ErasedOut(BaseModel):
    """What an erasure changed in the store (no text, no author id)."""
    threads_deleted: int
    threads_changed: int
    answers_removed: int
    posts_anonymized: int
    wal_truncated: bool
    cache_vectors_deleted: int
    feedback_requests: int = Field(0, description="the feedback log's kept requests that carried a removed text, "
                                   "dropped before the answer (CQA_FEEDBACK_QUERIES); the job looks again, and in "
                                   "the store backups")
    feedback_searches: int = Field(0, description="the searches of the feedback log that showed a removed post: each "
                                   "removed post's id replaced there, in what they showed and what their users "
                                   "judged, before the answer, by `removed-<its place>`, which names no post (each "
                                   "search's MAP stays as it was); the job does the same in the store backups")
    vacuumed: bool
    backups: Literal["rewrite", "keep"] = Field(description="what the job does to the backups that began before")


class ErasureStatusOut(BaseModel):
    """Whether the store's ledger holds a user's erasure (GET /erasures/{author_id})."""
    author_id: str
    erased: bool
    content: Literal["anonymize", "remove"] | None = Field(description="what their posts sent later become: left out "
                                                           "(remove) or stored without their id (anonymize)")
    meta_keys: list[str] = Field(description="the meta keys their anonymized posts lose")


class TakedownOut(BaseModel):
    thread_id: str
    answer_id: str | None = Field(description="the comment taken down; null: the whole thread")
    at: float = Field(description="when it was taken down, in seconds since the epoch")


class TakedownsOut(BaseModel):
    takedowns: list[TakedownOut]
    next: str | None = Field(description="the `after` of the next page; null on the last")


class LiftedOut(BaseModel):
    thread_id: str
    answer_id: str | None
    lifted: bool


class ErasureOut(JobSubmitted):
    erased: ErasedOut | None = None


class ImportOut(JobSubmitted):
    """An upload received and named (``indexing.imports``), and the job that ingests it."""
    upload: str
    bytes: int


class PostOut(BaseModel):
    """One question or comment a user wrote (``indexing.store.Post``)."""
    kind: Literal["question", "comment"]
    thread_id: str
    id: str = Field(description="the thread's id for a question, the comment's for a comment")
    author_id: str
    created_at: str | None = None
    meta: dict = Field(default_factory=dict)
    subject: str | None = None
    body: str | None = None
    category: str | None = None
    text: str | None = None
    label: str | None = None


class PostsOut(BaseModel):
    author_id: str
    questions: int
    comments: int
    posts: list[PostOut]


MAP_INTERVAL = ("the 95% percentile interval of the run's headline MAP (MAP@10 for a search benchmark) over 10,000 "
                "seeded bootstrap resamples of its questions (ranking.evaluation.measures.map_interval): where another "
                "draw of as many questions like these would put the figure")


class ShippedFigure(BaseModel):
    benchmark: str
    ranker: str
    figures: dict[str, float]
    command: str
    measured_at: str
    machine: str
    inference: dict[str, str] | None = Field(None, description="how each MiniLM model of the ranker ran (model -> "
                                             "variant); auto runs the subtask A default's cross-encoder in torch-bf16 on "
                                             "a CPU with bf16 instructions (its bi-encoder too before round 53); null: "
                                             "not recorded (torch-fp32 at the time)")
    MAP_interval_95: list[float] | None = Field(None, description=MAP_INTERVAL + "; null for a figure shipped before "
                                                "reports carried it")
    data_folder: str | None = Field(None, description="the data folder whose live generation the run read, where that "
                                    "changed the ranking (a subtask B file's candidates with their comments' stored "
                                    "vectors: CQA_DATA_DIR for the command); null: any data folder gives the figure")


class LiveFigure(BaseModel):
    MAP: float | None = None
    MAP_interval_95: list[float] | None = Field(None, description=MAP_INTERVAL + "; null for runs without "
                                                "per-question figures (the full corpus's first stage)")
    MRR: float | None = None
    P_at_1: float | None = Field(None, alias="P@1")
    ranker: str | None = None
    generation: str | None = None
    created_at: str | None = None
    questions: int | None = None
    folder: str | None = None

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class BackupFileOut(BaseModel):
    name: str = Field(description="the file's name, for GET and DELETE /backups/{name}")
    kind: Literal["store", "export"]
    bytes: int
    modified: float = Field(description="when it was completed, seconds since the epoch")


class BackupsOut(BaseModel):
    folder: str = Field(description="where they are ($CQA_BACKUP_DIR, or backups/ in the data folder)")
    backups: list[BackupFileOut] = Field(description="complete backups, newest first")


class EvaluationOut(BaseModel):
    shipped: list[ShippedFigure] = Field(description="figures measured for this release with each preset "
                                         "(ranking/shipped_figures.json), shown before any run here")
    benchmarks: dict[str, LiveFigure] = Field(description="the latest run of each benchmark on this service")


class JudgementIn(Strict):
    result_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] = Field(
        description="a result's id as the search showed it (results[].id)")
    helpful: bool = Field(description="whether the result helped the user")


class FeedbackIn(Strict):
    """A user's judgement of the results of one served search (POST /feedback)."""
    search_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")] = Field(
        description="the search's search_id, as its response gave it (32 hex digits)")
    judgements: list[JudgementIn] = Field(min_length=1, max_length=MAX_RESULTS, description="one per result judged; "
                                          "a result judged again replaces its earlier judgement")

    @model_validator(mode="after")
    def _each_once(self):
        seen, twice = set(), []
        for j in self.judgements:
            if j.result_id in seen:
                twice.append(j.result_id)
            seen.add(j.result_id)
        if twice:
            raise ValueError(f"judgements: {', '.join(map(repr, twice[:5]))} judged twice in one request; send each "
                             "result once")
        return self


class FeedbackOut(BaseModel):
    search_id: str
    recorded: int = Field(description="judgements written by this request (synced to disk before this answer)")
    judged: int = Field(description="results of the search judged so far, this request's included")
    removed: list[str] = Field(default_factory=list, description="results judged that were removed from the forum "
                               "since the search (an erasure or a purge): their judgements are not kept")


class HelpfulAtRank(BaseModel):
    rank: int
    helpful: int
    judged: int


class FirstStageFigure(BaseModel):
    MAP: float = Field(description="the judged results in the order the reranker was given them")
    order: Literal["first stage", "thread", "given"] = Field(
        description="what that order was: the first stage's (a search: its hits, the similar threads' comments after "
        "them), the thread's own, oldest first (a thread's comments, GET /threads/{id}/answers: what the ranker adds "
        "over the order a forum shows without one), or the request's (POST /rerank: a thread's order where the forum "
        "sent its comments so)")
    reranker_gain: float = Field(description="MAP minus this MAP: what the reranker's order adds, on these searches")
    p: float = Field(description="of the paired randomisation test over the searches (the paired t-test past 5,000 "
                     "searches: interval)")


class InterleavingOut(BaseModel):
    challenger: str = Field(description="the ranker interleaved with the reranker (team B)")
    searches: int = Field(description="judged interleaved searches, every page")
    reranker_wins: int = Field(description="searches whose helpful results came more from the reranker's picks")
    challenger_wins: int = Field(description="searches whose helpful results came more from the challenger's picks")
    ties: int = Field(description="as many from each (or none helpful)")
    challenger_preference: float = Field(description="(challenger wins - reranker wins) / searches: above 0, the "
                                         "users preferred the challenger")
    p: float = Field(description="two-sided sign test of the wins, ties left out")
    searches_for_a_verdict: int | None = Field(None, description="about how many judged interleaved searches in all "
                                               "the sign test needs for p < 0.05 if the wins and ties keep their "
                                               "present shares (the exact test, from the normal approximation's "
                                               "count up): how long to run the experiment; null where neither ranker "
                                               "leads")


class FeedbackGroup(BaseModel):
    endpoint: str
    target: str
    reranker: str | None
    searches: int = Field(description="judged searches (first pages)")
    judgements: int
    judgements_later_pages: int = Field(description="judgements of results on later pages (ranks past 10: not in MAP)")
    replayable: int = Field(0, description="of the judged first pages, those whose request the log kept "
                            "(CQA_FEEDBACK_QUERIES): what `cqa evaluate --feedback --ranker NAME` can search again")
    MAP: float | None = Field(None, description="over the first 10 ranks, the judged results only, in the order shown")
    MAP_interval_95: list[float] | None = None
    interval: Literal["bootstrap", "normal"] | None = Field(None, description="how the interval (and the first "
                                                           "stage's test) was computed: a bootstrap over the searches "
                                                           "(and the paired randomisation test) up to 5,000 searches, "
                                                           "the normal approximation (and the paired t-test) past them")
    MAP_unjudged_not_helpful: float | None = Field(None, description="the same with every unjudged result counted "
                                                   "as not helpful")
    MRR: float | None = None
    helpful_share: float | None = None
    generations: int | None = Field(None, description="index generations that served these searches")
    helpful_by_rank: list[HelpfulAtRank] = Field(default_factory=list)
    first_stage: FirstStageFigure | None = None
    interleaving: InterleavingOut | None = Field(None, description="the searches of this group were interleaved "
                                                 "with a challenger (ranking.interleave): which ranker the users "
                                                 "preferred")


class FeedbackReportOut(BaseModel):
    days: float | None = Field(description="the searches served in the last this many days; null: all kept")
    searches_judged: int
    groups: list[FeedbackGroup] = Field(description="per endpoint, target and reranker that served the searches")
    note: str
