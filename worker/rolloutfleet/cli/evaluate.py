"""``rolloutfleet evaluate``: a job's current weights version, judged here (docs/evaluation.md).

    rolloutfleet evaluate examples/cartpole.yaml --redis redis://127.0.0.1:6379/0 --episodes 20

The password comes from ``$ROLLOUTFLEET_REDIS_PASSWORD``. Prints one line per episode
(``--quiet``: none) and the summary; ``--json``: the summary as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from rolloutfleet.cli.preflight import unreachable


def add_evaluate_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "evaluate",
        help="play whole episodes of a job's current weights version and print the mean return with a 95 %% CI",
        description="Play spec.evaluation.episodes (or --episodes) episodes of the job's current weights version "
        "with its evaluation settings and seeds (as its evaluation workers do); writes nothing to Redis.",
    )
    parser.add_argument("manifest", help="the job's RolloutJob manifest (YAML)")
    parser.add_argument("--redis", default=None, help="redis:// URL (default: spec.redis.url; password: "
                        "$ROLLOUTFLEET_REDIS_PASSWORD)")  # fmt: skip
    parser.add_argument("--episodes", type=int, default=None, help="episodes to play (default: spec.evaluation's)")
    parser.add_argument("--quiet", action="store_true", help="no line per episode")
    parser.add_argument("--json", action="store_true", help="end with the summary as one JSON line")
    parser.add_argument("--timeout", type=float, default=30.0, help="give up when Redis is unreachable this long")
    parser.set_defaults(run=_evaluate)
    return parser


def _evaluate(args: argparse.Namespace) -> int:
    from rolloutfleet.evaluation.evaluate_command import NothingToEvaluate, evaluate_current
    from rolloutfleet.spec.job import RolloutJob

    if args.episodes is not None and args.episodes < 1:
        print("rolloutfleet evaluate: --episodes must be >= 1", file=sys.stderr)
        return 2
    job = RolloutJob.from_file(args.manifest)  # SpecError: one line from main
    url = args.redis or job.spec.redis.url
    if (code := unreachable("evaluate", url, args.timeout)) is not None:
        return code

    def say(index: int, episode_return: float, length: int) -> None:
        if not args.quiet:
            print(f"episode {index}: return {episode_return:.6g}, length {length}", flush=True)

    password = os.environ.get("ROLLOUTFLEET_REDIS_PASSWORD") or None
    from rolloutfleet.fleet.env_watchdog import watch_command

    watchdog = watch_command("evaluate", job.spec.env)  # a stuck env call ends it (exit 3), as a worker
    try:
        summary = evaluate_current(job, url, password, args.episodes, say)
    except NothingToEvaluate as exc:
        print(f"rolloutfleet evaluate: {exc}", file=sys.stderr)
        return 1
    finally:
        watchdog.close()
    print(summary.describe())
    if args.json:
        print(json.dumps(summary.to_json()))
    return 0
