"""How a worker (and an evaluation worker) says why it ends: one line on stderr and in the
pod's termination message, where the operator reads it for the job's status, and an exit
code the restart budget counts: 3 for a spec, env or policy that cannot be built (or a
module the image lacks, naming the image that has it), 4 for Redis."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from rolloutfleet.rules.missing_modules import PROFILE_VARIABLE, missing_module, missing_module_line
from rolloutfleet.spec.job import SpecError

EXIT_BAD_SPEC = 3
EXIT_REDIS = 4
"""Redis refused the password, or was never reached within ``redis_startup_timeout_s``."""
TERMINATION_LOG: Path | None = None
"""Where the line goes; ``None``: ``$ROLLOUTFLEET_TERMINATION_LOG`` read when the line is written
(a worker forked from the local fleet's warm server gets its own after the import), else the
pod's ``/dev/termination-log``."""


def report_fatal(message: str) -> None:
    """One line for humans (stderr) and for the operator (the pod's termination message)."""
    line = message.replace("\n", " ")[:1000]
    print(f"rolloutfleet worker: {line}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):  # not in a pod, or a read-only path: stderr is enough
        path = TERMINATION_LOG or Path(os.environ.get("ROLLOUTFLEET_TERMINATION_LOG", "/dev/termination-log"))
        path.write_text(line + "\n")


def report_unbuildable(exc: SpecError | ImportError, environ: Mapping[str, str]) -> int:
    """A spec, env or policy that cannot be built, or torch for a policy that needs it in an
    image without it: said in one line, :data:`EXIT_BAD_SPEC`. Any other ImportError is raised."""
    module = missing_module(exc)
    if isinstance(exc, SpecError):
        report_fatal(
            str(exc) if module is None else missing_module_line(module, environ.get(PROFILE_VARIABLE), str(exc))
        )
        return EXIT_BAD_SPEC
    if module is None:
        raise exc
    report_fatal(missing_module_line(module, environ.get(PROFILE_VARIABLE)))
    return EXIT_BAD_SPEC
