"""unet's local state folder `.unet/` keeps itself out of Git: whoever creates it (the
embedded Northbound, the reconcile daemon, `unet schema`) writes a `.gitignore` of `*`
into it, as pytest, ruff and mypy do with their caches, so `git status` stays clean in a
network repo that ignores nothing. A bare `unet schema` inside a network repo writes into
that repo's `.unet/schemas/`, never into unet's own source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from unet.reconciler.state import GITIGNORE, STATE_DIR, state_folder

from .conftest import ROOT
from .support.gitops import break_repo
from .support.ovnrun import apply, unet, unet_env


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def committed(folder: Path) -> Path:
    """`folder` as a Git work tree with everything in it committed, ignoring nothing (the
    example repo's `.gitignore` of `.unet/` is removed: a repo need not have one)."""
    for ignore in folder.rglob(".gitignore"):
        ignore.unlink()
    git(folder, "init", "-q", "-b", "main")
    git(folder, "add", "-A")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "repo")
    assert git(folder, "status", "--porcelain") == ""
    return folder


def assert_ignores_itself(state: Path) -> None:
    assert state.is_dir()
    assert (state / ".gitignore").read_text() == GITIGNORE
    assert "*" in GITIGNORE.splitlines()


def test_an_apply_on_the_embedded_database_leaves_git_status_clean(
        example_copy: Path, tmp_path: Path) -> None:
    repo = committed(example_copy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = apply(elsewhere, repo)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (repo / STATE_DIR / "ovn" / "ovnnb.db").is_file()
    assert_ignores_itself(repo / STATE_DIR)
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_the_reconcile_daemon_state_folder_ignores_itself(tmp_path: Path) -> None:
    """The daemon keeps its clone, history and state in `.unet/reconcile` of the folder
    it runs in; a refused revision is recorded there too (and touches no backend)."""
    from .conftest import EXAMPLE, copy_checkout

    work = tmp_path / "work"
    break_repo(copy_checkout(EXAMPLE, work / "repo"))
    committed(work)
    done = unet(work, "reconcile", "--once", "--path", "repo")
    assert done.returncode == 1, done.stdout + done.stderr
    assert (work / STATE_DIR / "reconcile").is_dir()
    assert_ignores_itself(work / STATE_DIR)
    assert git(work, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_bare_schema_inside_a_network_repo_writes_into_its_state_folder(
        example_copy: Path) -> None:
    repo = committed(example_copy)
    source = ROOT / "schemas"
    before = {path.name: path.stat().st_mtime_ns for path in source.iterdir()}
    result = unet(repo / "tenants" / "acme", "schema")
    assert result.returncode == 0, result.stderr
    written = repo / STATE_DIR / "schemas"
    assert result.stdout.strip().endswith(f"schemas to {written}")
    assert (written / "unet.schema.json").read_text() == (source / "unet.schema.json").read_text()
    assert {path.name: path.stat().st_mtime_ns for path in source.iterdir()} == before, \
        "unet's own schemas/ is left alone"
    assert_ignores_itself(repo / STATE_DIR)
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_outside_a_network_repo_a_bare_schema_still_writes_the_source_tree(
        tmp_path: Path) -> None:
    """From unet's source tree (no unet.yaml above), `unet schema --check` compares its
    schemas/, as before; --out DIR is never redirected."""
    checked = unet(ROOT, "schema", "--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = tmp_path / "out"
    result = unet(tmp_path, "schema", "--out", str(out))
    assert result.returncode == 0 and (out / "unet.schema.json").is_file()
    assert not (tmp_path / STATE_DIR).exists()


def test_an_existing_state_folder_gets_its_gitignore_and_a_changed_one_is_kept(
        tmp_path: Path) -> None:
    """A `.unet/` made by an earlier unet gets the file on the next run; a `.gitignore`
    someone wrote there is theirs."""
    old = tmp_path / "old" / STATE_DIR / "ovn"
    old.mkdir(parents=True)
    assert state_folder(old) == old
    assert_ignores_itself(old.parent)
    mine = tmp_path / "mine" / STATE_DIR
    mine.mkdir(parents=True)
    (mine / ".gitignore").write_text("ovn/\n")
    state_folder(mine / "reconcile")
    assert (mine / ".gitignore").read_text() == "ovn/\n"
    elsewhere = state_folder(tmp_path / "state" / "reconcile")  # not under a `.unet/`
    assert elsewhere.is_dir() and not (elsewhere / ".gitignore").exists()
    assert not (tmp_path / "state" / ".gitignore").exists()


def test_caches_put_in_a_state_folder_ignore_themselves(example_copy: Path) -> None:
    """`$UNET_CACHE_DIR` inside the repo's `.unet/` (docs/gitops.md advises against it in
    CI): the parsed files and validation results stay out of `git status` too."""
    repo = committed(example_copy)
    result = subprocess.run(
        [sys.executable, "-m", "unet.reconciler.cli", "validate", str(repo)], cwd=repo,
        env={**unet_env(), "UNET_CACHE_DIR": str(repo / STATE_DIR / "cache")},
        capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert any((repo / STATE_DIR / "cache").iterdir())
    assert_ignores_itself(repo / STATE_DIR)
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
