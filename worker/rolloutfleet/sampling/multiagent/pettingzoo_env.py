"""Multi-agent environments behind one small interface: PettingZoo Parallel or RLlib-style dicts.

PettingZoo's Parallel API ends an episode when ``env.agents`` is empty; RLlib's
``MultiAgentEnv`` convention when ``terminateds``/``truncateds`` carry ``"__all__"``. Either
way only the agents in an observation dict act next, so agents can appear, leave and take
turns. AEC (turn-based) envs are :mod:`rolloutfleet.sampling.multiagent.aec_env`'s. PettingZoo is
imported only when an env needs it, so single-agent workers run without it. Which factory
``spec.env.id`` or ``spec.env.entryPoint`` names: docs/guides/multi-agent.md.

>>> from rolloutfleet.examples.team_tag import TeamTag
>>> env = MultiAgentEnvAdapter(TeamTag({}))
>>> obs = env.reset(seed=0)
>>> sorted(obs) == sorted(env.possible_agents)
True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from gymnasium import spaces

from rolloutfleet.sampling.env.calls import watched_creator
from rolloutfleet.sampling.env.creators import EnvContext
from rolloutfleet.sampling.env.failures import EnvFailed, reset_or_fail
from rolloutfleet.sampling.env.obs_check import AgentsObsCheck
from rolloutfleet.sampling.multiagent.aec_env import AECDriver, is_aec
from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import EnvSpec, SpecError

ALL = "__all__"
"""RLlib's key in ``terminateds`` / ``truncateds`` for the whole episode."""


class MultiAgentStep(NamedTuple):
    """One env step, per agent, with the ``__all__`` entries taken out."""

    obs: Mapping[Any, Any]
    rewards: Mapping[Any, float]
    terminateds: Mapping[Any, bool]
    truncateds: Mapping[Any, bool]
    episode_terminated: bool
    episode_truncated: bool


class MultiAgentEnvAdapter:
    """A PettingZoo Parallel env or an RLlib-style dict env, stepped the same way.

    ``field`` names the manifest field the env came from, for error messages.
    """

    def __init__(self, env: Any, field: str = "spec.env") -> None:
        self.field = field
        self._aec = AECDriver(env, field) if is_aec(env) else None
        for method in ("reset", "step"):
            if not callable(getattr(env, method, None)):
                raise SpecError(
                    f"{field}: a {type(env).__name__} has no {method}(); a multi-agent env follows PettingZoo's "
                    "Parallel API or RLlib's MultiAgentEnv (dicts keyed by agent id)"
                )
        self.env = env
        self._obs_space = _space_lookup(env, "observation")
        self._act_space = _space_lookup(env, "action")
        self._pettingzoo_style = False  # learnt from the first step: no "__all__" keys
        self._obs_problem = AgentsObsCheck(self._obs_space_or_none)

    @property
    def possible_agents(self) -> list[Any]:
        """Every agent the env may ever have, when it says so (else ``[]``)."""
        agents = getattr(self.env, "possible_agents", None)
        if agents:
            return list(agents)
        for attribute in ("observation_spaces", "observation_space"):
            value = getattr(self.env, attribute, None)
            if isinstance(value, Mapping | spaces.Dict):
                return list(value.keys())
        return []

    def observation_space(self, agent: Any) -> spaces.Space[Any]:
        return self._space(self._obs_space, agent, "observation")

    def action_space(self, agent: Any) -> spaces.Space[Any]:
        return self._space(self._act_space, agent, "action")

    def _space(self, lookup: Callable[[Any], Any] | None, agent: Any, kind: str) -> spaces.Space[Any]:
        space = None if lookup is None else lookup(agent)
        if not isinstance(space, spaces.Space):
            raise SpecError(
                f"{self.field}: cannot tell the {kind} space of agent {agent!r}: give the env a "
                f"{kind}_space(agent) method (PettingZoo) or a {kind}_spaces dict (RLlib)"
            )
        return space

    @property
    def turn_based(self) -> bool:
        """A PettingZoo AEC env: one agent acts per step."""
        return self._aec is not None

    def _obs_space_or_none(self, agent: Any) -> spaces.Space[Any] | None:
        """The agent's observation space for the checks (None: the env does not say)."""
        space = None if self._obs_space is None else self._obs_space(agent)
        return space if isinstance(space, spaces.Space) else None

    def reset(self, seed: int | None = None) -> dict[Any, Any]:
        """The first observations; one that is not an observation of its agent's space is :class:`EnvFailed`."""
        if self._aec is not None:
            obs = self._aec.reset(seed)
        else:
            result = reset_or_fail(self.env.reset, self.field, "a sub-env", seed=seed)
            obs = result[0] if isinstance(result, tuple) else result
            if not isinstance(obs, Mapping):
                raise SpecError(f"{self.field}: reset() returned {type(obs).__name__}, expected a dict of agent -> obs")
        if (problem := self._obs_problem(obs)) is not None:
            raise EnvFailed(f"{self.field}: reset returned {problem}")
        return dict(obs)

    def step(self, actions: Mapping[Any, Any]) -> MultiAgentStep:
        """One step; an observation that is not one of its agent's space is a ``ValueError``
        (the runner counts it as the sub-env's failure)."""
        step = self._step(actions)
        if (problem := self._obs_problem(step.obs)) is not None:
            raise ValueError(f"step returned {problem}")
        return step

    def _step(self, actions: Mapping[Any, Any]) -> MultiAgentStep:
        if self._aec is not None:
            return MultiAgentStep(*self._aec.step(dict(actions)))
        obs, rewards, terminateds, truncateds, _ = self.env.step(actions)
        terminateds, truncateds = dict(terminateds), dict(truncateds)
        if ALL in terminateds or ALL in truncateds:
            ended_term = bool(terminateds.pop(ALL, False))
            ended_trunc = bool(truncateds.pop(ALL, False)) and not ended_term
            return MultiAgentStep(obs, rewards, terminateds, truncateds, ended_term, ended_trunc)
        # PettingZoo: the episode is over when no agent is left.
        live = getattr(self.env, "agents", None)
        if live is not None:
            over = not live
        else:
            over = bool(obs) and all(terminateds.get(a, False) or truncateds.get(a, False) for a in obs)
        if not over:
            return MultiAgentStep(obs, rewards, terminateds, truncateds, False, False)
        truncated = any(truncateds.values()) and not all(terminateds.values())
        return MultiAgentStep(obs, rewards, terminateds, truncateds, not truncated, truncated)

    def cut(self, step: MultiAgentStep) -> MultiAgentStep:
        """``step`` (the episode still running) as the episode's truncation by the runner's
        step bound; an AEC game also reports its waiting agents (:meth:`AECDriver.cut`)."""
        if self._aec is not None:
            return MultiAgentStep(*self._aec.cut(tuple(step)))  # type: ignore[arg-type]
        return step._replace(episode_terminated=False, episode_truncated=True)

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _space_lookup(env: Any, kind: str) -> Callable[[Any], Any] | None:
    """How to ask ``env`` for one agent's space, in the order the two APIs offer it."""
    single = getattr(env, f"{kind}_space", None)
    if callable(single) and not isinstance(single, spaces.Space):
        return single  # type: ignore[no-any-return]  # PettingZoo: observation_space(agent)
    per_agent = getattr(env, f"{kind}_spaces", None)
    if isinstance(per_agent, Mapping):
        return per_agent.get
    getter = getattr(env, f"get_{kind}_space", None)
    if callable(getter):
        return getter  # type: ignore[no-any-return]
    if isinstance(single, spaces.Dict):
        return lambda agent: single.spaces.get(agent)
    if isinstance(single, spaces.Space):
        return lambda agent: single  # one space shared by every agent
    return None


