"""A real full disk for tests: a tmpfs of a few KiB (needs root; under CI=true its absence fails)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tiny_disk(where: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where/tiny``: writes past it fail with ENOSPC."""
    mount = where / "tiny"
    mount.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode
        == 0
    )
    if not mounted:
        if os.environ.get("CI") == "true":
            pytest.fail("a tmpfs cannot be mounted here (needs root): the disk-full tests did not run")
        pytest.skip("needs root to mount a tmpfs (a full disk)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
