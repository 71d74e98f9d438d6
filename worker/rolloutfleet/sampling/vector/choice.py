"""Which vectorization a worker uses (``spec.env.vectorization``) and with how many env processes.

``auto`` picks ``vector`` when the id has one (and no wrappers), else ``async`` when a sub-env's
step costs at least :data:`AUTO_ASYNC_STEP_S` and the worker has two CPUs or more (measured at
build time on a throwaway sub-env, :func:`plan_vectorization`), else ``sync``.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rolloutfleet.inference.obs_spaces import MASK_KEY
from rolloutfleet.sampling.env.calls import ENV_CALL
from rolloutfleet.sampling.env.creators import env_creator
from rolloutfleet.sampling.env.failures import describe
from rolloutfleet.sampling.env.wrappers import register_namespace
from rolloutfleet.sampling.vector.processes import usable_cpus
from rolloutfleet.spec.job import EnvSpec, SpecError, parse_quantity

log = logging.getLogger(__name__)


def has_vector_entry_point(env_id: str) -> bool:
    try:
        register_namespace(env_id)
        return gym.spec(env_id).vector_entry_point is not None
    except (gym.error.Error, SpecError):
        return False


def choose_vectorization(spec: EnvSpec) -> str:
    if spec.vectorization != "auto":
        return spec.vectorization
    if spec.id is not None and not spec.wrappers and has_vector_entry_point(spec.id):
        return "vector"
    return "sync"


AUTO_ASYNC_STEP_S = 0.0005
"""``auto`` picks ``async`` when one step of one sub-env takes at least this long (0.5 ms).

A vector step of ``async`` adds a round trip to each env process. Measured with
``bench/bench_async.py --cores 2 --envs 4 --burn-ms B`` on a shared 2-core machine, async/sync:
0.78x at 0.1 ms, 1.24x at 0.25 ms, 1.39x at 0.5 ms, 1.74x at 2 ms; 0.5 ms keeps clear of the
break-even (about 0.15 ms) on a busier node."""
MEASURE_STEPS = 20
"""Steps of the throwaway sub-env that ``auto`` times (fewer when they exceed :data:`MEASURE_BUDGET_S`)."""
MEASURE_BUDGET_S = 0.5


@dataclass(frozen=True)
class VectorChoice:
    """How the vector env is built: the mode, its env processes and, for ``auto``, why.

    >>> VectorChoice("async", processes=2, sub_envs=8).describe()
    'async: 2 env processes x 4 sub-envs'
    """

    mode: str
    processes: int = 1
    """Env processes (``async``); 1 otherwise: the sub-envs step in the worker process."""
    sub_envs: int = 1
    step_seconds: float | None = None
    """The measured cost of one sub-env step (``auto`` with two CPUs or more), else None."""
    reason: str = ""

    def describe(self) -> str:
        if self.mode != "async":
            where = f"{self.mode}: {self.sub_envs} sub-envs in the worker process"
        else:
            share = math.ceil(self.sub_envs / self.processes)
            exact = "" if self.sub_envs % self.processes == 0 else "up to "
            where = f"async: {self.processes} env processes x {exact}{share} sub-envs"
        return f"{where} ({self.reason})" if self.reason else where


def measure_step_seconds(create: Callable[[int], gym.Env[Any, Any]], steps: int = MEASURE_STEPS) -> float:
    """The median time of one step of a throwaway sub-env (random actions, closed afterwards):
    the sampled sub-envs are built apart, so their seeded trajectories do not change."""
    env = create(0)
    try:
        space = env.action_space
        space.seed(0)
        with ENV_CALL.calling("reset", 0):
            obs, _ = env.reset(seed=0)
        times: list[float] = []
        deadline = time.perf_counter() + MEASURE_BUDGET_S
        for _ in range(steps):
            action = _legal_sample(space, obs)
            began = time.perf_counter()
            with ENV_CALL.calling("step", 0):
                obs, _, terminated, truncated, _ = env.step(action)
            now = time.perf_counter()
            times.append(now - began)
            if terminated or truncated:
                with ENV_CALL.calling("reset", 0):
                    obs, _ = env.reset()
            if now > deadline:
                break
        return statistics.median(times)
    finally:
        env.close()


def _legal_sample(space: spaces.Space[Any], obs: Any) -> Any:
    """A random action, among the legal ones where the observation has an ``action_mask``."""
    mask = obs.get(MASK_KEY) if isinstance(obs, dict) else None
    if isinstance(space, spaces.Discrete) and mask is not None and np.any(mask):
        return space.sample(mask=np.asarray(mask, np.int8))
    return space.sample()


def worker_cpus(cpu: str | None) -> int:
    """CPUs for env processes: ``resources.cpu`` rounded up, never more than the process may
    use (:func:`~rolloutfleet.sampling.vector.processes.usable_cpus`), which counts when it is unset."""
    usable = usable_cpus()
    return usable if cpu is None else max(1, min(usable, math.ceil(parse_quantity(cpu))))


def plan_vectorization(spec: EnvSpec, worker_index: int, num_workers: int, cpu: str | None = None) -> VectorChoice:
    """Decide ``spec.vectorization`` (``auto`` times a throwaway sub-env) and the env processes;
    ``cpu`` is ``spec.resources.cpu``. Logs one line saying what ``auto`` chose and why."""
    mode, n = choose_vectorization(spec), spec.num_envs
    if mode in ("vector", "envpool"):
        return VectorChoice(mode, sub_envs=n)
    cpus = worker_cpus(cpu)
    if mode == "async":
        return VectorChoice("async", processes=min(n, cpus), sub_envs=n, reason=f"{cpus} CPUs")
    if spec.vectorization != "auto":
        return VectorChoice(mode, sub_envs=n)
    if cpus < 2 or n < 2:
        why = f"{cpus} CPU" if cpus < 2 else "1 sub-env"
        choice = VectorChoice("sync", sub_envs=n, reason=f"auto: {why}, nothing to spread")
    else:
        try:
            seconds: float | None = measure_step_seconds(env_creator(spec, worker_index, num_workers))
        except Exception as exc:  # noqa: BLE001 - building the real env says what is wrong, or the runner counts it
            seconds, failure = None, describe(exc)
        limit = f"{AUTO_ASYNC_STEP_S * 1e3:g} ms"
        if seconds is None:
            choice = VectorChoice("sync", sub_envs=n, reason=f"auto: timing a throwaway sub-env failed ({failure})")
        elif seconds >= AUTO_ASYNC_STEP_S:
            reason = f"auto: a sub-env step takes {seconds * 1e3:.2f} ms >= {limit}, {cpus} CPUs"
            choice = VectorChoice("async", processes=min(n, cpus), sub_envs=n, step_seconds=seconds, reason=reason)
        else:
            reason = f"auto: a sub-env step takes {seconds * 1e3:.3f} ms < {limit}, cheaper than a process round trip"
            choice = VectorChoice("sync", sub_envs=n, step_seconds=seconds, reason=reason)
    log.info("vectorization %s", choice.describe())
    return choice
