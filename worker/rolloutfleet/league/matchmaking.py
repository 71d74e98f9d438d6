"""Who plays whom: a match is one episode's policy per seat, the main agent in one seat and
opponents from the league in the others (pure; the randomness is the caller's generator).

Two strategies ship, as AlphaStar's league described them:

- :class:`Uniform`: every active snapshot equally likely;
- :class:`PrioritizedFictitiousSelfPlay` (PFSP): a snapshot is picked with weight
  ``f(p)``, ``p`` the main agent's observed win rate against it (draws count half, with
  one win and one loss as a prior so that a new snapshot starts at 0.5): ``(1 - p) ** power``
  (``hard``, the default: the opponents main loses to come most often) or ``p * (1 - p)``
  (``variance``: the opponents of main's own strength).

Both place the main agent in a seat chosen uniformly, so it learns every seat::

    >>> import numpy as np
    >>> league = League(main="main", snapshots=("v1", "v2"), stats={"v1": Record(wins=9, losses=1)})
    >>> match = PrioritizedFictitiousSelfPlay().match(league, ("first", "second"), np.random.default_rng(0))
    >>> sorted(match.seats.values())[0] in {"main", "v1", "v2"}
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np


@dataclass(frozen=True)
class Record:
    """The main agent's results against one opponent."""

    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def win_rate(self) -> float:
        """Main's win rate against this opponent, draws half, with a prior of one win and one loss."""
        return (self.wins + 0.5 * self.draws + 1.0) / (self.games + 2.0)

    def add(self, score: float) -> Record:
        """This record after one more game that main scored ``score`` (1, 0.5 or 0) in."""
        if score > 0.5:
            return Record(self.wins + 1, self.draws, self.losses)
        if score < 0.5:
            return Record(self.wins, self.draws, self.losses + 1)
        return Record(self.wins, self.draws + 1, self.losses)


@dataclass(frozen=True)
class League:
    """What a matchmaker decides from: the main (trained) policy, the active snapshots, and
    main's record against each."""

    main: str
    snapshots: Sequence[str]
    stats: Mapping[str, Record] = field(default_factory=dict)

    def record(self, snapshot: str) -> Record:
        return self.stats.get(snapshot, Record())


@dataclass(frozen=True)
class Match:
    """One episode's policy per seat."""

    seats: Mapping[str, str]

    def opponents(self, main: str) -> list[str]:
        return [policy for policy in self.seats.values() if policy != main]


class Matchmaker(Protocol):
    def weights(self, league: League) -> np.ndarray:
        """Each active snapshot's probability of being picked for a seat (sums to 1)."""
        ...

    def match(self, league: League, seats: Sequence[str], rng: np.random.Generator) -> Match:
        """One match: main in one seat, picked opponents in the others."""
        ...


class _Picking:
    def weights(self, league: League) -> np.ndarray:
        raise NotImplementedError

    def match(self, league: League, seats: Sequence[str], rng: np.random.Generator) -> Match:
        if len(seats) < 2:
            raise ValueError(f"a match needs at least 2 seats, got {list(seats)}")
        main_seat = int(rng.integers(len(seats)))
        if league.snapshots:
            picks = rng.choice(len(league.snapshots), size=len(seats) - 1, p=self.weights(league))
            opponents = [league.snapshots[int(i)] for i in picks]
        else:  # no snapshot yet: main plays itself
            opponents = [league.main] * (len(seats) - 1)
        chosen = iter(opponents)
        return Match({seat: league.main if i == main_seat else next(chosen) for i, seat in enumerate(seats)})


class Uniform(_Picking):
    """Every active snapshot equally likely."""

    def weights(self, league: League) -> np.ndarray:
        n = len(league.snapshots)
        return np.full(n, 1.0 / n) if n else np.zeros(0)


@dataclass(frozen=True)
class PrioritizedFictitiousSelfPlay(_Picking):
    """Snapshots weighted by how main fares against them (see the module doc)."""

    weighting: Literal["hard", "variance"] = "hard"
    power: float = 2.0

    def __post_init__(self) -> None:
        if self.weighting not in ("hard", "variance"):
            raise ValueError(f"weighting must be 'hard' or 'variance', got {self.weighting!r}")
        if not self.power > 0:
            raise ValueError(f"power must be > 0, got {self.power}")

    def weights(self, league: League) -> np.ndarray:
        if not league.snapshots:
            return np.zeros(0)
        p = np.array([league.record(name).win_rate() for name in league.snapshots])
        raw = (1.0 - p) ** self.power if self.weighting == "hard" else p * (1.0 - p)
        total = float(raw.sum())
        return raw / total if total > 0 else np.full(len(p), 1.0 / len(p))
