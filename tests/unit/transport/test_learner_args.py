from __future__ import annotations

import math

import numpy as np
import pytest

from rolloutfleet.transport.learner_args import count_arg, seconds_arg


def test_counts() -> None:
    assert count_arg("min_steps", 0, 0) == 0 and count_arg("count", np.int64(3), 1) == 3
    for bad in (-1, 2.5, "10", True, None, math.nan):
        with pytest.raises(ValueError, match=r"^min_steps must be a whole number >= 0, got "):
            count_arg("min_steps", bad, 0)


def test_seconds() -> None:
    assert seconds_arg("timeout", 0) == 0.0 and seconds_arg("timeout", math.inf) == math.inf
    for bad in (-0.1, math.nan, "5", False, None):
        with pytest.raises(ValueError, match=r"^timeout must be a number of seconds >= 0, got "):
            seconds_arg("timeout", bad)
    with pytest.raises(ValueError, match=r"^block_s must be a finite number of seconds > 0, got inf"):
        seconds_arg("block_s", math.inf, zero=False, finite=True)
