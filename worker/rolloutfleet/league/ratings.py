"""Elo ratings of a league's policies, from finished matches (pure).

A match between two seats moves both ratings by ``k * (score - expected)``, where the
expected score of A against B is ``1 / (1 + 10 ** ((rating_b - rating_a) / 400))`` and a
win scores 1, a draw 0.5, a loss 0. A match of more than two seats counts as every pair of
its seats, ranked by their returns, with ``k`` divided by the number of opponents each seat
had, so one match moves a rating as much as one two-player game. Results are applied in
the order given (the results stream's order); a policy's first match starts it at
``initial``::

    >>> table = Elo()
    >>> table.record({"main": 1.0, "v1": -1.0})
    >>> round(table.rating("main")), round(table.rating("v1"))
    (1016, 984)
    >>> table.games["main"], table.wins["main"]
    (1, 1)
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_INITIAL = 1000.0
DEFAULT_K = 32.0


def expected_score(rating: float, opponent: float) -> float:
    """What ``rating`` is expected to score against ``opponent`` (0..1)."""
    return 1.0 / (1.0 + 10.0 ** ((opponent - rating) / 400.0))


def pair_score(return_a: float, return_b: float) -> float:
    """A's score against B from their returns: 1 (higher), 0.5 (equal), 0 (lower)."""
    if return_a > return_b:
        return 1.0
    if return_a < return_b:
        return 0.0
    return 0.5


@dataclass
class Elo:
    """An Elo table: ratings, games, wins, draws and losses per policy."""

    k: float = DEFAULT_K
    initial: float = DEFAULT_INITIAL
    ratings: dict[str, float] = field(default_factory=dict)
    games: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    wins: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    draws: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    losses: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        if not self.k > 0:
            raise ValueError(f"k must be > 0, got {self.k}")

    def rating(self, policy: str) -> float:
        return self.ratings.get(policy, self.initial)

    def record(self, returns: Mapping[str, float]) -> None:
        """One finished match: each seat's policy and its return. A policy in more than one
        seat (self-play) is rated against the others only; a match of one policy changes
        nothing."""
        seats = {policy: float(value) for policy, value in returns.items()}
        if len(seats) < 2:
            return
        step = self.k / (len(seats) - 1)
        before = {policy: self.rating(policy) for policy in seats}
        change: dict[str, float] = defaultdict(float)
        for a, b in itertools.combinations(seats, 2):
            score = pair_score(seats[a], seats[b])
            delta = step * (score - expected_score(before[a], before[b]))
            change[a] += delta
            change[b] -= delta
        best = max(seats.values())
        winners = [policy for policy, value in seats.items() if value == best]
        for policy in seats:
            self.ratings[policy] = before[policy] + change[policy]
            self.games[policy] += 1
            if len(winners) == len(seats):
                self.draws[policy] += 1
            elif policy in winners:
                self.wins[policy] += 1
            else:
                self.losses[policy] += 1

    def record_all(self, matches: Iterable[Mapping[str, float]]) -> None:
        for returns in matches:
            self.record(returns)

    def table(self, top: int | None = None) -> list[tuple[str, float, int, int, int, int]]:
        """``(policy, rating, games, wins, draws, losses)``, best first (ties by name)."""
        rows = [
            (policy, rating, self.games[policy], self.wins[policy], self.draws[policy], self.losses[policy])
            for policy, rating in self.ratings.items()
        ]
        rows.sort(key=lambda row: (-row[1], row[0]))
        return rows if top is None else rows[:top]
