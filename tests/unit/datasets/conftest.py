"""The recording tests need pyarrow and minari (``pip install 'rolloutfleet[datasets]'``,
in requirements.lock): skipped without them on a laptop, a failure under ``CI=true``."""

from __future__ import annotations

import importlib.util
import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [name for name in ("pyarrow", "minari") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI=true and {missing} not installed: the recording tests cannot run")
    for item in items:
        if "tests/unit/datasets" in str(item.path):
            item.add_marker(pytest.mark.skip(reason=f"{missing} not installed (the datasets extra)"))
