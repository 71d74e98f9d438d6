"""A RolloutFleet job for TorchRL learners: its batches as the TensorDicts TorchRL's collectors
yield, and its policy network as TorchRL's actor and value modules (the optional extra
``rolloutfleet[torchrl]``; docs/guides/torchrl.md).

    collector = FleetCollector(BatchConsumer(url, job), frames_per_batch=4096)
    policy = fleet_policy(job)                    # the workers' network inside an actor and a critic
    for data in collector:                        # a TensorDict of batch size [>= 4096], flat
        advantage(data)                           # torchrl.objectives.value.GAE(..., value_network=policy.critic)
        buffer.extend(data.reshape(-1))           # torchrl.data.ReplayBuffer
        ...                                       # torchrl.objectives.ClipPPOLoss(policy.actor, policy.critic)
        publisher.publish(policy.network)         # the weights the workers load

Columns map to TorchRL's keys: ``obs`` -> ``observation``, ``new_obs`` -> ``("next",
"observation")`` (``obs/<path>`` leaves nest under them), ``actions`` -> ``action``,
``rewards`` / ``terminateds`` / ``truncateds`` -> ``("next", "reward" | "terminated" |
"truncated")`` with ``("next", "done")`` their or (each ``[..., 1]``), ``action_logp`` ->
``action_log_prob``, ``eps_id`` -> ``("collector", "traj_ids")``, ``t`` -> ``step_count``;
any other column keeps its name (``vf_preds``, the value the workers saw, is not
``state_value``: TorchRL's value estimators compute that with the learner's critic). The root
``done`` / ``terminated`` / ``truncated`` are False, as after a reset. The last step of each
sub-environment's run in a batch is marked truncated (and done) unless it terminated, as
TorchRL's collectors do with ``set_truncated=True``: GAE then bootstraps there from
``("next", "observation")`` and never runs across two runs.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rolloutfleet.data.episode_returns import EpisodeReturns
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message, concat_messages

log = logging.getLogger(__name__)
RENAMED: dict[str, tuple[str, ...]] = {
    "obs": ("observation",),
    "new_obs": ("next", "observation"),
    "actions": ("action",),
    "action_logp": ("action_log_prob",),
    "eps_id": ("collector", "traj_ids"),
}
"""Our columns under TorchRL's keys (the flags, rewards and values are built apart)."""
COLUMN_VECTORS = {"t": ("step_count",)}
"""Columns TorchRL keeps with a trailing dimension of 1."""


def runs(batch: Mapping[str, np.ndarray], starts: Sequence[int] = ()) -> list[slice]:
    """The rows of each sub-environment's run: a new run where ``env_id`` changes (rows without
    one, as a replayed Minari dataset's: by episode alone), where a message begins (``starts``:
    two workers' sub-environments may share an id), and where the step count does not follow
    on within one episode.

    >>> runs({"env_id": np.array([0, 0, 1, 1, 1]), "t": np.array([3, 4, 0, 1, 2]), "eps_id": np.array([5, 5, 6, 6, 6])})
    [slice(0, 2, None), slice(2, 5, None)]
    """
    t, eps = batch["t"], batch["eps_id"]
    env = batch.get("env_id", np.zeros(len(t), np.int64))  # a replayed Minari dataset has none
    cut = np.zeros(len(env), np.bool_)
    cut[0:1] = True
    cut[1:] = (env[1:] != env[:-1]) | (eps[1:] == eps[:-1]) & (t[1:] != t[:-1] + 1)
    cut[list(starts)] = True
    edges = [*np.flatnonzero(cut).tolist(), len(env)]
    return [slice(a, b) for a, b in itertools.pairwise(edges)]


