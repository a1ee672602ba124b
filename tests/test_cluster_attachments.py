"""A Cluster with several attachments (issue 30, item 6). OSAC's `network_attachments` is
repeated; unet took exactly one. Now, as on a ComputeInstance: 1..8 attachments of one
VirtualNetwork (provider networks aside), exactly one `primary` when there are several. The
primary attachment's subnet holds the VIPs (allocated from its VIP block, or fixed there),
the DNAT of its ExternalIPAttachments and the default route; the others are secondary NICs
of the nodes, a provider network among them.

The example's cluster k1 has its nodes on `nodes` (primary) and a second NIC on the
provider's services-a. What the fabric makes of it is proven with ovn-trace on a real
Northbound.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from unet.reconciler.desired import render_desired
from unet.reconciler.reach import Reachability

from .conftest import EXAMPLE, copy_checkout
from .support.ovnrun import assert_noop
from .support.trace import (
    TCP,
    Fabric,
    Port,
    allowed_by,
    append_docs,
    applied,
    as_list,
    delivered,
    dropped,
    inbound,
    read_docs,
)
from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

CLUSTER = "tenants/acme/cluster-k1.yaml"
NETWORK = "tenants/acme/network.yaml"
VIP_BLOCK = ("10.10.11.240", "10.10.11.255")  # nodes' last /28 (standard-a: /28)


def _k1(files: Files) -> dict[str, Any]:
    return next(d for d in files[CLUSTER] if d["kind"] == "Cluster")


def _rows(files: Files) -> dict[str, Any]:
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    return {o.key: o for o in render_desired(head, {}).objects}


def _errors(files: Files) -> set[tuple[str, str]]:
    return {(d.code, d.path or "") for d in validate_memory(files).diagnostics if d.is_error}


def _addresses(row: Any) -> list[str]:
    return str(row.fields["addresses"][0]).split()


def _in_vip_block(address: str) -> bool:
    last = int(address.rsplit(".", 1)[1])
    return address.startswith("10.10.11.") and 240 <= last <= 255


def test_a_cluster_has_a_port_per_attachment_and_its_vips_on_the_primary_only() -> None:
    rows = _rows(EXAMPLE_FILES)
    nodes, services = (rows[f"Logical_Switch_Port/acme/Cluster/k1/{i}"] for i in (0, 1))
    assert nodes.parent == ("Logical_Switch/acme/nodes", "ports")
    assert services.parent == ("Logical_Switch/None/services-a", "ports")
    _mac, address, *vips = _addresses(nodes)
    assert address.startswith("10.10.8.") and not _in_vip_block(address)
    assert len(vips) == 2 and all(_in_vip_block(v) for v in vips), "api and ingress VIPs"
    assert nodes.fields["port_security"] == nodes.fields["addresses"]
    _mac, provider_address, *rest = _addresses(services)
    assert rest == [], "the VIPs are answered on the primary subnet only"
    assert provider_address == "192.168.80.100", "the first of services-a's allocationRanges"
    vip_tags = {k for k in nodes.meta if k.startswith("unet:alloc:vip/")}
    assert len(vip_tags) == 2 and not any(k.startswith("unet:alloc:vip/") for k in services.meta)
    # Only the primary NIC offers the nodes a default route.
    assert nodes.refs["dhcpv4_options"] == ("DHCP_Options/acme/nodes/v4",)
    assert "router" not in rows["DHCP_Options/None/services-a/v4"].fields["options"]


def test_the_vips_follow_the_primary_attachment_wherever_it_is_in_the_list() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    _k1(files)["spec"]["networkAttachments"] = [
        {"subnet": "db", "securityGroups": ["k1-nodes"]},
        {"subnet": "nodes", "securityGroups": ["k1-nodes"], "primary": True}]
    rows = _rows(files)
    secondary, primary = (rows[f"Logical_Switch_Port/acme/Cluster/k1/{i}"] for i in (0, 1))
    assert primary.parent == ("Logical_Switch/acme/nodes", "ports")
    assert all(_in_vip_block(v) for v in _addresses(primary)[2:]) and \
        len(_addresses(primary)) == 4
    assert len([a for a in _addresses(secondary) if "." in a]) == 1, "no VIP on db's port"
    assert secondary.refs["dhcpv4_options"] == ("DHCP_Options/acme/db/v4/secondary",)
    assert "router" not in rows["DHCP_Options/acme/db/v4/secondary"].fields["options"]
    # The ExternalIPAttachments of k1 DNAT to its VIPs, which are on nodes.
    nat = next(o for o in rows.values() if o.table == "NAT" and o.owner.endswith("/k1-api"))
    assert _in_vip_block(nat.fields["logical_ip"])

    # A fixed VIP lies in the primary subnet, not in another of the cluster's.
    _k1(files)["spec"]["apiVip"] = "10.10.2.230"
    assert ("ADDRESS_INVALID", "/spec/apiVip") in _errors(files)
    _k1(files)["spec"]["apiVip"] = "10.10.11.250"
    assert _errors(files) == set()


def test_the_rules_of_several_attachments_are_those_of_every_workload() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    attachments = _k1(files)["spec"]["networkAttachments"]
    del attachments[0]["primary"]
    assert ("PRIMARY_INVALID", "/spec/networkAttachments") in _errors(files)

    files = copy.deepcopy(EXAMPLE_FILES)
    attachments = _k1(files)["spec"]["networkAttachments"]
    del attachments[0]["primary"]
    attachments[1]["primary"] = True
    assert ("PROVIDER_NETWORK_ATTACHMENT_INVALID", "/spec/networkAttachments/1/providerNetwork") \
        in _errors(files), "the VIPs and the default route stay on the tenant's own network"

    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/acme/other.yaml"] = [
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "VirtualNetwork",
         "metadata": {"name": "other"}, "spec": {"region": "region-a",
                                                 "ipv4Cidr": "10.20.0.0/16"}},
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "Subnet",
         "metadata": {"name": "other"},
         "spec": {"virtualNetwork": "other", "ipv4Cidr": "10.20.1.0/24"}}]
    _k1(files)["spec"]["networkAttachments"].append({"subnet": "other"})
    assert ("ATTACHMENTS_DIFFERENT_NETWORKS", "/spec/networkAttachments/2/subnet") in \
        _errors(files)

    files = copy.deepcopy(EXAMPLE_FILES)
    _k1(files)["spec"]["networkAttachments"] += [{"subnet": "db"}] * 6
    assert _errors(files) == set(), "8, as a ComputeInstance"
    _k1(files)["spec"]["networkAttachments"].append({"subnet": "db"})
    assert _errors(files) == {("SCHEMA_TYPE", "/spec/networkAttachments")}, "at most 8"


def test_pod_and_service_cidrs_keep_apart_from_the_provider_networks_too() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    _k1(files)["spec"]["network"]["serviceCidr"] = "192.168.80.0/24"
    assert ("CLUSTER_CIDR_OVERLAP", "/spec/network/serviceCidr") in _errors(files)


def test_reach_puts_the_vips_and_public_addresses_on_the_primary_nic() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    _k1(files)["spec"]["networkAttachments"].reverse()
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    desired = render_desired(head, {})
    reach = Reachability(desired.model, desired.allocations)
    primary, secondary = reach.nics["acme/k1/1"], reach.nics["acme/k1/0"]
    assert primary.segment == ("acme", "nodes") and secondary.segment == (None, "services-a")
    assert all(_in_vip_block(v) for v in primary.extra[4]) and not secondary.extra
    assert {p.attachment.name for p in primary.public} == {"k1-api", "k1-ingress"}
    assert secondary.public == []


# --- on a real Northbound ------------------------------------------------------------------


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example, plus a rule of k1's nodes letting web scrape node metrics (9100)."""
    root = tmp_path_factory.mktemp("cluster-attachments")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    docs = read_docs(repo, CLUSTER)
    nodes = next(d for d in docs if d["kind"] == "SecurityGroup")
    nodes["spec"]["ingress"].append({"protocol": "tcp", "portFrom": 9100, "portTo": 9100,
                                     "securityGroup": "web"})
    (repo / CLUSTER).write_text("")
    append_docs(repo, CLUSTER, *docs)
    with applied(root, repo) as lab:
        yield lab


