"""A YAML parse error in one line (PyYAML's span several, with the offending text quoted)."""

from __future__ import annotations

import yaml


def yaml_problem(exc: yaml.YAMLError) -> str:
    """``line 1, column 2: found unexpected end of stream`` for a marked error, else its first line.

    >>> try:
    ...     yaml.safe_load('"')
    ... except yaml.YAMLError as exc:
    ...     print(yaml_problem(exc))
    line 1, column 2: found unexpected end of stream (while scanning a quoted scalar)
    """
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark, problem = exc.problem_mark, " ".join(str(exc.problem or "").split())
        context = f" ({' '.join(exc.context.split())})" if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return " ".join(first.split())