def to_tensordict(batch: Mapping[str, np.ndarray], starts: Sequence[int] = (), device: Any = None) -> TensorDict:
    """``batch`` (one or several messages' rows, ``starts`` the first row of each) as a
    TensorDict of TorchRL's keys, batch size ``[rows]``: flat, as a collector's output after
    ``reshape(-1)``. Not ``[envs, time]``: a fragment's sub-environments hold different numbers
    of rows (a reset takes a step and makes no row), and padding them would need a mask that
    TorchRL's losses do not read. Its value estimators need none: the runs are cut by the done
    flags."""
    pieces = runs(batch, starts)
    rows = len(batch["rewards"])
    terminated, truncated = batch["terminateds"].astype(np.bool_), batch["truncateds"].astype(np.bool_)
    cut = np.zeros(rows, np.bool_)
    cut[[piece.stop - 1 for piece in pieces]] = True
    truncated = truncated | (cut & ~terminated)
    columns: dict[tuple[str, ...], np.ndarray] = {}
    for name, values in batch.items():
        if name in ("rewards", "terminateds", "truncateds") or values.dtype.kind in "UO":
            continue  # built below; text columns (agent ids) have no tensor
        head, _, leaf = name.partition("/")
        if head in ("obs", "new_obs") and leaf:
            columns[(*RENAMED[head], *leaf.split("/"))] = values
        elif name in COLUMN_VECTORS:
            columns[COLUMN_VECTORS[name]] = values[:, None]
        else:
            columns[RENAMED.get(name, (name,))] = values
    flags = {"terminated": terminated, "truncated": truncated, "done": terminated | truncated}
    for flag, values in flags.items():
        columns[("next", flag)] = values[:, None]
        columns[(flag,)] = np.zeros((rows, 1), np.bool_)
    columns[("next", "reward")] = batch["rewards"].astype(np.float32)[:, None]
    data = TensorDict({}, batch_size=[rows], device=device)
    for key, values in columns.items():
        data.set(key, torch.as_tensor(np.ascontiguousarray(values)))
    return data


class FleetCollector:
    """Iterate a job's batches as TorchRL's collectors yield theirs: TensorDicts of at least
    ``frames_per_batch`` rows (whole fragments; :func:`to_tensordict` for the keys), until ``total_frames`` (-1: for ever). A batch's entries are acknowledged when
    the next one is asked for (or on :meth:`commit`): a learner that dies while it trains
    leaves them to another. ``returns`` holds the returns of the episodes that ended in the
    batches so far (``.mean`` of the last 20).
    """

    def __init__(
        self,
        consumer: BatchConsumer,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Any = None,
        timeout_s: float | None = 60.0,
    ) -> None:
        if frames_per_batch < 1:
            raise ValueError(f"frames_per_batch must be a whole number >= 1, got {frames_per_batch!r}")
        self.consumer, self.frames_per_batch, self.total_frames = consumer, frames_per_batch, total_frames
        self.device, self.timeout_s = device, timeout_s
        self.frames = 0
        self.returns = EpisodeReturns()
        self._held: list[Message] = []

    def __iter__(self) -> Iterator[TensorDict]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            self.commit()
            messages = self._gather()
            if not messages:
                continue
            batch = concat_messages(messages)
            starts = np.cumsum([0] + [len(m.batch) for m in messages[:-1]]).tolist()
            self._held = messages
            self.returns.add(batch)
            self.frames += len(batch["rewards"])
            yield to_tensordict(batch, starts, self.device)
        self.commit()  # asked for one more past total_frames: done with the last one

    def _gather(self) -> list[Message]:
        messages: list[Message] = []
        while sum(len(m.batch) for m in messages) < self.frames_per_batch:
            read = self.consumer.read(timeout=self.timeout_s)
            if not read:
                log.warning(
                    "no batch for %g s from %s; are the workers running?", self.timeout_s, self.consumer.keys.batches
                )
            messages += read
        return messages

    def commit(self) -> None:
        """Acknowledge the entries of the last batch yielded."""
        held, self._held = self._held, []
        self.consumer.ack(held)


