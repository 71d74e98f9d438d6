"""A league's records: a snapshot's metadata and one finished match, as the store keeps them
in Redis (JSON fields; never pickled). Pure: no Redis here (:mod:`.store` reads and writes them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Snapshot:
    """A frozen policy's metadata."""

    name: str
    digest: str
    step: int = 0
    parent: str | None = None
    tags: tuple[str, ...] = ()
    size: int = 0
    created: float = 0.0
    acting: int = 0
    """Bytes at the start of the weights that hold what acting needs, encoded on their own
    (the rest, the value function, follows): 0 when the weights are not split."""
    acting_digest: str = ""
    """SHA-256 of those ``acting`` bytes."""

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "digest": self.digest, "step": self.step, "parent": self.parent,
                           "tags": list(self.tags), "size": self.size, "created": self.created,
                           "acting": self.acting, "acting_digest": self.acting_digest})  # fmt: skip

    @classmethod
    def from_json(cls, raw: str | bytes) -> Snapshot:
        data = json.loads(raw)
        return cls(
            name=str(data["name"]),
            digest=str(data["digest"]),
            step=int(data.get("step", 0)),
            parent=data.get("parent"),
            tags=tuple(str(tag) for tag in data.get("tags") or ()),
            size=int(data.get("size", 0)),
            created=float(data.get("created", 0.0)),
            acting=int(data.get("acting", 0)),
            acting_digest=str(data.get("acting_digest", "")),
        )


@dataclass(frozen=True)
class MatchResult:
    """One finished match: each seat's policy and return; from a worker, its index and the
    episode id its rows carry (``eps_id``: the join to the opponent's published rows)."""

    seats: Mapping[str, str]
    returns: Mapping[str, float]
    worker: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    eps_id: int | None = None

    def __post_init__(self) -> None:
        if set(self.seats) != set(self.returns):
            raise ValueError(f"seats {sorted(self.seats)} and returns {sorted(self.returns)} name different seats")
        if len(self.seats) < 2:
            raise ValueError(f"a match has at least 2 seats, got {sorted(self.seats)}")

    @property
    def winner(self) -> str | None:
        """The policy in the seat with the highest return; None for a draw at the top."""
        best = max(self.returns.values())
        top = [seat for seat, value in self.returns.items() if value == best]
        return self.seats[top[0]] if len(top) == 1 else None

    def policy_returns(self) -> dict[str, float]:
        """Return per policy (a policy in several seats: their mean)."""
        sums: dict[str, list[float]] = {}
        for seat, policy in self.seats.items():
            sums.setdefault(policy, []).append(float(self.returns[seat]))
        return {policy: sum(values) / len(values) for policy, values in sums.items()}

    def fields(self) -> dict[str, str]:
        out = {"seats": json.dumps(dict(self.seats)), "returns": json.dumps({k: float(v) for k, v in self.returns.items()}),
               "winner": self.winner or ""}  # fmt: skip
        if self.worker is not None:
            out["worker"] = str(self.worker)
        if self.eps_id is not None:
            out["eps_id"] = str(self.eps_id)
        if self.extra:
            out["extra"] = json.dumps(dict(self.extra))
        return out

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> MatchResult:
        get = {key.decode(): value.decode() for key, value in fields.items()}
        worker, eps_id = get.get("worker"), get.get("eps_id")
        return cls(
            seats=json.loads(get["seats"]),
            returns={seat: float(value) for seat, value in json.loads(get["returns"]).items()},
            worker=int(worker) if worker else None,
            extra=json.loads(get["extra"]) if get.get("extra") else {},
            eps_id=int(eps_id) if eps_id else None,
        )
