"""Applying ``spec.env.wrappers`` (validated by :mod:`rolloutfleet.spec.sections.wrappers_spec`) to a sub-env,
and the env ids whose namespace a package registers on import (``ALE/...``: ale-py)."""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import wrappers as gym_wrappers

from rolloutfleet.spec.job import SpecError
from rolloutfleet.spec.sections.wrappers_spec import WrapperSpec

NAMESPACE_PACKAGES = {"ALE": ("ale_py", "atari")}
"""gymnasium namespace -> (the module registering its ids on import, our extra that installs it)."""


def register_namespace(env_id: str) -> None:
    """Import the package that registers ``env_id``'s namespace (``ALE/Pong-v5``: ale-py), once.

    gymnasium 1.x registers no Atari ids by itself; a missing package is one line naming the id.
    """
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    if namespace not in NAMESPACE_PACKAGES:
        return
    module_name, extra = NAMESPACE_PACKAGES[namespace]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise SpecError(
            f"spec.env.id {env_id!r}: {namespace} envs need the {module_name} package "
            f"(pip install 'rolloutfleet[{extra}]')"
        ) from None
    gym.register_envs(module)


def _arguments(spec: WrapperSpec) -> dict[str, Any]:
    args = dict(spec.args)
    if "shape" in args:  # ResizeObservation takes a tuple
        args["shape"] = tuple(args["shape"])
    for bound in ("min_action", "max_action"):  # RescaleAction: a float32 bound for a float32 space
        if bound in args:
            args[bound] = np.float32(args[bound])
    return args


def apply_wrappers(env: gym.Env[Any, Any], wrappers: list[WrapperSpec]) -> gym.Env[Any, Any]:
    """``env`` inside each wrapper in turn (the first innermost); an error names the entry.

    >>> env = apply_wrappers(gym.make("CartPole-v1"), [WrapperSpec(name="TimeLimit", args={"max_episode_steps": 5})])
    >>> type(env).__name__
    'TimeLimit'
    """
    for index, spec in enumerate(wrappers):
        wrapper = getattr(gym_wrappers, spec.name)
        try:
            env = wrapper(env, **_arguments(spec))
        except gym.error.DependencyNotInstalled as exc:
            raise SpecError(
                f"spec.env.wrappers[{index}]: {spec.name} needs a package that is not installed "
                f"(pip install 'rolloutfleet[atari]'): {exc}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - one line naming the wrapper, not a traceback
            message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            raise SpecError(f"spec.env.wrappers[{index}]: {spec.name} cannot wrap this env: {message}") from None
    return env
