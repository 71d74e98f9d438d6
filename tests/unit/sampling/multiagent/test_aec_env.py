"""PettingZoo AEC games sampled turn by turn: every sampled game re-played in a fresh env.

The facts checked come from PettingZoo's own envs, not from our code: whose turn it is
(``agent_iter``), what each agent observes and may do (``last()``'s observation and its
``action_mask``), what it is paid (``last()``'s reward) and when it is done. PettingZoo's
``TerminateIllegalWrapper`` (part of ``tictactoe_v3.env()``/``connect_four_v3.env()``) is
counted on any illegal move, during sampling and the re-play: none may happen.
"""

from __future__ import annotations

import importlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from rolloutfleet import RolloutJob, SpecError
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.multiagent_batch import MultiAgentBatch
from rolloutfleet.sampling.multiagent.aec_env import AECDriver
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner

GAMES = ["pettingzoo.classic.tictactoe_v3", "pettingzoo.classic.connect_four_v3"]


@pytest.fixture(autouse=True)
def illegal_moves() -> Iterator[list[str]]:
    """Counts PettingZoo's illegal-move warnings (sampling and re-play); none may fire.

    Not raised inside the env: the runner would take that for a failing sub-env and rebuild it."""
    from pettingzoo.utils.env_logger import EnvLogger

    fired: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(EnvLogger, "warn_on_illegal_move", staticmethod(lambda: fired.append("illegal move")))
        yield fired
    assert not fired, f"PettingZoo's illegal-move check fired {len(fired)} times"


def game_job(env_id: str, num_envs: int = 4, max_episode_steps: int | None = None, **policy: Any) -> RolloutJob:
    bound = {} if max_episode_steps is None else {"maxEpisodeSteps": max_episode_steps}
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "game"},
            "spec": {
                "env": {"id": env_id, "numEnvs": num_envs},
                "policy": {"hidden": [16], "device": "cpu", **policy},
                "multiAgent": {
                    "policies": {"main": {}, "opponent": {}},
                    "policyMapping": {"rules": [{"regex": "^player_1$", "policy": "main"}], "default": "opponent"},
                    **bound,
                },
                "sampling": {"rolloutFragmentLength": 8, "seed": 5},
            },
        }
    )


def rows_by_game(batch: MultiAgentBatch) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """eps_id -> agent -> its rows in time order."""
    games: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for policy_batch in batch.values():
        for i in range(len(policy_batch)):
            row = {name: column[i] for name, column in policy_batch.items()}
            games[int(row["eps_id"])][str(row["agent_id"])].append(row)
    for agents in games.values():
        for rows in agents.values():
            rows.sort(key=lambda row: int(row["t"]))
    return games


def replay(env_id: str, agents_rows: dict[str, list[dict[str, Any]]], bound: int | None = None) -> int:
    """Play the rows' actions in a fresh env, checking every row against it; the number of turns.

    With ``bound`` (``maxEpisodeSteps``): a game the env has not ended after that many moves
    was cut there: each agent's last row is truncated, with what the env lets it see now and
    the rewards the env holds for it."""
    env = importlib.import_module(env_id).env()
    env.reset()
    next_row: dict[str, int] = defaultdict(int)
    pending: dict[str, dict[str, Any]] = {}
    turns = 0
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        row = pending.pop(agent, None)
        if row is not None:  # the agent's previous move: closed by what it sees and got since
            np.testing.assert_array_equal(row["new_obs/observation"], obs["observation"])
            np.testing.assert_array_equal(row["new_obs/action_mask"], obs["action_mask"])
            assert float(row["rewards"]) == pytest.approx(float(reward)), (agent, turns)
            assert (bool(row["terminateds"]), bool(row["truncateds"])) == (terminated, truncated)
        if terminated or truncated:
            env.step(None)
            continue
        rows = agents_rows[agent]
        row = rows[next_row[agent]]
        assert int(row["t"]) == next_row[agent]  # the agent's own turn count
        np.testing.assert_array_equal(row["obs/observation"], obs["observation"])
        np.testing.assert_array_equal(row["obs/action_mask"], obs["action_mask"])
        np.testing.assert_array_equal(row["action_mask"], obs["action_mask"].astype(bool))
        assert obs["action_mask"][int(row["actions"])] == 1, f"{agent} made an illegal move"
        env.step(int(row["actions"]))
        pending[agent], next_row[agent] = row, next_row[agent] + 1
        turns += 1
        game_over = any(env.terminations.values()) or any(env.truncations.values())
        if turns == bound and not game_over:
            for waiting, last_row in pending.items():
                seen = env.observe(waiting)
                np.testing.assert_array_equal(last_row["new_obs/observation"], seen["observation"])
                np.testing.assert_array_equal(last_row["new_obs/action_mask"], seen["action_mask"])
                assert float(last_row["rewards"]) == pytest.approx(float(env._cumulative_rewards[waiting]))
                assert (bool(last_row["terminateds"]), bool(last_row["truncateds"])) == (False, True)
            pending.clear()
            break
    assert not pending  # every move's row was closed by the game
    assert {agent: len(rows) for agent, rows in agents_rows.items()} == dict(next_row)  # no row left over
    return turns


