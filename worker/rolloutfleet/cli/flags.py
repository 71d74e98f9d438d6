"""Flags checked before a command does any work: one line naming the flag (exit 2), and
argparse's own errors in one line too (its usage block would bury the error)."""

from __future__ import annotations

import argparse
import ipaddress
import math
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

# attribute -> (flag, lowest value, whether the lowest is allowed); None values are "not given".
_NUMBERS: dict[str, tuple[str, float, bool]] = {
    "steps": ("--steps", 1, True),
    "num_workers": ("--num-workers", 1, True),
    "worker_index": ("--worker-index", 0, True),
    "replicas": ("--replicas", 0, True),
    "duration": ("--duration", 0, False),
    "redis_timeout": ("--redis-timeout", 0, False),
    "count": ("--count", 1, True),
    "timeout": ("--timeout", 0, False),
}
_SECONDS = {"duration", "redis_timeout", "timeout"}
_FINITE = {"redis_timeout", "timeout"}
"""Waits that must end (``--duration inf`` is a fleet that runs until stopped)."""
_TEXT = {
    "output": "--output",
    "job": "--job",
    "namespace": "--namespace",
    "redis": "--redis",
    "group": "--group",
    "consumer": "--consumer",
    "policy": "--policy",
    "manifest": "MANIFEST",
}


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line: ``rolloutfleet run: <what> (see --help)``."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def flag_problem(args: argparse.Namespace) -> str | None:
    """The first flag of ``args`` that cannot work, in one line; None when all can.

    >>> flag_problem(argparse.Namespace(duration=-1.0))
    '--duration must be > 0 s, got -1'
    """
    for name, (flag, lowest, inclusive) in _NUMBERS.items():
        value: Any = getattr(args, name, None)
        if value is None:
            continue
        unit = " s" if name in _SECONDS else ""
        if math.isnan(value) or (value < lowest if inclusive else value <= lowest):
            return f"{flag} must be {'>=' if inclusive else '>'} {lowest:g}{unit}, got {value:g}"
        if name in _FINITE and math.isinf(value):
            return f"{flag} must be a finite number of seconds, got {value:g}"
    for name, flag in _TEXT.items():
        value = getattr(args, name, None)
        if value is not None and not str(value).strip():
            return f"{flag} must not be empty"
    listen = getattr(args, "listen", None)
    if listen is not None:
        try:
            ipaddress.ip_address(listen)
        except ValueError:
            return f"--listen must be an IP address (127.0.0.1, 0.0.0.0, ::1), got {listen!r}"
    output = getattr(args, "output", None)
    if output is not None and (str(output).endswith("/") or Path(output).name in ("", ".", "..")):
        return f"--output must name a file, got {output!r}"
    return None


def command_problem(command: list[str]) -> str | None:
    """Why ``command`` (``run -- COMMAND``) cannot be started, or None.

    >>> command_problem(["no-such-command-here"])
    '-- no-such-command-here: command not found (not on PATH, or not an executable file)'
    """
    if command and shutil.which(command[0]) is None:
        return f"-- {command[0]}: command not found (not on PATH, or not an executable file)"
    return None
