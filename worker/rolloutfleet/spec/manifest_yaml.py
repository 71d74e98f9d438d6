"""Manifests read from YAML as kubectl reads them, and a YAML error in one line.

kubectl (go-yaml) reads ``1e3`` and ``1.5e1`` as numbers where PyYAML's YAML 1.1 rules
want a dot and a signed exponent (``1.0e+3``) and read a string: the API server would
take ``numEnvs: 1e3`` and ``validate`` would refuse it. :class:`ManifestLoader` adds
go-yaml's float form; everything else (``yes``/``off`` booleans, ``0x10``) already agrees.
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class ManifestLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with go-yaml's floats (``1e3``, ``1.5e1``, ``.5``)."""


ManifestLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"),
    list("-+.0123456789"),
)


def load_documents(text: str) -> list[Any]:
    r"""The YAML documents of ``text`` (``yaml.YAMLError`` when it is not YAML).

    >>> load_documents("a: 1e3\nb: 10\nc: yes\n---\nd: 1.5e1")
    [{'a': 1000.0, 'b': 10, 'c': True}, {'d': 15.0}]
    """
    return list(yaml.load_all(text, Loader=ManifestLoader))


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