@pytest.mark.parametrize("env_id", GAMES)
@pytest.mark.parametrize("mode", ["explore", "greedy", "random"])
def test_every_sampled_game_replays_move_by_move_in_a_fresh_env(env_id: str, mode: str) -> None:
    with MultiAgentEnvRunner(game_job(env_id)) as runner:
        batch = runner.sample(num_episodes=12, explore=mode == "explore", random_actions=mode == "random")
    games = rows_by_game(batch)
    assert len(games) == 12
    turns = sum(replay(env_id, agents_rows) for agents_rows in games.values())
    assert turns == batch.agent_steps() == batch.env_steps()  # one turn per env step, each a row
    for agents_rows in games.values():
        finals = [rows[-1] for rows in agents_rows.values()]
        assert all(bool(row["terminateds"]) for row in finals)  # the game's end reaches every agent
        assert sum(float(row["rewards"]) for row in finals) == 0.0  # zero-sum: the loser's row holds the loss


@pytest.mark.parametrize("env_id", GAMES)
@pytest.mark.parametrize("explore", [False, True])
def test_a_model_that_insists_on_an_illegal_move_never_makes_it(env_id: str, explore: bool) -> None:
    """Both policies' logits favour action 0 by far; once column/cell 0 is taken, only the mask stops it."""
    with MultiAgentEnvRunner(game_job(env_id)) as runner:
        for policy in runner.policies.values():
            weights = policy.get_weights()
            weights["pi.bias"][0] = 25.0
            policy.set_weights(weights)
        batch = runner.sample(num_episodes=8, explore=explore)
    for agents_rows in rows_by_game(batch).values():
        replay(env_id, agents_rows)
    favoured_illegal = np.concatenate([~policy_batch["action_mask"][:, 0] for policy_batch in batch.values()])
    assert favoured_illegal.any()  # the model's own choice was illegal in these rows: the mask decided


@pytest.mark.parametrize("bound", [4, 7])
def test_games_still_on_at_max_episode_steps_are_cut_there_truncated_and_counted(bound: int) -> None:
    """Tic-tac-toe is won at the 5th move at the earliest, drawn at the 9th: with bound 4 every
    game is cut; with 7 some end by the env's rules first (terminated, not counted)."""
    with MultiAgentEnvRunner(game_job(GAMES[0], max_episode_steps=bound)) as runner:
        batch = runner.sample(num_episodes=16, random_actions=True)
        metrics = runner.get_metrics()
    cut = 0
    for agents_rows in rows_by_game(batch).values():
        turns = replay(GAMES[0], agents_rows, bound)  # every row against a fresh env
        assert turns <= bound
        finals = [rows[-1] for rows in agents_rows.values()]
        if all(bool(row["truncateds"]) for row in finals):
            assert turns == bound and not any(bool(row["terminateds"]) for row in finals)
            cut += 1
        else:
            assert all(bool(row["terminateds"]) for row in finals)
        assert sum(len(rows) for rows in agents_rows.values()) == turns  # a row per move, none after the cut
    assert metrics["num_episodes_truncated_by_max_steps"] == cut
    assert (cut == 16) if bound == 4 else (0 < cut < 16)


