"""What the example repo means on the wire, proven with ovn-trace as an independent oracle.

unet applies examples/network-repo to a real OVN Northbound database, ovn-northd compiles
the rows into logical flows, and ovn-trace follows packets through them. Ports, MACs and
addresses are read back from the Northbound rows by their `unet:key` tags (allocations may
legitimately change); what each packet must do is asserted. Manifest values (fixed
addresses, DNS servers, routes, pool gateways) come from the manifests themselves.

First packets are traced with `--ct=new` for every conntrack step, so security groups
decide them as new connections; every trace asserts that no step silently fell back to
ovn-trace's default "established". Outbound and inbound NAT need a neighbour that owns the
pool gateway address: the tests add an "upstream router" port to each external switch by
hand (no chassis is needed: ovn-trace follows the distributed gateway port's redirect).
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import EXAMPLE, copy_checkout
from .support.ovnrun import assert_noop
from .support.trace import (
    API,
    OUTSIDE,
    TCP,
    Fabric,
    Port,
    Trace,
    allowed_by,
    append_docs,
    applied,
    arp_request,
    as_list,
    delivered,
    dropped,
    inbound,
    ip_packet,
    manifest,
    read_docs,
    trace,
)

OFFICE = "192.0.2.10"  # inside 192.0.2.0/24, the example's office / DR site


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example repo, applied unchanged."""
    root = tmp_path_factory.mktemp("trace-example")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    with applied(root, repo) as fabric:
        yield fabric



@pytest.fixture(scope="module")
def inbound_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example plus, in initech's lab (no NATGateway), launch-1 in a group open on 443
    and initech's reserved launch-web attached to it."""
    root = tmp_path_factory.mktemp("trace-inbound")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    append_docs(repo, "tenants/initech/security-groups.yaml", {
        "apiVersion": API, "kind": "SecurityGroup", "metadata": {"name": "launch"},
        "spec": {"virtualNetwork": "lab",
                 "ingress": [{"protocol": "tcp", "portFrom": 443, "portTo": 443,
                              "cidr": "0.0.0.0/0"}],
                 "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"}]}})
    append_docs(repo, "tenants/initech/compute.yaml", {
        "apiVersion": API, "kind": "ComputeInstance", "metadata": {"name": "launch-1"},
        "spec": {"networkAttachments": [{"subnet": "build", "securityGroups": ["launch"]}]}})
    append_docs(repo, "tenants/initech/external.yaml", {
        "apiVersion": API, "kind": "ExternalIPAttachment", "metadata": {"name": "launch-web"},
        "spec": {"externalIP": "launch-web",
                 "target": {"kind": "ComputeInstance", "name": "launch-1"}}})
    with applied(root, repo) as fabric:
        yield fabric


