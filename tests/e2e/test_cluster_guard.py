"""A test run killed by a signal leaves no control plane behind (tests/e2e/cluster_guard.py).

A child python starts the real control plane as the ``cluster`` fixture does, in a process
group of its own; the test SIGKILLs that group, as a CI timeout's KILL or the OOM killer
would, so no teardown runs, and asserts that etcd, kube-apiserver and kube-controller-manager
(hack/cluster/up.sh, started in sessions of their own, which the signal does not reach) are
gone and their state dir with them.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.e2e.cluster_kit import REPO

CHILD = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.e2e.cluster_guard import start_control_plane
up, guard = start_control_plane(Path(sys.argv[2]), os.environ)
print(up.returncode, flush=True)
if up.returncode != 0:
    print(up.stderr[-3000:], flush=True)
    sys.exit(1)
time.sleep(3600)
"""


def _running(pid: int, name: str) -> bool:
    """``pid`` is alive (not a zombie) and still runs the binary ``name`` (no pid reuse)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and Path(exe).name == name


def _ready(state: Path) -> str:
    """The API server's /readyz, asked with the admin token over the cluster's CA."""
    facts = dict(line.split("=", 1) for line in (state / "env").read_text().splitlines() if "=" in line)
    token = (state / "pki" / "admin.token").read_text().strip()
    request = urllib.request.Request(
        f"{facts['KUBE_APISERVER_URL']}/readyz", headers={"Authorization": f"Bearer {token}"}
    )
    context = ssl.create_default_context(cafile=str(state / "pki" / "ca.crt"))
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return answer.read().decode()


def test_a_run_killed_by_sigkill_leaves_no_control_plane(cluster_env: dict[str, str], tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    env = {**cluster_env, "CLUSTER_KUEUE": "0"}  # the guard's down.sh stops Kueue as the fixture's does
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REPO), str(state)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: killed whole, like a test run
    )
    try:
        assert child.stdout is not None
        first = child.stdout.readline().strip()
        assert first == "0", f"hack/cluster/up.sh exited {first}: {child.communicate(timeout=30)[0]}"
        pids = {name: int(pid) for name, pid in (line.split() for line in (state / "pids").read_text().splitlines())}
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        assert all(_running(pid, name) for name, pid in pids.items())
        assert _ready(state) == "ok"

        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 120  # down.sh: TERM, up to 10 s each, then KILL
        while any(_running(pid, name) for name, pid in pids.items()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [name for name, pid in pids.items() if _running(pid, name)] == []
        while state.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not state.exists()  # down.sh removed it
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        subprocess.run([str(REPO / "hack/cluster/down.sh"), str(state)], capture_output=True, check=False)
