"""Named SemEval-2016 benchmarks: the queries and candidates of a file, and its official gold."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from indexing.catalog import ARABIC_DEV_D, ARABIC_DEV_D_GOLD, gold_file, split_file, split_file_a
from indexing.loaders import load_semeval
from indexing.models import Thread

from ..candidates import Query, answer_candidates, question_candidate

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
    """A SemEval file and how it is run: as given candidates (A, B, C, official scorer), or searched over
    the whole corpus (first stage alone, or the /search pipeline)."""
    name: str
    split: str
    subtask: str  # A, B, C, D, "fullcorpus", "search-answers", "search-questions" or "search-threads"
    xml: str
    gold: str | None
    variant: str | None = None  # None, or one of VARIANTS: the same file as input without forum metadata

    @property
    def search_target(self) -> str | None:
        """answers or questions for the end-to-end /search benchmarks, else None."""
        return self.subtask.split("-", 1)[1] if self.subtask.startswith("search-") else None

    def paths(self, semeval_dir: Path) -> tuple[Path, Path | None]:
        xml = semeval_dir / self.xml
        gold = semeval_dir / self.gold if self.gold else None
        for p in (xml, gold):
            if p is not None and not p.exists():
                raise BenchmarkError(f"benchmark {self.name}: {p} is missing; set CQA_SHARED_DATA_DIR "
                                     "to the folder that holds semeval2016/")
        return xml, gold


# Input variants of subtasks A and C (what a ranker meets outside SemEval): "nometa" removes every user id (asker and
# commenters), "shuffled" shuffles each thread's comments with a fixed seed (the order is not the thread's),
# "nometa-shuffled" does both. Each comment keeps its time, from which the A layers put a thread's comments back in
# its order (ranking/combination.py ``in_time_order``); "-nodates" also removes every comment's time, so that the
# order is lost: in "nometa-shuffled-nodates" neither who wrote a comment nor its place in the thread carries
# information. In C each related thread is changed so; the threads keep the search engine's order, which is the
# caller's input.
VARIANTS = ("nometa", "shuffled", "nometa-shuffled", "shuffled-nodates", "nometa-shuffled-nodates")
# Subtask B's candidates carry no user ids; their order is the search engine's, which the B ranker weighs (and the C
# ranker through it). "unordered" gives each question's related questions (B) or related threads (C, each thread whole)
# in another order (seeded), as a caller with no search order sends them, and says so (the query's "search_order" is
# false, as POST /rerank/questions and /rerank/answers set it from the request).
ORDER_VARIANTS = ("unordered",)
SUBTASK_VARIANTS = {"A": VARIANTS, "B": ORDER_VARIANTS, "C": VARIANTS + ORDER_VARIANTS}
SHUFFLE_SEED = 2016

BENCHMARKS: dict[str, Benchmark] = {}
for _split in ("dev", "test"):
    BENCHMARKS[f"semeval2016-{_split}-A"] = Benchmark(f"semeval2016-{_split}-A", _split, "A",
                                                      split_file_a(_split), gold_file(_split, "A"))
    for _t in "BC":
        BENCHMARKS[f"semeval2016-{_split}-{_t}"] = Benchmark(f"semeval2016-{_split}-{_t}", _split, _t,
                                                             split_file(_split), gold_file(_split, _t))
    for _v in VARIANTS:
        BENCHMARKS[f"semeval2016-{_split}-A-{_v}"] = Benchmark(f"semeval2016-{_split}-A-{_v}", _split, "A",
                                                              split_file_a(_split), gold_file(_split, "A"), _v)
        BENCHMARKS[f"semeval2016-{_split}-C-{_v}"] = Benchmark(f"semeval2016-{_split}-C-{_v}", _split, "C",
                                                              split_file(_split), gold_file(_split, "C"), _v)
    for _v in ORDER_VARIANTS:
        for _t in "BC":
            BENCHMARKS[f"semeval2016-{_split}-{_t}-{_v}"] = Benchmark(f"semeval2016-{_split}-{_t}-{_v}", _split, _t,
                                                                     split_file(_split), gold_file(_split, _t), _v)
    BENCHMARKS[f"semeval2016-{_split}-fullcorpus"] = Benchmark(
        f"semeval2016-{_split}-fullcorpus", _split, "fullcorpus", split_file(_split), None)
    for _target in ("answers", "questions", "threads"):  # POST /search end to end (ranking/search_benchmark.py)
        BENCHMARKS[f"semeval2016-{_split}-search-{_target}"] = Benchmark(
            f"semeval2016-{_split}-search-{_target}", _split, f"search-{_target}", split_file(_split), None)


# Subtask D (Arabic): the dev file only, run by 5-fold cross-validation (ranking/arabic.py)
BENCHMARKS["semeval2016-dev-D"] = Benchmark("semeval2016-dev-D", "dev", "D", ARABIC_DEV_D, ARABIC_DEV_D_GOLD)


def as_variant(t: Thread, variant: str, seed: int = SHUFFLE_SEED) -> Thread:
    """The thread as a source without that metadata gives it: no user ids ("nometa"), its comments in an order
    that is not the thread's ("shuffled", the same way on every run), or both; "nodates": no comment's time."""
    answers, asker = list(t.answers), t.author_id
    if "nometa" in variant:
        answers, asker = [a.model_copy(update={"author_id": None}) for a in answers], None
    if "nodates" in variant:
        answers = [a.model_copy(update={"created_at": None}) for a in answers]
    if "shuffled" in variant:
        random.Random(f"{seed}:{t.id}").shuffle(answers)
    return t.model_copy(update={"author_id": asker, "answers": answers})


def related_threads(doc, variant: str | None = None) -> dict[str, list[Thread]]:
    """A subtask B/C file's (a loaded document's) related threads of each original question, in the search engine's
    order, threads without comments included (they hold a rank); as ``variant`` leaves them: each thread changed
    (``as_variant``, VARIANTS), or the threads in another order ("unordered", ORDER_VARIANTS)."""
    threads = {(t.meta.get("orgq_id"), t.id): as_variant(t, variant) if variant in VARIANTS else t for t in doc.threads}
    out = {oq.id: sorted((threads[(oq.id, tid)] for tid in oq.thread_ids), key=lambda t: t.meta.get("ranking_order", 0))
           for oq in doc.org_questions.values()}
    if variant == "unordered":
        for oq_id, rel in out.items():
            random.Random(f"{SHUFFLE_SEED}:{oq_id}").shuffle(rel)
    return out


def queries_for(xml: Path, subtask: str, variant: str | None = None) -> list[Query]:
    """The task's queries in file order, candidates in the IR order the task gives them (``variant``: one of
    SUBTASK_VARIANTS[subtask])."""
    if subtask == "D" and variant is None:  # Arabic: each original question with its question-answer pairs
        from ..arabic import d_queries
        return d_queries(xml)
    doc = load_semeval(xml, strict=True)
    if doc.threads and all("qaid" in t.meta for t in doc.threads):  # every thread a subtask D question-answer pair
        raise BenchmarkError(f"{xml}: a subtask D file (Arabic question-answer pairs); its subtask is D, not {subtask}")
    if variant is not None and variant not in SUBTASK_VARIANTS.get(subtask, ()):
        raise BenchmarkError(f"unknown variant {variant!r} of subtask {subtask}; "
                             + "; ".join(f"subtask {t} has {', '.join(v)}" for t, v in SUBTASK_VARIANTS.items()))
    if subtask == "A":
        threads = [t for t in doc.threads if "subtaskA_skip_same_as" not in t.meta]
        if variant is not None:
            threads = [as_variant(t, variant) for t in threads]
        return [Query(t.id, t.question_text, tuple(answer_candidates(t)),
                      {"category": t.category, "author_id": t.author_id, "subject": t.subject, "body": t.body})
                for t in threads]
    related = related_threads(doc, variant)
    out = []
    for oq in doc.org_questions.values():
        rel = related[oq.id]
        if subtask == "B":
            cands = [question_candidate(t, r) for r, t in enumerate(rel, 1)]
        elif subtask == "C":
            cands = [c for r, t in enumerate(rel, 1) for c in answer_candidates(t, r)]
        else:
            raise BenchmarkError(f"unknown subtask {subtask!r}; expected A, B, C or D")
        meta = {"subject": oq.subject, "body": oq.body}
        if variant == "unordered":  # the caller says so (POST /rerank/questions, search_order false)
            meta["search_order"] = False
        out.append(Query(oq.id, oq.text, tuple(cands), meta))
    return out
