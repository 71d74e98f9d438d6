"""Weights versions the workers refused, as their heartbeats report them: summed over
workers for the job status (operator) and ``rolloutfleet streams``. Pure, no I/O: the
heartbeat's ``weights_refused`` field (policy -> (version, reason)) is written by
:mod:`rolloutfleet.transport.heartbeat`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def refused_versions(
    beats: Mapping[int, Mapping[str, Any]], desired: int | None = None
) -> list[tuple[str, int, int, str]]:
    """(policy, version, workers, reason) per refused version, over the workers below
    ``desired`` (all when None); the reason is the lowest worker's.

    >>> refused_versions({0: {"weights_refused": {"default": (3, "'pi.weight' holds 8 NaN/inf values")}},
    ...                1: {"weights_refused": {"default": (3, "same")}}, 2: {}})
    [('default', 3, 2, "'pi.weight' holds 8 NaN/inf values")]
    """
    found: dict[tuple[str, int], tuple[int, str]] = {}
    for index in sorted(beats):
        if desired is not None and index >= desired:
            continue
        for policy, (seq, reason) in (beats[index].get("weights_refused") or {}).items():
            workers, first = found.get((policy, seq), (0, reason))
            found[(policy, seq)] = (workers + 1, first)
    return [(policy, seq, workers, reason) for (policy, seq), (workers, reason) in sorted(found.items())]


def refused_line(policy: str, seq: int, workers: int, reason: str) -> str:
    """``weights v3 refused by 2 workers: <reason>`` (a multi-agent policy's: ``policy red: ...``).

    >>> refused_line("red", 3, 1, "'pi.weight' holds 8 NaN/inf values")
    "policy red: weights v3 refused by 1 worker: 'pi.weight' holds 8 NaN/inf values"
    """
    who = "" if policy == "default" else f"policy {policy}: "
    return f"{who}weights v{seq} refused by {workers} worker{'s' if workers != 1 else ''}: {reason}"
