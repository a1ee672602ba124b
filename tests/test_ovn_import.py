"""`unet import --manager ovn`: networks built by hand with ovn-nbctl, adopted in place.

A real Northbound (ovsdb-server), ovn-northd and ovn-trace: the example repo is applied,
then a tenant's network is built beside it with ovn-nbctl under names of its own (routers,
switches, ports, MACs chosen by hand; the security groups in unet's shape), together with
rows the API cannot express. `unet import` writes the manifests and refuses the rest row by
row; `unet import --apply` only tags rows (no create, no delete), after which the next plan
is empty and ovn-trace follows every probe packet exactly as before.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import EXAMPLE, copy_checkout, use_northbound
from .support.ovnlab import OvnLab
from .support.ovnrun import (
    apply,
    assert_noop,
    plan,
    reaped,
    spawn_at_prompt,
    unet,
    wait_for_text,
)
from .support.trace import Trace, trace

TENANT = "legacy"
PG = "unet.legacy.prod_router"  # the network's group, as unet names it (matches use it)
WEB = f"{PG}.web"
DEFAULT = f"{PG}.default"
WEB1 = ("web1", "0a:00:00:00:02:01", "10.60.1.10")
DB1 = ("db1", "0a:00:00:00:02:02", "10.60.2.10")
GW_WEB = ("prod-router-web", "0a:00:00:00:01:01", "10.60.1.1")
GW_DB = ("prod-router-db", "0a:00:00:00:01:02", "10.60.2.1")


def _build_by_hand(lab: OvnLab) -> None:
    """A two-subnet network as an operator would script it with ovn-nbctl (names and MACs
    of their own), its ports filtered as unet filters them."""
    nb = lab.nbctl
    nb("lr-add", "prod-router")
    for switch, (port, mac, gateway) in (("web-net", GW_WEB), ("db-net", GW_DB)):
        nb("ls-add", switch)
        nb("lrp-add", "prod-router", port, mac, f"{gateway}/24")
        nb("lsp-add", switch, f"{switch}-router", "--", "lsp-set-type", f"{switch}-router",
           "router", "--", "lsp-set-addresses", f"{switch}-router", "router", "--",
           "lsp-set-options", f"{switch}-router", f"router-port={port}")
    for switch, (name, mac, address) in (("web-net", WEB1), ("db-net", DB1)):
        nb("lsp-add", switch, name, "--", "lsp-set-addresses", name, f"{mac} {address}",
           "--", "lsp-set-port-security", name, f"{mac} {address}")
    dhcp = nb("dhcp-options-create", "10.60.1.0/24").strip() or \
        nb("--bare", "--columns=_uuid", "find", "DHCP_Options", "cidr=10.60.1.0/24").strip()
    nb("dhcp-options-set-options", dhcp, "server_id=10.60.1.1",
       f"server_mac={GW_WEB[1]}", "lease_time=43200", "mtu=1500", "router=10.60.1.1")
    nb("lsp-set-dhcpv4-options", "web1", dhcp)
    nb("pg-add", PG, "web1", "db1")
    nb("pg-add", WEB, "web1")
    nb("pg-add", DEFAULT, "db1")
    acls = [
        (PG, "from-lport", 1000, f"inport == @{PG} && ip", "drop"),
        (PG, "to-lport", 1000, f"outport == @{PG} && ip", "drop"),
        (PG, "from-lport", 1001, f"inport == @{PG} && udp && udp.src == 68 && udp.dst == 67",
         "allow"),
        (PG, "from-lport", 1001,
         f"inport == @{PG} && udp && udp.src == 546 && udp.dst == 547", "allow"),
        (PG, "from-lport", 1001, f"inport == @{PG} && (nd || nd_rs || nd_ra)", "allow"),
        (PG, "to-lport", 1001, f"outport == @{PG} && (nd || nd_rs || nd_ra)", "allow"),
        (DEFAULT, "to-lport", 1002,
         f"outport == @{DEFAULT} && ip4 && ip4.src == ${DEFAULT}_ip4", "allow-related"),
        (DEFAULT, "from-lport", 1002, f"inport == @{DEFAULT} && ip4", "allow-related"),
        (WEB, "to-lport", 1002, f"outport == @{WEB} && ip4 && tcp.dst == 80", "allow-related"),
        (WEB, "to-lport", 1002, f"outport == @{WEB} && ip4 && ip4.src == ${DEFAULT}_ip4",
         "allow-related"),
        (WEB, "from-lport", 1002, f"inport == @{WEB} && ip4", "allow-related"),
    ]
    for group, direction, priority, match, action in acls:
        nb("--type=port-group", "acl-add", group, direction, str(priority), match, action)


def _build_unexpressible(lab: OvnLab) -> None:
    """Beside it, what the API cannot say, or what another installation owns."""
    nb = lab.nbctl
    nb("ls-add", "scratch")  # a switch on no router
    nb("lsp-add", "scratch", "scratch-1")
    nb("lr-add", "flat-router")  # a network without any filtering: unet always filters
    nb("ls-add", "flat-net")
    nb("lrp-add", "flat-router", "flat-gw", "0a:00:00:00:03:01", "10.70.1.1/24")
    nb("lsp-add", "flat-net", "flat-net-router", "--", "lsp-set-type", "flat-net-router",
       "router", "--", "lsp-set-addresses", "flat-net-router", "router", "--",
       "lsp-set-options", "flat-net-router", "router-port=flat-gw")
    nb("lsp-add", "flat-net", "flat-vm", "--", "lsp-set-addresses", "flat-vm",
       "0a:00:00:00:03:02 10.70.1.10")
    nb("lr-add", "public-router")  # addresses the tenant may not use
    nb("ls-add", "public-net")
    nb("lrp-add", "public-router", "public-gw", "0a:00:00:00:06:01", "198.51.100.1/24")
    nb("lsp-add", "public-net", "public-net-router", "--", "lsp-set-type",
       "public-net-router", "router", "--", "lsp-set-addresses", "public-net-router",
       "router", "--", "lsp-set-options", "public-net-router", "router-port=public-gw")
    nb("ls-add", "theirs", "--", "set", "Logical_Switch", "theirs",
       "external_ids:unet\\:installation=elsewhere", "external_ids:unet\\:key=x")


def _probes(lab: OvnLab) -> dict[str, str]:
    """ovn-trace's whole output for each probe: allowed and dropped, inside a subnet's
    group and routed between subnets."""
    lab.sync()
    web, db = WEB1, DB1

    def from_port(port: tuple[str, str, str], switch: str, eth_dst: str, dst: str,
                  rest: str) -> Trace:
        fields = {"inport": f'"{port[0]}"', "eth.src": port[1], "eth.dst": eth_dst,
                  "ip4.src": port[2], "ip4.dst": dst, "ip.ttl": "64"}
        return trace(lab, switch, fields, rest)

    probes = {
        "db1 → web1 tcp/80 (web admits 80)": from_port(db, "db-net", GW_DB[1], web[2],
                                                       "tcp && tcp.dst == 80"),
        "db1 → web1 tcp/22 (web admits default's members)": from_port(
            db, "db-net", GW_DB[1], web[2], "tcp && tcp.dst == 22"),
        "web1 → db1 tcp/5432 (default admits its members only)": from_port(
            web, "web-net", GW_WEB[1], db[2], "tcp && tcp.dst == 5432"),
        "web1 spoofing another source": from_port(
            (web[0], web[1], "10.60.1.99"), "web-net", GW_WEB[1], db[2],
            "tcp && tcp.dst == 80"),
    }
    allowed = {name: bool(result.ports) for name, result in probes.items()}
    assert allowed == {"db1 → web1 tcp/80 (web admits 80)": True,
                       "db1 → web1 tcp/22 (web admits default's members)": True,
                       "web1 → db1 tcp/5432 (default admits its members only)": False,
                       "web1 spoofing another source": False}
    return {name: result.text for name, result in probes.items()}


@pytest.fixture
def hand_built(tmp_path: Path) -> Iterator[tuple[OvnLab, Path]]:
    repo = copy_checkout(EXAMPLE, tmp_path / "repo")
    with OvnLab(tmp_path / "ovn") as lab:
        use_northbound(repo, lab.nb_remote)
        (repo / "provider" / "tenants" / "legacy.yaml").write_text(yaml.safe_dump({
            "apiVersion": "network.osac.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": TENANT}, "spec": {"regions": ["region-b"]}}))
        applied = apply(repo, repo)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        _build_by_hand(lab)
        _build_unexpressible(lab)
        yield lab, repo


def _import(repo: Path, *extra: str) -> dict[str, Any]:
    result = unet(repo, "import", str(repo), "--manager", "ovn", "--tenant", TENANT,
                  "--format", "json", *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _rows(lab: OvnLab) -> dict[str, list[str]]:
    """Every row's UUID and columns but external_ids, per table: what adoption must not
    change."""
    out = {}
    for table in ("Logical_Router", "Logical_Switch", "Logical_Router_Port",
                  "Logical_Switch_Port", "Port_Group", "ACL", "DHCP_Options"):
        listed = json.loads(lab.nbctl("--format=json", "list", table))
        columns = listed["headings"]
        out[table] = sorted(json.dumps({c: v for c, v in zip(columns, row, strict=True)
                                        if c != "external_ids"}, sort_keys=True)
                            for row in listed["data"])
    return out


def test_a_network_built_by_hand_is_adopted_in_place_and_traffic_is_unchanged(
        hand_built: tuple[OvnLab, Path]) -> None:
    lab, repo = hand_built
    before, rows_before = _probes(lab), _rows(lab)

    imported = _import(repo)
    network = {n["name"]: n for n in imported["networks"]}["prod-router"]
    assert network["adopted"], network["reasons"]
    assert imported["plan"]["create"] == imported["plan"]["delete"] == 0
    written = list(yaml.safe_load_all((repo / network["file"]).read_text()))
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in written)
    assert kinds == ["ComputeInstance/db1", "ComputeInstance/web1", "SecurityGroup/web",
                     "Subnet/db-net", "Subnet/web-net", "VirtualNetwork/prod-router"]
    by_name = {d["metadata"]["name"]: d["spec"] for d in written}
    assert by_name["web1"]["networkAttachments"] == [{"subnet": "web-net",
                                                      "securityGroups": ["web"]}]
    assert by_name["db-net"]["dhcp"] is False and "dhcp" not in by_name["web-net"]
    assert all(d["metadata"]["annotations"] == {"network.osac.io/prevent-destroy": "true"}
               for d in written)
    assert _rows(lab) == rows_before, "import wrote to the Northbound"
    # Merged before the rows are tagged, the manifests' plan is refused: names are taken.
    early = plan(repo, repo)
    assert early.returncode == 1 and "already exists and is not managed by this " \
        "installation" in early.stdout + early.stderr, early.stdout + early.stderr
    # Its hint names the step that is missing, not only renaming or removing the rows.
    assert "or adopt it (unet import --apply, docs/import.md)" in early.stdout, early.stdout

    adopted = _import(repo, "--apply")
    assert adopted["applied"] and [n["name"] for n in adopted["networks"]
                                   if n["adopted"]] == ["prod-router"]
    assert len(adopted["networks"][0]["rows"]) == len(network["rows"]) == 24
    assert _rows(lab) == rows_before, "adoption did more than tag rows"
    tags = json.loads(lab.nbctl("--format=json", "--columns=external_ids", "find",
                                "Logical_Switch_Port", "name=web1"))["data"][0][0][1]
    assert dict(tags)["unet:owner"] == "ComputeInstance/legacy/web1"
    assert dict(tags)["unet:alloc:ipv4/legacy/ComputeInstance/web1/0"] == "10.60.1.10"

    assert_noop(repo, repo)
    assert _probes(lab) == before

    # Applied from a branch without the manifests, the adopted rows are not deleted.
    imported_file = repo / network["file"]
    text = imported_file.read_text()
    imported_file.unlink()
    pruned = plan(repo, repo)
    assert pruned.returncode == 1 and "PREVENT_DESTROY" in pruned.stdout + pruned.stderr
    imported_file.write_text(text)


def test_what_the_api_cannot_express_is_refused_row_by_row_and_left_alone(
        hand_built: tuple[OvnLab, Path]) -> None:
    lab, repo = hand_built
    rows_before = _rows(lab)
    imported = _import(repo)
    networks = {n["name"]: n for n in imported["networks"]}
    flat = networks["flat-router"]
    assert not flat["adopted"]
    assert "would create Port_Group unet.legacy.flat_router with 6 ACL (for " \
        "VirtualNetwork/legacy/flat-router)" in flat["reasons"], flat["reasons"]
    assert "Logical_Switch_Port flat-vm: port_security is [], the manifests give " \
        "['0a:00:00:00:03:02 10.70.1.10']" in flat["reasons"], flat["reasons"]
    assert not (repo / flat["file"]).exists()
    public = networks["public-router"]
    assert not public["adopted"] and any(r.startswith("CIDR_NOT_ALLOWED: ")
                                         for r in public["reasons"]), public["reasons"]
    refused = dict((r["row"], r["reason"]) for r in imported["refused"])
    assert "owned by installation elsewhere" in refused["Logical_Switch theirs"]
    assert "no imported manifest describes it" in refused["Logical_Switch scratch"]
    assert "its network flat-router is not adopted" in refused["Logical_Switch_Port flat-vm"]

    adopted = _import(repo, "--apply")
    assert not [n for n in adopted["networks"] if n["name"] == "flat-router"]
    assert _rows(lab) == rows_before
    owned = lab.nbctl("--bare", "--columns=name", "find", "Logical_Switch",
                      "external_ids:unet\\:installation=example").split()
    assert "flat-net" not in owned and "scratch" not in owned


def test_what_a_switch_or_router_holds_besides_unets_rows_refuses_the_network(
        hand_built: tuple[OvnLab, Path]) -> None:
    """How operators filter without port groups: ACLs on the switch itself. Adopted, they
    would stay inside unet's switch, deciding what passes where no manifest (and no plan,
    exposure or reach) says it; a router's policies and NAT rules the same."""
    lab, repo = hand_built
    assert {n["name"]: n for n in _import(repo)["networks"]}["prod-router"]["adopted"]
    rows_before = _rows(lab)  # the manifests are written; then the rows change
    lab.nbctl("acl-add", "db-net", "to-lport", "900", 'outport == "db1" && ip4', "drop")
    lab.nbctl("lr-policy-add", "prod-router", "100", "ip4.src == 10.60.1.0/24", "drop")
    lab.nbctl("lr-nat-add", "prod-router", "snat", "203.0.113.99", "10.60.0.0/22")
    lab.nbctl("lb-add", "lb-web", "10.60.1.100:80", "10.60.1.10:80", "tcp", "--",
              "ls-lb-add", "web-net", "lb-web")  # a VIP on the switch: traffic no one says
    for step in ((), ("--apply",)):  # what import says, --apply holds against the rows
        network = {n["name"]: n for n in _import(repo, *step)["networks"]}["prod-router"]
        assert not network["adopted"]
        reasons = "\n".join(network["reasons"])
        assert "Logical_Switch db-net holds ACL to-lport 900 drop `outport == \"db1\" && " \
            "ip4`, which the manifests do not describe" in reasons, reasons
        assert "Logical_Router prod-router holds Logical_Router_Policy " in reasons, reasons
        # A NAT rule is named by what it does, not by its UUID alone.
        assert "(snat 203.0.113.99 ↔ 10.60.0.0/22), which the manifests" in reasons, reasons
        assert "Logical_Switch web-net refers to Load_Balancer lb-web, which the manifests " \
            "do not describe" in reasons, reasons
    assert "example" not in lab.nbctl("--bare", "--columns=external_ids", "list",
                                      "Logical_Switch", "db-net")
    assert _rows(lab)["Logical_Switch_Port"] == rows_before["Logical_Switch_Port"]


