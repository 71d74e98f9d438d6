"""Single-agent Dict and Tuple observations: one typed column per leaf, the model's encoding,
action masks, and the bad input around them; checked against the envs' own rules
(gymnasium's Blackjack, a masked counter that records what it saw)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob, SpecError
from rolloutfleet.cli.main import main
from rolloutfleet.data.codec import decode, encode
from rolloutfleet.inference.obs_spaces import obs_parts
from tests.unit.sampling.sampler_test_envs import MaskedCounterEnv

MASKED = "tests.unit.sampling.sampler_test_envs:make_masked_counter"


def job(
    env: dict[str, Any], sampling: dict[str, Any] | None = None, policy: dict[str, Any] | None = None
) -> RolloutJob:
    spec: dict[str, Any] = {"env": env, "sampling": {"seed": 0, **(sampling or {})}, "policy": policy or {}}
    return RolloutJob.from_dict({"metadata": {"name": "structured"}, "spec": spec})


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_dict_observations_are_one_column_per_leaf_and_every_move_is_legal(vectorization: str) -> None:
    MaskedCounterEnv.instances.clear()
    MaskedCounterEnv.illegal = 0
    length = 6
    env = {"entryPoint": MASKED, "numEnvs": 3, "vectorization": vectorization, "config": {"length": length}}
    runner = EnvRunner(job(env, {"rolloutFragmentLength": 20}))
    try:
        batch = runner.sample()
    finally:
        runner.close()
    assert {"obs", "new_obs"}.isdisjoint(batch)
    assert batch["obs/observation"].dtype == np.float32 and batch["obs/action_mask"].dtype == np.int8
    assert batch["action_mask"].dtype == np.bool_
    obs, new_obs = batch["obs/observation"], batch["new_obs/observation"]
    step = obs[:, 1].astype(int)
    # The env's own rule for its mask, at this row's step and the next.
    for rows, at in ((batch["obs/action_mask"], step), (batch["new_obs/action_mask"], step + 1)):
        expected = np.zeros((len(batch), 4), np.int8)
        expected[np.arange(len(batch)), at % 4] = 1
        expected[np.arange(len(batch)), (at + 1) % 4] = 1
        np.testing.assert_array_equal(rows, expected)
    np.testing.assert_array_equal(batch["action_mask"], batch["obs/action_mask"] != 0)
    # Every action legal under the recorded mask, and the env never saw an illegal one.
    assert batch["action_mask"][np.arange(len(batch)), batch["actions"]].all()
    assert MaskedCounterEnv.illegal == 0
    np.testing.assert_array_equal(batch["rewards"], 1.0)
    # new_obs is the same episode's next step, also at episode ends (SAME_STEP final observations).
    np.testing.assert_array_equal(new_obs[:, 0], obs[:, 0])
    np.testing.assert_array_equal(new_obs[:, 1], obs[:, 1] + 1)
    np.testing.assert_array_equal(batch["terminateds"], new_obs[:, 1] == length)
    assert batch["terminateds"].sum() >= 3
    by_env = {i: batch["actions"][batch["env_id"] == i].tolist() for i in range(3)}
    seen = {env.vector_index: env.seen_actions[: len(by_env[env.vector_index])] for env in MaskedCounterEnv.instances}
    if vectorization == "sync":  # async sub-envs live in other processes
        assert seen == by_env


def test_greedy_actions_are_the_best_legal_ones() -> None:
    runner = EnvRunner(job({"entryPoint": MASKED, "numEnvs": 2}, {"rolloutFragmentLength": 10}))
    batch = runner.sample(explore=False)
    logits = np.where(batch["action_mask"], batch["action_dist_inputs"], -np.inf)
    np.testing.assert_array_equal(batch["actions"], logits.argmax(axis=1))
    random = runner.sample(random_actions=True)
    assert random["action_mask"][np.arange(len(random)), random["actions"]].all()


def test_leaf_columns_stay_typed_and_zero_copy_through_the_codec() -> None:
    batch = EnvRunner(job({"entryPoint": MASKED, "numEnvs": 2}, {"rolloutFragmentLength": 5})).sample()
    decoded = decode(encode(batch))
    for name in ("obs/observation", "obs/action_mask", "new_obs/action_mask", "action_mask"):
        np.testing.assert_array_equal(decoded[name], batch[name])
        assert decoded[name].dtype == batch[name].dtype
        assert not decoded[name].flags.owndata and not decoded[name].flags.writeable  # views into the payload


def test_blackjack_tuple_observations_follow_the_games_rules() -> None:
    """gymnasium's Blackjack observes Tuple(player sum, dealer's card, usable ace)."""
    runner = EnvRunner(job({"id": "Blackjack-v1", "numEnvs": 4}, {"rolloutFragmentLength": 50}))
    parts = obs_parts(runner.observation_space, runner.action_space)
    assert parts.paths == ("0", "1", "2") and parts.model_space.shape == (32 + 11 + 2,)
    batch = runner.sample()
    player, dealer = batch["obs/0"], batch["obs/1"]
    new_player, new_dealer = batch["new_obs/0"], batch["new_obs/1"]
    assert player.dtype == np.int64 and batch["obs/2"].dtype == np.int64
    np.testing.assert_array_equal(new_dealer, dealer)  # the dealer's showing card never changes in a game
    assert ((dealer >= 1) & (dealer <= 10)).all() and (player <= 21).all()
    stick, hit, end = batch["actions"] == 0, batch["actions"] == 1, batch["terminateds"]
    assert end[stick].all()  # sticking ends the game
    assert (batch["rewards"][hit & ~end] == 0).all() and (new_player[hit & ~end] <= 21).all()
    busted = hit & end
    np.testing.assert_array_equal(batch["rewards"][busted], -1.0)
    assert (new_player[busted] > 21).all()
    assert set(np.unique(batch["rewards"][stick]).tolist()) <= {-1.0, 0.0, 1.0}
    assert busted.any() and stick.any() and (hit & ~end).any()
    # What the model read: the one-hot encoding of each leaf.
    encoded = parts.batch_input(batch)
    np.testing.assert_array_equal(encoded[:, :32].argmax(1), player)
    np.testing.assert_array_equal(encoded[:, 32:43].argmax(1), dealer)
    np.testing.assert_array_equal(encoded.sum(1), 3.0)
    np.testing.assert_array_equal(parts.batch_input(batch, "new_obs")[:, :32].argmax(1), new_player)


def test_sample_writes_each_leaf_to_the_npz(tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "apiVersion: rolloutfleet.io/v1alpha1\nkind: RolloutJob\nmetadata: {name: bj}\n"
        "spec: {env: {id: Blackjack-v1, numEnvs: 2}, sampling: {seed: 0}}\n"
    )
    output = tmp_path / "bj.npz"
    assert main(["sample", str(manifest), "--steps", "40", "--output", str(output)]) == 0
    with np.load(output, allow_pickle=False) as data:
        assert {"obs/0", "obs/1", "obs/2", "new_obs/0", "new_obs/1", "new_obs/2"} <= set(data.files)
        assert "obs" not in data.files and len(data["obs/0"]) == 40 and data["obs/0"].dtype == np.int64


@pytest.mark.parametrize(
    ("env", "sampling", "message"),
    [
        ({"entryPoint": MASKED}, {"observationFilter": "meanStd"},
         r"^spec\.sampling\.observationFilter: meanStd normalizes Box observations, this env's are Dict\("),
        ({"entryPoint": "tests.unit.sampling.sampler_test_envs:make_text_env"}, {},
         r"^spec\.policy: unsupported observation space Text\("),
    ],
)  # fmt: skip
def test_what_cannot_be_read_is_one_line_at_start_up(
    env: dict[str, Any], sampling: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message) as raised:
        EnvRunner(job(env, sampling))
    assert "\n" not in str(raised.value)


def test_an_all_zero_mask_names_the_sub_env() -> None:
    runner = EnvRunner(job({"entryPoint": MASKED, "numEnvs": 2, "config": {"empty_mask_at": 2}}))
    with pytest.raises(SpecError, match=r"^spec\.env: sub-env 0: its action_mask allows no action \(all zeros\)"):
        runner.sample()


def test_a_learner_model_reads_the_leaves_as_the_worker_did() -> None:
    """build_model's torch module, fed batch_input(batch), gives the logits the numpy worker acted on."""
    import torch

    from rolloutfleet.fleet.runner_factory import build_model

    the_job = job(
        {"id": "Blackjack-v1", "numEnvs": 2}, {"rolloutFragmentLength": 10}, {"hidden": [16], "device": "cpu"}
    )
    runner = EnvRunner(the_job)
    assert runner.policy.inference == "numpy"
    batch = runner.sample()
    model = build_model(the_job)
    with torch.no_grad():
        logits, values = model(torch.as_tensor(runner.parts.batch_input(batch)))
    np.testing.assert_allclose(logits.numpy(), batch["action_dist_inputs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values.numpy(), batch["vf_preds"], rtol=1e-5, atol=1e-5)


def test_a_recurrent_policy_reads_dict_observations_and_keeps_the_mask() -> None:
    MaskedCounterEnv.illegal = 0
    env = {"entryPoint": MASKED, "numEnvs": 3, "config": {"length": 5}}
    lstm = {"recurrent": {"cell": "lstm", "size": 8}, "device": "cpu"}
    runner = EnvRunner(job(env, {"rolloutFragmentLength": 12}, lstm))
    try:
        batch = runner.sample()
    finally:
        runner.close()
    assert batch["action_mask"][np.arange(len(batch)), batch["actions"]].all()
    assert MaskedCounterEnv.illegal == 0
    states = [batch[name] for name in ("state_in_0", "state_in_1")]
    first = batch["obs/observation"][:, 1] == 0  # the counter's step: 0 on an episode's first row
    assert first.any() and (~first).any()
    for state in states:
        assert state.shape == (len(batch), 8)
        assert not state[first].any()  # every episode starts from the zero state
        assert state[~first].any(axis=1).all()  # and carries one after its first step


@pytest.mark.parametrize("policy", [{}, {"recurrent": {"cell": "gru", "size": 4}, "device": "cpu"}])
def test_next_step_autoreset_acts_on_a_final_observation_that_allows_no_action(policy: dict[str, Any]) -> None:
    """NEXT_STEP: the reset step's observation is the episode's last, whose mask may be empty
    (no legal move at the end): not an error, and no row of the batch."""
    MaskedCounterEnv.illegal = 0
    env = {"id": "RolloutFleetMaskedCounterVec-v0", "numEnvs": 2, "config": {"length": 3}}
    runner = EnvRunner(job(env, {"rolloutFragmentLength": 12}, policy))
    try:
        assert runner.vectorization == "vector"
        batch = runner.sample()
    finally:
        runner.close()
    assert batch["action_mask"][np.arange(len(batch)), batch["actions"]].all()
    assert MaskedCounterEnv.illegal == 0
    np.testing.assert_array_equal(batch["terminateds"], batch["new_obs/observation"][:, 1] == 3)
    assert len(batch) == 24 and batch["terminateds"].sum() == 8  # 12 transitions per sub-env: 4 episodes of 3


CAMERA = "tests.unit.sampling.sampler_test_envs:make_camera"


@pytest.mark.parametrize("policy", [{}, {"vfShareLayers": False}])
def test_an_image_leaf_goes_through_a_cnn_beside_the_other_leaves_and_learners_build_the_same(
    policy: dict[str, Any],
) -> None:
    import torch
    from torch import nn

    from rolloutfleet.fleet.runner_factory import build_model
    from rolloutfleet.inference.models import ImageLeaves

    the_job = job({"entryPoint": CAMERA, "numEnvs": 3}, {"rolloutFragmentLength": 10}, {"hidden": [16], **policy})
    with EnvRunner(the_job) as runner:
        assert runner.policy.inference == "torch"  # a CNN: never the numpy MLP
        batch = runner.sample()
        module = runner.policy.torch_model()
    # The env's own rules, read back from the leaf columns.
    camera, gps = batch["obs/camera"], batch["obs/gps"]
    assert camera.dtype == np.uint8 and camera.shape[1:] == (10, 12, 3)
    bright = camera[:, 0, :, 0] == 255
    assert (bright.sum(axis=1) == 1).all()
    np.testing.assert_array_equal(bright.argmax(axis=1), gps[:, 0])  # the column is at the gps position
    np.testing.assert_array_equal(batch["new_obs/heading"], batch["actions"])
    # The architecture: one CNN for the image; its 512 features + gps (2) + one-hot heading (4) into the MLP.
    leaves = [m for m in module.modules() if isinstance(m, ImageLeaves)]
    assert len(leaves) == (1 if policy == {} else 2) and all(leaf.features == 512 + 2 + 4 for leaf in leaves)
    assert any(isinstance(m, nn.Conv2d) for m in leaves[0].modules())
    # The learner's model: the same layers and initial weights; fed the batch, it gives what the worker recorded.
    learner = build_model(the_job)
    assert {k: v.shape for k, v in learner.state_dict().items()} == {k: v.shape for k, v in module.state_dict().items()}
    x = torch.as_tensor(runner.parts.batch_input(batch))
    with torch.no_grad():
        logits, values = learner(x)
    np.testing.assert_allclose(logits.numpy(), batch["action_dist_inputs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values.numpy(), batch["vf_preds"], rtol=1e-5, atol=1e-5)
    logp = torch.log_softmax(logits, dim=1)[torch.arange(len(x)), torch.as_tensor(batch["actions"])]
    np.testing.assert_allclose(logp.numpy(), batch["action_logp"], rtol=1e-5, atol=1e-5)
    # Weights round-trip: a learner's update loads into the worker's policy and acts there.
    with torch.no_grad():
        for parameter in learner.parameters():
            parameter.add_(0.01)
    runner.policy.set_weights(learner.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(runner.policy.forward(x.numpy())[0], learner(x)[0].numpy(), rtol=1e-5, atol=1e-5)


def test_a_recurrent_policy_reads_an_image_leaf_through_its_cnn_too() -> None:
    from rolloutfleet.inference.models import ImageLeaves

    gru = {"recurrent": {"cell": "gru", "size": 8}, "device": "cpu", "hidden": [16]}
    with EnvRunner(job({"entryPoint": CAMERA, "numEnvs": 2}, {"rolloutFragmentLength": 9}, gru)) as runner:
        batch = runner.sample()
        module = runner.policy.torch_model()
    assert sum(isinstance(m, ImageLeaves) for m in module.modules()) == 1
    assert batch["state_in_0"].shape == (18, 8) and batch["obs/camera"].shape == (18, 10, 12, 3)
