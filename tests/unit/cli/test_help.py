"""The CLI's own contract, the first commands a newcomer types: ``rolloutfleet --help``, ``-h``,
``--version`` and every subcommand's ``--help``, found by walking the parser (a command
added later is checked without a line here). argparse expands each help text with ``%``
formatting, so a stray ``%`` ("95 % CI") crashes ``--help`` with a ValueError: each
command's help is rendered for real."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from rolloutfleet.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's argv prefix, the top level (``()``) first, subcommands of subcommands too."""
    paths = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += command_paths(sub, (*path, name))
    return paths


COMMANDS = command_paths(build_parser())


def test_the_walk_finds_every_command_the_readme_names() -> None:
    names = {path[0] for path in COMMANDS if path}
    assert {"sample", "worker", "run", "validate", "consume", "streams", "record", "replay", "evaluate"} <= names


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "rolloutfleet")
def test_every_help_prints_usage_and_exits_0(
    path: tuple[str, ...], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*path, flag])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: rolloutfleet {' '.join(path)}".rstrip()), out[:200]
    assert "Traceback" not in out


def test_version_is_the_installed_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"rolloutfleet {version('rolloutfleet')}"


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--version"], ["evaluate", "--help"]])
def test_the_installed_command_answers_the_first_commands(argv: list[str]) -> None:
    """The console script itself, as a newcomer runs it (not the function)."""
    script = Path(sys.executable).with_name("rolloutfleet")
    done = subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "rolloutfleet" in done.stdout


def test_no_command_points_to_help_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "rolloutfleet --help" in err