def test_a_port_inference_refused_says_why_beside_its_network(
        hand_built: tuple[OvnLab, Path]) -> None:
    """A port with OVN's dynamic addressing gives no ComputeInstance: the network's reason
    (its switch holds a port no manifest describes) says why, not only a line among the
    rows left as they are."""
    lab, repo = hand_built
    lab.nbctl("set", "Logical_Switch", "web-net", "other_config:subnet=10.60.1.0/24",
              "--", "lsp-add", "web-net", "web3", "--", "lsp-set-addresses", "web3",
              "0a:00:00:00:02:03 dynamic")
    network = {n["name"]: n for n in _import(repo)["networks"]}["prod-router"]
    chosen = lab.nbctl("get", "Logical_Switch_Port", "web3", "dynamic_addresses").strip()
    # Given fixed addresses, the port is read: what it lacks is named, not two lists.
    lab.nbctl("lsp-set-addresses", "web3", chosen.strip('"'), "--", "lsp-set-port-security",
              "web3", chosen.strip('"'), "--", "remove", "Logical_Switch", "web-net",
              "other_config", "subnet")
    fixed = {n["name"]: n for n in _import(repo)["networks"]}["prod-router"]["reasons"]
    assert f"Port_Group {PG}: ports lacks Logical_Switch_Port/legacy/ComputeInstance/web3/0" \
        in fixed, fixed
    lab.nbctl("lsp-set-addresses", "web3", "0a:00:00:00:02:03 dynamic", "--", "set",
              "Logical_Switch", "web-net", "other_config:subnet=10.60.1.0/24")
    assert chosen.startswith('"0a:00:00:00:02:03 10.60.1.'), chosen
    assert "Logical_Switch web-net holds Logical_Switch_Port web3, which the manifests do " \
        "not describe (addresses ['0a:00:00:00:02:03 dynamic']: OVN chooses them (dynamic), " \
        "unet keeps fixed ones: set those it chose, `ovn-nbctl lsp-set-addresses web3 " \
        f"'{chosen.strip(chr(34))}'`, and import again)" in network["reasons"], \
        network["reasons"]


