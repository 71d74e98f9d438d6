"""How a worker says why it ends: one line on stderr and in the termination log, exit 3 for
what cannot be built (a missing module named with the image that has it), other import
errors raised as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolloutfleet.fleet import termination
from rolloutfleet.fleet.termination import EXIT_BAD_SPEC, report_fatal, report_unbuildable
from rolloutfleet.spec.job import SpecError


@pytest.fixture
def log_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "termination-log"
    monkeypatch.setattr(termination, "TERMINATION_LOG", path)
    return path


def test_a_fatal_message_is_one_line_on_stderr_and_in_the_termination_log(
    log_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_fatal("env 'Broken-v0' cannot be built:\nValueError: no")
    assert log_file.read_text() == "env 'Broken-v0' cannot be built: ValueError: no\n"
    assert capsys.readouterr().err == "rolloutfleet worker: env 'Broken-v0' cannot be built: ValueError: no\n"


def test_a_bad_spec_is_said_as_it_is_and_exits_3(log_file: Path) -> None:
    assert report_unbuildable(SpecError("spec.env.numEnvs: must be at least 1"), {}) == EXIT_BAD_SPEC
    assert log_file.read_text() == "spec.env.numEnvs: must be at least 1\n"


def test_a_module_the_slim_image_lacks_names_the_image_that_has_it(log_file: Path) -> None:
    missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    code = report_unbuildable(missing, {"ROLLOUTFLEET_IMAGE_PROFILE": "worker-slim"})
    assert code == EXIT_BAD_SPEC
    line = log_file.read_text()
    assert line.startswith("missing Python module 'torch': the slim worker image")
    assert "selects the full worker image" in line


def test_an_import_error_that_names_no_missing_module_is_raised(log_file: Path) -> None:
    broken = ImportError("cannot import name 'thing' from 'package'")
    with pytest.raises(ImportError, match="cannot import name"):
        report_unbuildable(broken, {})
    assert not log_file.exists()
