"""The operator's settings from its Deployment's environment."""

from __future__ import annotations

import pytest

from rolloutfleet_operator.config import ConfigError, OperatorConfig


def test_defaults_and_overrides() -> None:
    assert OperatorConfig.from_environ({}) == OperatorConfig()
    config = OperatorConfig.from_environ(
        {
            "ROLLOUTFLEET_WORKER_IMAGE": "reg/worker:2",
            "ROLLOUTFLEET_WORKER_COMMAND": '["python", "-m", "rolloutfleet.cli.main", "worker"]',
            "ROLLOUTFLEET_WORKER_METRICS_PORT": "9200",
            "ROLLOUTFLEET_READ_PROGRESS": "0",
        }
    )
    assert config.worker_image == "reg/worker:2" and config.worker_command[0] == "python"
    assert config.metrics_port(3) == 9200 and config.read_progress is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WORKER_COMMAND", "rolloutfleet worker"),
        ("WORKER_METRICS_PORT", "70000"),
        ("MAX_UNAVAILABLE", "0"),
        ("READ_PROGRESS", "maybe"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"ROLLOUTFLEET_{name}"):
        OperatorConfig.from_environ({f"ROLLOUTFLEET_{name}": value})


def test_worker_memory_defaults_can_be_changed_or_turned_off() -> None:
    assert (OperatorConfig().worker_memory, OperatorConfig().worker_torch_memory) == ("192Mi", "1Gi")
    config = OperatorConfig.from_environ(
        {"ROLLOUTFLEET_WORKER_MEMORY": "256Mi", "ROLLOUTFLEET_WORKER_TORCH_MEMORY": "none"}
    )
    assert (config.worker_memory, config.worker_torch_memory) == ("256Mi", None)
    with pytest.raises(ConfigError, match=r"ROLLOUTFLEET_WORKER_MEMORY: must be a memory quantity"):
        OperatorConfig.from_environ({"ROLLOUTFLEET_WORKER_MEMORY": "lots"})
