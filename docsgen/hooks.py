"""mkdocs hooks (``mkdocs.yml`` ``hooks:``): the generated reference pages join the site's
files at build time, so every build, ``make docs`` included, renders them from the source."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from docsgen import cli, crd, metrics


def pages() -> dict[str, str]:
    """Path under docs/ -> Markdown of each generated page."""
    from rolloutfleet.cli.main import build_parser
    from rolloutfleet_operator.__main__ import build_parser as operator_parser

    return {
        "reference/rolloutjob.md": crd.render(crd.load_schema()),
        "reference/cli.md": cli.render([build_parser(), operator_parser()]),
        "reference/metrics.md": metrics.render(metrics.worker_metrics(), metrics.operator_metrics()),
    }


def on_files(files: Files, config: Any) -> Files:
    for path, content in pages().items():
        files.append(File.generated(config, path, content=content))
    return files
