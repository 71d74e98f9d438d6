"""Fuzz: generated manifests and argument lists never end in a traceback, only in success
or one line on stderr (exit 2 for bad input; 1 for what could not be done).

In-process and bounded (a few seconds): the parts that would start processes are
replaced after the checks a user's input meets first (``run``'s fleet, the worker,
``consume``/``streams``'s wait for a Redis); everything up to them is the real code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutfleet.cli import main as cli_main
from rolloutfleet.spec.job import RolloutJob, SpecError
from tests.unit.spec.test_model_base import LEAVES, manifest_with

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(width=64),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def manifests(draw: st.DrawFn) -> Any:
    """A valid manifest with a few fields replaced by anything, or anything at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    path, _, _ = draw(st.sampled_from(LEAVES))
    manifest = manifest_with(path, draw(json_values))
    for _ in range(draw(st.integers(0, 2))):
        section = draw(st.sampled_from([manifest, manifest["spec"], manifest["metadata"], manifest["spec"]["env"]]))
        section[draw(st.text(max_size=10))] = draw(json_values)
    return manifest


def assert_one_line(message: str) -> None:
    assert message.strip() and "\n" not in message.strip() and "Traceback" not in message, message


@SETTINGS
@given(manifest=manifests())
def test_a_generated_manifest_is_valid_or_one_spec_error(manifest: Any) -> None:
    try:
        RolloutJob.from_dict(manifest)
    except SpecError as exc:
        assert_one_line(str(exc))


@SETTINGS
@given(text=st.one_of(st.text(max_size=200), manifests().map(lambda m: yaml.safe_dump(m, allow_unicode=True))))
def test_generated_yaml_text_is_valid_or_one_spec_error(text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("yaml") / "job.yaml"
    path.write_bytes(text.encode("utf-8", errors="replace"))
    try:
        RolloutJob.from_file(path)
    except SpecError as exc:
        assert_one_line(str(exc))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("cli")
    good = where / "good.yaml"
    good.write_text((ROOT / "examples/cartpole.yaml").read_text())
    (where / "typed.yaml").write_text(good.read_text().replace("numEnvs: 8", 'numEnvs: "8"'))
    (where / "broken.yaml").write_text("spec: [unclosed\n  - : :")
    (where / "empty.yaml").write_text("")
    (where / "two.yaml").write_text(good.read_text() + "\n---\n" + good.read_text())
    return {
        "good": str(good),
        "typed": str(where / "typed.yaml"),
        "broken": str(where / "broken.yaml"),
        "empty": str(where / "empty.yaml"),
        "two": str(where / "two.yaml"),
        "dir": str(where),
        "missing": str(where / "missing.yaml"),
        "out": str(where / "out" / "o"),
    }


@pytest.fixture(scope="module")
def no_processes() -> Iterator[None]:
    """What would start processes or wait for a Redis: replaced, after the input's checks."""
    patch = pytest.MonkeyPatch()

    def run_fleet(args: argparse.Namespace) -> int:
        job = RolloutJob.from_file(args.manifest)  # as the real one does first
        if args.replicas is not None:
            RolloutJob.from_dict({**job.to_dict(), "spec": {**job.to_dict()["spec"], "replicas": args.replicas}})
        return 0

    def unreachable(command: str, url: str, timeout: float) -> int:
        print(f"rolloutfleet {command}: Redis at {url} is not reachable (fuzz)", file=sys.stderr)
        return 1

    patch.setattr("rolloutfleet.cli.run.run_fleet", run_fleet)
    patch.setattr("rolloutfleet.cli.streams.unreachable", unreachable)
    patch.setattr("rolloutfleet.fleet.worker.main", lambda log_level=None: 0)
    patch.setenv("ROLLOUTFLEET_LOG_LEVEL", "WARNING")
    yield
    patch.undo()


URLS = ["redis://127.0.0.1:1/0", "redis://:pw@h:x/0", "http://x", ""]
SECONDS = ["1", "0", "-1", "nan", "inf", "x", "2.5"]
FLAGS: dict[str, dict[str, list[str]]] = {
    "sample": {"--steps": ["3", "0", "-1", "x", "1e3"], "--output": ["OUT", "", ".", "OUT/"], "--worker-index": ["0", "1", "-1"],
               "--num-workers": ["1", "2", "0"], "--compress": []},
    "validate": {"--spec-only": []},
    "run": {"--redis": URLS, "--replicas": ["0", "2", "-1", "x"], "--no-status": [], "--duration": SECONDS,
            "--redis-timeout": SECONDS},
    "consume": {"--redis": URLS, "--job": ["j", "", "a b"], "--namespace": ["default", ""], "--policy": ["red", "{x}"],
                "--count": ["1", "0", "x"], "--output": ["OUT", "", ".", "OUT/"], "--group": ["learner", ""],
                "--consumer": ["c"], "--timeout": SECONDS},
    "streams": {"--redis": URLS, "--timeout": SECONDS},
    "worker": {},
}  # fmt: skip
"""Each command's flags and values to try (valid and not)."""
REQUIRED = {"sample": ["--steps", "--output"], "consume": ["--redis", "--job", "--count", "--output"],
            "streams": ["--redis"]}  # fmt: skip
MANIFEST = {"sample", "validate", "run"}


@st.composite
def argument_lists(draw: st.DrawFn, files: dict[str, str]) -> list[str]:
    """Mostly well-formed command lines with a few odd values; sometimes a stray flag."""
    command = draw(st.sampled_from([*FLAGS, "nosuch"]))
    argv = [] if draw(st.integers(0, 7)) else ["--log-level", draw(st.sampled_from(["debug", "loud", ""]))]
    argv.append(command)
    flags = FLAGS.get(command, {})
    if command in MANIFEST and draw(st.integers(0, 9)):
        argv.append(files[draw(st.sampled_from(["good", "good", "good", "typed", "broken", "empty", "two", "dir",
                                                "missing"]))])  # fmt: skip
    chosen = [f for f in REQUIRED.get(command, []) if draw(st.integers(0, 9))]
    chosen += draw(st.lists(st.sampled_from(sorted(flags)), max_size=3, unique=True)) if flags else []
    for flag in dict.fromkeys(chosen):
        values = flags[flag]
        argv += [flag, draw(st.sampled_from(values)).replace("OUT", files["out"])] if values else [flag]
    if not draw(st.integers(0, 9)):
        argv.append(draw(st.sampled_from(["--bogus", "--steps", "extra"])))
    if command == "run" and not draw(st.integers(0, 3)):
        argv += ["--", draw(st.sampled_from(["no-such-learner-command", "true", "./nope"]))]
    return argv


def test_generated_argument_lists_end_in_success_or_one_line(
    files: dict[str, str], no_processes: None, capsys: pytest.CaptureFixture[str]
) -> None:
    codes: list[int] = []

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(argv=argument_lists(files))
    def check(argv: list[str]) -> None:
        capsys.readouterr()
        try:
            code = cli_main.main(argv)
        except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
            code = int(exit_.code or 0)
        err = capsys.readouterr().err
        codes.append(code)
        if code != 0:
            assert code in (1, 2), (argv, code, err)
            assert_one_line(err)
        else:
            assert "Traceback" not in err, (argv, err)

    cwd = os.getcwd()
    try:
        check()
    finally:
        os.chdir(cwd)
    assert len(codes) >= 100 and {0, 1, 2} <= set(codes), sorted(set(codes))  # each outcome was reached
