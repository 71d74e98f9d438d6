"""``spec.sampling``: how experience is cut into batches and preprocessed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rolloutfleet.spec.fields import check_entry_point
from rolloutfleet.spec.model_base import SpecModel as _Model

MAX_FRAGMENT_LENGTH = 100_000
"""A sane upper bound (the CRD has the same): a larger value is a typo, not a plan."""


class SamplingSpec(_Model):
    """How experience is cut into batches and preprocessed."""

    rollout_fragment_length: int = Field(default=200, ge=1, le=MAX_FRAGMENT_LENGTH)
    """Env steps per sub-environment per batch (truncate_episodes)."""
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = "truncate_episodes"
    observation_filter: Literal["none", "meanStd"] = "none"
    clip_rewards: float | None = Field(default=None, gt=0)
    """Clip rewards stored in batches to [-bound, bound]; episode metrics use raw rewards."""
    clip_actions: bool = False
    """Clip continuous actions to the space's bounds before the env sees them (batches keep the sample)."""
    seed: int | None = Field(default=None, ge=0)
    """Base seed: worker i, sub-env j get distinct seeds derived from (seed, i, j)."""
    callbacks: str | None = None
    """``pkg.module:MyCallbacks``: a :class:`rolloutfleet.sampling.callbacks.Callbacks` subclass."""
    infos: list[str] = Field(default_factory=list, max_length=64)
    """Keys of the env's ``info`` recorded as batch columns ``infos/<key>`` (numeric scalars or
    fixed-shape arrays) with a mask ``infos/_<key>`` (docs/guides/sampling.md); single-agent envs."""

    @field_validator("callbacks")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return check_entry_point(value)

    @field_validator("infos")
    @classmethod
    def _info_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not key or key.startswith("_") or "/" in key:
                raise ValueError(f"info key {key!r}: must be non-empty, not start with '_' and hold no '/'")
        if len(set(value)) != len(value):
            raise ValueError(f"info keys repeat: {value}")
        return value
