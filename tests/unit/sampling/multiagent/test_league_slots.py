"""A league in the multi-agent runner: the opponent's seats play the snapshots a source
picks, held in a bounded number of slots, and every finished game is reported with who
played each seat (tic-tac-toe's own rules: a win is +1 against -1, a draw 0 and 0)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rolloutfleet.data.weights_check import CheckedWeights
from rolloutfleet.inference.numpy_inference import RowsBank
from rolloutfleet.sampling.multiagent.acting import PolicyActing
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.sampling.multiagent.league_slots import SlotTable, slot_policy_id
from rolloutfleet.spec.job import RolloutJob, SpecError

ROOT = Path(__file__).resolve().parents[4]


def league_job(cached: int = 2, num_envs: int = 4) -> RolloutJob:
    manifest = RolloutJob.from_file(ROOT / "examples/tictactoe.yaml").to_dict()
    manifest["spec"]["env"]["numEnvs"] = num_envs
    manifest["spec"]["league"] = {"opponent": "main_v1", "cachedPolicies": cached}
    return RolloutJob.from_dict(manifest)


class Source:
    """Snapshots in memory, picked in turn."""

    def __init__(self, snapshots: Mapping[str, Mapping[str, np.ndarray]], order: list[str | None]) -> None:
        self.snapshots, self.order, self.turn = snapshots, order, 0
        self.loaded: list[str] = []
        self.games: list[tuple[dict[str, str], dict[str, float]]] = []
        self.eps_ids: list[int | None] = []

    def pick(self) -> str | None:
        name = self.order[self.turn % len(self.order)]
        self.turn += 1
        return name

    def load(self, name: str) -> Mapping[str, Any]:
        self.loaded.append(name)
        return self.snapshots[name]

    def finished(self, seats: Mapping[str, str], returns: Mapping[str, float], eps_id: int | None = None) -> None:
        self.games.append((dict(seats), dict(returns)))
        self.eps_ids.append(eps_id)


def snapshots_of(runner: MultiAgentEnvRunner, names: list[str]) -> dict[str, dict[str, np.ndarray]]:
    base = runner.get_weights(["main_v1"])["main_v1"]
    return {name: {k: v + i + 1 for k, v in base.items()} for i, name in enumerate(names)}


def test_slot_table_evicts_the_least_recently_used_free_slot() -> None:
    table = SlotTable(3)
    assert [table.assign(n, set()) for n in ("a", "b", "c")] == [(0, True), (1, True), (2, True)]
    table.assign("a", set())  # a used again: b is now the least recently used
    assert table.assign("d", set()) == (1, True) and table.held == ["a", "d", "c"]
    assert table.assign("e", {2}) == (0, True)  # c is in play: a goes
    assert table.assign("f", {0, 1, 2}) == (2, False) and table.busy == 1  # all in play: the LRU one's
    table.forget(1)
    assert table.assign("g", {0, 2}) == (1, True) and table.loads == 6
    with pytest.raises(ValueError, match="at least one slot"):
        SlotTable(0)


def test_the_opponent_seats_play_the_picked_snapshots_from_bounded_slots() -> None:
    job = league_job(cached=2, num_envs=4)
    runner = MultiAgentEnvRunner(job, worker_index=0)
    names = ["s1", "s2", "s3"]
    source = Source(snapshots_of(runner, names), ["s1", "s2", "s3", "s1"])
    runner.attach_league(source)
    slots = [slot_policy_id("main_v1", k) for k in range(2)]
    assert set(runner.policies) == {"main", "main_v1", *slots}
    for _ in range(20):
        runner.sample()
    assert len(source.games) >= 20
    for seats, returns in source.games:
        assert sorted(seats) == ["player_1", "player_2"] and "main" in seats.values()
        (opponent,) = [name for name in seats.values() if name != "main"]
        assert opponent in names
        assert sorted(returns.values()) in ([-1.0, 1.0], [0.0, 0.0])  # tic-tac-toe: +1 / -1, or a draw
    # A slot holds a snapshot's own weights, and never more than 2 are held.
    assert runner.slots is not None and len(runner.slots.held) <= 2
    for k, name in enumerate(runner.slots.slots):
        if name is not None:
            held = runner.get_weights([slots[k]])[slots[k]]
            assert all(np.array_equal(held[key], source.snapshots[name][key]) for key in held)
    assert set(source.loaded) <= set(names) and runner.slots.loads == len(source.loaded)
    # The opponent's own policy never acted: every opponent seat played a slot.
    assert all(seats[p] != "main_v1" for seats, _ in source.games for p in seats)


def test_the_slots_acting_in_one_forward_pass_act_with_their_own_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    """The opponent's seats of every game share one numpy forward pass, whichever slot each
    plays (or the opponent as it is, for a game with no pick); each row's logits are its
    slot's snapshot's, as that snapshot's own torch module computes them, and every row lands
    in the opponent's one row table."""
    job = league_job(cached=4, num_envs=8)
    runner = MultiAgentEnvRunner(job, worker_index=0)
    names = ["s1", "s2", "s3", "s4", "s5"]
    source = Source(snapshots_of(runner, names), [*names, None])  # every sixth game: no pick
    runner.attach_league(source)
    checked: list[int] = []
    seen: list[list[int]] = []
    forward = RowsBank.forward
    slots = runner.league.slot_ids()  # type: ignore[union-attr]
    banked = [*slots, "main_v1"]  # the bank's rows: the slots, then the opponent as it is

    def checking(bank: RowsBank, which: np.ndarray, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, values = forward(bank, which, obs)
        seen.append(which.tolist())
        if len(set(which.tolist())) > 1:  # two slots or more at once: each row as its own slot acts alone
            for row, k in enumerate(which):
                own_logits, own_values = runner.policies[banked[k]].forward(obs[row : row + 1])
                np.testing.assert_allclose(logits[row], own_logits[0], rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(values[row], own_values[0], rtol=1e-5, atol=1e-5)
            checked.append(len(which))
        return logits, values

    monkeypatch.setattr(RowsBank, "forward", checking)
    batches = [runner.sample() for _ in range(5)]
    assert checked, "no step had two slots acting together"
    assert any(len(set(w)) > 1 and len(banked) - 1 in w for w in seen), "no step mixed a slot and the opponent as it is"
    for batch in batches:  # one table: the opponent's rows, no slot's
        assert set(batch.policy_batches) == {"main", "main_v1"} and len(batch["main_v1"]) > 0
    # Random actions (a warm-up) act slot by slot instead, into the same table: legal moves only.
    forwards = len(seen)
    randomly = runner.sample(random_actions=True)
    assert len(seen) == forwards and len(randomly["main_v1"]) > 0
    masks, actions = randomly["main_v1"]["action_mask"], randomly["main_v1"]["actions"]
    assert masks[np.arange(len(actions)), actions].all()
    # ...and the slots' own numpy forward is their torch module's (the snapshot's weights).
    module = runner.policies[slots[0]].torch_model()
    probe = np.zeros((1, 18), np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(module(torch.from_numpy(probe))[0][0].numpy(),
                                   runner.policies[slots[0]].forward(probe)[0][0], rtol=1e-5, atol=1e-5)  # fmt: skip
    assert source.loaded  # snapshots were loaded into the slots while they acted


def test_with_nothing_picked_the_opponent_plays_as_it_is_and_a_bad_snapshot_is_counted() -> None:
    job = league_job(cached=1, num_envs=2)
    runner = MultiAgentEnvRunner(job)
    wrong = {"s1": {"not.a.weight": np.zeros(3, np.float32)}}
    source = Source(wrong, [None, "s1"])
    runner.attach_league(source)
    for _ in range(10):
        runner.sample()
    opponents = {name for seats, _ in source.games for name in seats.values() if name != "main"}
    assert opponents == {"main_v1"}  # no plan yet, and a snapshot that does not fit the model
    assert (
        runner.league is not None
        and runner.league.refused >= 1
        and runner.slots is not None
        and runner.slots.held == []
    )


def test_a_league_needs_its_opponent_untrained_and_a_multi_agent_job() -> None:
    manifest = RolloutJob.from_file(ROOT / "examples/tictactoe.yaml").to_dict()
    manifest["spec"]["league"] = {"opponent": "main"}
    with pytest.raises(SpecError, match=r"spec\.league\.opponent: policy 'main' is trained"):
        RolloutJob.from_dict(manifest)
    single = RolloutJob.from_file(ROOT / "examples/cartpole.yaml").to_dict()
    single["spec"]["league"] = {"opponent": "x"}
    with pytest.raises(SpecError, match=r"spec\.league: plays multi-agent jobs' opponents"):
        RolloutJob.from_dict(single)
    with pytest.raises(SpecError, match="no league"):
        MultiAgentEnvRunner(RolloutJob.from_file(ROOT / "examples/tictactoe.yaml")).attach_league(Source({}, [None]))


def test_a_recurrent_opponent_plays_its_snapshots_slot_by_slot_into_its_own_rows() -> None:
    """A recurrent model cannot share the slots' forward pass: each slot acting acts alone,
    its state kept per game, and its rows (state in and out) are the opponent's."""
    manifest = league_job(cached=3, num_envs=3).to_dict()
    manifest["spec"]["policy"]["recurrent"] = {"cell": "lstm", "size": 8}
    runner = MultiAgentEnvRunner(RolloutJob.from_dict(manifest), worker_index=0)
    names = ["s1", "s2", "s3"]
    source = Source(snapshots_of(runner, names), names)
    runner.attach_league(source)
    batches = [runner.sample() for _ in range(4)]
    assert source.loaded and len(source.games) >= 3
    opponent = [batch["main_v1"] for batch in batches if len(batch["main_v1"]) > 0]
    assert opponent and all(set(batch.policy_batches) == {"main", "main_v1"} for batch in batches)
    assert all("state_in_0" in part for part in opponent)  # the LSTM's state, in the opponent's table
    played = {name for seats, _ in source.games for name in seats.values() if name != "main"}
    assert played <= set(names) and played


def test_checked_snapshots_load_straight_into_the_shared_pass_and_the_slots_catch_up_when_read() -> None:
    """Snapshots checked against the slots' model (as a worker's league reads them) are
    copied into the shared forward pass only; a slot's own model takes its snapshot when it
    acts by itself (random actions) or is read or written through the runner, and weights
    given to a slot then are the ones it keeps."""
    runner = MultiAgentEnvRunner(league_job(cached=4, num_envs=4), worker_index=0)
    signature = runner.policies["main_v1"].weights_signature()
    names = ["s1", "s2", "s3", "s4"]
    plain = snapshots_of(runner, names)
    source = Source({name: CheckedWeights(weights, signature) for name, weights in plain.items()}, names)
    runner.attach_league(source)
    slots = runner.league.slot_ids()  # type: ignore[union-attr]
    initial = {slot: runner.policies[slot].get_weights() for slot in slots}
    runner.sample()
    assert runner.slots is not None and sorted(runner.slots.held) == names
    # The slots' own models did not load anything: the snapshots went into the shared pass only.
    assert all(np.array_equal(runner.policies[slot].get_weights()[key], initial[slot][key])
               for slot in slots for key in initial[slot])  # fmt: skip
    # Acting slot by slot (random actions) first brings every slot's model up to date.
    runner.sample(random_actions=True)
    for k, name in enumerate(runner.slots.slots):
        held = runner.policies[slots[k]].get_weights()
        assert name is not None and all(np.array_equal(held[key], plain[name][key]) for key in held)
    # Loaded into the pass again, then read through the runner: the snapshot, not the old weights.
    source.order, source.turn = ["t1"], 0
    source.snapshots["t1"] = CheckedWeights({key: value * 0 + 7 for key, value in plain["s1"].items()}, signature)
    while "t1" not in runner.slots.held:
        runner.sample()
    slot = slots[runner.slots.slots.index("t1")]
    assert all(np.all(value == 7) for value in runner.get_weights([slot])[slot].values())
    # Weights given through the runner to a slot loaded into the pass only are the ones it keeps.
    source.order, source.turn = ["t2"], 0
    source.snapshots["t2"] = CheckedWeights({key: value * 0 + 9 for key, value in plain["s1"].items()}, signature)
    while "t2" not in runner.slots.held:
        runner.sample()
    t2_slot = slots[runner.slots.slots.index("t2")]
    runner.set_weights(t2_slot, plain["s2"])
    assert all(np.array_equal(value, plain["s2"][key]) for key, value in runner.get_weights([t2_slot])[t2_slot].items())


def test_slots_given_a_snapshots_acting_part_act_with_it_and_their_rows_have_no_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without publishOpponentRows the slots need only what acting needs (the default MLP
    less its value function, as a worker's league then reads it): the opponent's rows from
    those games carry NaN vf_preds while main's keep their values, in the shared pass as
    slot by slot (as with Ornstein-Uhlenbeck noise), where a slot's own model takes the
    snapshot with a value function of zeros."""
    job = league_job(cached=4, num_envs=4)
    runner = MultiAgentEnvRunner(job, worker_index=0)
    assert runner.slots_act_only()
    published = job.to_dict()
    published["spec"]["league"]["publishOpponentRows"] = True
    assert not MultiAgentEnvRunner(RolloutJob.from_dict(published), worker_index=0).slots_act_only()
    signature = runner.policies["main_v1"].weights_signature()
    acting = {name: spec for name, spec in signature.items() if not name.startswith(("critic_trunk.", "vf."))}
    names = ["s1", "s2", "s3", "s4"]
    plain = snapshots_of(runner, names)
    parts = {name: {key: weights[key] for key in acting} for name, weights in plain.items()}
    runner.attach_league(Source({name: CheckedWeights(part, acting) for name, part in parts.items()}, names))
    batch = runner.sample()
    assert len(batch["main_v1"]) > 0 and np.isnan(batch["main_v1"]["vf_preds"]).all()
    assert np.isfinite(batch["main"]["vf_preds"]).all()
    begin = PolicyActing.begin

    def slot_by_slot(self: PolicyActing, explore: bool | None, random_actions: bool) -> None:
        begin(self, explore, random_actions)
        self._together = False  # as when a banked policy acts with Ornstein-Uhlenbeck noise

    monkeypatch.setattr(PolicyActing, "begin", slot_by_slot)
    batch = runner.sample()
    assert len(batch["main_v1"]) > 0 and np.isnan(batch["main_v1"]["vf_preds"]).all()
    assert np.isfinite(batch["main"]["vf_preds"]).all()
    assert runner.slots is not None
    for k, name in enumerate(runner.slots.slots):
        slot = runner.league.slot_ids()[k]  # type: ignore[union-attr]
        held = runner.get_weights([slot])[slot]
        assert name is not None and all(np.array_equal(held[key], parts[name][key]) for key in acting)
        assert all(not held[key].any() for key in set(signature) - set(acting))
