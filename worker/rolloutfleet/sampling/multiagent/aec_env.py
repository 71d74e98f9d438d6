"""PettingZoo AEC envs stepped through their own turn protocol (``agent_selection``/``last()``).

An AEC env (every board and card game of ``pettingzoo.classic``) lets one agent act at a
time; :class:`AECDriver` turns it into the runner's step shape without PettingZoo's
``aec_to_parallel`` (which refuses turn-based envs). After each move the agents selected
next are read with ``last()`` (the reward since they last acted); a done agent is reported
with its last row, then removed by ``step(None)``, until one that acts next is selected or
none is left, so at a game's end every agent's final reward arrives, the loser's included.
A game cut at ``spec.multiAgent.maxEpisodeSteps`` goes through :meth:`AECDriver.cut`. The
driver never imports PettingZoo (:func:`is_aec` needs it imported already).

>>> import pettingzoo.classic.tictactoe_v3 as ttt  # doctest: +SKIP
>>> list(AECDriver(ttt.env(), "spec.env.id").reset(seed=0))  # doctest: +SKIP
['player_1']
"""

from __future__ import annotations

import sys
from typing import Any

from rolloutfleet.sampling.env.failures import reset_or_fail
from rolloutfleet.spec.job import SpecError

AECStep = tuple[dict[Any, Any], dict[Any, float], dict[Any, bool], dict[Any, bool], bool, bool]
"""``(obs, rewards, terminateds, truncateds, episode_terminated, episode_truncated)``."""


def is_aec(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC env (never imports PettingZoo itself)."""
    if "pettingzoo" not in sys.modules:
        return False
    from pettingzoo import AECEnv  # type: ignore[import-untyped]

    return isinstance(env, AECEnv)


class AECDriver:
    """One AEC env, stepped a turn at a time: ``reset`` and ``step`` as the runner expects."""

    def __init__(self, env: Any, field: str) -> None:
        self.env = env
        self.field = field

    def reset(self, seed: int | None = None) -> dict[Any, Any]:
        """The first agent to act, with its observation."""
        reset_or_fail(self.env.reset, self.field, "a sub-env", seed=seed)
        obs, _, _, _, ended_term, ended_trunc = self._advance()
        if ended_term or ended_trunc:
            raise SpecError(f"{self.field}: the AEC env ended its episode at reset: no agent is left to act")
        acting = self.env.agent_selection
        return {acting: obs[acting]}

    def step(self, actions: dict[Any, Any]) -> AECStep:
        """The selected agent's move, then the done agents' removal up to the next turn."""
        agent = self.env.agent_selection
        if agent not in actions:
            raise SpecError(f"{self.field}: it is agent {agent!r}'s turn, but actions came for {sorted(actions)}")
        self.env.step(actions[agent])
        return self._advance()

    def cut(self, step: AECStep) -> AECStep:
        """``step`` (a move's result, the game still on) as the game's truncation: each agent
        still in the game that is waiting for its turn is added with what it would see now
        (``observe``) and the rewards it received since its last move (PettingZoo's
        ``_cumulative_rewards``, which ``last()`` reports at its next turn)."""
        obs, rewards, terminateds, truncateds, _, _ = step
        obs, rewards = dict(obs), dict(rewards)
        pending = getattr(self.env, "_cumulative_rewards", None) or {}
        for agent in self.env.agents:
            if agent not in obs:
                obs[agent] = self.env.observe(agent)
                rewards[agent] = float(pending.get(agent, 0.0))
        return obs, rewards, terminateds, truncateds, False, True

    def _advance(self) -> AECStep:
        """Read ``last()`` for each selected agent until one that is not done, or none, is left."""
        env = self.env
        obs: dict[Any, Any] = {}
        rewards: dict[Any, float] = {}
        terminateds: dict[Any, bool] = {}
        truncateds: dict[Any, bool] = {}
        while env.agents:
            agent = env.agent_selection
            if agent in terminateds and (terminateds[agent] or truncateds[agent]):
                raise SpecError(
                    f"{self.field}: the AEC env selected agent {agent!r} again after removing it with step(None); "
                    "a done agent must leave env.agents"
                )
            agent_obs, reward, terminated, truncated, _ = env.last()
            obs[agent] = agent_obs
            rewards[agent] = rewards.get(agent, 0.0) + float(reward)
            terminateds[agent], truncateds[agent] = bool(terminated), bool(truncated)
            if not (terminated or truncated):
                return obs, rewards, terminateds, truncateds, False, False
            env.step(None)
        ended_term = any(terminateds.values())
        return obs, rewards, terminateds, truncateds, ended_term, not ended_term
