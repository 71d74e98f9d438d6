"""`rolloutfleet run` opens nothing to the network by default: every socket its workers listen
on (probes and metrics, an external job's action server) is bound to 127.0.0.1, as the
kernel's own table (/proc/net/tcp) says; `--listen 0.0.0.0` opens them, and says so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

MANIFEST = """\
kind: RolloutJob
metadata: {{name: listens}}
spec:
  replicas: 1
  env:
    id: CartPole-v1
    external: {{port: {port}}}
  redis: {{maxLen: 4, backpressure: block}}
"""
LISTEN = "0A"  # the TCP state in /proc/net/tcp


def tree(root: int) -> set[int]:
    """``root`` and every process under it, from each process's parent in /proc/<pid>/stat."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def listening(pids: set[int]) -> list[tuple[str, int]]:
    """(address, port) of each TCP socket the processes ``pids`` listen on."""
    inodes: set[str] = set()
    for pid in pids:
        with_fds = Path(f"/proc/{pid}/fd")
        try:
            links = [os.readlink(fd) for fd in with_fds.iterdir()]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != LISTEN or fields[9] not in inodes:
                continue
            raw, port = fields[1].split(":")
            packed = bytes.fromhex(raw)
            # The kernel writes each 32-bit word of the address in host (little-endian) order.
            words = b"".join(packed[i : i + 4][::-1] for i in range(0, len(packed), 4))
            found.append((socket.inet_ntop(family, words), int(port, 16)))
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_and_look(tmp_path: Path, redis_url: str, *flags: str) -> tuple[list[tuple[str, int]], int, str]:
    port = free_port()
    manifest = tmp_path / "listens.yaml"
    manifest.write_text(MANIFEST.format(port=port))
    fleet = subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--redis", redis_url, "--no-status",
         "--duration", "60", *flags],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        sockets: list[tuple[str, int]] = []
        while time.monotonic() < deadline:
            sockets = listening(tree(fleet.pid) - {fleet.pid})
            if any(p == port for _, p in sockets) and len(sockets) >= 2:  # the action server and the probes
                break
            assert fleet.poll() is None, fleet.stderr.read() if fleet.stderr else ""
            time.sleep(0.2)
    finally:
        fleet.terminate()
        _, err = fleet.communicate(timeout=60)
    return sockets, port, err


def test_a_local_fleet_listens_on_loopback_only(redis_url: str, tmp_path: Path) -> None:
    sockets, port, err = run_and_look(tmp_path, redis_url)
    assert any(p == port for _, p in sockets), (sockets, err)
    assert {address for address, _ in sockets} == {"127.0.0.1"}, sockets
    assert f"simulators connect to 127.0.0.1:{port}" in err and "open to the network" not in err, err
    # Not a terminal: no line is wrapped, so the logs' folder is whole on its line.
    assert any(line.startswith("fleet: 1 worker") and " logs in /" in line for line in err.splitlines()), err


def test_listen_opens_them_and_says_so(redis_url: str, tmp_path: Path) -> None:
    sockets, port, err = run_and_look(tmp_path, redis_url, "--listen", "0.0.0.0")
    assert ("0.0.0.0", port) in sockets, sockets
    assert "(open to the network: --listen)" in err, err


@pytest.mark.parametrize("value", ["localhost", "300.1.1.1", ""])
def test_a_listen_that_is_no_ip_address_is_one_line(value: str, tmp_path: Path) -> None:
    manifest = tmp_path / "listens.yaml"
    manifest.write_text(MANIFEST.format(port=9900))
    done = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--listen", value],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--listen" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_port_already_taken_is_one_line_naming_it_and_nothing_starts(redis_url: str, tmp_path: Path) -> None:
    with socket.socket() as holder:  # another fleet's action server, or any program
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
        manifest = tmp_path / "listens.yaml"
        manifest.write_text(MANIFEST.format(port=port))
        done = subprocess.run(
            [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--redis", redis_url, "--no-status"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rolloutfleet run: spec.env.external.port: 127.0.0.1:{port} (worker 0's) is taken (Address already in use): "
        "another fleet or program listens there; stop it, or give this job another port"
    ]
