"""Small multi-agent envs with dynamics a test can recompute from a batch.

``WalkEnv`` (RLlib-style dicts): every agent's observation is ``[position, agent number,
env step]``; action ``a`` (Discrete(3)) moves it by ``a - 1`` and pays reward ``a`` (plus
``10 * agent number`` when it is told at a step it did not act). Options make agents
join, leave and take turns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rolloutfleet.sampling.vector.make import EnvContext

OBS_SPACE = spaces.Box(-1000.0, 1000.0, (3,), np.float32)
ACT_SPACE = spaces.Discrete(3)


class WalkEnv:
    """Agents ``a0..a{n-1}`` walk on a line.

    config: ``agents`` (2), ``length`` (env steps per episode, 8), ``late`` (an agent
    ``late`` that joins at step ``join`` and leaves, terminated, at step ``leave``),
    ``turns`` (agents alternate: only one has an observation per step), ``pettingzoo``
    (no ``__all__``; the episode ends when ``agents`` is empty).
    """

    metadata: dict[str, Any] = {"name": "walk_v0", "is_parallelizable": True}

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        self.n = int(config.get("agents", 2))
        self.length = int(config.get("length", 8))
        self.late = bool(config.get("late", False))
        self.join, self.leave = int(config.get("join", 3)), int(config.get("leave", 6))
        self.turns = bool(config.get("turns", False))
        self.pettingzoo = bool(config.get("pettingzoo", False))
        self.possible_agents = [f"a{i}" for i in range(self.n)] + (["late"] if self.late else [])
        self.observation_spaces = dict.fromkeys(self.possible_agents, OBS_SPACE)
        self.action_spaces = dict.fromkeys(self.possible_agents, ACT_SPACE)
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.pos: dict[str, float] = {}
        self.steps = 0

    def number(self, agent: str) -> int:
        return self.possible_agents.index(agent)

    def obs(self, agent: str) -> np.ndarray:
        return np.array([self.pos[agent], self.number(agent), self.steps], np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.steps = 0
        self.agents = [f"a{i}" for i in range(self.n)]
        self.pos = {agent: float(self.rng.integers(-5, 5)) for agent in self.possible_agents}
        obs = self._observe()
        return obs, {agent: {} for agent in obs}  # PettingZoo: infos keyed by agent

    def _observe(self) -> dict[str, np.ndarray]:
        acting = self.agents
        if self.turns:
            acting = [a for a in self.agents if self.number(a) % 2 == self.steps % 2] or self.agents
        return {agent: self.obs(agent) for agent in acting}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.steps += 1
        rewards: dict[str, float] = {}
        for agent, action in actions.items():
            assert agent in self.agents, f"{agent} acted without being in the game"
            self.pos[agent] += int(action) - 1
            rewards[agent] = float(int(action))
        if self.turns:  # the waiting agents are paid too: rewards sum up until they act again
            for agent in self.agents:
                if agent not in actions:
                    rewards[agent] = 10.0 * self.number(agent)
        terminated = dict.fromkeys(self.agents, False)
        truncated = dict.fromkeys(self.agents, False)
        if self.late and self.steps == self.leave and "late" in self.agents:
            terminated["late"] = True
        over = self.steps >= self.length
        if over:
            truncated = dict.fromkeys(self.agents, True)
        obs = self._observe()
        for agent, done in terminated.items():
            if done:
                obs[agent] = self.obs(agent)  # its last observation comes with the flag
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        if self.late and self.steps == self.join:
            self.agents.append("late")
            obs["late"] = self.obs("late")
        if over:
            obs = {agent: self.obs(agent) for agent in truncated}
        if not self.pettingzoo:
            terminated["__all__"] = False
            truncated["__all__"] = over
        return obs, rewards, terminated, truncated, {agent: {} for agent in obs}

    def close(self) -> None:
        pass


def make_walk(ctx: EnvContext) -> WalkEnv:
    return WalkEnv(dict(ctx))


def make_pettingzoo_walk(ctx: EnvContext) -> Any:
    """WalkEnv as a real ``pettingzoo.ParallelEnv`` subclass."""
    from pettingzoo import ParallelEnv

    class PettingZooWalk(WalkEnv, ParallelEnv):  # type: ignore[misc]
        def observation_space(self, agent: str) -> spaces.Space[Any]:
            return OBS_SPACE

        def action_space(self, agent: str) -> spaces.Space[Any]:
            return ACT_SPACE

    return PettingZooWalk({**ctx, "pettingzoo": True})


def even_odd(agent_id: str, episode: Any) -> str:
    """Mapping function: a0, a2, ... -> 'even'; the others -> 'odd'."""
    return "even" if agent_id.startswith("a") and int(agent_id[1:]) % 2 == 0 else "odd"


def per_episode_swap(agent_id: str, episode: Any) -> str:
    """Self-play style: which side a0 plays changes with the episode id."""
    side = (episode.eps_id + (agent_id == "a0")) % 2
    return "even" if side == 0 else "odd"


def unknown_policy(agent_id: str, episode: Any) -> str:
    return "green" if agent_id == "a1" else "even"


class DiscreteObsWalk(WalkEnv):
    """WalkEnv whose agents observe only their (clipped) position, as a Discrete(11)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self.observation_spaces = dict.fromkeys(self.possible_agents, spaces.Discrete(11))

    def obs(self, agent: str) -> np.ndarray:
        return np.int64(min(max(self.pos[agent] + 5, 0), 10))  # type: ignore[return-value]


