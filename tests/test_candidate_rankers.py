import math

import numpy as np
import pytest

from indexing.translation import TranslationTable
from ranking.candidate_rankers import FusedRanker, LexicalRanker, translation_lm_scores
from ranking.candidates import Candidate, Query
from ranking.config import load_retriever_defaults
from ranking.rankers import IRBaseline

QUERIES = [Query("q1", "renew residence visa", (Candidate("c1", "buy a car"), Candidate("c2", "visa renewal office"),
                                                Candidate("c3", "residence visa renew online"))),
           Query("q2", "cheap car", (Candidate("d1", "cheap used car dealer"), Candidate("d2", "visa")))]


def test_lexical_ranker_orders_candidates():
    for model in ("bm25", "lm"):
        s = LexicalRanker(model, model).score(QUERIES)
        assert [len(x) for x in s] == [3, 2]
        assert int(np.argmax(s[0])) == 2 and int(np.argmax(s[1])) == 0


def test_translation_lm_by_hand():
    table = TranslationTable.train([(["permit"], ["visa"])] * 3, min_count=1)  # t(visa | permit) = 1
    pc = {"visa": 0.1}.get
    got = translation_lm_scores(["visa"], ["permit"], table, lambda w: pc(w, 0.0), beta=0.5, lam=0.2)
    # p_tr(visa|d) = 1, p_ml(visa|d) = 0: log(0.8 * (0.5 * 1 + 0.5 * 0) + 0.2 * 0.1)
    assert got == pytest.approx(math.log(0.8 * 0.5 + 0.02))
    without = translation_lm_scores(["visa"], ["car"], table, lambda w: pc(w, 0.0), beta=0.5, lam=0.2)
    assert without == pytest.approx(math.log(0.02)) and got > without


def test_fused_ranker_weights_and_methods():
    lex = LexicalRanker("bm25", "bm25")
    only_ir = FusedRanker([IRBaseline(), lex], [1.0, 0.0]).score(QUERIES)
    assert [int(np.argmax(s)) for s in only_ir] == [0, 0]  # weight 0 silences bm25
    mixed = FusedRanker([IRBaseline(), lex], [0.1, 1.0], method="rrf").score(QUERIES)
    assert int(np.argmax(mixed[0])) == 2


def test_fused_ranker_ranks_candidates_in_no_search_order_by_its_unordered_weights():
    """A question whose candidates come in no search order (meta search_order false) takes the unordered weights,
    which give the given order no weight: its ranking no longer moves with that order, and a part neither weight set
    of a question uses is not scored for it. Others keep the weights that use the order."""
    from dataclasses import dataclass
    from dataclasses import field as dfield

    @dataclass
    class Counting:
        inner: object
        seen: list = dfield(default_factory=list)

        def score(self, queries):
            self.seen.append([q.id for q in queries])
            return self.inner.score(queries)
    ir, lex = Counting(IRBaseline()), Counting(LexicalRanker("bm25", "bm25"))
    fused = FusedRanker([ir, lex], [1.0, 0.5], unordered_weights=[0.0, 1.0])
    q = QUERIES[0]
    flipped = Query(q.id, q.text, q.candidates[::-1], {"search_order": False})
    unordered = Query(q.id, q.text, q.candidates, {"search_order": False})
    said, given, other = fused.score([q, unordered, flipped])
    assert int(np.argmax(said)) == 0  # the search order outweighs BM25 here
    by_id = [dict(zip((c.id for c in x.candidates), s)) for x, s in ((unordered, given), (flipped, other))]
    assert by_id[0] == pytest.approx(by_id[1]) and max(by_id[0], key=by_id[0].get) == "c3"  # BM25 alone, any order
    assert ir.seen == [[q.id]] and lex.seen == [[q.id] * 3]  # the order's part: only for the ordered question
    assert FusedRanker([ir, lex], [1.0, 0.5]).score([unordered]) == fused.score([q])  # no unordered weights: as given


