"""The line a worker ends with when its image lacks a module, and how the operator reads it back."""

from __future__ import annotations

import importlib

import pytest

from rolloutfleet.rules.missing_modules import PREFIX, is_missing_module, missing_module, missing_module_line
from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import SpecError


def test_the_missing_module_is_found_behind_the_one_line_errors_of_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    # An entry point whose module imports torch, in an image without torch: load_entry_point
    # turns the ImportError into a SpecError `from None`, which keeps it as the context.
    modules = importlib.sys.modules  # type: ignore[attr-defined]
    for name in [name for name in modules if name.startswith("torch.")]:
        monkeypatch.delitem(modules, name)  # a test before this one may have imported torch.nn
    monkeypatch.setitem(modules, "torch", None)
    with pytest.raises(SpecError) as caught:
        load_entry_point("torch.nn:Linear", "spec.policy.entryPoint")
    assert missing_module(caught.value) == "torch"
    assert missing_module(SpecError("spec.env.id: Environment `NoSuchEnv` doesn't exist")) is None


def test_one_line_that_says_which_module_and_which_image_has_it() -> None:
    slim = missing_module_line("torch", "worker-slim", "spec.policy.entryPoint: cannot import module 'mypkg'")
    assert slim.startswith(f"{PREFIX}'torch': the slim worker image")
    assert "spec.image, or policy.inference: torch, selects the full worker image" in slim
    assert slim.endswith("(spec.policy.entryPoint: cannot import module 'mypkg')") and "\n" not in slim
    full = missing_module_line("envpool", "worker-cuda")
    assert full == f"{PREFIX}'envpool': the worker image does not hold it; spec.image can name one that does"


def test_the_operator_tells_it_from_other_exits() -> None:
    line = missing_module_line("torch", "worker-slim")
    assert is_missing_module(3, line)
    assert not is_missing_module(1, line)  # not the worker's own one-line exit
    assert not is_missing_module(3, "spec.env.id: Environment `NoSuchEnv` doesn't exist")


def test_the_local_fleet_line_names_the_python_to_install_into() -> None:
    import sys

    line = missing_module_line("envpool", "local")
    assert line == (
        f"{PREFIX}'envpool': the Python that runs the local fleet ({sys.executable}) does not hold it; install it there"
    )
    assert is_missing_module(3, line)


def test_spaces_the_policy_cannot_take_stay_down_with_the_policys_own_words() -> None:
    """The lines are the policy's own refusals (not copies): an env whose spaces no policy can
    take fails the same way on every start."""
    from gymnasium import spaces

    from rolloutfleet.inference.policy import Policy
    from rolloutfleet.rules.missing_modules import stays_down
    from rolloutfleet.spec.job import PolicySpec

    for observation, action in [(spaces.Text(8), spaces.Discrete(2)), (spaces.Box(-1, 1, (3,)), spaces.Text(8))]:
        with pytest.raises(SpecError) as refused:
            Policy(PolicySpec(), observation, action)
        assert stays_down(3, f"spec.env: {refused.value}") == "UnsupportedSpace", str(refused.value)
        assert stays_down(1, f"spec.env: {refused.value}") is None  # not the worker's one-line exit
    assert stays_down(3, missing_module_line("torch", "worker-slim")) == "MissingModule"
    assert stays_down(3, "spec.env.id: building the environment failed: ConnectionError: license server") is None
