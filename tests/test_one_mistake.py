"""One mistake, one error: a manifest that is invalid counts as declared-but-invalid.

Every mutant below puts one mistake into one manifest of the example repo, which uses
every kind and every kind of reference. Whatever refers to the broken manifest, or
derives a fact from the field that was rejected (a subnet's CIDR, a tenant's
allowedCidrs), must stay quiet: the repo then reports exactly one error, where the
mistake is, and no warning beyond the two the example carries on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import netaddr
import pytest
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from unet.reconciler.diagnostics import Diagnostic
from unet.reconciler.validate import validate_repo

from .conftest import EXAMPLE
from .test_plan_golden import edit_text

#: Warnings the example repo carries on purpose (a pending target; ICMP for web-k1).
STANDING = frozenset({"TARGET_PENDING", "POLICY_RULE_NOT_REALISED"})


@dataclass(frozen=True)
class Mutant:
    """One file of the example with one mistake, and the line the error belongs on."""

    name: str
    file: str
    text: str
    line: int


def _files() -> list[str]:
    return sorted(p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*.yaml")
                  if p.parts[len(EXAMPLE.parts)] in ("provider", "tenants", "unet.yaml"))


def _documents(text: str) -> Iterator[MappingNode]:
    yield from (node for node in yaml.compose_all(text) if isinstance(node, MappingNode))


def _key_line(document: MappingNode, key: str) -> int:
    """0-based line of a top-level key of a document."""
    return next(k.start_mark.line for k, _v in document.value if k.value == key)


def _name_of(document: MappingNode) -> str:
    kind = next(v.value for k, v in document.value if k.value == "kind")
    metadata = next(v for k, v in document.value if k.value == "metadata")
    name = next(v.value for k, v in metadata.value if k.value == "name")
    return f"{kind}/{name}"


def _with_line(text: str, index: int, new: str | None, insert: bool = False) -> str:
    lines = text.splitlines(keepends=True)
    if insert:
        lines.insert(index + 1, new or "")
    else:
        lines[index] = new or ""
    return "".join(lines)


def _shape_mutants() -> Iterator[Mutant]:
    """Each manifest with a field its kind does not have, and with `spec` missing its ':'."""
    for file in _files():
        text = (EXAMPLE / file).read_text()
        for document in _documents(text):
            name, kind_line = _name_of(document), _key_line(document, "kind")
            yield Mutant(f"{file}:{name}:unknown-field", file,
                         _with_line(text, kind_line, "colour: red\n", insert=True),
                         kind_line + 2)
            spec_line = _key_line(document, "spec")
            yield Mutant(f"{file}:{name}:spec-without-colon", file,
                         _with_line(text, spec_line, "spec\n"), spec_line + 1)


def _scalars(node: Node, key: str = "") -> Iterator[tuple[str, ScalarNode]]:
    """The value scalars of a document (not its keys), each with the key it is under."""
    if isinstance(node, ScalarNode):
        yield key, node
    elif isinstance(node, SequenceNode):
        for item in node.value:
            yield from _scalars(item, key)
    elif isinstance(node, MappingNode):
        for key_node, value in node.value:
            yield from _scalars(value, key_node.value)


def _spoilt(value: str) -> str | None:
    """An address or CIDR of the same family that does not parse, or None for other text."""
    address, slash, prefix = value.partition("/")
    try:
        version = netaddr.IPAddress(address).version
    except (netaddr.AddrFormatError, ValueError):
        return None
    bad = "10.0.0.300" if version == 4 else "fd00:::1"
    return f"{bad}{slash}{prefix}"


def _address_mutants() -> Iterator[Mutant]:
    """Each address and CIDR of the example, one at a time, made unparseable."""
    for file in _files():
        text = (EXAMPLE / file).read_text()
        for document in _documents(text):
            for _key, scalar in _scalars(document):
                spoilt = _spoilt(scalar.value)
                if spoilt is None:
                    continue
                start, end = scalar.start_mark.index, scalar.end_mark.index
                yield Mutant(f"{file}:{_name_of(document)}:{scalar.value}@"
                             f"{scalar.start_mark.line + 1}", file,
                             text[:start] + spoilt + text[end:], scalar.start_mark.line + 1)


#: Fields that name another manifest (or a plugin, or the folder's tenant).
REFERENCES = frozenset({"virtualNetwork", "subnet", "securityGroups", "securityGroup", "pool",
                        "externalIP", "fabricManager", "k8sManager", "networkClass",
                        "hostType", "providerNetwork", "tenants", "tenant", "plugin"})


def _reference_mutants() -> Iterator[Mutant]:
    """Each reference of the example, one at a time, misspelt."""
    for file in _files():
        text = (EXAMPLE / file).read_text()
        for document in _documents(text):
            for key, scalar in _scalars(document):
                if key not in REFERENCES:
                    continue
                start, end = scalar.start_mark.index, scalar.end_mark.index
                yield Mutant(f"{file}:{_name_of(document)}:{key}={scalar.value}@"
                             f"{scalar.start_mark.line + 1}", file,
                             text[:start] + scalar.value + "x" + text[end:],
                             scalar.start_mark.line + 1)


def _errors(repo: Path) -> tuple[list[Diagnostic], list[Diagnostic]]:
    diagnostics = validate_repo(repo).diagnostics
    return ([d for d in diagnostics if d.is_error],
            [d for d in diagnostics if not d.is_error and d.code not in STANDING])


def _show(diagnostics: list[Diagnostic]) -> str:
    return "\n".join(f"{d.code} {d.file}:{d.line} {d.path} {d.message}" for d in diagnostics)


SHAPE = list(_shape_mutants())
ADDRESSES = list(_address_mutants())
REFERENCES_MISSPELT = list(_reference_mutants())


def test_the_mutants_cover_every_manifest_and_every_kind_with_addresses() -> None:
    assert len(SHAPE) == 2 * len(validate_repo(EXAMPLE).manifests)
    kinds = {mutant.name.split(":")[1].split("/")[0] for mutant in ADDRESSES}
    assert kinds == {"Tenant", "ExternalIPPool", "VirtualNetwork", "Subnet", "ProviderNetwork",
                     "SecurityGroup", "ComputeInstance", "BaremetalInstance", "Cluster",
                     "ExternalIP", "Guardrail"}
    assert {mutant.name.split(":")[2].split("=")[0] for mutant in REFERENCES_MISSPELT} == \
        REFERENCES


def _peer_lines() -> set[tuple[str, int]]:
    """(file, 1-based line) of each VirtualNetworkPeering's `peer` in the example."""
    out = set()
    for file in _files():
        for document in _documents((EXAMPLE / file).read_text()):
            if _name_of(document).startswith("VirtualNetworkPeering/"):
                spec = next(v for k, v in document.value if k.value == "spec")
                out.add((file, next(v.start_mark.line + 1 for k, v in spec.value
                                    if k.value == "peer")))
    return out


