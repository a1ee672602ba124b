"""Committed artefacts generated from one source of truth stay in step with it."""

from __future__ import annotations

import pytest

from unet.reconciler.cli import main
from unet.reconciler.diagnostics import codes_markdown

from .conftest import ROOT


def test_committed_schemas_match_the_models() -> None:
    assert main(["schema", "--check"]) == 0, "run `unet schema` and commit schemas/"


def test_codes_page_matches_the_catalogue() -> None:
    assert (ROOT / "docs" / "codes.md").read_text() == codes_markdown(), "run `make docs`"


def test_schema_from_the_source_tree_reads_and_prints_its_schemas(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "--path"]) == 0
    assert capsys.readouterr().out == f"{ROOT / 'schemas'}\n"
    assert main(["schema", "--print"]) == 0
    assert capsys.readouterr().out == (ROOT / "schemas" / "unet.schema.json").read_text()
    assert main(["schema", "--check", "--print"]) == 1
    assert "--check compares files" in capsys.readouterr().err
