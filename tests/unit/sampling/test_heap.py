"""keep_freed_memory against the kernel's own count of page faults (getrusage's ru_minflt)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rolloutfleet.sampling.heap import keep_freed_memory

# One "sample() call" of a 64-env CartPole worker, as far as malloc sees it: a dozen arrays of
# 50-200 KB made, then the previous ones freed. Prints the minor faults of the last 20 calls.
_BATCHES = """
import resource, sys
import numpy as np
if sys.argv[1] == "tuned":
    from rolloutfleet.sampling.heap import keep_freed_memory
    assert keep_freed_memory()
def batch():
    return [np.ones(n, np.uint8) for n in (200_000, 200_000, 100_000, 100_000, 50_000, 50_000) * 2]
held = batch()
for i in range(30):
    if i == 10:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = batch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _BATCHES, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_batches_are_reused_without_page_faults() -> None:
    assert keep_freed_memory() is True  # glibc here: the call takes
    default, tuned = faults("default"), faults("tuned")
    # 20 calls x 1.4 MB: glibc's defaults give part of the freed heap back and fault it in
    # again (~150 pages per call here); kept, the same pages are reused.
    assert default > 20 * 50, default
    assert tuned < 100, tuned