#: A misspelt peer is a request that waits (docs/api.md): another tenant's network or the
#: tenant itself may be gone, and its removal is not the requester's to block.
PEER_LINES = _peer_lines()


@pytest.mark.parametrize("mutant", SHAPE + ADDRESSES + REFERENCES_MISSPELT,
                         ids=lambda m: m.name)
def test_one_mistake_in_the_example_is_one_error_where_it_is(mutant: Mutant,
                                                             example_copy: Path) -> None:
    (example_copy / mutant.file).write_text(mutant.text)
    errors, warnings = _errors(example_copy)
    if (mutant.file, mutant.line) in PEER_LINES and mutant in REFERENCES_MISSPELT:
        assert errors == [] and [(w.code, w.file, w.line) for w in warnings] == [
            ("PEERING_PENDING", mutant.file, mutant.line)], _show(errors + warnings)
        return
    assert len(errors) == 1 and warnings == [], _show(errors + warnings)
    assert (errors[0].file, errors[0].line) == (mutant.file, mutant.line), _show(errors)


@dataclass(frozen=True)
class FollowOn:
    """A mistake in one manifest that other manifests' checks used to report again."""

    file: str
    old: str  # text of the example, once in `file`
    new: str
    error: tuple[str, str]  # (code, path) of the one error, in `file`


