"""What a weights version must be to be used: names, shapes, dtypes, finite values."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.data.weights_check import WeightsRefused, check_weights, parse_signature, signature_json

SIG = {"w": ((2, 3), np.dtype("float32")), "steps": ((), np.dtype("int64"))}


def test_a_fitting_version_is_cast_to_the_model_dtypes() -> None:
    got = check_weights({"w": np.ones((2, 3), np.float64), "steps": np.int32(7)}, SIG)
    assert got["w"].dtype == np.float32 and got["steps"].dtype == np.int64 and int(got["steps"]) == 7


@pytest.mark.parametrize(
    ("weights", "reason"),
    [
        ({"w": np.ones((2, 3))}, r"missing \['steps'\], unexpected \[\]"),
        ({"w": np.ones((2, 3)), "steps": 1, "x": 0}, r"missing \[\], unexpected \['x'\]"),
        ({"w": np.ones((3, 2)), "steps": 1}, r"'w' has shape \(3, 2\), expected \(2, 3\)"),
        ({"w": np.ones((2, 3), np.int64), "steps": 1}, r"'w' has dtype int64, expected float32"),
        ({"w": np.ones((2, 3)), "steps": 1.5}, r"'steps' has dtype float64, expected int64"),
        ({"w": np.full((2, 3), np.nan), "steps": 1}, r"'w' holds 6 NaN/inf values"),
        ({"w": np.full((2, 3), 1e300), "steps": 1}, r"'w' holds 6 NaN/inf values"),  # beyond float32: inf
    ],
)
def test_a_version_that_does_not_fit_is_refused_with_one_line(weights: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(WeightsRefused, match=reason) as caught:
        check_weights(weights, SIG)
    assert "\n" not in str(caught.value)


def test_without_a_signature_only_values_are_checked() -> None:
    assert set(check_weights({"anything": np.zeros(4)})) == {"anything"}
    with pytest.raises(WeightsRefused, match="'a' holds 1 NaN/inf values"):
        check_weights({"a": np.array([0.0, np.inf])})
    with pytest.raises(WeightsRefused, match="'s' has dtype <U1, not a number"):
        check_weights({"s": np.array(["x"])})


def test_a_signature_survives_json_and_garbage_is_not_one() -> None:
    assert parse_signature(signature_json(SIG)) == SIG
    for raw in ("[]", "{", '{"w": [[2], "no-such-dtype"]}'):
        with pytest.raises(ValueError, match=r"signature|Expecting"):
            parse_signature(raw)
