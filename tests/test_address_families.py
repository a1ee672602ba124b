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

from reconciler.allocate import ip_of_port
from reconciler.objects import Held
from reconciler.pipeline import render_desired

from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

API = "network.osac.io/v1alpha1"


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


def _port_addresses(rows: dict[str, Any], port: str) -> list[str]:
    return rows[f"Logical_Switch_Port/{port}"].fields["addresses"][0].split()[1:]


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
