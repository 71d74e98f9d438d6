"""Self-play for turn-based games: train policy ``main`` against a frozen snapshot of itself.

``examples/tictactoe.yaml`` maps the two seats of a PettingZoo classic game to ``main`` and
``main_v1`` with :func:`rolloutfleet.examples.seats.alternate_seats` (``main`` moves first in every other game), and
trains only ``main``: the workers publish ``main``'s rows alone. This learner reads them
with :class:`rolloutfleet.BatchConsumer` (``policy="main"``), trains PPO on them with the
batch's ``action_mask`` applied to the logits (an illegal move gets no probability in the
loss, as when the workers sampled), publishes ``main``'s weights, and every
``--snapshot-every`` updates copies them into ``main_v1`` (the opponent the workers play
against): self-play against a lagged snapshot. Run it beside a fleet::

    rolloutfleet run examples/tictactoe.yaml -- python -m rolloutfleet.examples.selfplay examples/tictactoe.yaml

How good ``main`` is gets judged outside the fleet and our sampler: :func:`evaluate` plays
``main`` greedily (legal moves only) against a uniformly random legal player in a fresh
env made by PettingZoo's own ``env()`` of the job's id, half the games in each seat, and
reads the outcome from the env's own rewards. The learner stops (exit 0) when ``main`` wins
``--target-win-rate`` of those games and loses at most ``--max-loss-rate``; exit 1 at
``--time-limit``, or at ``--env-steps`` rows of main when given (to compare learners at equal
experience; ``--save`` keeps main's final weights).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet import MASK_KEY, ObsParts, RolloutJob, SampleBatch, obs_parts
from rolloutfleet.examples.ppo_algorithm import PPO, PPOConfig
from rolloutfleet.examples.seats import SNAPSHOT, TRAINED


def in_episode_order(batch: SampleBatch) -> SampleBatch:
    """The rows grouped by episode and agent, in each agent's turn order (``t``): a multi-agent
    batch interleaves sub-envs and agents, PPO's advantages follow one agent's consecutive turns."""
    order = np.lexsort((batch["t"], batch["agent_index"], batch["eps_id"]))
    return batch.rows(order)


def greedy_moves(model: nn.Module, parts: ObsParts, observations: Mapping[str, np.ndarray]) -> np.ndarray:
    """The model's most likely legal action for each row of leaf columns (``observation``,
    ``action_mask``, ...)."""
    with torch.no_grad():
        logits, _ = model(torch.as_tensor(parts.model_input(observations)))
    legal = np.asarray(observations[MASK_KEY]).astype(bool)
    return np.where(legal, logits.numpy(), -np.inf).argmax(axis=1)  # type: ignore[no-any-return]


Player = Callable[[dict[str, np.ndarray], np.random.Generator], int]
"""``(observation dict, rng) -> action``: one move of a player in a fresh env."""


def random_player(observation: dict[str, np.ndarray], rng: np.random.Generator) -> int:
    """A uniformly random legal move."""
    return int(rng.choice(np.flatnonzero(observation[MASK_KEY])))


def model_player(model: nn.Module, parts: ObsParts) -> Player:
    def play(observation: dict[str, np.ndarray], rng: np.random.Generator) -> int:
        rows = {path: np.asarray(value)[None] for path, value in observation.items()}
        return int(greedy_moves(model, parts, rows)[0])

    return play


@dataclass(frozen=True)
class Outcomes:
    """Games of a player against an opponent, counted from the env's own final rewards."""

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        return self.wins / self.games

    @property
    def loss_rate(self) -> float:
        return self.losses / self.games

    def __add__(self, other: Outcomes) -> Outcomes:
        return Outcomes(self.wins + other.wins, self.draws + other.draws, self.losses + other.losses)

    def __str__(self) -> str:
        return f"won {self.win_rate:.0%}, drew {self.draws / self.games:.0%}, lost {self.loss_rate:.0%} of {self.games}"


