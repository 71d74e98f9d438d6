"""``spec.env``: what each worker steps (a gymnasium id, an entry point, or an external env)
and how many sub-environments."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rolloutfleet.spec.fields import check_entry_point
from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError
from rolloutfleet.spec.sections.external import ExternalSpec
from rolloutfleet.spec.sections.wrappers_spec import MAX_WRAPPERS, WrapperSpec

MAX_NUM_ENVS = 4096
"""A sane upper bound (the CRD has the same): a larger value is a typo, not a plan."""


class EnvSpec(_Model):
    """What to step: a gymnasium id or an entry point, and how many sub-environments."""

    id: str | None = None
    """A registered gymnasium id, e.g. ``CartPole-v1``; ``config`` is passed as keyword arguments."""
    entry_point: str | None = None
    """``pkg.module:make_env``: a callable taking an :class:`~rolloutfleet.sampling.vector.make.EnvContext`."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Handed to the env creator (with worker_index / vector_index / num_workers for entry points)."""
    num_envs: int = Field(default=1, ge=1, le=MAX_NUM_ENVS)
    """Sub-environments per worker, stepped together with one batched policy call."""
    vectorization: Literal["auto", "sync", "async", "vector", "envpool"] = "auto"
    """``vector`` uses the env's own vectorized implementation (gymnasium ``vector_entry_point``),
    ``sync`` steps sub-envs in this process, ``async`` in one process per CPU (heavy envs),
    ``envpool`` EnvPool's C++ implementation of the id (Atari, MuJoCo; the ``envpool`` extra).
    ``auto`` picks ``vector`` when the id has one (and no wrappers are given), else ``async`` when
    a sub-env step takes 0.5 ms or more and the worker has two CPUs or more, else ``sync``."""
    wrappers: list[WrapperSpec] = Field(default_factory=list, max_length=MAX_WRAPPERS)
    """gymnasium wrappers around each sub-env, innermost first (:mod:`rolloutfleet.spec.sections.wrappers_spec`)."""
    restart_failed_sub_envs: bool = True
    """Recreate a sub-environment that raises, dropping its episode (counted in metrics)."""
    max_consecutive_failures: int = Field(default=3, ge=1, le=1000)
    """A sub-env (the vector env, for ``vector``/``async``) failing this many times in a row
    without a successful step ends the worker: exit 3, one line naming the env and the error."""
    call_timeout_seconds: float = Field(default=300.0, gt=0, le=86400)
    """An env constructor, ``reset`` or ``step`` still running after this long ends the worker:
    logged once, counted, exit 3 with one line naming the sub-env and the call
    (:mod:`rolloutfleet.fleet.env_watchdog`)."""
    external: ExternalSpec | None = None
    """The env runs outside the fleet and calls the workers for actions (:mod:`rolloutfleet.spec.sections.external`)."""

    @field_validator("entry_point")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return check_entry_point(value)

    @model_validator(mode="after")
    def _exactly_one_source(self) -> EnvSpec:
        if self.external is not None:
            return check_external(self)
        if (self.id is None) == (self.entry_point is None):
            raise ValueError("give exactly one of 'id' (a gymnasium id) or 'entryPoint' (pkg.module:callable)")
        if self.entry_point is not None and self.vectorization in ("vector", "envpool"):
            raise ValueError(f"vectorization {self.vectorization!r} needs an env 'id'")
        if self.wrappers and self.vectorization in ("vector", "envpool"):
            hint = " (EnvPool preprocesses with its own options in 'config')" if self.vectorization == "envpool" else ""
            raise _SubfieldError(
                "wrappers",
                f"wrap single sub-envs, which vectorization {self.vectorization!r} does not have: "
                f"use 'sync' or 'async'{hint}",
            )
        return self


def check_external(env: EnvSpec) -> EnvSpec:
    """An external env takes its spaces from ``id`` or declares them, and has no local env to build."""
    assert env.external is not None
    if env.entry_point is not None:
        raise _SubfieldError("entryPoint", "an external env runs outside the fleet; give 'id' or declare the spaces")
    if (env.id is not None) == env.external.declares_spaces:
        raise _SubfieldError(
            "external", "give the spaces once: 'id' (a gymnasium id) or external.observationSpace/actionSpace"
        )
    if env.wrappers or env.num_envs != 1:
        raise _SubfieldError("external", "wrappers and numEnvs are for envs the worker steps; leave them out")
    return env