@pytest.fixture(scope="module")
def initech(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example plus, in initech's lab, a second default-group runner and a `tools` subnet
    whose VM uses a declared group (so lab has members and non-members of `default`)."""
    root = tmp_path_factory.mktemp("trace-initech")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    append_docs(repo, "tenants/initech/network.yaml", {
        "apiVersion": API, "kind": "Subnet", "metadata": {"name": "tools"},
        "spec": {"virtualNetwork": "lab", "ipv4Cidr": "192.168.2.0/24"}})
    append_docs(repo, "tenants/initech/security-groups.yaml", {
        "apiVersion": API, "kind": "SecurityGroup", "metadata": {"name": "tools"},
        "spec": {"virtualNetwork": "lab",
                 "ingress": [{"protocol": "tcp", "portFrom": 22, "portTo": 22,
                              "cidr": "0.0.0.0/0"}],
                 "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"}]}})
    append_docs(repo, "tenants/initech/compute.yaml", {
        "apiVersion": API, "kind": "ComputeInstance", "metadata": {"name": "ci-runner-2"},
        "spec": {"networkAttachments": [{"subnet": "build"}]}}, {
        "apiVersion": API, "kind": "ComputeInstance", "metadata": {"name": "tools-1"},
        "spec": {"networkAttachments": [{"subnet": "tools", "securityGroups": ["tools"]}]}})
    with applied(root, repo) as fabric:
        yield fabric


@pytest.fixture(scope="module")
def shared_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example plus initech on the provider's storage-b beside globex: a network in
    region-b and a VM whose second NIC is on storage-b (initech's default group)."""
    root = tmp_path_factory.mktemp("trace-provider-network")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    networks = repo / "provider" / "networks.yaml"
    networks.write_text(networks.read_text().replace("tenants: [globex]",
                                                     "tenants: [globex, initech]"))
    append_docs(repo, "tenants/initech/network.yaml", {
        "apiVersion": API, "kind": "VirtualNetwork", "metadata": {"name": "lab-b"},
        "spec": {"region": "region-b", "ipv4Cidr": "172.20.0.0/16"}}, {
        "apiVersion": API, "kind": "Subnet", "metadata": {"name": "hosts"},
        "spec": {"virtualNetwork": "lab-b", "ipv4Cidr": "172.20.1.0/24"}})
    append_docs(repo, "tenants/initech/compute.yaml", {
        "apiVersion": API, "kind": "ComputeInstance", "metadata": {"name": "nas-client"},
        "spec": {"networkAttachments": [{"subnet": "hosts", "primary": True},
                                        {"providerNetwork": "storage-b"}]}})
    with applied(root, repo) as fabric:
        yield fabric


# --- 1. same subnet ----------------------------------------------------------------------------


def test_same_subnet_traffic_follows_the_security_groups(example: Fabric) -> None:
    nb = example.nb
    web1, web2 = nb.port("acme", "ComputeInstance", "web-1"), \
        nb.port("acme", "ComputeInstance", "web-2")
    web, prod = nb.group("acme", "prod", "web"), nb.group("acme", "prod")
    assert web1.switch == web2.switch

    https = example.send(web1, web2.mac, web2.ip4, TCP.format(443))
    packet = delivered(https, web2)
    assert (packet["ip4.src"], packet["ip4.dst"]) == (web1.ip4, web2.ip4)
    assert https.datapaths == {web1.switch}  # switched, never routed
    allowed_by(https, "ls_in_acl", f"inport == @{web} && ip4")  # web's egress: all
    allowed_by(https, "ls_out_acl", f"outport == @{web} && ip4", "tcp.dst == 443")

    telnet = example.send(web1, web2.mac, web2.ip4, TCP.format(23))
    dropped(telnet, "ls_out_acl", web1.switch, f"outport == @{prod} && ip")

    # SSH is open only to the office: not even to a neighbour in the same group.
    ssh = example.send(web1, web2.mac, web2.ip4, TCP.format(22))
    dropped(ssh, "ls_out_acl", web1.switch, f"outport == @{prod} && ip")
    ping = example.send(web1, web2.mac, web2.ip4, "ip.ttl == 64 && icmp4 && icmp4.type == 8")
    delivered(ping, web2)
    allowed_by(ping, "ls_out_acl", "icmp4.type == 8")


def test_replies_of_allowed_connections_flow(example: Fabric) -> None:
    """Stateful groups: web-2's answer to web-1's HTTPS is no new connection (est, reply)."""
    nb = example.nb
    web1, web2 = nb.port("acme", "ComputeInstance", "web-1"), \
        nb.port("acme", "ComputeInstance", "web-2")
    answer = "ip.ttl == 64 && tcp && tcp.src == 443 && tcp.dst == 40000"
    delivered(example.send(web2, web1.mac, web1.ip4, answer, ct=("--ct=est,rpl",) * 2), web1)
    # The same packet opening a connection is not allowed (web admits no port 40000).
    dropped(example.send(web2, web1.mac, web1.ip4, answer), "ls_out_acl", web1.switch)


# --- 2. across subnets, through the router -----------------------------------------------------


def test_cross_subnet_traffic_is_routed_and_filtered(example: Fabric) -> None:
    nb = example.nb
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    db1 = nb.port("acme", "ComputeInstance", "db-1")
    db_doc = next(d for d in read_docs(example.repo, "tenants/acme/compute.yaml")
                  if d["metadata"]["name"] == "db-1")
    assert db1.ip4 == db_doc["spec"]["networkAttachments"][0]["ipAddress"]
    gw_web, gw_db = nb.gateway("acme", "web"), nb.gateway("acme", "db")
    router = nb.row("Logical_Router/acme/prod")["name"]
    db, web, prod = (nb.group("acme", "prod", "db"), nb.group("acme", "prod", "web"),
                     nb.group("acme", "prod"))

    # web-1 finds its gateway by ARP: the router port answers with its MAC.
    assert example.resolve(web1, gw_web.ip4) == gw_web.mac

    postgres = example.send(web1, gw_web.mac, db1.ip4, TCP.format(5432))
    packet = delivered(postgres, db1)
    assert packet["eth.src"] == gw_db.mac and packet["eth.dst"] == db1.mac
    assert (packet["ip4.src"], packet["ip4.dst"]) == (web1.ip4, db1.ip4)  # no NAT inside
    assert postgres.datapaths == {web1.switch, router, db1.switch}
    allowed_by(postgres, "ls_out_acl", f"outport == @{db}", f"${web}_ip4",
               "tcp.dst == 5432")

    ssh = example.send(web1, gw_web.mac, db1.ip4, TCP.format(22))
    dropped(ssh, "ls_out_acl", db1.switch, f"outport == @{prod} && ip")

    # The remote group means its members only: k1's node (group k1-nodes) may not.
    k1 = nb.port("acme", "Cluster", "k1")
    gw_nodes = nb.gateway("acme", "nodes")
    stranger = example.send(k1, gw_nodes.mac, db1.ip4, TCP.format(5432))
    dropped(stranger, "ls_out_acl", db1.switch, f"outport == @{prod} && ip")


def test_ipv6_between_web_and_db(example: Fabric) -> None:
    """web's only egress rule is 0.0.0.0/0, so web-1 sends no IPv6 at all; db's IPv6 rule
    from `web` still admits web's IPv6 addresses (shown by injecting at the router port)."""
    nb = example.nb
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    db1 = nb.port("acme", "ComputeInstance", "db-1")
    gw_web, gw_db = nb.gateway("acme", "web"), nb.gateway("acme", "db")
    web, db, prod = (nb.group("acme", "prod", "web"), nb.group("acme", "prod", "db"),
                     nb.group("acme", "prod"))
    assert web1.ip6 and db1.ip6 and gw_web.ip6

    egress = example.send(web1, gw_web.mac, db1.ip6, TCP.format(5432))
    dropped(egress, "ls_in_acl", web1.switch, f"inport == @{prod} && ip")

    routed = trace(example.lab, db1.switch, {
        "inport": f'"{nb.row("Logical_Switch_Port/acme/db/router")["name"]}"',
        "eth.src": gw_db.mac, "eth.dst": db1.mac, "ip6.src": web1.ip6, "ip6.dst": db1.ip6,
    }, TCP.format(5432))
    delivered(routed, db1)
    allowed_by(routed, "ls_out_acl", f"outport == @{db}", f"${web}_ip6")


def test_a_vm_on_a_hosting_cluster_is_a_member_of_its_groups_on_the_fabric(
        example: Fabric) -> None:
    """web-k1 runs on hosting-a1 and reaches the fabric through web's localnet port: db's
    rule from `web` admits its address (recorded on its Address_Set), and no other address
    arriving there."""
    nb = example.nb
    hosted = nb.row("Address_Set/acme/ComputeInstance/web-k1/0/ip4")
    [address] = as_list(hosted["addresses"])
    mac = hosted["external_ids"]["unet:alloc:mac/acme/ComputeInstance/web-k1/0"]
    localnet = nb.row("Logical_Switch_Port/acme/web/localnet")
    db1 = nb.port("acme", "ComputeInstance", "db-1")
    gw_web = nb.gateway("acme", "web")
    vm = Port(localnet["name"], nb.switch_of[localnet["_uuid"]], mac, address)
    db, prod = nb.group("acme", "prod", "db"), nb.group("acme", "prod")

    postgres = example.send(vm, gw_web.mac, db1.ip4, TCP.format(5432))
    packet = delivered(postgres, db1)
    assert packet["ip4.src"] == address
    allowed_by(postgres, "ls_out_acl", f"outport == @{db}", f"${hosted['name']}")

    stranger = example.send(vm, gw_web.mac, db1.ip4, TCP.format(5432), src="10.10.1.199",
                            eth_src="02:00:00:00:01:99")
    dropped(stranger, "ls_out_acl", db1.switch, f"outport == @{prod} && ip")


def test_groups_of_a_workload_with_two_ports(example: Fabric) -> None:
    """globex: app-1 has a port on app and on data, db-metal one on each too."""
    nb = example.nb
    app_a, app_d = (nb.port("globex", "ComputeInstance", "app-1", i) for i in (0, 1))
    metal_d, metal_a = (nb.port("globex", "BaremetalInstance", "db-metal", i) for i in (0, 1))
    app, database, corp = (nb.group("globex", "corp", "app"),
                           nb.group("globex", "corp", "database"), nb.group("globex", "corp"))
    assert app_d.switch == metal_d.switch and app_a.switch == metal_a.switch

    same = example.send(app_d, metal_d.mac, metal_d.ip4, TCP.format(5432))
    delivered(same, metal_d)
    allowed_by(same, "ls_out_acl", f"outport == @{database}", f"ip4.src == ${app}_ip4")
    routed = example.send(app_a, nb.gateway("globex", "app").mac, metal_d.ip4,
                          TCP.format(5432))
    delivered(routed, metal_d)
    # Replication between database hosts: the group admits its own members.
    replication = example.send(metal_a, nb.gateway("globex", "app").mac, metal_d.ip4,
                               TCP.format(5432))
    delivered(replication, metal_d)
    allowed_by(replication, "ls_out_acl", f"ip4.src == ${database}_ip4")
    dropped(example.send(app_d, metal_d.mac, metal_d.ip4, TCP.format(22)), "ls_out_acl",
            metal_d.switch, f"outport == @{corp} && ip")
    # app admits 8443 from anywhere, on both of app-1's ports.
    for port in (app_a, app_d):
        eth_dst = port.mac if port.switch == metal_a.switch else nb.gateway("globex", "app").mac
        delivered(example.send(metal_a, eth_dst, port.ip4, TCP.format(8443)), port)


# --- 3. the implicit default group -------------------------------------------------------------


def test_default_group_egress_is_open_and_stateful(example: Fabric) -> None:
    nb = example.nb
    runner = nb.port("initech", "ComputeInstance", "ci-runner-1")
    default = nb.group("initech", "lab", "default")
    members = as_list(nb.row("Port_Group/initech/lab/default")["ports"])
    runner_uuid = nb.row("Logical_Switch_Port/initech/ComputeInstance/ci-runner-1/0")["_uuid"]
    assert members == [runner_uuid], "a port without securityGroups is in `default`"
    gw = nb.gateway("initech", "build")

    # Ping the gateway: the request passes the runner's egress, the router answers and the
    # answer (a reply of the allowed connection) comes back.
    echo = "ip.ttl == 64 && icmp4 && icmp4.type == 8 && icmp4.code == 0"
    ping = example.send(runner, gw.mac, gw.ip4, echo, ct=("--ct=new", "--ct=est,rpl"))
    answer = delivered(ping, runner)
    assert (answer["ip4.src"], answer["ip4.dst"], answer["icmp4.type"]) == \
        (gw.ip4, runner.ip4, "0")
    allowed_by(ping, "ls_in_acl", f"inport == @{default} && ip4")

    # lab has no NATGateway, so its router has no way out.
    router = nb.row("Logical_Router/initech/lab")["name"]
    out = example.send(runner, gw.mac, OUTSIDE, TCP.format(443))
    allowed_by(out, "ls_in_acl", f"inport == @{default} && ip4")
    dropped(out, "lr_in_ip_routing", router)


def test_default_group_ingress_only_from_its_members(initech: Fabric) -> None:
    nb = initech.nb
    runner1 = nb.port("initech", "ComputeInstance", "ci-runner-1")
    runner2 = nb.port("initech", "ComputeInstance", "ci-runner-2")
    tools1 = nb.port("initech", "ComputeInstance", "tools-1")
    default, tools, lab = (nb.group("initech", "lab", "default"),
                           nb.group("initech", "lab", "tools"), nb.group("initech", "lab"))
    gw_build, gw_tools = nb.gateway("initech", "build"), nb.gateway("initech", "tools")

    # A member of default reaches a member on any port and protocol ...
    for rest in (TCP.format(5000), "ip.ttl == 64 && udp && udp.dst == 53"):
        member = initech.send(runner2, runner1.mac, runner1.ip4, rest)
        delivered(member, runner1)
        allowed_by(member, "ls_out_acl", f"outport == @{default}",
                   f"ip4.src == ${default}_ip4")
    # ... a non-member of the same network does not, on any port.
    for port in (22, 5000):
        outsider = initech.send(tools1, gw_tools.mac, runner1.ip4, TCP.format(port))
        allowed_by(outsider, "ls_in_acl", f"inport == @{tools}")  # tools' egress is open
        dropped(outsider, "ls_out_acl", runner1.switch, f"outport == @{lab} && ip")

    # Egress of default is open: the runner reaches tools-1, whose own group decides.
    ssh = initech.send(runner1, gw_build.mac, tools1.ip4, TCP.format(22))
    delivered(ssh, tools1)
    allowed_by(ssh, "ls_in_acl", f"inport == @{default} && ip4")
    allowed_by(ssh, "ls_out_acl", f"outport == @{tools}", "tcp.dst == 22")
    other = initech.send(runner1, gw_build.mac, tools1.ip4, TCP.format(23))
    allowed_by(other, "ls_in_acl", f"inport == @{default} && ip4")
    dropped(other, "ls_out_acl", tools1.switch, f"outport == @{lab} && ip")


# --- 4. VirtualNetworks are isolated -----------------------------------------------------------


def test_virtual_networks_never_reach_each_other(example: Fabric) -> None:
    """acme prod and globex corp both use 10.10.0.0/16; nothing crosses between them."""
    nb = example.nb
    # A VN's own switches and router, and its region's external switch (the way out).
    acme, globex = (nb.datapaths(t) | {nb.row(f"Logical_Switch/external/{region}")["name"]}
                    for t, region in (("acme", "region-a"), ("globex", "region-b")))
    acme_ports = {p.name for p in nb.tenant_ports("acme")}
    globex_ports = {p.name for p in nb.tenant_ports("globex")}
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    app1 = nb.port("globex", "ComputeInstance", "app-1")
    acme_router = nb.row("Logical_Router/acme/prod")["name"]
    globex_router = nb.row("Logical_Router/globex/corp")["name"]
    assert nb.row("Logical_Router/acme/prod")["_uuid"] != \
        nb.row("Logical_Router/globex/corp")["_uuid"]

    cidrs = {d["spec"]["ipv4Cidr"] for t, vn in (("acme", "prod"), ("globex", "corp"))
             for d in read_docs(example.repo, f"tenants/{t}/network.yaml")
             if d["kind"] == "VirtualNetwork" and d["metadata"]["name"] == vn}
    assert len(cidrs) == 1, "the example's two networks share one CIDR"

    cases = [(web1, nb.gateway("acme", "web").mac, p, acme, acme_router, globex,
              globex_ports) for p in nb.tenant_ports("globex")]
    cases += [(app1, nb.gateway("globex", "app").mac, p, globex, globex_router, acme,
               acme_ports) for p in nb.tenant_ports("acme")]
    assert len(cases) >= 6
    for source, gateway_mac, target, own, own_router, other, other_ports in cases:
        for dst in filter(None, (target.ip4, target.ip6, *target.extra)):
            if ":" in dst and source.ip6 is None:
                continue
            for eth_dst in (gateway_mac, target.mac):  # routed, and straight at its MAC
                result = example.send(source, eth_dst, dst, TCP.format(5432))
                assert result.datapaths <= own, f"left {sorted(own)}\n{result}"
                assert not result.datapaths & (other - own), result
                assert not set(result.ports) & other_ports, result
                if eth_dst == gateway_mac and ":" not in dst:
                    assert own_router in result.datapaths, f"not even routed?\n{result}"


# --- 5. SNAT -----------------------------------------------------------------------------------


def test_outbound_traffic_is_snatted_to_the_nat_gateway_address(example: Fabric) -> None:
    nb = example.nb
    upstream = example.upstream["region-a"]
    nat = nb.external_ip("acme", "prod-nat")
    gateway_port = nb.router_port("Logical_Router_Port/acme/prod/external")
    router = nb.row("Logical_Router/acme/prod")["name"]
    sources = [(nb.port("acme", "ComputeInstance", "web-2"), "web"),
               (nb.port("acme", "ComputeInstance", "db-1"), "db"),
               (nb.port("acme", "Cluster", "k1"), "nodes")]
    for port, subnet in sources:
        result = example.send(port, nb.gateway("acme", subnet).mac, OUTSIDE, TCP.format(443))
        packet = delivered(result, upstream)
        # Out through the gateway port to the pool gateway (the default route's next hop).
        assert packet["eth.src"] == gateway_port.mac and packet["eth.dst"] == upstream.mac
        assert (packet["ip4.src"], packet["ip4.dst"]) == (nat, OUTSIDE), result
        assert router in result.datapaths
        assert any(s.table == "lr_out_snat" for s in result.stages), result

    # web-1's own address is inbound only (OSAC): its new connections leave from the NAT's.
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    result = example.send(web1, nb.gateway("acme", "web").mac, OUTSIDE, TCP.format(443))
    assert delivered(result, upstream)["ip4.src"] == nat

    # globex in region-b: app-1's second port (not the attachment's target) uses corp's NAT.
    app1_data = nb.port("globex", "ComputeInstance", "app-1", 1)
    result = example.send(app1_data, nb.gateway("globex", "data").mac, OUTSIDE,
                          TCP.format(443))
    packet = delivered(result, example.upstream["region-b"])
    assert packet["ip4.src"] == nb.external_ip("globex", "corp-nat")


# --- 6. DNAT -----------------------------------------------------------------------------------


def test_external_ip_reaches_its_target(example: Fabric) -> None:
    nb = example.nb
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    public = nb.external_ip("acme", "web-1-public")
    web = nb.group("acme", "prod", "web")
    prod = nb.group("acme", "prod")

    https = inbound(example, "region-a", public, TCP.format(443))
    packet = delivered(https, web1)
    assert (packet["ip4.src"], packet["ip4.dst"]) == (OUTSIDE, web1.ip4)
    assert packet["eth.dst"] == web1.mac
    allowed_by(https, "ls_out_acl", f"outport == @{web} && ip4", "tcp.dst == 443")

    # The group still decides: SSH only from the office, nothing on 5432.
    dropped(inbound(example, "region-a", public, TCP.format(22)), "ls_out_acl", web1.switch,
            f"outport == @{prod} && ip")
    office = inbound(example, "region-a", public, TCP.format(22), src=OFFICE)
    assert delivered(office, web1)["ip4.dst"] == web1.ip4
    allowed_by(office, "ls_out_acl", "ip4.src == 192.0.2.0/24", "tcp.dst == 22")
    dropped(inbound(example, "region-a", public, TCP.format(5432)), "ls_out_acl",
            web1.switch)

    # Cluster k1's API address goes to its API VIP on the nodes' port.
    k1 = nb.port("acme", "Cluster", "k1")
    k1_row = nb.row("Logical_Switch_Port/acme/Cluster/k1/0")
    api_vip = k1_row["external_ids"]["unet:alloc:vip/acme/k1/api"]
    assert api_vip in k1.extra
    api = inbound(example, "region-a", nb.external_ip("acme", "k1-api"), TCP.format(6443))
    assert delivered(api, k1)["ip4.dst"] == api_vip

    # globex's DR address reaches db-metal's primary port, from the DR range only.
    metal = nb.port("globex", "BaremetalInstance", "db-metal", 0)
    dr = nb.external_ip("globex", "db-metal-dr")
    replica = inbound(example, "region-b", dr, TCP.format(5432), src=OFFICE)
    assert delivered(replica, metal)["ip4.dst"] == metal.ip4
    dropped(inbound(example, "region-b", dr, TCP.format(5432)), "ls_out_acl", metal.switch)


def test_an_attachment_is_inbound_only(inbound_only: Fabric) -> None:
    """OSAC: an ExternalIPAttachment lets connections in, and their replies out from the
    external address; without a NATGateway no new connection leaves the network (with
    a private source or any other)."""
    nb, fabric = inbound_only.nb, inbound_only
    launch = nb.port("initech", "ComputeInstance", "launch-1")
    public = nb.external_ip("initech", "launch-web")
    upstream = fabric.upstream["region-a"]
    gw = nb.gateway("initech", "build")

    https = inbound(fabric, "region-a", public, TCP.format(443))
    assert delivered(https, launch)["ip4.dst"] == launch.ip4
    reply = fabric.send(launch, gw.mac, OUTSIDE, "ip.ttl == 64 && tcp && tcp.src == 443 && "
                        "tcp.dst == 40000", ct=("--ct=est,rpl",) * 6)
    delivered(reply, upstream)  # the reply leaves; the router's conntrack translates it back
    # (ovn-trace keeps no connection state, so it shows the step, not the new source)
    assert any(s.table == "lr_out_undnat" and any("ct_dnat" in a for a in s.actions)
               for s in reply.stages), reply

    lab = nb.group("initech", "lab")
    for port in (launch, nb.port("initech", "ComputeInstance", "ci-runner-1")):
        out = fabric.send(port, gw.mac, OUTSIDE, TCP.format(443))
        dropped(out, "ls_in_acl", port.switch, f"inport == @{lab} && ip4 && ct.new")
    # Inside the network nothing changes: DHCP and neighbours still work (another test).


def test_forwarded_ports_reach_their_internal_port_and_nothing_else(example: Fabric) -> None:
    """app-1-public forwards tcp 443 to app-1's 8443 (a load balancer on corp's router):
    443 arrives on 8443, every other port of the address goes nowhere."""
    nb = example.nb
    app1 = nb.port("globex", "ComputeInstance", "app-1")
    public = nb.external_ip("globex", "app-1-public")
    https = inbound(example, "region-b", public, TCP.format(443))
    delivered(https, app1)  # (the trace shows the rewrite as a step, not as fields)
    assert any(s.table == "lr_in_dnat" and f"backends={app1.ip4}:8443" in " ".join(s.actions)
               for s in https.stages), https
    allowed_by(https, "ls_out_acl", "tcp.dst == 8443")  # app's rule: it arrived on 8443
    for port in (8443, 22):
        other = inbound(example, "region-b", public, TCP.format(port))
        assert app1.name not in [name for name, _ in other.outputs], other


def test_unattached_external_ips_reach_nothing(example: Fabric) -> None:
    """web-3-public (target not declared yet) and initech's launch-web are only reserved."""
    nb = example.nb
    upstream = example.upstream["region-a"]
    workload_ports = {p.name for t in ("acme", "globex", "initech")
                      for p in nb.tenant_ports(t)}
    gateway_mac = nb.router_port("Logical_Router_Port/acme/prod/external").mac
    for tenant, name in (("acme", "web-3-public"), ("initech", "launch-web")):
        address = nb.external_ip(tenant, name)
        arp = example.arp(upstream, address)
        assert upstream.name not in arp.ports, f"someone answers for {address}\n{arp}"
        result = example.send(upstream, gateway_mac, address, TCP.format(443))
        assert not set(result.ports) & workload_ports, result
    # Nor does the NAT gateway's address admit new connections from outside.
    result = example.send(upstream, gateway_mac, nb.external_ip("acme", "prod-nat"),
                          TCP.format(443))
    assert result.ports == [], result


# --- 7. spoofing -------------------------------------------------------------------------------


def test_spoofed_sources_are_dropped_by_port_security(example: Fabric) -> None:
    nb = example.nb
    web1, web2 = nb.port("acme", "ComputeInstance", "web-1"), \
        nb.port("acme", "ComputeInstance", "web-2")
    https = TCP.format(443)
    delivered(example.send(web1, web2.mac, web2.ip4, https), web2)  # the honest packet
    for spoof in ({"src": web2.ip4}, {"eth_src": "02:00:00:00:be:ef"},
                  {"src": "10.10.1.250"}, {"src": web2.ip4, "eth_src": web2.mac}):
        result = example.send(web1, web2.mac, web2.ip4, https, **spoof)
        dropped(result, "ls_in_apply_port_sec", web1.switch)
    # ARP may not claim web-2's address either.
    assert web2.ip4 and web1.ip4
    claim = arp_request(web1.name, web1.mac, web2.ip4, web1.ip4)
    result = trace(example.lab, web1.switch, claim, "1", ())
    dropped(result, "ls_in_apply_port_sec", web1.switch)
    # Nor may a packet reach web-1 for an address web-1 does not own.
    owned = {a for p in nb.tenant_ports("acme") for a in (p.ip4, *p.extra)}
    stray = str(ipaddress.ip_address(web1.ip4) + 100)
    assert stray not in owned
    result = example.send(web2, web1.mac, stray, "ip.ttl == 64 && icmp4 && icmp4.type == 8")
    dropped(result, "ls_out_apply_port_sec", web1.switch)


# --- 7b. provider networks --------------------------------------------------------------------

FILER = ("02:00:5e:00:32:0a", "192.168.50.10")  # an NFS filer on the VLAN, unknown to OVN


def test_a_provider_network_reaches_its_vlan_and_keeps_tenants_apart(
        shared_storage: Fabric) -> None:
    fabric, nb = shared_storage, shared_storage.nb
    db = nb.port("globex", "BaremetalInstance", "db-metal", 2)
    nas = nb.port("initech", "ComputeInstance", "nas-client", 1)
    assert db.switch == nas.switch == "unet-pn.storage-b"
    localnet = nb.row("Logical_Switch_Port/None/storage-b/localnet")
    assert (localnet["tag_request"], localnet["options"]) == (
        300, {"network_name": "physnet-storage"})

    # Each tenant reaches the provider's filer: out of the localnet port, onto VLAN 300.
    for port, group in ((db, nb.group("globex", "corp", "database")),
                        (nas, nb.group("initech", "lab-b", "default"))):
        nfs = fabric.send(port, FILER[0], FILER[1], TCP.format(2049))
        delivered(nfs, localnet["name"])
        allowed_by(nfs, "ls_in_acl", f"inport == @{group} && ip4")

    # Neither opens a connection to the other: each one's own groups guard its port.
    dropped(fabric.send(nas, db.mac, db.ip4, TCP.format(5432)), "ls_out_acl", db.switch,
            f"outport == @{nb.group('globex', 'corp')} && ip")
    dropped(fabric.send(db, nas.mac, nas.ip4, TCP.format(22)), "ls_out_acl", nas.switch,
            f"outport == @{nb.group('initech', 'lab-b')} && ip")

    # Nor may one pose as the filer, or as the other tenant.
    for spoof in ({"src": FILER[1]}, {"src": db.ip4}, {"eth_src": FILER[0]}):
        dropped(fabric.send(nas, FILER[0], FILER[1], TCP.format(2049), **spoof),
                "ls_in_apply_port_sec", nas.switch)

    # DHCP: the allocated address, the provider's routes, no default route.
    result = trace(fabric.lab, nas.switch, ip_packet(
        nas, "ff:ff:ff:ff:ff:ff", "255.255.255.255", src="0.0.0.0"),
        "ip.ttl == 64 && udp && udp.src == 68 && udp.dst == 67")
    options = _dhcp_options(result, "put_dhcp_opts")
    assert options["offerip"] == nas.ip4 == "192.168.50.101", result
    assert "router" not in options and options["mtu"] == "9000"
    assert options["classless_static_route"].replace(" ", "") == \
        "{192.168.60.0/24,192.168.50.254}"
    delivered(result, nas)


# --- 8. DHCP -----------------------------------------------------------------------------------


def _dhcp_options(result: Trace, action: str) -> dict[str, str]:
    line = next((x for x in result.minimal if x.strip().startswith(action + "(")), None)
    assert line is not None, f"no {action}\n{result}"
    body = line.strip()[len(action) + 1:].rsplit(");", 1)[0]
    return {k.strip(): v.strip() for k, v in re.findall(r"(\w+) = (\{[^}]*\}|[^,]+)", body)}


def test_dhcp_offers_the_allocated_address(example: Fabric) -> None:
    nb = example.nb
    web_doc = next(d for d in read_docs(example.repo, "tenants/acme/network.yaml")
                   if d["kind"] == "Subnet" and d["metadata"]["name"] == "web")
    db_doc = next(d for d in read_docs(example.repo, "tenants/acme/network.yaml")
                  if d["kind"] == "Subnet" and d["metadata"]["name"] == "db")
    discover = "ip.ttl == 64 && udp && udp.src == 68 && udp.dst == 67"
    for name, subnet, doc in (("web-1", "web", web_doc), ("db-1", "db", db_doc)):
        port = nb.port("acme", "ComputeInstance", name)
        gw = nb.gateway("acme", subnet)
        result = trace(example.lab, port.switch, ip_packet(
            port, "ff:ff:ff:ff:ff:ff", "255.255.255.255", src="0.0.0.0"), discover)
        options = _dhcp_options(result, "put_dhcp_opts")
        assert options["offerip"] == port.ip4, result
        assert options["router"] == options["server_id"] == gw.ip4
        assert options["dns_server"] == "{" + ", ".join(doc["spec"]["dnsServers"]) + "}"
        assert options["mtu"] == str(doc["spec"]["mtu"])
        assert options["netmask"] == str(
            ipaddress.ip_network(doc["spec"]["ipv4Cidr"]).netmask)
        offer = delivered(result, port)
        assert (offer["eth.src"], offer["eth.dst"]) == (gw.mac, port.mac)
        assert (offer["ip4.src"], offer["udp.src"], offer["udp.dst"]) == (gw.ip4, "67", "68")
        assert options["lease_time"] == str(doc["spec"].get("leaseTime", 43200))
        if name == "db-1":  # the extras: the domain and the NTP server
            assert options["domain_name"] == f'"{doc["spec"]["domainName"]}"'
            assert options["ntp_server"] == "{" + ", ".join(doc["spec"]["ntpServers"]) + "}"
        if name == "db-1":  # RFC 3442 routes, with the default route spelled out
            offered = options["classless_static_route"].strip("{}").replace(" ", "")
            routes = [(r["destination"], r["nexthop"]) for r in doc["spec"]["routes"]]
            assert offered == ",".join(f"{d},{h}" for d, h in [*routes, ("0.0.0.0/0", gw.ip4)])

    # The default route on one NIC only: app-1 is primary on app and secondary on data,
    # db-metal the other way round; each learns a router only on its primary subnet.
    for kind, name, index, router in (("ComputeInstance", "app-1", 0, True),
                                      ("ComputeInstance", "app-1", 1, False),
                                      ("BaremetalInstance", "db-metal", 0, True),
                                      ("BaremetalInstance", "db-metal", 1, False)):
        port = nb.port("globex", kind, name, index)
        result = trace(example.lab, port.switch, ip_packet(
            port, "ff:ff:ff:ff:ff:ff", "255.255.255.255", src="0.0.0.0"), discover)
        options = _dhcp_options(result, "put_dhcp_opts")
        assert options["offerip"] == port.ip4, result
        assert ("router" in options) is router, (name, index, options)
        assert "0.0.0.0/0" not in options.get("classless_static_route", ""), options
        delivered(result, port)

    # globex's backup segment has no gateway: DHCP offers an address and no router, and
    # nothing answers for the first host, which a router port would hold.
    backup = nb.port("globex", "ComputeInstance", "backup-1")
    result = trace(example.lab, backup.switch, ip_packet(
        backup, "ff:ff:ff:ff:ff:ff", "255.255.255.255", src="0.0.0.0"), discover)
    options = _dhcp_options(result, "put_dhcp_opts")
    assert options["offerip"] == backup.ip4 and "router" not in options, options
    assert options["server_id"] == "10.10.3.1" and backup.ip4 != "10.10.3.1"
    assert "Logical_Router_Port/globex/backup" not in nb.rows
    unanswered = example.arp(backup, "10.10.3.1")
    assert not any(f.get("arp.op") == "2" for _, f in unanswered.outputs), unanswered

    # The fixed MAC of initech's runner gets its lease too.
    runner = nb.port("initech", "ComputeInstance", "ci-runner-1")
    assert runner.mac == "02:00:00:00:10:01"
    result = trace(example.lab, runner.switch, ip_packet(
        runner, "ff:ff:ff:ff:ff:ff", "255.255.255.255", src="0.0.0.0"), discover)
    assert _dhcp_options(result, "put_dhcp_opts")["offerip"] == runner.ip4
    delivered(result, runner)

    # DHCPv6 on the dual-stack web subnet hands out web-1's IPv6 address.
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    link_local = str(ipaddress.IPv6Address("fe80::" + _eui64(web1.mac)))
    solicit = trace(example.lab, web1.switch, ip_packet(
        web1, "33:33:00:01:00:02", "ff02::1:2", src=link_local),
        "ip.ttl == 1 && udp && udp.src == 546 && udp.dst == 547")
    options = _dhcp_options(solicit, "put_dhcpv6_opts")
    assert options["ia_addr"] == web1.ip6
    assert options["server_id"] == nb.gateway("acme", "web").mac
    delivered(solicit, web1)


def _eui64(mac: str) -> str:
    octets = [int(o, 16) for o in mac.split(":")]
    octets[0] ^= 0x02
    eui = [*octets[:3], 0xFF, 0xFE, *octets[3:]]
    return ":".join(f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2))


