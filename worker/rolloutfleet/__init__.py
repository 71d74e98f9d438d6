"""RolloutFleet's worker library: sample RL experience, ship it over Redis.

``__all__`` is the public API, what a learner, a notebook or a custom env / policy author
imports; everything else is internal and may move. ``import rolloutfleet`` loads only the
spec (the operator imports ``rolloutfleet.spec``, and the package comes with it): the other
names are imported on first use, from the table ``_LAZY`` below, so torch, gymnasium, numpy
and redis load only when a name that needs them is used::

    from rolloutfleet import EnvRunner, RolloutJob

    runner = EnvRunner(RolloutJob.from_file("examples/cartpole.yaml"))
    batch = runner.sample()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rolloutfleet.spec.job import RolloutJob, SpecError

if TYPE_CHECKING:
    from rolloutfleet.client import PolicyClient
    from rolloutfleet.data import codec
    from rolloutfleet.data.batch import SampleBatch, state_columns
    from rolloutfleet.data.episode_returns import EpisodeReturns
    from rolloutfleet.datasets.writer import DatasetWriter
    from rolloutfleet.fleet.runner_factory import build_model, build_policy_models
    from rolloutfleet.inference.obs_spaces import MASK_KEY, ObsParts, obs_parts
    from rolloutfleet.inference.recurrent_model import is_stateful
    from rolloutfleet.sampling.callbacks import Callbacks
    from rolloutfleet.sampling.env.creators import EnvContext, env_creator
    from rolloutfleet.sampling.env_runner import EnvRunner
    from rolloutfleet.sampling.multiagent.policy_mapping import EpisodeInfo
    from rolloutfleet.sampling.vector.make import env_spaces
    from rolloutfleet.spec.redis_url import redacted_url
    from rolloutfleet.transport.consumer import BatchConsumer
    from rolloutfleet.transport.global_step import GlobalStepPublisher
    from rolloutfleet.transport.publisher import BatchPublisher
    from rolloutfleet.transport.weights import WeightPublisher, WeightSubscriber

__version__ = "0.1.0"

_LAZY = {
    # Redis I/O: what a learner reads and publishes with.
    "BatchConsumer": "rolloutfleet.transport.consumer",
    "BatchPublisher": "rolloutfleet.transport.publisher",
    "GlobalStepPublisher": "rolloutfleet.transport.global_step",
    "WeightPublisher": "rolloutfleet.transport.weights",
    "WeightSubscriber": "rolloutfleet.transport.weights",
    "redacted_url": "rolloutfleet.spec.redis_url",  # a Redis URL as it may be printed
    # What a simulator outside the fleet calls for actions (spec.env.external).
    "PolicyClient": "rolloutfleet.client",
    # Experience as data.
    "DatasetWriter": "rolloutfleet.datasets.writer",
    "SampleBatch": "rolloutfleet.data.batch",
    "state_columns": "rolloutfleet.data.batch",
    "EpisodeReturns": "rolloutfleet.data.episode_returns",
    # Sampling, and what custom envs and callbacks are handed.
    "EnvRunner": "rolloutfleet.sampling.env_runner",
    "Callbacks": "rolloutfleet.sampling.callbacks",
    "EnvContext": "rolloutfleet.sampling.env.creators",
    "env_creator": "rolloutfleet.sampling.env.creators",
    "env_spaces": "rolloutfleet.sampling.vector.make",
    "EpisodeInfo": "rolloutfleet.sampling.multiagent.policy_mapping",
    # The job's models, as the workers build them (a learner trains the same ones).
    "build_model": "rolloutfleet.fleet.runner_factory",
    "build_policy_models": "rolloutfleet.fleet.runner_factory",
    "is_stateful": "rolloutfleet.inference.recurrent_model",
    "MASK_KEY": "rolloutfleet.inference.obs_spaces",
    "ObsParts": "rolloutfleet.inference.obs_spaces",
    "obs_parts": "rolloutfleet.inference.obs_spaces",
}
# Public modules under their short names (``from rolloutfleet import codec``).
_MODULES = {"codec": "rolloutfleet.data.codec"}

__all__ = [
    "MASK_KEY",
    "BatchConsumer",
    "BatchPublisher",
    "Callbacks",
    "DatasetWriter",
    "EnvContext",
    "EnvRunner",
    "EpisodeInfo",
    "EpisodeReturns",
    "GlobalStepPublisher",
    "ObsParts",
    "PolicyClient",
    "RolloutJob",
    "SampleBatch",
    "SpecError",
    "WeightPublisher",
    "WeightSubscriber",
    "__version__",
    "build_model",
    "build_policy_models",
    "codec",
    "env_creator",
    "env_spaces",
    "is_stateful",
    "obs_parts",
    "redacted_url",
    "state_columns",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rolloutfleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
