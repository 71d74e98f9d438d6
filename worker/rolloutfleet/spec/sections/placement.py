"""``spec.tolerations`` typed as the CRD types them: the operator copies the items into the
worker pods as given, so a ``tolerationSeconds: "30"`` must be refused here, as the API
server refuses it, not found when a pod cannot be created."""

from __future__ import annotations

from typing import Any

from rolloutfleet.spec.model_base import SubfieldError, json_kind

_FIELDS = {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int}
_ENUMS = {"operator": ("Exists", "Equal"), "effect": ("NoSchedule", "PreferNoSchedule", "NoExecute", "")}


def check_tolerations(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items, each checked: known fields only, of the CRD's types and values.

    >>> check_tolerations([{"key": "gpu", "operator": "Exists", "tolerationSeconds": 30.0}])
    [{'key': 'gpu', 'operator': 'Exists', 'tolerationSeconds': 30}]
    """
    checked = []
    for index, item in enumerate(value):
        item = dict(item)
        for name, given in item.items():
            kind = _FIELDS.get(name)
            if kind is None:
                raise SubfieldError(f"[{index}].{name}", f"unknown field; a toleration has {', '.join(_FIELDS)}")
            if kind is int and isinstance(given, float) and given.is_integer():
                given = item[name] = int(given)  # as the API server stores 30.0
            if given is not None and (not isinstance(given, kind) or isinstance(given, bool)):
                expected = "an integer" if kind is int else "a string"
                raise SubfieldError(f"[{index}].{name}", f"must be {expected}, got {given!r} ({json_kind(given)})")
            if name in _ENUMS and given is not None and given not in _ENUMS[name]:
                raise SubfieldError(f"[{index}].{name}", f"must be one of {', '.join(map(repr, _ENUMS[name]))}")
        checked.append({name: given for name, given in item.items() if given is not None})
    return checked


def check_env_vars(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``spec.extraEnv``: each item names its variable with a string (the rest is the pod's).

    >>> check_env_vars([{"name": 5}])
    Traceback (most recent call last):
    ...
    rolloutfleet.spec.model_base.SubfieldError: must be a string, got 5 (an integer)
    """
    for index, item in enumerate(value):
        name = item.get("name")
        if not isinstance(name, str):
            problem = "is required" if name is None else f"must be a string, got {name!r} ({json_kind(name)})"
            raise SubfieldError(f"[{index}].name", problem)
    return value
