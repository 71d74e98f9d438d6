"""The base every RolloutJob section model derives from, and the error a model validator
raises about one of its own fields (so the message names that field's path)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SubfieldError(ValueError):
    """Raised by a model validator about one of its fields: the error names that field's path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


class SpecModel(BaseModel):
    """camelCase aliases, unknown fields refused, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )
