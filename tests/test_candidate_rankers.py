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
