"""The env call stamp: what a watchdog reads while each kind of vector env calls its sub-envs.
The envs read the stamp themselves, from inside the call."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rolloutfleet.sampling.env.calls import ENV_CALL, CallStamp, overdue, watched_creator
from rolloutfleet.sampling.vector.make import ResilientSyncVectorEnv


class StampReader(gym.Env[np.ndarray, np.int64]):
    """Records what :data:`ENV_CALL` says during its own constructor, reset and step."""

    seen: list[tuple[str, Any]] = []

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._record()
        self.t = 0

    def _record(self) -> None:
        assert ENV_CALL.current is not None
        call, sub_env, _ = ENV_CALL.current
        StampReader.seen.append((call, sub_env))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        self._record()
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._record()
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= 2, False, {}


def test_a_sync_vector_env_stamps_each_call_with_its_sub_env_and_clears_it_after() -> None:
    StampReader.seen = []
    env = ResilientSyncVectorEnv(watched_creator(lambda i: StampReader()), 2)
    env.reset(seed=0)
    env.step(np.zeros(2, np.int64))
    assert ENV_CALL.current is None  # between steps: the policy's time, no env call
    env.step(np.zeros(2, np.int64))  # both episodes end: each sub-env is reset within the step
    assert StampReader.seen == [
        ("constructor", 0), ("constructor", 1), ("reset", 0), ("reset", 1),
        ("step", 0), ("step", 1), ("step", 0), ("reset", 0), ("step", 1), ("reset", 1),
    ]  # fmt: skip
    assert ENV_CALL.current is None


def test_a_nested_call_restores_the_outer_stamp() -> None:
    stamp = CallStamp()
    with stamp.calling("constructor", None, now=1.0):
        with stamp.calling("constructor", 4, now=2.0):
            assert stamp.current == ("constructor", 4, 2.0)
        assert stamp.current == ("constructor", None, 1.0)
    assert stamp.current is None


def test_overdue_is_measured_from_the_call_start() -> None:
    assert overdue(("step", 0, 10.0), now=19.0, timeout_s=10.0) is None
    late = overdue(("step", 0, 10.0), now=20.5, timeout_s=10.0)
    assert late is not None and (late.call, late.sub_env, late.running_s) == ("step", 0, 10.5)


class WaitsForFile(gym.Env[np.ndarray, np.int64]):
    """Sub-env 3's step waits until the file exists (a slow call a test can end)."""

    def __init__(self, index: int, release: str) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.index, self.release = index, release

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(1, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        import os
        import time

        while self.index == 3 and not os.path.exists(self.release):
            time.sleep(0.01)
        return np.zeros(1, np.float32), 1.0, False, False, {}


def test_an_async_step_is_stamped_with_the_sub_env_its_process_is_in(tmp_path: Any) -> None:
    import threading

    from rolloutfleet.sampling.vector.processes import ProcessVectorEnv

    release = str(tmp_path / "release")
    env = ProcessVectorEnv(lambda i: WaitsForFile(i, release), num_envs=4, processes=2)  # sub-envs 2-3: process 1
    try:
        env.reset(seed=0)
        stepping = threading.Thread(target=env.step, args=(np.zeros(4, np.int64),))
        stepping.start()
        seen = None
        while seen != ("step", 3):  # the stamp of the process of sub-envs 2-3, once it is in sub-env 3
            current = ENV_CALL.current
            seen = None if current is None else (current[0], current[1]() if callable(current[1]) else current[1])
        (tmp_path / "release").write_text("")
        stepping.join()
        assert ENV_CALL.current is None
    finally:
        (tmp_path / "release").write_text("")
        env.close()
