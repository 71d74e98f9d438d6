"""``vectorization: async``: sub-envs spread over one process per CPU, each stepping its share in a row.

``P = min(numEnvs, CPUs)`` processes each hold a contiguous group of sub-envs (8 on 2 CPUs:
2 x 4), so a vector step costs the slowest share plus one round trip per process, not one
per sub-env (gymnasium's ``AsyncVectorEnv``). Semantics match ``sync``
(:class:`~rolloutfleet.sampling.vector.sync.ResilientSyncVectorEnv`: SAME_STEP autoreset,
the same seeds, the same trajectories). Observations come back through shared memory,
the rest through the pipe; a sub-env that raises or a process that dies fails the vector
step (:class:`EnvProcessError`, counted by the runner, which rebuilds the vector env).
Processes exit by themselves when the worker dies. The CPUs: :func:`usable_cpus`.
More in docs/guides/heavy-envs.md.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing as mp
import os
import signal
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]  # gymnasium's dependency
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import (
    batch_space,
    create_shared_memory,
    iterate,
    read_from_shared_memory,
    write_to_shared_memory,
)

from rolloutfleet.sampling.env.calls import ENV_CALL
from rolloutfleet.sampling.env.obs_check import obs_problem
from rolloutfleet.spec.job import SpecError

CPUS_VARIABLE = "ROLLOUTFLEET_CPUS"
"""Set by the operator to the pod's CPU request (rounded up; 1 where it requests none)."""
_PARENT_CHECK_S = 1.0  # how often an idle env process checks that its worker still lives


class EnvProcessError(RuntimeError):
    """A sub-env raised in its process, or an env process died: the vector step failed."""


