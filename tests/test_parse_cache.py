"""The parse cache: a file parsed by an earlier run is read back, never a stale one, and
a damaged or foreign pack is ignored."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unet.reconciler import parse_cache
from unet.reconciler import validate as validate_module
from unet.reconciler.cli import main
from unet.reconciler.diagnostics import Diagnostic
from unet.reconciler.sources import DEFAULT_MAX_FILE_BYTES, SourceFile
from unet.reconciler.validate import parsed_files, repo_files, validate_files

from .conftest import ROOT, copy_checkout
from .test_fuzz import EXAMPLE_FILES, FUZZ_PATHS, SETTINGS, random_content

BROKEN = ROOT / "examples" / "broken"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("UNET_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the files parsed (not read from the cache), in order."""
    seen: list[str] = []
    real = validate_module._parse

    def counting(item: SourceFile, max_file_bytes: int) -> Any:
        seen.append(item.path)
        return real(item, max_file_bytes)

    monkeypatch.setattr(validate_module, "_parse", counting)
    return seen


def _run(repo: Path, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> list[dict[str, Any]]:
    """Validate as a one-shot command does: through the parse cache, then save it."""
    parsed = parsed_files(repo, max_file_bytes)
    result = validate_files(repo_files(repo, None, max_file_bytes), max_file_bytes, parsed)
    parsed.save()
    return [d.to_json() for d in sorted(result.diagnostics, key=Diagnostic.sort_key)]


def _files(repo: Path) -> int:
    return sum(isinstance(item, SourceFile) for item in repo_files(repo, None))


def _pack(cache: Path) -> Path:
    [pack] = cache.glob("parse-*.pack")
    return pack


def test_a_second_run_parses_nothing_and_says_the_same(example_copy: Path, cache: Path,
                                                       parses: list[str]) -> None:
    first = _run(example_copy)
    assert len(parses) == _files(example_copy)
    parses.clear()
    assert _run(example_copy) == first
    assert parses == []


@pytest.mark.parametrize("case", sorted(p.name for p in BROKEN.iterdir() if p.is_dir()))
def test_diagnostics_read_back_point_at_the_same_lines(case: str, tmp_path: Path, cache: Path,
                                                       parses: list[str]) -> None:
    """Every broken example, cold and then from the cache: the same codes, files, lines,
    columns and words (line maps are built again from the cached text). Only a file
    over the size bound, never read, is not remembered."""
    repo = tmp_path / case
    copy_checkout(BROKEN / case, repo)
    first = _run(repo)
    parses.clear()
    assert _run(repo) == first
    assert all((repo / path).stat().st_size > DEFAULT_MAX_FILE_BYTES for path in parses)


def test_a_changed_file_is_parsed_again_and_only_it(example_copy: Path, cache: Path,
                                                    parses: list[str]) -> None:
    _run(example_copy)
    network = example_copy / "tenants" / "acme" / "network.yaml"
    network.write_text(network.read_text().replace("10.10.1.0/24", "10.10.1.5/24"))
    parses.clear()
    codes = [d["code"] for d in _run(example_copy)]
    assert parses == ["tenants/acme/network.yaml"]
    assert "CIDR_NOT_CANONICAL" in codes


@pytest.mark.parametrize("digest", ["code_digest", "environment_digest", "plugins_digest"])
def test_a_new_unet_library_or_plugin_never_reads_an_old_pack(
        example_copy: Path, cache: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch,
        digest: str) -> None:
    first = _run(example_copy)
    monkeypatch.setattr(parse_cache, digest, lambda: "something else")
    parses.clear()
    assert _run(example_copy) == first
    assert len(parses) == _files(example_copy)
    assert len(list(cache.glob("parse-*.pack"))) == 2


def test_another_size_bound_never_reads_an_old_pack(example_copy: Path, cache: Path,
                                                    parses: list[str]) -> None:
    _run(example_copy)
    parses.clear()
    _run(example_copy, DEFAULT_MAX_FILE_BYTES - 1)
    assert len(parses) == _files(example_copy)


def test_the_newest_packs_are_kept_and_files_gone_drop_out(
        example_copy: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for version in ("a", "b", "c"):
        monkeypatch.setattr(parse_cache, "code_digest", lambda version=version: version)
        _run(example_copy)
    assert len(list(cache.glob("parse-*.pack"))) == parse_cache.KEEP_PACKS
    (example_copy / "tenants" / "acme" / "compute.yaml").unlink()
    network = example_copy / "tenants" / "acme" / "network.yaml"
    network.write_text(network.read_text() + "\n")
    _run(example_copy)
    latest = parse_cache.ParseCache(cache, DEFAULT_MAX_FILE_BYTES)
    index, _body = parse_cache._read_pack(latest.path, latest.key)
    assert sorted(path for path, _id in index) == sorted(
        item.path for item in repo_files(example_copy, None) if isinstance(item, SourceFile))


def _damaged(pack: Path) -> Iterator[bytes]:
    data = pack.read_bytes()
    yield b""
    yield data[: len(data) // 2]  # torn: a run killed while writing, a full disk
    yield data[:-1]
    yield b"not a pack at all"
    for at in (len(parse_cache._MAGIC) + 3, len(data) // 3, len(data) - 5):
        yield data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]  # one bit flipped


def test_a_damaged_pack_is_ignored_never_believed(example_copy: Path, cache: Path,
                                                  parses: list[str]) -> None:
    first = _run(example_copy)
    pack = _pack(cache)
    for damaged in _damaged(pack):
        pack.write_bytes(damaged)
        parses.clear()
        assert _run(example_copy) == first
        assert len(parses) == _files(example_copy)


def test_an_entry_that_does_not_read_is_parsed_again(example_copy: Path, cache: Path,
                                                     parses: list[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever reading an entry raises (here: a model that no longer accepts it), the
    file is parsed again."""
    first = _run(example_copy)

    def broken(blob: bytes, path: str, content: bytes) -> Any:
        raise AttributeError("an entry of an older layout")

    monkeypatch.setattr(parse_cache, "decode", broken)
    parses.clear()
    assert _run(example_copy) == first
    assert len(parses) == _files(example_copy)


@pytest.mark.parametrize("unsafe", ["group-writable", "world-writable", "symlink",
                                    "other owner"])
def test_a_pack_anyone_else_could_have_written_is_never_unpickled(
        example_copy: Path, cache: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch,
        unsafe: str) -> None:
    """Unpickling runs code the file names: only the user's own, private files are read."""
    first = _run(example_copy)
    pack = _pack(cache)
    if unsafe == "symlink":
        target = cache.parent / "elsewhere.pack"
        pack.rename(target)
        pack.symlink_to(target)
    elif unsafe == "other owner":
        real = os.getuid()
        monkeypatch.setattr(parse_cache.os, "getuid", lambda: real + 1)
    else:
        pack.chmod(0o620 if unsafe == "group-writable" else 0o602)
    unpickled: list[object] = []
    monkeypatch.setattr(parse_cache, "_loads", unpickled.append)  # records, reads none
    parses.clear()
    assert _run(example_copy) == first
    assert unpickled == [], "an unsafe pack was unpickled"
    assert len(parses) == _files(example_copy)


def test_a_pack_that_names_a_class_runs_no_code(example_copy: Path, cache: Path,
                                                parses: list[str]) -> None:
    """Even a pack that passes every check (here: written by unet's own writer) cannot
    run code: any class or function it names is refused, and the file parsed again."""
    first = _run(example_copy)
    pack = parse_cache.ParseCache(cache, DEFAULT_MAX_FILE_BYTES)
    index, _body = parse_cache._read_pack(pack.path, pack.key)
    hostile = pickle.dumps(_Boom())
    parse_cache._write_pack(pack.path, pack.key, dict.fromkeys(index, (0, len(hostile))),
                            [hostile])
    parses.clear()
    assert _run(example_copy) == first
    assert len(parses) == _files(example_copy)


class _Boom:
    def __reduce__(self) -> tuple[Any, ...]:
        return (pytest.fail, ("a pack ran code",))


def test_packs_are_private(example_copy: Path, cache: Path) -> None:
    _run(example_copy)
    assert _pack(cache).stat().st_mode & 0o777 == 0o600


def test_an_unwritable_cache_only_makes_the_run_slower(example_copy: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("UNET_CACHE_DIR", str(blocker / "cache"))  # a folder in a file
    first = _run(example_copy)
    assert _run(example_copy) == first


def _validate(repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    main(["validate", str(repo), "--format", "json", *extra])
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_validate_no_cache_neither_reads_nor_writes_it(
        example_copy: Path, cache: Path, parses: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    first = _validate(example_copy, capsys, "--no-cache")
    assert not cache.exists()
    _validate(example_copy, capsys)  # writes both caches
    for entry in cache.glob("validate-*.json"):
        entry.unlink()
    parses.clear()
    assert _validate(example_copy, capsys) == first  # results cache missed: parse cache hit
    assert parses == []
    assert _validate(example_copy, capsys, "--no-cache") == first
    assert len(parses) == _files(example_copy)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_a_pull_request_plan_reads_both_revisions_from_it(
        example_copy: Path, cache: Path, parses: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """`unet validate` of the checkout leaves what `unet plan --base` needs of the head;
    the plan adds the base's other files."""
    _git(example_copy, "init", "-q", "-b", "main")
    _git(example_copy, "add", "-A")
    _git(example_copy, "commit", "-qm", "base")
    network = example_copy / "tenants" / "acme" / "network.yaml"
    network.write_text(network.read_text().replace("mtu: 9000", "mtu: 8900"))
    _git(example_copy, "commit", "-qam", "head")
    _validate(example_copy, capsys)
    parses.clear()
    args = ["plan", str(example_copy), "--base", "HEAD~1", "--head", "HEAD", "--format", "json"]
    main(args)
    first = json.loads(capsys.readouterr().out)
    assert parses == ["tenants/acme/network.yaml"]  # the base's version
    parses.clear()
    main(args)
    assert json.loads(capsys.readouterr().out) == first
    assert parses == []


def _shown(parsed: parse_cache.ParsedFile) -> Any:
    """What a parse gives, as text: a `.nan` in a document is not equal to itself."""
    return repr(([(d.file, d.index, d.line, d.data, d.tenant, d.area, d.broken, d.lines)
                  for d in parsed.documents],
                 [(parsed.documents.index(m.doc), m.obj) for m in parsed.manifests],
                 parsed.load_problems, parsed.schema_problems))


@SETTINGS
@given(st.sampled_from(FUZZ_PATHS),
       st.one_of(random_content, st.sampled_from(sorted(EXAMPLE_FILES.values()))))
def test_an_entry_reads_back_as_the_file_parsed(path: str, content: bytes) -> None:
    """Whatever a file holds, its entry gives the same documents, lines, manifests and
    problems as parsing it."""
    item = SourceFile(path, len(content), lambda: content)
    parsed = validate_module._parse(item, DEFAULT_MAX_FILE_BYTES)
    expected = _shown(validate_module._parse(item, DEFAULT_MAX_FILE_BYTES))
    assert _shown(parse_cache.decode(parse_cache.encode(parsed), path, content)) == expected


def test_a_file_read_piece_by_piece_keeps_its_lines(example_copy: Path, cache: Path,
                                                    parses: list[str]) -> None:
    """A syntax error in one document: the others are parsed apart, and a schema error
    in the third points at its line, cold and from the cache alike."""
    extra = example_copy / "tenants" / "acme" / "extra.yaml"
    extra.write_text("apiVersion: network.osac.io/v1alpha1\nkind: SecurityGroup\nmetadata:\n"
                     "  name: one\nspec: {network: prod}\n---\nkind: [\n---\n"
                     "apiVersion: network.osac.io/v1alpha1\nkind: SecurityGroup\nmetadata:\n"
                     "  name: three\nspec:\n  network: prod\n  colour: blue\n")
    first = _run(example_copy)
    found = {(d["code"], d["line"]) for d in first if d["file"] == "tenants/acme/extra.yaml"}
    assert {("YAML_SYNTAX", 8), ("SCHEMA_UNKNOWN_FIELD", 15)} <= found, first
    parses.clear()
    assert _run(example_copy) == first
    assert parses == []


def test_reconcile_once_reads_and_writes_it(tmp_path: Path, cache: Path,
                                            parses: list[str]) -> None:
    """Even a revision that does not validate (refused before any backend is read)."""
    repo = tmp_path / "repo"
    copy_checkout(BROKEN / "subnet-overlap", repo)
    args = ["reconcile", "--once", "--path", str(repo), "--state-dir", str(tmp_path / "state")]
    assert main(args) == 1
    assert len(parses) == _files(repo)
    parses.clear()
    assert main(args) == 1
    assert parses == []
    assert main([*args, "--no-cache"]) == 1
    assert len(parses) == _files(repo)
