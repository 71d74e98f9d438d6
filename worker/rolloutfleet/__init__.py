"""RolloutFleet's worker library: sample RL experience, ship it over Redis.

``rolloutfleet.spec`` (the RolloutJob model) imports neither torch nor gymnasium, so
the operator can use it; everything that needs them is imported on first use::

    from rolloutfleet import EnvRunner, RolloutJob

    runner = EnvRunner(RolloutJob.from_file("examples/cartpole.yaml"))
    batch = runner.sample()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rolloutfleet.spec import RolloutJob, SpecError

if TYPE_CHECKING:
    from rolloutfleet.batch import SampleBatch
    from rolloutfleet.callbacks import Callbacks
    from rolloutfleet.consumer import BatchConsumer
    from rolloutfleet.publisher import BatchPublisher
    from rolloutfleet.sampler import EnvRunner
    from rolloutfleet.weights import WeightPublisher, WeightSubscriber

__version__ = "0.1.0"

_LAZY = {
    "BatchConsumer": "rolloutfleet.consumer",
    "BatchPublisher": "rolloutfleet.publisher",
    "WeightPublisher": "rolloutfleet.weights",
    "WeightSubscriber": "rolloutfleet.weights",
    "SampleBatch": "rolloutfleet.batch",
    "EnvRunner": "rolloutfleet.sampler",
    "Callbacks": "rolloutfleet.callbacks",
}

__all__ = [
    "BatchConsumer",
    "BatchPublisher",
    "Callbacks",
    "EnvRunner",
    "RolloutJob",
    "SampleBatch",
    "SpecError",
    "WeightPublisher",
    "WeightSubscriber",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rolloutfleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