def make_discrete_obs(ctx: EnvContext) -> DiscreteObsWalk:
    return DiscreteObsWalk(dict(ctx))


class AllDoneEnv:
    """RLlib-style: the episode's end only as ``{"__all__": True}``, no per-agent flags
    (``config["truncate"]``: as a truncation instead)."""

    possible_agents = ["a", "b"]
    observation_space = OBS_SPACE
    action_space = spaces.Discrete(2)

    def __init__(self, ctx: EnvContext) -> None:
        self.t, self.truncate = 0, bool(ctx.get("truncate", False))

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        self.t = 0
        return {a: self.obs() for a in self.possible_agents}, {}

    def obs(self) -> np.ndarray:
        return np.full(OBS_SPACE.shape, self.t / 10, OBS_SPACE.dtype)

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self.t += 1
        done = self.t >= 3
        obs = {a: self.obs() for a in actions}
        flags = {"__all__": done}
        cut = {"__all__": False}
        return obs, dict.fromkeys(actions, 1.0), cut if self.truncate else flags, flags if self.truncate else cut, {}


def make_all_done(ctx: EnvContext) -> AllDoneEnv:
    return AllDoneEnv(ctx)


class TupleObsWalk(WalkEnv):
    """WalkEnv whose agents observe a Tuple: (their position as a Box, their number as a
    Discrete, the env step as a Box)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        space = spaces.Tuple(
            (spaces.Box(-1000.0, 1000.0, (1,), np.float32), spaces.Discrete(8), spaces.Box(0, 1000, (), np.int32))
        )
        self.observation_spaces = dict.fromkeys(self.possible_agents, space)

    def obs(self, agent: str) -> Any:
        return (np.array([self.pos[agent]], np.float32), self.number(agent), np.int32(self.steps))


def make_tuple_obs(ctx: EnvContext) -> TupleObsWalk:
    return TupleObsWalk(dict(ctx))


def make_recorded_rps(ctx: EnvContext) -> Any:
    """PettingZoo's rock-paper-scissors as an AEC env (not its parallel_env), ``max_cycles``
    rounds a game, recording each finished game's own counts: ``finished`` per instance
    (in the order its games ended): the env's ``num_moves`` and every agent's summed rewards."""
    from pettingzoo.classic import rps_v2
    from pettingzoo.utils.wrappers import BaseWrapper

    class Recorded(BaseWrapper):  # type: ignore[misc]
        def __init__(self, env: Any) -> None:
            super().__init__(env)
            self.finished: list[dict[str, Any]] = []
            self.returns: dict[str, float] | None = None

        def reset(self, seed: int | None = None, options: Any = None) -> None:
            if self.returns is not None:
                self.finished.append({"num_moves": self.unwrapped.num_moves, "returns": self.returns})
            super().reset(seed=seed, options=options)
            self.returns = dict.fromkeys(self.agents, 0.0)

        def step(self, action: Any) -> None:
            super().step(action)
            if action is not None and self.returns is not None:  # the env's own reward dict, once per move
                for agent, reward in self.unwrapped.rewards.items():
                    self.returns[agent] += float(reward)

    env = Recorded(rps_v2.env(max_cycles=int(ctx.get("max_cycles", 5))))
    RECORDED.append(env)
    return env


RECORDED: list[Any] = []


def make_endless(ctx: EnvContext) -> Any:
    """A turn-based PettingZoo AEC env that never ends (nor truncates): agents ``a`` and ``b``
    alternate, ``a`` first; action ``k`` (Discrete(3)) pays the mover ``k + 1`` and the other
    agent ``-(k + 1)``. An agent observes ``[moves made this game, its number]``. Each game's
    own move count is recorded in ``games`` when the next game starts."""
    from pettingzoo import AECEnv

    class Endless(AECEnv):  # type: ignore[misc]
        metadata: dict[str, Any] = {"name": "endless_v0"}

        def __init__(self) -> None:
            super().__init__()
            self.possible_agents = ["a", "b"]
            self.games: list[int] = []
            self.moves: int | None = None
            self.observation_spaces = {
                agent: spaces.Box(0.0, np.inf, (2,), np.float32) for agent in self.possible_agents
            }
            self.action_spaces = {agent: spaces.Discrete(3) for agent in self.possible_agents}

        def observation_space(self, agent: str) -> spaces.Space[Any]:
            return self.observation_spaces[agent]

        def action_space(self, agent: str) -> spaces.Space[Any]:
            return self.action_spaces[agent]

        def observe(self, agent: str) -> np.ndarray:
            return np.array([self.moves or 0, self.possible_agents.index(agent)], np.float32)

        def reset(self, seed: int | None = None, options: Any = None) -> None:
            if self.moves is not None:
                self.games.append(self.moves)
            self.moves = 0
            self.agents = list(self.possible_agents)
            self.rewards = dict.fromkeys(self.agents, 0.0)
            self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
            self.terminations = dict.fromkeys(self.agents, False)
            self.truncations = dict.fromkeys(self.agents, False)
            self.infos: dict[str, dict[str, Any]] = {agent: {} for agent in self.agents}
            self.agent_selection = "a"

        def step(self, action: Any) -> None:
            mover = self.agent_selection
            other = "b" if mover == "a" else "a"
            self._cumulative_rewards[mover] = 0.0
            paid = float(int(action) + 1)
            self.rewards = {mover: paid, other: -paid}
            self._accumulate_rewards()
            self.moves = (self.moves or 0) + 1
            self.agent_selection = other

    env = Endless()
    ENDLESS.append(env)
    return env


ENDLESS: list[Any] = []


class NotObsWalk(WalkEnv):
    """WalkEnv whose agent ``a1`` observes ``value`` (default ``"hello"``) instead of its
    position from ``when``: ``reset`` (step 0) or ``step`` (later steps)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        config = dict(config or {})
        self.when, self.value = str(config.get("when", "reset")), config.get("value", "hello")

    def obs(self, agent: str) -> Any:
        bad = self.steps == 0 if self.when == "reset" else self.steps > 0
        return self.value if agent == "a1" and bad else super().obs(agent)


def make_not_obs_walk(ctx: EnvContext) -> NotObsWalk:
    return NotObsWalk(dict(ctx))