def test_a_part_with_no_evidence_for_a_candidate_gives_it_no_say_when_neutral():
    """FusedRanker(missing=0.0): a part that reads what answered a thread (AnswersCosine, AnswersModel: their
    ``without_evidence``) gives a thread without comments 0, where its score for no comments would sink it; the
    other candidates are normalised among themselves."""
    from ranking.rankers import AnswersCosine, without_comments

    class Comments:  # what answered each thread: its number of comments (0 for none, as AnswersCosine gives)
        without_evidence = staticmethod(without_comments)

        def score(self, queries):
            return [[float(len(c.meta.get("comments", ()))) for c in q.candidates] for q in queries]

    class Given:  # the first stage: the given order
        def score(self, queries):
            return [[-float(i) for i in range(len(q.candidates))] for q in queries]
    q = Query("q", "visa", (Candidate("new", "visa renewal", {"comments": []}),
                            Candidate("a", "visa office", {"comments": ["x", "y", "z"]}),
                            Candidate("b", "visa fee", {"comments": ["x"]})))
    as_scored = FusedRanker([Given(), Comments()], [1.0, 1.0]).score([q])[0]
    neutral = FusedRanker([Given(), Comments()], [1.0, 1.0], missing=0.0).score([q])[0]
    assert max(range(3), key=as_scored.__getitem__) == 1  # the thread without comments sinks below "a"
    assert max(range(3), key=neutral.__getitem__) == 0  # no say: the first stage puts it first
    # a and b: one place apart in the given order (its z-scores over all three), +1 and -1 among the two with comments
    assert neutral[1] - neutral[2] == pytest.approx(1 / np.std([0, -1, -2]) + 2.0)
    assert AnswersCosine.without_evidence(q).tolist() == [True, False, False]
    # an imputed value below 0: a penalty of that many of the others' standard deviations, and nothing else moves
    imputed = FusedRanker([Given(), Comments()], [1.0, 1.0], missing=-1.0).score([q])[0]
    assert imputed == pytest.approx([neutral[0] - 1.0, neutral[1], neutral[2]])
    assert sorted(range(3), key=imputed.__getitem__, reverse=True) == [1, 0, 2]  # between the sinking and no say


def test_retriever_defaults_are_the_tuned_ones(tmp_path):
    import json

    from ranking.config import DEFAULTS_FILE
    from ranking.retriever import RetrieverConfig
    d = json.loads(DEFAULTS_FILE.read_text())
    cfg = load_retriever_defaults()
    c = d["config"]
    assert (cfg.sources, cfg.fusion, cfg.weights, cfg.expansion, cfg.depth) == (
        tuple(c["sources"]), c["fusion"], tuple(c["weights"]), c["expansion"], c["depth"])
    # chosen on dev: the fusion beats every single source it fuses on the dev figure it was chosen by
    assert "dev" in d["chosen_by"] and all(d["dev"]["MAP@10"] > s["MAP@10"] for s in d["dev_single_sources"].values())
    # without the file, the untuned default, which is not the tuned one
    assert load_retriever_defaults(tmp_path / "missing.json") == RetrieverConfig() != cfg


def test_comment_centrality_is_each_comments_mean_cosine_with_the_others():
    """CommentCentrality: a comment's mean dot product with every other candidate of its question, from the
    bi-encoder's vectors (each distinct text asked for once, in one call); 0 for a question's only candidate; a
    model without vectors (a cross-encoder) is refused."""
    from ranking.rankers import CommentCentrality

    class Vectors:  # a bi-encoder: unit vectors by text
        vector_id = "fake"
        name = "fake-bi-encoder"
        table = {"a": [1.0, 0.0], "b": [0.6, 0.8], "c": [0.0, 1.0]}

        def __init__(self):
            self.calls = []

        def vectors_of(self, texts):
            self.calls.append(list(texts))
            return [np.asarray(self.table[t]) for t in texts]
    model = Vectors()
    three = Query("q1", "x", tuple(Candidate(t, t) for t in "abc"))
    again = Query("q2", "y", (Candidate("b2", "b"), Candidate("a2", "a")))
    alone = Query("q3", "z", (Candidate("c3", "c"),))
    got = CommentCentrality(model).score([three, again, alone])
    assert got[0] == pytest.approx([(0.6 + 0.0) / 2, (0.6 + 0.8) / 2, (0.0 + 0.8) / 2])
    assert got[1] == pytest.approx([0.6, 0.6]) and got[2] == [0.0]
    assert model.calls == [["a", "b", "c"]]  # one call, each text once

    class Cross:
        vector_id = None
        name = "cross"
    with pytest.raises(ValueError, match="needs a bi-encoder"):
        CommentCentrality(Cross())