def test_dhcp_options_that_differ_are_named_by_the_keys_that_differ(
        hand_built: tuple[OvnLab, Path]) -> None:
    """DHCP options set by hand without an `mtu` (unet always writes one): the refusal
    names that key, not two six-key maps for the operator to compare."""
    lab, repo = hand_built
    dhcp = lab.nbctl("--bare", "--columns=_uuid", "find", "DHCP_Options",
                     "cidr=10.60.1.0/24").strip()
    lab.nbctl("dhcp-options-set-options", dhcp, "server_id=10.60.1.1",
              f"server_mac={GW_WEB[1]}", "lease_time=43200", "router=10.60.1.1")
    network = {n["name"]: n for n in _import(repo)["networks"]}["prod-router"]
    [reason] = [r for r in network["reasons"] if r.startswith("DHCP_Options 10.60.1.0/24")]
    assert reason.endswith(": options differ in mtu: {} here, the manifests give "
                           "{'mtu': '1500'}"), reason


def test_import_names_what_is_wrong_with_its_arguments_and_reads_nothing(
        example_copy: Path) -> None:
    cases = {("--manager", "kubernetes", "--tenant", "globex"):
             "NetworkManager kubernetes (plugin kubernetes) cannot import",
             ("--manager", "ovn", "--tenant", "nobody"): "no Tenant named nobody",
             ("--manager", "ovn", "--tenant", "initech"):
             "tenant initech has 2 regions that ovn serves (region-a, region-b): name one "
             "with --region",
             ("--manager", "ovn", "--tenant", "globex", "--region", "region-a"):
             "region region-a is not one of tenant globex's regions that ovn serves",
             ("--manager", "nope", "--tenant", "globex"): "no NetworkManager named nope"}
    for args, said in cases.items():
        result = unet(example_copy, "import", str(example_copy), *args)
        assert result.returncode == 1 and said in result.stderr, (args, result.stderr)
    assert not (example_copy / ".unet").exists()


