"""Each address family is its own (issue 26): an IPv6 external address goes to an IPv6
address, a subnet without a gateway in one family is isolated in that family only, a
port on a provider network has the addresses its own network's groups can filter, and
the first host of a subnet without an IPv4 gateway is kept for the DHCP server.

What the rows do on the wire is traced in tests/test_ovn_trace.py; these tests hold what
unet validates, allocates and renders, without a backend.
"""

from __future__ import annotations

import copy
from typing import Any

from unet.reconciler.allocate import ip_of_port
from unet.reconciler.desired import render_desired
from unet.reconciler.objects import Held
from unet.reconciler.planner import plan_between

from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

API = "network.osac.io/v1alpha1"
POOLS = "provider/pools.yaml"
ACME_EXTERNAL = "tenants/acme/external.yaml"
PUBLIC6 = "2001:db8:100::/64"


def _doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _find(files: Files, rel: str, kind: str, name: str) -> dict[str, Any]:
    return next(d for d in files[rel] if d["kind"] == kind and d["metadata"]["name"] == name)


def _errors(files: Files) -> list[tuple[str, str, str]]:
    return [(d.code, d.path or "", d.message) for d in validate_memory(files).diagnostics
            if d.is_error]


def _rows(files: Files, held: dict[str, Held] | None = None) -> dict[str, Any]:
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    return {o.key: o for o in render_desired(head, held or {}).objects}


def _with_public6(files: Files) -> Files:
    """The example plus an IPv6 pool in region-a, beside public-a."""
    out = copy.deepcopy(files)
    out[POOLS].append(_doc("ExternalIPPool", "public6-a",
                           {"region": "region-a", "cidr": PUBLIC6}))
    return out


def _attach(files: Files, rel: str, name: str, pool: str, target: dict[str, str]) -> None:
    files.setdefault(rel, []).extend([
        _doc("ExternalIP", name, {"pool": pool}),
        _doc("ExternalIPAttachment", name, {"externalIP": name, "target": target})])


def _port_addresses(rows: dict[str, Any], port: str) -> list[str]:
    return rows[f"Logical_Switch_Port/{port}"].fields["addresses"][0].split()[1:]


# --- 3. IPv6 external addresses -------------------------------------------------------------


def _ipv6_only_region(files: Files) -> Files:
    """region-c, whose only pool is IPv6, and initech's IPv6-only network there with an
    attached VM and a NATGateway."""
    out = copy.deepcopy(files)
    _find(out, "provider/managers.yaml", "NetworkManager", "ovn")["spec"]["regions"].append(
        "region-c")
    out["provider/classes.yaml"].append(_doc("NetworkClass", "standard-c", {
        "region": "region-c", "default": True, "fabricManager": "ovn"}))
    out[POOLS].append(_doc("ExternalIPPool", "public6-c",
                           {"region": "region-c", "cidr": "2001:db8:300::/64"}))
    _find(out, "provider/tenants/initech.yaml", "Tenant", "initech")["spec"]["regions"].append(
        "region-c")
    out["tenants/initech/edge.yaml"] = [
        _doc("VirtualNetwork", "edge", {"region": "region-c", "ipv6Cidr": "fd30::/48"}),
        _doc("Subnet", "edge-hosts", {"virtualNetwork": "edge",
                                      "ipv6Cidr": "fd30:0:0:1::/64"}),
        _doc("ComputeInstance", "e-1", {"networkAttachments": [{"subnet": "edge-hosts"}]}),
        _doc("ExternalIP", "edge-nat", {"pool": "public6-c"}),
        _doc("NATGateway", "edge", {"virtualNetwork": "edge", "externalIP": "edge-nat"})]
    _attach(out, "tenants/initech/edge.yaml", "e-1-public", "public6-c",
            {"kind": "ComputeInstance", "name": "e-1"})
    return out


