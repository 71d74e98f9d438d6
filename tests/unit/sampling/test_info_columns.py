"""``sampling.infos``: the batch's info columns hold what the env's own step infos held."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob, SpecError
from rolloutfleet.sampling.info_columns import stack_infos
from tests.unit.sampling.info_test_envs import InfoEnv

ENTRY = "tests.unit.sampling.info_test_envs:make_info_env"


def job(infos: list[str], config: dict[str, Any] | None = None, **sampling: Any) -> RolloutJob:
    env = {"entryPoint": ENTRY, "numEnvs": 3, "vectorization": "sync", "config": config or {}}
    spec = {"env": env, "sampling": {"seed": 0, "rolloutFragmentLength": 10, "infos": infos, **sampling}}
    return RolloutJob.from_dict({"metadata": {"name": "infos"}, "spec": spec})


@pytest.fixture(autouse=True)
def _fresh_envs() -> None:
    InfoEnv.instances.clear()


def env_rows(batch: Any, index: int, column: str) -> np.ndarray:
    return np.asarray(batch[column])[np.asarray(batch["env_id"]) == index]


@pytest.mark.parametrize("batch_mode", ["truncate_episodes", "complete_episodes"])
def test_columns_equal_the_infos_each_env_returned(batch_mode: str) -> None:
    runner = EnvRunner(job(["steps", "pos", "even"], batchMode=batch_mode))
    batches = [runner.sample() for _ in range(3)]
    seen = {i: 0 for i in range(3)}
    for batch in batches:
        assert batch["infos/steps"].dtype == np.int64 and batch["infos/pos"].dtype == np.float32
        assert batch["infos/pos"].shape == (len(batch), 2) and batch["infos/_even"].dtype == np.bool_
        for i, env in enumerate(InfoEnv.instances):
            steps = env_rows(batch, i, "infos/steps")
            log = env.log[seen[i] : seen[i] + len(steps)]
            seen[i] += len(steps)
            assert steps.tolist() == [info["steps"] for info in log]
            np.testing.assert_array_equal(env_rows(batch, i, "infos/pos"), [info["pos"] for info in log])
            assert env_rows(batch, i, "infos/_even").tolist() == ["even" in info for info in log]
            assert env_rows(batch, i, "infos/even").tolist() == ["even" in info for info in log]  # False: the fill
            assert env_rows(batch, i, "infos/_steps").all()
            # the env's own step count, as its observation reports it
            np.testing.assert_array_equal(steps, env_rows(batch, i, "new_obs")[:, 1])
    assert all(count > 0 for count in seen.values())


def test_a_value_whose_type_changes_is_one_line_naming_the_key() -> None:
    runner = EnvRunner(job(["flip"], {"flip_at": 4}))
    with pytest.raises(SpecError, match=r"sampling.infos: info key 'flip' changed from int64\[\] to float64\[\]"):
        runner.sample()


def test_a_key_no_info_had_before_the_first_batch_is_one_line() -> None:
    runner = EnvRunner(job(["stepz"]))
    with pytest.raises(SpecError, match="info key 'stepz' was in no sub-env's info before the first batch"):
        runner.sample()


def test_stack_infos_masks_missing_entries_and_names_mixed_shapes() -> None:
    stacked = stack_infos([{"a": 2}, None, {"b": 1.5}, {"a": 5}], ["a", "b", "c"])
    assert stacked["a"].tolist() == [2, 0, 0, 5] and stacked["_a"].tolist() == [True, False, False, True]
    assert stacked["b"].tolist() == [0.0, 0.0, 1.5, 0.0] and "c" not in stacked
    with pytest.raises(SpecError, match="info key 'a' is int64\\[\\] in one sub-env, float64\\[2\\] in 1"):
        stack_infos([{"a": 1}, {"a": np.zeros(2)}], ["a"])
    with pytest.raises(SpecError, match="info key 'a' is int64"):
        stack_infos([{"a": 1}, {"a": 0.5}], ["a"])


def test_a_value_that_is_not_numeric_is_refused() -> None:
    runner = EnvRunner(job(["steps"]))
    infos = runner._infos
    assert infos is not None
    runner._grid.ensure_capacity(1)
    with pytest.raises(SpecError, match="info key 'steps' holds <U1"):
        infos.record(0, {"steps": np.array(["a", "b", "c"])})


def test_auto_vectorization_picks_sync_where_it_would_pick_async(monkeypatch: pytest.MonkeyPatch) -> None:
    """Env processes pass no step infos: the async choice ``auto`` made is replaced by sync."""
    from rolloutfleet.sampling import env_runner
    from rolloutfleet.sampling.vector.choice import VectorChoice

    monkeypatch.setattr(env_runner, "plan_vectorization", lambda *_: VectorChoice("async", processes=2, sub_envs=3))
    spec = job(["steps"])
    auto = RolloutJob.from_dict(
        {"metadata": {"name": "infos"}, "spec": {**spec.to_dict()["spec"], "env": {"entryPoint": ENTRY, "numEnvs": 3}}}
    )
    runner = EnvRunner(auto)
    assert runner.vectorization == "sync"
    batch = runner.sample()
    np.testing.assert_array_equal(batch["infos/steps"], np.asarray(batch["new_obs"])[:, 1])
