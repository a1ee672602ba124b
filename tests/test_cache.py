"""The validation cache: a hit only when nothing that matters changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unet.reconciler import cache as cache_module
from unet.reconciler.cli import main


def _validate(repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    code = main(["validate", str(repo), "--format", "json", *extra])
    report = json.loads(capsys.readouterr().out)
    assert code == (1 if report["summary"]["errors"] else 0)
    return report


def test_a_warm_run_gives_the_same_answer_without_validating(
        example_copy: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = _validate(example_copy, capsys)
    import unet.reconciler.validate as validate_module

    def must_not_run(*_args: object) -> None:
        raise AssertionError("a cache hit must not validate again")

    monkeypatch.setattr(validate_module, "validate_files", must_not_run)
    assert _validate(example_copy, capsys) == first


def test_any_changed_byte_is_a_miss(example_copy: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _validate(example_copy, capsys)["valid"] is True
    network = example_copy / "tenants" / "acme" / "network.yaml"
    network.write_text(network.read_text().replace("10.10.1.0/24", "10.10.1.5/24"))
    codes = [d["code"] for d in _validate(example_copy, capsys)["diagnostics"]]
    assert "CIDR_NOT_CANONICAL" in codes


def test_no_cache_neither_reads_nor_writes(example_copy: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNET_CACHE_DIR", str(tmp_path / "cache"))
    _validate(example_copy, capsys, "--no-cache")
    assert not (tmp_path / "cache").exists()
    _validate(example_copy, capsys)
    assert len(list((tmp_path / "cache").glob("validate-*.json"))) == 1


def test_a_new_unet_never_reads_an_old_entry(example_copy: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNET_CACHE_DIR", str(tmp_path / "cache"))
    _validate(example_copy, capsys)
    cache_module.code_digest.cache_clear()
    monkeypatch.setattr(cache_module, "code_digest", lambda: "another version")
    _validate(example_copy, capsys)
    assert len(list((tmp_path / "cache").glob("validate-*.json"))) == 2


def test_upgraded_libraries_never_read_an_old_entry(example_copy: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A new PyYAML, pydantic or jsonschema may read a file differently or word a
    diagnostic differently: their versions are part of the key."""
    monkeypatch.setenv("UNET_CACHE_DIR", str(tmp_path / "cache"))
    _validate(example_copy, capsys)
    monkeypatch.setattr(cache_module, "environment_digest", lambda: "jsonschema 99")
    _validate(example_copy, capsys)
    assert len(list((tmp_path / "cache").glob("validate-*.json"))) == 2