@pytest.mark.parametrize("bound", [1, 5, 8])
def test_a_game_that_never_ends_is_truncated_at_max_episode_steps_and_the_next_begins(bound: int) -> None:
    from tests.unit.sampling import multiagent_test_envs

    multiagent_test_envs.ENDLESS.clear()
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "endless"},
            "spec": {
                "env": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_endless", "numEnvs": 2},
                "policy": {"hidden": [8], "device": "cpu"},
                "multiAgent": {
                    "policies": {"main": {}},
                    "policyMapping": {"rules": [{"regex": ".", "policy": "main"}]},
                    "maxEpisodeSteps": bound,
                },
                "sampling": {"seed": 3, "batchMode": "complete_episodes", "rolloutFragmentLength": 1},
            },
        }
    )
    with MultiAgentEnvRunner(job) as runner:
        batch = runner.sample(num_episodes=6)
        metrics = runner.get_metrics()
    assert metrics["num_episodes"] == 6 == metrics["num_episodes_truncated_by_max_steps"]
    envs = multiagent_test_envs.ENDLESS
    assert sum(len(env.games) for env in envs) >= 6 and all(moves == bound for env in envs for moves in env.games)
    rows = batch["main"]
    assert len(rows) == 6 * bound == batch.env_steps()
    for eps in dict.fromkeys(rows["eps_id"].tolist()):
        game = rows.rows(rows["eps_id"] == eps)
        # Zero-sum, but for what b was charged before its first move (no row of b holds it).
        assert float(game["rewards"].sum()) == float(game["actions"][game["t"] == 0][0] + 1)
        for number, agent in enumerate(("a", "b")):
            mine = game.rows(game["agent_id"] == agent)
            moves = (bound + 1 - number) // 2  # a moves first
            assert mine["t"].tolist() == list(range(moves))
            assert mine["truncateds"].tolist() == [False] * (moves - 1) + [True] * min(moves, 1)
            assert not mine["terminateds"].any()
            # An agent observes again after both moved (2 moves later), or at the cut, after `bound` moves.
            seen = [min(2 * t + number + 2, bound) for t in range(moves)]
            assert mine["new_obs"][:, 0].tolist() == seen
            np.testing.assert_array_equal(mine["obs"][:, 0], 2 * np.arange(moves) + number)
            # A move pays the mover k + 1; the other's next move (if it came before the cut) costs as much.
            paid = mine["actions"] + 1.0
            theirs = game.rows(game["agent_id"] != agent)["actions"] + 1.0
            cost = np.zeros(moves)
            later = theirs[number : number + moves]
            cost[: len(later)] = later
            np.testing.assert_array_equal(mine["rewards"], paid - cost)


def test_max_episode_steps_below_one_is_one_line_naming_the_field() -> None:
    with pytest.raises(SpecError, match=r"^spec\.multiAgent\.maxEpisodeSteps: [^\n]*$"):
        game_job(GAMES[0], max_episode_steps=0)


def test_all_agents_of_all_sub_envs_whose_turn_it_is_act_in_one_call_per_policy() -> None:
    calls: list[tuple[str, int]] = []
    with MultiAgentEnvRunner(game_job(GAMES[0], num_envs=6)) as runner:
        for policy_id, policy in runner.policies.items():
            act = policy.act

            def counting(explore: bool, act: Any = act, policy_id: str = policy_id) -> Any:
                inner = act(explore)

                def call(obs: np.ndarray, mask: np.ndarray | None = None) -> Any:
                    calls.append((policy_id, len(obs)))
                    return inner(obs, mask)

                return call

            policy.act = counting  # type: ignore[method-assign]
        runner.sample(num_timesteps=6)
    # The 6 games start together: player_1 (main) moves in all of them, then player_2 (opponent).
    assert calls == [("main", 6)]
    calls.clear()
    with MultiAgentEnvRunner(game_job(GAMES[0], num_envs=6)) as runner:
        batch = runner.sample(num_timesteps=12)
    assert batch.env_steps() == 12 and batch.agent_steps() == 12 - 6  # player_2's first 6 rows wait for its next turn


def no_legal_moves(ctx: Any) -> Any:
    """Tic-tac-toe whose observations allow no move (an entry point for the test below)."""
    from pettingzoo.classic import tictactoe_v3
    from pettingzoo.utils.wrappers import BaseWrapper

    class NoLegalMoves(BaseWrapper):  # type: ignore[misc]
        def observe(self, agent: str) -> Any:
            obs = dict(super().observe(agent))
            obs["action_mask"] = np.zeros_like(obs["action_mask"])
            return obs

    return NoLegalMoves(tictactoe_v3.env())


def test_an_all_zero_action_mask_is_one_error_naming_the_agent() -> None:
    job = game_job(GAMES[0])
    env = job.spec.env.model_copy(
        update={"id": None, "entry_point": "tests.unit.sampling.multiagent.test_aec_env:no_legal_moves"}
    )
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"env": env})})
    with (
        MultiAgentEnvRunner(job) as runner,
        pytest.raises(SpecError, match=r"agent 'player_1': its action_mask allows no action"),
    ):
        runner.sample(num_timesteps=1)


