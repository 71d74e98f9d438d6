"""Every flag checked before any work, in one line naming the flag (exit 2); argparse's own
errors are one line too. In-process: ``main(argv)`` with stderr captured."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolloutfleet.cli.flags import flag_problem
from rolloutfleet.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
CARTPOLE = str(ROOT / "examples/cartpole.yaml")


def one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code  # type: ignore[assignment]
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", CARTPOLE, "--duration", "-1"], "--duration"),
        (["run", CARTPOLE, "--duration", "nan"], "--duration"),
        (["run", CARTPOLE, "--duration", "0"], "--duration"),
        (["run", CARTPOLE, "--replicas", "-2"], "--replicas"),
        (["run", CARTPOLE, "--redis-timeout", "-5"], "--redis-timeout"),
        (["run", CARTPOLE, "--redis-timeout", "inf"], "--redis-timeout"),
        (["sample", CARTPOLE, "--steps", "0", "--output", "x.npz"], "--steps"),
        (["sample", CARTPOLE, "--steps", "10", "--output", ""], "--output"),
        (["sample", CARTPOLE, "--steps", "10", "--output", "x.npz", "--num-workers", "0"], "--num-workers"),
        (["sample", CARTPOLE, "--steps", "10", "--output", "x.npz", "--worker-index", "-1"], "--worker-index"),
        (["sample", CARTPOLE, "--steps", "ten", "--output", "x.npz"], "--steps"),
        (["consume", "--redis", "redis://127.0.0.1:1/0", "--job", "j", "--count", "0", "--output", "x"], "--count"),
        (["consume", "--redis", "redis://127.0.0.1:1/0", "--job", "", "--count", "1", "--output", "x"], "--job"),
        (
            [
                "consume",
                "--redis",
                "redis://127.0.0.1:1/0",
                "--job",
                "j",
                "--count",
                "1",
                "--output",
                "x",
                "--timeout",
                "-1",
            ],
            "--timeout",
        ),
        (
            [
                "consume",
                "--redis",
                "redis://127.0.0.1:1/0",
                "--job",
                "j",
                "--count",
                "1",
                "--output",
                "x",
                "--namespace",
                "",
            ],
            "--namespace",
        ),
        (["streams", "--redis", "redis://127.0.0.1:1/0", "--timeout", "0"], "--timeout"),
        (
            [
                "consume",
                "--redis",
                "redis://127.0.0.1:1/0",
                "--job",
                "j",
                "--count",
                "1",
                "--output",
                "x",
                "--group",
                " ",
            ],
            "--group",
        ),
        (["sample", CARTPOLE, "--steps", "10", "--output", "."], "--output"),
        (["sample", CARTPOLE, "--steps", "10"], "--output"),  # required
        (["run", CARTPOLE, "--bogus"], "--bogus"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert flag in one_line_error(argv, capsys)


def test_a_missing_learner_command_is_one_line_before_any_worker_starts(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(["run", CARTPOLE, "--no-status", "--", "no-such-learner-command", "--x"], capsys)
    assert "no-such-learner-command" in line and "not found" in line
    line = one_line_error(["run", CARTPOLE, "--", str(ROOT / "README.md")], capsys)  # not executable
    assert "README.md" in line


def test_flag_problem_is_none_for_good_flags() -> None:
    args = build_parser().parse_args(["run", CARTPOLE, "--duration", "2.5", "--replicas", "0"])
    assert flag_problem(args) is None
    args = build_parser().parse_args(["sample", CARTPOLE, "--steps", "5", "--output", "o.npz"])
    assert flag_problem(args) is None
