"""What the observation check costs where it is new: ``vector`` and ``envpool`` vector envs
(one check of the whole batch per reset/step, in :class:`~rolloutfleet.sampling.vector.make.ResetGuard`)
and multi-agent envs (one per agent per reset/step, in
:class:`~rolloutfleet.sampling.multiagent.pettingzoo_env.MultiAgentEnvAdapter`).

For each env: the median over ``--repeats`` runs of ``--steps`` steps of the wrapped env with
the check and without it, in turns (random actions, legal ones where a mask says), and the
check alone on one observation. Prints one line per env, and the machine's load average (the figures move with it).

Usage: ``python -m bench.bench_obs_check [--steps 3000] [--repeats 7]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rolloutfleet.sampling.env.obs_check import AgentsObsCheck, obs_problem
from rolloutfleet.spec.job import RolloutJob

MULTI = {"policies": {"p": {}}, "policyMapping": {"rules": [{"regex": ".*", "policy": "p"}]}}


def _median_us(run: Callable[[], None], steps: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) / steps * 1e6)
    return statistics.median(times)


def _pair_us(
    with_check: Callable[[], None], without: Callable[[], None], steps: int, repeats: int
) -> tuple[float, float]:
    """Medians of the two, run in turns (a load that changes meanwhile touches both alike)."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeats):
        a.append(_median_us(with_check, steps, 1))
        b.append(_median_us(without, steps, 1))
    return statistics.median(a), statistics.median(b)


def _times(call: Callable[[], object], steps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(steps):
            call()

    return run


def _vector(vectorization: str, env_id: str, num_envs: int, steps: int, repeats: int) -> str:
    from rolloutfleet.sampling.vector.make import ResetGuard, make_vector_env

    spec = RolloutJob.from_dict(
        {
            "metadata": {"name": "b"},
            "spec": {"env": {"id": env_id, "numEnvs": num_envs, "vectorization": vectorization}},
        }
    ).spec.env
    guarded = make_vector_env(spec, 0, 1)
    assert isinstance(guarded, ResetGuard)
    plain = ResetGuard(guarded.env, spec)  # the same env, no check
    actions = np.stack([guarded.single_action_space.sample() for _ in range(num_envs)])
    obs, _ = guarded.reset(seed=0)

    def steps_of(env: ResetGuard) -> Callable[[], None]:
        def run() -> None:
            for _ in range(steps):
                env.step(actions)

        return run

    with_check, without = _pair_us(steps_of(guarded), steps_of(plain), steps, repeats)
    space = guarded._batch_space
    assert space is not None
    check = _median_us(_times(lambda: obs_problem(space, obs), steps), steps, repeats)
    guarded.close()
    return _line(f"{vectorization} {env_id} x{num_envs}", with_check, without, check)


def _multiagent(env_spec: dict[str, Any], steps: int, repeats: int) -> str:
    from rolloutfleet.sampling.multiagent.pettingzoo_env import multiagent_env_creator

    spec = RolloutJob.from_dict(
        {"metadata": {"name": "b"}, "spec": {"env": env_spec, "multiAgent": MULTI}}
    ).spec.env  # fmt: skip
    env = multiagent_env_creator(spec, 0, 1)(0)
    rng = np.random.default_rng(0)

    def run_with(step: Callable[[Any], Any]) -> Callable[[], None]:
        def run() -> None:
            obs = env.reset(seed=0)
            for _ in range(steps):
                actions = {agent: _legal(env.action_space(agent), obs[agent]) for agent in obs}
                result = step(actions)
                obs = result.obs
                if result.episode_terminated or result.episode_truncated or not obs:
                    obs = env.reset(seed=int(rng.integers(1 << 30)))

        return run

    with_check, without = _pair_us(run_with(env.step), run_with(env._step), steps, repeats)
    obs = env.reset(seed=0)
    agents_check = AgentsObsCheck(env._obs_space_or_none)  # as the env holds it: spaces cached per agent
    check = _median_us(_times(lambda: agents_check(obs), steps), steps, repeats)
    name = str(env_spec.get("id") or env_spec["entryPoint"]).rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    return _line(f"multi-agent {name} ({len(obs)} agents)", with_check, without, check)


def _legal(space: Any, obs: Any) -> Any:
    """A random action, a legal one where the observation carries PettingZoo's ``action_mask``."""
    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    return space.sample(mask=np.asarray(mask, np.int8)) if mask is not None else space.sample()


def _line(name: str, with_check: float, without: float, check: float) -> str:
    return (
        f"{name}: step {without:.2f} us without the check, {with_check:.2f} us with it "
        f"({(with_check - without) / without:+.1%}); the check alone {check:.2f} us ({check / without:.1%} of a step)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    steps, repeats = args.steps, args.repeats
    print(f"load average {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs; medians of {repeats} x {steps} steps")
    print(_vector("vector", "CartPole-v1", 64, steps, repeats))
    print(_vector("vector", "CartPole-v1", 1, steps, repeats))
    try:
        import envpool  # noqa: F401
    except ImportError:
        print("envpool: not installed, skipped")
    else:
        print(_vector("envpool", "CartPole-v1", 64, steps, repeats))
    print(_multiagent({"entryPoint": "rolloutfleet.examples.team_tag:TeamTag"}, steps, repeats))
    print(_multiagent({"id": "pettingzoo.classic.rps_v2"}, steps, repeats))
    print(_multiagent({"id": "pettingzoo.classic.tictactoe_v3"}, steps, repeats))


if __name__ == "__main__":
    main()