def play_games(
    make_env: Callable[[], Any], player: Player, opponent: Player, games: int, seat: str, seed: int
) -> Outcomes:
    """``games`` games in fresh envs (PettingZoo's AEC protocol), ``player`` in ``seat``; an
    illegal move by either side is an error, not an outcome."""
    rng = np.random.default_rng(seed)
    wins = draws = losses = 0
    env = make_env()
    for game in range(games):
        env.reset(seed=seed + game)
        final: dict[str, float] = {}
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, _ = env.last()
            final[agent] = float(reward)
            if terminated or truncated:
                env.step(None)
                continue
            move = (player if agent == seat else opponent)(observation, rng)
            if not observation[MASK_KEY][move]:
                raise RuntimeError(f"{agent} chose the illegal move {move}")
            env.step(move)
        result = final[seat]
        wins, draws, losses = wins + (result > 0), draws + (result == 0), losses + (result < 0)
    env.close()
    return Outcomes(wins, draws, losses)


def evaluate(make_env: Callable[[], Any], player: Player, games: int, seed: int = 0) -> dict[str, Outcomes]:
    """``player`` against a uniformly random legal player: half the games in each seat."""
    seats = make_env().possible_agents
    first = play_games(make_env, player, random_player, games // 2, seats[0], seed)
    second = play_games(make_env, player, random_player, games - games // 2, seats[1], seed + games)
    return {seats[0]: first, seats[1]: second, "all": first + second}


def env_maker(job: RolloutJob) -> Callable[[], Any]:
    """PettingZoo's own AEC ``env()`` of the job's ``spec.env.id`` (a module path)."""
    if job.spec.env.id is None:
        raise SystemExit("selfplay: spec.env.id must name a PettingZoo module (pettingzoo.classic.tictactoe_v3)")
    module = importlib.import_module(job.spec.env.id)
    return module.env  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Game:
    """A two-player game with Discrete, masked moves, as the learner sees it."""

    make_env: Callable[[], Any]
    first_seat: str
    parts: ObsParts
    action_space: spaces.Discrete


def game_of(job: RolloutJob, who: str = "selfplay") -> Game:
    """The job's game, checked: Discrete actions and an ``action_mask`` in the observations."""
    make_env = env_maker(job)
    probe = make_env()
    seat = probe.possible_agents[0]
    space = probe.action_space(seat)
    parts = obs_parts(probe.observation_space(seat), space)
    if not isinstance(space, spaces.Discrete) or not parts.masked:
        raise SystemExit(f"{who}: the game must have Discrete actions and an action_mask in its observations")
    return Game(make_env, seat, parts, space)


def main_ppo(job: RolloutJob, game: Game, who: str = "selfplay") -> PPO:
    """PPO for the job's policy ``main`` (the job's policies must be ``main`` and ``main_v1``)."""
    from rolloutfleet import build_policy_models

    models = build_policy_models(job)  # with spec.league, also the opponent's slots (main_v1#0, ...)
    declared = sorted(job.spec.multi_agent.policies) if job.spec.multi_agent else sorted(models)
    if set(declared) != {TRAINED, SNAPSHOT}:
        raise SystemExit(f"{who}: the job's policies must be {TRAINED!r} and {SNAPSHOT!r}, not {declared}")
    config = PPOConfig(lr=3e-4, ent_coef=0.01, epochs=4)
    return PPO(models[TRAINED], game.action_space, config, inputs=game.parts.batch_input)


def add_learning_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the PPO loop (:func:`ppo_updates`), its budget and its evaluation."""
    parser.add_argument("manifest", help="the job's RolloutJob YAML (policies main and main_v1)")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--eval-games", type=int, default=400)
    parser.add_argument("--eval-every", type=int, default=5, help="updates between evaluations")
    parser.add_argument("--steps-per-update", type=int, default=4096, help="rows of main per PPO update")
    parser.add_argument("--max-policy-lag", type=int, default=2, help="drop rows sampled with older weights than this")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds of learning before giving up")
    parser.add_argument("--env-steps", type=int, default=0, help="stop after this many rows of main (0: no limit)")
    parser.add_argument("--save", help="write main's final state_dict here (torch.save)")
    parser.add_argument("--seed", type=int, default=0)


@dataclass
class Progress:
    """Where the PPO loop is: updates made, rows of main consumed, main's weights version."""

    seq_no: int
    started: float = field(default_factory=time.monotonic)
    updates: int = 0
    steps: int = 0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def ppo_updates(
    consumer: Any, ppo: PPO, publish: Any, seq_no: int, args: argparse.Namespace, who: str = "selfplay"
) -> Iterator[Progress]:
    """PPO on main's rows as they come, main's weights published after each update; yields
    after each update until ``--time-limit`` or ``--env-steps`` (rows of main consumed)."""
    progress = Progress(seq_no)
    while progress.elapsed < args.time_limit and not 0 < args.env_steps <= progress.steps:
        batch = consumer.get(min_steps=args.steps_per_update, timeout=60.0)
        if batch is None or len(batch) == 0:
            print(f"{who}: no experience of main for 60 s; are the workers running?", file=sys.stderr, flush=True)
            continue
        progress.steps += len(batch)
        fresh = batch["weights_seq_no"] >= progress.seq_no - args.max_policy_lag
        if not fresh.any():
            continue
        ppo.update(in_episode_order(SampleBatch(batch).rows(fresh)))
        progress.seq_no = publish.publish(ppo.model)
        progress.updates += 1
        yield progress


def budget_line(args: argparse.Namespace) -> str:
    """``600 s`` or ``600 s / 400000 rows of main``: what the loop stopped at."""
    return f"{args.time_limit:.0f} s" + (f" / {args.env_steps} rows of main" if args.env_steps else "")


def main(argv: list[str] | None = None) -> int:
    from rolloutfleet import BatchConsumer, WeightPublisher

    parser = argparse.ArgumentParser(description="Train a turn-based game's policy 'main' by self-play.")
    add_learning_arguments(parser)
    parser.add_argument("--target-win-rate", type=float, default=0.85)
    parser.add_argument("--max-loss-rate", type=float, default=0.10)
    parser.add_argument("--snapshot-every", type=int, default=10, help="updates between copies of main into main_v1")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    game = game_of(job)
    ppo = main_ppo(job, game)
    model = ppo.model
    publish = WeightPublisher(args.redis, job.name, namespace=job.namespace, policy=TRAINED)
    snapshot = WeightPublisher(args.redis, job.name, namespace=job.namespace, policy=SNAPSHOT)
    consumer = BatchConsumer(args.redis, job.name, namespace=job.namespace, group="selfplay-learner", policy=TRAINED)
    seq_no = publish.publish(model)
    baseline = evaluate(game.make_env, lambda obs, rng: random_player(obs, rng), args.eval_games, args.seed)
    print(f"selfplay: {job.name}: a random player against a random player {baseline['all']}", flush=True)
    learned = False
    for progress in ppo_updates(consumer, ppo, publish, seq_no, args):
        if progress.updates % args.snapshot_every == 0:
            snapshot.publish(model)
        if progress.updates % args.eval_every:
            continue
        results = evaluate(
            game.make_env, model_player(model, game.parts), args.eval_games, args.seed + progress.updates
        )
        print(
            f"selfplay: {progress.steps:>8} rows of main  {progress.elapsed:>5.0f} s  update {progress.updates:>4}  "
            f"weights v{progress.seq_no}  vs random: {results['all']}  "
            f"(first seat won {results[game.first_seat].win_rate:.0%})",
            flush=True,
        )
        overall = results["all"]
        if overall.win_rate >= args.target_win_rate and overall.loss_rate <= args.max_loss_rate:
            print(
                f"selfplay: learned: {overall} against a random player after {progress.steps} rows of main, "
                f"{progress.elapsed:.0f} s"
            )
            learned = True
            break
    if args.save:
        torch.save(model.state_dict(), args.save)
    if not learned:
        print(f"selfplay: not learned within {budget_line(args)}", file=sys.stderr)
    return 0 if learned else 1


if __name__ == "__main__":
    sys.exit(main())
