"""A policy acting for every sub-env of a vector env at once: the single-agent runner's act.

One call per vector step. Plain observations reach the model as they are; Dict and Tuple
observations are read as the policy's :class:`~rolloutfleet.inference.obs_spaces.ObsParts`
say (the model's input, a checked ``action_mask``); a stateful model keeps one state per
sub-env, recorded in the grid's ``state_in``/``state_out`` columns and restarted with each
episode (:meth:`VectorPolicy.restart_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rolloutfleet.data import batch as sb
from rolloutfleet.inference.exploration import OrnsteinUhlenbeckNoise
from rolloutfleet.inference.obs_spaces import MASK_KEY, check_masks, leaf_values
from rolloutfleet.inference.policy import ActFn, Policy
from rolloutfleet.spec.job import SpecError

Outputs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(actions, logp, dist_inputs, values) of every sub-env."""

Actors = tuple[
    Callable[[Any], Outputs],
    Callable[[Any, int], Outputs] | None,
    OrnsteinUhlenbeckNoise | None,
    np.ndarray | None,
    np.ndarray | None,
]
""":meth:`VectorPolicy.actors`: (act, act_stateful, noise, ended, mask exempt)."""


class VectorPolicy:
    """``policy`` acting for ``num_envs`` sub-envs. ``mask_exempt`` (NEXT_STEP envs with action
    masks): the sub-envs whose next step is a reset step, whose mask is ignored."""

    def __init__(self, policy: Policy, num_envs: int, mask_exempt: np.ndarray | None = None) -> None:
        self.policy = policy
        self.parts = policy.obs_parts
        self.num_envs = num_envs
        self.mask_exempt = mask_exempt
        self.state_init = policy.initial_state(num_envs) if policy.recurrent else []
        self.state = [part.copy() for part in self.state_init]
        self.state_names = sb.state_column_names(len(self.state), policy.spec.state_out) if self.state else ()

    def actors(
        self, explore: bool, random_actions: bool, columns: Mapping[str, np.ndarray], pending: np.ndarray
    ) -> Actors:
        """What a hot loop acts with: ``act(obs)`` or, for a stateful model, ``act_stateful(obs, row)``;
        the OU noise (None: none, or random actions); the sub-envs whose last step ended an episode,
        from ``pending`` (None: nothing restarts per episode); the mask-exempt sub-envs, set from ``pending``."""
        act = self.act(explore, random_actions)
        act_stateful = self.stateful_act(explore, random_actions, columns) if self.state else None
        noise = None if random_actions else self.policy.noise_state(explore)
        ended = pending.copy() if noise is not None or act_stateful is not None else None
        if self.mask_exempt is not None:
            self.mask_exempt[:] = pending
        return act, act_stateful, noise, ended, self.mask_exempt

    def act(self, explore: bool, random_actions: bool) -> Callable[[Any], Outputs]:
        """``obs -> outputs`` for a stateless model; Dict/Tuple observations are read as the
        policy's parts say (model input, action mask)."""
        policy, n = self.policy, self.num_envs
        if not self.parts.leaves:
            return (lambda _obs: policy.random_actions(n)) if random_actions else policy.act(explore)
        base: ActFn = (
            (lambda _obs, mask=None: policy.random_actions(n, mask)) if random_actions else policy.act(explore)
        )
        read = self._read_parts()

        def act(obs: Any) -> Outputs:
            model_obs, mask = read(obs)
            return base(model_obs) if mask is None else base(model_obs, mask)

        return act

    def stateful_act(
        self, explore: bool, random_actions: bool, columns: Mapping[str, np.ndarray]
    ) -> Callable[[Any, int], Outputs]:
        """``(obs, s) -> outputs`` for a stateful model: records the state it acts with as grid
        row ``s``'s ``state_in`` (and the state after as ``state_out``), and keeps the new state."""
        act = self.policy.act_recurrent(explore, random_actions)
        parts = len(self.state)
        c_in = [columns[name] for name in self.state_names[:parts]]
        c_out = [columns[name] for name in self.state_names[parts:]]
        read = self._read_parts() if self.parts.leaves else None

        def step(obs: Any, s: int) -> Outputs:
            state = self.state
            for column, part in zip(c_in, state, strict=True):
                column[s] = part
            if read is None:
                actions, logp, dist_inputs, values, new_state = act(obs, state)
            else:
                model_obs, mask = read(obs)
                actions, logp, dist_inputs, values, new_state = act(model_obs, state, mask)
            for column, part in zip(c_out, new_state, strict=False):
                column[s] = part
            self.state = new_state
            return actions, logp, dist_inputs, values

        return step

    def restart_state(self, starts: np.ndarray) -> None:
        """Sub-envs (a boolean mask) whose next row starts an episode: back to the initial state."""
        if self.state and starts.any():
            for part, initial in zip(self.state, self.state_init, strict=True):
                part[starts] = initial[starts]

    def _read_parts(self) -> Callable[[Any], tuple[Any, np.ndarray | None]]:
        """Dict/Tuple observations of every sub-env -> (the model's input, the action mask or None)."""
        parts = self.parts
        paths, masked = parts.paths, parts.masked
        names = [f"sub-env {i}" for i in range(self.num_envs)]
        exempt = self.mask_exempt

        def read(obs: Any) -> tuple[Any, np.ndarray | None]:
            leaves = leaf_values(obs, paths)
            if not masked:
                return parts.model_input(leaves), None
            mask = np.asarray(leaves[MASK_KEY]) != 0
            if exempt is not None and exempt.any():
                mask[exempt] = True  # reset steps: any action (ignored by the env)
            try:
                check_masks(mask, names, "")
            except ValueError as exc:
                raise SpecError(f"spec.env: {exc}") from None
            return parts.model_input(leaves), mask

        return read