# --- 9. address families ----------------------------------------------------------------------

OUTSIDE6 = "2001:db8:ff::10"  # documentation space beyond every pool: "the Internet", IPv6
PUBLIC6 = "2001:db8:100::/64"


def _edit(repo: Path, rel: str, kind: str, name: str, spec: dict[str, Any]) -> None:
    """Update one document's spec (the file loses its comments)."""
    docs = read_docs(repo, rel)
    doc = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    doc["spec"].update(spec)
    (repo / rel).write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _lab6(repo: Path, *subnets: dict[str, Any]) -> None:
    """initech's dual-stack lab6 in region-a, with `subnets` (name and spec fields)."""
    append_docs(repo, "tenants/initech/network.yaml", manifest("VirtualNetwork", "lab6", {
        "region": "region-a", "ipv4Cidr": "192.168.16.0/20", "ipv6Cidr": "fd20:1::/48"}),
        *(manifest("Subnet", s["name"], {"virtualNetwork": "lab6", **s["spec"]})
          for s in subnets))


HOSTS6 = {"name": "hosts6", "spec": {"ipv4Cidr": "192.168.17.0/24",
                                     "ipv6Cidr": "fd20:1:0:1::/64"}}


@pytest.fixture(scope="module")
def ipv6_external(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example plus region-a's IPv6 pool public6-a. acme's web-1 gets an IPv6
    ExternalIP beside its IPv4 one (prod's NATGateway is IPv4; web now admits HTTPS and
    sends in IPv6 too); initech's dual-stack lab6 gets a NATGateway whose ExternalIP is
    IPv6, and h6-1 in its hosts6, whose IPv6 ExternalIP h6-1-web forwards 443 to 8443."""
    root = tmp_path_factory.mktemp("trace-ipv6-external")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    append_docs(repo, "provider/pools.yaml",
            manifest("ExternalIPPool", "public6-a", {"region": "region-a", "cidr": PUBLIC6}))
    web = next(d for d in read_docs(repo, "tenants/acme/security-groups.yaml")
               if d["metadata"]["name"] == "web")["spec"]
    _edit(repo, "tenants/acme/security-groups.yaml", "SecurityGroup", "web", {
        "ingress": [*web["ingress"], {"protocol": "tcp", "portFrom": 443, "portTo": 443,
                                      "cidr": "::/0"}],
        "egress": [*web["egress"], {"protocol": "all", "cidr": "::/0"}]})
    append_docs(repo, "tenants/acme/external.yaml",
            manifest("ExternalIP", "web-1-public6", {"pool": "public6-a"}),
            manifest("ExternalIPAttachment", "web-1-public6", {
                "externalIP": "web-1-public6",
                "target": {"kind": "ComputeInstance", "name": "web-1"}}))
    _lab6(repo, HOSTS6)
    append_docs(repo, "tenants/initech/security-groups.yaml", manifest("SecurityGroup", "web6", {
        "virtualNetwork": "lab6",
        "ingress": [{"protocol": "tcp", "portFrom": 8443, "portTo": 8443, "cidr": "::/0"}],
        "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"},
                   {"protocol": "all", "cidr": "::/0"}]}))
    append_docs(repo, "tenants/initech/compute.yaml", manifest("ComputeInstance", "h6-1", {
        "networkAttachments": [{"subnet": "hosts6", "securityGroups": ["web6"]}]}))
    append_docs(repo, "tenants/initech/external.yaml",
            manifest("ExternalIP", "lab6-nat", {"pool": "public6-a"}),
            manifest("NATGateway", "lab6", {"virtualNetwork": "lab6",
                                             "externalIP": "lab6-nat"}),
            manifest("ExternalIP", "h6-1-web", {"pool": "public6-a"}),
            manifest("ExternalIPAttachment", "h6-1-web", {
                "externalIP": "h6-1-web", "target": {"kind": "ComputeInstance", "name": "h6-1"},
                "ports": [{"protocol": "tcp", "externalPort": 443, "internalPort": 8443}]}))
    with applied(root, repo) as fabric:
        yield fabric


def test_an_ipv6_external_ip_reaches_its_targets_ipv6_address(ipv6_external: Fabric) -> None:
    """v6→v6: the IPv6 ExternalIP goes to web-1's IPv6 address (it went to its IPv4 one:
    NAT64 nobody asked for), replies leave from it, and the IPv4 one is unchanged. prod's
    NATGateway is IPv4, so no new IPv6 connection leaves prod (inbound only, as in IPv4)."""
    fabric, nb = ipv6_external, ipv6_external.nb
    web1 = nb.port("acme", "ComputeInstance", "web-1")
    public6 = nb.external_ip("acme", "web-1-public6")
    web, prod = nb.group("acme", "prod", "web"), nb.group("acme", "prod")
    upstream = fabric.upstream["region-a"]
    gw = nb.gateway("acme", "web")
    assert web1.ip6 and ipaddress.ip_address(public6) in ipaddress.ip_network(PUBLIC6)

    https = inbound(fabric, "region-a", public6, TCP.format(443), src=OUTSIDE6)
    packet = delivered(https, web1)
    assert (packet["ip6.src"], packet["ip6.dst"]) == (OUTSIDE6, web1.ip6)
    assert packet["eth.dst"] == web1.mac
    allowed_by(https, "ls_out_acl", f"outport == @{web} && ip6", "tcp.dst == 443")
    dropped(inbound(fabric, "region-a", public6, TCP.format(22), src=OUTSIDE6),
            "ls_out_acl", web1.switch, f"outport == @{prod} && ip")

    reply = fabric.send(web1, gw.mac, OUTSIDE6, "ip.ttl == 64 && tcp && tcp.src == 443 && "
                        "tcp.dst == 40000", ct=("--ct=est,rpl",) * 6)
    assert delivered(reply, upstream)["eth.dst"] == upstream.mac  # via the pool's gateway
    assert any(s.table == "lr_out_undnat" and any("ct_dnat" in a for a in s.actions)
               for s in reply.stages), reply

    v4 = inbound(fabric, "region-a", nb.external_ip("acme", "web-1-public"), TCP.format(443))
    assert delivered(v4, web1)["ip4.dst"] == web1.ip4

    out = fabric.send(web1, gw.mac, OUTSIDE6, TCP.format(443))
    dropped(out, "ls_in_acl", web1.switch, f"inport == @{prod} && ip6 && ct.new")
    snat = fabric.send(web1, gw.mac, OUTSIDE, TCP.format(443))  # IPv4 still leaves
    assert delivered(snat, upstream)["ip4.src"] == nb.external_ip("acme", "prod-nat")
    # The router's IPv6 address of its own is recorded: planning again changes nothing.
    assert_noop(fabric.repo, fabric.repo)


def test_a_nat_gateways_ipv6_address_translates_the_networks_ipv6(
        ipv6_external: Fabric) -> None:
    """lab6's NATGateway has an IPv6 ExternalIP: h6-1's IPv6 leaves from it (v6→v6), and
    its IPv4 has no way out (the router has no IPv4 address outside)."""
    fabric, nb = ipv6_external, ipv6_external.nb
    h6 = nb.port("initech", "ComputeInstance", "h6-1")
    gw = nb.gateway("initech", "hosts6")
    upstream = fabric.upstream["region-a"]
    nat6 = nb.external_ip("initech", "lab6-nat")
    outside = nb.router_port("Logical_Router_Port/initech/lab6/external")
    assert (outside.ip4, outside.ip6) == (None, nat6)

    out = fabric.send(h6, gw.mac, OUTSIDE6, TCP.format(443))
    packet = delivered(out, upstream)
    assert (packet["ip6.src"], packet["ip6.dst"]) == (nat6, OUTSIDE6)
    assert (packet["eth.src"], packet["eth.dst"]) == (outside.mac, upstream.mac)
    assert any(s.table == "lr_out_snat" for s in out.stages), out

    dropped(fabric.send(h6, gw.mac, OUTSIDE, TCP.format(443)), "lr_in_ip_routing",
            nb.row("Logical_Router/initech/lab6")["name"])
    # Nor does the NAT gateway's address admit new connections from outside.
    inbound = fabric.send(upstream, outside.mac, nat6, TCP.format(443), src=OUTSIDE6)
    assert inbound.ports == [], inbound


def test_an_ipv6_address_forwards_its_ports_to_the_targets_ipv6_address(
        ipv6_external: Fabric) -> None:
    """h6-1-web forwards tcp 443 of an IPv6 address to h6-1's IPv6 address, port 8443 (a
    load balancer on lab6's router); every other port of the address goes nowhere."""
    fabric, nb = ipv6_external, ipv6_external.nb
    h6 = nb.port("initech", "ComputeInstance", "h6-1")
    public6 = nb.external_ip("initech", "h6-1-web")
    https = inbound(fabric, "region-a", public6, TCP.format(443), src=OUTSIDE6)
    delivered(https, h6)
    assert any(s.table == "lr_in_dnat" and f"backends=[{h6.ip6}]:8443" in " ".join(s.actions)
               for s in https.stages), https
    allowed_by(https, "ls_out_acl", "ip6", "tcp.dst == 8443")
    for port in (8443, 22):
        other = inbound(fabric, "region-a", public6, TCP.format(port), src=OUTSIDE6)
        assert h6.name not in [name for name, _ in other.outputs], other


