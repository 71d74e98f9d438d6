"""``async``: sub-envs grouped into one process per CPU, with ``sync``'s trajectories and failures."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.sampling.vector.make import EnvFailed
from rolloutfleet.sampling.vector.processes import CPUS_VARIABLE, group_bounds, usable_cpus
from rolloutfleet.spec.job import SpecError

FAILING = "tests.unit.sampling.poison_envs:make_failing_env"
HEAVY = "bench.heavy_env:make"


def job(env: dict[str, Any], fragment: int = 100, **spec: Any) -> RolloutJob:
    sampling = {"rolloutFragmentLength": fragment, "seed": 7}
    return RolloutJob.from_dict({"metadata": {"name": "a"}, "spec": {"env": env, "sampling": sampling, **spec}})


def batches(env: dict[str, Any], count: int = 3) -> tuple[list[Any], EnvRunner]:
    runner = EnvRunner(job(env))
    try:
        return [runner.sample() for _ in range(count)], runner
    finally:
        runner.close()


def test_sub_envs_are_split_into_contiguous_groups_that_differ_by_one_at_most() -> None:
    assert group_bounds(8, 2) == [(0, 4), (4, 8)]
    assert group_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert group_bounds(2, 4) == [(0, 1), (1, 2)]  # never a process without a sub-env


def test_async_and_sync_sample_the_same_cartpole_trajectories(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPUS_VARIABLE, "3")  # 8 sub-envs in groups of 3, 3 and 2
    cartpole = {"id": "CartPole-v1", "numEnvs": 8}
    sync, _ = batches({**cartpole, "vectorization": "sync"})
    grouped, runner = batches({**cartpole, "vectorization": "async"})
    assert runner.vector_choice.processes == 3
    ended = 0
    for a, b in zip(sync, grouped, strict=True):
        columns = list(a.keys())
        assert columns == list(b.keys())
        for column in columns:
            if column != "eps_id":  # a random base per runner
                np.testing.assert_array_equal(a[column], b[column], err_msg=column)
        ended += int(b["terminateds"].sum())
    assert ended > 8  # CartPole episodes ended (and were reset in place) within the fragments


def test_eight_sub_envs_on_two_cpus_are_two_processes_ended_by_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPUS_VARIABLE, "2")
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 8, "vectorization": "async"}, fragment=10))
    procs = list(runner.env.unwrapped._procs)
    assert len(procs) == 2 and all(p.is_alive() for p in procs)
    assert len(runner.sample()) == 80
    runner.close()
    assert not any(p.is_alive() for p in procs)


class Finalized:
    """Cyclic garbage that writes its collector's process id to ``path`` when it is freed."""

    def __init__(self, path: Path) -> None:
        self.path, self.me = path, self

    def __del__(self) -> None:
        with self.path.open("a") as out:
            out.write(f"{os.getpid()}\n")


def test_env_processes_never_free_the_workers_garbage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked env process holds a copy of the worker's uncollected garbage; a collection there
    must not free it (a CUDA tensor freed in a forked child aborts it: seen on a GPU)."""
    monkeypatch.setenv(CPUS_VARIABLE, "2")
    freed = tmp_path / "freed"
    env = {"entryPoint": "tests.unit.sampling.poison_envs:make_collecting_env", "numEnvs": 2, "vectorization": "async"}
    gc.disable()  # the garbage outlives the fork
    try:
        Finalized(freed)
        runner = EnvRunner(job(env, fragment=10))
        assert len(runner.env.unwrapped._procs) == 2  # two forked env processes
        assert len(runner.sample()) == 20
        runner.close()
    finally:
        gc.enable()
    gc.collect()
    assert freed.read_text().split() == [str(os.getpid())]  # freed once, by the worker


@pytest.mark.parametrize("fail", ["step", "exit"])
def test_a_sub_env_that_raises_or_kills_its_process_is_counted_then_ends_sampling(
    fail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPUS_VARIABLE, "2")
    env = {"entryPoint": FAILING, "numEnvs": 4, "vectorization": "async", "maxConsecutiveFailures": 2}
    runner = EnvRunner(job({**env, "config": {"fail_env": 3, "fail": fail}}, fragment=10))
    first = runner.env.unwrapped._procs
    with pytest.raises(EnvFailed, match=r"the vector env failed 2 times in a row.*sub-envs? (2-)?3\b") as err:
        runner.sample()
    assert "\n" not in str(err.value)
    assert "died (exit code 7)" in str(err.value) if fail == "exit" else "physics blew up" in str(err.value)
    assert runner.stats.env_restarts == 1  # rebuilt once, then the second failure ended it
    runner.close()
    assert not any(p.is_alive() for p in first + runner.env.unwrapped._procs)


def test_auto_spreads_a_heavy_env_over_the_cpus_and_keeps_a_light_one_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CPUS_VARIABLE, "2")
    heavy = EnvRunner(job({"entryPoint": HEAVY, "numEnvs": 4, "config": {"burnMs": 2.0}}, fragment=5))
    light = EnvRunner(job({"entryPoint": HEAVY, "numEnvs": 4, "config": {"burnMs": 0.0}}, fragment=5))
    try:
        assert (heavy.vectorization, heavy.vector_choice.processes) == ("async", 2)
        assert heavy.vector_choice.step_seconds is not None and heavy.vector_choice.step_seconds >= 0.002
        assert light.vectorization == "sync"
        # the timed sub-env was a throwaway: auto's async samples what sync samples
        sync = EnvRunner(
            job({"entryPoint": HEAVY, "numEnvs": 4, "vectorization": "sync", "config": {"burnMs": 2.0}}, fragment=5)
        )
        np.testing.assert_array_equal(heavy.sample()["obs"], sync.sample()["obs"])
        sync.close()
    finally:
        heavy.close()
        light.close()
    monkeypatch.setenv(CPUS_VARIABLE, "1")
    one_cpu = EnvRunner(job({"entryPoint": HEAVY, "numEnvs": 4, "config": {"burnMs": 2.0}}, fragment=5))
    assert one_cpu.vectorization == "sync" and one_cpu.vector_choice.step_seconds is None  # not even timed
    one_cpu.close()


def test_resources_cpu_caps_the_env_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPUS_VARIABLE, "2")
    runner = EnvRunner(
        job({"id": "CartPole-v1", "numEnvs": 4, "vectorization": "async"}, fragment=5, resources={"cpu": "500m"})
    )
    assert runner.vector_choice.processes == 1  # half a CPU runs one process, stepping all 4
    runner.close()


def test_usable_cpus_reads_the_cgroup_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert usable_cpus({}, tmp_path) == min(2, len(__import__("os").sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert usable_cpus({}, tmp_path) == len(__import__("os").sched_getaffinity(0))
    assert usable_cpus({CPUS_VARIABLE: "6"}, tmp_path) == 6


@pytest.mark.parametrize("value", ["two", "0", "-1", "1.5", " "])
def test_a_cpu_count_that_is_not_a_whole_number_is_one_line_naming_the_variable(value: str) -> None:
    with pytest.raises(SpecError, match=f"^{CPUS_VARIABLE}: "):
        usable_cpus({CPUS_VARIABLE: value})
