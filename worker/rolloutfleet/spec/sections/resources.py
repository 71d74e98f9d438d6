"""``spec.resources``: each worker's CPU, memory and GPUs, as Kubernetes quantities."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from rolloutfleet.spec.model_base import SpecModel as _Model

_QUANTITY = re.compile(
    r"^([+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_QUANTITY_SCALE = {
    None: 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (``"512Mi"`` -> 536870912.0); ``ValueError`` when it is not one.

    >>> parse_quantity("1Gi"), parse_quantity("1.5G"), parse_quantity("1e3"), parse_quantity(128)
    (1073741824.0, 1500000000.0, 1000.0, 128.0)
    """
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity (e.g. 512Mi, 2Gi): {value!r}")
    number, suffix = float(match.group(1)), match.group(2)
    if suffix is not None and suffix[0] in "eE":
        return number * 10.0 ** int(suffix[1:])
    return number * _QUANTITY_SCALE[suffix]


class ResourcesSpec(_Model):
    """Container resources; ``gpu`` becomes ``nvidia.com/gpu``."""

    cpu: str | None = None
    """CPU request and limit of each worker; ``async`` runs one env process per CPU (rounded up)."""
    memory: str | None = None
    """Memory request and limit of each worker; the worker refuses a model and fragment that need more."""
    gpu: int = Field(default=0, ge=0)

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _int_or_string(cls, value: Any) -> Any:
        # The CRD's int-or-string: `cpu: 2` is the quantity "2" (a float is neither, as there).
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None:
            parse_quantity(value)
        return value