def test_the_cluster_is_applied_once_and_answers_on_both_networks(fabric: Fabric) -> None:
    nb = fabric.nb
    nodes, services = (nb.port("acme", "Cluster", "k1", i) for i in (0, 1))
    assert nodes.switch == "unet.acme.nodes" and services.switch == "unet-pn.services-a"
    assert len(nodes.extra) == 2 and services.extra == ()
    assert_noop(fabric.repo, fabric.repo)

    # The API's public address reaches the api VIP on the primary NIC.
    api = nb.external_ip("acme", "k1-api")
    packet = delivered(inbound(fabric, "region-a", api, TCP.format(6443)), nodes)
    assert packet["ip4.dst"] in nodes.extra

    # On services-a, the provider's hosts reach the nodes as far as k1-nodes admits.
    localnet = nb.row("Logical_Switch_Port/None/services-a/localnet")
    mirror = Port(localnet["name"], services.switch, "02:00:00:00:80:10", "192.168.80.10")
    api_there = fabric.send(mirror, services.mac, services.ip4 or "", TCP.format(6443))
    delivered(api_there, services)
    allowed_by(api_there, "ls_out_acl", f"outport == @{nb.group('acme', 'prod', 'k1-nodes')}")
    ssh = fabric.send(mirror, services.mac, services.ip4 or "", TCP.format(22))
    dropped(ssh, "ls_out_acl", services.switch, f"outport == @{nb.group('acme', 'prod')} && ip")


def test_a_vm_on_a_hosting_cluster_meets_the_cluster_on_the_provider_network(
        fabric: Fabric) -> None:
    """web-k1 runs on hosting-a1 with a NIC on services-a (item 4): it arrives through
    services-a's localnet port with its own address there, which k1-nodes' rule from `web`
    admits (the address recorded on its Address_Set); another address there is dropped."""
    nb = fabric.nb
    services = nb.port("acme", "Cluster", "k1", 1)
    hosted = nb.row("Address_Set/acme/ComputeInstance/web-k1/1/ip4")
    [address] = as_list(hosted["addresses"])
    assert address.startswith("192.168.80.") and address != services.ip4
    mac = hosted["external_ids"]["unet:alloc:mac/acme/ComputeInstance/web-k1/1"]
    localnet = nb.row("Logical_Switch_Port/None/services-a/localnet")
    vm = Port(localnet["name"], services.switch, mac, address)

    metrics = fabric.send(vm, services.mac, services.ip4 or "", TCP.format(9100))
    assert delivered(metrics, services)["ip4.src"] == address
    allowed_by(metrics, "ls_out_acl", f"outport == @{nb.group('acme', 'prod', 'k1-nodes')}",
               f"${hosted['name']}")
    stranger = fabric.send(vm, services.mac, services.ip4 or "", TCP.format(9100),
                           src="192.168.80.150", eth_src="02:00:00:00:80:96")
    dropped(stranger, "ls_out_acl", services.switch,
            f"outport == @{nb.group('acme', 'prod')} && ip")
