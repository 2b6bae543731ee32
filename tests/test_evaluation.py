import json
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from ranking.evaluation.measures import paired_randomization, paired_t
from ranking.evaluation.scorer import score_files

from .conftest import CQA
from .test_scorer import GOLD


def run_cli(args, env):
    p = subprocess.run(CQA + args, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("subtask,expected", [("A", 0.5953), ("B", 0.7475), ("C", 0.4036)])
def test_ir_baseline_reproduces_official(cli_env, subtask, expected, tmp_path):
    out = run_cli(["evaluate", "--benchmark", f"semeval2016-test-{subtask}", "--ranker", "ir-baseline", "--json"],
                  cli_env)
    assert round(out["MAP"], 4) == expected
    folder = out["report"]
    from pathlib import Path
    f = Path(folder)
    assert {"report.json", "report.md", "chart.png", "predictions.txt", "run.trec", "qrels.trec"} <= {
        p.name for p in f.iterdir()}
    assert (f / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    latest = json.loads((f.parent / "latest.json").read_text())
    assert latest["ranker"] == "ir-baseline" and latest["MAP"] == out["MAP"]
    lo, hi = out["MAP_interval_95"]
    assert lo < out["MAP"] < hi and latest["MAP_interval_95"] == [lo, hi]
    assert f"95% interval {lo:.4f}-{hi:.4f}" in (f / "report.md").read_text()
    for key in ("nDCG@10", "P@1", "R@10", "MRR", "AvgRec", "Acc"):
        assert key in out


def test_trec_export_is_readable_by_ir_measures(cli_env):
    from pathlib import Path

    import ir_measures
    out = run_cli(["evaluate", "--benchmark", "semeval2016-dev-B", "--ranker", "ir-baseline", "--json"], cli_env)
    f = Path(out["report"])
    qrels = list(ir_measures.read_trec_qrels(str(f / "qrels.trec")))
    run = list(ir_measures.read_trec_run(str(f / "run.trec")))
    agg = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, run)
    assert agg[ir_measures.nDCG @ 10] == pytest.approx(out["nDCG@10"])


def test_predict_on_blind_xml(semeval, cli_env, tmp_path):
    """Labels, users and dates removed: predictions still come out and score like the labelled run."""
    tree = etree.parse(str(semeval / "test/SemEval2016-Task3-CQA-QL-test.xml"))
    for el in tree.iter("RelQuestion", "RelComment"):
        for attr in list(el.attrib):
            if "RELEVANCE" in attr or "USER" in attr or "DATE" in attr:
                del el.attrib[attr]
    blind = tmp_path / "blind.xml"
    tree.write(str(blind), encoding="utf-8", xml_declaration=True)
    pred = tmp_path / "pred.txt"
    out = run_cli(["predict", "--subtask", "C", "--input", str(blind), "--output", str(pred),
                   "--ranker", "ir-baseline"], cli_env)
    assert out["lines"] == 7000 and out["queries"] == 70
    assert round(score_files(semeval / GOLD["C"], pred).MAP, 4) == 0.4036


def test_compare_reports_p_values(cli_env):
    """--compare runs the second ranker as its own run would and tests the per-question AP difference."""
    out = run_cli(["evaluate", "--benchmark", "semeval2016-dev-A", "--ranker", "bm25",
                   "--compare", "ir-baseline", "--json"], cli_env)
    alone = run_cli(["evaluate", "--benchmark", "semeval2016-dev-A", "--ranker", "ir-baseline", "--json"], cli_env)
    assert out["compare"]["ranker"] == "ir-baseline" and out["compare"]["MAP"] == alone["MAP"] != out["MAP"]
    ap = json.loads((Path(out["report"]) / "report.json").read_text())["per_question_ap"]
    base = json.loads((Path(alone["report"]) / "report.json").read_text())["per_question_ap"]
    qs = sorted(set(ap) & set(base))
    assert out["compare"]["questions"] == len(qs) > 200
    a, b = [ap[q] for q in qs], [base[q] for q in qs]
    assert out["compare"]["p_randomization"] == paired_randomization(a, b)
    assert out["compare"]["p_ttest"] == paired_t(a, b) < 1.0
    from ranking.evaluation.measures import map_interval
    lo, hi = out["compare"]["difference_interval_95"]  # the interval of MAP(bm25) - MAP(ir-baseline)
    assert [lo, hi] == map_interval({q: ap[q] - base[q] for q in qs}) and lo < out["MAP"] - alone["MAP"] < hi


def test_a_lexical_ranker_is_measured_as_served_its_statistics_per_question(settings, semeval, cli_env, tmp_path):
    """`cqa evaluate` and `cqa predict` score a lexical ranker with each question's own candidates' statistics, as the
    /rerank endpoints do (round 64): the figure is what a forum would get with that ranker, not the one its
    statistics pooled over the whole file give (dev-A lm: 0.4978 as served, 0.5549 pooled)."""
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    from ranking.evaluation.runner import align_to_gold, run_benchmark
    from ranking.evaluation.scorer import Line, per_question_ap, read_lines
    from ranking.presets import build_label
    bench = BENCHMARKS["semeval2016-dev-A"]
    xml, gold_file = bench.paths(settings.semeval_dir)
    queries, gold = queries_for(xml, "A"), read_lines(gold_file)
    lm = build_label("lm", settings)
    alone = {q.id: lm.score([q])[0] for q in queries}  # one thread a request, as POST /rerank ranks it
    pooled = lm.score(queries)
    lines = [Line(q.id, c.id, float(x), False) for q in queries for c, x in zip(q.candidates, alone[q.id])]
    served_ap = per_question_ap(gold, align_to_gold(lines, gold))
    r = run_benchmark(bench, build_label("lm", settings), settings.semeval_dir, settings.reports_dir)
    assert r["per_question_ap"] == served_ap
    assert round(r["MAP"], 4) == round(sum(served_ap.values()) / len(served_ap), 4) == 0.4978
    assert any(list(a) != list(b) for a, b in zip(pooled, alone.values()))  # pooled statistics rank otherwise
    pred = tmp_path / "pred.txt"
    run_cli(["predict", "--subtask", "A", "--input", str(xml), "--output", str(pred), "--ranker", "lm"], cli_env)
    assert round(score_files(gold_file, pred).MAP, 4) == 0.4978


def test_significance_tests():
    a = [0.9, 0.8, 0.95, 0.85, 0.9, 0.99, 0.7, 0.88, 0.92, 0.81] * 3
    b = [x - 0.2 for x in a]
    assert paired_randomization(a, b) < 0.001 and paired_t(a, b) < 0.001
    noisy = [x + (0.05 if i % 2 else -0.05) for i, x in enumerate(a)]
    assert paired_randomization(a, noisy) > 0.5


def test_unknown_benchmark_or_ranker_is_a_clear_error(cli_env):
    p = subprocess.run(CQA + ["evaluate", "--benchmark", "semeval2016-test-A", "--ranker", "magic"],
                       env=cli_env, capture_output=True, text=True)
    assert p.returncode == 2 and "unknown ranker 'magic'" in p.stderr


@pytest.mark.slow
def test_zero_shot_minilm_on_test_a(cli_env):
    out = run_cli(["evaluate", "--benchmark", "semeval2016-test-A", "--ranker", "minilm-cosine", "--json"], cli_env)
    assert round(out["MAP"], 4) == 0.6794


@pytest.mark.parametrize("subtask,xml,gold,keep", [
    ("A", "dev/SemEval2016-Task3-CQA-QL-dev-subtaskA.xml",
     "dev/SemEval2016-Task3-CQA-QL-dev-subtaskA.xml.subtaskA.relevancy", 12),
    # B: the whole dev file (50 questions); a few questions cannot tell two rankers near 0.94 MAP apart
    ("B", "dev/SemEval2016-Task3-CQA-QL-dev.xml", "dev/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy", 500),
    ("C", "dev/SemEval2016-Task3-CQA-QL-dev.xml", "dev/SemEval2016-Task3-CQA-QL-dev.xml.subtaskC.relevancy", 30),
])
def test_default_ranker_on_a_text_only_blind_file(subtask, xml, gold, keep, semeval, cli_env, tmp_path):
    """Each subtask's default ranker on a slice of dev with every user id, name, date and label removed
    (text only, as a blind test set comes): a prediction for every candidate, above the given order."""
    from indexing.loaders import load_semeval
    tree = etree.parse(str(semeval / xml))
    root = tree.getroot()
    for el in list(root)[keep:]:
        root.remove(el)
    for el in root.iter():
        for attr in list(el.attrib):
            if any(w in attr for w in ("RELEVANCE", "USER", "DATE")):
                del el.attrib[attr]
    blind = tmp_path / "blind.xml"
    tree.write(str(blind), encoding="utf-8", xml_declaration=True)
    doc = load_semeval(blind, strict=True)
    assert all(t.author_id is None and not any(a.author_id or a.label for a in t.answers) for t in doc.threads)
    qids = {t.id for t in doc.threads} if subtask == "A" else set(doc.org_questions)
    gold_slice = tmp_path / "gold.txt"
    gold_slice.write_text("".join(ln for ln in (semeval / gold).read_text().splitlines(keepends=True)
                                  if ln.split("\t")[0] in qids))
    preds = {}
    for ranker in (None, "ir-baseline"):
        pred = tmp_path / f"pred-{ranker}.txt"
        args = ["predict", "--subtask", subtask, "--input", str(blind), "--output", str(pred)]
        out = run_cli(args + (["--ranker", ranker] if ranker else []), cli_env)
        assert out["lines"] == len(gold_slice.read_text().splitlines())
        preds[out["ranker"]] = score_files(gold_slice, pred).MAP
    default, given = (v for k, v in preds.items() if k != "ir-baseline"), preds["ir-baseline"]
    assert next(default) > given, preds


@pytest.mark.parametrize("subtask", ["A", "C"])
def test_metadata_free_variants_drop_user_ids_and_shuffle_within_each_thread(semeval, subtask):
    """The -nometa / -shuffled / -nodates variants of A and C: the same questions and candidates, no user id left
    (asker or commenter) where the variant says so, each thread's comments in another order (the same on every run),
    no comment's time with -nodates, the threads of a C question still in the search engine's order; B has no such
    variant."""
    from ranking.evaluation.benchmarks import BENCHMARKS, BenchmarkError, queries_for
    xml, _ = BENCHMARKS[f"semeval2016-dev-{subtask}"].paths(semeval)
    normal = queries_for(xml, subtask)
    for variant in ("nometa", "shuffled", "nometa-shuffled", "shuffled-nodates", "nometa-shuffled-nodates"):
        bench = BENCHMARKS[f"semeval2016-dev-{subtask}-{variant}"]
        assert (bench.subtask, bench.variant) == (subtask, variant)
        changed = queries_for(xml, subtask, variant)
        assert changed == queries_for(xml, subtask, variant)  # seeded: the same on every run
        assert [q.id for q in changed] == [q.id for q in normal]
        moved = 0
        for q, v in zip(normal, changed):
            assert sorted(c.id for c in v.candidates) == sorted(c.id for c in q.candidates)
            threads = list(dict.fromkeys(c.meta["thread_id"] for c in q.candidates))
            assert list(dict.fromkeys(c.meta["thread_id"] for c in v.candidates)) == threads
            for t in threads:
                before = [c.id for c in q.candidates if c.meta["thread_id"] == t]
                after = [c for c in v.candidates if c.meta["thread_id"] == t]
                assert [c.meta["position"] for c in after] == list(range(1, len(after) + 1))
                moved += [c.id for c in after] != before
                if "nometa" in variant:
                    assert not any(c.meta["author_id"] or c.meta["asker_id"] for c in after)
            assert ("nometa" in variant) == (not any(c.meta["author_id"] for c in v.candidates))
            # "-nodates": no comment keeps its time; otherwise every one does, as the file gives it
            assert [c.meta["created_at"] for c in v.candidates] == (
                [None] * len(v.candidates) if "nodates" in variant else
                [next(x for x in q.candidates if x.id == c.id).meta["created_at"] for c in v.candidates])
        assert (moved > 0) == ("shuffled" in variant)
    with pytest.raises(BenchmarkError, match="subtask B has unordered"):
        queries_for(BENCHMARKS["semeval2016-dev-B"].paths(semeval)[0], "B", "nometa")


@pytest.mark.parametrize("subtask", ["B", "C"])
def test_unordered_gives_the_related_questions_in_another_order_and_says_so(semeval, subtask):
    """semeval2016-dev-{B,C}-unordered: the same questions and candidates, each question's related questions (B) or
    whole related threads (C) in another order (the same on every run), each ranked by its place in that order, as a
    caller with no search order sends them; and the query says so (search_order false), as the request does."""
    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    bench = BENCHMARKS[f"semeval2016-dev-{subtask}-unordered"]
    xml, _ = bench.paths(semeval)
    normal, changed = queries_for(xml, subtask), queries_for(xml, subtask, bench.variant)
    assert changed == queries_for(xml, subtask, bench.variant) and [q.id for q in changed] == [q.id for q in normal]
    moved = 0
    for q, v in zip(normal, changed):
        assert sorted(c.id for c in v.candidates) == sorted(c.id for c in q.candidates)
        assert v.meta["search_order"] is False and "search_order" not in q.meta
        ranks = [c.meta["thread_rank"] for c in v.candidates]
        assert ranks == sorted(ranks) and set(ranks) <= set(range(1, 11))  # threads stay whole, ranked as given
        moved += [c.id for c in v.candidates] != [c.id for c in q.candidates]
    assert moved > len(normal) // 2


def test_order_weighed_anyway_ranks_as_a_caller_that_does_not_say(settings, cli_env, tmp_path):
    """scripts/order_weighed_anyway.py: the unordered benchmark's questions without their search_order key, so the
    B fusion weighs the other order as a search order (its ordered weights, ir-baseline included), unlike the same
    questions said to be unordered; the predictions come in the gold's order, ready for --compare-pred."""
    from dataclasses import replace

    from ranking.evaluation.benchmarks import BENCHMARKS, queries_for
    from ranking.evaluation.scorer import read_lines
    from ranking.rankers import get_ranker

    from .conftest import ROOT
    out = tmp_path / "anyway.txt"
    p = subprocess.run([sys.executable, str(ROOT / "scripts/order_weighed_anyway.py"), "--benchmark",
                        "semeval2016-dev-B-unordered", "--limit", "3", "--out", str(out)], env=cli_env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    # the default B ranker; with no generation in the folder, its question-fusion route ranks (the expected scores)
    assert report["ranker"] == "question-answers-fusion-indexed" and 0 < report["MAP"] <= 1
    bench = BENCHMARKS["semeval2016-dev-B-unordered"]
    xml, gold = bench.paths(settings.semeval_dir)
    said = queries_for(xml, "B", bench.variant)[:3]
    unsaid = [replace(q, meta={k: v for k, v in q.meta.items() if k != "search_order"}) for q in said]
    ranker = get_ranker("question-fusion", settings)
    lines = read_lines(out)
    written = {(ln.qid, ln.cid): ln.score for ln in lines}
    expected = {(q.id, c.id): s for q, row in zip(unsaid, ranker.score(unsaid)) for c, s in zip(q.candidates, row)}
    flagged = {(q.id, c.id): s for q, row in zip(said, ranker.score(said)) for c, s in zip(q.candidates, row)}
    assert written.keys() == expected.keys() and all(abs(written[k] - expected[k]) < 1e-6 for k in written)
    assert any(abs(written[k] - flagged[k]) > 1e-3 for k in written)  # saying so changes the scores
    asked = {q.id for q in said}
    assert [(ln.qid, ln.cid) for ln in lines] == [(g.qid, g.cid) for g in read_lines(gold) if g.qid in asked]


def test_write_params_replaces_a_section_and_keeps_the_rest(tmp_path):
    """The tuning scripts' one writer: a whole parameters file, or one section of it (--section unordered)."""
    from ranking.evaluation.tuning import write_params
    path = tmp_path / "params.json"
    write_params(path, {"weights": {"a": 1.0}, "unordered": {"weights": {"a": 0.0}}})
    write_params(path, {"weights": {"b": 0.5}}, "unordered")
    assert json.loads(path.read_text()) == {"weights": {"a": 1.0}, "unordered": {"weights": {"b": 0.5}}}
    write_params(path, {"weights": {"c": 1.0}})  # a whole new tuning: its old sections go with it
    assert json.loads(path.read_text()) == {"weights": {"c": 1.0}}


def test_grid_MAP_equals_the_official_scorer_on_ties_too(settings):
    """The tuning grids' MAP (GoldMAP: the gold matched to the candidates once) is the official scorer's MAP of the
    same scores, to the last digit, on dev-C's 50 questions with random scores and with many ties (and so is each
    question's AP), and a gold candidate the queries lack is the same clear error as align_to_gold's."""
    import numpy as np
    from ranking.candidates import Query
    from ranking.evaluation.benchmarks import BENCHMARKS, BenchmarkError, queries_for
    from ranking.evaluation.runner import align_to_gold
    from ranking.evaluation.scorer import Line, per_question_ap, read_lines, score
    from ranking.evaluation.tuning import GoldMAP, map_of
    xml, gold_path = BENCHMARKS["semeval2016-dev-C"].paths(settings.semeval_dir)
    queries, gold = queries_for(xml, "C"), read_lines(gold_path)
    rng = np.random.default_rng(7)
    grid_map = GoldMAP(queries, gold)
    for ties in (False, True):
        scores = [rng.integers(0, 3, len(q.candidates)).astype(float) if ties else rng.random(len(q.candidates))
                  for q in queries]
        lines = [Line(q.id, c.id, float(s), False) for q, row in zip(queries, scores) for c, s in zip(q.candidates, row)]
        official = score(gold, align_to_gold(lines, gold)).MAP
        assert grid_map(scores) == official == map_of(queries, scores, gold)
        # per question (what a paired test reads): the scorer's own per-question AP, every question of the gold
        assert grid_map.per_question(scores) == per_question_ap(gold, align_to_gold(lines, gold))
        assert len(grid_map.per_question(scores)) == len({g.qid for g in gold}) == 50
    first = queries[0]
    with pytest.raises(BenchmarkError, match="no score for gold candidate"):
        GoldMAP([Query(first.id, first.text, first.candidates[1:])], gold)


def test_grid_search_normalises_each_part_by_the_method_a_fusion_preset_names():
    """ranking.evaluation.tuning.grid_search: each part's scores per query made summable by a SCORE_TRANSFORMS method
    (z-score by default) before the weighted sum; the method decides which setting wins."""
    from ranking.candidates import Candidate, Query
    from ranking.evaluation.scorer import Line
    from ranking.evaluation.tuning import grid_search
    q = Query("q1", "question", [Candidate(f"c{i}", "text") for i in range(3)])
    gold = [Line("q1", "c0", 0.0, True), Line("q1", "c1", 0.0, False), Line("q1", "c2", 0.0, False)]
    # "far": c0 just below c1, a long way above c2; "other": c0 below c2, a long way above c1
    parts = {"far": [[9.0, 10.0, 0.0]], "other": [[0.6, 0.0, 1.0]]}
    by = {m: {tuple(r["weights"].values()): r["dev_MAP"] for r in grid_search([q], parts, gold, (0.0, 1.0), m)}
          for m in ("zscore", "minmax", "rrf")}
    assert all(len(v) == 3 for v in by.values())  # (0, 0) is left out
    assert by["zscore"][(1.0, 0.0)] == by["minmax"][(1.0, 0.0)] == by["rrf"][(1.0, 0.0)] == 0.5
    assert by["zscore"][(0.0, 1.0)] == 0.5
    # both parts: the score gaps put c0 first under z-score and min-max; under ranks (second twice) it comes last
    assert by["zscore"][(1.0, 1.0)] == by["minmax"][(1.0, 1.0)] == 1.0
    assert by["rrf"][(1.0, 1.0)] == pytest.approx(1 / 3)
    with pytest.raises(KeyError):
        grid_search([q], parts, gold, (1.0,), "rank")


def test_tune_candidate_fusion_refuses_to_ship_weights_of_another_method(tmp_path):
    """scripts/tune_candidate_fusion.py --method minmax explores: the presets that read ranking/ z-score their
    parts, so its weights must go elsewhere, before any model is loaded."""
    from ranking.candidate_rankers import FUSION_DEFAULTS
    shipped = FUSION_DEFAULTS.read_bytes()
    script = Path(__file__).resolve().parent.parent / "scripts" / "tune_candidate_fusion.py"
    p = subprocess.run([sys.executable, str(script), "--method", "minmax"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode != 0 and "write these weights to an --out outside ranking/" in p.stderr
    assert FUSION_DEFAULTS.read_bytes() == shipped


def test_cross_fitting_folds_keep_a_questions_threads_together_and_files_apart(settings):
    """scripts/crossfit_A.py's folds: every training thread in one of K folds, the related threads of one original
    question in the same fold, thread ids that repeat across files (2015 train and dev) dealt per file, the folds
    of similar size and the same on every run."""
    from indexing.loaders import load
    from ranking.evaluation.tuning import question_key, thread_folds
    files = {f: load(settings.semeval_dir / f).threads for f in
             ("train/SemEval2016-Task3-CQA-QL-train-part2-subtaskA.xml",
              "train2015/SemEval2015-Task3-CQA-QL-train-recovered-subtaskA.xml",
              "train2015/SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml")}
    folds = thread_folds(files, 4)
    assert folds == thread_folds(files, 4)
    assert {f: set(v) for f, v in folds.items()} == {f: {t.id for t in ts} for f, ts in files.items()}
    assert {i for v in folds.values() for i in v.values()} == {0, 1, 2, 3}
    for f, ts in files.items():
        by_question: dict[str, set[int]] = {}
        for t in ts:
            by_question.setdefault(question_key(t.id), set()).add(folds[f][t.id])
        assert all(len(v) == 1 for v in by_question.values())
    part2 = files["train/SemEval2016-Task3-CQA-QL-train-part2-subtaskA.xml"]
    assert len({question_key(t.id) for t in part2}) < len(part2)  # several related threads per question there
    train, dev = (folds[f] for f in list(files)[1:])
    shared = set(train) & set(dev)
    assert shared and any(train[i] != dev[i] for i in shared)  # the same id in two files: two threads, dealt apart
    sizes = [sum(i == k for v in folds.values() for i in v.values()) for k in range(4)]
    assert max(sizes) - min(sizes) < 0.1 * sum(sizes)


def test_train_combination_refuses_a_smoke_runs_cross_fitted_scores(cli_env, tmp_path):
    """train_combination.py --cross-fitted takes only scores of every comment of files the layer does not train on:
    a --limit smoke run's scores are refused before any model is loaded."""
    from .conftest import ROOT
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps({"folds": 4, "seed": 2016, "limit": 3, "inference": "cpu torch-fp32",
                                  "files": ["train/SemEval2016-Task3-CQA-QL-train-part2-subtaskA.xml"],
                                  "scores": {"cross-encoder": {}}, "models": {}}))
    p = subprocess.run([sys.executable, str(ROOT / "scripts/train_combination.py"), "--name", "cross-encoder+signals",
                        "--cross-fitted", str(scores), "--out", str(tmp_path / "out.json")], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "--limit smoke run" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "out.json").exists()


def test_a_layers_training_labels_are_read_per_file(settings):
    """ranking.combination.good_labels: comment ids repeat across the training files (2015 train and 2015 dev share
    thread ids, with other threads), so each file keeps its own comments' labels; one dictionary over both files
    gave 111 of the 22,737 training comments of bilstm+signals another comment's label (round 28)."""
    from indexing.loaders import load
    from ranking.combination import good_labels
    files = ("train2015/SemEval2015-Task3-CQA-QL-train-recovered-subtaskA.xml",
             "train2015/SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml")
    labels = good_labels(settings.semeval_dir, files)
    own = {f: {a.id: a.label == "Good" for t in load(settings.semeval_dir / f).threads for a in t.answers} for f in files}
    assert labels == own
    shared = set(labels[files[0]]) & set(labels[files[1]])
    assert any(labels[files[0]][c] != labels[files[1]][c] for c in shared)  # the same id, two comments, two labels


def _question_sweep():
    import importlib.util

    from .conftest import ROOT
    spec = importlib.util.spec_from_file_location("question_sweep", ROOT / "scripts" / "question_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_question_sweep_recipes_change_only_what_they_name(settings):
    """scripts/question_sweep.py: its `shipped` recipe is the shipped question model's training settings (the
    steps of one epoch of its 3-epoch schedule), and each other recipe changes only what it names."""
    from ranking.neural.train_minilm import minilm_groups, question_pairs_as_threads
    qs = _question_sweep()
    shipped_config = settings.question_bi_encoder_checkpoint / "config.json"
    groups = minilm_groups(question_pairs_as_threads(settings.semeval_dir))
    cfg = {r: qs.recipe_config(shipped_config, r, 13, groups, "cpu", None).__dict__ for r in qs.RECIPES}
    trained = json.loads(shipped_config.read_text())["train"]
    one_epoch = -(-sum(len(g.good) for g in groups) // 16)
    assert cfg["shipped"]["max_steps"] == one_epoch
    assert {k: v for k, v in cfg["shipped"].items() if k not in ("device", "max_steps", "init_from")} == \
        {k: v for k, v in trained.items() if k not in ("device", "max_steps", "init_from")}
    changed = {r: {k for k in c if c[k] != cfg["shipped"][k]} for r, c in cfg.items()}
    assert changed == {"shipped": set(), "epochs2": {"max_steps"}, "epochs3": {"max_steps"},
                       "neg3": {"negatives", "max_steps"}, "len256": {"max_length"}, "lr5e-5": {"lr"},
                       "transitive": set()}  # its data differs, not its settings (recipe_groups)
    assert cfg["epochs3"]["max_steps"] == 3 * one_epoch and cfg["neg3"]["max_steps"] == -(-3 * sum(
        len(g.good) for g in groups) // 16)
    assert qs.recipe_config(shipped_config, "epochs3", 14, groups, "cpu", 5).max_steps == 5


def test_question_sweep_rule_needs_both_figures_and_the_paired_test():
    """Rule 11 (scripts/question_sweep.py): a candidate passes only when its cv and dev figures both beat the
    reference's and its cv gain has p < 0.10; the best cv figure wins; a tie or no reference ships nothing."""
    qs = _question_sweep()

    def f(cv, dev, p):
        return {"cv_fusion": cv, "dev_fusion": dev, "cv_fusion_against_shipped": {"p_randomization": p}}
    ref = {qs.REFERENCE: f(0.73, 0.79, 1.0)}
    assert qs.rule_11({**ref, "a": f(0.74, 0.80, 0.01), "b": f(0.75, 0.80, 0.01)}) == (["b", "a"], "b")
    assert qs.rule_11({**ref, "dev lower": f(0.75, 0.78, 0.01), "p high": f(0.75, 0.80, 0.2),
                       "dev equal": f(0.75, 0.79, 0.01)}) == ([], None)
    assert qs.rule_11({**ref, "a": f(0.74, 0.80, 0.05), "b": f(0.74, 0.81, 0.05)})[1] is None
    assert qs.rule_11({"a": f(0.74, 0.80, 0.01)}) == ([], None)


def test_question_sweep_transitive_recipe_adds_the_implied_pairs_to_its_data(settings):
    """The `transitive` recipe (round 58) trains on the threads plus the pairs their judgements imply; every other
    recipe on the threads alone."""
    from ranking.neural.train_minilm import question_pairs_as_threads, transitive_question_pairs
    qs = _question_sweep()
    threads = question_pairs_as_threads(settings.semeval_dir)[:40]
    implied = transitive_question_pairs(threads)
    assert implied
    shipped, transitive = qs.recipe_groups("shipped", threads), qs.recipe_groups("transitive", threads)
    assert len(transitive) == len(shipped) + len(implied)  # each implied thread has a Good and a Bad answer
    assert {tuple(g.question) for g in shipped} < {tuple(g.question) for g in transitive}


def test_question_sweep_rule_30_asks_the_gain_of_the_soup_and_of_the_seeds():
    """Rule 30: the transitive soup passes only with 0.004 over the shipped soup at p < 0.05, its seeds' mean cv
    figure above the shipped seeds', and a dev figure at least the shipped soup's."""
    qs = _question_sweep()

    def f(cv, dev, p=1.0):
        return {"cv_fusion": cv, "dev_fusion": dev, "cv_fusion_against_shipped": {"p_randomization": p}}
    means = {"shipped": {"cv_fusion": 0.731}, "transitive": {"cv_fusion": 0.733}}
    ref = {"shipped soup": f(0.732, 0.799)}
    assert qs.rule_30({**ref, "transitive soup": f(0.7365, 0.799, 0.04)}, means) == (["transitive soup"],
                                                                                      "transitive soup")
    for cand, m in ((f(0.7355, 0.80, 0.01), means), (f(0.737, 0.80, 0.06), means), (f(0.737, 0.798, 0.01), means),
                    (f(0.737, 0.80, 0.01), {**means, "transitive": {"cv_fusion": 0.731}})):
        assert qs.rule_30({**ref, "transitive soup": cand}, m) == ([], None)
    assert qs.rule_30({"transitive soup": f(0.74, 0.80, 0.01)}, means) == ([], None)


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_evaluate_and_predict_help_name_each_subtasks_default_ranker_as_the_settings_do(command):
    """The --ranker help names every subtask's default setting with its default value, read from the settings: a
    default changed there (round 37 made subtask B's question-answers-fusion-indexed) is what --help says."""
    import argparse

    from ranking.evaluation.cli import add_evaluate_args, add_predict_args
    from ranking.settings import RankingSettings
    p = argparse.ArgumentParser(formatter_class=argparse.RawDescriptionHelpFormatter)
    (add_evaluate_args if command == "evaluate" else add_predict_args)(p)
    text = " ".join(next(a.help for a in p._actions if "--ranker" in a.option_strings).split())
    fields = RankingSettings.model_fields
    for name, task in (("default_ranker", "A"), ("default_ranker_b", "B"), ("default_ranker_c", "C"),
                       ("arabic_ranker", "D")):
        assert f"$CQA_{name.upper()} ({fields[name].default}) for {task}" in text
    assert "question-answers-fusion-indexed" in text


def test_map_interval_bootstraps_the_questions_of_a_report(tmp_path):
    """scripts/map_interval.py: the official MAP as the report says, a 95% interval around the mean of the
    per-question AP that narrows with more questions, the share of resamples at a target, and the interval of a
    paired difference over the questions both runs share; a report without per-question AP is refused."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "map_interval.py"

    def report(name, aps, bench="semeval2016-test-C"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(
            {"benchmark": bench, "MAP": sum(aps.values()) / len(aps), "per_question_ap": aps}))
        return str(folder)
    few = report("few", {f"Q{i}": (0.2, 0.9)[i % 2] for i in range(10)})
    many = report("many", {f"Q{i}": (0.2, 0.9)[i % 2] for i in range(1000)})
    better = report("better", {f"Q{i}": (0.3, 0.9)[i % 2] for i in range(10)})
    p = subprocess.run([sys.executable, str(script), few, many, "--target", "0.55"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    runs = json.loads(p.stdout.strip().splitlines()[-1])["runs"]
    for r in runs:
        lo, hi = r["interval_95"]
        assert r["MAP"] == pytest.approx(0.55) and lo < 0.55 < hi
        assert 0.3 < r["share_at_or_above_target"] < 0.7
    assert runs[1]["interval_95"][1] - runs[1]["interval_95"][0] < runs[0]["interval_95"][1] - runs[0]["interval_95"][0]
    p = subprocess.run([sys.executable, str(script), better, few, "--paired"], capture_output=True, text=True)
    diff = json.loads(p.stdout.strip().splitlines()[-1])["difference"]
    assert diff["questions"] == 10 and diff["mean"] == pytest.approx(0.05)
    assert 0 <= diff["interval_95"][0] <= 0.05 <= diff["interval_95"][1] <= 0.1
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "report.json").write_text(json.dumps({"benchmark": "x", "MAP": 0.5}))
    p = subprocess.run([sys.executable, str(script), str(bare)], capture_output=True, text=True)
    assert p.returncode != 0 and "no per_question_ap" in p.stderr


def test_map_interval_is_a_seeded_bootstrap_over_the_questions():
    """measures.map_interval: the 2.5th and 97.5th percentiles of bootstrap_means (10,000 seeded resamples of the
    questions' AP, drawn a thousand at a time); the same AP give the same interval, more questions like them a
    narrower one, identical AP a point, and no questions none."""
    import numpy as np

    from ranking.evaluation.measures import bootstrap_means, map_interval
    ap = {f"Q{i}": v for i, v in enumerate([0.1, 0.5, 0.9, 1.0, 0.0, 0.3, 0.7])}
    means = bootstrap_means(list(ap.values()))
    assert len(means) == 10_000 and np.array_equal(means, bootstrap_means(list(ap.values())))
    lo, hi = map_interval(ap)
    assert [lo, hi] == [float(v) for v in np.percentile(means, [2.5, 97.5])] and lo < np.mean(list(ap.values())) < hi
    more = {f"{q}-{k}": v for k in range(20) for q, v in ap.items()}
    lo2, hi2 = map_interval(more)
    assert lo < lo2 < hi2 < hi
    assert map_interval({"a": 0.4, "b": 0.4}) == [0.4, 0.4] and map_interval({}) is None


def test_ship_figures_carries_the_interval_and_replaces_only_the_pairs_given(tmp_path, cli_env):
    """scripts/ship_figures.py --update: the entry it writes from a real run's report gives that run's figures and
    its 95% interval; the file's other entries stay in their places, including another ranker's entry for the same
    benchmark (test-C is shipped for related-answers in bf16 and in fp32)."""
    from .conftest import CQA, ROOT
    run = subprocess.run(CQA + ["evaluate", "--benchmark", "semeval2016-test-B", "--ranker", "ir-baseline", "--json"],
                         env=cli_env, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    old = [{"benchmark": "semeval2016-test-B", "ranker": "ir-baseline", "figures": {"MAP": 0.1}, "command": "x",
            "measured_at": "then", "machine": "m"},
           {"benchmark": "semeval2016-test-B", "ranker": "bm25", "figures": {"MAP": 0.2}, "command": "y",
            "measured_at": "then", "machine": "m"},
           {"benchmark": "semeval2016-test-A", "ranker": "cascade", "figures": {"MAP": 0.3}, "command": "z",
            "measured_at": "then", "machine": "m"}]
    out = tmp_path / "shipped.json"
    out.write_text(json.dumps({"figures": old}))
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "ship_figures.py"), "--update", "--out", str(out),
                        "--reports", str(tmp_path / "var" / "reports"), "semeval2016-test-B=ir-baseline"],
                       env=cli_env, capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    new = json.loads(out.read_text())["figures"]
    assert [(f["benchmark"], f["ranker"]) for f in new] == [(f["benchmark"], f["ranker"]) for f in old]
    assert new[1:] == old[1:]
    shipped = new[0]
    assert shipped["figures"]["MAP"] == round(report["MAP"], 4) == 0.7475
    assert shipped["MAP_interval_95"] == [round(x, 4) for x in report["MAP_interval_95"]]
    assert shipped["MAP_interval_95"][0] < 0.7475 < shipped["MAP_interval_95"][1]
    assert shipped["command"] == "cqa evaluate --benchmark semeval2016-test-B --ranker ir-baseline"
    # --drop removes a named pair's entry; a pair the file does not hold is an error that writes nothing
    ship = [sys.executable, str(ROOT / "scripts" / "ship_figures.py"), "--update", "--out", str(out), "--reports",
            str(tmp_path / "var" / "reports"), "semeval2016-test-B=ir-baseline"]
    p = subprocess.run(ship + ["--drop", "semeval2016-test-A=nope"], env=cli_env, capture_output=True, text=True,
                       cwd=ROOT)
    assert p.returncode == 2 and "--drop names no entry" in p.stderr and json.loads(out.read_text())["figures"] == new
    p = subprocess.run(ship + ["--drop", "semeval2016-test-B=bm25"], env=cli_env, capture_output=True, text=True,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert [(f["benchmark"], f["ranker"]) for f in json.loads(out.read_text())["figures"]] == \
        [("semeval2016-test-B", "ir-baseline"), ("semeval2016-test-A", "cascade")]
