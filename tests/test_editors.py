"""The editor set-up the README gives works in the real YAML language server.

yaml-language-server (what VS Code's YAML extension and other editors run) is pinned by
tests/support/editor/package-lock.json; scripts/setup installs it under .unet/editor/.
The tests drive it over stdio with the README's `yaml.schemas` settings and the schema
`unet schema --print` writes, in a copy of the example repo, and read the diagnostics it
publishes. Without node or the server they fail, saying what is missing.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from unet.reconciler.cli import main

from .conftest import EXAMPLE, ROOT, copy_checkout
from .support.lsp import LanguageServer
from .test_editor_schema import CASES, changed_file

EDITOR = ROOT / ".unet" / "editor"
SERVER = EDITOR / "node_modules" / "yaml-language-server"
PINNED = json.loads((ROOT / "tests" / "support" / "editor" / "package.json").read_text())[
    "dependencies"]["yaml-language-server"]
#: The README's settings (VS Code: .vscode/settings.json), plus: no schema catalogue from
#: the network.
SETTINGS = {"yaml": {"schemas": {"./unet.schema.json": ["unet.yaml", "provider/**", "tenants/**"]},
                     "schemaStore": {"enable": False}}}

VIRTUAL_NETWORK = """\
apiVersion: network.osac.io/v1alpha1
kind: VirtualNetwork
metadata:
  name: {name}
spec:
  region: region-a
  {cidr}
"""
GOOD = VIRTUAL_NETWORK.format(name="good", cidr="ipv4Cidr: 10.9.0.0/16")
#: An unknown field and no CIDR: two diagnostics, on lines 6 and 4 of the document.
BAD = VIRTUAL_NETWORK.format(name="bad", cidr="ipv4CIDR: 10.9.0.0/16")


def _server_command() -> list[str]:
    node = shutil.which("node")
    assert node is not None, ("node (Node.js) is not installed; the editor tests run the YAML "
                              "language server with it: run scripts/setup")
    package = SERVER / "package.json"
    assert package.is_file(), (f"yaml-language-server {PINNED} is not installed under "
                               f"{EDITOR.relative_to(ROOT)}/: run scripts/setup (it needs npm)")
    installed = json.loads(package.read_text())["version"]
    assert installed == PINNED, (f"yaml-language-server {installed} is installed, {PINNED} is "
                                 "pinned: run scripts/setup")
    return [node, str(SERVER / "bin" / "yaml-language-server"), "--stdio"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the example repo with the schema `unet schema --print` writes."""
    root = tmp_path_factory.mktemp("editor") / "network-repo"
    copy_checkout(EXAMPLE, root)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["schema", "--print"]) == 0
    (root / "unet.schema.json").write_text(printed.getvalue())
    return root


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[LanguageServer]:
    running = LanguageServer(_server_command(), workspace, SETTINGS,
                             workspace.parent / "yaml-language-server.log")
    try:
        yield running
    finally:
        running.close()


def _lines(diagnostics: list[dict[str, Any]]) -> list[int]:
    """0-based lines of the diagnostics."""
    return sorted(d["range"]["start"]["line"] for d in diagnostics)


def _open(server: LanguageServer, files: dict[Path, str]) -> list[list[int]]:
    """Write and open the files; the lines of each one's diagnostics, in order."""
    uris = []
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        uris.append(server.open(path))
    found = server.diagnostics_of(uris)
    return [_lines(found[uri]) for uri in uris]


def test_every_manifest_of_the_example_repo_opens_clean(
        server: LanguageServer, workspace: Path) -> None:
    files = sorted(workspace.rglob("*.yaml"))
    assert any("\n---\n" in path.read_text() for path in files)  # multi-document files too
    found = server.diagnostics_of([server.open(path) for path in files])
    assert {uri: d for uri, d in found.items() if d} == {}


def test_a_bad_single_document_manifest_gets_diagnostics(
        server: LanguageServer, workspace: Path) -> None:
    tenant = workspace / "tenants" / "acme"
    assert _open(server, {tenant / "good.yaml": GOOD, tenant / "bad.yaml": BAD}) == [[], [4, 6]]



def test_an_edit_that_breaks_a_manifest_gets_diagnostics(
        server: LanguageServer, workspace: Path) -> None:
    uri = server.open(workspace / "unet.yaml")
    assert server.diagnostics_of([uri])[uri] == []
    text = (workspace / "unet.yaml").read_text()
    assert "prune: true" in text
    server.change(uri, text.replace("prune: true", "prune: sometimes"))
    found = server.diagnostics_of([uri])[uri]
    assert [d["message"] for d in found] == ['Incorrect type. Expected "boolean".']


def test_a_bad_document_of_a_multi_document_file_gets_diagnostics(
        server: LanguageServer, workspace: Path) -> None:
    provider = workspace / "provider"
    second = GOOD.count("\n") + 1  # the first line of the second document
    assert _open(server, {provider / "good-multi.yaml": f"{GOOD}---\n{GOOD}",
                          provider / "bad-multi.yaml": f"{GOOD}---\n{BAD}"}) == [
        [], [second + 4, second + 6]]


def test_the_editor_flags_what_unet_validate_reports_with_its_own_code(
        server: LanguageServer, workspace: Path) -> None:
    uris = {}
    for case in CASES:
        file, text = changed_file(case)
        path = workspace / Path(file).parent / f"{case.replace(' ', '-')}.yaml"
        path.write_text(text)
        uris[case] = server.open(path)
    found = server.diagnostics_of(list(uris.values()))
    assert sorted(case for case, uri in uris.items() if not found[uri]) == []


def test_a_modeline_applies_to_its_own_document_only(
        server: LanguageServer, workspace: Path) -> None:
    """Outside the globs, `# yaml-language-server: $schema=` (relative to the file) picks
    the schema of the document it opens; other documents of the file stay unchecked."""
    modeline = "# yaml-language-server: $schema=../unet.schema.json\n"
    notes = workspace / "notes"
    second = (modeline + BAD).count("\n") + 1
    assert _open(server, {notes / "one.yaml": modeline + BAD,
                          notes / "two.yaml": f"{modeline}{BAD}---\n{BAD}",
                          notes / "both.yaml": f"{modeline}{BAD}---\n{modeline}{BAD}"}) == [
        [5, 7], [5, 7], [5, 7, second + 5, second + 7]]


def _hover(server: LanguageServer, path: Path, line_text: str, field: str) -> str:
    """The hover text the server shows over `field` on the first line holding
    `line_text` of the file."""
    uri = server.open(path)
    server.diagnostics_of([uri])
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if line_text in text)
    found = server.request("textDocument/hover", {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": lines[line].index(field) + 1}})
    assert found is not None, f"no hover over {field} on line {line + 1}"
    contents = found["contents"]
    return str(contents["value"] if isinstance(contents, dict) else contents)


def test_hover_says_what_changing_an_immutable_field_replaces(
        server: LanguageServer, workspace: Path) -> None:
    network = workspace / "tenants" / "acme" / "network.yaml"
    assert "changing it replaces the subnet and every port on it" in _hover(
        server, network, "ipv4Cidr: 10.10.1.0/24", "ipv4Cidr")
    assert "Immutable" not in _hover(server, network, "mtu: 1500", "mtu")
    compute = workspace / "tenants" / "acme" / "compute.yaml"
    assert "changing it replaces every port of the workload" in _hover(
        server, compute, "- subnet: web", "subnet")
    assert "Immutable" not in _hover(server, compute, "securityGroups:", "securityGroups")