def test_an_ipv6_external_ip_for_a_target_without_ipv6_is_refused(
        ipv6_external: Fabric, tmp_path: Path) -> None:
    """initech's ci-runner-1 has no IPv6 address (lab is IPv4 only): an IPv6 ExternalIP
    cannot reach it, and validation says so, naming it."""
    repo = tmp_path / "repo"
    shutil.copytree(ipv6_external.repo, repo)
    append_docs(repo, "tenants/initech/external.yaml",
            manifest("ExternalIP", "runner-public6", {"pool": "public6-a"}),
            manifest("ExternalIPAttachment", "runner-public6", {
                "externalIP": "runner-public6",
                "target": {"kind": "ComputeInstance", "name": "ci-runner-1"}}))
    run = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "validate", str(repo),
                          "--format", "json"], capture_output=True, text=True, cwd=repo,
                         timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [d for d in json.loads(run.stdout)["diagnostics"] if d["severity"] == "error"]
    assert [(d["code"], d["file"], d["message"]) for d in errors] == [(
        "ATTACHMENT_TARGET_UNREACHABLE", "tenants/initech/external.yaml",
        "ComputeInstance/initech/ci-runner-1 cannot be reached at IPv6 ExternalIP "
        "'runner-public6': its subnet 'build' has no IPv6 CIDR")]


