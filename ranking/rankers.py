"""The ranker protocol and the small rankers of given candidates. A ranker scores the candidates of each
query; higher is better. Named presets and the one builder live in ranking/presets.py."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .candidates import ANSWER_ENCODER, Candidate, Query, encoder_of, stored, stored_vector
from .presets import UnknownRanker  # noqa: F401  (what get_ranker raises)

if TYPE_CHECKING:
    from .neural.memo import ScoreMemo


class Ranker(Protocol):
    name: str

    def score(self, queries: list[Query]) -> list[list[float]]:
        """One list of scores per query, aligned with its candidates."""
        ...


@dataclass
class IRBaseline:
    """The order the task gives: chronological for A, the search engine's for B and C."""
    name: str = "ir-baseline"

    def score(self, queries: list[Query]) -> list[list[float]]:
        return [[1.0 / (i + 1) for i in range(len(q.candidates))] for q in queries]


@dataclass
class MiniLMCosine:
    """Cosine of the dense index's MiniLM embeddings of the question and each candidate: the packaged
    all-MiniLM-L6-v2 (zero-shot), or at /search the encoder of the generation searched ($CQA_DENSE_ENCODER,
    named by the query's meta), so one encoder serves retrieval and reranking."""
    device: str = "auto"
    batch_size: int = 64
    name: str = "minilm-cosine"
    cache_dir: Path | None = None  # evaluation runs: the texts' embeddings kept (the reindex's cache)
    vector_memo: ScoreMemo | None = None  # serving: recent texts' vectors (for_serving sets it)
    subjects: bool = False  # compare two questions by their subjects (meta "subject") where both have one

    def score(self, queries: list[Query]) -> list[list[float]]:
        """Questions and candidates that carry that encoder's embedding (meta "vector": the FAISS index's, or
        the first stage's of the question) are not encoded again; everything else is encoded in one batch."""
        if self.subjects:
            return per_encoder(queries, self._subject_scores)

        def group_scores(spec, group: list[Query]) -> list[list[float]]:
            items = [(q.text, stored(q.meta, "vector", spec.id)) for q in group]
            items += [(c.text, stored(c.meta, "vector", spec.id)) for q in group for c in q.candidates]
            vecs = iter(embed_missing(items, self.device, self.batch_size, spec, self.cache_dir, self.vector_memo))
            qvecs = [next(vecs) for _ in group]
            rows = []
            for q, qv in zip(group, qvecs):
                cand = np.stack([next(vecs) for _ in q.candidates]) if q.candidates else np.zeros((0, len(qv)))
                rows.append((cand.astype(np.float32) @ qv).astype(float).tolist())
            return rows
        return per_encoder(queries, group_scores)

    def _subject_scores(self, spec, group: list[Query]) -> list[list[float]]:
        """``subjects``: a question and a candidate that both have a subject are compared by their subjects alone
        (never by a stored vector, which is of a whole text); a pair where either lacks one, by their whole texts,
        as without ``subjects``. Each distinct text is encoded once."""
        def whole(x) -> tuple[str, str]:
            return ("text", x.text)

        def side(x, other) -> tuple[str, str]:
            both = subject_of(x.meta) and subject_of(other.meta)
            return ("subject", subject_of(x.meta)) if both else whole(x)
        pairs = [[(side(q, c), side(c, q)) for c in q.candidates] for q in group]
        vector_of: dict = {}  # a whole text's stored vector, where one of its questions carries it
        for x in (y for q in group for y in (q, *q.candidates)):
            if vector_of.get(whole(x)) is None:
                vector_of[whole(x)] = stored(x.meta, "vector", spec.id)
        keys = {k: i for i, k in enumerate(dict.fromkeys(k for row in pairs for pair in row for k in pair))}
        vecs = embed_missing([(k[1], vector_of.get(k)) for k in keys], self.device, self.batch_size, spec,
                             self.cache_dir, self.vector_memo)
        return [[float(vecs[keys[a]] @ vecs[keys[b]]) for a, b in row] for row in pairs]


def subject_of(meta: dict) -> str:
    """A question's subject, from its meta; "" where it has none that a reader can read."""
    subject = meta.get("subject") or ""
    return subject if subject.strip() else ""


