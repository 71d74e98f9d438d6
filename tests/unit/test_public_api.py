"""The front door: every name in ``rolloutfleet.__all__`` resolves, and importing the
package loads only the spec (the operator imports it; torch and friends load on first use)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import rolloutfleet

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves() -> None:
    missing = [name for name in rolloutfleet.__all__ if getattr(rolloutfleet, name, None) is None]
    assert missing == []
    assert set(rolloutfleet.__all__) <= set(dir(rolloutfleet))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        rolloutfleet.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_import_rolloutfleet_loads_only_the_spec() -> None:
    code = (
        "import json, sys, rolloutfleet;"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if m.split('.')[0] in {'torch', 'gymnasium', 'numpy', 'redis', 'pettingzoo', 'torchrl', 'tensordict', 'ray'}"
        " or (m.startswith('rolloutfleet.') and not m.startswith('rolloutfleet.spec')))))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []
