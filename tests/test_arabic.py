"""Subtask D (Arabic): the dev file as queries, folds by original question, a translation table that never sees a
test fold's pairs, and the CLI's refusal of options that do not apply."""
from __future__ import annotations

import subprocess

import pytest

from indexing.catalog import ARABIC_DEV_D as DEV_D
from indexing.catalog import ARABIC_DEV_D_GOLD as DEV_D_GOLD
from ranking.arabic import ARABIC, d_queries, folds_of, translation_table
from ranking.candidates import Candidate, Query
from ranking.evaluation.scorer import read_lines

from .conftest import CQA, ROOT


def test_dev_d_queries_match_the_gold(semeval):
    queries = d_queries(semeval / DEV_D)
    assert len(queries) == 250 and sum(len(q.candidates) for q in queries) == 7384
    gold = {(g.qid, g.cid) for g in read_lines(semeval / DEV_D_GOLD)}
    assert {(q.id, c.id) for q in queries for c in q.candidates} == gold
    first = queries[0]
    assert [c.meta["position"] for c in first.candidates] == list(range(1, len(first.candidates) + 1))
    assert first.candidates[0].meta["question"] and first.candidates[0].meta["answer"]
    assert ARABIC("والعلاجات المضادة") and all(t.isalpha() for t in ARABIC("والعلاجات المضادة"))


def test_folds_split_by_question_and_repeat():
    queries = [Query(str(i), "q", ()) for i in range(23)]
    folds = folds_of(queries)
    assert len(folds) == 5 and sorted(i for f in folds for i in f) == list(range(23))
    assert {len(f) for f in folds} <= {4, 5}
    assert folds == folds_of(queries) and folds != folds_of(queries, seed=1)


def test_translation_table_never_sees_a_test_folds_pair():
    def q(i, pairs):
        return Query(f"q{i}", "x", tuple(Candidate(cid, f"{a} {b}", {"question": a, "answer": b}) for cid, a, b in pairs))
    shared = ("p1", "ضغط الدم المرتفع", "دواء الضغط يومي")
    train = [q(1, [shared] * 3 + [("p2", "ضغط الدم المرتفع", "دواء الضغط يومي")] * 3),
             q(2, [("p3", "ضغط الدم المرتفع", "دواء الضغط يومي")])]
    full = translation_table(train, exclude=set())
    held = translation_table(train, exclude={"p1", "p2", "p3"})
    assert full.params.get("pairs", 0) == 3 and held.params.get("pairs", 0) == 0  # each pair id once


