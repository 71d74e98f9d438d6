"""A league's standings for the job's status: the best policies by Elo and the main agent's
rating, as the learner last computed them.

The learner publishes them (:meth:`~.store.PolicyStore.publish_standings`, also done by
:meth:`~.store.PolicyStore.publish_matchmaker_plan`) as one small JSON value,
``<job tag>:league:standings``; the operator reads that value once a tick (one GET, however
many games were played) into ``status.league``. Replaying the results stream stays with the
learner, which reads it anyway to make its plan.

    >>> elo = Elo()
    >>> elo.record({"main": 1.0, "v1": -1.0})
    >>> s = standings_of(elo, "main", snapshots=1, matches=1, at=0.0)
    >>> s.status()["message"]
    'main 1016 (1st of 2); 1 snapshot, 1 match'
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rolloutfleet.league.ratings import Elo

STATUS_TOP = 5
"""Policies listed in ``status.league.top``."""


@dataclass(frozen=True)
class Standings:
    """Who leads the league, and where the main agent stands."""

    main: str
    main_rating: float | None
    main_rank: int | None
    policies: int
    snapshots: int
    matches: int
    top: tuple[tuple[str, float, int], ...]
    """``(policy, rating, games)``, best first."""
    at: float

    def to_json(self) -> str:
        return json.dumps({
            "main": self.main, "mainRating": self.main_rating, "mainRank": self.main_rank,
            "policies": self.policies, "snapshots": self.snapshots, "matches": self.matches,
            "top": [list(row) for row in self.top], "at": self.at,
        })  # fmt: skip

    @classmethod
    def from_json(cls, raw: str | bytes) -> Standings:
        """:meth:`to_json`'s inverse; ``ValueError`` (``KeyError``, ``TypeError``) for anything else."""
        data = json.loads(raw)
        rating, rank = data["mainRating"], data["mainRank"]
        return cls(
            main=str(data["main"]),
            main_rating=None if rating is None else float(rating),
            main_rank=None if rank is None else int(rank),
            policies=int(data["policies"]),
            snapshots=int(data["snapshots"]),
            matches=int(data["matches"]),
            top=tuple((str(p), float(r), int(g)) for p, r, g in data["top"]),
            at=float(data["at"]),
        )

    def status(self) -> dict[str, Any]:
        """``status.league`` (the CRD's schema): ratings rounded to a tenth."""
        if self.main_rating is None:
            standing = f"{self.main} has no rated game yet"
        else:
            standing = f"{self.main} {self.main_rating:.0f} ({_ordinal(self.main_rank or 0)} of {self.policies})"
        if self.top and self.top[0][0] != self.main and self.main_rating is not None:
            standing += f"; best {self.top[0][0]} {self.top[0][1]:.0f}"
        counts = (
            f"{self.snapshots} snapshot{'s' * (self.snapshots != 1)}, {self.matches} match{'es' * (self.matches != 1)}"
        )
        return {
            "main": self.main,
            "mainRating": None if self.main_rating is None else round(self.main_rating, 1),
            "mainRank": self.main_rank,
            "snapshots": self.snapshots,
            "matches": self.matches,
            "top": [{"policy": p, "rating": round(r, 1), "games": g} for p, r, g in self.top],
            "updatedAt": datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "message": f"{standing}; {counts}",
        }


def standings_of(
    elo: Elo, main: str, *, snapshots: int, matches: int, top: int = STATUS_TOP, at: float | None = None
) -> Standings:
    """The standings an Elo table gives (``main``: the trained policy)."""
    rows = elo.table()
    ranks = {row[0]: rank for rank, row in enumerate(rows, start=1)}
    return Standings(
        main=main,
        main_rating=elo.ratings.get(main),
        main_rank=ranks.get(main),
        policies=len(rows),
        snapshots=snapshots,
        matches=matches,
        top=tuple((policy, rating, games) for policy, rating, games, *_ in rows[:top]),
        at=time.time() if at is None else at,
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def parse_standings(raw: str | bytes | None) -> Standings | None:
    """:meth:`Standings.from_json` of what Redis held; None for nothing or for a value that is
    not standings."""
    if raw is None:
        return None
    try:
        return Standings.from_json(raw)
    except (KeyError, ValueError, TypeError):
        return None