def usable_cpus(environ: dict[str, str] | None = None, cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this worker may keep busy (at least 1).

    >>> usable_cpus({"ROLLOUTFLEET_CPUS": "3"})
    3
    """
    raw = (os.environ if environ is None else environ).get(CPUS_VARIABLE, "")
    if raw:
        if not raw.strip().isdigit() or int(raw) < 1:
            raise SpecError(f"{CPUS_VARIABLE}: {raw!r} is not a whole number of CPUs of at least 1")
        return int(raw)
    cpus = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota(cgroup)
    return max(1, min(cpus, math.ceil(quota)) if quota is not None else cpus)


def cgroup_cpu_quota(root: Path) -> float | None:
    """The cgroup's CPU limit in CPUs (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def group_bounds(num_envs: int, processes: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` sub-env ranges, one per process, sizes differing by at most one.

    >>> group_bounds(8, 3)
    [(0, 3), (3, 6), (6, 8)]
    """
    processes = max(1, min(processes, num_envs))
    base, extra = divmod(num_envs, processes)
    bounds, lo = [], 0
    for p in range(processes):
        hi = lo + base + (1 if p < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


class ProcessVectorEnv(VectorEnv[Any, Any, Any]):
    """``num_envs`` sub-envs built by ``create(i)``, stepped in ``processes`` processes.

    >>> env = ProcessVectorEnv(lambda i: gym.make("CartPole-v1"), num_envs=4, processes=2)
    >>> obs, _ = env.reset(seed=[0, 1, 2, 3])
    >>> obs.shape, [hi - lo for lo, hi in env.bounds]
    ((4, 4), [2, 2])
    >>> env.close()
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, create: Callable[[int], gym.Env[Any, Any]], num_envs: int, processes: int) -> None:
        probe = create(0)  # spaces, before the shared memory the processes write into
        try:
            self.single_observation_space = probe.observation_space
            self.single_action_space = probe.action_space
        finally:
            probe.close()
        self.num_envs = num_envs
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.bounds = group_bounds(num_envs, processes)
        ctx = mp.get_context()  # the platform's default, as gymnasium's AsyncVectorEnv
        self._shm = create_shared_memory(self.single_observation_space, num_envs, ctx=ctx)  # type: ignore[arg-type]
        self._obs = read_from_shared_memory(self.single_observation_space, self._shm, num_envs)
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._broken = False
        # The sub-env each process is calling now, written by the process: what a watchdog names.
        self._current = ctx.RawArray("l", [lo for lo, _ in self.bounds])  # type: ignore[attr-defined]
        wrapped = _Creator(create)
        try:
            for p, (lo, hi) in enumerate(self.bounds):
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(  # type: ignore[attr-defined]
                    target=_serve,
                    name=f"rolloutfleet-envs-{p}",
                    args=(
                        theirs,
                        ours,
                        wrapped,
                        (lo, hi, p),
                        self._shm,
                        self.single_observation_space,
                        os.getpid(),
                        self._current,
                    ),
                    daemon=True,
                )
                proc.start()
                theirs.close()  # ours alone: recv() sees EOF when the process dies
                self._conns.append(ours)
                self._procs.append(proc)
            _LIVE.add(self)
            for p in range(len(self.bounds)):
                self._receive(p, "constructor")  # each process built its sub-envs (or said why not)
        except BaseException:
            self.close_extras()
            raise

    @property
    def processes(self) -> int:
        return len(self.bounds)

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        seeds = (
            list(seed)
            if isinstance(seed, Sequence)
            else [None if seed is None else seed + i for i in range(self.num_envs)]
        )
        for conn, (lo, hi) in zip(self._send_all(), self.bounds, strict=True):
            conn.send(("reset", (seeds[lo:hi], options)))
        for p in range(self.processes):
            self._receive(p, "reset")
        return _copy(self._obs), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        per_env = actions if isinstance(actions, np.ndarray) else list(iterate(self.action_space, actions))
        for conn, (lo, hi) in zip(self._send_all(), self.bounds, strict=True):
            conn.send(("step", per_env[lo:hi]))
        n = self.num_envs
        rewards = np.empty(n, np.float64)
        terminateds = np.empty(n, np.bool_)
        truncateds = np.empty(n, np.bool_)
        final_obs: list[Any] = [None] * n
        for p, (lo, hi) in enumerate(self.bounds):
            rewards[lo:hi], terminateds[lo:hi], truncateds[lo:hi], finals = self._receive(p, "step")
            for k, obs in finals:
                final_obs[lo + k] = obs
        info: dict[str, Any] = {}
        ended = terminateds | truncateds
        if ended.any():  # as ResilientSyncVectorEnv: the same batch whichever of the two stepped
            info["final_obs"] = np.array(final_obs, dtype=object)
            info["_final_obs"] = ended
        return _copy(self._obs), rewards, terminateds, truncateds, info

    def _send_all(self) -> list[Connection]:
        if self._broken:
            raise EnvProcessError("an env process failed earlier; the vector env must be rebuilt")
        return self._conns

    def _receive(self, p: int, call: str) -> Any:
        """Process ``p``'s answer to ``call``, stamped (:data:`ENV_CALL`) with the sub-env it is in."""
        lo, hi = self.bounds[p]
        try:
            with ENV_CALL.calling(call, lambda: int(self._current[p])):
                status, payload = self._conns[p].recv()
        except (EOFError, OSError):
            self._broken = True
            self._procs[p].join(timeout=1.0)
            raise EnvProcessError(
                f"the process of sub-envs {lo}-{hi - 1} died (exit code {self._procs[p].exitcode})"
            ) from None
        if status != "ok":
            self._broken = True
            raise EnvProcessError(payload)
        return payload

    def close_extras(self, **kwargs: Any) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):  # that process is gone already
                conn.send(("close", None))
        for proc in self._procs:
            proc.join(timeout=5.0)
            if proc.is_alive():  # stuck in a step: no sub-env outlives its vector env
                proc.kill()
                proc.join(timeout=5.0)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
        _LIVE.discard(self)


_LIVE: weakref.WeakSet[ProcessVectorEnv] = weakref.WeakSet()


def kill_env_processes() -> None:
    """SIGKILL every env process of this worker: a worker leaving without closing its vector
    env (an env call hung) leaves none behind, stuck in a step and never reading its pipe."""
    for env in list(_LIVE):
        for proc in env._procs:
            with contextlib.suppress(Exception):  # gone already
                proc.kill()


class _Creator:
    """``create`` made picklable with cloudpickle (a closure), should the start method not be fork."""

    def __init__(self, create: Callable[[int], gym.Env[Any, Any]]) -> None:
        self.create = create

    def __getstate__(self) -> bytes:
        return cloudpickle.dumps(self.create)  # type: ignore[no-any-return]

    def __setstate__(self, state: bytes) -> None:
        # Only ever the parent's own env creator, handed to its child process over the
        # multiprocessing pipe it started; nothing read from Redis or the network comes here.
        self.create = cloudpickle.loads(state)

    def __call__(self, index: int) -> gym.Env[Any, Any]:
        return self.create(index)