def test_a_network_whose_external_addresses_are_all_ipv6_is_planned() -> None:
    """A region whose only pool is IPv6 used to fail every plan (`internal error:
    AddrFormatError`, an IPv4 default route to the IPv6 pool's gateway). Its router gets
    the IPv6 default route, the NATGateway translates the network's IPv6 CIDR, and the
    attached VM's IPv6 address is the DNAT's."""
    files = _ipv6_only_region(EXAMPLE_FILES)
    plan = plan_between(None, validate_memory(files), {})
    assert plan.ok, [d.message for d in plan.diagnostics if d.is_error]
    rows = _rows(files)
    router = rows["Logical_Router_Port/initech/edge/external"].fields["networks"]
    nat_address = rows["Address_Set/initech/eip/edge-nat"].fields["addresses"][0]
    assert router == [f"{nat_address}/64"], "the NATGateway's address, and no IPv4"
    routes = {o.fields["ip_prefix"]: o.fields["nexthop"] for o in rows.values()
              if o.table == "Logical_Router_Static_Route" and "/initech/edge/" in o.key}
    assert routes == {"::/0": "2001:db8:300::1"}, "the pool's gateway, its first host"
    snat = rows["NAT/initech/edge/snat"].fields
    assert (snat["type"], snat["external_ip"], snat["logical_ip"]) == (
        "snat", nat_address, "fd30::/48")
    e1 = _port_addresses(rows, "initech/ComputeInstance/e-1/0")
    dnat = rows["NAT/initech/attachment/e-1-public"].fields
    assert (dnat["type"], dnat["logical_ip"]) == ("dnat", e1[0])
    assert dnat["external_ip"] == rows["Address_Set/initech/eip/e-1-public"].fields[
        "addresses"][0]


def test_an_ipv6_external_ip_goes_to_its_targets_ipv6_address() -> None:
    """An IPv6 ExternalIP attached to web-1 (dual stack) is a v6→v6 DNAT to web-1's IPv6
    address (it was NAT64 to its IPv4 address). prod's NATGateway is IPv4, so its router
    gets an IPv6 address of its own from the IPv6 pool, and the IPv6 default route; new
    IPv6 connections from prod may not take it (inbound only, as in IPv4)."""
    files = _with_public6(EXAMPLE_FILES)
    _attach(files, ACME_EXTERNAL, "web-1-public6", "public6-a",
            {"kind": "ComputeInstance", "name": "web-1"})
    _find(files, "tenants/acme/security-groups.yaml", "SecurityGroup", "web")["spec"][
        "egress"].append({"protocol": "all", "cidr": "::/0"})
    rows = _rows(files)
    web1 = _port_addresses(rows, "acme/ComputeInstance/web-1/0")
    dnat = rows["NAT/acme/attachment/web-1-public6"].fields
    public6 = rows["Address_Set/acme/eip/web-1-public6"].fields["addresses"][0]
    assert (dnat["type"], dnat["external_ip"], dnat["logical_ip"]) == ("dnat", public6,
                                                                      web1[1])
    assert ":" in dnat["logical_ip"]
    v4 = rows["NAT/acme/attachment/web-1-public"].fields
    assert v4["logical_ip"] == web1[0], "the IPv4 attachment is unchanged"

    router = rows["Logical_Router_Port/acme/prod/external"]
    nat = rows["Address_Set/acme/eip/prod-nat"].fields["addresses"][0]
    [v4_network, v6_network] = router.fields["networks"]
    assert v4_network == f"{nat}/24"
    assert v6_network.endswith("/64") and v6_network.split("/")[0] != public6
    assert router.meta["unet:alloc:gateway/acme/prod/ipv6"] == v6_network.split("/")[0]
    routes = {o.fields["ip_prefix"]: o.fields["nexthop"] for o in rows.values()
              if o.table == "Logical_Router_Static_Route" and "/acme/prod/" in o.key}
    assert routes == {"0.0.0.0/0": "203.0.113.1", "::/0": "2001:db8:100::1"}
    assert not any(o.table == "NAT" and o.fields["type"] == "snat"
                   and ":" in o.fields["logical_ip"] for o in rows.values()), \
        "prod's NATGateway translates IPv4 only"
    closed = [o.fields["match"] for o in rows.values()
              if o.table == "ACL" and o.fields["priority"] == 1003]
    assert closed == ["inport == @unet.acme.prod && ip6 && ct.new && ip6.dst != "
                      "{fd10:aaaa::/48, fe80::/10, ff00::/8}"]
    # On the hosting clusters too: web-k1's IPv6 egress is cut to the network's inside.
    policy = rows["hosting-a1/MultiNetworkPolicy/acme/unet.web.web"].fields["spec"]
    assert policy["egress"] == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
                                {"to": [{"ipBlock": {"cidr": "fd10:aaaa::/48"}}]}]


