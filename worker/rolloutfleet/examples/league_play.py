"""Learning against a league: policy ``main`` plays frozen snapshots of itself, picked game by game.

``examples/tictactoe-league.yaml`` is the self-play job of :mod:`rolloutfleet.examples.selfplay`
with ``spec.league``: the opponent's seat (``main_v1``) plays snapshots from the job's league.
This learner trains ``main`` with the same PPO as selfplay. Instead of copying ``main`` into
``main_v1`` it freezes ``main`` into the league every ``--snapshot-every`` updates
(:meth:`~rolloutfleet.league.store.PolicyStore.snapshot`; the first, ``main-00000``, is the
untrained ``main``, so the league has a member from the start). After each snapshot, and
every ``--plan-every`` updates, it publishes a plan from a matchmaker (``--matchmaker pfsp``:
the snapshots main loses to come most often; ``uniform``: all alike). Run it beside a fleet::

    rolloutfleet run examples/tictactoe-league.yaml -- \\
        python -m rolloutfleet.examples.league_play examples/tictactoe-league.yaml --time-limit 600

The workers write every finished game to the league's results stream. After each update the
learner adds the new ones to an Elo table and to main's record against each snapshot: what
:meth:`~rolloutfleet.league.store.PolicyStore.ratings` and ``league`` replay from the stream,
kept as it grows, because a replay of the ~100 000 games the stream keeps takes 2-3 s of a
2-core machine. (A learner away longer than the stream keeps games would miss some.) Games
played before a worker read the first plan show as ``main_v1``, the opponent's own weights.
It prints ``main`` against a random player (:func:`~rolloutfleet.examples.selfplay.evaluate`,
outside the fleet) every ``--eval-every`` updates and the Elo table every ``--table-every``.

It runs to ``--time-limit`` (or ``--env-steps`` rows of main), then prints main's Elo margin
over the first snapshot and main's result against a random player. Exit 0 when that margin
is at least ``--min-margin`` Elo, else 1. The default, 200, means main is expected to score
76 % against its untrained self; the 10-minute demo ends near 600.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

import torch

from rolloutfleet import RolloutJob
from rolloutfleet.examples.seats import SNAPSHOT, TRAINED
from rolloutfleet.examples.selfplay import (
    Progress,
    add_learning_arguments,
    budget_line,
    evaluate,
    game_of,
    main_ppo,
    model_player,
    ppo_updates,
)
from rolloutfleet.league.matchmaking import League, Matchmaker, PrioritizedFictitiousSelfPlay, Record, Uniform
from rolloutfleet.league.ratings import Elo, pair_score
from rolloutfleet.league.records import MatchResult
from rolloutfleet.league.store import PolicyStore

WHO = "league_play"
MATCHMAKERS: dict[str, type[Matchmaker]] = {"pfsp": PrioritizedFictitiousSelfPlay, "uniform": Uniform}


def snapshot_name(update: int) -> str:
    """The league name of ``main`` frozen after ``update`` updates.

    >>> snapshot_name(0), snapshot_name(120)
    ('main-00000', 'main-00120')
    """
    return f"{TRAINED}-{update:05d}"


FIRST = snapshot_name(0)


class ResultsBook:
    """The league's results as they arrive: an Elo table in the stream's order, as
    :meth:`PolicyStore.ratings` replays it, and main's record against each opponent, as
    :meth:`PolicyStore.league` counts it.

    >>> book = ResultsBook()
    >>> book.add([MatchResult({"player_1": "main", "player_2": "main-00000"}, {"player_1": 1.0, "player_2": -1.0})])
    >>> book.games, book.records["main-00000"].wins, round(book.margin("main-00000"))
    (1, 1, 32)
    """

    def __init__(self, main: str = TRAINED) -> None:
        self.main = main
        self.elo = Elo()
        self.records: dict[str, Record] = {}
        self.games = 0
        self.last_id = "-"

    def add(self, results: Iterable[MatchResult]) -> None:
        for result in results:
            returns = result.policy_returns()
            self.elo.record(returns)
            self.games += 1
            if self.main not in returns:
                continue
            for opponent, value in returns.items():
                if opponent != self.main:
                    record = self.records.get(opponent, Record())
                    self.records[opponent] = record.add(pair_score(returns[self.main], value))

    def read(self, store: PolicyStore) -> int:
        """Add the results written since the last read; how many."""
        start = "-" if self.last_id == "-" else f"({self.last_id}"  # "(": after that entry
        entries = store.results(start)
        if entries:
            self.last_id = entries[-1][0]
        self.add(result for _, result in entries)
        return len(entries)

    def league(self, snapshots: Sequence[str]) -> League:
        return League(main=self.main, snapshots=tuple(snapshots), stats=dict(self.records))

    def margin(self, snapshot: str) -> float | None:
        """Main's rating minus ``snapshot``'s; None until they have played."""
        if self.main not in self.elo.ratings or snapshot not in self.elo.ratings:
            return None
        return self.elo.rating(self.main) - self.elo.rating(snapshot)


def verdict(margin: float | None, min_margin: float) -> tuple[bool, str]:
    """Whether main out-rates the first snapshot by ``min_margin`` Elo, and the line that says so.

    >>> verdict(250.0, 200.0)
    (True, 'main-00000 out-rated by 250 Elo (>= 200 asked)')
    >>> verdict(None, 200.0)[0]
    False
    """
    if margin is None:
        return False, f"main and {FIRST} never played each other: no margin"
    met = margin >= min_margin
    return met, f"{FIRST} out-rated by {margin:.0f} Elo ({'>=' if met else '<'} {min_margin:.0f} asked)"


def table_lines(elo: Elo, top: int, always: Sequence[str] = (TRAINED, FIRST)) -> list[str]:
    """The Elo table's ``top`` rows, best first, plus the rows of ``always`` (main, the first snapshot)."""
    rows = elo.table()
    shown = [row for i, row in enumerate(rows) if i < top or row[0] in always]
    lines = [f"  {'POLICY':<12} {'RATING':>7} {'GAMES':>8} {'W':>7} {'D':>7} {'L':>7}"]
    lines += [f"  {p:<12} {r:>7.1f} {g:>8} {w:>7} {d:>7} {lo:>7}" for p, r, g, w, d, lo in shown]
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a turn-based game's policy 'main' against a league.")
    add_learning_arguments(parser)
    parser.add_argument("--snapshot-every", type=int, default=10, help="updates between snapshots into the league")
    parser.add_argument("--plan-every", type=int, default=2, help="updates between plans (and after each snapshot)")
    parser.add_argument("--matchmaker", choices=sorted(MATCHMAKERS), default="pfsp")
    parser.add_argument("--table-every", type=int, default=50, help="updates between prints of the Elo table")
    parser.add_argument("--top", type=int, default=8, help="rows of the Elo table printed")
    parser.add_argument("--min-margin", type=float, default=200.0, help="Elo main must beat the first snapshot by")
    args = parser.parse_args(argv)
    for flag in ("snapshot_every", "plan_every", "table_every", "eval_every", "top"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    return args


def main(argv: list[str] | None = None) -> int:
    from rolloutfleet import BatchConsumer, WeightPublisher

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    if job.spec.league is None or job.spec.league.opponent != SNAPSHOT:
        raise SystemExit(f"{WHO}: {args.manifest} needs spec.league with opponent {SNAPSHOT!r}")
    game = game_of(job, WHO)
    ppo = main_ppo(job, game, WHO)
    model = ppo.model
    store = PolicyStore(args.redis, job.name, job.namespace)
    if store.snapshots():
        raise SystemExit(f"{WHO}: the league of {job.namespace}/{job.name} is not empty; start from a fresh Redis")
    publish = WeightPublisher(args.redis, job.name, namespace=job.namespace, policy=TRAINED)
    consumer = BatchConsumer(args.redis, job.name, namespace=job.namespace, group="league-learner", policy=TRAINED)
    matchmaker = MATCHMAKERS[args.matchmaker]()
    book = ResultsBook()
    snapshots = [store.snapshot(FIRST, model, step=0).name]
    plan = store.publish_plan({FIRST: 1.0})
    seq_no = publish.publish(model)
    print(f"{WHO}: {job.name}: league of {FIRST}; {args.matchmaker} plans; stops at {budget_line(args)}", flush=True)
    progress: Progress | None = None
    for progress in ppo_updates(consumer, ppo, publish, seq_no, args, WHO):
        book.read(store)
        updates = progress.updates
        if updates % args.snapshot_every == 0:
            snapshots.append(store.snapshot(snapshot_name(updates), model, parent=snapshots[-1], step=updates).name)
        if updates % args.snapshot_every == 0 or updates % args.plan_every == 0:
            plan = store.publish_plan(dict(zip(snapshots, matchmaker.weights(book.league(snapshots)), strict=True)))
            # the job's status shows these (kubectl get rj -o wide)
            store.publish_standings(TRAINED, ratings=book.elo, matches=book.games, snapshots=len(snapshots))
        if updates % args.eval_every == 0:
            results = evaluate(game.make_env, model_player(model, game.parts), args.eval_games, args.seed + updates)
            margin = book.margin(FIRST)
            print(
                f"{WHO}: {progress.steps:>8} rows of main  {progress.elapsed:>5.0f} s  update {updates:>4}  "
                f"{len(snapshots):>3} snapshots  {book.games:>7} games  "
                f"margin {'-' if margin is None else f'{margin:+.0f}'}  vs random: {results['all']}",
                flush=True,
            )
        if updates % args.table_every == 0:
            favourite = max(plan, key=plan.__getitem__)
            print(f"{WHO}: Elo after {book.games} games (plan's favourite {favourite} {plan[favourite]:.0%}):")
            print("\n".join(table_lines(book.elo, args.top)), flush=True)
    book.read(store)
    if args.save:
        torch.save(model.state_dict(), args.save)
    progress = progress or Progress(seq_no)
    print(
        f"{WHO}: stopped at {budget_line(args)}: {progress.updates} updates, {progress.steps} rows of main, "
        f"{progress.elapsed:.0f} s, {len(snapshots)} snapshots"
    )
    final = evaluate(game.make_env, model_player(model, game.parts), args.eval_games, args.seed + 1_000_003)
    print(f"{WHO}: Elo from {book.games} games:")
    print("\n".join(table_lines(book.elo, args.top)))
    met, line = verdict(book.margin(FIRST), args.min_margin)
    print(f"{WHO}: main {book.elo.rating(TRAINED):.0f}, {FIRST} {book.elo.rating(FIRST):.0f}: {line}")
    print(f"{WHO}: main against a random player: {final['all']}", flush=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
