"""pydantic's validation errors as the one line a :class:`~rolloutfleet.spec.job.SpecError`
says: each error's field path in the manifest's terms (camelCase, ``[i]`` for items, odd keys
quoted), then what is wrong (type errors as :func:`~rolloutfleet.spec.model_base.type_message`)."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError
from rolloutfleet.spec.model_base import type_message


def describe_errors(exc: ValidationError) -> str:
    """Every error of ``exc`` as ``<field path>: <what is wrong>``, joined by ``; ``, on one line."""
    problems = []
    for error in exc.errors():
        location = ".".join(_camel(part) for part in error["loc"])
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, _SubfieldError):
            location = f"{location}.{cause.path}" if location else cause.path
        location = location.replace(".[", "[")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "literal_error":
            message = "must be one of " + error["ctx"]["expected"]
            message += f" (got {error['input']!r})"
        elif error["type"] == "extra_forbidden":
            message = "unknown field (check the spelling against the RolloutJob reference)"
        elif (typed := type_message(error["type"], error.get("input"))) is not None:
            message = typed
        problems.append(f"{location or 'manifest'}: {message}")
    return "; ".join(problems).replace("\n", "\\n").replace("\r", "\\r")  # one line, whatever was given


def _camel(part: int | str) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    if not part.isprintable() or not part.strip() or "." in part:
        return f"[{part!r}]"  # a key a user cannot see or that reads as a path
    return to_camel(part) if "_" in part else part
