"""What ``--job`` names: a RolloutJob manifest (a YAML file: its name, namespace, policies
and, for Minari, the env's spaces and gymnasium spec) or a bare job name."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rolloutfleet.spec.job import RolloutJob


def load_job(job: str) -> RolloutJob | None:
    """The manifest ``job`` names, or None when it is a bare name (no such file)."""
    path = Path(job)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        return RolloutJob.from_file(path)
    return None


def job_spaces(job: RolloutJob) -> tuple[Any, Any]:
    """One sub-env's observation and action spaces, built as a worker builds them."""
    from rolloutfleet.sampling.vector.make import env_spaces

    return env_spaces(job.spec.env, 0, 1)


def job_env_spec(job: RolloutJob) -> Any:
    """The gymnasium ``EnvSpec`` of the job's env with its config as keyword arguments (None
    for a ``module:callable`` env: Minari then has spaces but cannot rebuild the env)."""
    import gymnasium as gym

    env_id = job.spec.env.id
    if env_id is None:
        return None
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return None
    return dataclasses.replace(spec, kwargs={**spec.kwargs, **job.spec.env.config})
