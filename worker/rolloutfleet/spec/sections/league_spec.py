"""``spec.league``: a multi-agent job whose opponent seats are filled from a league of
frozen snapshots, episode by episode (docs/league.md)."""

from __future__ import annotations

from pydantic import Field

from rolloutfleet.spec.model_base import SpecModel as _Model

MAX_CACHED_POLICIES = 1024


class LeagueSpec(_Model):
    opponent: str
    """The ``spec.multiAgent.policies`` id whose seats play league snapshots: each episode,
    a worker plays the snapshot the learner's plan picks in that policy's place. It must not
    be trained (``policiesToTrain``); with no plan published yet it plays as it is."""
    cached_policies: int = Field(default=8, ge=1, le=MAX_CACHED_POLICIES)
    """Snapshots a worker holds at once (an LRU of policy slots, each with the opponent
    policy's model): a worker's memory stays bounded however big the league grows."""
    plan_refresh_seconds: float = Field(default=10.0, gt=0, le=3600)
    """How often a worker reads the learner's plan (which snapshots, how likely)."""
    publish_opponent_rows: bool = False
    """Publish the opponent's rows (every game's, whichever snapshot played) on the opponent
    policy's own stream, as a trained policy's are; each row's ``eps_id`` is its game's in the
    results stream, which names the snapshot. Off by default: only trained policies' rows
    are published. On, the stream needs a reader like any other (``block`` waits for one)."""
