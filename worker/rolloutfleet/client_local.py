"""``PolicyClient(inference="local")``'s acting: the worker's MLP run in the simulator's process.

The weights come from the worker (``GET /v1/policy``: the default MLP, Box observations,
Discrete actions); the forward pass is the torch module's (Linear, tanh or relu, ..., the
``pi`` head; ``vf`` on the shared trunk or a critic trunk of its own), in numpy. Actions
are sampled from the softmax of the logits (the most likely one without ``explore``); each
step keeps what the worker's rows hold (``logp``, ``dist_inputs``, ``vf``, the version).
numpy is imported here only, so ``import rolloutfleet.client`` stays light.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class LocalPolicy:
    """The worker's policy as it served it (one version)."""

    def __init__(self, payload: dict[str, Any], seed: int | None = None) -> None:
        weights = {
            name: np.asarray(p["data"], np.float32).reshape(p["shape"]) for name, p in payload["weights"].items()
        }
        layers = int(payload["hidden"])
        self.seq_no = int(payload["weights_seq_no"])
        self.explore = bool(payload["explore"])
        self.relu = payload["activation"] == "relu"
        self.actor = [
            (weights[f"actor_trunk.{2 * i + 1}.weight"], weights[f"actor_trunk.{2 * i + 1}.bias"])
            for i in range(layers)
        ]
        self.critic = (
            None
            if payload["shared"]
            else [
                (weights[f"critic_trunk.{2 * i + 1}.weight"], weights[f"critic_trunk.{2 * i + 1}.bias"])
                for i in range(layers)
            ]
        )
        self.pi = (weights["pi.weight"], weights["pi.bias"])
        self.vf = (weights["vf.weight"], weights["vf.bias"])
        self.rng = np.random.default_rng(seed)

    def _trunk(self, layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
        for weight, bias in layers:
            x = weight @ x + bias
            x = np.maximum(x, 0.0) if self.relu else np.tanh(x)
        return x

    def act(self, obs: Any) -> dict[str, Any]:
        """The action for one observation and what its row records."""
        x = np.asarray(obs, np.float32).reshape(-1)
        features = self._trunk(self.actor, x)
        logits = self.pi[0] @ features + self.pi[1]
        value_features = features if self.critic is None else self._trunk(self.critic, x)
        value = float((self.vf[0] @ value_features + self.vf[1])[0])
        shifted = logits - logits.max()
        log_probs = shifted - np.log(np.exp(shifted).sum())
        if self.explore:
            action = int(self.rng.choice(len(logits), p=np.exp(log_probs) / np.exp(log_probs).sum()))
        else:
            action = int(np.argmax(logits))
        return {
            "action": action,
            "logp": float(log_probs[action]),
            "dist_inputs": logits.tolist(),
            "vf": value,
            "weights_seq_no": self.seq_no,
        }
