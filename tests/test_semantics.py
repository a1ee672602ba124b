"""What a manifest says is what it does: no field that silently does nothing, or the opposite.

An empty security-group list must not isolate a port while the docs promise the default
group; an ICMPv6 type can be allowed; a rule that can match nothing is a warning with a
code, not an ACL that never appears.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unet.reconciler.desired import render_desired
from unet.reconciler.validate import validate_repo

from .test_plan_golden import append_doc, edit_text

GROUPS = "tenants/acme/security-groups.yaml"


#: Warnings the example repo carries on purpose (a pending target; ICMP for web-k1).
STANDING = frozenset({"TARGET_PENDING", "POLICY_RULE_NOT_REALISED"})


def _diagnostics(repo: Path) -> list[dict[str, Any]]:
    return [d.to_json() for d in validate_repo(repo).diagnostics if d.code not in STANDING]


def _add_web_rule(repo: Path, rule: str) -> None:
    edit_text(repo, GROUPS, "  egress:\n    - protocol: all\n      cidr: 0.0.0.0/0\n---\n"
              "apiVersion: network.osac.io/v1alpha1\nkind: SecurityGroup\nmetadata:\n"
              "  name: db\n",
              f"{rule}  egress:\n    - protocol: all\n      cidr: 0.0.0.0/0\n---\n"
              "apiVersion: network.osac.io/v1alpha1\nkind: SecurityGroup\nmetadata:\n"
              "  name: db\n")


def test_an_empty_security_group_list_is_refused_with_a_hint(example_copy: Path) -> None:
    edit_text(example_copy, "tenants/acme/compute.yaml",
              "  name: web-2\nspec:\n  networkAttachments:\n    - subnet: web\n"
              "      securityGroups: [web]",
              "  name: web-2\nspec:\n  networkAttachments:\n    - subnet: web\n"
              "      securityGroups: []")
    [problem] = _diagnostics(example_copy)
    assert (problem["code"], problem["path"]) == ("SCHEMA_TYPE",
                                                  "/spec/networkAttachments/0/securityGroups")
    assert "leave securityGroups out" in problem["hint"]


def test_an_icmpv6_type_can_be_allowed(example_copy: Path) -> None:
    _add_web_rule(example_copy, "    - protocol: icmpv6       # echo request (ping6)\n"
                                "      icmpType: 128\n      cidr: ::/0\n")
    validation = validate_repo(example_copy)
    assert validation.ok and _diagnostics(example_copy) == []
    matches = {o.fields["match"] for o in render_desired(validation, {}, only=["ovn"]).objects
               if o.table == "ACL"}
    assert "outport == @unet.acme.prod.web && ip6 && icmp6 && icmp6.type == 128" in matches
    assert not any("icmp4.type == 128" in m for m in matches)


def test_a_typed_icmp_rule_from_an_ipv6_remote_is_a_warning(example_copy: Path) -> None:
    _add_web_rule(example_copy, "    - protocol: icmp\n      icmpType: 128\n      cidr: ::/0\n")
    [problem] = _diagnostics(example_copy)
    assert (problem["code"], problem["severity"]) == ("RULE_NO_EFFECT", "warning")
    assert problem["path"] == "/spec/ingress/4"
    assert "protocol: icmpv6" in problem["hint"]


def test_a_remote_of_a_family_the_network_lacks_is_a_warning(example_copy: Path) -> None:
    append_doc(example_copy, "tenants/initech/network.yaml", {
        "apiVersion": "network.osac.io/v1alpha1", "kind": "SecurityGroup",
        "metadata": {"name": "builders"},
        "spec": {"virtualNetwork": "lab",  # IPv4 only
                 "ingress": [{"protocol": "tcp", "portFrom": 22, "portTo": 22,
                              "cidr": "2001:db8::/32"}]}})
    [problem] = _diagnostics(example_copy)
    assert problem["code"] == "RULE_NO_EFFECT" and problem["path"] == "/spec/ingress/0"
    assert "VirtualNetwork 'lab' has no IPv6" in problem["message"]


# --- one mistake, one error -----------------------------------------------------------------

NETWORK = "tenants/acme/network.yaml"


def test_a_tab_gives_one_error_with_a_column_and_a_hint(example_copy: Path) -> None:
    edit_text(example_copy, NETWORK, "  ipv4Cidr: 10.10.0.0/16\n", "\tipv4Cidr: 10.10.0.0/16\n")
    [problem] = [d for d in _diagnostics(example_copy)]
    assert (problem["code"], problem["file"], problem["line"], problem["column"]) == \
        ("YAML_SYNTAX", NETWORK, 16, 1)
    assert problem["message"] == "a tab character: YAML indents with spaces only"
    assert "spaces" in problem["hint"]


def test_a_broken_document_leaves_the_others_of_its_file_alone(example_copy: Path) -> None:
    """The subnets after the broken VirtualNetwork in the same file are still read, and
    nothing that names the VirtualNetwork is reported again."""
    edit_text(example_copy, NETWORK, "  ipv4Cidr: 10.10.0.0/16\n",
              "  ipv4Cidr: [10.10.0.0/16\n")
    [problem] = _diagnostics(example_copy)
    assert problem["code"] == "YAML_SYNTAX" and problem["line"] == 16
    assert "never closed" in problem["message"]
    kinds = {m.kind for m in validate_repo(example_copy).manifests
             if m.doc.file == NETWORK}
    assert kinds == {"Subnet"}


def test_a_wrong_api_version_gives_one_error(example_copy: Path) -> None:
    edit_text(example_copy, NETWORK, "apiVersion: network.osac.io/v1alpha1\nkind: "
              "VirtualNetwork", "apiVersion: network.osac.io/v1\nkind: VirtualNetwork")
    assert [d["code"] for d in _diagnostics(example_copy)] == ["UNKNOWN_KIND"]


def test_indentation_and_colons_get_plain_words(example_copy: Path) -> None:
    edit_text(example_copy, NETWORK, "  ipv4Cidr: 10.10.0.0/16\n",
              "  ipv4Cidr: 10.10.0.0/16\n   ipv6Cidr: fd10:aaaa::/48\n")
    [problem] = _diagnostics(example_copy)
    assert problem["code"] == "YAML_SYNTAX" and problem["hint"]
    assert "indent" in problem["message"] + problem["hint"]


def test_a_fixed_external_address_two_tenants_claim_is_said_at_both(
        example_copy: Path) -> None:
    """acme claims the address initech reserved in the shared pool public-a: said at both
    claims (as on a shared provider network), so acme's own review, pre-commit and tenant
    view see it, not initech's alone."""
    append_doc(example_copy, "tenants/acme/external.yaml", {
        "apiVersion": "network.osac.io/v1alpha1", "kind": "ExternalIP",
        "metadata": {"name": "taken"}, "spec": {"pool": "public-a", "address": "203.0.113.100"}})
    errors = {(d["code"], d["file"], d["path"]) for d in _diagnostics(example_copy)
              if d["severity"] == "error"}
    assert errors == {("ADDRESS_CONFLICT", "tenants/acme/external.yaml", "/spec/address"),
                      ("ADDRESS_CONFLICT", "tenants/initech/external.yaml", "/spec/address")}
