"""The images `make images` builds are the ones the chart runs by default (no engine needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rolloutfleet_operator.config import DEFAULT_WORKER_IMAGE

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rolloutfleet"
REGISTRY = "ghcr.io/rolloutfleet"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def app_version() -> str:
    return str(load(CHART / "Chart.yaml")["appVersion"])


def test_one_version_for_the_chart_the_makefile_and_the_operator() -> None:
    makefile = re.search(r"^VERSION \?= (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert makefile and makefile.group(1) == app_version()
    assert f"{REGISTRY}/worker:{app_version()}" == DEFAULT_WORKER_IMAGE


def test_the_chart_defaults_to_the_images_make_images_tags() -> None:
    values = load(CHART / "values.yaml")
    for component in ("operator", "worker", "redis"):
        image = values[component]["image"]
        assert image["repository"] == f"{REGISTRY}/{component}", component
        assert image["tag"] == "", f"{component}: an empty tag is the chart's appVersion, the tag make images gives"
    build = (REPO / "hack" / "images" / "build.sh").read_text()
    assert f'registry="{REGISTRY}"' in build
    for tag in ("operator:$version", "redis:$version", "worker:$version", "worker:$version-cpu"):
        assert f'tag="$registry/{tag}"' in build, tag


def test_examples_name_no_image_that_is_not_built() -> None:
    built = {f"{REGISTRY}/{name}:{app_version()}" for name in ("worker", "operator", "redis")}
    built.add(f"{REGISTRY}/worker:{app_version()}-cpu")
    for path in sorted((CHART / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            image = (doc or {}).get("spec", {}).get("image")
            assert image is None or image in built, f"{path.name}: {image}"
