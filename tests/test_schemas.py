"""Committed artefacts generated from one source of truth stay in step with it."""

from __future__ import annotations

from reconciler.cli import main
from reconciler.diagnostics import codes_markdown

from .conftest import ROOT


def test_committed_schemas_match_the_models() -> None:
    assert main(["schema", "--check"]) == 0, "run `unet schema` and commit schemas/"


def test_codes_page_matches_the_catalogue() -> None:
    assert (ROOT / "docs" / "codes.md").read_text() == codes_markdown(), "run `make docs`"
