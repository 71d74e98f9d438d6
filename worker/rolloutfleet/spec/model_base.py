"""The base every RolloutJob section model derives from, and the error a model validator
raises about one of its own fields (so the message names that field's path).

Types are as strict as the CRD's structural schema, so a manifest that ``rolloutfleet
validate`` accepts is one the API server accepts: ``"8"`` is no integer, ``"off"`` and
``1`` are no booleans, ``true`` is no number. The API server's own leniencies are kept: a
float with an integral value (``8.0``) is an integer (it stores ``8``), and a null where
no null can be stored is left out (the default applies; a map's entry is dropped).
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel


class SubfieldError(ValueError):
    """Raised by a model validator about one of its fields: the error names that field's path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _takes(annotation: Any, kind: type) -> bool:
    """Whether ``annotation`` (``int``, ``int | None``, ``int | str``, ...) accepts ``kind`` itself."""
    if annotation is kind:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_takes(arg, kind) for arg in get_args(annotation))
    return False


def plain_json(value: Any) -> Any:
    """``value`` with every mapping a dict, every tuple a list and every numpy scalar a number,
    as a JSON document has them (strict validation takes dicts only; kopf hands the spec over
    as a mapping view).

    >>> plain_json((1, {"a": (2,)}))
    [1, {'a': [2]}]
    """
    if isinstance(value, Mapping):
        return {key: plain_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(item) for item in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # np.int64(4) is the number 4
        return value.item()
    return value


def integral_floats(value: Any, annotation: Any) -> Any:
    """``value`` with floats of integral value made ints where ``annotation`` wants an int (and
    no float), in lists too: what the API server does with ``numEnvs: 8.0``.

    >>> integral_floats(8.0, int), integral_floats([64.0, 32], list[int]), integral_floats(8.5, int)
    (8, [64, 32], 8.5)
    """
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value) if _takes(annotation, int) and not _takes(annotation, float) else value
    if isinstance(value, list):
        items = [get_args(arg)[0] for arg in (annotation, *get_args(annotation)) if get_origin(arg) is list]
        return [integral_floats(item, items[0]) for item in value] if items else value
    return value


_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_type": "a boolean (true or false)",
    "string_type": "a string",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "list_type": "a list",
}


def json_kind(value: Any) -> str:
    """What a parsed YAML/JSON value is, in the manifest's terms.

    >>> json_kind("8"), json_kind(True), json_kind(8.5), json_kind(None)
    ('a string', 'a boolean', 'a number', 'null')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


def type_message(error_type: str, value: Any) -> str | None:
    """``must be an integer, got "8" (a string)`` for a pydantic type error, else None.

    >>> print(type_message("int_type", "8"), type_message("bool_type", 1), sep="; ")
    must be an integer, got "8" (a string); must be a boolean (true or false), got 1 (an integer)
    """
    expected = _EXPECTED.get(error_type)
    if expected is None:
        return None
    shown = json.dumps(value, default=repr)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"must be {expected}, got {shown} ({json_kind(value)})"


class SpecModel(BaseModel):
    """camelCase aliases, unknown fields refused, immutable, types as strict as the CRD's."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,  # JSON (what the API server stores) has no inf or NaN
    )

    @field_validator("*", mode="before")
    @classmethod
    def _as_the_api_server_reads(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        field = cls.model_fields[info.field_name]
        if value is None and not field.is_required() and not _takes(field.annotation, type(None)):
            # The API server prunes a null it cannot store, then applies the default.
            return field.get_default(call_default_factory=True)
        entries = get_args(field.annotation)[1] if get_origin(field.annotation) is dict else Any
        if isinstance(value, dict) and entries is not Any and not _takes(entries, type(None)):
            # So is a null map value (``nodeSelector: {disk: null}``).
            value = {key: entry for key, entry in value.items() if entry is not None}
        return integral_floats(value, field.annotation)
