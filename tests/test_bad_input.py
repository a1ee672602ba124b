"""Hostile and broken input never crashes `unet validate`.

Every case below puts one defect into a copy of the example repo and runs the CLI, once on
the folder and once on a commit of it (`--rev HEAD`, read from Git objects). Each must yield
its diagnostic with file and line, exit 1, and print no traceback; the two modes agree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from unet.reconciler import validate as validate_module
from unet.reconciler.cli import main
from unet.reconciler.sources import DEFAULT_MAX_FILE_BYTES, SourceFile

API = "apiVersion: network.osac.io/v1alpha1\n"
SUBNET = API + "kind: Subnet\nmetadata:\n  name: extra\n"  # lines 1-4; spec starts on 5
TENANT = API + "kind: Tenant\nmetadata:\n  name: hooli\n"
Setup = Callable[[Path], None]


@dataclass(frozen=True)
class Case:
    setup: Setup
    code: str
    file: str
    line: int
    git: bool = True  # False when Git cannot hold the defect (a FIFO)
    alone: bool = False  # True when it cannot share a repo with the other defects


def write(rel: str, content: str | bytes) -> Setup:
    def setup(repo: Path) -> None:
        target = repo / os.fsdecode(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)

    return setup


def symlink(rel: str, target: str) -> Setup:
    def setup(repo: Path) -> None:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, repo / rel)

    return setup


def sparse(rel: str, size: int) -> Setup:
    """A file of `size` bytes that takes no disk space (and no memory to write)."""

    def setup(repo: Path) -> None:
        with open(repo / rel, "wb") as out:
            out.truncate(size)

    return setup


def fifo(rel: str) -> Setup:
    return lambda repo: os.mkfifo(repo / rel)


def both(*setups: Setup) -> Setup:
    def setup(repo: Path) -> None:
        for step in setups:
            step(repo)

    return setup


LAUGHS = (
    SUBNET
    + "  labels:\n"
    + '    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + "".join(
        f"    {name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
)

CASES: dict[str, Case] = {
    # --- not YAML -------------------------------------------------------------------------
    "malformed YAML": Case(  # the line where the list opens, not where the file ends
        write("tenants/acme/broken.yaml", SUBNET + "spec:\n  virtualNetwork: [prod\n"),
        "YAML_SYNTAX", "tenants/acme/broken.yaml", 6,
    ),
    "tab indentation": Case(
        write("tenants/acme/tabs.yaml", SUBNET + "spec:\n\tvirtualNetwork: prod\n"),
        "YAML_SYNTAX", "tenants/acme/tabs.yaml", 6,
    ),
    "NUL byte": Case(
        write("tenants/acme/nul.yaml", SUBNET + "spec:\n  virtualNetwork: pr\0od\n"),
        "YAML_SYNTAX", "tenants/acme/nul.yaml", 6,
    ),
    "binary junk": Case(
        write("provider/junk.yaml", bytes(range(256)) * 4),
        "YAML_SYNTAX", "provider/junk.yaml", 2,  # byte 0x80 follows the one '\n'
    ),
    "control characters in UTF-8": Case(
        write("provider/ctl.yaml", API + "kind: Tenant\n\x1b[31m\n"),
        "YAML_SYNTAX", "provider/ctl.yaml", 3,
    ),
    "non-UTF-8 bytes": Case(
        write("provider/tenants/latin1.yaml",
              TENANT.encode() + b"  labels:\n    city: Z\xfcrich\nspec:\n  regions: [region-a]\n"),
        "YAML_SYNTAX", "provider/tenants/latin1.yaml", 6,
    ),
    "UTF-16 with BOM": Case(
        write("provider/tenants/utf16.yaml", (TENANT + "spec: {regions: [a]}\n").encode("utf-16")),
        "YAML_SYNTAX", "provider/tenants/utf16.yaml", 1,
    ),
    "undefined alias": Case(
        write("tenants/acme/alias.yaml", SUBNET + "spec:\n  virtualNetwork: *vn\n"),
        "YAML_SYNTAX", "tenants/acme/alias.yaml", 6,
    ),
    "tag that lies about its type": Case(
        write("tenants/acme/tagged.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n"
              "  mtu: !!int fifteen-hundred\n"),
        "YAML_SYNTAX", "tenants/acme/tagged.yaml", 7,
    ),
    "integer beyond Python's digit limit": Case(
        write("tenants/acme/digits.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n"
              "  mtu: " + "9" * 5000 + "\n"),
        "YAML_SYNTAX", "tenants/acme/digits.yaml", 7,
    ),
    # --- unsafe YAML ----------------------------------------------------------------------
    "billion laughs": Case(
        write("tenants/acme/laughs.yaml", LAUGHS), "YAML_UNSAFE", "tenants/acme/laughs.yaml", 6,
    ),
    "recursive alias": Case(
        write("tenants/acme/recursive.yaml", SUBNET + "spec: &a\n  virtualNetwork: [*a]\n"),
        "YAML_UNSAFE", "tenants/acme/recursive.yaml", 5,
    ),
    "merge key": Case(
        write("tenants/acme/merge.yaml",
              API + "kind: Subnet\nmetadata: &m\n  name: extra\nspec:\n  <<: *m\n"),
        "YAML_UNSAFE", "tenants/acme/merge.yaml", 6,
    ),
    "python object tag": Case(
        write("tenants/acme/python.yaml",
              SUBNET + "spec: !!python/object/apply:os.system [echo pwned]\n"),
        "YAML_UNSAFE", "tenants/acme/python.yaml", 5,
    ),
    "local tag": Case(
        write("tenants/acme/local-tag.yaml", SUBNET + "spec: !Ref prod\n"),
        "YAML_UNSAFE", "tenants/acme/local-tag.yaml", 5,
    ),
    "deep flow nesting (crashed libyaml)": Case(
        write("provider/deep.yaml", "[" * 200_000 + "]" * 200_000),
        "YAML_UNSAFE", "provider/deep.yaml", 1,
    ),
    "deep block nesting": Case(
        write("provider/deep-block.yaml", "".join("  " * i + "a:\n" for i in range(100))),
        "YAML_UNSAFE", "provider/deep-block.yaml", 66,
    ),
    "complex mapping key": Case(
        write("tenants/acme/complex.yaml", SUBNET + "spec:\n  ? [a, b]\n  : prod\n"),
        "YAML_UNSAFE", "tenants/acme/complex.yaml", 6,
    ),
    "duplicate key": Case(
        write("tenants/acme/dup.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n"
              "  ipv4Cidr: 10.10.9.0/24\n  virtualNetwork: prod\n"),
        "YAML_DUPLICATE_KEY", "tenants/acme/dup.yaml", 8,
    ),
    # --- not a manifest -------------------------------------------------------------------
    "empty file": Case(write("provider/empty.yaml", ""), "SCHEMA_TYPE", "provider/empty.yaml", 1),
    "only comments": Case(
        write("provider/comments.yaml", "# nothing yet\n---\n"),
        "SCHEMA_TYPE", "provider/comments.yaml", 1,
    ),
    "document is a list": Case(
        write("provider/list.yaml", "- " + API + "- kind: Tenant\n"),
        "SCHEMA_TYPE", "provider/list.yaml", 1,
    ),
    "document is a scalar": Case(
        write("provider/scalar.yaml", "hello world\n"), "SCHEMA_TYPE", "provider/scalar.yaml", 1,
    ),
    "second document is a scalar": Case(
        write("provider/tenants/two.yaml", TENANT + "spec:\n  regions: [region-a]\n---\n42\n"),
        "SCHEMA_TYPE", "provider/tenants/two.yaml", 8,
    ),
    "unet.yaml is a list": Case(
        write("unet.yaml", "- prune: true\n"), "SCHEMA_TYPE", "unet.yaml", 1, alone=True,
    ),
    # --- wrong shape ----------------------------------------------------------------------
    "unknown kind": Case(
        write("tenants/acme/kind.yaml", API + "kind: Subnett\nmetadata:\n  name: x\n"),
        "UNKNOWN_KIND", "tenants/acme/kind.yaml", 2,
    ),
    "unknown apiVersion": Case(
        write("tenants/acme/api.yaml", "apiVersion: v1\nkind: Subnet\nmetadata:\n  name: x\n"),
        "UNKNOWN_KIND", "tenants/acme/api.yaml", 1,
    ),
    "kind is a mapping": Case(
        write("tenants/acme/kind-map.yaml", API + "kind: {Subnet: 1}\nmetadata:\n  name: x\n"),
        "UNKNOWN_KIND", "tenants/acme/kind-map.yaml", 2,
    ),
    "wrong type of a field": Case(
        write("tenants/acme/mtu.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n"
              "  ipv4Cidr: 10.10.9.0/24\n  mtu: big\n"),
        "SCHEMA_TYPE", "tenants/acme/mtu.yaml", 8,
    ),
    "metadata is a list": Case(
        write("tenants/acme/meta.yaml", API + "kind: Subnet\nmetadata:\n  - extra\n"
              "spec:\n  virtualNetwork: prod\n"),
        "SCHEMA_TYPE", "tenants/acme/meta.yaml", 3,
    ),
    "integer keys": Case(
        write("tenants/acme/int-keys.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n  1: x\n"),
        "SCHEMA_UNKNOWN_FIELD", "tenants/acme/int-keys.yaml", 7,
    ),
    "name of 100,000 characters": Case(
        write("tenants/acme/long.yaml", API + "kind: Subnet\nmetadata:\n  name: " + "a" * 100_000
              + "\nspec:\n  virtualNetwork: prod\n"),
        "SCHEMA_TYPE", "tenants/acme/long.yaml", 4,
    ),
    # --- size -----------------------------------------------------------------------------
    "50 MB file": Case(
        sparse("provider/huge.yaml", 50 * 1024 * 1024), "FILE_TOO_LARGE", "provider/huge.yaml", 1,
    ),
    "just above the bound": Case(
        write("provider/big.yaml", "# " + "x" * DEFAULT_MAX_FILE_BYTES + "\n"),
        "FILE_TOO_LARGE", "provider/big.yaml", 1,
    ),
    # --- paths ----------------------------------------------------------------------------
    "symlink to /etc/passwd": Case(
        symlink("provider/passwd.yaml", "/etc/passwd"), "PATH_UNSAFE", "provider/passwd.yaml", 1,
    ),
    "relative symlink out of the repo": Case(
        both(lambda repo: (repo.parent / "outside.yaml").write_text(TENANT),
             symlink("provider/tenants/out.yaml", "../../../outside.yaml")),
        "PATH_UNSAFE", "provider/tenants/out.yaml", 1,
    ),
    "absolute symlink into the repo": Case(
        lambda repo: os.symlink(repo / "provider/pools.yaml", repo / "provider/abs.yaml"),
        "PATH_UNSAFE", "provider/abs.yaml", 1,
    ),
    "symlinked folder": Case(
        symlink("tenants/acme/more", "../globex"), "PATH_UNSAFE", "tenants/acme/more", 1,
    ),
    "symlinked folder out of the repo": Case(
        symlink("provider/etc", "/etc"), "PATH_UNSAFE", "provider/etc", 1,
    ),
    "symlink to the repo root": Case(
        symlink("provider/root.yaml", ".."), "PATH_UNSAFE", "provider/root.yaml", 1,
    ),
    "dangling symlink": Case(
        symlink("provider/gone.yaml", "nowhere.yaml"), "PATH_UNSAFE", "provider/gone.yaml", 1,
    ),
    "symlink loop": Case(
        symlink("provider/loop.yaml", "loop.yaml"), "PATH_UNSAFE", "provider/loop.yaml", 1,
    ),
    "unet.yaml is a symlink to /etc/passwd": Case(
        both(lambda repo: (repo / "unet.yaml").unlink(), symlink("unet.yaml", "/etc/passwd")),
        "PATH_UNSAFE", "unet.yaml", 1, alone=True,
    ),
    "tenants/ is a symlinked folder": Case(
        both(lambda repo: (repo / "tenants").rename(repo / "tenant-data"),
             symlink("tenants", "tenant-data")),
        "PATH_UNSAFE", "tenants", 1, alone=True,
    ),
    "FIFO named like a manifest": Case(
        fifo("provider/x.yaml"), "PATH_UNSAFE", "provider/x.yaml", 1, git=False,
    ),
    "file name with a space": Case(
        write("provider/my tenant.yaml", TENANT + "spec:\n  regions: [region-a]\n"),
        "PATH_UNSAFE", "provider/my tenant.yaml", 1,
    ),
    "file name with a newline": Case(
        write("provider/new\nline.yaml", TENANT + "spec:\n  regions: [region-a]\n"),
        "PATH_UNSAFE", "provider/new\\nline.yaml", 1,
    ),
    "file name that is not UTF-8": Case(
        write(os.fsdecode(b"provider/caf\xe9.yaml"), TENANT + "spec:\n  regions: [region-a]\n"),
        "PATH_UNSAFE", "provider/caf\ufffd.yaml", 1,
    ),
    "folder name with a space": Case(
        write("tenants/acme/my stuff/x.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n"),
        "PATH_UNSAFE", "tenants/acme/my stuff/x.yaml", 1,
    ),
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
                    "-c", "commit.gpgsign=false", *args], check=True, capture_output=True)


def _commit(repo: Path) -> None:
    _git(repo, "init", "-q")
    _git(repo, "add", "--all", ".")
    _git(repo, "commit", "-q", "--no-verify", "-m", "case")


def _validate(repo: Path, mode: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    args = ["validate", str(repo), "--format", "json"]
    if mode == "git":
        _commit(repo)
        args += ["--rev", "HEAD"]
    code = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "internal error" not in err, err
    return code, json.loads(out)


def _assert_located(report: dict) -> None:
    for diag in report["diagnostics"]:
        assert diag["file"], diag
        if diag["code"] != "REPO_CONFIG_MISSING":  # that one may name a file that is not there
            assert isinstance(diag["line"], int) and diag["line"] >= 1, diag


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files whose content the pipeline read, in either mode."""
    seen: list[str] = []
    original = validate_module.repo_files

    def recording(item: SourceFile) -> Callable[[], bytes]:
        read = item.read
        return lambda: (seen.append(item.path), read())[1]

    def repo_files(path: Path, rev: str | None, *rest: int) -> Iterator[object]:
        for item in original(path, rev, *rest):
            if isinstance(item, SourceFile):
                item.read = recording(item)
            yield item

    monkeypatch.setattr(validate_module, "repo_files", repo_files)
    return seen


