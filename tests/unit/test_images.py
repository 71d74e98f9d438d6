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
    for tag in (
        "operator:$version",
        "redis:$version",
        "worker:$version",
        "worker:$version-cpu",
        "worker:$version-slim",
    ):
        assert f'tag="$registry/{tag}"' in build, tag


def test_examples_name_no_image_that_is_not_built() -> None:
    built = {f"{REGISTRY}/{name}:{app_version()}" for name in ("worker", "operator", "redis")}
    built.add(f"{REGISTRY}/worker:{app_version()}-cpu")
    built.add(f"{REGISTRY}/worker:{app_version()}-slim")
    for path in sorted((CHART / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            image = (doc or {}).get("spec", {}).get("image")
            assert image is None or image in built, f"{path.name}: {image}"


def test_the_chart_names_both_worker_images_as_the_operator_does() -> None:
    from rolloutfleet_operator.config import DEFAULT_WORKER_SLIM_IMAGE

    values = load(CHART / "values.yaml")["worker"]
    assert values["slimImage"] == {"enabled": True, "repository": f"{REGISTRY}/worker", "tag": ""}
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert '(printf "%s-slim" .Chart.AppVersion)' in helpers  # an empty tag: <appVersion>-slim
    assert f"{REGISTRY}/worker:{app_version()}-slim" == DEFAULT_WORKER_SLIM_IMAGE


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r).group(1)) for r in requirements}  # type: ignore[union-attr]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_slim_profile_installs_no_torch_cuda_or_opencv_and_only_locked_pins() -> None:
    """What hack/pip-install.sh worker-slim installs: the worker's extras without NUMPY_ONLY,
    then their dependencies (from the installed metadata, the lock's versions), transitively."""
    import importlib.metadata as md
    import tomllib

    from packaging.requirements import Requirement

    script = (REPO / "hack" / "pip-install.sh").read_text()
    leave_out = set(re.search(r'^NUMPY_ONLY="([^"]*)"', script, re.MULTILINE).group(1).split())  # type: ignore[union-attr]
    assert leave_out == {"torch", "opencv-python-headless"}
    assert 'packages=("$root/worker[worker,multiagent,atari]")\n    leave_out="$NUMPY_ONLY"' in script
    project = tomllib.loads((REPO / "worker" / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("worker", "multiagent", "atari"):
        declared += project["optional-dependencies"][extra]
    todo = _requirement_names(declared) - leave_out
    assert leave_out <= _requirement_names(declared)  # each one is a requirement to leave out
    closure: set[str] = set()
    while todo:
        name = todo.pop()
        closure.add(name)
        for line in md.distribution(name).requires or []:
            requirement = Requirement(line)
            # Installed where the marker holds here (the image's Python is 3.11 too); a
            # dependency's extras are not installed.
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo |= {_canonical(requirement.name)} - closure
    heavy = {n for n in closure if n.startswith(("torch", "nvidia", "cuda", "triton", "opencv"))}
    assert not heavy, heavy
    locked = {_canonical(line.split("==")[0]) for line in (REPO / "requirements.lock").read_text().splitlines()}
    assert closure <= locked, closure - locked  # every package pinned by the lock (-c): the same versions
    assert {"gymnasium", "pettingzoo", "pygame", "ale-py", "redis", "prometheus-client", "numpy"} <= closure