def test_a_done_agent_selected_again_is_an_error_not_a_hang() -> None:
    class Stuck:
        """An AEC-like env whose done agent never leaves."""

        agents = ["a"]
        agent_selection = "a"

        def reset(self, seed: int | None = None) -> None:
            pass

        def last(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
            return np.zeros(1), 0.0, True, False, {}

        def step(self, action: Any) -> None:
            pass

    with pytest.raises(SpecError, match=r"selected agent 'a' again after removing it"):
        AECDriver(Stuck(), "spec.env.entryPoint").reset(seed=0)


def test_sampled_batches_are_policy_batches_with_a_mask_column() -> None:
    with MultiAgentEnvRunner(game_job(GAMES[0])) as runner:
        batch = runner.sample()
    for policy_batch in batch.values():
        assert isinstance(policy_batch, SampleBatch)
        assert policy_batch["action_mask"].dtype == np.bool_ and policy_batch["action_mask"].shape[1:] == (9,)
        assert policy_batch["obs/observation"].shape[1:] == (3, 3, 2)
        assert policy_batch["obs/observation"].dtype == policy_batch["obs/action_mask"].dtype == np.int8
        assert "obs" not in policy_batch


def rps_payoff(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Rock-paper-scissors' rule as PettingZoo's rps_v2 states it: same action 0; same parity:
    the lower action wins; different parity: the higher action wins."""
    same_parity = (mine + theirs) % 2 == 0
    win = np.where(same_parity, mine < theirs, mine > theirs)
    return np.where(mine == theirs, 0.0, np.where(win, 1.0, -1.0))


@pytest.mark.parametrize("max_cycles", [1, 4])
def test_a_game_truncated_by_its_turn_limit_ends_every_agents_last_row_truncated(max_cycles: int) -> None:
    from tests.unit.sampling import multiagent_test_envs

    multiagent_test_envs.RECORDED.clear()
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "rps"},
            "spec": {
                "env": {
                    "entryPoint": "tests.unit.sampling.multiagent_test_envs:make_recorded_rps",
                    "config": {"max_cycles": max_cycles},
                    "numEnvs": 3,
                },
                "policy": {"hidden": [8], "device": "cpu"},
                "multiAgent": {
                    "policies": {"main": {}},
                    "policyMapping": {"rules": [{"prefix": "player_", "policy": "main"}]},
                },
                "sampling": {"rolloutFragmentLength": 8, "seed": 5},
            },
        }
    )
    with MultiAgentEnvRunner(job) as runner:
        batch = runner.sample(num_episodes=9)
        metrics = runner.get_metrics()
    rows = batch["main"]
    recorded = {j: list(e.finished) for j, e in enumerate(multiagent_test_envs.RECORDED)}
    games = 0
    for j in range(3):
        mine = rows.rows(rows["env_id"] == j)
        for k, eps in enumerate(dict.fromkeys(mine["eps_id"].tolist())):
            game = recorded[j][k]  # the env's own counts of this sub-env's k-th game
            assert game["num_moves"] == max_cycles
            for agent in ("player_0", "player_1"):
                run = mine.rows((mine["eps_id"] == eps) & (mine["agent_id"] == agent))
                assert run["t"].tolist() == list(range(max_cycles))  # one row per round the env counted
                assert run["truncateds"].tolist() == [False] * (max_cycles - 1) + [True]
                assert not run["terminateds"].any()
                assert float(run["rewards"].sum()) == game["returns"][agent]
                # Each row's reward is the rule applied to its move and the opponent's (its new_obs).
                np.testing.assert_array_equal(run["rewards"], rps_payoff(run["actions"], run["new_obs"]))
            games += 1
    assert games == 9
    assert batch.env_steps() == 9 * 2 * max_cycles == batch.agent_steps()  # one turn per env step
    assert metrics["num_episodes"] == 9 and metrics["episode_len_mean"] == 2 * max_cycles
    assert metrics["episode_return_mean"] == 0.0  # zero-sum


def recorded_rps() -> Any:
    from tests.unit.sampling.multiagent_test_envs import make_recorded_rps

    return make_recorded_rps({"max_cycles": 4})  # type: ignore[arg-type]


def endless() -> Any:
    from tests.unit.sampling.multiagent_test_envs import make_endless

    return make_endless({})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda: importlib.import_module(GAMES[0]).env(),
        lambda: importlib.import_module(GAMES[1]).env(),
        lambda: importlib.import_module("pettingzoo.classic.rps_v2").env(max_cycles=4),
        recorded_rps,
        endless,
    ],
    ids=["tictactoe_v3", "connect_four_v3", "rps_v2_aec", "recorded_rps_wrapper", "endless"],
)
def test_the_aec_envs_we_sample_pass_pettingzoos_own_api_test(make: Any) -> None:
    """The AEC envs these tests (and examples/tictactoe.yaml) sample, our recording wrapper and endless env:
    PettingZoo's api_test holds for them, so what the runner is checked against is a conforming env."""
    from pettingzoo.test import api_test

    api_test(make(), num_cycles=300)
