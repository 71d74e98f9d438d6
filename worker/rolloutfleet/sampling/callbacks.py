"""Hooks into sampling, like RLlib's ``RLlibCallback``: subclass and override what you need.

Set ``spec.sampling.callbacks: "pkg.module:MyCallbacks"`` or pass ``callbacks=`` to
:class:`~rolloutfleet.EnvRunner`. ``on_episode_step`` is only called when overridden,
since it runs once per sub-env per step::

    class CountLongEpisodes(Callbacks):
        def __init__(self):
            self.long = 0

        def on_episode_end(self, *, runner, env_index, eps_id, episode_return, episode_length, **kw):
            self.long += episode_length >= 500
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import SpecError

if TYPE_CHECKING:
    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.data.multiagent_batch import MultiAgentBatch
    from rolloutfleet.sampling.runner_base import AnyRunner


class Callbacks:
    """Multi-agent runners call the same hooks: ``on_episode_step`` once per env step with
    dicts keyed by agent (the actions taken, the env's unclipped rewards and the new
    observations), ``on_episode_end`` with the return summed over agents and the length in
    env steps, ``on_sample_end`` with a MultiAgentBatch."""

    def on_episode_start(self, *, runner: AnyRunner, env_index: int, eps_id: int) -> None:
        """A new episode began in sub-env ``env_index`` (after reset)."""

    def on_episode_step(
        self,
        *,
        runner: AnyRunner,
        env_index: int,
        eps_id: int,
        action: Any,
        reward: Any,
        new_obs: Any,
    ) -> None:
        """One transition of an ongoing episode (called only when overridden, after the step
        and before that step's ``on_episode_end``). Single-agent: the action, the reward as
        stored in the batch (clipped when ``clipRewards`` is set) and ``new_obs``."""

    def on_episode_end(
        self,
        *,
        runner: AnyRunner,
        env_index: int,
        eps_id: int,
        episode_return: float,
        episode_length: int,
        terminated: bool,
        truncated: bool,
    ) -> None:
        """An episode ended by termination or truncation (not when dropped after an env failure)."""

    def on_sample_end(self, *, runner: AnyRunner, batch: SampleBatch | MultiAgentBatch) -> None:
        """``sample()`` is about to return ``batch``."""


def load_callbacks(entry_point: str | None) -> Callbacks:
    """``spec.sampling.callbacks`` instantiated (plain :class:`Callbacks` when unset)."""
    if entry_point is None:
        return Callbacks()
    cls = load_entry_point(entry_point, "spec.sampling.callbacks")
    try:
        callbacks = cls()
    except Exception as exc:  # noqa: BLE001
        raise SpecError(f"spec.sampling.callbacks: {entry_point}() failed: {exc}") from None
    if not isinstance(callbacks, Callbacks):
        raise SpecError(f"spec.sampling.callbacks: {entry_point} is not a rolloutfleet Callbacks subclass")
    return callbacks


def overrides(callbacks: Callbacks, name: str) -> bool:
    return getattr(type(callbacks), name) is not getattr(Callbacks, name)
