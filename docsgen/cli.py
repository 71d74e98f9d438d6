"""The command-line reference from the argparse parsers themselves: every command, its
arguments with their defaults and help, as ``--help`` would print them."""

from __future__ import annotations

import argparse


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _name(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        takes = action.nargs != 0
        return names + (f" `{action.metavar or action.dest.upper()}`" if takes else "")
    return f"`{action.metavar or action.dest}`"


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | help |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        default = "" if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else action.default
        extra = []
        if action.required and action.option_strings:
            extra.append("required")
        if action.choices:
            extra.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if action.option_strings and action.nargs == 0:
            default = ""
        text = "; ".join([*(x for x in [action.help] if x), *extra])
        rows.append(f"| {_name(action)} | {f'`{_cell(default)}`' if default != '' else ''} | {_cell(text)} |")
    for group in parser._mutually_exclusive_groups:
        options = ", ".join(f"`{a.option_strings[0]}`" for a in group._group_actions if a.option_strings)
        rows += ["", f"Exactly one of {options} is required." if group.required else f"At most one of {options}."]
    return rows if len(rows) > 2 else []


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def render(parsers: list[argparse.ArgumentParser]) -> str:
    """The Markdown page for these top-level parsers and their subcommands."""
    lines = [
        "# Command line",
        "",
        "Generated at build time from the programs' own argument parsers. `rolloutfleet worker` takes",
        "its settings from `ROLLOUTFLEET_*` environment variables: [The worker process](../guides/worker.md).",
        "",
    ]
    for parser in parsers:
        lines += [f"## `{parser.prog}`", "", _cell(parser.description or ""), "", *_arguments(parser), ""]
        for name, help_text, sub in _subcommands(parser):
            lines += [f"### `{parser.prog} {name}`", "", _cell(sub.description or help_text), ""]
            lines += [*_arguments(sub), ""]
    return "\n".join(lines)
