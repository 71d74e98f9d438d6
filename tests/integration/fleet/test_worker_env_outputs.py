"""A worker whose env returns what is not an observation (issue 27): exit 3, one line naming
the env and what it returned (also the termination message), nothing published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.fleet.test_worker import start_worker

pytestmark = pytest.mark.integration
BAD = "tests.unit.sampling.poison_envs:make_not_an_observation_env"


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"when": "reset"}, "reset returned 'hello' (str), not an observation of Box(-1.0, 1.0, (2,), float32)"),
        ({"when": "step", "value": ["a", "b"]}, "step returned ['a', 'b'] (list), not an observation of Box"),
    ],
)
def test_an_env_output_that_is_no_observation_ends_the_worker_in_one_line(
    redis_url: str, tmp_path: Path, config: dict[str, Any], said: str
) -> None:
    spec = {"env": {"entryPoint": BAD, "numEnvs": 2, "vectorization": "sync", "config": config}}
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=json.dumps(spec))
    _, stderr = worker.communicate(timeout=90)
    assert worker.returncode == 3, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and BAD in lines[0] and said in lines[0], stderr
    assert "Traceback" not in stderr
    assert said in (tmp_path / "termination").read_text()
    assert not BatchConsumer(redis_url, "w", group="test").read(timeout=0.5)  # nothing published