class _Output(nn.Module):
    """One output of the workers' network: its logits (``index`` 0) or its value (1, as ``[..., 1]``)."""

    def __init__(self, network: nn.Module, index: int) -> None:
        super().__init__()
        self.network, self.index = network, index

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        out = self.network(observation)[self.index]
        return out.unsqueeze(-1) if self.index == 1 else out


@dataclass(frozen=True)
class FleetPolicy:
    """The job's network (what :meth:`WeightPublisher.publish` takes) and TorchRL's actor and
    critic around it, sharing its parameters."""

    network: nn.Module
    actor: Any
    """``ProbabilisticActor``: observation -> action, ``action_log_prob``."""
    critic: Any
    """``ValueOperator``: observation -> ``state_value``."""


def fleet_policy(job: RolloutJob, network: nn.Module | None = None) -> FleetPolicy:
    """TorchRL modules around the workers' network for ``job`` (``build_model(job)`` unless given):
    a categorical actor for a discrete action space, an independent normal one (the network's
    mean and log standard deviation) for a box, as the workers sample."""
    from gymnasium import spaces
    from torchrl.modules import IndependentNormal, ProbabilisticActor, ValueOperator

    from rolloutfleet.fleet.runner_factory import build_model
    from rolloutfleet.sampling.env.external_spaces import external_spaces
    from rolloutfleet.sampling.vector.make import env_spaces

    network = network if network is not None else build_model(job)
    action_space = (external_spaces(job.spec.env) or env_spaces(job.spec.env, 0, job.spec.replicas))[1]
    if isinstance(action_space, spaces.Discrete):
        head = TensorDictModule(_Output(network, 0), in_keys=["observation"], out_keys=["logits"])
        actor = ProbabilisticActor(head, in_keys=["logits"], distribution_class=torch.distributions.Categorical,
                                   return_log_prob=True, log_prob_key="action_log_prob")  # fmt: skip
    elif isinstance(action_space, spaces.Box):
        head = TensorDictModule(_NormalParams(network), in_keys=["observation"], out_keys=["loc", "scale"])
        actor = ProbabilisticActor(head, in_keys=["loc", "scale"], distribution_class=IndependentNormal,
                                   return_log_prob=True, log_prob_key="action_log_prob")  # fmt: skip
    else:
        raise ValueError(f"fleet_policy: action space {action_space} is neither Discrete nor Box")
    critic = ValueOperator(_Output(network, 1), in_keys=["observation"])
    return FleetPolicy(network, actor, critic)


class _NormalParams(nn.Module):
    def __init__(self, network: nn.Module) -> None:
        super().__init__()
        self.network = network

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.network(observation)[0].chunk(2, dim=-1)
        return mean, log_std.exp()


def network_of(module: nn.Module, job: RolloutJob) -> nn.Module:
    """The sub-module of a TorchRL ``module`` that is the workers' network for ``job``: the same
    parameter names, shapes and dtypes as ``build_model(job)``. ``ValueError`` when none is."""
    from rolloutfleet.fleet.runner_factory import build_model

    want = _signature(build_model(job))
    for candidate in module.modules():
        if _signature(candidate) == want:
            return candidate
    held = _signature(module)
    raise ValueError(
        f"no part of {type(module).__name__} is the workers' network for {job.name}: it needs "
        f"{_describe(want)}; the module holds {_describe(held)}"
    )


def _signature(module: nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {name: (tuple(value.shape), value.dtype) for name, value in module.state_dict().items()}


def _describe(signature: Mapping[str, tuple[tuple[int, ...], torch.dtype]], most: int = 6) -> str:
    shown = [f"{name} {list(shape)} {str(dtype).removeprefix('torch.')}" for name, (shape, dtype) in signature.items()]
    return ", ".join(shown[:most]) + (f" and {len(shown) - most} more" if len(shown) > most else "")


__all__ = ["FleetCollector", "FleetPolicy", "fleet_policy", "network_of", "runs", "to_tensordict"]
