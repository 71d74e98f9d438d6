"""``inference="local"``: the weights a client acts with itself, and the rows it ships back.

Served for the default MLP (acting in numpy on the worker) with Box observations and
Discrete actions, without an observation filter (the client could not apply the fleet's);
anything else is refused with the reason. Shipped rows are checked like the remote path's
calls (the observation against the space, the action in range, finite numbers, the weights
version one the worker published) and become rows exactly as the server's own would.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import numpy as np
from gymnasium import spaces

from rolloutfleet.external.book import Step
from rolloutfleet.inference.policy import Policy
from rolloutfleet.sampling.env.external_spaces import BadInput, ExternalError, parse_obs, parse_reward

MAX_SHIPPED_ROWS = 10_000
ENDS = (None, "terminated", "truncated")


class NotLocal(ExternalError):
    """This job's policy cannot act in a client."""

    status = 409


Shipped = tuple[Step, float, np.ndarray]
"""(the step the client took, the reward logged for it, the observation that followed)."""


def local_policy(policy: Policy, filtered: bool) -> dict[str, Any]:
    """What a local client acts with: the MLP's weights by name, its activation and shape."""
    why = None
    if policy.inference != "numpy":
        why = "acts in torch (a custom model, a GPU, a recurrent model or inference: torch)"
    elif not isinstance(policy.observation_space, spaces.Box) or not isinstance(policy.action_space, spaces.Discrete):
        why = "acts on other than Box observations and Discrete actions"
    elif policy.exploration is not None:
        why = f"explores with {policy.spec.exploration.type} (its schedule lives in the worker)"
    elif filtered:
        why = "normalizes observations (observationFilter: meanStd), which a client cannot do as the fleet does"
    if why is not None:
        raise NotLocal(f"inference='local' is not available: this job's policy {why}; use inference='remote'")
    weights = policy.get_weights()
    return {
        "weights_seq_no": policy.weights_seq_no,
        "activation": policy.spec.activation,
        "hidden": len(policy.spec.hidden),
        "shared": policy.spec.vf_share_layers,
        "explore": policy.spec.explore,
        "weights": {
            name: {"shape": list(value.shape), "data": value.reshape(-1).tolist()} for name, value in weights.items()
        },
    }


def parse_shipped(body: dict[str, Any], policy: Policy, newest: int) -> tuple[list[Shipped], str | None]:
    """The rows a local client shipped and how its episode ended (None: it goes on)."""
    rows, end = body.get("rows"), body.get("end")
    if end not in ENDS:
        raise BadInput(f"end: expected null, 'terminated' or 'truncated', got {end!r:.40}")
    if not isinstance(rows, list) or not rows or len(rows) > MAX_SHIPPED_ROWS:
        raise BadInput(f"rows: expected a list of 1 to {MAX_SHIPPED_ROWS} rows")
    return [_row(row, k, policy, newest) for k, row in enumerate(rows)], end


def _row(row: Any, k: int, policy: Policy, newest: int) -> Shipped:
    if not isinstance(row, dict):
        raise BadInput(f"rows[{k}]: expected an object")
    space, actions = policy.observation_space, policy.action_space
    assert isinstance(actions, spaces.Discrete)
    obs, new_obs = parse_obs(space, row.get("obs")), parse_obs(space, row.get("new_obs"))
    action = row.get("action")
    if isinstance(action, bool) or not isinstance(action, int) or not actions.contains(np.int64(action)):
        raise BadInput(f"rows[{k}].action: expected an integer in [{actions.start}, {actions.start + actions.n})")
    dist = row.get("dist_inputs")
    if not isinstance(dist, list) or len(dist) != actions.n or not all(_finite(x) for x in dist):
        raise BadInput(f"rows[{k}].dist_inputs: expected {actions.n} finite numbers")
    logp, vf, seq_no = row.get("logp"), row.get("vf"), row.get("weights_seq_no")
    if not _finite(logp) or logp > 0 or not _finite(vf):
        raise BadInput(f"rows[{k}]: logp (<= 0) and vf must be finite numbers")
    if isinstance(seq_no, bool) or not isinstance(seq_no, int) or not 0 <= seq_no <= newest:
        raise BadInput(f"rows[{k}].weights_seq_no: expected a version this worker served (0..{newest})")
    step = Step(obs, np.asarray(action, np.int64), float(logp), np.asarray(dist, np.float32), float(vf), seq_no, None)
    return step, parse_reward(row.get("reward", 0.0)), new_obs


def _finite(value: Any) -> TypeGuard[float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
