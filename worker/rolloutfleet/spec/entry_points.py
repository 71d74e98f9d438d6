"""Resolve ``pkg.module:name`` strings from a manifest, with errors that name the field."""

from __future__ import annotations

import importlib
from typing import Any

from rolloutfleet.spec.job import SpecError


def load_entry_point(value: str, field: str) -> Any:
    """Import ``pkg.module:attr.path`` and return the attribute.

    ``field`` is the manifest path reported when anything goes wrong, e.g.
    ``spec.env.entryPoint``.
    """
    module_name, _, attr_path = value.partition(":")
    if not module_name or not attr_path:
        raise SpecError(f"{field}: must look like 'package.module:name', got {value!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module's
        raise SpecError(f"{field}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SpecError(f"{field}: module {module_name!r} has no attribute {attr_path!r}") from None
    if not callable(target):
        raise SpecError(f"{field}: {value!r} is not callable")
    return target
