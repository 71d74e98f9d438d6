"""``spec.policy``: which model acts and where (and a multi-agent policy's overrides of it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rolloutfleet.spec.fields import check_device, check_entry_point, check_layers
from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError
from rolloutfleet.spec.sections.exploration_spec import ExplorationSpec

MAX_STATE_SIZE = 16384
"""The largest ``policy.recurrent.size`` (the CRD has the same)."""


class RecurrentSpec(_Model):
    """Wrap the default model in a recurrent cell (RLlib's ``use_lstm``): observations go
    through the default MLP (CNN for images), then an LSTM or GRU of ``size`` units, then the
    policy and value heads. Acts in torch; each sub-env (each agent) carries its own state."""

    cell: Literal["lstm", "gru"] = "lstm"
    size: int = Field(default=256, ge=1, le=MAX_STATE_SIZE)
    """Units of the cell (its state: ``h`` and, for an LSTM, ``c``, each of this size)."""


class _PolicyFields(_Model):
    """The checks of the fields a policy and a multi-agent policy's overrides share (an
    override's null, a field left out, passes)."""

    @field_validator("entry_point", check_fields=False)
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return check_entry_point(value)

    @field_validator("hidden", check_fields=False)
    @classmethod
    def _positive_layers(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else check_layers(value)

    @field_validator("device", check_fields=False)
    @classmethod
    def _device_syntax(cls, value: str | None) -> str | None:
        return None if value is None else check_device(value)


class PolicySpec(_PolicyFields):
    """Which torch model acts, and where it runs."""

    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the default MLP (used for flat observations)."""
    activation: Literal["tanh", "relu"] = "tanh"
    vf_share_layers: bool = True
    """The value head reads the policy's hidden layers (RLlib's DefaultModelConfig default), or
    has an MLP of its own (False): twice the inference cost per step."""
    entry_point: str | None = None
    """``pkg.module:MyPolicy``: an ``nn.Module`` class built as ``MyPolicy(obs_space, act_space, **config)``."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for a custom policy class."""
    device: str = "auto"
    """``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``."""
    explore: bool = True
    """Explore as ``exploration`` says (True) or take the most likely action (False)."""
    exploration: ExplorationSpec = Field(default_factory=ExplorationSpec)
    """``stochastic`` (sample the distribution), ``epsilonGreedy``, ``gaussian`` or ``ornsteinUhlenbeck``
    (:mod:`rolloutfleet.spec.sections.exploration_spec`)."""
    inference: Literal["auto", "torch"] = "auto"
    """``auto`` runs the default MLP's forward pass through a numpy mirror of its weights on the
    CPU (several times faster for per-step batches); ``torch`` always calls the module."""
    num_threads: int | None = Field(default=1, ge=1)
    """CPU inference threads: torch's intra-op pool and numpy's BLAS pool in a worker process; 1 is
    fastest for per-step batches (null: the libraries' defaults, one thread per CPU)."""
    recurrent: RecurrentSpec | None = None
    """``{cell: lstm|gru, size: N}``: the default model with a recurrent cell (needs torch);
    rows then carry ``state_in_<k>`` columns. A custom model declares its own state instead."""
    state_out: bool = False
    """Stateful models: also record each row's ``state_out_<k>`` (the state after the step)."""

    @model_validator(mode="after")
    def _recurrent_wraps_the_default_model(self) -> PolicySpec:
        check_recurrent(self.recurrent, self.entry_point)
        return self


def check_recurrent(recurrent: RecurrentSpec | None, entry_point: str | None) -> None:
    """``recurrent`` wraps the default model only: a custom model declares its own state."""
    if recurrent is not None and entry_point is not None:
        raise _SubfieldError(
            "recurrent",
            "wraps the default model; a custom entryPoint model is stateful by declaring initial_state() "
            "and forward(obs, state) itself",
        )


class PolicyOverrides(_PolicyFields):
    """One policy of a multi-agent job: any field of ``spec.policy``, overriding it for this policy."""

    hidden: list[int] | None = None
    activation: Literal["tanh", "relu"] | None = None
    vf_share_layers: bool | None = None
    entry_point: str | None = None
    config: dict[str, Any] | None = None
    device: str | None = None
    explore: bool | None = None
    exploration: ExplorationSpec | None = None
    inference: Literal["auto", "torch"] | None = None
    num_threads: int | None = Field(default=None, ge=1)
    recurrent: RecurrentSpec | None = None
    state_out: bool | None = None

    def apply(self, base: PolicySpec) -> PolicySpec:
        """``base`` with the fields given here replaced; a field left out (or null) keeps ``base``'s value."""
        update = {name: value for name in type(self).model_fields if (value := getattr(self, name)) is not None}
        return base.model_copy(update=update)
