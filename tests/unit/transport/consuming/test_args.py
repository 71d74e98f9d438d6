from __future__ import annotations

import math

import numpy as np
import pytest

from rolloutfleet.transport.consuming.args import consumer_args, count_arg, seconds_arg


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


def test_a_consumer_s_arguments_are_checked_each_by_its_name() -> None:
    consumer_args(30.0, 3, 16, 1.0, 120.0, None)  # the defaults pass
    consumer_args(30.0, 3, 16, 1.0, 0.0, 0)  # no reconnect window, no lag allowed: both fine
    bad = {
        "reclaim_idle_s": (0.0, 3, 16, 1.0, 120.0, None),
        "max_deliveries": (30.0, 0, 16, 1.0, 120.0, None),
        "read_count": (30.0, 3, 0, 1.0, 120.0, None),
        "block_s": (30.0, 3, 16, math.inf, 120.0, None),
        "reconnect_timeout_s": (30.0, 3, 16, 1.0, -1.0, None),
        "max_policy_lag": (30.0, 3, 16, 1.0, 120.0, -1),
    }
    for name, args in bad.items():
        with pytest.raises(ValueError, match=rf"^{name} must be "):
            consumer_args(*args)