def test_closest_comment_is_each_comments_highest_cosine_with_another_and_its_margin_over_the_question():
    """ClosestComment: a comment's highest dot product with another candidate of its question (0 for an only
    candidate); with ``margin``, minus the bi-encoder's score of the comment for the question. A candidate carrying
    its own stored vector by this model is not encoded again; each other distinct text is asked for once, in one
    call; a model without vectors is refused."""
    from ranking.candidates import ANSWER_ENCODER, ANSWER_VECTOR
    from ranking.rankers import ClosestComment

    class Vectors:  # a bi-encoder: unit vectors by text, its score the question's vector dotted with each comment's
        vector_id = "fake"
        name = "fake-bi-encoder"
        table = {"a": [1.0, 0.0], "b": [0.6, 0.8], "c": [0.0, 1.0], "x": [0.8, 0.6], "y": [0.0, 1.0]}

        def __init__(self):
            self.calls = []

        def vectors_of(self, texts):
            self.calls.append(list(texts))
            return [np.asarray(self.table[t]) for t in texts]

        def score(self, queries):
            return [[float(np.dot(self.table[q.text], self.table[c.text])) for c in q.candidates] for q in queries]
    model = Vectors()
    # "c" arrives with the vector a generation stores for it: [1, 0], not the model's [0, 1], and it is used
    stored_c = Candidate("c1", "c", {ANSWER_ENCODER: "fake", ANSWER_VECTOR: [1.0, 0.0]})
    three = Query("q1", "x", (Candidate("a1", "a"), Candidate("b1", "b"), stored_c))
    again = Query("q2", "y", (Candidate("b2", "b"), Candidate("a2", "a")))
    alone = Query("q3", "x", (Candidate("c3", "c"),))
    closest = ClosestComment(model).score([three, again, alone])
    assert closest[0] == pytest.approx([1.0, 0.6, 1.0])  # a and the stored c are the same vector
    assert closest[1] == pytest.approx([0.6, 0.6]) and closest[2] == [0.0]
    assert model.calls == [["a", "b", "c"]]  # the stored c of q1 not asked for; the c of q3 has none, so it is
    margin = ClosestComment(model, margin=True).score([three, again, alone])
    assert margin[0] == pytest.approx([1.0 - 0.8, 0.6 - 0.96, 1.0 - 0.6])
    assert margin[1] == pytest.approx([0.6 - 0.8, 0.6 - 0.0]) and margin[2] == pytest.approx([0.0 - 0.6])
    assert ClosestComment(model, margin=True).name == "closest-comment-margin"

    class Cross:
        vector_id = None
        name = "cross"
    with pytest.raises(ValueError, match="closest-comment needs a bi-encoder"):
        ClosestComment(Cross())


def test_in_context_reads_a_comment_with_its_threads_question_and_without_its_stored_vector():
    """InContext (bi-encoder-in-context): a candidate carrying ``thread_question`` reaches the model as its text, a
    space and that question, with no meta (a stored vector is of the comment alone); any other candidate, and the
    question with its meta, reach it as given; the model's scores come back unchanged, aligned."""
    from ranking.candidates import ANSWER_ENCODER, ANSWER_VECTOR
    from ranking.rankers import InContext

    class Recorder:
        name = "fake-bi-encoder"

        def __init__(self):
            self.seen = []

        def score(self, queries):
            self.seen += queries
            return [[float(len(c.text)) for c in q.candidates] for q in queries]
    model = Recorder()
    stored = {ANSWER_ENCODER: "fake", ANSWER_VECTOR: [1.0, 0.0], "thread_question": "visa renewal, where?"}
    q = Query("q1", "where do I renew my visa", (Candidate("c1", "at the embassy", stored),
                                                 Candidate("c2", "no idea", {"author": "u2"})), {"vector": [0.5]})
    ranker = InContext(model)
    assert ranker.name == "fake-bi-encoder-in-context" and ranker.parts == (model,)
    got = ranker.score([q])
    (seen,) = model.seen
    assert seen.text == q.text and seen.meta == q.meta and seen.id == q.id
    assert [c.text for c in seen.candidates] == ["at the embassy visa renewal, where?", "no idea"]
    assert seen.candidates[0].meta == {} and seen.candidates[1] is q.candidates[1]
    assert got == [[float(len("at the embassy visa renewal, where?")), 7.0]]
