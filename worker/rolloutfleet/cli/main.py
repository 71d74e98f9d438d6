"""``rolloutfleet``: the command line.

rolloutfleet sample examples/cartpole.yaml --steps 10000 --output cartpole.npz
rolloutfleet sample examples/multiagent.yaml --steps 2000 --output tag.npz   # red/obs, blue/agent_id, ...
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rolloutfleet.cli.evaluate import add_evaluate_parser
from rolloutfleet.cli.flags import OneLineParser, command_problem, flag_problem
from rolloutfleet.cli.league import add_league_parser
from rolloutfleet.cli.record import add_record_parser, add_replay_parser
from rolloutfleet.cli.streams import add_consume_parser, add_streams_parser
from rolloutfleet.spec.job import RolloutJob, SpecError


def watch_command(command: str, spec: Any) -> Any:
    """:func:`rolloutfleet.fleet.env_watchdog.watch_command`, imported when a command needs it."""
    from rolloutfleet.fleet.env_watchdog import watch_command as watch

    return watch(command, spec)


def _sample(args: argparse.Namespace) -> int:
    from rolloutfleet.cli.paths import output_problem

    if not 0 <= args.worker_index < (args.num_workers or args.worker_index + 1):
        return _bad("sample", f"--worker-index must be within 0 and --num-workers - 1, got {args.worker_index}")
    from rolloutfleet.cli.npz_output import npz_path

    job = RolloutJob.from_file(args.manifest)
    # A directory given is a mistake, not "<dir>.npz" (numpy's name for it).
    if (problem := output_problem(Path(args.output)) or output_problem(npz_path(args.output))) is not None:
        return _bad("sample", f"--output: {problem}")

    from rolloutfleet.data.batch import SampleBatch
    from rolloutfleet.data.multiagent_batch import MultiAgentBatch
    from rolloutfleet.fleet.runner_factory import make_env_runner
    from rolloutfleet.inference.cpu_threads import limit_cpu_threads
    from rolloutfleet.sampling.heap import keep_freed_memory

    limit_cpu_threads(job.spec.policy.num_threads)  # as a worker does
    keep_freed_memory()
    watchdog = watch_command("sample", job.spec.env)  # a stuck env call ends it (exit 3), as a worker
    with make_env_runner(job, worker_index=args.worker_index, num_workers=args.num_workers) as runner:
        batches: list[Any] = []
        steps = 0  # rows (single-agent) or env steps (multi-agent)
        while steps < args.steps:
            batch = (
                runner.sample(num_timesteps=args.steps - steps)
                if job.spec.sampling.batch_mode == "truncate_episodes"
                else runner.sample()
            )
            batches.append(batch)
            steps += batch.env_steps()
        metrics = runner.get_metrics()
    watchdog.close()
    if job.spec.multi_agent is not None:
        # "<policy_id>/<column>", agent_id (text) included; every policy, trained or not.
        multi = MultiAgentBatch.concat(batches)
        arrays = multi.to_npz_arrays()
        rows = f"{multi.agent_steps()} agent steps over {multi.env_steps()} env steps " + (
            "(" + ", ".join(f"{policy}: {len(part)}" for policy, part in multi.items()) + ")"
        )
    else:
        result = SampleBatch.concat(batches)
        arrays = dict(result.items())
        rows = f"{len(result)} rows"
    from rolloutfleet.cli.npz_output import OutputError, write_npz

    try:
        # Plain arrays only: numpy alone reads it back, with allow_pickle=False.
        output = write_npz(args.output, arrays, compress=args.compress)
    except OutputError as exc:
        print(f"rolloutfleet sample: {exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {rows} ({metrics['num_episodes']} episodes ended, "
        f"return mean {metrics['episode_return_mean']:.1f}, {metrics['env_steps_per_s']:,.0f} env steps/s) to {output}"
    )
    return 0


def _bad(command: str, message: str) -> int:
    """A bad argument: one line on stderr, exit status 2 (as argparse's own errors)."""
    print(f"rolloutfleet {command}: {message}", file=sys.stderr)
    return 2


def _validate(args: argparse.Namespace) -> int:
    job = RolloutJob.from_file(args.manifest)
    if args.spec_only:
        print(f"{args.manifest}: RolloutJob {job.namespace}/{job.name} is valid (sizes not checked)")
        return 0
    from rolloutfleet.sampling.sizes import check_sizes

    watchdog = watch_command("validate", job.spec.env)  # a stuck constructor ends it (exit 3)
    try:
        size = check_sizes(job)  # builds one sub-env for its spaces; SpecError names what cannot work
        if job.spec.evaluation is not None and job.spec.evaluation.env_config:
            from rolloutfleet.evaluation.episodes import EpisodePlayer

            EpisodePlayer(job).env.close()  # the evaluation env, built with its own envConfig
    except SpecError as exc:
        raise SpecError(f"{args.manifest}: {exc}") from None
    finally:
        watchdog.close()
    sizes = "multi-agent: sizes not estimated" if size is None else size.describe()
    print(f"{args.manifest}: RolloutJob {job.namespace}/{job.name} is valid ({sizes})")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from rolloutfleet.evaluation.evaluator import is_evaluator
    from rolloutfleet.evaluation.evaluator import main as evaluator_main
    from rolloutfleet.fleet.worker import main as worker_main

    if is_evaluator(os.environ):  # the operator's evaluation pods (spec.evaluation)
        return evaluator_main(os.environ, log_level=args.log_level)
    return worker_main(log_level=args.log_level)


def _run(args: argparse.Namespace) -> int:
    from rolloutfleet.cli.run import run_fleet

    return run_fleet(args)


def _installed_version() -> str:
    """The installed package's version (its metadata), as ``pip show rolloutfleet`` says it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rolloutfleet")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _add_run_parser(commands: Any) -> None:
    """``run`` on the sub-parsers object of the main parser."""
    run = commands.add_parser(
        "run",
        help="run the job's workers locally with an embedded Redis",
        description="Run spec.replicas workers on this machine. With `-- COMMAND`, run COMMAND (e.g. a learner) "
        "with ROLLOUTFLEET_REDIS_URL set, and stop the fleet when it exits.",
    )
    run.add_argument("manifest")
    run.add_argument("--redis", default=None, help="use this Redis instead of starting one")
    run.add_argument("--replicas", type=int, default=None, help="override spec.replicas")
    run.add_argument("--no-status", action="store_true", help="no live status table (log lines only)")
    run.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    run.add_argument(
        "--listen",
        default="127.0.0.1",
        metavar="IP",
        help="the address the workers' listeners bind: probes and metrics, an external job's action "
        "servers (default 127.0.0.1: nothing open to the network; 0.0.0.0: every interface)",
    )
    run.add_argument(
        "--redis-timeout",
        type=float,
        default=30.0,
        help="with --redis: give up (one line, exit 1) when it is not reachable within this many seconds",
    )
    run.set_defaults(run=_run, command=[])


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rolloutfleet", description="RL rollout workers on Kubernetes + Redis")
    parser.add_argument(
        "--log-level",
        help="python logging level (default: $ROLLOUTFLEET_LOG_LEVEL, else INFO for `worker`, WARNING for the rest)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_installed_version()}")
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    sample = commands.add_parser("sample", help="sample locally and write every column to a .npz file")
    sample.add_argument("manifest", help="a RolloutJob YAML file")
    sample.add_argument(
        "--steps", type=int, required=True, help="env steps to collect (rows; multi-agent: env steps, all agents)"
    )
    sample.add_argument("--output", required=True, help="the .npz file to write (.npz is appended when missing)")
    sample.add_argument("--worker-index", type=int, default=0)
    sample.add_argument("--num-workers", type=int, default=None)
    sample.add_argument("--compress", action="store_true", help="write a compressed .npz")
    sample.set_defaults(run=_sample)

    worker = commands.add_parser(
        "worker", help="run one worker (the container entrypoint; configured by ROLLOUTFLEET_* env)"
    )
    worker.set_defaults(run=_worker)

    _add_run_parser(commands)

    validate = commands.add_parser(
        "validate",
        help="check a manifest and name every invalid field; builds one sub-env to check model and fragment sizes",
    )
    validate.add_argument("manifest")
    validate.add_argument(
        "--spec-only", action="store_true", help="check the manifest alone: no env is built, sizes are not checked"
    )
    validate.set_defaults(run=_validate)
    add_consume_parser(commands)
    add_streams_parser(commands)
    add_record_parser(commands)
    add_replay_parser(commands)
    add_evaluate_parser(commands)
    add_league_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `rolloutfleet run JOB -- COMMAND ARGS`: everything after `--` is the command, verbatim.
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    if command:
        if args.command_name != "run":
            build_parser().error("`-- COMMAND` is only for `rolloutfleet run`")
        args.command = command
    if (problem := flag_problem(args) or command_problem(command)) is not None:
        return _bad(args.command_name, problem)
    asked = args.log_level or os.environ.get("ROLLOUTFLEET_LOG_LEVEL")
    args.log_level = log_level(args.log_level, os.environ, args.command_name)
    if args.log_level is None:
        levels = "DEBUG, INFO, WARNING, ERROR, CRITICAL"
        print(f"rolloutfleet: log level {asked!r} (--log-level or ROLLOUTFLEET_LOG_LEVEL) is not one of {levels}",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.command_name != "worker":  # the worker configures its own (JSON lines) logging
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except SpecError as exc:
        print(f"rolloutfleet: invalid manifest: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def log_level(flag: str | None, environ: Mapping[str, str], command: str) -> str | None:
    """The logging level asked for (the flag, else ``ROLLOUTFLEET_LOG_LEVEL``, else INFO for a
    worker process, whose start, waits and stop are worth a line each, and WARNING for the
    commands people run by hand); None when what was asked is no level.

    >>> log_level(None, {}, "worker"), log_level(None, {"ROLLOUTFLEET_LOG_LEVEL": "debug"}, "run")
    ('INFO', 'DEBUG')
    """
    asked = (flag or environ.get("ROLLOUTFLEET_LOG_LEVEL") or ("INFO" if command == "worker" else "WARNING")).upper()
    return asked if isinstance(logging.getLevelName(asked), int) else None


if __name__ == "__main__":
    sys.exit(main())