def per_encoder(queries: list[Query], group_scores) -> list[list[float]]:
    """``group_scores(spec, queries)`` once per encoder of the queries' vectors (encoder_of their meta), the
    rows put back in the order given."""
    groups: dict = {}
    for i, q in enumerate(queries):
        groups.setdefault(encoder_of(q.meta), []).append(i)
    out: list = [None] * len(queries)
    for spec, idx in groups.items():
        for i, row in zip(idx, group_scores(spec, [queries[i] for i in idx])):
            out[i] = row
    return out


def embed_missing(items: list[tuple[str, object]], device: str = "auto", batch_size: int = 64,
                  spec=None, cache_dir: Path | None = None, memo: ScoreMemo | None = None) -> list[np.ndarray]:
    """A vector per (text, vector-or-None): the given vector, or the text encoded by ``spec`` (an
    indexing.encoder.EncoderSpec; default the packaged model), all such in one batch. With ``cache_dir``,
    they go through the reindex's embedding cache (indexing.embcache.embed_with_cache); with a serving ``memo``
    (a ScoreMemo of vectors keyed by (text, encoder id)), a text it holds is not encoded, and each other text once."""
    from indexing.encoder import EncoderSpec, encode
    spec = spec or EncoderSpec()
    todo = [t for t, v in items if v is None]

    def run(texts: list[str]) -> np.ndarray:
        return encode(texts, batch_size=batch_size, device=device, progress=len(texts) > 1000, spec=spec)
    if not todo:
        fresh = iter(())
    elif cache_dir is None:
        from .neural.memo import memo_vectors
        fresh = iter(memo_vectors(memo, todo, spec.id, run))
    else:
        from indexing.embcache import EmbeddingCache, embed_with_cache
        cache = EmbeddingCache(Path(cache_dir) / "embeddings.sqlite3", spec.id)
        try:
            batches = lambda texts: [(np.arange(len(texts)), run(texts))] if texts else []  # noqa: E731
            fresh = iter(embed_with_cache(todo, cache, batches)[0])
        finally:
            cache.close()
    return [np.asarray(v, dtype=np.float32) if v is not None else next(fresh) for _, v in items]


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


def without_comments(q: Query) -> np.ndarray:
    """Which of a question's candidates have no comment, so nothing for a ranker of what answered them to read (a
    forum's new question, say): a fusion may then give that part no say for them (FusedRanker ``missing``)."""
    return np.array([not c.meta.get("comments") for c in q.candidates], dtype=bool)


def best_of(cosines: list[float], how: str) -> float:
    """A thread's comment cosines reduced to one score: the best ("max") or the mean of the best three ("top3");
    0 for a thread without comments."""
    cos = sorted(cosines, reverse=True)
    return 0.0 if not cos else cos[0] if how == "max" else float(np.mean(cos[:3]))


@dataclass
class AnswersModel:
    """A question candidate scored by how well its thread's comments answer the question, as a subtask A
    bi-encoder judges it: its cosine of the question and each comment (meta "comments"), reduced by ``how`` as
    AnswersCosine does. At /search the comments' vectors are the ones the generation stores for that encoder
    (meta "comment_answer_vectors", ``$CQA_ANSWER_ENCODER``), so only the question is encoded; others are encoded
    here. 0 without comments."""
    model: Any  # a bi-encoder MiniLMRanker (its vector_id names its vectors)
    how: str = "max"
    name: str = ""
    without_evidence = staticmethod(without_comments)

    def __post_init__(self):
        if getattr(self.model, "vector_id", None) is None:
            raise ValueError(f"{self.name or 'answers-model'} needs a bi-encoder, not {self.model.name}")
        self.name = self.name or f"answers-model-{self.how}"

    @property
    def parts(self) -> tuple:
        """Its model, as a composite ranker's parts (walk, for_serving, inference_report see it)."""
        return (self.model,)

    def stored(self, c) -> bool:
        """Whether candidate ``c`` carries this model's stored vectors of its comments (so only the question is
        encoded for it)."""
        return self._given(c) is not None

    def _given(self, c):
        g = c.meta.get("comment_answer_vectors") if c.meta.get(ANSWER_ENCODER) == self.model.vector_id else None
        return g if g is not None and len(g) == len(c.meta.get("comments", ())) else None

    def score(self, queries: list[Query]) -> list[list[float]]:
        if not queries:
            return []
        cands = [c for q in queries for c in q.candidates]
        comments = [list(c.meta.get("comments", ())) for c in cands]
        given = [self._given(c) for c in cands]
        todo = [x for g, t in zip(given, comments) if g is None for x in t]
        vecs = self.model.text_vectors([q.text for q in queries] + todo)  # one batch: questions, unstored comments
        fresh = iter(vecs[len(queries):])
        cvecs = iter([np.asarray(g, dtype=np.float32) if g is not None else [next(fresh) for _ in t]
                      for g, t in zip(given, comments)])
        return [[best_of([float(np.dot(qv, v)) for v in next(cvecs)], self.how) for _ in q.candidates]
                for q, qv in zip(queries, vecs)]


