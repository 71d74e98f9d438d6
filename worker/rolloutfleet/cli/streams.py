"""``rolloutfleet consume`` and ``rolloutfleet streams``: look at a job's stream.

    rolloutfleet consume --redis redis://127.0.0.1:6379/0 --job cartpole --count 10 --output batches.npz
    rolloutfleet consume --redis redis://127.0.0.1:6379/0 --job cartpole --count 10 --output b.npz --group learner
    rolloutfleet streams --redis redis://127.0.0.1:6379/0

Here: the parsers (``add_consume_parser(commands)``, ``add_streams_parser(commands)``, each
setting ``run`` to ``(args) -> exit code``) and the checks of the arguments. The commands
themselves are :mod:`rolloutfleet.cli.consume` and :mod:`rolloutfleet.cli.stream_table`,
imported when one runs, so importing this module stays cheap (no numpy, redis or rich).
The password comes from ``$ROLLOUTFLEET_REDIS_PASSWORD``, never from the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rolloutfleet.cli.npz_output import npz_path
from rolloutfleet.cli.paths import output_problem
from rolloutfleet.cli.preflight import unreachable
from rolloutfleet.transport.redis.keys import DEFAULT_GROUP


def add_consume_parser(commands: Any) -> argparse.ArgumentParser:
    """``consume`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "consume",
        help="read N batches of a job and save them to a .npz file",
        description="Without --group: reads the stream without a consumer group, from its oldest entry on "
        "(nothing acknowledged, nothing left behind: the fleet never waits for it). With --group: reads as "
        "that consumer group, a learner's, acknowledging each batch once saved; beside a learner of the same "
        "group it takes batches away from it.",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument("--job", required=True, help="the RolloutJob's name")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--policy", default=None, help="a multi-agent job's policy id: read that policy's stream")
    parser.add_argument("--count", type=int, required=True, help="batches (stream entries) to read")
    parser.add_argument("--output", required=True, help="the .npz file to write (.npz is appended when missing)")
    parser.add_argument(
        "--group",
        default=None,
        help=f"read as this consumer group (learners use {DEFAULT_GROUP!r}); default: no group, only look",
    )
    parser.add_argument("--consumer", default=None, help="consumer name within --group (default: host-pid)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="give up after this many seconds without data (or with Redis unavailable)",
    )
    parser.set_defaults(run=run_consume)
    return parser


def add_streams_parser(commands: Any) -> argparse.ArgumentParser:
    """``streams`` on the sub-parsers object of the main parser."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "streams",
        help="per job (per policy for multi-agent jobs): stream length, groups (consumers, last read, pending, "
        "lag), dead letters, weights version, which group holds the workers back since when, and the newest "
        "evaluation results (spec.evaluation)",
    )
    parser.add_argument(
        "--redis", required=True, help="redis:// or rediss:// URL (password: $ROLLOUTFLEET_REDIS_PASSWORD)"
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="give up after this many seconds with Redis unavailable"
    )
    parser.add_argument(
        "--output",
        choices=("table", "json"),
        default="table",
        help="table (whole names, never cut: as wide as it needs when not on a terminal) or json (one object: "
        "streams with their groups, holds, refused weights, evaluation lines)",
    )
    parser.set_defaults(run=run_streams)
    return parser


def run_consume(args: argparse.Namespace) -> int:
    """Read ``args.count`` entries and save the concatenated columns plus per-row
    ``worker_index`` (from each entry's metadata). ``weights_seq_no`` is the rows' own
    column (the entry's metadata only for batches built without one)."""
    if args.count < 1:
        print(f"rolloutfleet consume: --count must be >= 1, got {args.count}", file=sys.stderr)
        return 2
    if args.consumer is not None and args.group is None:
        print("rolloutfleet consume: --consumer names a consumer of --group; give --group too", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print(f"rolloutfleet consume: --timeout must be > 0 s, got {args.timeout:g}", file=sys.stderr)
        return 2
    given, args.output = Path(args.output), npz_path(args.output)  # what numpy would write: the path reported
    if (problem := output_problem(given) or output_problem(args.output)) is not None:
        print(f"rolloutfleet consume: --output: {problem}", file=sys.stderr)
        return 2
    if (code := unreachable("consume", args.redis, args.timeout)) is not None:
        return code
    from rolloutfleet.cli.consume import consume  # numpy, redis: once the command runs

    return consume(args)


def run_streams(args: argparse.Namespace) -> int:
    """Print one row per job stream found in the Redis at ``args.redis``."""
    if not args.timeout > 0:
        print(f"rolloutfleet streams: --timeout must be > 0 s, got {args.timeout:g}", file=sys.stderr)
        return 2
    if (code := unreachable("streams", args.redis, args.timeout)) is not None:
        return code
    from rolloutfleet.cli.stream_table import show_streams  # redis, rich: once the command runs

    return show_streams(args)