def _copy(obs: Any) -> Any:
    """A batch the next step will not overwrite (the shared memory is reused)."""
    if isinstance(obs, np.ndarray):
        return obs.copy()
    if isinstance(obs, dict):
        return {key: _copy(value) for key, value in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_copy(value) for value in obs)
    return obs


def _check(space: gym.Space[Any], obs: Any, call: str) -> None:
    """What is not an observation of ``space`` fails the step, saying what came back."""
    if (problem := obs_problem(space, obs)) is not None:
        raise ValueError(f"{call} returned {problem}")


def _step_share(
    envs: list[gym.Env[Any, Any]],
    actions: Any,
    share: tuple[int, int, int],
    space: gym.Space[Any],
    shm: Any,
    current: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, Any]]]:
    """Step this process's sub-envs (a reset after an episode's end, SAME_STEP), observations
    into shared memory: rewards, terminateds, truncateds and the ended episodes' last observations."""
    lo, hi, p = share
    n = hi - lo
    rewards = np.empty(n, np.float64)
    terminateds = np.empty(n, np.bool_)
    truncateds = np.empty(n, np.bool_)
    finals = []
    for k, env in enumerate(envs):
        current[p] = index = lo + k
        obs, rewards[k], terminateds[k], truncateds[k], _ = env.step(actions[k])
        _check(space, obs, "step")
        if terminateds[k] or truncateds[k]:
            finals.append((k, obs))
            obs, _ = env.reset()
            _check(space, obs, "reset")
        write_to_shared_memory(space, index, obs, shm)
    return rewards, terminateds, truncateds, finals


def _reset_share(
    envs: list[gym.Env[Any, Any]], data: Any, share: tuple[int, int, int], space: gym.Space[Any], shm: Any, current: Any
) -> None:
    """Reset this process's sub-envs with their seeds and options, observations into shared memory."""
    lo, _, p = share
    seeds, options = data
    for k, env in enumerate(envs):
        current[p] = index = lo + k
        obs, _ = env.reset(seed=seeds[k], options=options)
        _check(space, obs, "reset")
        write_to_shared_memory(space, index, obs, shm)


def _serve(
    conn: Connection,
    parents_end: Connection,
    create: Callable[[int], gym.Env[Any, Any]],
    share: tuple[int, int, int],
    shm: Any,
    space: gym.Space[Any],
    parent_pid: int,
    current: Any,
) -> None:
    """An env process (number ``p`` of ``share``): build sub-envs ``lo..hi-1``, then reset or
    step them when told, writing the sub-env it calls into ``current[p]``."""
    lo, hi, p = share
    # Forked, this process holds a copy of the worker's objects, its uncollected garbage too.
    # Frozen, they are never collected here: freeing one (a CUDA tensor of the policy) would
    # call into a CUDA context that does not exist in a forked child, and abort the process.
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the worker's to handle, then it closes us
    parents_end.close()
    envs: list[gym.Env[Any, Any]] = []
    index = lo
    try:
        for index in range(lo, hi):
            current[p] = index
            envs.append(create(index))
        conn.send(("ok", None))
        while True:
            while not conn.poll(_PARENT_CHECK_S):
                if os.getppid() != parent_pid:
                    return  # the worker died without closing us
            command, data = conn.recv()
            if command == "step":
                conn.send(("ok", _step_share(envs, data, share, space, shm, current)))
            elif command == "reset":
                _reset_share(envs, data, share, space, shm, current)
                conn.send(("ok", None))
            else:  # close
                return
    except (KeyboardInterrupt, BrokenPipeError, EOFError):
        return
    except Exception as exc:  # noqa: BLE001 - one line back to the worker, which counts it
        index = current[p]  # the sub-env called last (written there before each call)
        message = f"sub-env {index}: {type(exc).__name__}: {exc}".replace("\n", " ")
        with contextlib.suppress(OSError):
            conn.send(("error", message))
    finally:
        for env in envs:
            with contextlib.suppress(Exception):  # closing a failed env may fail too
                env.close()
        conn.close()
