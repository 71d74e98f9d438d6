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

from rolloutfleet.data import batch as sb
from rolloutfleet.data.weights_check import CheckedWeights
from rolloutfleet.inference.default_mlp import acting_part
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
        self._bank: RowsBank | None = None  # share_forward's slots and their opponent, stacked
        self._banked: list[str] = []  # the bank's policies: slot k is row k, the opponent the last
        self._slot_rows: dict[str, int] = {}  # slot id -> its row of the bank
        self._signature: Any = None  # the slots' model (weights_signature), for load_slot
        self._acting_signature: Any = None  # its names that acting needs (without the value function)
        self._fitting: list[Any] = []  # the last two signature objects found equal to one of those
        self._stale: dict[str, CheckedWeights] = {}  # slots loaded into the bank only: their weights
        self._valueless: set[str] = set()  # slots holding a snapshot's acting part only
        self._together = False  # this call: the bank acts (no random actions, none stateful or with OU noise)

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
        self._together = (
            self._bank is not None
            and not random_actions
            and not any(p in self.stateful or p in self.noise for p in self._banked)
        )  # fmt: skip

    def act(
        self,
        policy_id: str,
        envs: list[int],
        agents: list[Any],
        obs_list: list[Any],
        subenvs: list[SubEnv],
        rows_of: str | None = None,
    ) -> tuple[int, np.ndarray]:
        """``policy_id`` acts for ``agents`` (of sub-envs ``envs``, observing ``obs_list``): their rows
        (``rows_of``'s, by default its own) are opened from the returned row on; also returns the
        actions for the envs (clipped)."""
        rows = self.rows[rows_of or policy_id]
        start = rows.reserve(len(envs))
        obs, mask = rows.write_obs(obs_list, start, agents)
        if self.noise and policy_id in self.noise:  # Ornstein-Uhlenbeck: noise per (sub-env, agent)
            pairs = list(zip(envs, agents, strict=True))
            self.noise[policy_id].bind(pairs, [subenvs[j].agent_t.get(agent, 0) == 0 for j, agent in pairs])
        if self.stateful and policy_id in self.stateful:
            outputs = self._act_stateful(policy_id, rows, start, envs, agents, obs, mask, subenvs)
        else:
            act = self.acts[policy_id]
            outputs = act(obs) if mask is None else act(obs, mask)
        return start, self._open(policy_id, rows, start, envs, outputs)

    def _open(self, policy_id: str, rows: PolicyRows, start: int, envs: list[int], outputs: Outputs) -> np.ndarray:
        """Rows ``start:`` of ``rows`` opened with what ``policy_id`` gave; its actions for the
        envs (clipped)."""
        rows.open_rows(start, envs, outputs, self.scales.get(policy_id) if self.scales else None)
        clip = self.clips[policy_id]
        return outputs[0] if clip is None else np.clip(outputs[0], clip[0], clip[1])

    def share_forward(self, opponent: str, slot_ids: Sequence[str]) -> None:
        """A league's ``slot_ids`` (one layout) and their ``opponent`` may act in one forward
        pass (:meth:`act_league`) when they run the default MLP in numpy on a Box observation."""
        banked = [*slot_ids, opponent]
        models = [getattr(self.policies[p].backend, "mlp", None) for p in banked]
        if all(m is not None and rows_batchable(m) for m in models):
            self._bank = RowsBank(models)  # type: ignore[arg-type]
            self._banked = banked
            self._slot_rows = {slot_id: k for k, slot_id in enumerate(slot_ids)}
            self._signature = self.policies[slot_ids[0]].weights_signature()
            self._acting_signature = acting_part(self._signature)

    @property
    def slots_banked(self) -> bool:
        """Whether the league's slots act in the shared pass (:meth:`share_forward`): they
        then take a snapshot's acting part alone (:meth:`load_slot`)."""
        return self._bank is not None

    def load_slot(self, slot_id: str, weights: Mapping[str, Any]) -> None:
        """A league slot's next snapshot. Weights checked against the slots' model, or its
        acting part (:class:`~rolloutfleet.data.weights_check.CheckedWeights`, as a worker's
        league reads them), go straight into the bank, one copy; the slot's own model takes
        them only when it acts by itself or is read (:meth:`sync_slots`). Others load
        through the slot's policy (checked there)."""
        k = self._slot_rows.get(slot_id)
        if k is None or not isinstance(weights, CheckedWeights) or not self._fits(weights):
            self.policies[slot_id].set_weights(weights)
            self._stale.pop(slot_id, None)
            self._valueless.discard(slot_id)
            return
        assert self._bank is not None
        self._bank.load(k, weights)
        self._stale[slot_id] = weights
        if self._bank.valued[k]:
            self._valueless.discard(slot_id)
        else:
            self._valueless.add(slot_id)

    def _fits(self, weights: CheckedWeights) -> bool:
        """Whether ``weights`` were checked against the slots' model or its acting part (a
        signature object found equal once is not compared again)."""
        if not any(weights.signature is fitting for fitting in self._fitting):
            if not (weights.fits(self._signature) or weights.fits(self._acting_signature)):
                return False
            self._fitting = [weights.signature, *self._fitting[:1]]  # a league's two: whole, acting part
        return True

    def sync_slots(self, policy_ids: Sequence[str] | None = None) -> None:
        """The slots' own models (of ``policy_ids``, by default all) take the snapshots loaded
        into the bank only. A snapshot's acting part comes with a value function of zeros (the
        rows it acts for get NaN ``vf_preds``, as in the bank)."""
        for slot_id in list(self._stale) if policy_ids is None else [p for p in policy_ids if p in self._stale]:
            weights: Mapping[str, Any] = self._stale.pop(slot_id)
            if slot_id in self._valueless:
                weights = {name: weights[name] if name in weights else np.zeros(shape, dtype)
                           for name, (shape, dtype) in self._signature.items()}  # fmt: skip
            self.policies[slot_id].set_weights(weights)

    def act_league(
        self,
        opponent: str,
        slot_ids: Sequence[str],
        envs: list[int],
        agents: list[Any],
        obs_list: list[Any],
        subenvs: list[SubEnv],
    ) -> list[tuple[list[int], list[Any], tuple[int, np.ndarray]]]:
        """A league's opponent seats act, each game's with its slot's weights (``slot_ids[k]``
        for sub-env ``j``'s ``league_slot`` k; None: the opponent as it is), into the opponent's
        rows: in one forward pass when the bank can act this call, else a pass per slot acting.
        Returns each pass's ``(envs, agents, (start, actions))``."""
        slots = [subenvs[j].league_slot for j in envs]
        if self._together:
            return [(envs, agents, self._act_slots(opponent, envs, agents, obs_list, slots))]
        if self._stale:
            self.sync_slots()
        by_slot: dict[int | None, tuple[list[int], list[Any], list[Any]]] = {}
        for j, agent, obs, slot in zip(envs, agents, obs_list, slots, strict=True):
            group = by_slot.setdefault(slot, ([], [], []))
            group[0].append(j)
            group[1].append(agent)
            group[2].append(obs)
        passes = []
        for slot, (slot_envs, slot_agents, slot_obs) in by_slot.items():
            policy_id = opponent if slot is None else slot_ids[slot]
            start, actions = self.act(policy_id, slot_envs, slot_agents, slot_obs, subenvs, rows_of=opponent)
            if policy_id in self._valueless:  # its value function is zeros, not a prediction
                self.rows[opponent].columns[sb.VF_PREDS][start : start + len(slot_envs)] = np.nan
            passes.append((slot_envs, slot_agents, (start, actions)))
        return passes

    def _act_slots(
        self, opponent: str, envs: list[int], agents: list[Any], obs_list: list[Any], slots: Sequence[int | None]
    ) -> tuple[int, np.ndarray]:
        """The opponent seats in one forward pass, each row with its game's slot's weights
        (``slots[i]``; None: the opponent as it is): a dozen snapshots acting for a row or two each."""
        bank = self._bank
        assert bank is not None
        last = len(self._banked) - 1
        which = np.fromiter((last if k is None else k for k in slots), np.intp, len(slots))
        for k in set(which.tolist()):
            policy_id = self._banked[k]
            bank.keep(k, self.policies[policy_id].backend.mlp, policy_id not in self._valueless)  # type: ignore[attr-defined]
        rows = self.rows[opponent]
        start = rows.reserve(len(envs))
        obs, mask = rows.write_obs(obs_list, start, agents)
        dist_inputs, values = bank.forward(which, obs)
        choose = self.policies[opponent].chooser(self.exploring[opponent], bool(bank.bounded[which].all()))
        actions, logp = choose(dist_inputs, mask)
        return start, self._open(opponent, rows, start, envs, (actions, logp, dist_inputs, values))

    def _act_stateful(
        self,
        policy_id: str,
        rows: PolicyRows,
        start: int,
        envs: list[int],
        agents: list[Any],
        obs: Any,
        mask: np.ndarray | None,
        subenvs: list[SubEnv],
    ) -> Outputs:
        """A stateful policy acts into ``rows``: each (sub-env, agent)'s kept state in, the new one kept."""
        pairs = list(zip(envs, agents, strict=True))
        kept = [subenvs[j].state.get(agent) for j, agent in pairs]
        outputs, new_state = rows.act_stateful(self.stateful[policy_id], start, kept, obs, mask)
        for offset, (j, agent) in enumerate(pairs):
            subenvs[j].state[agent] = [part[offset] for part in new_state]
        return outputs
