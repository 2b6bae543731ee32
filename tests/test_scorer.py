import json
import re
import subprocess

import pytest

from ranking.evaluation.scorer import (
    Line,
    ScoringError,
    average_precision,
    parse_score_report,
    read_lines,
    score,
    score_files,
)

from .conftest import CQA, SEMEVAL

GOLD = {
    "A": "test/SemEval2016-Task3-CQA-QL-test-subtaskA.xml.subtaskA.relevancy",
    "B": "test/SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy",
    "C": "test/SemEval2016-Task3-CQA-QL-test.xml.subtaskC.relevancy",
    "D": "arabic/SemEval2016-Task3-CQA-MD-test.xml.subtaskD.relevancy",
}
RUNS = sorted(p.with_suffix("") for p in (SEMEVAL / "runs2016").glob("*/*.txt.score"))


def test_all_official_runs_are_present():
    # 90 team runs (the README's 88 plus the two in overfitting/) and 3 baselines per subtask A-D
    assert sum("_baselines" not in str(r) for r in RUNS) >= 88
    assert sum("_baselines" in str(r) for r in RUNS) == 12


@pytest.mark.parametrize("run", RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reproduces_official_score_file(semeval, run):
    subtask = re.search(r"subtask_([A-D])_", run.name).group(1)
    expected = parse_score_report(str(run) + ".score")
    got = score_files(semeval / GOLD[subtask], run).official()
    for k, v in expected.items():
        assert f"{got[k]:.4f}" == f"{v:.4f}", (k, got[k], v)


def L(q, c, s, rel):
    return Line(q, c, s, rel)


def test_average_precision_by_hand():
    assert average_precision([True, False, True]) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision([False] * 10 + [True]) == 0.0  # only the top 10 count
    assert average_precision([]) == 0.0


def test_ties_keep_file_order_and_no_relevant_counts_as_zero():
    gold = [L("q1", "a", 0, False), L("q1", "b", 0, True), L("q2", "c", 0, False)]
    pred = [L("q1", "a", 1.0, True), L("q1", "b", 1.0, True), L("q2", "c", 5.0, False)]
    s = score(gold, pred)
    assert s.MAP == pytest.approx((0.5 + 0.0) / 2)  # tie: a stays first; q2 has AP 0 and counts
    assert s.MRR == pytest.approx(100 * (0.5 + 0) / 2)
    assert (s.P, s.R, s.Acc) == (pytest.approx(0.5), 1.0, pytest.approx(2 / 3))


def test_mismatched_ids_are_an_error():
    with pytest.raises(ScoringError, match="line 2: ids \\(q1, x\\) do not match the gold \\(q1, b\\)"):
        score([L("q1", "a", 0, True), L("q1", "b", 0, False)], [L("q1", "a", 1, True), L("q1", "x", 1, True)])


def test_truncated_prediction_scores_its_lines_with_a_warning(caplog):
    gold = [L("q1", "a", 0, True), L("q2", "b", 0, True)]
    s = score(gold, [L("q1", "a", 1, True)])
    assert (s.questions, s.MAP) == (1, 1.0)
    assert "scoring the first 1 lines" in caplog.text


def test_malformed_line(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("q1\ta\t1\tnan?\ttrue\n")
    with pytest.raises(ScoringError, match="line 1: score 'nan\\?' is not a number"):
        read_lines(f)


def test_cli_gold_pred_json(semeval, cli_env):
    run = semeval / "runs2016/Kelp/subtask_A_primary.txt"
    p = subprocess.run(CQA + ["evaluate", "--gold", str(semeval / GOLD["A"]), "--pred", str(run), "--json"],
                       env=cli_env, capture_output=True, text=True, check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out == {"MAP": 0.7919, "AvgRec": 0.8882, "MRR": 86.4189, "P": 0.7696, "R": 0.553, "F1": 0.6436,
                   "Acc": 0.7511}


def test_cli_mismatch_exit_code(semeval, cli_env):
    p = subprocess.run(CQA + ["evaluate", "--gold", str(semeval / GOLD["A"]),
                              "--pred", str(semeval / "runs2016/Kelp/subtask_B_primary.txt")],
                       env=cli_env, capture_output=True, text=True)
    assert p.returncode == 2 and "do not match the gold" in p.stderr


def test_cli_compares_two_prediction_files(semeval, cli_env):
    """--compare-pred: two submissions on one gold file, each scored as alone, with the paired tests of their
    per-question AP; a file out of the gold's order is an error, as for --pred."""
    gold, kelp, convkn = (str(semeval / GOLD["A"]), str(semeval / "runs2016/Kelp/subtask_A_primary.txt"),
                          str(semeval / "runs2016/ConvKN/subtask_A_primary.txt"))

    def cli(*args):
        return subprocess.run(CQA + ["evaluate", "--gold", gold, *args, "--json"], env=cli_env, capture_output=True,
                              text=True)
    both = json.loads(cli("--pred", kelp, "--compare-pred", convkn).stdout.strip().splitlines()[-1])
    alone = json.loads(cli("--pred", convkn).stdout.strip().splitlines()[-1])
    c = both["compare"]
    assert both["MAP"] == 0.7919 and round(c["MAP"], 4) == alone["MAP"] != both["MAP"] and c["questions"] == 327
    assert 0 < c["p_randomization"] <= 1 and 0 < c["p_ttest"] <= 1
    same = json.loads(cli("--pred", kelp, "--compare-pred", kelp).stdout.strip().splitlines()[-1])["compare"]
    assert same["p_randomization"] == 1.0 and round(same["MAP"], 4) == 0.7919
    assert same["difference_interval_95"] == [0.0, 0.0] and c["difference_interval_95"][0] < c["difference_interval_95"][1]
    wrong = cli("--pred", kelp, "--compare-pred", str(semeval / "runs2016/Kelp/subtask_B_primary.txt"))
    assert wrong.returncode == 2 and "do not match the gold" in wrong.stderr
