"""Each policy acting for its agents of every sub-env: one batched call per policy and step.

The multi-agent runner's act, as :mod:`rolloutfleet.sampling.vector_policy` is the single-agent
one. :meth:`PolicyActing.begin` settles a ``sample()`` call's acting per policy (explore or
not, random actions, its ε or σ, Ornstein-Uhlenbeck noise, a stateful model's act);
:meth:`PolicyActing.act` writes the acting agents' observations into the policy's rows, acts
for all of them at once (noise and model state kept per (sub-env, agent)) and opens their rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from rolloutfleet.inference.exploration import OrnsteinUhlenbeckNoise
from rolloutfleet.inference.numpy_inference import RowsBank, rows_batchable
from rolloutfleet.inference.policy import ActFn, Policy, RecurrentActFn
from rolloutfleet.sampling.multiagent.rows import Outputs, PolicyRows, SubEnv


class PolicyActing:
    """``policies`` acting into their ``rows``; ``clip_actions``: Box actions clipped for the env
    (the rows keep what the policy chose)."""

    def __init__(self, policies: Mapping[str, Policy], rows: Mapping[str, PolicyRows], clip_actions: bool) -> None:
        self.policies, self.rows = policies, rows
        self.clips: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}
        for policy_id, policy in policies.items():
            space = policy.action_space
            box = isinstance(space, spaces.Box) and clip_actions
            self.clips[policy_id] = (space.low, space.high) if box else None  # type: ignore[attr-defined]
        self.acts: dict[str, ActFn] = {}  # policy id -> its act for this sample() call
        self.scales: dict[str, float] = {}  # policy id -> this call's ε or σ (not stochastic)
        self.noise: dict[str, OrnsteinUhlenbeckNoise] = {}  # policies acting with Ornstein-Uhlenbeck noise
        self.stateful: dict[str, RecurrentActFn] = {}  # stateful policies: their act for this call
        self.exploring: dict[str, bool] = {}  # policy id -> whether it explores in this call
        self.random_actions = False
        self._bank: RowsBank | None = None  # share_forward's policies, stacked
        self._bank_index: dict[str, int] = {}

    def begin(self, explore: bool | None, random_actions: bool) -> None:
        """A ``sample()`` call's acting; ``explore`` (when given) overrides every policy's."""
        self.acts, self.scales, self.noise, self.stateful = {}, {}, {}, {}  # only the policies these apply to
        self.random_actions = random_actions
        for policy_id, policy in self.policies.items():
            exploring = self.exploring[policy_id] = policy.spec.explore if explore is None else explore
            if policy.recurrent:
                self.stateful[policy_id] = policy.act_recurrent(exploring, random_actions)
            if random_actions:
                self.acts[policy_id] = lambda obs, mask=None, p=policy: p.random_actions(len(obs), mask)  # type: ignore[misc]
            else:
                self.acts[policy_id] = policy.act(exploring)
                if (noise := policy.noise_state(exploring)) is not None:
                    self.noise[policy_id] = noise
            if (scale := policy.exploration_scale(exploring)) is not None:
                self.scales[policy_id] = np.nan if random_actions else scale

    def act(
        self, policy_id: str, envs: list[int], agents: list[Any], obs_list: list[Any], subenvs: list[SubEnv]
    ) -> tuple[int, np.ndarray]:
        """``policy_id`` acts for ``agents`` (of sub-envs ``envs``, observing ``obs_list``): their rows
        are opened from the returned row on; also returns the actions for the envs (clipped)."""
        rows = self.rows[policy_id]
        start = rows.reserve(len(envs))
        obs, mask = rows.write_obs(obs_list, start, agents)
        if self.noise and policy_id in self.noise:  # Ornstein-Uhlenbeck: noise per (sub-env, agent)
            pairs = list(zip(envs, agents, strict=True))
            self.noise[policy_id].bind(pairs, [subenvs[j].agent_t.get(agent, 0) == 0 for j, agent in pairs])
        if self.stateful and policy_id in self.stateful:
            outputs = self._act_stateful(policy_id, start, envs, agents, obs, mask, subenvs)
        else:
            act = self.acts[policy_id]
            outputs = act(obs) if mask is None else act(obs, mask)
        rows.open_rows(start, envs, outputs, self.scales.get(policy_id) if self.scales else None)
        clip = self.clips[policy_id]
        return start, outputs[0] if clip is None else np.clip(outputs[0], clip[0], clip[1])

    def share_forward(self, policy_ids: Sequence[str]) -> None:
        """``policy_ids`` (a league's slots: one layout) may act in one forward pass
        (:meth:`act_together`) when they run the default MLP in numpy on a Box observation."""
        models = [getattr(self.policies[p].backend, "mlp", None) for p in policy_ids]
        if len(models) > 1 and all(m is not None and rows_batchable(m) for m in models):
            self._bank = RowsBank(models)  # type: ignore[arg-type]
            self._bank_index = {policy_id: k for k, policy_id in enumerate(policy_ids)}

    def together(self, policy_id: str) -> bool:
        """Whether ``policy_id`` can act in :meth:`act_together`'s shared forward pass: one of
        :meth:`share_forward`'s, stateless, its own actions, no OU noise."""
        return (
            policy_id in self._bank_index
            and not self.random_actions
            and policy_id not in self.stateful
            and policy_id not in self.noise
        )

    def act_together(
        self, policy_ids: list[str], groups: Mapping[str, tuple[list[int], list[Any], list[Any]]]
    ) -> list[tuple[int, np.ndarray]]:
        """:meth:`act` for several of :meth:`share_forward`'s policies (``together`` for each)
        in one forward pass, each row with its own policy's weights: a league's slots, a dozen
        snapshots acting for a row or two each. Returns each policy's ``(start, actions)``."""
        bank = self._bank
        assert bank is not None
        starts, inputs, masks, which = [], [], [], []
        for policy_id in policy_ids:
            envs, agents, obs_list = groups[policy_id]
            start = self.rows[policy_id].reserve(len(envs))
            obs, mask = self.rows[policy_id].write_obs(obs_list, start, agents)
            starts.append(start)
            inputs.append(obs)
            masks.append(mask)
            k = self._bank_index[policy_id]
            bank.keep(k, self.policies[policy_id].backend.mlp)  # type: ignore[attr-defined]
            which += [k] * len(envs)
        rows = np.asarray(which)
        dist_inputs, values = bank.forward(rows, np.concatenate(inputs))
        first = self.policies[policy_ids[0]]
        choose = first.chooser(self.exploring[policy_ids[0]], bool(bank.bounded[rows].all()))
        mask = None if any(m is None for m in masks) else np.concatenate([m for m in masks if m is not None])
        actions, logp = choose(dist_inputs, mask)
        taken, offset = [], 0
        for policy_id, start in zip(policy_ids, starts, strict=True):
            envs = groups[policy_id][0]
            end = offset + len(envs)
            outputs = (actions[offset:end], logp[offset:end], dist_inputs[offset:end], values[offset:end])
            self.rows[policy_id].open_rows(start, envs, outputs, self.scales.get(policy_id) if self.scales else None)
            clip = self.clips[policy_id]
            taken.append((start, outputs[0] if clip is None else np.clip(outputs[0], clip[0], clip[1])))
            offset = end
        return taken

    def _act_stateful(
        self,
        policy_id: str,
        start: int,
        envs: list[int],
        agents: list[Any],
        obs: Any,
        mask: np.ndarray | None,
        subenvs: list[SubEnv],
    ) -> Outputs:
        """A stateful policy acts: each (sub-env, agent)'s kept state in, the new one kept."""
        pairs = list(zip(envs, agents, strict=True))
        kept = [subenvs[j].state.get(agent) for j, agent in pairs]
        outputs, new_state = self.rows[policy_id].act_stateful(self.stateful[policy_id], start, kept, obs, mask)
        for offset, (j, agent) in enumerate(pairs):
            subenvs[j].state[agent] = [part[offset] for part in new_state]
        return outputs
