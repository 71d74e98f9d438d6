"""RolloutFleet's worker library: sample RL experience, ship it over Redis.

``rolloutfleet.spec.job`` (the RolloutJob model) imports neither torch nor gymnasium, so
the operator can use it; everything that needs them is imported on first use::

    from rolloutfleet import EnvRunner, RolloutJob

    runner = EnvRunner(RolloutJob.from_file("examples/cartpole.yaml"))
    batch = runner.sample()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rolloutfleet.spec.job import RolloutJob, SpecError

if TYPE_CHECKING:
    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.sampling.callbacks import Callbacks
    from rolloutfleet.sampling.env_runner import EnvRunner
    from rolloutfleet.transport.consumer import BatchConsumer
    from rolloutfleet.transport.global_step import GlobalStepPublisher
    from rolloutfleet.transport.publisher import BatchPublisher
    from rolloutfleet.transport.weights import WeightPublisher, WeightSubscriber

__version__ = "0.1.0"

_LAZY = {
    "BatchConsumer": "rolloutfleet.transport.consumer",
    "BatchPublisher": "rolloutfleet.transport.publisher",
    "GlobalStepPublisher": "rolloutfleet.transport.global_step",
    "WeightPublisher": "rolloutfleet.transport.weights",
    "WeightSubscriber": "rolloutfleet.transport.weights",
    "SampleBatch": "rolloutfleet.data.batch",
    "EnvRunner": "rolloutfleet.sampling.env_runner",
    "Callbacks": "rolloutfleet.sampling.callbacks",
}
# Public modules under their short names (``from rolloutfleet import codec``).
_MODULES = {"codec": "rolloutfleet.data.codec"}

__all__ = [
    "BatchConsumer",
    "BatchPublisher",
    "Callbacks",
    "EnvRunner",
    "GlobalStepPublisher",
    "RolloutJob",
    "SampleBatch",
    "SpecError",
    "WeightPublisher",
    "WeightSubscriber",
    "__version__",
    "codec",
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
