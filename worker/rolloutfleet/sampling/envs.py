"""Building environments from a spec: creators, seeds and the vector env.

Four vectorizations (``spec.env.vectorization``):

* ``vector`` — the env's own batched implementation (gymnasium ``vector_entry_point``,
  e.g. CartPole's): fastest by far, one object for all sub-envs;
* ``sync`` — :class:`ResilientSyncVectorEnv`, sub-envs stepped in this process; a
  sub-env that raises is closed and recreated without disturbing the others;
* ``async`` — :class:`~rolloutfleet.sampling.env_processes.ProcessVectorEnv`: one process per
  CPU, each stepping its share of the sub-envs in a row, for heavy envs;
* ``envpool`` — EnvPool's C++ vector env of the id (:mod:`rolloutfleet.sampling.envpool_env`).

``spec.env.wrappers`` wrap each sub-env (``sync``, ``async``), in the order given.

Failing envs end: a sub-env (the whole vector env, for ``vector`` and ``async``) that fails
``spec.env.maxConsecutiveFailures`` times in a row without a successful step, or whose
``reset`` raises, raises :class:`EnvFailed` (a :class:`SpecError`: the worker exits 3 with
one line naming the env and the error). After :func:`interrupt_failing_envs` (a stop
signal) the next failure raises :class:`EnvInterrupted` instead of recreating the env.

``auto`` picks ``vector`` when the id has one (and no wrappers), else ``async`` when a sub-env's
step costs at least :data:`AUTO_ASYNC_STEP_S` and the worker has two CPUs or more (measured at
build time on a throwaway sub-env, :func:`plan_vectorization`), else ``sync``.

Autoreset: ``sync`` and ``async`` use gymnasium's SAME_STEP mode (the final observation of an
ended episode is in ``info["final_obs"]``) and seed sub-env ``i`` alike, so they give the same
trajectories; ``vector`` keeps whatever the env declares (NEXT_STEP for gymnasium's own and
for EnvPool). The sampler handles both.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from rolloutfleet.inference.obs_spaces import MASK_KEY
from rolloutfleet.sampling.env_calls import ENV_CALL, watched_creator
from rolloutfleet.sampling.env_processes import ProcessVectorEnv, usable_cpus
from rolloutfleet.sampling.obs_check import obs_problem
from rolloutfleet.sampling.wrappers import apply_wrappers, register_namespace
from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import EnvSpec, SpecError, parse_quantity

log = logging.getLogger(__name__)

FAILED = "_rolloutfleet_env_failed"
"""Info key of :class:`ResilientSyncVectorEnv`: boolean mask of sub-envs recreated this step."""


_STOPPING = threading.Event()


class EnvFailed(SpecError):
    """An env kept failing (or could not be reset): the worker ends with exit 3 and this line."""


class EnvInterrupted(Exception):
    """An env failed after a stop was requested: sampling ends instead of recreating it."""


def interrupt_failing_envs() -> None:
    """From now on, an env failure ends sampling (:class:`EnvInterrupted`); safe in a signal handler."""
    _STOPPING.set()


def stop_requested() -> bool:
    """Whether :func:`interrupt_failing_envs` was called (a runner waiting on clients stops waiting)."""
    return _STOPPING.is_set()


def env_name(spec: EnvSpec) -> str:
    """``spec.env.id 'CartPole-v1'`` or ``spec.env.entryPoint 'pkg.mod:make'``: how one line names the env."""
    return f"spec.env.id {spec.id!r}" if spec.id is not None else f"spec.env.entryPoint {spec.entry_point!r}"


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")


class FailureBudget:
    """Consecutive failures per sub-env (``None``: the whole vector env) without a successful step.

    A success is reported either with :meth:`succeeded`, or by passing ``progress`` (any count
    that grows with successful steps) to :meth:`failed`: a failure after progress starts a
    new streak. ``limit`` 1 (or ``restart`` False) makes the first failure final.

    >>> budget = FailureBudget(2, "spec.env.id 'X-v0'")
    >>> budget.failed(0, RuntimeError("boom"))
    >>> budget.failed(0, RuntimeError("boom"))
    Traceback (most recent call last):
    ...
    rolloutfleet.sampling.envs.EnvFailed: spec.env.id 'X-v0': sub-env 0 failed 2 times in a row without a successful step; last error: RuntimeError: boom
    """

    def __init__(self, limit: int, name: str, restart: bool = True) -> None:
        self.limit = limit if restart else 1
        self.name = name
        self.streak: dict[int | None, tuple[int, int | None]] = {}  # index -> (failures, progress at the last)

    def failed(self, index: int | None, exc: BaseException, progress: int | None = None) -> None:
        """Count a failure; raises :class:`EnvFailed` at the limit, :class:`EnvInterrupted` when
        stopping. ``exc`` that is already one of them (a sub-env's verdict reaching the runner's
        vector-env handler) is raised again, not counted."""
        if isinstance(exc, EnvFailed | EnvInterrupted):
            raise exc
        count, seen = self.streak.get(index, (0, progress))
        count = count + 1 if seen == progress else 1
        self.streak[index] = (count, progress)
        where = "the vector env" if index is None else f"sub-env {index}"
        if count >= self.limit:
            if self.limit == 1:
                raise EnvFailed(f"{self.name}: {where} failed (restartFailedSubEnvs is false): {describe(exc)}")
            raise EnvFailed(
                f"{self.name}: {where} failed {count} times in a row without a successful step; "
                f"last error: {describe(exc)}"
            )
        if _STOPPING.is_set():
            raise EnvInterrupted(f"{where} failed while stopping: {describe(exc)}")

    def succeeded(self, index: int | None) -> None:
        self.streak.pop(index, None)


def reset_or_fail(reset: Callable[..., Any], name: str, where: str, **kwargs: Any) -> Any:
    """``reset(**kwargs)``, with any error turned into :class:`EnvFailed` naming the env."""
    try:
        return reset(**kwargs)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
        raise EnvFailed(f"{name}: {where} reset failed: {describe(exc)}") from None


class EnvContext(dict[str, Any]):
    """The env config handed to an entry point, plus where the env lives (like RLlib's).

    >>> ctx = EnvContext({"size": 3}, worker_index=1, vector_index=0, num_workers=2)
    >>> ctx["size"], ctx.worker_index
    (3, 1)
    """

    def __init__(self, config: dict[str, Any], worker_index: int, vector_index: int, num_workers: int) -> None:
        super().__init__(config)
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.num_workers = num_workers


def derive_seed(seed: int | None, *path: int) -> int | None:
    """A seed for (worker, sub-env, ...) that differs for every path, or None when unseeded."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])


def episode_id_base(worker_index: int) -> int:
    """High bits of this worker's ``eps_id``s: the worker index and a random number, so ids
    stay unique across workers and across restarts of the same worker (add a counter)."""
    return (worker_index << 44) | (secrets.randbits(20) << 24)


def env_creator(spec: EnvSpec, worker_index: int, num_workers: int) -> Callable[[int], gym.Env[Any, Any]]:
    """A function building sub-env ``vector_index`` of this worker (inside ``spec.wrappers``)."""
    create = _bare_creator(spec, worker_index, num_workers)
    if not spec.wrappers:
        return watched_creator(create)
    wrappers = list(spec.wrappers)

    def create_wrapped(vector_index: int) -> gym.Env[Any, Any]:
        return apply_wrappers(create(vector_index), wrappers)

    return watched_creator(create_wrapped)


def _bare_creator(spec: EnvSpec, worker_index: int, num_workers: int) -> Callable[[int], gym.Env[Any, Any]]:
    if spec.entry_point is not None:
        make = load_entry_point(spec.entry_point, "spec.env.entryPoint")

        def create(vector_index: int) -> gym.Env[Any, Any]:
            env = make(EnvContext(dict(spec.config), worker_index, vector_index, num_workers))
            if not isinstance(env, gym.Env):
                raise SpecError(
                    f"spec.env.entryPoint: {spec.entry_point} returned a {type(env).__name__}, not a gymnasium.Env"
                )
            return env

        return create
    env_id = spec.id
    assert env_id is not None  # guaranteed by EnvSpec's validator
    register_namespace(env_id)

    def create_registered(vector_index: int) -> gym.Env[Any, Any]:
        register_namespace(env_id)  # again in an async subprocess that did not fork from here
        return gym.make(env_id, **spec.config)

    return create_registered


def env_spaces(
    spec: EnvSpec, worker_index: int, num_workers: int, reset: bool = False
) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """A sub-env's observation and action spaces: EnvPool's from its spec (building a pool
    takes seconds), an env's own vector env's (ale-py's preprocesses and stacks frames), else
    those of one sub-env, built and closed; with ``reset``, after checking that its first
    observation is one of its space (:class:`EnvFailed` when not)."""
    mode = choose_vectorization(spec)
    if mode == "envpool":
        from rolloutfleet.sampling.envpool_env import EnvPoolVectorEnv

        with ENV_CALL.calling("constructor"):
            pool = EnvPoolVectorEnv(spec)
        return pool.single_observation_space, pool.single_action_space
    if mode == "vector":
        vec = make_vector_env(spec.model_copy(update={"num_envs": 1}), worker_index, num_workers)
        try:
            return vec.single_observation_space, vec.single_action_space
        finally:
            vec.close()
    env = env_creator(spec, worker_index, num_workers)(0)
    try:
        if reset:
            obs, _ = reset_or_fail(env.reset, env_name(spec), "sub-env 0", seed=0)
            if (problem := obs_problem(env.observation_space, obs)) is not None:
                raise EnvFailed(f"{env_name(spec)}: reset returned {problem}")
        return env.observation_space, env.action_space
    finally:
        env.close()


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


@contextlib.contextmanager
def env_build_errors(spec: EnvSpec) -> Iterator[None]:
    """Whatever building the env raises becomes one :class:`SpecError` line naming the field
    (``spec.env.id`` or ``spec.env.entryPoint``): for the operator, not a traceback."""
    field = "spec.env.id" if spec.id is not None else "spec.env.entryPoint"
    try:
        yield
    except SpecError:
        raise
    except gym.error.Error as exc:
        raise SpecError(f"{field}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
        raise SpecError(f"{field}: building the environment failed: {type(exc).__name__}: {exc}") from None


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
    use (:func:`~rolloutfleet.sampling.env_processes.usable_cpus`), which counts when it is unset."""
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


def make_vector_env(
    spec: EnvSpec, worker_index: int, num_workers: int, choice: VectorChoice | None = None
) -> VectorEnv[Any, Any, Any]:
    """Build the worker's vector env as ``choice`` says (default: :func:`plan_vectorization`
    without ``resources.cpu``); every failure becomes a SpecError naming the field."""
    if choice is None:
        choice = plan_vectorization(spec, worker_index, num_workers)
    mode = choice.mode
    with env_build_errors(spec), ENV_CALL.calling("constructor"):  # sync and async name the sub-env
        if mode == "vector":
            assert spec.id is not None
            if not has_vector_entry_point(spec.id):
                raise SpecError(f"spec.env.vectorization: {spec.id!r} has no vector entry point; use 'sync' or 'async'")
            vec = gym.make_vec(spec.id, num_envs=spec.num_envs, vectorization_mode="vector_entry_point", **spec.config)
            # ale-py's vector env seeds sub-env i with seed + i, as C++ ints.
            return ResetGuard(vec, spec, seed_bits=30 if spec.id.startswith("ALE/") else None)
        if mode == "envpool":
            from rolloutfleet.sampling.envpool_env import EnvPoolVectorEnv  # imports envpool: only when asked

            return ResetGuard(EnvPoolVectorEnv(spec), spec)
        create = env_creator(spec, worker_index, num_workers)
        if mode == "async":
            return ResetGuard(ProcessVectorEnv(create, spec.num_envs, choice.processes), spec)
        budget = FailureBudget(spec.max_consecutive_failures, env_name(spec), spec.restart_failed_sub_envs)
        return ResilientSyncVectorEnv(create, spec.num_envs, restart_failed=spec.restart_failed_sub_envs, budget=budget)


class ResetGuard(VectorWrapper):
    """A vector env whose ``reset`` errors become :class:`EnvFailed` naming the env (``vector``,
    ``async`` and ``envpool`` modes; their step errors are the runner's to count)."""

    def __init__(self, env: VectorEnv[Any, Any, Any], spec: EnvSpec, seed_bits: int | None = None) -> None:
        super().__init__(env)
        self._name = env_name(spec)
        self._seed_bits = seed_bits

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._seed_bits is not None and isinstance(seed, int):
            seed %= 2**self._seed_bits
        with ENV_CALL.calling("reset"):
            result = reset_or_fail(self.env.reset, self._name, "the vector env", seed=seed, options=options)
        return cast("tuple[Any, dict[str, Any]]", result)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        with ENV_CALL.calling("step"):  # async names the sub-env
            return self.env.step(actions)


def _copy(obs: Any) -> Any:
    """A batch of observations the next step will not overwrite (a Dict/Tuple's arrays too)."""
    return obs.copy() if isinstance(obs, np.ndarray) else deepcopy(obs)


class ResilientSyncVectorEnv(VectorEnv[Any, Any, Any]):
    """Sub-envs stepped one after another in this process, SAME_STEP autoreset.

    Unlike gymnasium's ``SyncVectorEnv``, a sub-env whose ``step`` raises does not take the
    others down: it is closed, rebuilt with the same creator and reset, and the step
    reports it in ``info[FAILED]`` (its row is not a transition). RLlib calls this
    ``restart_failed_sub_environments``.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        create: Callable[[int], gym.Env[Any, Any]],
        num_envs: int,
        restart_failed: bool = True,
        budget: FailureBudget | None = None,
    ) -> None:
        self._create = create
        self.restart_failed = restart_failed
        self.failures = budget or FailureBudget(3, "spec.env", restart_failed)
        self.envs = [create(i) for i in range(num_envs)]
        self.num_envs = num_envs
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        for index, env in enumerate(self.envs[1:], start=1):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise SpecError(f"spec.env: sub-env {index} has different spaces than sub-env 0")
        # Checked per step: what is not an observation of it fails its sub-env (not the vector step).
        self._space = first.observation_space
        self.observation_space = batch_space(first.observation_space, num_envs)
        self.action_space = batch_space(first.action_space, num_envs)
        self._obs: Any = create_empty_array(first.observation_space, num_envs)
        self._seeds: list[int | None] = [None] * num_envs
        self.restarts = 0

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i for i in range(self.num_envs)]
        self._seeds = list(seeds)
        observations = []
        for i, (env, env_seed) in enumerate(zip(self.envs, seeds, strict=True)):
            with ENV_CALL.calling("reset", i):
                observations.append(self._reset(env, i, seed=env_seed, options=options))
        self._obs = concatenate(self.single_observation_space, observations, self._obs)
        return _copy(self._obs), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n = self.num_envs
        rewards = np.zeros(n, np.float64)
        terminateds = np.zeros(n, np.bool_)
        truncateds = np.zeros(n, np.bool_)
        failed = np.zeros(n, np.bool_)
        final_obs: list[Any] = [None] * n
        observations = []
        failures, space = self.failures, self._space
        try:
            for i, env in enumerate(self.envs):
                ENV_CALL.begin("step", i)
                try:
                    obs, reward, terminated, truncated, _ = env.step(actions[i])
                    rewards[i], terminateds[i], truncateds[i] = reward, terminated, truncated
                    if (problem := obs_problem(space, obs)) is not None:
                        raise ValueError(f"step returned {problem}")
                except Exception as exc:  # noqa: BLE001 - counted: recreated, or the end of the worker
                    rewards[i], terminateds[i], truncateds[i] = 0.0, False, False
                    failures.failed(i, exc)
                    log.warning("sub-env %d raised %s: %s; recreating it", i, type(exc).__name__, exc)
                    obs = self._recreate(i)
                    failed[i] = True
                    observations.append(obs)
                    continue
                if failures.streak:
                    failures.succeeded(i)
                if terminated or truncated:
                    final_obs[i] = obs
                    ENV_CALL.begin("reset", i)
                    obs = self._reset(env, i)
                observations.append(obs)
        finally:
            ENV_CALL.end()  # the policy's time between steps is no env call
        self._obs = concatenate(self.single_observation_space, observations, self._obs)
        info: dict[str, Any] = {}
        ended = terminateds | truncateds
        if ended.any():
            info["final_obs"] = np.array(final_obs, dtype=object)
            info["_final_obs"] = ended
        if failed.any():
            info[FAILED] = failed
        return _copy(self._obs), rewards, terminateds, truncateds, info

    def _recreate(self, index: int) -> Any:
        try:
            self.envs[index].close()
        except Exception:
            log.debug("closing failed sub-env %d raised", index, exc_info=True)
        self.restarts += 1
        name = self.failures.name
        try:
            env = self.envs[index] = self._create(index)
        except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
            raise EnvFailed(f"{name}: recreating sub-env {index} failed: {describe(exc)}") from None
        seed = self._seeds[index]
        seed = None if seed is None else seed + 7919 * self.restarts
        with ENV_CALL.calling("reset", index):
            return self._reset(env, index, seed=seed)

    def _reset(self, env: gym.Env[Any, Any], index: int, **kwargs: Any) -> Any:
        """The sub-env's first observation; :class:`EnvFailed` when reset raises or returns none."""
        obs, _ = reset_or_fail(env.reset, self.failures.name, f"sub-env {index}", **kwargs)
        if (problem := obs_problem(self._space, obs)) is not None:
            raise EnvFailed(f"{self.failures.name}: sub-env {index} reset returned {problem}")
        return obs

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()
