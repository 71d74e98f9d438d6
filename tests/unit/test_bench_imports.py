"""Every bench module imports: the benches are run by hand (`make bench`, ...) and by no other
test, so a module they use that moved or lost a name would otherwise show up only then."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("module", sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"))
def test_the_bench_module_imports(module: str) -> None:
    importlib.import_module(f"bench.{module}")
