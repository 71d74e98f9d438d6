"""`rolloutfleet streams` and `consume` called in-process, as their parsers build them."""

from __future__ import annotations

import argparse

from rolloutfleet.cli.streams import add_consume_parser, add_streams_parser


def run_cli(*argv: str) -> int:
    """The exit code of ``rolloutfleet ARGV...`` for the streams/consume commands."""
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    add_consume_parser(commands)
    add_streams_parser(commands)
    args = parser.parse_args(argv)
    return int(args.run(args))
