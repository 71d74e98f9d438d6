"""``sampling.infos`` through a real worker process and Redis: a learner's BatchConsumer gets the
info columns, declared by the worker, holding what the env's infos held; a key the env never
reports stops the worker with one line naming it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.declared_columns import read_declared
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet.test_worker import start_worker
from tests.integration.fleet_helpers import wait_until

pytestmark = pytest.mark.integration

ENV = {"entryPoint": "tests.unit.sampling.info_test_envs:make_info_env", "numEnvs": 2, "vectorization": "sync"}


def spec(infos: list[str]) -> str:
    return json.dumps({"env": ENV, "sampling": {"rolloutFragmentLength": 20, "infos": infos}})


def test_the_consumer_gets_the_info_columns_as_the_env_reported_them(redis_url: str, tmp_path: Path) -> None:
    keys, client = job_keys("default", "w"), redis.Redis.from_url(redis_url)
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=spec(["steps", "pos", "even"]))
    try:
        wait_until(lambda: client.xlen(keys.batches) >= 3, 120, "the worker's first batches")
        result = BatchConsumer(redis_url, "w", block_s=0.05).get(min_steps=100, timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert result is not None and len(result) >= 100
    declared = read_declared(client, keys)
    assert declared is not None
    assert {("infos/steps", "int64", ()), ("infos/_steps", "bool", ()), ("infos/pos", "float32", (2,))} <= set(declared)
    # InfoEnv: info["steps"] is its step count, which its observation also reports; "pos" is
    # [step, sub-env index]; "even" is only there (True) on even steps.
    steps, new_obs = result["infos/steps"], result["new_obs"]
    np.testing.assert_array_equal(steps, new_obs[:, 1])
    np.testing.assert_array_equal(result["infos/pos"], np.stack([new_obs[:, 1], result["env_id"]], 1))
    assert result["infos/_steps"].all()
    np.testing.assert_array_equal(result["infos/_even"], steps % 2 == 0)
    np.testing.assert_array_equal(result["infos/even"], steps % 2 == 0)


def test_a_key_the_env_never_reports_exits_with_one_line_naming_it(redis_url: str, tmp_path: Path) -> None:
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=spec(["lap_time"]))
    _, stderr = worker.communicate(timeout=90)
    assert worker.returncode == 3, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and "sampling.infos: info key 'lap_time'" in lines[0], stderr
