"""A module the worker image lacks: one line for the pod's termination message, read back by the operator.

The slim worker image (``<version>-slim``, built with ``PROFILE=worker-slim``) holds no torch,
CUDA or OpenCV: the operator gives it to jobs whose policies all act in numpy
(:func:`rolloutfleet.rules.footprint.job_needs_torch`). A job that needs more than the rule can
see (a custom ``entryPoint`` importing torch, an env package missing) ends at start-up with
exit 3 and :func:`missing_module_line`; the operator recognises the line
(:func:`is_missing_module`) and leaves the worker down until the spec changes, since the same
image would fail the same way (no crash loop). ``rolloutfleet run`` does the same with its local
workers (profile ``local``: the line names the Python to install the module into).
"""

from __future__ import annotations

import sys

PROFILE_VARIABLE = "ROLLOUTFLEET_IMAGE_PROFILE"
"""Set by worker/Dockerfile to the image's profile: ``worker-slim``, ``worker-cuda``, ``worker-cpu``."""
SLIM_PROFILE = "worker-slim"
LOCAL_PROFILE = "local"
"""Set by ``rolloutfleet run`` for its workers: the modules are those of the Python it runs."""
PREFIX = "missing Python module "


def missing_module(exc: BaseException | None) -> str | None:
    """The top-level module a :class:`ModuleNotFoundError` in ``exc``'s chain names (causes and
    contexts: a ``raise ... from None`` keeps the context), else None.

    >>> try:
    ...     try:
    ...         import torch_that_is_not_there.nn
    ...     except ImportError as inner:
    ...         raise ValueError("spec.policy: cannot build") from None
    ... except ValueError as outer:
    ...     missing_module(outer)
    'torch_that_is_not_there'
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name.split(".")[0]
        exc = exc.__cause__ or exc.__context__
    return None


def missing_module_line(module: str, profile: str | None, error: str = "") -> str:
    """The one line a worker ends with when ``module`` cannot be imported in its image.

    >>> missing_module_line("torch", "worker-slim")  # doctest: +NORMALIZE_WHITESPACE
    "missing Python module 'torch': the slim worker image (numpy policies) has no torch, CUDA or
    OpenCV; spec.image, or policy.inference: torch, selects the full worker image"
    """
    line = f"{PREFIX}{module!r}: "
    if profile == SLIM_PROFILE:
        line += (
            "the slim worker image (numpy policies) has no torch, CUDA or OpenCV; "
            "spec.image, or policy.inference: torch, selects the full worker image"
        )
    elif profile == LOCAL_PROFILE:
        line += f"the Python that runs the local fleet ({sys.executable}) does not hold it; install it there"
    else:
        line += "the worker image does not hold it; spec.image can name one that does"
    return f"{line} ({error})" if error else line


def is_missing_module(exit_code: int | None, message: str) -> bool:
    """Whether a worker's exit is :func:`missing_module_line` (exit 3): the same image fails again."""
    return exit_code == 3 and message.startswith(PREFIX)


UNSUPPORTED_OBSERVATION = "unsupported observation space"
UNSUPPORTED_ACTION = "unsupported action space"
"""How the policy refuses an env's spaces (:mod:`rolloutfleet.inference`): a fact of the env and
the code, so the same spec fails the same way on every start."""


def stays_down(exit_code: int | None, message: str) -> str | None:
    """Why a worker's exit (3) will repeat on every start with the same spec and image, as an
    Event reason (``MissingModule``, ``UnsupportedSpace``); None for a failure a restart may mend.

    >>> stays_down(3, "spec.env: unsupported observation space Text(1, 8): observations may be ...")
    'UnsupportedSpace'
    >>> stays_down(3, "spec.env.id: building the environment failed: ConnectionError: ...") is None
    True
    """
    if is_missing_module(exit_code, message):
        return "MissingModule"
    if exit_code == 3 and (UNSUPPORTED_OBSERVATION in message or UNSUPPORTED_ACTION in message):
        return "UnsupportedSpace"
    return None