def test_apply_tags_nothing_of_a_network_whose_reviewed_manifests_differ_from_its_rows(
        hand_built: tuple[OvnLab, Path]) -> None:
    lab, repo = hand_built
    rows_before = _rows(lab)
    network = {n["name"]: n for n in _import(repo)["networks"]}["prod-router"]
    written = repo / network["file"]
    # A second import leaves the reviewed file alone.
    written.write_text(written.read_text().replace("ipv4Cidr: 10.60.1.0/24",
                                                   "ipv4Cidr: 10.60.1.0/24\n  mtu: 9000"))
    again = {n["name"]: n for n in _import(repo)["networks"]}["prod-router"]
    assert not again["adopted"] and any("exists with other content" in r
                                        for r in again["reasons"])
    assert "mtu: 9000" in written.read_text()

    refused = {n["name"]: n for n in _import(repo, "--apply")["networks"]}["prod-router"]
    assert not refused["adopted"]
    assert any(r.startswith("DHCP_Options 10.60.1.0/24") and "'mtu': '9000'" in r
               for r in refused["reasons"]), refused["reasons"]
    assert _rows(lab) == rows_before
    assert "example" not in lab.nbctl("--bare", "--columns=external_ids", "list",
                                      "Logical_Router", "prod-router")

    # Widened for subnets to come (immutable later), it still describes the rows.
    written.write_text(written.read_text().replace("\n  mtu: 9000", "").replace(
        "ipv4Cidr: 10.60.0.0/22", "ipv4Cidr: 10.60.0.0/16"))
    assert "ipv4Cidr: 10.60.0.0/16" in written.read_text()
    assert [n["adopted"] for n in _import(repo, "--apply")["networks"]] == [True]
    assert _import(repo, "--apply")["networks"] == [], "adopted twice"
    assert_noop(repo, repo)


