"""Named SemEval-2016 benchmarks: the queries and candidates of a file, and its official gold."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from indexing.loaders import load_semeval
from indexing.models import Thread

from ..candidates import Candidate, Query

# Published results on the 2016 test set (primary runs, MAP), from the task's result tables.
PUBLISHED = {
    "A": {"IR baseline": 0.5953, "best": ("KeLP", 0.7919)},
    "B": {"IR baseline": 0.7475, "best": ("UH-PRHLT", 0.7670)},
    "C": {"IR baseline": 0.4036, "best": ("SUper_team", 0.5541)},
}


class BenchmarkError(Exception):
    pass


@dataclass(frozen=True)
class Benchmark:
    name: str
    split: str
    subtask: str  # A, B, C or "fullcorpus"
    xml: str
    gold: str | None

    def paths(self, semeval_dir: Path) -> tuple[Path, Path | None]:
        xml = semeval_dir / self.xml
        gold = semeval_dir / self.gold if self.gold else None
        for p in (xml, gold):
            if p is not None and not p.exists():
                raise BenchmarkError(f"benchmark {self.name}: {p} is missing; set CQA_SHARED_DATA_DIR "
                                     "to the folder that holds semeval2016/")
        return xml, gold


BENCHMARKS: dict[str, Benchmark] = {}
for _split, _xml, _xml_a in (
        ("dev", "dev/SemEval2016-Task3-CQA-QL-dev.xml", "dev/SemEval2016-Task3-CQA-QL-dev-subtaskA.xml"),
        ("test", "test/SemEval2016-Task3-CQA-QL-test.xml", "test/SemEval2016-Task3-CQA-QL-test.xml")):
    _gold_a = (f"{_split}/SemEval2016-Task3-CQA-QL-{_split}-subtaskA.xml.subtaskA.relevancy")
    BENCHMARKS[f"semeval2016-{_split}-A"] = Benchmark(f"semeval2016-{_split}-A", _split, "A", _xml_a, _gold_a)
    for _t in "BC":
        BENCHMARKS[f"semeval2016-{_split}-{_t}"] = Benchmark(
            f"semeval2016-{_split}-{_t}", _split, _t, _xml, f"{_xml}.subtask{_t}.relevancy")
for _split in ("dev", "test"):
    BENCHMARKS[f"semeval2016-{_split}-fullcorpus"] = Benchmark(
        f"semeval2016-{_split}-fullcorpus", _split, "fullcorpus", f"{_split}/SemEval2016-Task3-CQA-QL-{_split}.xml", None)


def _answer_candidates(t: Thread, thread_rank: int | None = None) -> list[Candidate]:
    out = []
    for pos, a in enumerate(t.answers, 1):
        meta = {"thread_id": t.id, "position": pos, "author_id": a.author_id, "created_at": a.created_at,
                "asker_id": t.author_id, "category": t.category, "thread_question": t.question_text}
        if thread_rank is not None:
            meta["thread_rank"] = thread_rank
        out.append(Candidate(a.id, a.text, meta))
    return out


def queries_for(xml: Path, subtask: str) -> list[Query]:
    """The task's queries in file order, candidates in the IR order the task gives them."""
    doc = load_semeval(xml, strict=True)
    if subtask == "A":
        return [Query(t.id, t.question_text, tuple(_answer_candidates(t)),
                      {"category": t.category, "author_id": t.author_id, "subject": t.subject, "body": t.body})
                for t in doc.threads if "subtaskA_skip_same_as" not in t.meta]
    threads = {}
    for t in doc.threads:
        threads[(t.meta.get("orgq_id"), t.id)] = t
    out = []
    for oq in doc.org_questions.values():
        rel = sorted((threads[(oq.id, tid)] for tid in oq.thread_ids),
                     key=lambda t: t.meta.get("ranking_order", 0))
        if subtask == "B":
            cands = [Candidate(t.id, t.question_text, {"category": t.category, "thread_rank": r,
                                                        "subject": t.subject, "body": t.body})
                     for r, t in enumerate(rel, 1)]
        elif subtask == "C":
            cands = [c for r, t in enumerate(rel, 1) for c in _answer_candidates(t, r)]
        else:
            raise BenchmarkError(f"unknown subtask {subtask!r}; expected A, B or C")
        out.append(Query(oq.id, oq.text, tuple(cands), {"subject": oq.subject, "body": oq.body}))
    return out
