"""The simulators' client: importable without torch, gymnasium or numpy, and strict about its arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rolloutfleet.client import PolicyClient

ROOT = Path(__file__).resolve().parents[2]


def test_import_rolloutfleet_client_loads_no_torch_gymnasium_numpy_or_server_code() -> None:
    code = (
        "import json, sys, rolloutfleet.client;"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] in {'torch', 'gymnasium', 'numpy', 'redis', 'aiohttp'}"
        " or (m.startswith('rolloutfleet.') and not m.startswith(('rolloutfleet.spec', 'rolloutfleet.client'))))))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []


def test_addresses_and_modes() -> None:
    assert PolicyClient("http://example.org:9900/").address == "example.org:9900"
    with pytest.raises(ValueError, match="address: expected 'host:port'"):
        PolicyClient("example.org")
    with pytest.raises(ValueError, match="inference='server': expected 'remote'"):
        PolicyClient("127.0.0.1:9900", inference="server")
    with pytest.raises(ValueError, match="ship_every: expected at least 1 row"):
        PolicyClient("127.0.0.1:9900", inference="local", ship_every=0)
    with pytest.raises(ValueError, match="the server assigns episode ids"):
        PolicyClient("127.0.0.1:9900").start_episode(episode_id="mine")


def test_nothing_listening_is_an_os_error() -> None:
    from rolloutfleet.fleet.embedded_redis import free_port

    with pytest.raises(ConnectionRefusedError):
        PolicyClient(f"127.0.0.1:{free_port()}").start_episode()
