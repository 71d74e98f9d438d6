"""The e2e control plane dies with the test run, even one killed by a signal.

``hack/cluster/up.sh`` starts etcd, kube-apiserver, kube-controller-manager (and Kueue) each in
a session of its own under a small bash parent, and exits: a parent-death signal on them would
fire when that parent exits, and the fixture's teardown never runs when pytest is killed
(SIGKILL, the OOM killer, a CI timeout). So :func:`start_control_plane` first starts a guard,
this file run as a script, in a session of its own (a signal to pytest's process group does
not reach it) that asks the kernel for SIGTERM when pytest's starting thread ends
(``PR_SET_PDEATHSIG``) and then runs ``hack/cluster/down.sh STATE``; up.sh gets the same
signal, so a run killed while the control plane starts stops starting it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork: a preexec_fn only calls it


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process ``sig`` when the thread that started it ends
    (usable as a ``preexec_fn``: no allocation, no import)."""
    if _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def start_control_plane(
    state: Path, env: Mapping[str, str]
) -> tuple[subprocess.CompletedProcess[str], subprocess.Popen[bytes]]:
    """The guard of ``state``, then ``hack/cluster/up.sh state``: up.sh's result and the guard,
    which the caller kills once it has run down.sh itself (a guard left alive does nothing)."""
    guard = subprocess.Popen(
        [sys.executable, __file__, str(state), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    up = subprocess.run(
        [str(REPO / "hack/cluster/up.sh"), str(state)],
        capture_output=True,
        text=True,
        check=False,
        env=dict(env),
        preexec_fn=die_with_parent,  # only the prctl call, looked up before the fork
    )
    return up, guard


def main(state: Path, owner: int) -> None:
    """Wait until ``owner`` (the test run) is gone, then stop the control plane of ``state``."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})  # pending until sigwait
    die_with_parent()
    if os.getppid() == owner:  # else the run ended before the prctl: no signal will come
        signal.sigwait({signal.SIGTERM, signal.SIGHUP})
    subprocess.run([str(REPO / "hack/cluster/down.sh"), str(state)], check=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