# Git cannot hold some defects (a FIFO): those run in folder mode only.
MODES_AND_CASES = [(mode, name) for name, case in CASES.items()
                   for mode in (("folder", "git") if case.git else ("folder",))]


@pytest.mark.parametrize(("mode", "name"), MODES_AND_CASES)
def test_bad_input_is_a_located_diagnostic(
    name: str, mode: str, example_copy: Path, reads: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = CASES[name]
    case.setup(example_copy)
    code, report = _validate(example_copy, mode, capsys)
    assert code == 1
    assert report["valid"] is False
    found = [(d["code"], d["file"], d["line"]) for d in report["diagnostics"]]
    assert (case.code, case.file, case.line) in found, found
    _assert_located(report)
    if case.code == "FILE_TOO_LARGE":
        assert reads, "the spy sees what the pipeline reads"
        assert case.file not in reads, "rejected by its size, without reading it"


def test_50_mb_file_is_rejected_by_its_size(example_copy: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    sparse("provider/huge.yaml", 50 * 1024 * 1024)(example_copy)
    for mode in ("folder", "git"):
        _code, report = _validate(example_copy, mode, capsys)
        (diag,) = [d for d in report["diagnostics"] if d["code"] == "FILE_TOO_LARGE"]
        assert "52,428,800 bytes" in diag["message"]


# --- accepted -----------------------------------------------------------------------------


def _crlf(repo: Path) -> None:
    for path in repo.rglob("*.yaml"):
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def _bom(repo: Path) -> None:
    for path in repo.rglob("*.yaml"):
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


def _moved_behind_symlinks(repo: Path) -> None:
    (repo / "shared").mkdir()
    os.replace(repo / "provider/hosttypes.yaml", repo / "shared/hosttypes.yaml")
    os.replace(repo / "provider/pools.yaml", repo / "shared/pools.yaml")
    os.symlink("../shared/hosttypes.yaml", repo / "provider/hosttypes.yaml")
    os.symlink("pools.yaml", repo / "shared/link.yaml")  # a chain of two links
    os.symlink("../shared/link.yaml", repo / "provider/pools.yaml")


ACCEPTED: dict[str, Setup] = {
    "Windows line endings": _crlf,
    "byte order marks": _bom,
    "symlinks to files inside the repo": _moved_behind_symlinks,
    "odd names outside the manifests": both(
        write("provider/READ ME.md", "notes"),
        write("tenants/acme/.drafts/x y.yaml", "[unclosed"),
        write(".github/workflows/ci.yaml", "{{ not yaml"),
        symlink("tenants/acme/notes.txt", "nowhere.txt"),
    ),
}


@pytest.mark.parametrize("mode", ["folder", "git"])
@pytest.mark.parametrize("name", list(ACCEPTED))
def test_harmless_variants_are_accepted(name: str, mode: str, example_copy: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    ACCEPTED[name](example_copy)
    code, report = _validate(example_copy, mode, capsys)
    assert sorted(d["code"] for d in report["diagnostics"]) == ["POLICY_RULE_NOT_REALISED",
                                                                "TARGET_PENDING"]
    assert code == 0
    assert report["summary"]["documents"] == 63


@pytest.mark.parametrize("mode", ["folder", "git"])
def test_lines_survive_crlf_and_bom(mode: str, example_copy: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    write("tenants/acme/mtu.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n"
          "  ipv4Cidr: 10.10.9.0/24\n  mtu: big\n")(example_copy)
    _crlf(example_copy)
    _bom(example_copy)
    code, report = _validate(example_copy, mode, capsys)
    assert code == 1
    found = {(d["code"], d["file"], d["line"]) for d in report["diagnostics"]}
    assert found == {("SCHEMA_TYPE", "tenants/acme/mtu.yaml", 8),
                     ("TARGET_PENDING", "tenants/acme/external.yaml", 56),
                     ("POLICY_RULE_NOT_REALISED", "tenants/acme/security-groups.yaml", 21)}


def _all_defects(repo: Path, git: bool = False) -> set[tuple[str, str, int]]:
    """Put every defect Git can hold (or every defect) into one repo; the expected diagnostics."""
    cases = [c for c in CASES.values() if not c.alone and (c.git or not git)]
    for case in cases:
        case.setup(repo)
    return {(c.code, c.file, c.line) for c in cases}


def test_every_defect_at_once_is_reported_in_one_run(example_copy: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    expected = _all_defects(example_copy)
    code, report = _validate(example_copy, "folder", capsys)
    assert code == 1
    assert expected <= {(d["code"], d["file"], d["line"]) for d in report["diagnostics"]}
    _assert_located(report)


def test_folder_and_git_report_the_same(example_copy: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _all_defects(example_copy, git=True)
    reports = [_validate(example_copy, mode, capsys)[1] for mode in ("folder", "git")]
    folder, git = ({(d["code"], d["file"], d["line"], d["path"]) for d in r["diagnostics"]}
                   for r in reports)
    assert folder == git
    assert reports[0]["summary"] == reports[1]["summary"]


@pytest.mark.parametrize("output", ["human", "github"])
def test_other_formats_survive_every_defect(output: str, example_copy: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    _all_defects(example_copy)
    assert main(["validate", str(example_copy), "--format", output]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "internal error" not in err, err
    assert "PATH_UNSAFE" in out and "caf\ufffd.yaml" in out


# --- Git submodules -----------------------------------------------------------------------


def test_a_submodule_is_refused_alike_from_the_folder_and_from_git(
        example_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its files are another repository's: folder mode would read a checkout of it and Git
    mode only a commit id, so both refuse it instead of disagreeing."""
    vendored = tmp_path / "vendored"
    write("subnet.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n  ipv4Cidr: 10.10.30.0/24\n"
          )(vendored)
    _commit(vendored)
    _commit(example_copy)
    _git(example_copy, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
         str(vendored), "tenants/acme/vendored")
    _git(example_copy, "commit", "-q", "--no-verify", "-m", "vendor a subnet")
    assert (example_copy / "tenants/acme/vendored/subnet.yaml").is_file(), "checked out"
    reports = []
    for rev in (None, "HEAD"):
        args = ["validate", str(example_copy), "--format", "json", "--no-cache"]
        code = main([*args, "--rev", rev] if rev else args)
        out, err = capsys.readouterr()
        assert code == 1, err
        report = json.loads(out)
        found = [(d["code"], d["file"], d["line"]) for d in report["diagnostics"]]
        assert ("PATH_UNSAFE", "tenants/acme/vendored", 1) in found, found
        assert report["summary"]["documents"] == 63, "nothing of the submodule was read"
        reports.append({(d["code"], d["file"], d["message"]) for d in report["diagnostics"]})
    assert reports[0] == reports[1]


def test_a_nested_repository_in_the_folder_is_refused(
        example_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nested = example_copy / "tenants" / "acme" / "nested"
    write("subnet.yaml", SUBNET + "spec:\n  virtualNetwork: prod\n")(nested)
    _commit(nested)
    code, report = _validate(example_copy, "folder", capsys)
    assert code == 1
    assert ("PATH_UNSAFE", "tenants/acme/nested", 1) in [
        (d["code"], d["file"], d["line"]) for d in report["diagnostics"]]


def test_a_submodule_not_checked_out_is_refused_alike(
        example_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A clone without --recurse-submodules (actions/checkout's default) has an empty folder
    where the submodule goes: read as it is, a whole tenant would seem removed."""
    vendored = tmp_path / "globex"
    shutil.copytree(example_copy / "tenants" / "globex", vendored)
    _commit(vendored)
    shutil.rmtree(example_copy / "tenants" / "globex")
    _commit(example_copy)
    _git(example_copy, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
         str(vendored), "tenants/globex")
    _git(example_copy, "commit", "-q", "--no-verify", "-m", "globex from its own repo")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(example_copy), str(clone)], check=True,
                   capture_output=True)
    assert not any((clone / "tenants" / "globex").iterdir()), "not checked out"
    for rev in (None, "HEAD"):
        args = ["validate", str(clone), "--format", "json", "--no-cache"]
        assert main([*args, "--rev", rev] if rev else args) == 1
        report = json.loads(capsys.readouterr().out)
        assert ("PATH_UNSAFE", "tenants/globex", 1) in [
            (d["code"], d["file"], d["line"]) for d in report["diagnostics"]], rev


def test_a_symlink_into_a_submodule_is_refused_alike(
        example_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vendored = tmp_path / "vendor"
    write("extra.yaml", API + "kind: ComputeInstance\nmetadata:\n  name: sneaky\nspec:\n"
          "  networkAttachments:\n    - subnet: web\n")(vendored)
    _commit(vendored)
    _commit(example_copy)
    _git(example_copy, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
         str(vendored), "vendor")
    os.symlink("../../vendor/extra.yaml", example_copy / "tenants" / "acme" / "sneaky.yaml")
    _git(example_copy, "add", "-A")
    _git(example_copy, "commit", "-q", "--no-verify", "-m", "a link into the submodule")
    found = []
    for rev in (None, "HEAD"):
        args = ["validate", str(example_copy), "--format", "json", "--no-cache"]
        assert main([*args, "--rev", rev] if rev else args) == 1
        report = json.loads(capsys.readouterr().out)
        found.append({(d["code"], d["file"], d["message"]) for d in report["diagnostics"]
                      if d["code"] == "PATH_UNSAFE"})
    assert found[0] == found[1] == {
        ("PATH_UNSAFE", "tenants/acme/sneaky.yaml",
         "'tenants/acme/sneaky.yaml' is a symlink into another Git repository (a submodule "
         "or a clone); its files are not part of this revision")}