def _build_dual_stack(lab: OvnLab) -> None:
    """A dual-stack network of one subnet, without DHCP, its port in the implicit default
    group: unet's ACLs of both families."""
    nb = lab.nbctl
    pg, default = "unet.legacy.lab", "unet.legacy.lab.default"
    nb("lr-add", "lab")
    nb("ls-add", "dual")
    nb("lrp-add", "lab", "lab-dual", "0a:00:00:00:04:01", "10.80.1.1/24", "fd00:80:1::1/64")
    nb("lsp-add", "dual", "dual-router", "--", "lsp-set-type", "dual-router", "router", "--",
       "lsp-set-addresses", "dual-router", "router", "--", "lsp-set-options", "dual-router",
       "router-port=lab-dual")
    entry = "0a:00:00:00:04:02 10.80.1.10 fd00:80:1::10"
    nb("lsp-add", "dual", "probe", "--", "lsp-set-addresses", "probe", entry, "--",
       "lsp-set-port-security", "probe", entry)
    nb("pg-add", pg, "probe")
    nb("pg-add", default, "probe")
    for group, direction, priority, match, action in [
        (pg, "from-lport", 1000, f"inport == @{pg} && ip", "drop"),
        (pg, "to-lport", 1000, f"outport == @{pg} && ip", "drop"),
        (pg, "from-lport", 1001, f"inport == @{pg} && udp && udp.src == 68 && udp.dst == 67",
         "allow"),
        (pg, "from-lport", 1001, f"inport == @{pg} && udp && udp.src == 546 && udp.dst == 547",
         "allow"),
        (pg, "from-lport", 1001, f"inport == @{pg} && (nd || nd_rs || nd_ra)", "allow"),
        (pg, "to-lport", 1001, f"outport == @{pg} && (nd || nd_rs || nd_ra)", "allow"),
        (default, "to-lport", 1002,
         f"outport == @{default} && ip4 && ip4.src == ${default}_ip4", "allow-related"),
        (default, "to-lport", 1002,
         f"outport == @{default} && ip6 && ip6.src == ${default}_ip6", "allow-related"),
        (default, "from-lport", 1002, f"inport == @{default} && ip4", "allow-related"),
        (default, "from-lport", 1002, f"inport == @{default} && ip6", "allow-related"),
    ]:
        nb("--type=port-group", "acl-add", group, direction, str(priority), match, action)