def _needs_vectors(model, name: str) -> None:
    if getattr(model, "vector_id", None) is None:
        raise ValueError(f"{name} needs a bi-encoder, not {model.name}")


def candidate_vectors(model, queries: list[Query]) -> list[np.ndarray]:
    """Per query, its candidates' vectors by a bi-encoder (a row each): a candidate's own stored vector where it
    carries one by this model (the comment vectors a generation stores), else the model's, each distinct text asked
    for once in one call (through a serving vector memo, so texts its pair scores encoded are not encoded again)."""
    own = [[stored_vector(c.meta, model.vector_id) for c in q.candidates] for q in queries]
    todo = list(dict.fromkeys(c.text for q, vs in zip(queries, own) for c, v in zip(q.candidates, vs) if v is None))
    vecs = dict(zip(todo, model.vectors_of(todo)))
    return [np.stack([np.asarray(v if v is not None else vecs[c.text], dtype=np.float64)
                      for c, v in zip(q.candidates, vs)]) if q.candidates else np.zeros((0, 0))
            for q, vs in zip(queries, own)]


@dataclass
class CommentCentrality:
    """A comment scored by how much its candidates agree with it: its mean cosine with every other candidate of the
    question, by a subtask A bi-encoder (the vectors its pair scores use, so a served one encodes nothing more). What
    a thread's other comments say carries no user id and no order, so a layer has it whatever metadata the input
    lacks. 0 for a question's only candidate. Over the question bi-encoder (``question-centrality``) it scores a
    candidate question by the new question's other candidates alike."""
    model: Any  # a bi-encoder MiniLMRanker
    name: str = ""

    def __post_init__(self):
        _needs_vectors(self.model, self.name or "comment-centrality")
        self.name = self.name or "comment-centrality"

    @property
    def parts(self) -> tuple:
        """Its model, as a composite ranker's parts (walk, for_serving, inference_report see it)."""
        return (self.model,)

    def score(self, queries: list[Query]) -> list[list[float]]:
        out = []
        for q, m in zip(queries, candidate_vectors(self.model, queries)):
            n = len(q.candidates)
            if n < 2:
                out.append([0.0] * n)
                continue
            sims = m @ m.T
            out.append(((sims.sum(axis=1) - np.diag(sims)) / (n - 1)).tolist())
        return out


@dataclass
class ClosestComment:
    """A comment scored by its closest neighbour among the question's other candidates: its highest cosine with one
    of them, by a subtask A bi-encoder (the vectors its pair scores use); with ``margin``, that minus the bi-encoder's
    score of the comment for the question (their cosine). A comment closer to another comment than to the question
    talks to the thread rather than answering it: what its place in the thread and its author's other comments say
    where that metadata is known, read from the texts alone. The closest cosine of a question's only candidate is 0.
    Over the question bi-encoder (``closest-question``) it finds a candidate question's nearest other candidate."""
    model: Any  # a bi-encoder MiniLMRanker
    margin: bool = False
    name: str = ""

    def __post_init__(self):
        default = "closest-comment-margin" if self.margin else "closest-comment"
        _needs_vectors(self.model, self.name or default)
        self.name = self.name or default

    @property
    def parts(self) -> tuple:
        return (self.model,)

    def score(self, queries: list[Query]) -> list[list[float]]:
        answered = self.model.score(queries) if self.margin else None
        out = []
        for qi, (q, m) in enumerate(zip(queries, candidate_vectors(self.model, queries))):
            closest = np.zeros(len(q.candidates))
            if len(q.candidates) > 1:
                sims = m @ m.T
                np.fill_diagonal(sims, -np.inf)
                closest = sims.max(axis=1)
            if answered is not None:
                closest = closest - np.asarray(answered[qi], dtype=np.float64)
            out.append(closest.tolist())
        return out


