"""The combined schema editors read flags what JSON Schema can say, and nothing unet accepts.

`schemas/unet.schema.json` carries the models' editor-only keywords (port, ICMP and MTU
ranges, exactly one remote or attachment target, ...). `unet validate` checks shapes with
the per-kind schemas, which lack them, so that it keeps reporting those defects with their
own codes and hints. Each case below is a broken example repo changed to another defect:
the editor schema flags the file, and `unet validate` reports the specific code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from unet.reconciler.validate import validate_repo

from .conftest import EXAMPLE, ROOT, copy_checkout

BROKEN = ROOT / "examples" / "broken"
SG = "tenants/acme/security-groups.yaml"
NETWORK = "tenants/acme/network.yaml"
PORTS = "portFrom: 8443\n      portTo: 443"

#: id → (broken case, file, [(text, replacement)], the code `unet validate` reports).
CASES: dict[str, tuple[str, str, list[tuple[str, str]], str]] = {
    "port 0": ("rule-ports-invalid", SG, [(PORTS, "portFrom: 0\n      portTo: 443")],
               "RULE_PORTS_INVALID"),
    "port above 65535": ("rule-ports-invalid", SG, [(PORTS, "portFrom: 443\n      portTo: 65536")],
                         "RULE_PORTS_INVALID"),
    "portFrom alone": ("rule-ports-invalid", SG, [(PORTS, "portFrom: 443")],
                       "RULE_PORTS_INVALID"),
    "ports on protocol all": ("rule-ports-invalid", SG,
                              [("protocol: tcp", "protocol: all"),
                               (PORTS, "portFrom: 443\n      portTo: 443")],
                              "RULE_PORTS_INVALID"),
    "icmpCode without icmpType": ("rule-icmp-invalid", SG, [], "RULE_ICMP_INVALID"),
    "icmpType above 255": ("rule-icmp-invalid", SG, [("icmpCode: 0", "icmpType: 256")],
                           "RULE_ICMP_INVALID"),
    "icmpType on udp": ("rule-icmp-invalid", SG, [("protocol: icmp", "protocol: udp"),
                                                  ("icmpCode: 0", "icmpType: 8")],
                        "RULE_ICMP_INVALID"),
    "no remote": ("rule-remote-invalid", SG, [], "RULE_REMOTE_INVALID"),
    "two remotes": ("rule-remote-invalid", SG,
                    [("portTo: 22\n", "portTo: 22\n      cidr: 0.0.0.0/0\n"
                                      "      securityGroup: web\n")],
                    "RULE_REMOTE_INVALID"),
    "mtu above 9000": ("mtu-invalid", NETWORK, [], "MTU_INVALID"),
    "mtu below 68": ("mtu-invalid", NETWORK, [("mtu: 9216", "mtu: 67")], "MTU_INVALID"),
    "mtu below 1280 with IPv6": ("mtu-invalid", NETWORK, [
        ("ipv4Cidr: 10.0.0.0/16\n", "ipv4Cidr: 10.0.0.0/16\n  ipv6Cidr: fd00:1::/48\n"),
        ("mtu: 9216", "ipv6Cidr: fd00:1:0:1::/64\n  mtu: 1200")], "MTU_INVALID"),
    "virtual network without a CIDR": ("cidr-not-canonical", NETWORK,
                                       [("  ipv4Cidr: 10.0.1.5/16\n", "")], "SCHEMA_REQUIRED"),
    "subnet without a CIDR": ("mtu-invalid", NETWORK, [("  ipv4Cidr: 10.0.1.0/24\n", ""),
                                                       ("mtu: 9216", "mtu: 1500")],
                              "SCHEMA_REQUIRED"),
    "attachment with subnet and providerNetwork": (
        "provider-network-attachment-invalid", "tenants/acme/compute.yaml",
        [("- providerNetwork: storage\n", "- providerNetwork: storage\n      subnet: web\n")],
        "PROVIDER_NETWORK_ATTACHMENT_INVALID"),
    "cluster target without endpoint": ("endpoint-required", "tenants/acme/cluster.yaml", [],
                                        "ENDPOINT_REQUIRED"),
    "endpoint on a ComputeInstance": ("endpoint-forbidden", "tenants/acme/external.yaml", [],
                                      "ENDPOINT_FORBIDDEN"),
}


@pytest.fixture(scope="module")
def editor() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / "schemas" / "unet.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _editor_errors(validator: jsonschema.Draft202012Validator, path: Path) -> list[str]:
    documents: list[Any] = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return [f"{path.name}: {error.json_path}: {error.message}"
            for document in documents for error in validator.iter_errors(document)]


def test_the_editor_schema_is_self_contained(editor: jsonschema.Draft202012Validator) -> None:
    text = (ROOT / "schemas" / "unet.schema.json").read_text()
    refs = {ref for ref in _values_of(json.loads(text), "$ref")}
    assert refs and all(ref.startswith("#/$defs/") for ref in refs), refs


def _values_of(value: Any, key: str) -> list[Any]:
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == key] + [
            found for v in value.values() for found in _values_of(v, key)]
    if isinstance(value, list):
        return [found for v in value for found in _values_of(v, key)]
    return []


def test_the_editor_schema_accepts_every_manifest_of_the_example_repo(
        editor: jsonschema.Draft202012Validator) -> None:
    problems = [problem for path in sorted(EXAMPLE.rglob("*.yaml"))
                for problem in _editor_errors(editor, path)]
    assert problems == []


def changed_file(case: str) -> tuple[str, str]:
    """The file a case changes, and its text after the change."""
    folder, file, replacements, _code = CASES[case]
    text = (BROKEN / folder / file).read_text()
    for old, new in replacements:
        assert old in text, f"{folder}/{file} no longer holds {old!r}"
        text = text.replace(old, new, 1)
    return file, text


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_editor_flags_it_and_validate_keeps_its_code(
        case: str, tmp_path: Path, editor: jsonschema.Draft202012Validator) -> None:
    folder, _file, _replacements, code = CASES[case]
    repo = tmp_path / folder
    copy_checkout(BROKEN / folder, repo)
    file, text = changed_file(case)
    (repo / file).write_text(text)
    diagnostics = validate_repo(repo).diagnostics
    assert {d.code for d in diagnostics} == {code}, [(d.code, d.message) for d in diagnostics]
    assert _editor_errors(editor, repo / file), "the editor schema accepts it"


def _descriptions(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Every description in a schema, by where it is."""
    found: dict[tuple[str, ...], str] = {}
    if isinstance(value, dict):
        if isinstance(value.get("description"), str):
            found[path] = value["description"]
        for key, item in value.items():
            found.update(_descriptions(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.update(_descriptions(item, (*path, str(index))))
    return found


def test_every_immutable_field_and_only_those_say_what_a_change_replaces() -> None:
    """The notes come from each kind's `immutable` list, in the per-kind schemas and the
    editor's: a field made immutable (or mutable) in the model changes its description."""
    from unet.reconciler.models import KINDS, immutable_note
    from unet.reconciler.schema import generate_schemas, schema_file_name

    generated = generate_schemas()
    for kind, model in KINDS.items():
        schema = generated[schema_file_name(kind)]
        noted = {path[-1] for path, text in _descriptions(schema).items()
                 if "Immutable:" in text}
        assert all(text.endswith(immutable_note(model))
                   for text in _descriptions(schema).values() if "Immutable:" in text), kind
        assert noted == {path.split(".")[-1] for path in model.immutable}, kind
    combined = json.dumps(generated["unet.schema.json"])
    assert combined.count("Immutable:") >= len({p.split(".")[-1] for m in KINDS.values()
                                                for p in m.immutable})
    subnet = generated["Subnet.schema.json"]["$defs"]["SubnetSpec"]["properties"]
    assert subnet["ipv4Cidr"]["description"].endswith(
        "Immutable: changing it replaces the subnet and every port on it.")


def _replaced(tmp_path: Path, edit: Any) -> set[str]:
    """The resources a pull request's plan replaces after `edit` of the example."""
    from .test_plan_golden import plan_edit, validated

    doc = plan_edit(tmp_path, validated(EXAMPLE), edit)
    return {r["address"] for r in doc["resources"] if r["actions"] == ["delete", "create"]}


def test_what_the_immutable_notes_say_a_change_replaces_is_what_a_plan_replaces(
        tmp_path: Path) -> None:
    """The notes are promises: a Subnet's CIDR replaces the subnet and every port on it
    (its fabric workloads), a VirtualNetwork's replaces its router and with it its subnets'
    router ports, NATGateway and attachments' NAT rules but no workload, an attachment's
    subnet every port of that workload only."""
    from .test_plan_golden import edit_text

    def subnet_cidr(repo: Path) -> None:
        edit_text(repo, "tenants/acme/network.yaml", "  ipv4Cidr: 10.10.1.0/24\n"
                  "  ipv6Cidr: fd10:aaaa:0:1::/64\n  gateway: 10.10.1.1",
                  "  ipv4Cidr: 10.10.3.0/24\n  ipv6Cidr: fd10:aaaa:0:1::/64\n"
                  "  gateway: 10.10.3.1")

    assert _replaced(tmp_path / "subnet", subnet_cidr) == {
        "Subnet/acme/web", "ComputeInstance/acme/web-1", "ComputeInstance/acme/web-2"}

    def network_cidr(repo: Path) -> None:
        edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.0.0/16",
                  "ipv4Cidr: 10.10.0.0/15")

    assert _replaced(tmp_path / "network", network_cidr) == {
        "VirtualNetwork/acme/prod", "Subnet/acme/web", "Subnet/acme/db", "Subnet/acme/nodes",
        "NATGateway/acme/prod", "ExternalIPAttachment/acme/web-1-public",
        "ExternalIPAttachment/acme/k1-api", "ExternalIPAttachment/acme/k1-ingress"}

    def attachment(repo: Path) -> None:
        edit_text(repo, "tenants/acme/compute.yaml", "  name: web-2\nspec:\n"
                  "  networkAttachments:\n    - subnet: web",
                  "  name: web-2\nspec:\n  networkAttachments:\n    - subnet: db")

    assert _replaced(tmp_path / "attachment", attachment) == {"ComputeInstance/acme/web-2"}
