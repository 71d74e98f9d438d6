"""Warm worker starts for ``rolloutfleet run``: workers forked from a server that has already
imported the worker's library, so a new worker pays neither the interpreter's start nor its
imports (0.5-1 s of CPU, several seconds on a loaded machine) - what an autoscaled fleet
would pay at every step up. Measured: docs/autoscaling.md ("Worker start-up").

The server is Python's ``multiprocessing`` fork server: started once, single-threaded, it
imports :data:`PRELOAD` (never torch: a policy that needs it imports it in its own worker,
as before) and forks each worker. A worker is still a process of its own: its own session
(Ctrl-C reaches the fleet, which stops workers in order), exactly the environment the
command would get, its log file on stdout and stderr, ``rolloutfleet worker``'s own main and
signal handling, its exit code (``-9`` for SIGKILL) back through the server. It watches the
server as its parent; the server ends when the fleet does, even by SIGKILL. ``ps`` names it
``rf-worker-<i>``. Variables read while a module is imported are the fleet's when the
server started.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from pathlib import Path
from typing import Any, Protocol

from rolloutfleet.fleet.parent_watch import PARENT_PID_ENV

PRELOAD = (
    "rolloutfleet.cli.main",
    "rolloutfleet.fleet.worker",
    "rolloutfleet.fleet.probes",
    "rolloutfleet.fleet.worker_transport",
    "rolloutfleet.evaluation.evaluator",
    "rolloutfleet.inference.cpu_threads",
    "rolloutfleet.sampling.vector.make",
    "rolloutfleet.sampling.vector.processes",
    "rolloutfleet.sampling.heap",
    "rolloutfleet.fleet.runner_factory",
    "rolloutfleet.sampling.sizes",
    "rolloutfleet.sampling.env.external_spaces",
    "encodings.idna",
)
"""What every worker imports before it builds its env and policy (none of them imports torch)."""


class WorkerHandle(Protocol):
    """The part of ``subprocess.Popen`` the fleet uses."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def available() -> bool:
    """Whether this platform has the fork server (Linux and macOS do; Windows does not), on the
    Python whose launch step :class:`_Popen` mirrors (3.11); elsewhere workers are exec'd."""
    return sys.version_info[:2] == (3, 11) and "forkserver" in multiprocessing.get_all_start_methods()


class _Popen(popen_forkserver.Popen):
    """The fork server's ``Popen``, less one step: the child does not run the fleet's main
    module again (multiprocessing does, for targets defined there; ours is not, and a script
    without the ``if __name__ == "__main__"`` guard would start a fleet in every worker)."""

    def _launch(self, process_obj: Any) -> None:  # Python 3.11's, the main module left out
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_name", None)
        prep_data.pop("init_main_from_path", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        parent_w = os.dup(w)  # the child's sentinel of this process
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> _Popen:  # noqa: N802 (multiprocessing's name)
        # Global to this process's one fork server; read when it starts (the fleet's first worker).
        forkserver.set_forkserver_preload(list(PRELOAD))
        return _Popen(process_obj)


class ForkedWorker:
    """A ``rolloutfleet worker`` forked by the server, with ``environ`` and its output
    appended to ``log_path``."""

    def __init__(self, environ: Mapping[str, str], log_path: Path, index: int) -> None:
        self._process = _Process(
            target=_worker_main,
            args=(dict(environ), str(log_path), index),
            name=f"rf-worker-{index}",
            # Should the fleet's process end without stopping it, multiprocessing SIGTERMs it
            # (and waits) rather than waiting forever; the worker itself may still start
            # processes (its env processes): see _worker_main.
            daemon=True,
        )
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired("rolloutfleet worker", timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: no signal to a process known to be gone
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _worker_main(environ: dict[str, str], log_path: str, index: int) -> None:
    """In the forked child: become what ``python -m rolloutfleet.cli.main worker`` would be."""
    os.setsid()  # as start_new_session: Ctrl-C reaches the fleet, not the workers
    _forget_server_pipe()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(environ)
    # The worker watches its parent, the server: it ends when the fleet does (see the module doc).
    server = os.getppid()
    try:  # the fleet still there now: the server (which outlives it) was our parent above
        os.kill(int(environ[PARENT_PID_ENV]), 0)
    except (KeyError, ValueError, ProcessLookupError):
        os._exit(1)
    os.environ[PARENT_PID_ENV] = str(server)
    multiprocessing.current_process().daemon = False  # its env processes (async vectorization) may start
    sys.argv = ["rolloutfleet", "worker"]
    with contextlib.suppress(OSError):  # not Linux: the name is only for ps and top
        Path("/proc/self/comm").write_text(f"rf-worker-{index}"[:15])
    from rolloutfleet.fleet.worker import main  # what ``rolloutfleet worker`` runs (evaluators are never forked)

    sys.exit(main())


def _forget_server_pipe() -> None:
    """Close this child's copy of the pipe whose end tells the server that the fleet is gone:
    held here too, it would keep the server, and so this worker, alive after the fleet died."""
    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if server is not None and fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None