def test_an_external_ip_needs_an_address_of_its_family_on_the_target() -> None:
    """A target without an address of the ExternalIP's family (IPv4-only subnet, an IPv4
    VIP on a dual-stack subnet) is refused, naming it; so is a NATGateway of a family its
    network lacks."""
    files = _with_public6(EXAMPLE_FILES)
    _find(files, "tenants/acme/network.yaml", "Subnet", "nodes")["spec"][
        "ipv6Cidr"] = "fd10:aaaa:0:8::/64"
    _find(files, "tenants/acme/cluster-k1.yaml", "Cluster", "k1")["spec"][
        "apiVip"] = "fd10:aaaa:0:8::10"  # and k1-api is IPv4
    _attach(files, "tenants/initech/external.yaml", "runner-public6", "public6-a",
            {"kind": "ComputeInstance", "name": "ci-runner-1"})
    _attach(files, ACME_EXTERNAL, "k1-ingress6", "public6-a",
            {"kind": "Cluster", "name": "k1", "endpoint": "ingress"})
    files["tenants/initech/external.yaml"] += [
        _doc("ExternalIP", "lab-nat6", {"pool": "public6-a"}),
        _doc("NATGateway", "lab", {"virtualNetwork": "lab", "externalIP": "lab-nat6"})]
    problems = {message: (code, path) for code, path, message in _errors(files)}
    assert problems == {
        "ComputeInstance/initech/ci-runner-1 cannot be reached at IPv6 ExternalIP "
        "'runner-public6': its subnet 'build' has no IPv6 CIDR": (
            "ATTACHMENT_TARGET_UNREACHABLE", "/spec/target/name"),
        "Cluster/acme/k1 cannot be reached at IPv6 ExternalIP 'k1-ingress6': its ingress "
        "VIP is IPv4": ("ATTACHMENT_TARGET_UNREACHABLE", "/spec/target/name"),
        "Cluster/acme/k1 cannot be reached at IPv4 ExternalIP 'k1-api': its api VIP is "
        "IPv6": ("ATTACHMENT_TARGET_UNREACHABLE", "/spec/target/name"),
        "NATGateway 'lab' cannot translate IPv6 ExternalIP 'lab-nat6': VirtualNetwork "
        "'lab' has no IPv6 CIDR": ("NAT_GATEWAY_FAMILY_MISSING", "/spec/externalIP"),
    }


def test_an_ipv6_address_forwards_ports_to_the_targets_ipv6_address() -> None:
    """Port forwarding in IPv6: OVN's load balancer spells an address with a port in
    brackets."""
    files = _with_public6(EXAMPLE_FILES)
    _attach(files, ACME_EXTERNAL, "web-1-public6", "public6-a",
            {"kind": "ComputeInstance", "name": "web-1"})
    _find(files, ACME_EXTERNAL, "ExternalIPAttachment", "web-1-public6")["spec"]["ports"] = [
        {"protocol": "tcp", "externalPort": 443, "internalPort": 8443}]
    rows = _rows(files)
    web1 = _port_addresses(rows, "acme/ComputeInstance/web-1/0")
    public6 = rows["Address_Set/acme/eip/web-1-public6"].fields["addresses"][0]
    balancer = rows["Load_Balancer/acme/attachment/web-1-public6/tcp"].fields
    assert balancer["vips"] == {f"[{public6}]:443": f"[{web1[1]}]:8443"}


# --- 4. a gateway in one family only ----------------------------------------------------------


def test_a_family_without_a_gateway_is_isolated_beside_one_with_a_gateway() -> None:
    """acme's db without an IPv4 gateway keeps its IPv6 one, and the other way round:
    the router port carries the family with a gateway, and the router's switch port
    passes nothing of the other, either way (the trace test shows it on the wire)."""
    for missing, kept, field in ((4, 6, "gateway"), (6, 4, "ipv6Gateway")):
        files = copy.deepcopy(EXAMPLE_FILES)
        _find(files, "tenants/acme/network.yaml", "Subnet", "db")["spec"][field] = None
        rows = _rows(files)
        [network] = rows["Logical_Router_Port/acme/db"].fields["networks"]
        assert (":" in network) == (kept == 6)
        group = rows["Port_Group/acme/prod/db/router"]
        assert (group.owner, group.fields["name"], group.refs["ports"]) == (
            "Subnet/acme/db", "unet.acme.prod.db.router",
            ("Logical_Switch_Port/acme/db/router",))
        assert sorted((o.fields["direction"], o.fields["match"], o.fields["action"])
                      for o in rows.values() if o.parent == (group.key, "acls")) == [
            ("from-lport", f"inport == @unet.acme.prod.db.router && ip{missing}", "drop"),
            ("to-lport", f"outport == @unet.acme.prod.db.router && ip{missing}", "drop")]
    rows = _rows(EXAMPLE_FILES)
    assert not any(o.table == "Port_Group" and o.key.endswith("/router") for o in rows.values())


# --- 5. a provider network's families -------------------------------------------------------


