"""``status.customMetrics``: the mean of each custom per-episode metric callbacks set
(``episode.custom_metrics["lap_time"]``, docs/datasets.md), over the job's current workers.

Pure. Each worker's heartbeat carries the mean of its last episodes' values
(``custom/<key>_mean``); the job's figure is the mean of those of the current workers
(index below ``desired``), each worker counted once. ``null`` when no worker has one, so
that a merge patch removes an old set.

>>> custom_metrics_status({0: {"custom/lap_time_mean": 10.0}, 1: {"custom/lap_time_mean": 14.0}}, 2)
{'customMetrics': {'lap_time': 12.0}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

PREFIX, SUFFIX = "custom/", "_mean"


def custom_metrics_status(beats: Mapping[int, Mapping[str, Any]], desired: int) -> dict[str, Any]:
    values: dict[str, list[float]] = {}
    for index, beat in beats.items():
        if index >= desired:
            continue
        for name, value in beat.items():
            wanted = name.startswith(PREFIX) and name.endswith(SUFFIX) and isinstance(value, int | float)
            if wanted and math.isfinite(value):
                values.setdefault(name[len(PREFIX) : -len(SUFFIX)], []).append(float(value))
    means = {key: math.fsum(found) / len(found) for key, found in sorted(values.items())}
    return {"customMetrics": means or None}