@dataclass
class InContext:
    """A comment read with its thread's question: ``model`` (a pair ranker, the subtask A bi-encoder) scores each
    candidate that carries its thread's question (meta ``thread_question``: every subtask C candidate) on its text
    followed by that question, one space between (the model's word-piece limit cuts the question's end first), and
    any other candidate on its text alone. A short comment leans on the question it answers ("yes, at the embassy"),
    which is why it was tried; on dev-C it ranks worse than the comment alone (0.3082 against 0.4253: the question's
    words, shared by the whole thread, swamp what tells its comments apart; docs/BENCHMARKS.md, round 38, rule 19), so
    no default uses it. Candidates in context are given no stored vector (those are of the comment alone); the
    question's own is kept."""
    model: Any
    name: str = ""

    def __post_init__(self):
        self.name = self.name or f"{self.model.name}-in-context"

    @property
    def parts(self) -> tuple:
        return (self.model,)

    @staticmethod
    def in_context(q: Query) -> Query:
        return Query(q.id, q.text, tuple(
            Candidate(c.id, f"{c.text} {c.meta['thread_question']}", {}) if c.meta.get("thread_question") else c
            for c in q.candidates), q.meta)

    def score(self, queries: list[Query]) -> list[list[float]]:
        return self.model.score([self.in_context(q) for q in queries])


@dataclass
class AnswersCosine:
    """A question candidate scored by what answered it: the MiniLM cosine of the question and each comment
    of the candidate's thread (meta "comments"; stored embeddings in "comment_vectors" when a search
    gives them), reduced by ``how``: the best one, or the mean of the best three. 0 without comments."""
    how: str = "max"
    device: str = "auto"
    name: str = ""
    cache_dir: Path | None = None  # as MiniLMCosine
    vector_memo: ScoreMemo | None = None  # as MiniLMCosine
    without_evidence = staticmethod(without_comments)

    def __post_init__(self):
        self.name = self.name or f"answers-cosine-{self.how}"

    def score(self, queries: list[Query]) -> list[list[float]]:
        """With the encoder of the query's vectors, as MiniLMCosine."""
        def group_scores(spec, group: list[Query]) -> list[list[float]]:
            items = [(q.text, stored(q.meta, "vector", spec.id)) for q in group]
            for q in group:
                for c in q.candidates:
                    given = stored(c.meta, "comment_vectors", spec.id) or [None] * len(c.meta.get("comments", ()))
                    items += list(zip(c.meta.get("comments", ()), given))
            vecs = iter(embed_missing(items, self.device, spec=spec, cache_dir=self.cache_dir, memo=self.vector_memo))
            qvecs = [next(vecs) for _ in group]
            rows = []
            for q, v in zip(group, qvecs):
                row = []
                for c in q.candidates:
                    row.append(best_of([float(np.dot(v, next(vecs))) for _ in c.meta.get("comments", ())], self.how))
                rows.append(row)
            return rows
        return per_encoder(queries, group_scores)


def service_reranker(settings, built: dict | None = None, name: str | None = None) -> Ranker:
    """The reranker of POST /rerank (one thread's comments, subtask A): $CQA_DEFAULT_RANKER, or the preset
    ``name`` (POST /rerank/questions: $CQA_DEFAULT_RANKER_B), set up for serving."""
    return for_serving(get_ranker(name or settings.default_ranker, settings, built), settings.score_memo_pairs,
                       serving_store(settings), settings.vector_memo_texts, serving_vector_store(settings))


def arabic_reranker(settings, built: dict | None = None) -> Ranker | None:
    """The ranker of Arabic input ($CQA_ARABIC_RANKER: POST /rerank, and the head of a /search whose question is
    Arabic), set up for serving; None when the setting is empty."""
    return service_reranker(settings, built, settings.arabic_ranker) if settings.arabic_ranker else None


def search_rerankers(settings, built: dict | None = None) -> dict[str, Ranker]:
    """The reranker of each /search target, set up for serving: answers ($CQA_SEARCH_RANKER_ANSWERS,
    measured on the search-answers benchmarks) and questions ($CQA_SEARCH_RANKER_QUESTIONS; a reranked threads
    search runs it too, pipeline.RANKED_AS). Rankers they share (``built``) load once."""
    store, vectors = serving_store(settings), serving_vector_store(settings)
    return {target: for_serving(get_ranker(name, settings, built), settings.score_memo_pairs, store,
                                settings.vector_memo_texts, vectors)
            for target, name in (("answers", settings.search_ranker_answers),
                                 ("questions", settings.search_ranker_questions))}


