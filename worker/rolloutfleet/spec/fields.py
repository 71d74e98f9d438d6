"""Checks and bounds that several sections of the RolloutJob model share: entry points,
layer sizes, devices."""

from __future__ import annotations

import re

# "package.module:attribute" — the attribute part may be dotted (Class.factory).
_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")

MAX_LAYERS = 64
MAX_LAYER_WIDTH = 16384
"""Sane upper bounds of a default model (the CRD has the same): a larger value is a typo, not a plan."""


def check_entry_point(value: str | None) -> str | None:
    if value is not None and not _ENTRY_POINT.match(value):
        raise ValueError(f"must look like 'package.module:name', got {value!r}")
    return value


def check_layers(value: list[int]) -> list[int]:
    if not value or any(size < 1 for size in value):
        raise ValueError(f"must be a non-empty list of positive layer sizes, got {value}")
    if len(value) > MAX_LAYERS or max(value) > MAX_LAYER_WIDTH:
        raise ValueError(f"at most {MAX_LAYERS} layers of at most {MAX_LAYER_WIDTH} units each, got {value}")
    return value


def check_device(value: str) -> str:
    if not _DEVICE.match(value):
        raise ValueError(f"must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {value!r}")
    return value
