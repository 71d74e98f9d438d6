"""bench.children: nothing a bench starts outlives it, whether it ends normally, by an
exception, or by SIGKILL (the kernel's parent-death signal)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench import children

REPO = Path(__file__).resolve().parents[3]


def gone(pid: int, within_s: float = 30.0) -> bool:
    """Whether ``pid`` is gone (or a zombie nobody reaped yet), waiting up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_kill_all_stops_a_child_and_its_group(tmp_path: Path) -> None:
    # sh starts a grandchild in the same group: it goes too.
    script = "sleep 1000 & echo $! > " + str(tmp_path / "grandchild") + "; wait"
    process = children.spawn(["sh", "-c", script], tmp_path / "log")
    while not (tmp_path / "grandchild").exists() or not (tmp_path / "grandchild").read_text().strip():
        time.sleep(0.01)
    grandchild = int((tmp_path / "grandchild").read_text())
    children.kill_all(grace_s=5)
    assert process.poll() is not None and children.alive() == []
    assert gone(grandchild)


def test_a_child_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    process = children.spawn(["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"], tmp_path / "log")
    status = children.stop(process, grace_s=0.5)
    assert status is not None and status < 0  # killed by a signal (SIGKILL)


def test_a_bench_killed_by_sigkill_leaves_no_child(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from bench import children\n"
        f"p = children.spawn(['sleep', '1000'], Path({str(tmp_path / 'log')!r}))\n"
        "print(p.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == -9
    assert gone(int(result.stdout.split()[0]))