def multiagent_env_creator(spec: EnvSpec, worker_index: int, num_workers: int) -> Callable[[int], MultiAgentEnvAdapter]:
    """A function building sub-env ``vector_index`` of this worker, adapted."""
    if spec.entry_point is not None:
        make = load_entry_point(spec.entry_point, "spec.env.entryPoint")

        def create(vector_index: int) -> MultiAgentEnvAdapter:
            env = make(EnvContext(dict(spec.config), worker_index, vector_index, num_workers))
            return MultiAgentEnvAdapter(env, "spec.env.entryPoint")

        return watched_creator(create)
    env_id = spec.id
    assert env_id is not None  # guaranteed by EnvSpec's validator
    try:
        module = importlib.import_module(env_id)
    except Exception as exc:  # noqa: BLE001 - one line naming the field
        raise SpecError(
            f"spec.env.id: a multi-agent id names a module with a parallel_env() or env() factory, like "
            f"PettingZoo's 'pettingzoo.classic.rps_v2' or 'pettingzoo.classic.tictactoe_v3'; importing {env_id!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    factory = getattr(module, "parallel_env", None)
    if not callable(factory):
        factory = getattr(module, "env", None)  # PettingZoo's AEC factory (turn-based games)
    if not callable(factory):
        raise SpecError(f"spec.env.id: module {env_id!r} has no parallel_env() or env(); use spec.env.entryPoint")

    def create_registered(vector_index: int) -> MultiAgentEnvAdapter:
        return MultiAgentEnvAdapter(factory(**spec.config), "spec.env.id")

    return watched_creator(create_registered)


def make_multiagent_envs(spec: EnvSpec, worker_index: int, num_workers: int) -> list[MultiAgentEnvAdapter]:
    """The worker's sub-envs; a failure to build one is a SpecError naming the field."""
    create = multiagent_env_creator(spec, worker_index, num_workers)
    field = "spec.env.id" if spec.id is not None else "spec.env.entryPoint"
    try:
        return [create(index) for index in range(spec.num_envs)]
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
        raise SpecError(f"{field}: building the environment failed: {type(exc).__name__}: {exc}") from None
