"""The command-line page is the parsers' own: every command, option, default and help."""

from __future__ import annotations

import argparse

from docsgen import cli
from rolloutfleet.cli.main import build_parser
from rolloutfleet_operator.__main__ import build_parser as operator_parser


def test_every_command_and_option_of_both_programs_is_on_the_page() -> None:
    parsers = [build_parser(), operator_parser()]
    page = cli.render(parsers)
    for parser in parsers:
        assert f"## `{parser.prog}`" in page
        for action in parser._actions:
            for option in action.option_strings if not isinstance(action, argparse._HelpAction) else ():
                assert f"`{option}`" in page, option
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"### `{parser.prog} {name}`" in page
                    for sub_action in sub._actions:
                        for option in (
                            sub_action.option_strings if not isinstance(sub_action, argparse._HelpAction) else ()
                        ):
                            assert f"`{option}`" in page, (name, option)
    redis_timeout = next(line for line in page.splitlines() if line.startswith("| `--redis-timeout`"))
    assert "`30.0`" in redis_timeout and "give up" in redis_timeout
    log_level = next(line for line in page.splitlines() if "`--log-level`" in line and "`debug`" in line)
    assert "`info`" in log_level
    assert "Exactly one of `--all-namespaces`, `--namespace` is required." in page


def test_a_new_option_appears_with_its_help_and_choices() -> None:
    parser = argparse.ArgumentParser(prog="tool", description="A tool.")
    commands = parser.add_subparsers()
    go = commands.add_parser("go", help="go somewhere")
    go.add_argument("where", help="a place")
    go.add_argument("--speed", choices=["slow", "fast"], default="slow", help="how | fast")
    go.add_argument("--dry-run", action="store_true", help="say, do not do")
    page = cli.render([parser])
    assert "### `tool go`" in page and "go somewhere" in page
    assert "| `where` |  | a place |" in page
    assert "| `--speed` `SPEED` | `slow` | how \\| fast; one of `slow`, `fast` |" in page
    assert "| `--dry-run` |  | say, do not do |" in page
