"""``spec.env.wrappers``: gymnasium's standard wrappers, by name, with their arguments.

Each entry wraps every sub-env, in the order given (the first wraps the env itself)::

    wrappers:
      - {name: AtariPreprocessing, args: {frame_skip: 4, screen_size: 84}}
      - {name: FrameStackObservation, args: {stack_size: 4}}
      - {name: ClipReward, args: {min_reward: -1, max_reward: 1}}

``name`` is the class in ``gymnasium.wrappers``; ``args`` are its keyword arguments, with
gymnasium's own (snake_case) names. This module imports no gymnasium: :data:`WRAPPERS`
says which arguments each wrapper takes (a test checks it against gymnasium's signatures)
and :data:`ARGS` what each argument may hold, so a manifest is judged without the env.

>>> WrapperSpec(name="FrameStackObservation", args={"stack_size": 4}).args
{'stack_size': 4}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from rolloutfleet.spec.model_base import SpecModel, SubfieldError

MAX_WRAPPERS = 16


@dataclass(frozen=True)
class ArgKind:
    """What one argument may hold: ``int``, ``number``, ``bool``, ``pair`` (two ints >= 1) or one of ``choices``."""

    kind: Literal["int", "number", "bool", "pair", "choice"]
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> str | None:
        """None when ``value`` fits, else what is wrong (a phrase)."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else "must be true or false"
        if self.kind == "choice":
            return None if value in self.choices else "must be one of " + ", ".join(map(repr, self.choices))
        if self.kind == "pair":
            if isinstance(value, list | tuple) and len(value) == 2 and all(_is_int(v) and v >= 1 for v in value):
                return None
            return "must be a list of two integers >= 1, [height, width]"
        if self.kind == "int" and not _is_int(value):
            return "must be an integer"
        if self.kind == "number" and (not _is_number(value) or not math.isfinite(value)):
            return "must be a finite number"
        return self._check_bounds(value)

    def _check_bounds(self, value: float) -> str | None:
        low, high = self.minimum, self.maximum
        if low is not None and (value <= low if self.exclusive_minimum else value < low):
            return f"must be {'>' if self.exclusive_minimum else '>='} {low:g}"
        if high is not None and value > high:
            return f"must be <= {high:g}"
        return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_COUNT = ArgKind("int", minimum=1)
_BOOL = ArgKind("bool")
_EPSILON = ArgKind("number", minimum=0, exclusive_minimum=True)

ARGS: dict[str, ArgKind] = {
    "noop_max": ArgKind("int", minimum=0),
    "frame_skip": _COUNT,
    "screen_size": _COUNT,
    "terminal_on_life_loss": _BOOL,
    "grayscale_obs": _BOOL,
    "grayscale_newaxis": _BOOL,
    "scale_obs": _BOOL,
    "stack_size": _COUNT,
    "padding_type": ArgKind("choice", choices=("reset", "zero")),
    "min_reward": ArgKind("number"),
    "max_reward": ArgKind("number"),
    "max_episode_steps": _COUNT,
    "keep_dim": _BOOL,
    "shape": ArgKind("pair"),
    "skip": _COUNT,
    "epsilon": _EPSILON,
    "gamma": ArgKind("number", minimum=0, maximum=1),
    "min_action": ArgKind("number"),
    "max_action": ArgKind("number"),
    "repeat_action_probability": ArgKind("number", minimum=0, maximum=1),
    "repeat_action_duration": _COUNT,
    "flatten": _BOOL,
    "normalize_time": _BOOL,
    "delay": ArgKind("int", minimum=0),
}
"""Every argument a wrapper below takes, and what it may hold (the same name means the same thing)."""


@dataclass(frozen=True)
class WrapperArgs:
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        return self.required + self.optional


_ATARI_PREPROCESSING_ARGS = (
    "noop_max", "frame_skip", "screen_size", "terminal_on_life_loss", "grayscale_obs", "grayscale_newaxis", "scale_obs",
)  # fmt: skip

WRAPPERS: dict[str, WrapperArgs] = {
    "AtariPreprocessing": WrapperArgs(optional=_ATARI_PREPROCESSING_ARGS),
    "FrameStackObservation": WrapperArgs(("stack_size",), ("padding_type",)),
    "MaxAndSkipObservation": WrapperArgs(optional=("skip",)),
    "GrayscaleObservation": WrapperArgs(optional=("keep_dim",)),
    "ResizeObservation": WrapperArgs(("shape",)),
    "FlattenObservation": WrapperArgs(),
    "NormalizeObservation": WrapperArgs(optional=("epsilon",)),
    "TimeAwareObservation": WrapperArgs(optional=("flatten", "normalize_time")),
    "DelayObservation": WrapperArgs(("delay",)),
    "ClipReward": WrapperArgs(optional=("min_reward", "max_reward")),
    "NormalizeReward": WrapperArgs(optional=("gamma", "epsilon")),
    "ClipAction": WrapperArgs(),
    "RescaleAction": WrapperArgs(("min_action", "max_action")),
    "StickyAction": WrapperArgs(("repeat_action_probability",), ("repeat_action_duration",)),
    "TimeLimit": WrapperArgs(("max_episode_steps",)),
}
"""The wrappers ``spec.env.wrappers`` may name (classes of ``gymnasium.wrappers``) and their arguments."""

WrapperName = Literal[
    "AtariPreprocessing", "FrameStackObservation", "MaxAndSkipObservation", "GrayscaleObservation",
    "ResizeObservation", "FlattenObservation", "NormalizeObservation", "TimeAwareObservation",
    "DelayObservation", "ClipReward", "NormalizeReward", "ClipAction", "RescaleAction", "StickyAction",
    "TimeLimit",
]  # fmt: skip


class WrapperSpec(SpecModel):
    """One gymnasium wrapper around every sub-env: its class name and keyword arguments."""

    name: WrapperName
    """A class of ``gymnasium.wrappers`` (the names of :data:`WRAPPERS`)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Its keyword arguments, named as gymnasium names them (``stack_size``, ``frame_skip``, ...)."""

    @model_validator(mode="after")
    def _known_args(self) -> WrapperSpec:
        takes = WRAPPERS[self.name]
        for arg, value in self.args.items():
            if arg not in takes.all:
                accepted = ", ".join(takes.all) or "none"
                raise SubfieldError(f"args.{arg}", f"{self.name} takes no argument {arg!r} (it takes: {accepted})")
            problem = ARGS[arg].check(value)
            if problem is not None:
                raise SubfieldError(f"args.{arg}", f"{problem} (got {value!r})")
        missing = [arg for arg in takes.required if arg not in self.args]
        if missing:
            raise SubfieldError("args", f"{self.name} needs {', '.join(missing)}")
        if self.name == "ClipReward" and not self.args:
            raise SubfieldError("args", "ClipReward needs min_reward, max_reward or both")
        return self
