"""Loading details that the bad-input matrix does not cover."""

from __future__ import annotations

import time

import pytest

from unet.reconciler.load import MAX_ALIASES, _parse, parse_manifest_file
from unet.reconciler.sources import SourceFile, folder_files

from .conftest import EXAMPLE


def _anchored(uses: int) -> bytes:
    """A valid document whose 30-value block is anchored once and aliased `uses` times."""
    block = "\n".join(f"    k{i}: v{i}" for i in range(30))
    aliases = "\n".join(f"  copy{i}: *common" for i in range(uses))
    return f"a:\n  common: &common\n{block}\n{aliases}\n".encode()


def test_ordinary_anchors_are_accepted() -> None:
    documents, problems = parse_manifest_file("x.yaml", _anchored(4))
    assert problems == []
    assert documents[0].data["a"]["copy3"]["k29"] == "v29"


def test_alias_uses_are_bounded_not_the_values_behind_them() -> None:
    _docs, problems = parse_manifest_file("x.yaml", _anchored(MAX_ALIASES + 1))
    assert [p.code for p in problems] == ["YAML_UNSAFE"]
    assert "aliases" in problems[0].message


def test_an_alias_bomb_under_the_alias_count_is_caught_by_its_size() -> None:
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 8)]
    _docs, problems = parse_manifest_file("bomb.yaml", "\n".join(levels).encode())
    assert [p.code for p in problems] == ["YAML_UNSAFE"]
    assert "expands" in problems[0].message


def test_a_broken_document_with_long_metadata_is_read_at_once() -> None:
    """Its kind and name are looked for in its text: in time linear in its lines."""
    labels = "".join(f"    label-{i}: value\n" for i in range(40))
    text = f"kind: Tenant\nmetadata:\n  labels:\n{labels}  name: Not_A_Name\nspec: [\n"
    started = time.perf_counter()
    documents, problems = parse_manifest_file("provider/tenants/x.yaml", text.encode())
    assert time.perf_counter() - started < 1
    assert [p.code for p in problems] == ["YAML_SYNTAX"]
    assert documents[0].broken and documents[0].data is None


def test_line_maps_are_built_only_when_asked_and_as_before() -> None:
    """A valid file maps no lines; the first `line_of` maps its documents from their text,
    exactly as building them eagerly (what a duplicate key does) maps them."""
    for item in folder_files(EXAMPLE):
        if not isinstance(item, SourceFile):
            continue
        content = item.read()
        documents, _problems = parse_manifest_file(item.path, content)
        eager, _ = _parse(item.path, content.decode(), content, salvage=True, with_lines=True)
        assert all(doc.built_lines is None for doc in documents), item.path
        assert [doc.lines for doc in documents] == [doc.lines for doc in eager], item.path
        assert all(doc.lines for doc in documents), item.path


def test_a_duplicate_key_is_reported_as_before_and_its_document_kept() -> None:
    text = b"kind: Tenant\nmetadata:\n  name: a\n  name: b\nspec:\n  - x\n  - y\n"
    [document], [problem] = parse_manifest_file("provider/tenants/a.yaml", text)
    assert (problem.code, problem.line, problem.path) == ("YAML_DUPLICATE_KEY", 4,
                                                          "/metadata/name")
    assert "first on line 3" in problem.message
    assert document.data["metadata"] == {"name": "a"}
    assert document.line_of(("spec", 1)) == 7


HEAD = "kind: VirtualNetwork\nmetadata:\n  name: prod\nspec:\n"  # lines 1-4


@pytest.mark.parametrize(("body", "where", "message", "hint"), [
    pytest.param("\tregion: region-a\n", (5, 1),
                 "a tab character: YAML indents with spaces only",
                 "replace the tab with spaces (two per level)", id="a tab opening a mapping"),
    pytest.param("  region: region-a\n  \tipv4Cidr: 10.0.0.0/16\n", (6, 3),
                 "a tab character: YAML indents with spaces only",
                 "replace the tab with spaces (two per level)", id="a tab after spaces"),
    pytest.param("  region region-a\n  ipv4Cidr: 10.0.0.0/16\n", (5, 9), "a key without ':'",
                 "write 'region: region-a'", id="a key without ':' above another key"),
    pytest.param("  region region-a  # the region\n\n  # the CIDR\n  ipv4Cidr: 10.0.0.0/16\n",
                 (5, 9), "a key without ':'", "write 'region: region-a'",
                 id="a key without ':' and comments"),
    pytest.param("  region: region-a\n  ipv4Cidr 10.0.0.0/16\n", (6, 11), "a key without ':'",
                 "write 'ipv4Cidr: 10.0.0.0/16'", id="a key without ':' on the last line"),
    pytest.param("  region: region-a\n  dhcp\n  mtu: 1500\n", (6, 7), "a key without ':'",
                 "write 'dhcp:'", id="a key without ':' or a value"),
    pytest.param("  attachments:\n    - subnet web\n      primary: true\n", (6, 13),
                 "a key without ':'", "write 'subnet: web'", id="a list item without ':'"),
    pytest.param("  region:region-a\n  ipv4Cidr: 10.0.0.0/16\n", (5, 10),
                 "a ':' without a space after it", "write 'region: region-a'",
                 id="a ':' without a space"),
    pytest.param("  region: region-a\n    ipv4Cidr: 10.0.0.0/16\n", (6, 5),
                 "this line is indented more than the key above it",
                 "indent with spaces, so that the fields of one mapping line up exactly",
                 id="a line indented too deep"),
    pytest.param("  region: a: b\n", (5, 12),
                 "a value holds ': ', which YAML reads as the end of a key",
                 "put the value in quotes: 'a: b'", id="a value holding ': '"),
    pytest.param("  region: @a\n", (5, 11), "a value cannot start with '@': YAML reserves it",
                 "put the value in quotes", id="a reserved character"),
])
def test_a_syntax_error_is_reported_at_the_mistake_with_what_to_do(
        body: str, where: tuple[int, int], message: str, hint: str) -> None:
    """libyaml notices a missing ':' only at the next key, and says so in its own words."""
    [document], [problem] = parse_manifest_file("tenants/acme/network.yaml",
                                                (HEAD + body).encode())
    assert document.broken and document.data == {"kind": "VirtualNetwork",
                                                 "metadata": {"name": "prod"}}
    assert (problem.code, (problem.line, problem.column)) == ("YAML_SYNTAX", where)
    assert (problem.message, problem.hint) == (message, hint)


def test_manifests_let_go_of_their_yaml_data_and_give_it_back_from_the_model() -> None:
    """Every run keeps the models, not the YAML data beside them (85 MB at 1,000 tenants);
    what a manifest says (guardrails compare it between revisions) is still all there, with
    the defaults its model filled in."""
    import yaml

    from unet.reconciler.validate import validate_repo

    def holds(found: object, written: object) -> bool:
        if isinstance(written, dict):
            return isinstance(found, dict) and all(
                key in found and holds(found[key], value) for key, value in written.items())
        if isinstance(written, list):
            return isinstance(found, list) and len(found) == len(written) and all(
                holds(a, b) for a, b in zip(found, written, strict=True))
        return found == written

    validation = validate_repo(EXAMPLE)
    assert validation.ok and validation.manifests
    assert all(m.doc.data is None for m in validation.manifests)
    for manifest in validation.manifests:
        text = (EXAMPLE / manifest.doc.file).read_text()
        written = list(yaml.safe_load_all(text))[manifest.doc.index]
        assert holds(manifest.data(), written), manifest.ref
