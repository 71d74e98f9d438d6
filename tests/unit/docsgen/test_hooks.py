"""The generated pages are the ones mkdocs.yml's nav names, so the strict build finds them."""

from __future__ import annotations

from pathlib import Path

import yaml

from docsgen import hooks

ROOT = Path(__file__).resolve().parents[3]


class _Loader(yaml.SafeLoader):
    """Safe, with mkdocs.yml's ``!!python/name:`` tags read as None."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def _nav_pages(node: object) -> set[str]:
    if isinstance(node, str):
        return {node}
    if isinstance(node, list):
        return set().union(*(_nav_pages(item) for item in node))
    if isinstance(node, dict):
        return set().union(*(_nav_pages(value) for value in node.values()))
    return set()


def test_every_generated_page_is_in_the_nav_and_not_committed() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    pages = hooks.pages()
    assert set(pages) <= _nav_pages(config["nav"])
    assert not [p for p in pages if (ROOT / "docs" / p).exists()]
    assert all(text.startswith("# ") for text in pages.values())