def test_a_dual_stack_network_is_adopted_with_both_families(
        hand_built: tuple[OvnLab, Path]) -> None:
    lab, repo = hand_built
    _build_dual_stack(lab)
    network = {n["name"]: n for n in _import(repo)["networks"]}["lab"]
    assert network["adopted"], network["reasons"]
    written = {d["kind"]: d["spec"] for d in
               yaml.safe_load_all((repo / network["file"]).read_text())}
    assert written["VirtualNetwork"] == {"region": "region-b", "ipv4Cidr": "10.80.1.0/24",
                                         "ipv6Cidr": "fd00:80:1::/64"}
    assert "SecurityGroup" not in written  # the implicit default, in both families
    assert [n["adopted"] for n in _import(repo, "--apply")["networks"]] == [True, True]
    tags = lab.nbctl("--bare", "--columns=external_ids", "find", "Logical_Switch_Port",
                     "name=probe")
    assert "unet:alloc:ipv6/legacy/ComputeInstance/probe/0=fd00:80:1::10" in tags
    assert_noop(repo, repo)


def test_it_works_end_to_end_on_the_embedded_northbound(example_copy: Path) -> None:
    """The demo's database: built with `unet nb` (ovn-nbctl on the embedded server, in one
    transaction), imported, adopted, and nothing left to plan."""
    repo = example_copy
    (repo / "provider" / "tenants" / "legacy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "network.osac.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": TENANT}, "spec": {"regions": ["region-b"]}}))
    assert apply(repo, repo).returncode == 0
    pg, default = "unet.legacy.solo", "unet.legacy.solo.default"
    entry = "0a:00:00:00:05:02 10.90.1.10"
    commands = [
        ["lr-add", "solo"], ["ls-add", "solo-net"],
        ["lrp-add", "solo", "solo-gw", "0a:00:00:00:05:01", "10.90.1.1/24"],
        ["lsp-add", "solo-net", "solo-net-router"],
        ["lsp-set-type", "solo-net-router", "router"],
        ["lsp-set-addresses", "solo-net-router", "router"],
        ["lsp-set-options", "solo-net-router", "router-port=solo-gw"],
        ["lsp-add", "solo-net", "vm-a"], ["lsp-set-addresses", "vm-a", entry],
        ["lsp-set-port-security", "vm-a", entry],
        ["pg-add", pg, "vm-a"], ["pg-add", default, "vm-a"],
        *(["--type=port-group", "acl-add", group, direction, str(priority), match, action]
          for group, direction, priority, match, action in [
              (pg, "from-lport", 1000, f"inport == @{pg} && ip", "drop"),
              (pg, "to-lport", 1000, f"outport == @{pg} && ip", "drop"),
              (pg, "from-lport", 1001,
               f"inport == @{pg} && udp && udp.src == 68 && udp.dst == 67", "allow"),
              (pg, "from-lport", 1001,
               f"inport == @{pg} && udp && udp.src == 546 && udp.dst == 547", "allow"),
              (pg, "from-lport", 1001, f"inport == @{pg} && (nd || nd_rs || nd_ra)", "allow"),
              (pg, "to-lport", 1001, f"outport == @{pg} && (nd || nd_rs || nd_ra)", "allow"),
              (default, "to-lport", 1002,
               f"outport == @{default} && ip4 && ip4.src == ${default}_ip4", "allow-related"),
              (default, "from-lport", 1002, f"inport == @{default} && ip4",
               "allow-related")])]
    built = unet(repo, "nb", "--", *[word for command in commands
                                     for word in ("--", *command)][1:])
    assert built.returncode == 0, built.stderr

    text = unet(repo, "import", "--manager", "ovn", "--tenant", TENANT)
    assert text.returncode == 0 and "network solo: written to tenants/legacy/imported/" \
        "solo.yaml; 15 rows to tag, none created or deleted" in text.stdout, text.stdout
    assert "network solo: adopted" in unet(repo, "import", "--manager", "ovn", "--tenant",
                                           TENANT, "--apply").stdout
    assert_noop(repo, repo)


def test_apply_waits_for_another_runs_lock_and_tags_nothing_without_it(
        hand_built: tuple[OvnLab, Path], tmp_path: Path) -> None:
    lab, repo = hand_built
    rows_before = _rows(lab)
    lab.nbctl("set", "Logical_Router", "unet.acme.prod", "options:drift=yes")
    out = tmp_path / "apply.out"
    first, controller = spawn_at_prompt(tmp_path, out, "apply", str(repo), "--manager", "ovn")
    try:
        with reaped(first):
            wait_for_text(first, (out,), "Apply these changes?")
            imported = {n["name"]: n["adopted"] for n in _import(repo)["networks"]}
            assert imported["prod-router"], "import reads without the lock"
            second = unet(repo, "import", "--manager", "ovn", "--tenant", TENANT, "--apply",
                          "--lock-timeout", "2")
            assert second.returncode == 1, second.stdout
            assert f"waiting for the lock unet_example held by {socket.gethostname()} pid " \
                   f"{first.pid}" in second.stderr, second.stderr
    finally:
        os.close(controller)
    assert _rows(lab)["Logical_Switch_Port"] == rows_before["Logical_Switch_Port"]
    assert "example" not in lab.nbctl("--bare", "--columns=external_ids", "list",
                                      "Logical_Switch_Port", "web1")


def test_apply_of_a_revision_adopts_what_that_revision_says_not_the_working_tree(
        hand_built: tuple[OvnLab, Path]) -> None:
    lab, repo = hand_built

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                       cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "before the import")
    _import(repo)  # the files are on disk, not in HEAD
    assert _import(repo, "--apply", "--rev", "HEAD")["networks"] == []
    assert "example" not in lab.nbctl("--bare", "--columns=external_ids", "list",
                                      "Logical_Router", "prod-router")
    git("add", "-A")
    git("commit", "-qm", "the imported networks, reviewed")
    adopted = _import(repo, "--apply", "--rev", "HEAD")
    assert [n["name"] for n in adopted["networks"] if n["adopted"]] == ["prod-router"]
    alone = unet(repo, "import", "--manager", "ovn", "--tenant", TENANT, "--rev", "HEAD")
    assert alone.returncode == 1 and "--rev goes with --apply" in alone.stderr


def test_two_routers_that_give_one_network_name_are_refused_and_the_others_go_on(
        hand_built: tuple[OvnLab, Path]) -> None:
    lab, repo = hand_built
    lab.nbctl("lr-add", "twin_router", "--", "lr-add", "twin.router")
    networks = {n["name"]: n for n in _import(repo)["networks"]}
    assert networks["twin-router"]["reasons"] == [
        "network twin-router: 2 routers give this name: rename all but one (a router's name "
        "is free to choose) and import again"]
    assert networks["prod-router"]["adopted"]
