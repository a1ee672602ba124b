"""Property-based tests: random and mutated manifests never crash the pipeline.

Whatever the input, `parse_manifest_file` and `validate_files` return diagnostics instead of
raising, and every diagnostic has a known code, names a file of the repo and a line inside it.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from unet.reconciler.diagnostics import CODES, Diagnostic
from unet.reconciler.load import parse_manifest_file
from unet.reconciler.models import API_VERSION, KINDS
from unet.reconciler.schema import kind_schemas
from unet.reconciler.sources import SourceFile, folder_files
from unet.reconciler.validate import validate_files

from .conftest import EXAMPLE

# UNET_FUZZ_EXAMPLES=5000 for a longer campaign; the default keeps the suite fast.
SETTINGS = settings(max_examples=int(os.environ.get("UNET_FUZZ_EXAMPLES", "200")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

EXAMPLE_FILES: dict[str, bytes] = {
    item.path: item.read() for item in folder_files(EXAMPLE) if isinstance(item, SourceFile)
}
EXAMPLE_DOCS: dict[str, list[Any]] = {
    path: [doc.data for doc in parse_manifest_file(path, content)[0]]
    for path, content in EXAMPLE_FILES.items()
}
FUZZ_PATHS = ["unet.yaml", "provider/fuzz.yaml", "provider/tenants/fuzz.yaml",
              "tenants/acme/fuzz.yaml", "tenants/acme/network.yaml", "tenants/newco/fuzz.yaml"]


# --- the property -------------------------------------------------------------------------


def _line_count(content: bytes) -> int:
    # YAML breaks lines on \n, \r\n and \r (and NEL, LS, PS); splitlines knows all of them.
    return len(content.decode("utf-8", "replace").splitlines())


def _assert_well_formed(diagnostics: list[Diagnostic], files: dict[str, bytes]) -> None:
    for diag in diagnostics:
        assert isinstance(diag, Diagnostic)
        assert diag.code in CODES, diag
        if diag.code == "REPO_CONFIG_MISSING" and diag.line is None:
            assert diag.file == "unet.yaml", diag  # names the file to create; it has no line
            continue
        assert diag.file in files, diag
        assert isinstance(diag.line, int), diag
        # An error at the end of the stream sits on the line after the last one.
        assert 1 <= diag.line <= _line_count(files[diag.file]) + 1, diag


def _validate(files: dict[str, bytes]) -> list[Diagnostic]:
    sources = [SourceFile(path, len(content), lambda content=content: content)
               for path, content in sorted(files.items())]
    result = validate_files(iter(sources))
    _assert_well_formed(result.diagnostics, files)
    return result.diagnostics


def _parse(path: str, content: bytes) -> None:
    documents, diagnostics = parse_manifest_file(path, content)
    _assert_well_formed(diagnostics, {path: content})
    for doc in documents:
        assert doc.file == path
        assert 1 <= doc.line <= _line_count(content) + 1
        assert all(1 <= line <= _line_count(content) + 1 for line in doc.lines.values())


# --- (a) random input as one manifest file ------------------------------------------------

YAML_ALPHABET = [*"[]{}:-?&*!|>'\"#%@`,. \n\t\r~\\abkz019", "\x00", "\ufeff", "é", "<<"]
yamlish = st.lists(st.sampled_from(YAML_ALPHABET), max_size=400).map("".join)
names = st.one_of(st.sampled_from(["web", "prod", "acme", "public-a", "default", "k1", "ovn"]),
                  st.text(max_size=70))
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20,
)

def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in _keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def _schema_fields(schema: Any) -> set[str]:
    if isinstance(schema, dict):
        return set(schema.get("properties", {})) | {
            name for value in schema.values() for name in _schema_fields(value)}
    if isinstance(schema, list):
        return {name for value in schema for name in _schema_fields(value)}
    return set()


# Every field any kind has, so that mutations also add the optional ones the example omits.
FIELD_NAMES = sorted({key for docs in EXAMPLE_DOCS.values() for doc in docs for key in _keys(doc)}
                     | _schema_fields(kind_schemas()))
manifest_like = st.fixed_dictionaries(
    {"apiVersion": st.just(API_VERSION), "kind": st.sampled_from(sorted(KINDS)),
     "metadata": st.fixed_dictionaries({"name": names})},
    optional={"spec": st.dictionaries(st.sampled_from(FIELD_NAMES), json_values, max_size=6)},
)
random_content = st.one_of(
    st.binary(max_size=2000),
    st.text(max_size=1000).map(lambda text: text.encode("utf-8", "surrogatepass")),
    yamlish.map(lambda text: text.encode("utf-8")),
    st.lists(manifest_like, max_size=3).map(
        lambda docs: yaml.safe_dump_all(docs, allow_unicode=True).encode()),
)


@SETTINGS
@given(random_content)
def test_random_content_never_crashes_the_parser(content: bytes) -> None:
    _parse("provider/fuzz.yaml", content)


@SETTINGS
@given(st.sampled_from(FUZZ_PATHS), random_content)
def test_random_file_never_crashes_the_pipeline(path: str, content: bytes) -> None:
    _validate({**EXAMPLE_FILES, path: content})


# --- (b) mutated example manifests --------------------------------------------------------

octet = st.integers(min_value=0, max_value=300)
cidr_like = st.one_of(
    st.builds("{}.{}.{}.{}/{}".format, octet, octet, octet, octet,
              st.integers(min_value=-1, max_value=40)),
    st.builds("{}::{}/{}".format, st.sampled_from(["fd00", "2001:db8", "fe80", "", "ff02"]),
              st.sampled_from(["", "1", "abcd:ef"]), st.integers(min_value=0, max_value=140)),
    st.sampled_from(["10.0.0.0/8", "0.0.0.0/0", "::/0", "10.10.1.5/24", "127.0.0.0/8",
                     "224.0.0.0/4", "255.255.255.255/32", "10.10.0.0/31", "10.10.0.0/33",
                     "10.10.0.0/", "/24", "10.10.0.0/24/24", "1.2.3/24", "10.10.0.0/0x18"]),
)
ip_like = st.one_of(
    st.builds("{}.{}.{}.{}".format, octet, octet, octet, octet),
    st.sampled_from(["10.10.1.1", "10.10.1.0", "10.10.1.255", "::1", "fe80::1%eth0", "1.2.3",
                     "01.02.03.04", "::ffff:10.10.1.1", "203.0.113.10", "2001:db8::", "",
                     "10.10.1.1/24", "0.0.0.0", "1.2.3.4.5", "aa:bb:cc:dd:ee:ff"]),
)
replacement_scalar = st.one_of(
    st.text(max_size=40), cidr_like, ip_like, names,
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([2**63, 2**64 + 1, -1, 0, 65536, 4095, 10**300]),
    st.floats(), st.booleans(), st.none(),
)
interesting_int = st.one_of(
    st.integers(min_value=-2, max_value=70),
    st.sampled_from([127, 128, 255, 256, 1279, 1280, 1500, 4094, 4095, 9000, 9001, 65535,
                     65536, 2**31, 2**63, 2**64 + 1, -(2**63), 10**40]),
)
address_value = st.one_of(ip_like, cidr_like)
range_value = st.fixed_dictionaries({"start": ip_like, "end": ip_like})
other_type = st.one_of(json_scalars, st.just([]), st.just({}), st.lists(names, max_size=3),
                       st.dictionaries(names, names, max_size=2))
# Values with the right shape but doubtful content: they pass the schema and reach the checks.
plausible = st.one_of(address_value, interesting_int, names, st.booleans(),
                      st.lists(address_value, max_size=3), st.lists(range_value, max_size=3),
                      st.lists(names, min_size=1, max_size=3))

Repo = dict[str, list[Any]]
Node = tuple[str, int, tuple[Any, ...]]  # file, document index, path inside it


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return []
    return [p for key, child in items for p in [(*prefix, key), *_paths(child, (*prefix, key))]]


def _nodes(repo: Repo) -> list[Node]:
    return [(file, index, path) for file, docs in sorted(repo.items())
            for index, doc in enumerate(docs) for path in _paths(doc)]


def _get(repo: Repo, node: Node) -> Any:
    value = repo[node[0]][node[1]]
    for key in node[2]:
        value = value[key]
    return value


def _set(repo: Repo, node: Node, value: Any) -> None:
    parent = _get(repo, (node[0], node[1], node[2][:-1]))
    parent[node[2][-1]] = value


def _pick(data: st.DataObject, nodes: list[Node]) -> Node | None:
    return data.draw(st.sampled_from(nodes)) if nodes else None


def _mutate(repo: Repo, data: st.DataObject) -> None:
    nodes = _nodes(repo)
    op = data.draw(st.sampled_from(["drop", "retype", "swap", "replace", "duplicate", "add_key",
                                    "delete_doc", "copy_doc", "move_doc", "address", "number",
                                    "address", "number", "add_key"]))
    if op == "drop":
        node = _pick(data, [n for n in nodes if isinstance(_get(repo, (*n[:2], n[2][:-1])),
                                                           dict)])
        if node:
            del _get(repo, (node[0], node[1], node[2][:-1]))[node[2][-1]]
    elif op == "retype":
        node = _pick(data, nodes)
        if node:
            _set(repo, node, data.draw(other_type))
    elif op == "swap":
        first, second = _pick(data, nodes), _pick(data, nodes)
        if first and second and not _nested(first, second):
            a, b = copy.deepcopy(_get(repo, first)), copy.deepcopy(_get(repo, second))
            _set(repo, first, b)
            _set(repo, second, a)
    elif op == "replace":
        node = _pick(data, [n for n in nodes if isinstance(_get(repo, n), str)])
        if node:
            _set(repo, node, data.draw(replacement_scalar))
    elif op == "address":
        node = _pick(data, [n for n in nodes if _looks_like_address(_get(repo, n))])
        if node:
            _set(repo, node, data.draw(address_value))
    elif op == "number":
        node = _pick(data, [n for n in nodes if type(_get(repo, n)) is int])
        if node:
            _set(repo, node, data.draw(interesting_int))
    elif op == "duplicate":
        node = _pick(data, [n for n in nodes if isinstance(_get(repo, n), list) and _get(repo, n)])
        if node:
            items = _get(repo, node)
            item = copy.deepcopy(data.draw(st.sampled_from(items)))
            items.insert(data.draw(st.integers(0, len(items))), item)
    elif op == "add_key":
        node = _pick(data, [n for n in nodes if isinstance(_get(repo, n), dict)])
        if node:
            key = data.draw(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=10)))
            _get(repo, node)[key] = data.draw(st.one_of(plausible, other_type))
    else:
        _move_documents(repo, data, op)


def _looks_like_address(value: Any) -> bool:
    return isinstance(value, str) and any(c.isdigit() for c in value) and (
        "." in value or ":" in value)


def _nested(first: Node, second: Node) -> bool:
    if first[:2] != second[:2]:
        return False
    shorter = min(len(first[2]), len(second[2]))
    return first[2][:shorter] == second[2][:shorter]


def _move_documents(repo: Repo, data: st.DataObject, op: str) -> None:
    file = data.draw(st.sampled_from(sorted(repo)))
    if not repo[file]:
        return
    index = data.draw(st.integers(0, len(repo[file]) - 1))
    doc = repo[file][index] if op == "copy_doc" else repo[file].pop(index)
    if op != "delete_doc":
        target = data.draw(st.sampled_from(sorted(repo) + FUZZ_PATHS))
        repo.setdefault(target, []).append(copy.deepcopy(doc))


def _dump(repo: Repo) -> dict[str, bytes]:
    return {file: yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True).encode()
            for file, docs in repo.items()}


@SETTINGS
@given(st.data())
def test_mutated_manifests_never_crash_the_pipeline(data: st.DataObject) -> None:
    repo = copy.deepcopy(EXAMPLE_DOCS)
    for _ in range(data.draw(st.integers(min_value=1, max_value=6), label="mutations")):
        _mutate(repo, data)
    _validate(_dump(repo))


@SETTINGS
@given(st.data())
def test_mutated_manifest_text_never_crashes_the_pipeline(data: st.DataObject) -> None:
    """Byte-level damage to one example file: cut, insert, flip, repeat."""
    file = data.draw(st.sampled_from(sorted(EXAMPLE_FILES)))
    content = bytearray(EXAMPLE_FILES[file])
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(0, len(content)))
        end = data.draw(st.integers(at, min(len(content), at + 40)))
        chunk = data.draw(st.one_of(st.binary(max_size=8), st.sampled_from(
            [b"\t", b"  ", b"\n", b"- ", b": ", b"&a ", b"*a", b"!!int ", b"<<: ", b"---\n",
             b"\xff", b"\x00", b"\r\n", b"[", b"}", bytes(content[at:end])])))
        content[at:end] = chunk
    _validate({**EXAMPLE_FILES, file: bytes(content)})


def test_the_example_itself_is_well_formed() -> None:
    diagnostics = _validate(dict(EXAMPLE_FILES))
    assert sorted(d.code for d in diagnostics) == ["POLICY_RULE_NOT_REALISED", "TARGET_PENDING"]
    assert _dump(copy.deepcopy(EXAMPLE_DOCS)).keys() == EXAMPLE_FILES.keys()