FOLLOW_ONS = {
    "a pool's tenant misspelt, then its ExternalIPs not allowed": FollowOn(
        "provider/pools.yaml", "  tenants: [globex]", "  tenants: [globx]",
        ("REF_NOT_FOUND", "/spec/tenants/0")),
    "a provider network's tenant misspelt, then its ports not allowed": FollowOn(
        "provider/networks.yaml", "  tenants: [globex]", "  tenants: [globx]",
        ("REF_NOT_FOUND", "/spec/tenants/0")),
    "a tenant's network class misspelt, then its networks' class not allowed": FollowOn(
        "provider/tenants/acme.yaml", "  regions: [region-a]\n",
        "  regions: [region-a]\n  networkClasses: [standrd-a]\n",
        ("REF_NOT_FOUND", "/spec/networkClasses/0")),
    "a manager's wrong role, then its classes' managers of the wrong role": FollowOn(
        "provider/managers.yaml", "  role: fabric\n  plugin: ovn", "  role: k8s\n  plugin: ovn",
        ("PLUGIN_CONFIG_INVALID", "/spec/role")),
    "a class's reversed segment range, then its provider networks out of it": FollowOn(
        "provider/classes.yaml", "  region: region-b\n  default: true\n  fabricManager: ovn\n",
        "  region: region-b\n  default: true\n  fabricManager: ovn\n"
        "  segmentRange:\n    start: 400\n    end: 100\n",
        ("RANGE_INVALID", "/spec/segmentRange")),
    "a subnet of the wrong tenant, then what attaches to it without a subnet": FollowOn(
        "tenants/acme/network.yaml", "  name: web\nspec:", "  name: web\n  tenant: globex\nspec:",
        ("TENANT_MISMATCH", "/metadata/tenant")),
    "a NAT gateway of the wrong tenant, then its cluster without a gateway": FollowOn(
        "tenants/acme/external.yaml", "  tenant: acme ", "  tenant: globex ",
        ("TENANT_MISMATCH", "/metadata/tenant")),
    "a NAT gateway's network misspelt, then its cluster without a gateway": FollowOn(
        "tenants/acme/external.yaml", "  virtualNetwork: prod\n  externalIP: prod-nat",
        "  virtualNetwork: prdo\n  externalIP: prod-nat",
        ("REF_NOT_FOUND", "/spec/virtualNetwork")),
    "a cluster's API attachment without its endpoint, then the cluster without one": FollowOn(
        "tenants/acme/cluster-k1.yaml", "    name: k1\n    endpoint: api\n", "    name: k1\n",
        ("ENDPOINT_REQUIRED", "/spec/target")),
    "a group's network misspelt, then the group of another network for its ports": FollowOn(
        "tenants/acme/security-groups.yaml", "  name: web\nspec:\n  virtualNetwork: prod",
        "  name: web\nspec:\n  virtualNetwork: prdo", ("REF_NOT_FOUND", "/spec/virtualNetwork")),
    "a subnet outside its network, then its workload's target without an IPv4 CIDR": FollowOn(
        "tenants/acme/network.yaml", "  ipv4Cidr: 10.10.1.0/24", "  ipv4Cidr: 10.11.1.0/24",
        ("SUBNET_OUTSIDE_NETWORK", "/spec/ipv4Cidr")),
    "a network without a CIDR, then its subnets outside it": FollowOn(
        "tenants/acme/network.yaml", "  ipv4Cidr: 10.10.0.0/16\n  ipv6Cidr: fd10:aaaa::/48\n",
        "", ("SCHEMA_REQUIRED", "/spec")),
}


@pytest.mark.parametrize("case", list(FOLLOW_ONS))
def test_a_mistake_is_not_reported_again_by_what_depends_on_it(case: str,
                                                               example_copy: Path) -> None:
    follow_on = FOLLOW_ONS[case]
    edit_text(example_copy, follow_on.file, follow_on.old, follow_on.new)
    errors, warnings = _errors(example_copy)
    assert [(d.code, d.file, d.path) for d in errors] == \
        [(*follow_on.error[:1], follow_on.file, follow_on.error[1])] and warnings == [], \
        _show(errors + warnings)
