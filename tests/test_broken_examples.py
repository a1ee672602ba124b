"""Every code `unet validate` can report has a broken example repo that trips it alone.

`examples/broken/<case>/` is a small network repo with one defect; the folder name is
the code in kebab case (`subnet-overlap` → `SUBNET_OVERLAP`), followed by the situation
after `--` when a code has more than one case (`yaml-syntax--tab`). The cases document the
codes for users and pin down that one defect yields one error, not a cascade: each
reports exactly one diagnostic, and `expected.txt` holds what `unet validate` prints for
it (regenerated with `UNET_UPDATE_GOLDEN=1`). A code added to the catalogue without a case
fails `test_every_validate_code_has_a_case`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from unet.reconciler.cli import main
from unet.reconciler.diagnostics import CODES, PLAN_TIME_CODES, Diagnostic, Severity
from unet.reconciler.validate import validate_repo

from .conftest import ROOT, copy_checkout

BROKEN = ROOT / "examples" / "broken"
CASES = sorted(path.name for path in BROKEN.iterdir() if path.is_dir())
#: Codes about a path rather than a file's content: they have no line to point at.
NO_LINE = frozenset({"REPO_CONFIG_MISSING", "PATH_UNSAFE"})
EXPECTED = "expected.txt"
UPDATE = os.environ.get("UNET_UPDATE_GOLDEN") == "1"


def code_of(case: str) -> str:
    """`subnet-overlap` → SUBNET_OVERLAP; a situation after `--` is not part of the code."""
    return case.split("--")[0].upper().replace("-", "_")


def _show(diagnostics: list[Diagnostic]) -> str:
    return "\n".join(f"{d.code} {d.file}:{d.line} {d.path} {d.message}" for d in diagnostics)


def test_every_validate_code_has_a_case() -> None:
    cases = {code_of(case) for case in CASES}
    assert sorted(set(CODES) - PLAN_TIME_CODES - cases) == [], "codes without a broken example"
    assert sorted(cases - set(CODES)) == [], "folders that name no code"
    assert sorted(cases & PLAN_TIME_CODES) == [], "plan-time codes never come from validate"


@pytest.mark.parametrize("case", CASES)
def test_case_trips_exactly_its_code(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, path = code_of(case), BROKEN / case
    diagnostics = validate_repo(path).diagnostics
    assert [d.code for d in diagnostics] == [code], _show(diagnostics)
    for diagnostic in diagnostics:
        assert diagnostic.file, _show([diagnostic])
        if code not in NO_LINE:
            assert diagnostic.line is not None, _show([diagnostic])
    expected_exit = 1 if CODES[code].severity is Severity.ERROR else 0
    assert main(["validate", str(path)]) == expected_exit
    capsys.readouterr()


@pytest.mark.parametrize("case", CASES)
def test_case_prints_its_expected_output(case: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Line, column, message and hint, as a user sees them from the case's folder."""
    monkeypatch.chdir(BROKEN / case)
    monkeypatch.setenv("NO_COLOR", "1")  # not --no-color, which sets it for the process
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    main(["validate", "--no-cache", "."])
    printed, expected = capsys.readouterr().out, BROKEN / case / EXPECTED
    if UPDATE:
        expected.write_text(printed)
    assert expected.exists(), f"{expected} is missing; run UNET_UPDATE_GOLDEN=1 pytest {__file__}"
    assert printed == expected.read_text()


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The broken examples committed to a fresh Git repository (symlink and all)."""
    repo = tmp_path_factory.mktemp("broken-git")
    copy_checkout(BROKEN, repo / "broken")
    for args in (["init", "-q"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q",
                  "-m", "broken examples"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return repo / "broken"


@pytest.mark.parametrize("case", CASES)
def test_case_trips_the_same_code_from_git_objects(case: str, committed: Path) -> None:
    diagnostics = validate_repo(committed / case, "HEAD").diagnostics
    assert [d.code for d in diagnostics] == [code_of(case)], _show(diagnostics)
