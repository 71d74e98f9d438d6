from __future__ import annotations

import json

import pytest

from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob, SpecError

SPEC = {"replicas": 3, "env": {"id": "CartPole-v1", "numEnvs": 2}, "redis": {"url": "redis://redis:6379/0"}}


def environ(**extra: str) -> dict[str, str]:
    base = {
        "ROLLOUTFLEET_JOB_NAME": "cp",
        "ROLLOUTFLEET_NAMESPACE": "team-a",
        "ROLLOUTFLEET_WORKER_INDEX": "2",
        "ROLLOUTFLEET_SPEC": json.dumps(SPEC),
    }
    base.update(extra)
    return base


def test_reads_identity_spec_and_redis_settings() -> None:
    config = WorkerConfig.from_environ(environ(ROLLOUTFLEET_REDIS_PASSWORD="s3cret"))
    assert (config.job.name, config.job.namespace, config.worker_index, config.num_workers) == ("cp", "team-a", 2, 3)
    assert config.redis_url == "redis://redis:6379/0" and config.redis_password == "s3cret"
    assert "s3cret" not in repr(config)
    again = WorkerConfig.from_environ(config.to_environ())
    assert again == config


def test_a_whole_manifest_or_a_file_works(tmp_path: pytest.TempPathFactory) -> None:
    manifest = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": SPEC}).to_dict()
    assert WorkerConfig.from_environ(environ(ROLLOUTFLEET_SPEC=json.dumps(manifest))).job.spec.env.num_envs == 2
    path = tmp_path / "job.yaml"  # type: ignore[operator]
    path.write_text(json.dumps(manifest))
    env = environ(ROLLOUTFLEET_SPEC_FILE=str(path))
    del env["ROLLOUTFLEET_SPEC"]
    assert WorkerConfig.from_environ(env).job.spec.replicas == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ROLLOUTFLEET_WORKER_INDEX": "x"}, "ROLLOUTFLEET_WORKER_INDEX: must be an integer"),
        ({"ROLLOUTFLEET_WORKER_INDEX": "3"}, "ROLLOUTFLEET_WORKER_INDEX: 3 is not below"),
        ({"ROLLOUTFLEET_JOB_NAME": ""}, "ROLLOUTFLEET_JOB_NAME: not set"),
        ({"ROLLOUTFLEET_SPEC": "{nope"}, "ROLLOUTFLEET_SPEC: not valid JSON"),
        (
            {"ROLLOUTFLEET_SPEC": json.dumps({"env": {"id": "CartPole-v1", "numEnvs": 0}})},
            r"ROLLOUTFLEET_SPEC: spec\.env\.numEnvs",
        ),
    ],
)
def test_mistakes_name_the_variable(change: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        WorkerConfig.from_environ(environ(**change))


def test_learner_idle_seconds_round_trip_and_bad_values_name_the_variable() -> None:
    assert WorkerConfig.from_environ(environ()).learner_idle_s is None
    config = WorkerConfig.from_environ(environ(ROLLOUTFLEET_LEARNER_IDLE_SECONDS="2.5"))
    assert config.learner_idle_s == 2.5 and WorkerConfig.from_environ(config.to_environ()) == config
    for bad in ("soon", "0", "-3", "inf"):
        with pytest.raises(SpecError, match="ROLLOUTFLEET_LEARNER_IDLE_SECONDS"):
            WorkerConfig.from_environ(environ(ROLLOUTFLEET_LEARNER_IDLE_SECONDS=bad))


def test_the_redis_startup_bound_is_unset_by_default_and_round_trips() -> None:
    assert WorkerConfig.from_environ(environ()).redis_startup_timeout_s is None  # the operator's pods: no bound
    config = WorkerConfig.from_environ(environ(ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS="30"))
    assert config.redis_startup_timeout_s == 30.0
    assert WorkerConfig.from_environ(config.to_environ()).redis_startup_timeout_s == 30.0
    with pytest.raises(SpecError, match="ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS"):
        WorkerConfig.from_environ(environ(ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS="soon"))