def test_cli_refuses_a_ranker_for_dev_d(tmp_path, cli_env):
    p = subprocess.run(CQA + ["evaluate", "--benchmark", "semeval2016-dev-D", "--ranker", "bm25"], env=cli_env,
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "cross-validation" in p.stderr


def test_cqa_predict_writes_subtask_d_predictions_the_official_scorer_reads(tmp_path, cli_env, semeval):
    """`cqa predict --subtask D` as a user runs it: every pair of the dev-D file ranked by $CQA_ARABIC_RANKER with the
    file's statistics, written in the gold's order (each question's pairs by QAID), so that `cqa evaluate --gold
    --pred` scores it; its MAP is the cross-validation's bm25, computed here in process."""
    import json

    from ranking.arabic import in_gold_order
    from ranking.candidate_rankers import LexicalRanker
    from ranking.evaluation.runner import align_to_gold
    from ranking.evaluation.scorer import Line, score
    pred = tmp_path / "d.pred"
    p = subprocess.run(CQA + ["predict", "--subtask", "D", "--input", str(semeval / DEV_D), "--output", str(pred)],
                       env=cli_env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    said = json.loads(p.stdout.strip().splitlines()[-1])
    assert said["ranker"] == "bm25-arabic" and said["queries"] == 250 and said["lines"] == 7384
    p = subprocess.run(CQA + ["evaluate", "--gold", str(semeval / DEV_D_GOLD), "--pred", str(pred), "--json"],
                       env=cli_env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    figures = json.loads(p.stdout.strip().splitlines()[-1])
    queries, gold = d_queries(semeval / DEV_D), read_lines(semeval / DEV_D_GOLD)
    scores = LexicalRanker("bm25", "bm25", ARABIC).score(queries)
    lines = [Line(q.id, c.id, float(v), False) for q, row in zip(queries, scores) for c, v in zip(q.candidates, row)]
    assert figures["MAP"] == round(score(gold, align_to_gold(lines, gold)).MAP, 4)  # --json prints four places
    assert [(ln.qid, ln.cid) for ln in in_gold_order(lines)] == [(g.qid, g.cid) for g in gold]
    english = semeval / "dev" / "SemEval2016-Task3-CQA-QL-dev.xml"  # another subtask's file: a clear error
    p = subprocess.run(CQA + ["predict", "--subtask", "D", "--input", str(english), "--output", str(tmp_path / "x")],
                       env=cli_env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 2 and "not in the subtask D format" in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = subprocess.run(CQA + ["predict", "--subtask", "A", "--input", str(semeval / DEV_D), "--output",  # and back
                              str(tmp_path / "y")], env=cli_env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 2 and "its subtask is D, not A" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_input_is_taken_as_arabic_when_most_of_its_letters_are():
    """is_arabic counts letters, not characters: digits, spaces and punctuation do not vote; an English question with
    an Arabic word in it stays English, an Arabic one with a drug name in Latin letters stays Arabic."""
    from ranking.arabic import arabic_share, is_arabic
    assert arabic_share(["123 !?"]) == 0.0 and arabic_share([]) == 0.0
    assert arabic_share(["abc", "ابت"]) == 0.5
    assert is_arabic(Query("q", "ما هو علاج الصداع", (Candidate("a", "تناول panadol مرتين"),)))
    assert not is_arabic(Query("q", "where to buy شاورما in Doha", (Candidate("a", "try the souq, 2 shops"),)))
    assert not is_arabic(Query("q", "ابت", (Candidate("a", "abc"),)))  # half is not most
    assert arabic_share(["a ١٢٣ ، ؟"]) == 0.0  # Arabic-Indic digits and Arabic punctuation are not letters
    from ranking.arabic import VOTING_CHARS  # each text votes with its start only, so a huge request costs little
    assert not is_arabic(Query("q", "x" * VOTING_CHARS + "ب" * 10 * VOTING_CHARS, ()))


@pytest.mark.parametrize("arabic_stem", [True, False], ids=["stemmed-in-the-index", "older-generation"])
def test_arabic_bm25_takes_its_statistics_from_the_forums_arabic_documents(settings, arabic_stem):
    """ArabicBM25 with a generation (as POST /rerank gives it): idf and mean length from the generation's documents
    that hold Arabic, its words stemmed (a plural and its singular count as one term: by the index's analyzer, or
    stemmed again for a generation built before it stemmed Arabic), not from the candidates; with fewer Arabic
    documents in the forum than candidates, or no generation, the candidates' statistics. Both generations give the
    same figures."""
    import math

    import numpy as np

    from indexing.reindex import reindex
    from indexing.searcher import load_current
    from indexing.store import ThreadStore
    from indexing.models import Answer, Thread
    from indexing.text import Analyzer
    from ranking.arabic import ArabicBM25, ForumStatistics, restem
    from ranking.candidate_rankers import LexicalRanker

    from .test_indexes import fake_encode
    arabic = ["علاج الصداع المزمن", "العلاجات المتاحة للصداع", "الطقس حار في الدوحة", "السفر إلى الدوحة",
              "الجرعة ٢٨ يوما", "عمري 28 سنة"]  # the stem of "٢٨" (Arabic-Indic digits) is "28": two documents
    with ThreadStore(settings.store_path) as store:
        store.upsert([Thread(id=f"a{i}", subject="", body=t, answers=[Answer(id=f"a{i}_1", text="شكرا")])
                      for i, t in enumerate(arabic)] +
                     [Thread(id=f"e{i}", subject=f"visa question {i}", body="how to renew", answers=[])
                      for i in range(5)])
    reindex(settings, progress=False, encode_fn=fake_encode, analyzer=Analyzer(arabic_stem=arabic_stem))
    gen = load_current(settings.index_root)
    assert gen.analyzer.arabic_stem is arabic_stem
    assert ("العلاجات" in gen.terms.term_id) is not arabic_stem  # the plural itself only where Arabic is not stemmed
    stats = ForumStatistics.of(gen)
    assert ForumStatistics.of(gen) is stats  # once per generation
    assert stats.n_docs == 12  # six questions and six comments hold Arabic; the five English threads do not count
    assert stats.df("28") == 2  # "٢٨" and "28" alike, however the generation was built
    assert stats.df("العلاجات") == 0  # a whole word is no stem, even where the generation holds it whole
    assert restem("العلاجات") == restem("علاج") and stats.df(restem("علاج")) == 2  # a plural and its singular: one term
    assert stats.tokens("الدوحة") == [restem("الدوحه")] and stats.df(stats.tokens("الدوحة")[0]) == 2
    assert stats.df("visa") == 0  # in the forum, in no Arabic document
    q = Query("q", "علاج الصداع", (Candidate("x", "علاج الصداع"), Candidate("y", "الطقس حار"),
                                   Candidate("z", "علاج")))
    with_forum = ArabicBM25().score([Query(q.id, q.text, q.candidates, {"generation": gen})])[0]
    idf = math.log1p((12 - 2 + 0.5) / (2 + 0.5))  # both query terms are in two of the twelve Arabic documents

    def part(tf, dl):
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / stats.avgdl))
    assert with_forum == pytest.approx([2 * part(1, 2), 0.0, part(1, 1)])
    assert stats.avgdl == pytest.approx(np.mean(gen.terms.doc_len[stats._arabic_doc]))
    many = Query("m", q.text, tuple(Candidate(f"c{i}", "علاج") for i in range(13)), {"generation": gen})
    by_candidates = LexicalRanker("bm25", "bm25", ARABIC).score([many])
    assert ArabicBM25().score([many]) == by_candidates  # 13 candidates, 12 Arabic documents: the candidates'
    assert ArabicBM25().score([q]) == LexicalRanker("bm25", "bm25", ARABIC).score([q])  # no generation


@pytest.mark.slow
def test_cqa_evaluate_dev_d_cross_validates_to_the_documented_figures_each_with_its_interval(cli_env):
    """`cqa evaluate --benchmark semeval2016-dev-D` as a user runs it: the 5-fold cross-validation's figures as
    docs/BENCHMARKS.md gives them (bm25 0.4424, lm 0.4457, translation-lm 0.4226, fusion 0.4386, the IR order
    0.2855), each ranker's MAP inside its own 95% interval over the 250 questions, and the headline (the best ranker,
    lm) with that ranker's interval, as GET /evaluation serves it."""
    import json
    from pathlib import Path
    p = subprocess.run(CQA + ["evaluate", "--benchmark", "semeval2016-dev-D", "--json"], env=cli_env,
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    got = {name: r["MAP"] for name, r in out["rankers"].items()}
    assert {n: got[n] for n in ("bm25", "lm", "translation-lm", "fusion", "ir-baseline")} == {
        "bm25": 0.4424, "lm": 0.4457, "translation-lm": 0.4226, "fusion": 0.4386, "ir-baseline": 0.2855}
    for name, r in out["rankers"].items():
        lo, hi = r["MAP_interval_95"]
        assert lo < r["MAP"] < hi < lo + 0.15, (name, r)
    assert out["ranker"] == "lm" and out["MAP_interval_95"] == out["rankers"]["lm"]["MAP_interval_95"]
    latest = json.loads((Path(out["report"]).parent / "latest.json").read_text())
    assert latest["MAP_interval_95"] == out["MAP_interval_95"] and "MAP_interval_95" not in latest["figures"]
