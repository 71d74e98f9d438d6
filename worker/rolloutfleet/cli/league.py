"""``rolloutfleet league``: a job's league, its snapshots and the Elo table of its results.

    rolloutfleet league --redis redis://127.0.0.1:6379/0 --job tictactoe [--top 20] [--output json]

The snapshots come from the job's store and the ratings from replaying its results stream
(:mod:`rolloutfleet.league.store`), so the table is the same whoever prints it. The password
comes from ``$ROLLOUTFLEET_REDIS_PASSWORD``, never from the command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rolloutfleet.cli.preflight import unreachable


def add_league_parser(commands: Any) -> argparse.ArgumentParser:
    """``league`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "league",
        help="a job's league: its frozen snapshots (step, parent, tags, size) and the Elo ratings of its results",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument("--job", required=True, help="the RolloutJob's name")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--top", type=int, default=20, help="rows of the ratings table (best first)")
    parser.add_argument("--k", type=float, default=32.0, help="Elo's K: how far one match moves a rating")
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="give up after this many seconds with Redis unavailable"
    )
    parser.set_defaults(run=run_league)
    return parser


def run_league(args: argparse.Namespace) -> int:
    for flag, value in (("--top", args.top), ("--k", args.k), ("--timeout", args.timeout)):
        if not value > 0:
            print(f"rolloutfleet league: {flag} must be > 0, got {value:g}", file=sys.stderr)
            return 2
    if (code := unreachable("league", args.redis, args.timeout)) is not None:
        return code
    from rolloutfleet.league.store import PolicyStore  # redis, numpy: once the command runs

    with PolicyStore(args.redis, args.job, args.namespace, reconnect_timeout_s=args.timeout) as store:
        snapshots = store.snapshots()
        results = [result for _, result in store.results()]  # read once: the table and the count agree
        table = store.ratings(k=args.k, results=results)
        matches = len(results)
    rows = table.table(top=args.top)
    if args.output == "json":
        print(json.dumps({
            "snapshots": [json.loads(s.to_json()) for s in snapshots],
            "matches": matches,
            "ratings": [{"policy": p, "rating": round(r, 1), "games": g, "wins": w, "draws": d, "losses": lo}
                        for p, r, g, w, d, lo in rows],
        }))  # fmt: skip
        return 0
    print(f"league {args.namespace}/{args.job}: {len(snapshots)} snapshot(s), {matches} match(es) recorded")
    if snapshots:
        width = max(len(s.name) for s in snapshots)
        print(f"\n{'SNAPSHOT':<{width}}  {'STEP':>10}  {'SIZE':>10}  PARENT / TAGS")
        for s in snapshots:
            print(f"{s.name:<{width}}  {s.step:>10}  {s.size:>10}  {s.parent or '-'} {' '.join(s.tags)}".rstrip())
    if rows:
        width = max(len(row[0]) for row in rows)
        print(f"\n{'POLICY':<{width}}  {'RATING':>7}  {'GAMES':>6}  {'W':>5}  {'D':>5}  {'L':>5}")
        for policy, rating, games, wins, draws, losses in rows:
            print(f"{policy:<{width}}  {rating:>7.1f}  {games:>6}  {wins:>5}  {draws:>5}  {losses:>5}")
    return 0
