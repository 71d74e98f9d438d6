"""RLlib's module names, model config and episode chunks in the fleet's terms, without Ray. The
RLlib names here are those RLlib 2.60's ``DefaultPPOTorchRLModule`` has (tests/rllib builds the
module itself and checks the same mapping against its own forward pass)."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.integrations.rllib_layout import (
    ModuleRefused,
    config_mismatches,
    episode_chunks,
    fleet_name,
    fleet_weights,
    model_config,
)
from rolloutfleet.spec.sections.policy_spec import PolicySpec


def rllib_names(shared: bool, inference_only: bool) -> list[str]:
    trunks = ["encoder.encoder"] if shared else ["encoder.actor_encoder"] + ([] if inference_only else ["encoder.critic_encoder"])  # fmt: skip
    names = [f"{trunk}.net.mlp.{i}.{leaf}" for trunk in trunks for i in (0, 2) for leaf in ("weight", "bias")]
    names += ["pi.log_std_clip_param_const", "pi.net.mlp.0.weight", "pi.net.mlp.0.bias"]
    return names + (
        [] if inference_only else ["vf.log_std_clip_param_const", "vf.net.mlp.0.weight", "vf.net.mlp.0.bias"]
    )


@pytest.fixture(scope="module")
def separate() -> dict[str, np.ndarray]:
    """The workers' CartPole network of examples/cartpole.yaml (vfShareLayers: false)."""
    return {name: t.detach().numpy() for name, t in build_model(RolloutJob.from_file("examples/cartpole.yaml")).state_dict().items()}  # fmt: skip


def signature(state: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {name: (value.shape, value.dtype) for name, value in state.items()}


def as_rllib(state: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    return {name: (np.full(1, 20.0, np.float32) if name.endswith("_const") else state[fleet_name(name) or ""] + 1) for name in names}  # fmt: skip


@pytest.mark.parametrize("inference_only", [True, False])
def test_rllibs_separate_actor_and_critic_map_onto_the_workers_trunks_and_heads(separate: dict[str, np.ndarray], inference_only: bool) -> None:  # fmt: skip
    rllib = as_rllib(separate, rllib_names(shared=False, inference_only=inference_only))
    weights = fleet_weights(rllib, signature(separate), value_side=separate)
    assert list(weights) == list(separate)  # every name, in the workers' order
    assert np.array_equal(weights["actor_trunk.3.weight"], rllib["encoder.actor_encoder.net.mlp.2.weight"])
    assert np.array_equal(weights["pi.bias"], rllib["pi.net.mlp.0.bias"])
    critic = rllib.get("encoder.critic_encoder.net.mlp.0.weight", separate["critic_trunk.1.weight"])
    assert np.array_equal(weights["critic_trunk.1.weight"], critic)  # inference-only: the workers' own


def test_a_shared_trunk_maps_to_the_actor_trunk() -> None:
    shared = {name: t.detach().numpy() for name, t in build_model(RolloutJob.from_dict({"metadata": {"name": "s"}, "spec": {"env": {"id": "CartPole-v1"}}})).state_dict().items()}  # fmt: skip
    assert not any(name.startswith("critic_trunk") for name in shared)
    weights = fleet_weights(as_rllib(shared, rllib_names(shared=True, inference_only=False)), signature(shared))
    assert set(weights) == set(shared)


def test_a_module_of_other_sizes_is_refused_naming_every_mismatch(separate: dict[str, np.ndarray]) -> None:
    rllib = as_rllib(separate, rllib_names(shared=False, inference_only=True))
    rllib["encoder.actor_encoder.net.mlp.2.weight"] = np.zeros((256, 64), np.float32)
    rllib["pi.net.mlp.0.bias"] = rllib["pi.net.mlp.0.bias"].astype(np.float64)
    with pytest.raises(ModuleRefused) as refused:
        fleet_weights(rllib, signature(separate), value_side=separate)
    assert "actor_trunk.3.weight: float32[256, 64], the workers' is float32[64, 64]" in str(refused.value)
    assert "pi.bias: float64[2], the workers' is float32[2]" in str(refused.value)


def test_a_module_with_more_layers_or_without_its_value_side_is_refused(separate: dict[str, np.ndarray]) -> None:
    names = rllib_names(shared=False, inference_only=True)
    with pytest.raises(ModuleRefused, match=r"'pi\.net\.mlp\.2\.weight' has no counterpart"):
        fleet_weights({**as_rllib(separate, names), "pi.net.mlp.2.weight": np.zeros(2)}, signature(separate), separate)
    with pytest.raises(ModuleRefused, match=r"the workers' critic_trunk\.1\.weight is not in RLlib's module"):
        fleet_weights(as_rllib(separate, names), signature(separate), value_side=None)


def test_the_model_config_that_builds_the_workers_network_and_what_differs_from_it() -> None:
    policy = PolicySpec(hidden=[64, 64], vf_share_layers=False, activation="relu")
    assert config_mismatches(policy, model_config(policy)) == []
    found = config_mismatches(policy, {})  # RLlib's defaults: 256x256 tanh, a shared trunk
    assert found == [
        "fcnet_hiddens=[256, 256] (the workers' spec.policy.hidden is [64, 64])",
        "fcnet_activation='tanh' (the workers' spec.policy.activation is 'relu')",
        "vf_share_layers=True (the workers' spec.policy.vfShareLayers is False)",
    ]
    assert config_mismatches(policy, {**model_config(policy), "use_lstm": True}) == ["use_lstm=True (the workers' network has none)"]  # fmt: skip
    recurrent = PolicySpec.model_validate({"recurrent": {"cell": "lstm", "size": 32}})
    assert "recurrent model (spec.policy.recurrent)" in config_mismatches(recurrent, model_config(recurrent))[0]


def test_episode_chunks_of_real_fragments_follow_the_envs_episodes() -> None:
    job = RolloutJob.from_file("examples/cartpole.yaml")
    runner = EnvRunner(job)
    first, second = dict(runner.sample()), dict(runner.sample())
    batch = {name: np.concatenate([first[name], second[name]]) for name in first}
    chunks = episode_chunks(batch, [0, len(first["t"])])
    assert sum(c.stop - c.start for c in chunks) == len(batch["t"])
    for chunk in chunks:
        eps, env, t = batch["eps_id"][chunk], batch["env_id"][chunk], batch["t"][chunk]
        assert len(set(eps)) == 1 and len(set(env)) == 1 and np.array_equal(t, np.arange(t[0], t[0] + len(t)))
        ended = batch["terminateds"][chunk] | batch["truncateds"][chunk]
        assert not ended[:-1].any()  # an episode's end closes its chunk
        # within a chunk, each step's next observation is the next step's observation
        assert np.array_equal(batch["new_obs"][chunk][:-1], batch["obs"][chunk][1:])
    cut_at_fragment = [c for c in chunks if c.stop == len(first["t"]) or c.start == len(first["t"])]
    assert cut_at_fragment  # the message boundary cuts even where the episode goes on


def test_a_box_action_spaces_log_std_is_a_free_parameter_on_both_sides() -> None:
    policy = PolicySpec()
    assert fleet_name("pi.log_std") == "log_std"
    assert config_mismatches(policy, model_config(policy, box_actions=True), box_actions=True) == []
    assert config_mismatches(policy, model_config(policy), box_actions=True) == [
        "free_log_std=False (the workers' Gaussian log standard deviations are parameters of their own: True)"
    ]
