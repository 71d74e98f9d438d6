"""Is a weights version fit to act with? Names, shapes, dtypes and finite values, checked
before anything is loaded, on both sides of Redis:

* a worker checks every version it downloads against its own model and refuses one that
  does not fit (it keeps the weights it holds; :mod:`rolloutfleet.fleet.worker_transport`);
* a learner's :class:`~rolloutfleet.transport.weights.WeightPublisher` checks before
  publishing, against the model the workers recorded (:func:`signature_json`), so that
  the mistake is caught where it is made.

    >>> sig = {"pi.weight": ((2, 4), np.dtype("float32"))}
    >>> check_weights({"pi.weight": np.zeros((2, 4))}, sig)["pi.weight"].dtype
    dtype('float32')
    >>> check_weights({"pi.weight": np.full((2, 4), np.nan)}, sig)
    Traceback (most recent call last):
    ...
    rolloutfleet.data.weights_check.WeightsRefused: 'pi.weight' holds 8 NaN/inf values
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

Signature = Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]]
"""Weight name -> (shape, dtype) of a model's state dict."""

# dtype kind of the model's tensor -> kinds a version may bring (cast on load).
_KINDS = {"f": "f", "c": "c", "i": "iu", "u": "iu", "b": "b"}


class WeightsRefused(ValueError):
    """A weights version that does not fit the model or holds NaN/inf; the message is one line."""


class CheckedWeights(dict[str, np.ndarray]):
    """Arrays that passed :func:`check_weights` against ``signature`` (a league's snapshots,
    checked once per digest as they are read). A model of that signature loads them without
    checking them again; any other model checks them as usual.

    >>> sig = {"pi.weight": ((2, 4), np.dtype("float32"))}
    >>> CheckedWeights(check_weights({"pi.weight": np.zeros((2, 4))}, sig), sig).fits(dict(sig))
    True
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], signature: Signature) -> None:
        super().__init__(arrays)
        self.signature = signature

    def fits(self, signature: Signature) -> bool:
        """Whether these were checked against ``signature`` (the same names, shapes and dtypes)."""
        return self.signature is signature or dict(self.signature) == dict(signature)


def check_weights(weights: Mapping[str, Any], signature: Signature | None = None) -> dict[str, np.ndarray]:
    """``weights`` as numpy arrays of the signature's dtypes, or :class:`WeightsRefused`.

    Without a signature only the values are checked (finite)."""
    arrays = {name: np.asarray(value) for name, value in weights.items()}
    if signature is not None:
        missing = sorted(set(signature) - set(arrays))
        unexpected = sorted(set(arrays) - set(signature))
        if missing or unexpected:
            raise WeightsRefused(f"weights do not fit the model: missing {missing[:8]}, unexpected {unexpected[:8]}")
        for name, (shape, dtype) in signature.items():
            arrays[name] = _fit(name, arrays[name], tuple(shape), np.dtype(dtype))
    for name, array in arrays.items():
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            raise WeightsRefused(f"{name!r} holds {int(np.size(array) - np.isfinite(array).sum())} NaN/inf values")
        if array.dtype.kind not in "fciub":
            raise WeightsRefused(f"{name!r} has dtype {array.dtype}, not a number")
    return arrays


def _fit(name: str, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    if array.shape != shape:
        raise WeightsRefused(f"weights do not fit the model: {name!r} has shape {array.shape}, expected {shape}")
    if array.dtype.kind not in _KINDS.get(dtype.kind, dtype.kind):
        raise WeightsRefused(f"weights do not fit the model: {name!r} has dtype {array.dtype}, expected {dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # a float64 beyond float32's range: inf, refused below
        return array.astype(dtype, copy=False)


def signature_json(signature: Signature) -> str:
    """The signature as workers record it in Redis (names, shapes, dtype names).

    >>> signature_json({"vf.bias": ((1,), np.dtype("float32"))})
    '{"vf.bias": [[1], "float32"]}'
    """
    return json.dumps({name: [list(shape), np.dtype(dtype).name] for name, (shape, dtype) in signature.items()})


def parse_signature(raw: str | bytes) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    """:func:`signature_json`'s inverse; ``ValueError`` when ``raw`` is not one."""
    try:
        return {
            str(n): (tuple(int(d) for d in shape), np.dtype(dtype)) for n, (shape, dtype) in json.loads(raw).items()
        }
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"not a model signature: {exc}") from None