def _dual_stack_storage(files: Files) -> Files:
    out = copy.deepcopy(files)
    _find(out, "provider/networks.yaml", "ProviderNetwork", "storage-b")["spec"][
        "ipv6Cidr"] = "fd00:50::/64"
    return out


def test_a_port_on_a_provider_network_has_only_its_own_networks_families() -> None:
    """globex's corp is IPv4 only, so its groups filter IPv4 only: db-metal's NIC on a
    dual-stack storage-b gets no IPv6 address there (it had one, whose every packet its
    groups dropped), and no DHCPv6."""
    files = _dual_stack_storage(EXAMPLE_FILES)
    rows = _rows(files)
    port = rows["Logical_Switch_Port/globex/BaremetalInstance/db-metal/2"]
    assert _port_addresses(rows, "globex/BaremetalInstance/db-metal/2") == ["192.168.50.100"]
    assert port.fields["port_security"] == port.fields["addresses"]
    assert "dhcpv6_options" not in port.refs
    assert "unet:alloc:ipv6/globex/BaremetalInstance/db-metal/2" not in port.meta
    assert "DHCP_Options/None/storage-b/v6" in rows, "the network still serves IPv6"

    db_metal = _find(files, "tenants/globex/baremetal.yaml", "BaremetalInstance", "db-metal")
    db_metal["spec"]["networkAttachments"][2]["ipv6Address"] = "fd00:50::100"
    assert _errors(files) == [(
        "ADDRESS_INVALID", "/spec/networkAttachments/2/ipv6Address",
        "VirtualNetwork 'corp' has no IPv6 CIDR: the workload gets no IPv6 address on "
        "ProviderNetwork 'storage-b'")]

    del db_metal["spec"]["networkAttachments"][2]["ipv6Address"]
    del _find(files, "provider/networks.yaml", "ProviderNetwork", "storage-b")["spec"][
        "ipv4Cidr"]
    files["provider/networks.yaml"][0]["spec"].pop("allocationRanges")
    files["provider/networks.yaml"][0]["spec"].pop("routes")
    assert _errors(files) == [(
        "PROVIDER_NETWORK_ATTACHMENT_INVALID", "/spec/networkAttachments/2/providerNetwork",
        "ProviderNetwork 'storage-b' has no address family of VirtualNetwork 'corp' (IPv4)")]


# --- 7. the first host of a subnet without an IPv4 gateway ----------------------------------

BACKUP_1 = "globex/ComputeInstance/backup-1/0"


def _backup_without_dhcp(files: Files) -> Files:
    out = copy.deepcopy(files)
    _find(out, "tenants/globex/network.yaml", "Subnet", "backup")["spec"]["dhcp"] = False
    return out


def test_the_first_host_stays_reserved_without_dhcp() -> None:
    """globex's backup has `gateway: null`: its first host is the DHCPv4 server's, with
    DHCP on or off, so that turning DHCP on never finds a workload on it."""
    files = _backup_without_dhcp(EXAMPLE_FILES)
    rows = _rows(files)
    assert "DHCP_Options/globex/backup/v4" not in rows
    assert _port_addresses(rows, BACKUP_1) == ["10.10.3.2"]

    backup1 = _find(files, "tenants/globex/compute.yaml", "ComputeInstance", "backup-1")
    backup1["spec"]["networkAttachments"][0]["ipAddress"] = "10.10.3.1"
    assert _errors(files) == [(
        "ADDRESS_INVALID", "/spec/networkAttachments/0/ipAddress",
        "10.10.3.1 is reserved in subnet 'backup' (network, broadcast, gateway, DHCP server "
        "or excluded)")]


def test_a_port_that_holds_the_first_host_already_keeps_it_until_dhcp_is_turned_on() -> None:
    """Before, without DHCP, the first host went to the first port. Such a port keeps its
    address (an allocation in use never moves); turning DHCP on is then refused until it
    is moved, as any change that makes a held address reserved is."""
    held = {ip_of_port(BACKUP_1, 4): Held("10.10.3.1", "Subnet/globex/backup")}
    files = _backup_without_dhcp(EXAMPLE_FILES)
    assert _port_addresses(_rows(files, held), BACKUP_1) == ["10.10.3.1"]

    desired = render_desired(validate_memory(EXAMPLE_FILES), held)
    [problem] = desired.allocations.problems
    assert (problem.code, problem.message) == (
        "ALLOCATION_IN_USE", "10.10.3.1 is held by ComputeInstance/globex/backup-1, and "
        "subnet Subnet/globex/backup no longer hands it out (reserved: its gateway, an "
        "excluded address, or the VIP block); an allocation in use never moves")
