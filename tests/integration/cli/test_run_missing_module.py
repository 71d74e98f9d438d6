"""`rolloutfleet run` with workers whose Python lacks a module: one line and exit 3, no restart loop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MANIFEST = """\
kind: RolloutJob
metadata: {name: lacks}
spec:
  replicas: 2
  env: {entryPoint: "no_such_module_anywhere:make"}
  restartPolicy: {maxRestarts: 5, backoffSeconds: 0.2, backoffLimitSeconds: 1}
"""


# An autoscaled job's workers are forked from the warm server, which imported the worker's
# modules before the fleet gave each worker its own termination log.
AUTOSCALED = MANIFEST.replace("  replicas: 2\n", "  autoscaling: {minReplicas: 2, maxReplicas: 2}\n")


@pytest.mark.parametrize("text", [MANIFEST, AUTOSCALED], ids=["fixed", "autoscaled-forked"])
def test_run_stops_once_with_the_missing_module_line(text: str, redis_url: str, tmp_path: Path) -> None:
    manifest = tmp_path / "lacks.yaml"
    manifest.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--redis", redis_url, "--no-status"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr and "restarting in" not in result.stderr, result.stderr
    down = [line for line in result.stderr.splitlines() if line.startswith("fleet: every worker is down")]
    assert len(down) == 1, result.stderr
    assert "missing Python module 'no_such_module_anywhere': " in down[0] and sys.executable in down[0], down
    # Each worker started once: its log holds its one line once.
    kept = [line for line in result.stderr.splitlines() if "the logs are kept in" in line]
    assert len(kept) == 1, result.stderr
    logs = Path(kept[0].rsplit(" ", 1)[1])
    for index in (0, 1):
        text = (logs / f"worker-{index}.log").read_text()
        assert text.count("rolloutfleet worker: missing Python module") == 1, text