def challenger_rerankers(settings, built: dict | None = None) -> dict[str, Ranker]:
    """The challenger of each /search target set to interleave with its reranker ($CQA_INTERLEAVE_ANSWERS,
    $CQA_INTERLEAVE_QUESTIONS; ``ranking.interleave``), and under ``comments`` the default ranker's of a thread's
    comments (GET /threads/{id}/answers, POST /rerank: $CQA_INTERLEAVE_COMMENTS), set up for serving as the rerankers
    are; none unset."""
    store, vectors = serving_store(settings), serving_vector_store(settings)
    return {target: for_serving(get_ranker(name, settings, built), settings.score_memo_pairs, store,
                                settings.vector_memo_texts, vectors)
            for target, name in (("answers", settings.interleave_answers),
                                 ("questions", settings.interleave_questions),
                                 ("comments", settings.interleave_comments)) if name}


def memo_files(settings) -> list[Path]:
    """The files of the score and vector stores serving rankers share (``serving_store``, ``serving_vector_store``),
    whether or not they are on: what an erasure empties."""
    return [settings.score_store or settings.cache_dir / "score-store.sqlite3",
            settings.vector_store or settings.cache_dir / "vector-store.sqlite3"]


def serving_store(settings):
    """The score store serving rankers share ($CQA_SCORE_STORE_PAIRS pairs in $CQA_SCORE_STORE, by default
    cache/score-store.sqlite3 in the data folder), or None when it is off or there are no memos to back."""
    from .neural.memo import ScoreStore
    if not (settings.score_store_pairs and settings.score_memo_pairs):
        return None
    return ScoreStore.at(memo_files(settings)[0], settings.score_store_pairs)


def serving_vector_store(settings):
    """The vector store behind the encoders' vector memos ($CQA_VECTOR_STORE_TEXTS texts in $CQA_VECTOR_STORE, by
    default cache/vector-store.sqlite3 in the data folder), or None when it is off or there are no memos to back."""
    from .neural.memo import VectorStore
    if not (settings.vector_store_texts and settings.vector_memo_texts):
        return None
    return VectorStore.at(memo_files(settings)[1], settings.vector_store_texts)


def walk(rankers: list[Ranker]):
    """Each ranker and every part of it (parts of parts included), once."""
    seen, stack = set(), list(rankers)
    while stack:
        r = stack.pop(0)
        if id(r) not in seen:
            seen.add(id(r))
            yield r
            stack += list(getattr(r, "parts", []))


def comment_readers(ranker: Ranker) -> list:
    """The parts of ``ranker`` (itself included) that read its candidates' comments: ``answers-model-*``
    (``AnswersModel``) and ``answers-cosine-*`` (``AnswersCosine``)."""
    return [r for r in walk([ranker]) if isinstance(r, (AnswersModel, AnswersCosine))]


def reads_comments(ranker: Ranker, q: Query) -> bool:
    """Whether ``ranker`` weighs the comments ``q``'s candidates carry: a router (``ByComments``) by the ranker it
    routes ``q`` to; any other where it has a comment reader (``comment_readers``) and a candidate carries some."""
    if hasattr(ranker, "route"):
        ranker = ranker.route(q)
    return not without_comments(q).all() and bool(comment_readers(ranker))


def per_request(ranker: Ranker) -> Ranker:
    """``ranker`` with the lexical statistics of it and of every part of it taken per request: a request's scores
    never depend on what else is scored with it. The service scores so (``for_serving``), and so must every figure
    of a ranker as served: ``cqa evaluate`` on a subtask A, B or C file and ``cqa predict`` (not subtask D, whose
    rankers draw on the file's pairs by design)."""
    for r in walk([ranker]):
        if hasattr(r, "per_query"):
            r.per_query = True
    return ranker


