"""A dev-B probe (round 38): the translation LM with an IBM Model 1 table learned on question pairs instead of
question-answer pairs. The table is trained (``TranslationTable.train``) on the relevant (PerfectMatch or Relevant)
pairs of the subtask B training questions (``question_pairs_as_threads``), in both directions, at three minimum word
counts. Each part is scored alone on dev-B beside the lexical parts the B fusion can weigh. A diagnostic, not a ranker:
nothing ships from it.

    python scripts/probe_question_translation.py

JSON object last.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.settings import Settings  # noqa: E402
from indexing.translation import TranslationTable  # noqa: E402
from ranking.candidate_rankers import TranslationLMRanker  # noqa: E402
from ranking.evaluation.benchmarks import BENCHMARKS, queries_for  # noqa: E402
from ranking.evaluation.scorer import read_lines  # noqa: E402
from ranking.evaluation.tuning import GoldMAP  # noqa: E402
from ranking.neural.train_minilm import question_pairs_as_threads  # noqa: E402
from ranking.rankers import get_ranker  # noqa: E402


def main() -> None:
    s = Settings()
    xml, gold = BENCHMARKS["semeval2016-dev-B"].paths(s.semeval_dir)
    queries = queries_for(xml, "B")
    dev_map = GoldMAP(queries, read_lines(gold))
    analyzer = get_ranker("translation-lm", s).analyzer
    pairs = []
    for t in question_pairs_as_threads(s.semeval_dir):
        q = analyzer(t.question_text)
        for a in t.answers:
            if a.label == "Good":
                r = analyzer(a.text)
                pairs += [(r, q), (q, r)]
    out = {"pairs": len(pairs), "dev_B_MAP": {}}
    for min_count in (1, 2, 3):
        table = TranslationTable.train(pairs, min_count=min_count)
        ranker = TranslationLMRanker(semeval_dir=s.semeval_dir, _table=table)
        out["dev_B_MAP"][f"question-pair table, min count {min_count}"] = dev_map(
            [np.asarray(x) for x in ranker.score(queries)])
    for name in ("translation-lm", "lm", "bm25", "ir-baseline"):
        out["dev_B_MAP"][name] = dev_map([np.asarray(x) for x in get_ranker(name, s).score(queries)])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
