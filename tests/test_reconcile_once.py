"""`unet reconcile --once` prints a run's plan only when it changes something: the plan's
JSON (every observed row's fingerprint, every change) takes seconds at a thousand tenants,
and a run with nothing to do must not pay for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from unet.reconciler.daemon.history import Run
from unet.reconciler.daemon.loop import Serving, once


class _Reconciled:
    """What `once` asks of a Reconciler, after a run that changed nothing."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.last_validation = None
        self.last_plan_has_changes = False

    def run_once(self) -> Run:
        return Run(started="2026-11-27T00:00:00Z", source="repo", result="ok",
                   message="no changes: the backends match the revision")

    @property
    def last_plan(self) -> dict[str, Any]:
        raise AssertionError("the plan's JSON was built for a run that changed nothing")


def test_a_run_without_changes_builds_no_plan_json(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    assert once(_Reconciled(tmp_path), Serving(), False) == 0  # type: ignore[arg-type]
    assert "no changes" in capsys.readouterr().out


def test_a_folder_run_records_the_commit_only_when_its_files_are_the_commits(
        tmp_path: Path) -> None:
    """A run of a folder records the commit checked out as its revision, unless files
    under the folder differ from it: then the files on disk (None), which no commit holds."""
    from unet.reconciler.daemon.loop import _folder_commit

    from .support.gitops import commit_all, git

    folder = tmp_path / "repo" / "network"
    folder.mkdir(parents=True)
    (folder / "unet.yaml").write_text("installation: t\n")
    git(tmp_path / "repo", "init", "-q")
    head = commit_all(tmp_path / "repo", "first")
    assert _folder_commit(folder) == head
    (tmp_path / "repo" / "elsewhere.txt").write_text("not the network's\n")
    assert _folder_commit(folder) == head, "a file outside the folder changes nothing"
    (folder / "unet.yaml").write_text("installation: u\n")
    assert _folder_commit(folder) is None
    commit_all(tmp_path / "repo", "second")
    (folder / "new.yaml").write_text("{}\n")
    assert _folder_commit(folder) is None, "a new file is not the commit's either"
