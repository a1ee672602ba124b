"""The one path policy both walkers apply: what it asks of a path, and in which order."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from unet.reconciler.diagnostics import Diagnostic
from unet.reconciler.sources import (
    LEAVES,
    NOT_PLAIN,
    REPOSITORY,
    Refusal,
    SourceFile,
    Step,
    admit,
    placement,
)


@dataclass
class Found:
    """A path as a walker would describe it; a question it was not meant to be asked fails."""

    path: str
    repository: bool = False
    symlink: bool = False
    link: Refusal | None = None
    folder: bool = False
    opened: SourceFile | Refusal | None = None

    def is_repository(self) -> bool:
        return self.repository

    def is_symlink(self) -> bool:
        return self.symlink

    def link_problem(self) -> Refusal | None:
        assert self.symlink, "only a symlink is asked where it leads"
        return self.link

    def is_folder(self) -> bool:
        return self.folder

    def open(self) -> SourceFile | Refusal:
        assert self.opened is not None, f"{self.path} was not meant to be opened"
        return self.opened


class Unasked(Found):
    def is_repository(self) -> bool:
        raise AssertionError("a path out of scope is asked nothing")


def refusal(verdict: SourceFile | Diagnostic | Step) -> str:
    assert isinstance(verdict, Diagnostic) and verdict.code == "PATH_UNSAFE"
    return verdict.message


@pytest.mark.parametrize("path", ["README.md", "docs/a.yaml", "tenants/.git/x.yaml",
                                  "tenants/a/.hidden.yaml", ".unet/state.yaml"])
def test_a_path_out_of_scope_is_skipped_before_anything_is_asked(path: str) -> None:
    assert admit(Unasked(path)) is Step.SKIP


def test_another_repository_is_refused_and_not_walked() -> None:
    message = refusal(admit(Found("tenants/sub", repository=True, folder=True)))
    assert message == f"'tenants/sub' {REPOSITORY.problem}"


def test_a_symlink_is_judged_by_where_it_leads_before_its_name_or_layout() -> None:
    """A symlink that leaves the repo is refused even when it would not be read at all."""
    assert refusal(admit(Found("tenants/a/notes.txt", symlink=True, link=LEAVES))) == \
        f"'tenants/a/notes.txt' {LEAVES.problem}"


def test_a_symlink_to_a_file_of_the_repo_stands_for_that_file() -> None:
    file = SourceFile("tenants/a/x.yaml", 3, lambda: b"a: 1")
    assert admit(Found("tenants/a/x.yaml", symlink=True, folder=True, opened=file)) is file


def test_a_folder_in_scope_is_walked() -> None:
    assert admit(Found("tenants/a", folder=True)) is Step.WALK


def test_what_is_not_a_manifest_is_skipped_whatever_its_name() -> None:
    assert admit(Found("tenants/a/bad name.txt")) is Step.SKIP


def test_a_manifest_whose_name_is_not_plain_is_refused_unopened() -> None:
    assert refusal(admit(Found("tenants/a/bad name.yaml"))) == \
        f"'tenants/a/bad name.yaml' {NOT_PLAIN.problem}"


def test_a_manifest_that_cannot_be_opened_is_refused_in_the_walkers_words() -> None:
    verdict = admit(Found("unet.yaml", opened=Refusal("is not a regular file")))
    assert refusal(verdict) == "'unet.yaml' is not a regular file"


def test_a_manifest_is_placed_by_its_path() -> None:
    assert placement("unet.yaml") == ("root", None)
    assert placement("provider/networks.yaml") == ("provider", None)
    assert placement("tenants/acme/networks.yml") == ("tenants", "acme")
    assert placement("tenants/loose.yaml") == ("tenants", None)
    assert placement("README.md") == ("", None)