SHARED = ("02:00:5e:00:46:0a", "192.168.70.10", "fd00:70::10")  # a provider's host on shared-a


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example plus initech's dual-stack lab6 in region-a: hosts6, and quiet, whose
    IPv4 has no gateway (`gateway: null`) while its IPv6 keeps one; and the provider's
    dual-stack shared-a, which initech's nas-4 (lab: IPv4 only) and h6-1 (lab6: dual
    stack) attach to beside their own networks."""
    root = tmp_path_factory.mktemp("trace-families")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    append_docs(repo, "provider/networks.yaml", manifest("ProviderNetwork", "shared-a", {
        "region": "region-a", "segmentId": 1990, "tenants": ["initech"],
        "ipv4Cidr": "192.168.70.0/24", "ipv6Cidr": "fd00:70::/64",
        "allocationRanges": [{"start": "192.168.70.100", "end": "192.168.70.199"},
                             {"start": "fd00:70::100", "end": "fd00:70::1ff"}]}))
    _lab6(repo, HOSTS6, {"name": "quiet", "spec": {
        "ipv4Cidr": "192.168.18.0/24", "ipv6Cidr": "fd20:1:0:2::/64", "gateway": None}})
    append_docs(repo, "tenants/initech/compute.yaml", manifest("ComputeInstance", "h6-1", {
        "networkAttachments": [{"subnet": "hosts6", "primary": True},
                               {"providerNetwork": "shared-a"}]}),
        manifest("ComputeInstance", "q-1", {"networkAttachments": [{"subnet": "quiet"}]}),
        manifest("ComputeInstance", "nas-4", {
            "networkAttachments": [{"subnet": "build", "primary": True},
                                   {"providerNetwork": "shared-a"}]}))
    with applied(root, repo) as fabric:
        yield fabric


def test_gateway_null_isolates_its_own_family_only(families: Fabric) -> None:
    """quiet has no IPv4 gateway but an IPv6 one: its router port carries IPv6 only, so
    IPv4 sent to that port's MAC goes nowhere (it was routed into lab6's other subnets),
    while IPv6 is routed as on any subnet."""
    fabric, nb = families, families.nb
    q1 = nb.port("initech", "ComputeInstance", "q-1")
    h6 = nb.port("initech", "ComputeInstance", "h6-1")
    router_port = nb.gateway("initech", "quiet")
    assert (router_port.ip4, q1.ip4 is not None, q1.ip6 is not None) == (None, True, True)
    router = nb.row("Logical_Router/initech/lab6")["name"]
    isolated = nb.row("Port_Group/initech/lab6/quiet/router")["name"]

    for rest in (TCP.format(22), "ip.ttl == 64 && icmp4 && icmp4.type == 8"):
        v4 = fabric.send(q1, router_port.mac, h6.ip4, rest)
        assert v4.ports == [] and router not in v4.datapaths, f"IPv4 was routed\n{v4}"
        dropped(v4, "ls_out_acl", q1.switch, f"outport == @{isolated} && ip4")
    v6 = fabric.send(q1, router_port.mac, h6.ip6, TCP.format(22))
    packet = delivered(v6, h6)
    assert (packet["ip6.src"], packet["ip6.dst"]) == (q1.ip6, h6.ip6)
    assert router in v6.datapaths

    # What the router would send into quiet in IPv4 goes nowhere either.
    inject = {"inport": f'"{nb.row("Logical_Switch_Port/initech/quiet/router")["name"]}"',
              "eth.src": router_port.mac, "eth.dst": q1.mac, "ip4.src": h6.ip4,
              "ip4.dst": q1.ip4}
    dropped(trace(fabric.lab, q1.switch, inject, TCP.format(22)), "ls_in_acl", q1.switch,
            f"inport == @{isolated} && ip4")

    # Nor does hosts6 reach quiet's IPv4: the router has no route there.
    back = fabric.send(h6, nb.gateway("initech", "hosts6").mac, q1.ip4, TCP.format(22))
    dropped(back, "lr_in_ip_routing", router)


def test_a_port_on_a_provider_network_carries_its_own_networks_families(
        families: Fabric) -> None:
    """shared-a is dual stack. nas-4's network (lab) is IPv4 only, and so is its port on
    shared-a: it has no IPv6 address there for its groups to drop. h6-1's network is dual
    stack: its port has both, and the implicit default group lets it reach the provider's
    hosts in both families."""
    fabric, nb = families, families.nb
    nas = nb.port("initech", "ComputeInstance", "nas-4", 1)
    h6 = nb.port("initech", "ComputeInstance", "h6-1", 1)
    localnet = nb.row("Logical_Switch_Port/None/shared-a/localnet")["name"]
    assert nas.switch == h6.switch == "unet-pn.shared-a"
    assert (nas.ip4 is not None, nas.ip6) == (True, None)
    row = nb.row("Logical_Switch_Port/initech/ComputeInstance/nas-4/1")
    assert as_list(row["port_security"]) == as_list(row["addresses"])
    assert row["dhcpv6_options"] == [], "no DHCPv6 for an address it does not have"

    lab, lab6 = nb.group("initech", "lab", "default"), nb.group("initech", "lab6", "default")
    nfs = fabric.send(nas, SHARED[0], SHARED[1], TCP.format(2049))
    delivered(nfs, localnet)
    allowed_by(nfs, "ls_in_acl", f"inport == @{lab} && ip4")

    assert h6.ip4 and h6.ip6 and ipaddress.ip_address(h6.ip6) in \
        ipaddress.ip_network("fd00:70::/64")
    for dst in SHARED[1:]:
        out = fabric.send(h6, SHARED[0], dst, TCP.format(2049))
        delivered(out, localnet)
        allowed_by(out, "ls_in_acl", f"inport == @{lab6} && ip{6 if ':' in dst else 4}")