def for_serving(ranker: Ranker, memo_pairs: int = 0, store=None, memo_texts: int = 0, vector_store=None) -> Ranker:
    """Lexical statistics taken per request (a request's scores never depend on its batch) and no
    evaluation score cache, in the ranker and every part of it. With ``memo_pairs``, each neural model (the
    BiLSTM, the MiniLM models) keeps the scores of that many recent (question, answer) pairs in memory
    (ranking/neural/memo.py); a model that two serving rankers share keeps one memo. With a ``store``
    (``serving_store``), each memo also reads and writes the scores every serving process of the data folder
    shares, keyed by the model's identity (``cache_key``). With ``memo_texts``, each encoder whose scores are dot
    products of text vectors (a MiniLM bi-encoder, the dense encoder's cosine) keeps the vectors of that many recent
    texts: a text met again, with any question, is not encoded again; with a ``vector_store``
    (``serving_vector_store``), nor one that another serving process of the data folder encoded, keyed by what
    encoded it (``vector_identity``)."""
    from .neural.memo import ScoreMemo
    per_request(ranker)
    for r in walk([ranker]):
        if getattr(r, "cache_dir", None) is not None:
            r.cache_dir = None
        if memo_pairs and hasattr(r, "memo") and r.memo is None:
            key = getattr(r, "cache_key", None) or ""
            r.memo = ScoreMemo(memo_pairs, model=key, store=store if key else None)
        if memo_texts and encodes_texts(r) and r.vector_memo is None:  # values: vectors, keyed by (text, encoder id)
            r.vector_memo = ScoreMemo(memo_texts, model=vector_identity(r) if vector_store else "", store=vector_store)
    return ranker


@contextmanager
def memos_detached(rankers: list[Ranker]):
    """Meanwhile, every part of ``rankers`` scores without its score and vector memos: nothing read from them or kept
    in them (nor in the stores behind them), no count moved. For the service's warm-up, which runs before it serves;
    not for rankers that serve requests meanwhile."""
    held = [(r, attr, memo) for r in walk(rankers) for attr in ("memo", "vector_memo")
            if (memo := getattr(r, attr, None)) is not None]
    try:
        for r, attr, _ in held:
            setattr(r, attr, None)
        yield
    finally:
        for r, attr, memo in held:
            setattr(r, attr, memo)


def vector_identity(r) -> str:
    """What an encoder's vectors depend on beyond the encoder id each key holds (its weights and input length): for a
    MiniLM bi-encoder its scores' key (``cache_key``: also its scoring code, device and inference variant), for the
    dense encoder's cosines the device it encodes on."""
    key = getattr(r, "cache_key", None)
    if key:
        from .neural.ranker import bi_encoder_identity
        return bi_encoder_identity(key)
    from indexing.encoder import resolve_device
    return f"index-encoder:{resolve_device(getattr(r, 'device', 'auto'))}"


def encodes_texts(r) -> bool:
    """Whether ``r`` scores by dot products of vectors it encodes for each text on its own, whatever the pair, so it
    can keep a memo of them (``vector_memo``): a MiniLM bi-encoder (not a cross-encoder: it reads both texts of a
    pair at once, and has no ``vector_id``), MiniLMCosine, AnswersCosine."""
    return hasattr(r, "vector_memo") and getattr(r, "vector_id", "") is not None


def score_memos(rankers: list[Ranker]) -> dict[str, dict]:
    """Each neural model's score memo inside ``rankers``, once: its name and the memo's counts (an encoder's memo
    of text vectors as ``NAME vectors``)."""
    out = {}
    for r in walk(rankers):
        if getattr(r, "memo", None) is not None:
            out[r.name] = r.memo.stats()
        if getattr(r, "vector_memo", None) is not None:
            out[f"{r.name} vectors"] = r.vector_memo.stats()
    return out


def inference_report(rankers: list[Ranker]) -> list[dict]:
    """Each MiniLM model inside ``rankers`` (parts included), once: its name, inference variant, device and
    the reason it differs from the variant asked for."""
    return [{"model": r.name, "variant": r.inference.label, "device": r.device, "note": r.note}
            for r in walk(rankers) if hasattr(r, "inference")]


def get_ranker(name: str, settings, built: dict | None = None) -> Ranker:
    """The ranker of a preset (ranking/presets.py), built with its parts; ``name`` may carry variants
    (``cross-encoder+signals[int8]``)."""
    from .presets import build_label
    return build_label(name, settings, built)


def labels_from_scores(scores: list[float]) -> list[bool]:
    """The true|false column: a candidate is called relevant when it scores at or above its
    question's mean, a threshold-free rule that works for any score scale."""
    if not scores:
        return []
    m = float(np.mean(scores))
    return [s >= m for s in scores]
