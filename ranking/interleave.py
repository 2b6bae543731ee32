"""Team-draft interleaving (Radlinski, Kurup and Joachims 2008): two rankers of one target compared on a forum's own
traffic, without the bias a comparison of what was shown has.

For a share of the searches (``CQA_INTERLEAVE_SHARE``), the head the reranker scores is ranked by both the served
reranker (team ``A``) and a challenger (``CQA_INTERLEAVE_ANSWERS`` / ``CQA_INTERLEAVE_QUESTIONS``, team ``B``), and the
two orders are merged: in each round the team with fewer picks so far (a coin flip when even) adds its best result not
yet shown. Each result shown remembers the team that put it there (the feedback log's ``teams``). A user's judgement
of a helpful result credits its team; a search whose helpful results came more from one team is a win for it
(``ranking.evaluation.feedback``). Both teams had the same chance at every rank, so a user's position bias favours
neither: the wins say which ranker the forum's users prefer, where ``first_stage`` (the order before the reranker)
is judged only on what the served order chose to show.

Which searches are interleaved, and the coin flips, follow from the question's text and target (``seed``): the same
question gets the same list on every page and every worker, and its pages never overlap."""
from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

TEAMS = ("A", "B")  # A: the served reranker; B: the challenger


def seed(text: str, target: str) -> int:
    """A number from the question's text and target (not Python's salted ``hash``: the same on every worker)."""
    return int.from_bytes(hashlib.blake2b(f"{target}\x00{text}".encode(), digest_size=8).digest(), "big")


def drawn(text: str, target: str, share: float) -> bool:
    """Whether a search of ``text`` is interleaved: ``share`` of the questions, always the same ones."""
    return share > 0 and (seed(text, target) % 1_000_000) / 1_000_000 < share


def team_draft(a: Sequence[int], b: Sequence[int], rng_seed: int) -> tuple[list[int], list[str]]:
    """The team-draft merge of two orders of the same items (``a``: team A's, ``b``: team B's, best first): every
    item once, and each item's team. The team with fewer picks goes next, a coin flip (``rng_seed``) when even, and
    adds its best item not shown yet."""
    if sorted(a) != sorted(b):
        raise ValueError("the two orders must hold the same items")
    rng = random.Random(rng_seed)
    shown: set[int] = set()
    order: list[int] = []
    teams: list[str] = []
    at = {"A": 0, "B": 0}
    picks = {"A": 0, "B": 0}
    lists = {"A": list(a), "B": list(b)}
    while len(order) < len(a):
        if picks["A"] != picks["B"]:
            team = "A" if picks["A"] < picks["B"] else "B"
        else:
            team = "A" if rng.random() < 0.5 else "B"
        mine = lists[team]
        while mine[at[team]] in shown:  # never past its end: an item not shown yet is in both orders
            at[team] += 1
        item = mine[at[team]]
        shown.add(item)
        order.append(item)
        teams.append(team)
        picks[team] += 1
    return order, teams


def with_challenger(shown: Sequence[str], given: Sequence[str], theirs: Sequence[float],
                    rng_seed: int) -> tuple[list[int], list[str]]:
    """``shown`` (ids in the served ranker's order) merged by ``team_draft`` with the challenger's order of the same
    ids, from its scores ``theirs`` of the ids ``given`` (ties keep the order given, as the served ranker's do): the
    indices into ``shown`` in the merged order, and each one's team. A thread's comments (GET /threads/{id}/answers,
    POST /rerank: $CQA_INTERLEAVE_COMMENTS)."""
    at = {cid: i for i, cid in enumerate(shown)}
    challenger = [at[given[j]] for j in sorted(range(len(given)), key=lambda j: -theirs[j])]
    return team_draft(range(len(shown)), challenger, rng_seed)
