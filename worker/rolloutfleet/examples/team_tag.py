"""Team tag: a small two-team grid game for multi-agent sampling, in plain numpy.

Red taggers (``red_0``, ``red_1``, ...) chase blue runners (``blue_0``, ...) on a
``size x size`` grid. Every step each agent still in the game moves (0 stay, 1 up, 2 down,
3 left, 4 right; walls stop it). A blue that ends a step on a red's cell is tagged: it gets
-1 and leaves the episode (terminated), and every red on that cell gets +1. Blues get
+0.01 for each step they stay in, reds -0.01 (time is against them). With ``late_blues``,
that many extra blues join at step ``join_step``, so agents both join and leave
mid-episode. The episode ends when no blue is left (terminated) or after ``max_steps``
(truncated).

Each agent observes its own position and, for every other agent (in ``possible_agents``
order), the offset to it and whether it is in the game, all scaled to [-1, 1]: a Box of
``2 + 3 * (agents - 1)`` floats.

The env follows PettingZoo's Parallel API (``possible_agents``, ``agents``,
``observation_space(agent)``, ``reset``, ``step`` with dicts) without importing PettingZoo;
:func:`make_rllib_env` gives the RLlib-style variant (``"__all__"`` in the done dicts).
``examples/multiagent.yaml`` samples it with a ``red`` and a ``blue`` policy::

    rolloutfleet run examples/multiagent.yaml
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rolloutfleet import EnvContext

MOVES = np.array([[0, 0], [0, -1], [0, 1], [-1, 0], [1, 0]], np.int64)
TAG_REWARD = 1.0
STEP_REWARD = 0.01


class TeamTag:
    """Red taggers chase blue runners (PettingZoo Parallel API, no PettingZoo import)."""

    metadata: dict[str, Any] = {"name": "team_tag_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        *,
        size: int = 7,
        num_red: int = 2,
        num_blue: int = 2,
        late_blues: int = 0,
        join_step: int = 10,
        max_steps: int = 50,
    ) -> None:
        config = dict(config or {})
        self.size = int(config.get("size", size))
        num_red = int(config.get("num_red", num_red))
        num_blue = int(config.get("num_blue", num_blue))
        self.late_blues = int(config.get("late_blues", late_blues))
        self.join_step = int(config.get("join_step", join_step))
        self.max_steps = int(config.get("max_steps", max_steps))
        if self.size < 2 or num_red < 1 or num_blue < 1 or self.max_steps < 1:
            raise ValueError("team tag needs size >= 2, num_red >= 1, num_blue >= 1 and max_steps >= 1")
        self.num_red = num_red
        blues = num_blue + self.late_blues
        self.possible_agents = [f"red_{i}" for i in range(num_red)] + [f"blue_{i}" for i in range(blues)]
        self._first_late = num_red + num_blue  # index of the first late blue
        n = len(self.possible_agents)
        self._obs_space = spaces.Box(-1.0, 1.0, (2 + 3 * (n - 1),), np.float32)
        self._act_space = spaces.Discrete(len(MOVES))
        self.observation_spaces = {agent: self._obs_space for agent in self.possible_agents}
        self.action_spaces = {agent: self._act_space for agent in self.possible_agents}
        self.agents: list[str] = []
        self.np_random = np.random.default_rng()
        self._pos = np.zeros((n, 2), np.int64)
        self._alive = np.zeros(n, np.bool_)
        self._steps = 0
        # For every agent, the indices of the others (the order of its observation).
        self._others = np.array([[j for j in range(n) if j != i] for i in range(n)], np.int64).reshape(n, n - 1)

    @property
    def unwrapped(self) -> TeamTag:
        return self

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def state(self) -> np.ndarray:
        """The whole board: every agent's position and whether it is in the game."""
        return np.concatenate([self._pos.reshape(-1), self._alive]).astype(np.float32)

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_space

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        n = len(self.possible_agents)
        self._pos = self.np_random.integers(0, self.size, (n, 2))
        self._alive = np.zeros(n, np.bool_)
        self._alive[: self._first_late] = True
        self._steps = 0
        self.agents = [a for i, a in enumerate(self.possible_agents) if self._alive[i]]
        return self._observations(), {agent: {} for agent in self.agents}

    def _observations(self) -> dict[str, np.ndarray]:
        scale = 1.0 / (self.size - 1)
        pos = self._pos.astype(np.float32) * scale
        offsets = pos[self._others] - pos[:, None, :]  # (n, n-1, 2)
        alive = self._alive[self._others].astype(np.float32)[..., None]
        others = np.concatenate([offsets * alive, alive], axis=2).reshape(len(pos), -1)
        obs = np.concatenate([pos * 2.0 - 1.0, others], axis=1).astype(np.float32)
        return {agent: obs[i] for i, agent in enumerate(self.possible_agents) if self._alive[i]}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]:
        index = {agent: i for i, agent in enumerate(self.possible_agents)}
        acting = [index[a] for a in self.agents]
        for agent in self.agents:
            if agent not in actions:
                raise ValueError(f"team tag: no action for agent {agent!r}")
        moves = MOVES[[int(actions[self.possible_agents[i]]) for i in acting]]
        self._pos[acting] = np.clip(self._pos[acting] + moves, 0, self.size - 1)
        self._steps += 1
        rewards = {a: (-STEP_REWARD if index[a] < self.num_red else STEP_REWARD) for a in self.agents}
        terminated = dict.fromkeys(self.agents, False)
        reds = [i for i in acting if i < self.num_red]
        for i in acting:
            if i < self.num_red:
                continue
            taggers = [r for r in reds if (self._pos[r] == self._pos[i]).all()]
            if taggers:
                blue = self.possible_agents[i]
                rewards[blue] = -TAG_REWARD
                terminated[blue] = True
                for r in taggers:
                    rewards[self.possible_agents[r]] += TAG_REWARD
        obs = self._observations()  # tagged blues still see their last observation
        for agent, done in terminated.items():
            if done:
                self._alive[index[agent]] = False
        blues_left = self._alive[self.num_red :].any() or (self.late_blues and self._steps < self.join_step)
        truncated = dict.fromkeys(self.agents, False)
        if not blues_left:
            terminated = dict.fromkeys(self.agents, True)
        elif self._steps >= self.max_steps:
            truncated = dict.fromkeys(self.agents, True)
        infos: dict[str, Any] = {agent: {} for agent in self.agents}
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if self.agents and self._steps == self.join_step and self.late_blues:
            self._alive[self._first_late :] = True
            joined = self.possible_agents[self._first_late :]
            self.agents += joined
            late = self._observations()
            for agent in joined:  # newcomers appear in every dict of the step they join in
                obs[agent], rewards[agent], infos[agent] = late[agent], 0.0, {}
                terminated[agent] = truncated[agent] = False
        return obs, rewards, terminated, truncated, infos

    def close(self) -> None:
        pass


class TeamTagDict(TeamTag):
    """The same game with RLlib's convention: ``"__all__"`` in ``terminateds``/``truncateds``."""

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]:
        obs, rewards, terminated, truncated, infos = super().step(actions)
        over = not self.agents
        terminated["__all__"] = over and not any(truncated.values())
        truncated["__all__"] = over and any(truncated.values())
        return obs, rewards, terminated, truncated, infos


def make_env(ctx: EnvContext) -> TeamTag:
    """Entry point for ``spec.env.entryPoint``: the PettingZoo-Parallel-style env."""
    return TeamTag(dict(ctx))


def make_rllib_env(ctx: EnvContext) -> TeamTagDict:
    """Entry point for the RLlib-style variant."""
    return TeamTagDict(dict(ctx))


def policy_for(agent_id: str, episode: Any) -> str:
    """A mapping function (``spec.multiAgent.policyMapping.entryPoint``): team name = policy id."""
    return "red" if agent_id.startswith("red_") else "blue"
