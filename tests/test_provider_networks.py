"""Provider networks shared with tenants (issue 15, item 8): DANM's ClusterNetwork and the
NetConfig networks of openstack-k8s-operators, as a provider kind that tenants' workloads
attach to by reference. The example repo's storage-b (provider/networks.yaml) is one:
globex's database server has its storage NIC on it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from unet.reconciler.desired import render_desired
from unet.reconciler.planner import changed_tenants, plan_between
from unet.reconciler.sources import DEFAULT_MAX_FILE_BYTES, SourceFile
from unet.reconciler.validate import ParsedFiles, validate_files

from .support.ovnlab import OvnLab
from .support.ovnrun import apply, dump, plan_json, row_named
from .test_plan_golden import append_doc
from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

API = "network.osac.io/v1alpha1"
NETWORKS = "provider/networks.yaml"
BAREMETAL = "tenants/globex/baremetal.yaml"


def _doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _storage(files: Files) -> dict[str, Any]:
    return next(d for d in files[NETWORKS] if d["metadata"]["name"] == "storage-b")


def _db_metal(files: Files) -> dict[str, Any]:
    return next(d for d in files[BAREMETAL] if d["metadata"]["name"] == "db-metal")


def _rows(files: Files) -> dict[str, Any]:
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    return {o.key: o for o in render_desired(head, {}).objects}


def _errors(files: Files) -> set[tuple[str, str, str]]:
    return {(d.code, d.file or "", d.path or "") for d in validate_memory(files).diagnostics
            if d.is_error}


def _initech_in_region_b(files: Files, attachment: dict[str, Any]) -> None:
    """initech builds a network in region-b and a VM with a second NIC as given."""
    files["tenants/initech/network-b.yaml"] = [
        _doc("VirtualNetwork", "lab-b", {"region": "region-b", "ipv4Cidr": "172.20.0.0/16"}),
        _doc("Subnet", "hosts", {"virtualNetwork": "lab-b", "ipv4Cidr": "172.20.1.0/24"})]
    files["tenants/initech/nas-client.yaml"] = [_doc("ComputeInstance", "nas-client", {
        "networkAttachments": [{"subnet": "hosts", "primary": True}, attachment]})]


def test_a_provider_network_is_the_providers_vlan_and_tenants_attach_by_reference() -> None:
    rows = _rows(EXAMPLE_FILES)
    storage = _storage(EXAMPLE_FILES)["spec"]
    switch = rows["Logical_Switch/None/storage-b"]
    assert (switch.owner, switch.fields["name"]) == ("ProviderNetwork/storage-b",
                                                     "unet-pn.storage-b")
    localnet = rows["Logical_Switch_Port/None/storage-b/localnet"]
    assert localnet.fields["type"] == "localnet"
    assert localnet.fields["tag_request"] == storage["segmentId"] == 300, "the adopted VLAN"
    assert localnet.fields["options"] == {"network_name": storage["physicalNetwork"]}
    assert not any(o.table == "Logical_Router_Port" and "storage-b" in o.key
                   for o in rows.values()), "unet runs no router on it"

    # db-metal's storage NIC: an address from the provider's range, on the provider's
    # switch, anti-spoofed, and in its own network's groups.
    port = rows["Logical_Switch_Port/globex/BaremetalInstance/db-metal/2"]
    assert port.parent == ("Logical_Switch/None/storage-b", "ports")
    _mac, address = port.fields["addresses"][0].split()
    assert address == "192.168.50.100", "the first address of allocationRanges"
    assert port.fields["port_security"] == port.fields["addresses"]
    for group in ("Port_Group/globex/corp", "Port_Group/globex/corp/database"):
        assert port.key in rows[group].refs["ports"], group

    # DHCP offers its routes and no default route: the primary NIC keeps that.
    [dhcp] = port.refs["dhcpv4_options"]
    options = rows[dhcp].fields["options"]
    assert "router" not in options
    assert options["classless_static_route"] == "{192.168.60.0/24,192.168.50.254}"
    assert options["server_id"] == "192.168.50.1" and options["mtu"] == "9000"


def test_the_segment_id_is_checked_against_the_class_and_every_other_network() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    _storage(files)["spec"]["segmentId"] = 4000  # standard-b's range is 100-3999
    assert ("SEGMENT_OUT_OF_RANGE", NETWORKS, "/spec/segmentId") in _errors(files)

    files = copy.deepcopy(EXAMPLE_FILES)
    files[NETWORKS].append(copy.deepcopy(_storage(files)))
    files[NETWORKS][-1]["metadata"]["name"] = "storage-b2"
    assert ("SEGMENT_ID_CONFLICT", NETWORKS, "/spec/segmentId") in _errors(files)
    files[NETWORKS][-1]["spec"]["physicalNetwork"] = "physnet-other"
    assert validate_memory(files).ok, "the same VLAN id on another physical network"


def test_tenant_subnets_never_get_a_provider_networks_segment_id() -> None:
    """standard-a hands VLANs 1000-1999 to acme's and initech's subnets; a provider
    network on 1000 takes that id out of their pool."""
    def segments(files: Files) -> dict[str, str]:
        head = validate_memory(files)
        assert head.ok, [d.message for d in head.diagnostics if d.is_error]
        return {o.key: o.fields["tag_request"] for o in render_desired(head, {}).objects
                if o.key.endswith("/localnet") and o.fields["tag_request"] is not None}

    before = segments(EXAMPLE_FILES)
    assert 1000 in before.values()
    files = copy.deepcopy(EXAMPLE_FILES)
    files[NETWORKS].append(_doc("ProviderNetwork", "mgmt-a", {
        "region": "region-a", "segmentId": 1000, "ipv4Cidr": "192.168.70.0/24",
        "tenants": []}))
    after = segments(files)
    assert after["Logical_Switch_Port/None/mgmt-a/localnet"] == 1000
    tenant_ids = [v for k, v in after.items() if "/None/" not in k]
    assert 1000 not in tenant_ids and len(set(tenant_ids)) == len(tenant_ids)


def test_who_may_attach_and_how() -> None:
    def with_attachment(attachment: dict[str, Any], **spec: Any) -> set[tuple[str, str, str]]:
        files = copy.deepcopy(EXAMPLE_FILES)
        _initech_in_region_b(files, attachment)
        vm = files["tenants/initech/nas-client.yaml"][0]
        vm["spec"].update(spec)
        return _errors(files)

    vm_file, path = "tenants/initech/nas-client.yaml", "/spec/networkAttachments/1"
    assert with_attachment({"providerNetwork": "storage-b"}) == {
        ("PROVIDER_NETWORK_NOT_ALLOWED", vm_file, f"{path}/providerNetwork")}
    assert with_attachment({"providerNetwork": "storage-c"}) == {
        ("REF_NOT_FOUND", vm_file, f"{path}/providerNetwork")}
    assert with_attachment({"subnet": "hosts", "providerNetwork": "storage-b"}) == {
        ("PROVIDER_NETWORK_ATTACHMENT_INVALID", vm_file, path)}
    assert with_attachment({}) == {("PROVIDER_NETWORK_ATTACHMENT_INVALID", vm_file, path)}

    files = copy.deepcopy(EXAMPLE_FILES)
    _storage(files)["spec"]["tenants"] = ["globex", "initech"]
    _initech_in_region_b(files, {"providerNetwork": "storage-b"})
    assert validate_memory(files).ok, "allowed by the provider"
    vm = files["tenants/initech/nas-client.yaml"][0]["spec"]["networkAttachments"]
    for change, why in (
            ({0: {"primary": False}, 1: {"primary": True}}, "as the primary attachment"),
            ({1: {"ipAddress": "192.168.50.10"}}, "a filer's address, outside the ranges"),
            ({1: {"macAddress": "02:00:00:00:50:10"}}, "a fixed MAC")):
        changed = copy.deepcopy(files)
        attachments = changed["tenants/initech/nas-client.yaml"][0]["spec"][
            "networkAttachments"]
        for index, fields in change.items():
            attachments[index].update(fields)
        errors = _errors(changed)
        assert errors and all(p.startswith(path) for _c, _f, p in errors), (why, errors)
        assert {c for c, _f, _p in errors} <= {"PROVIDER_NETWORK_ATTACHMENT_INVALID",
                                               "ADDRESS_INVALID"}, (why, errors)
    assert vm[1] == {"providerNetwork": "storage-b"}

    # Another region's network, or one that overlaps the workload's own network.
    moved = copy.deepcopy(files)
    moved["tenants/initech/network-b.yaml"][0]["spec"]["ipv4Cidr"] = "192.168.0.0/16"
    moved["tenants/initech/network-b.yaml"][1]["spec"]["ipv4Cidr"] = "192.168.1.0/24"
    assert ("PROVIDER_NETWORK_ATTACHMENT_INVALID", vm_file, f"{path}/providerNetwork") in \
        _errors(moved)
    moved = copy.deepcopy(files)
    moved["tenants/initech/network-b.yaml"][0]["spec"]["region"] = "region-a"
    assert ("PROVIDER_NETWORK_ATTACHMENT_INVALID", vm_file, f"{path}/providerNetwork") in \
        _errors(moved)


def test_clusters_and_vms_on_hosting_clusters_attach_where_the_network_is_bridged() -> None:
    """Since issue 30 (tests/test_hosted_provider_networks.py, test_cluster_attachments.py):
    a Cluster attaches on the fabric; a hosted VM where the network's class has its
    k8sManager, which bridges the network to its hosting clusters."""
    files = copy.deepcopy(EXAMPLE_FILES)
    files[NETWORKS].append(_doc("ProviderNetwork", "mgmt-a", {
        "region": "region-a", "segmentId": 1500, "ipv4Cidr": "192.168.70.0/24",
        "tenants": ["acme"]}))
    compute = "tenants/acme/compute.yaml"
    web_k1 = next(d for d in files[compute] if d["metadata"]["name"] == "web-k1")
    assert web_k1["spec"]["hostingCluster"]
    web_k1["spec"]["networkAttachments"].append({"providerNetwork": "mgmt-a"})
    k1 = next(d for d in files["tenants/acme/cluster-k1.yaml"] if d["kind"] == "Cluster")
    k1["spec"]["networkAttachments"].append({"providerNetwork": "mgmt-a"})
    assert _errors(files) == set()


def test_addresses_on_a_shared_network_are_unique_across_tenants() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    _storage(files)["spec"]["tenants"] = ["globex", "initech"]
    _initech_in_region_b(files, {"providerNetwork": "storage-b"})
    rows = _rows(files)
    addresses = [rows[k].fields["addresses"][0].split()[1] for k in (
        "Logical_Switch_Port/globex/BaremetalInstance/db-metal/2",
        "Logical_Switch_Port/initech/ComputeInstance/nas-client/1")]
    assert addresses == ["192.168.50.100", "192.168.50.101"]

    # Fixed: the same address claimed by both tenants is one conflict, at validation.
    for docs, name, index in ((files[BAREMETAL], "db-metal", 2),
                              (files["tenants/initech/nas-client.yaml"], "nas-client", 1)):
        vm = next(d for d in docs if d["metadata"]["name"] == name)
        vm["spec"]["networkAttachments"][index]["ipAddress"] = "192.168.50.150"
    # Said on both claims: each tenant's own review (and pre-commit) sees it.
    assert _errors(files) == {
        ("ADDRESS_CONFLICT", BAREMETAL, "/spec/networkAttachments/2/ipAddress"),
        ("ADDRESS_CONFLICT", "tenants/initech/nas-client.yaml",
         "/spec/networkAttachments/1/ipAddress")}


def test_a_network_without_a_nat_gateway_still_reaches_its_provider_networks() -> None:
    """Attachments are inbound only: without a NATGateway, new connections may not leave
    the network, but a provider network the workloads attach to is not 'outside'."""
    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/globex/external.yaml"] = [d for d in files["tenants/globex/external.yaml"]
                                             if d["kind"] != "NATGateway"]
    [no_egress] = [o for o in _rows(files).values() if o.table == "ACL"
                   and o.parent == ("Port_Group/globex/corp", "acls")
                   and o.fields["priority"] == 1003]
    inside = no_egress.fields["match"].split("ip4.dst != ")[1]
    assert "192.168.50.0/24" in inside, "the provider network itself"
    assert "192.168.60.0/24" in inside, "and what its routes reach through its own router"


def test_a_live_tenant_segment_is_never_taken_by_a_provider_network(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """An id a tenant Subnet holds on the fabric stays its own: a ProviderNetwork that
    claims it is ADDRESS_CONFLICT naming the holder, and nothing changes."""
    assert apply(tmp_path, repo).returncode == 0
    localnet = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.web.localnet")
    held = int(localnet["tag_request"])
    append_doc(repo, NETWORKS, _doc("ProviderNetwork", "mgmt-a", {
        "region": "region-a", "segmentId": held, "ipv4Cidr": "192.168.70.0/24",
        "tenants": []}))
    before = dump(lab.nb_remote)
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    [conflict] = [d for d in document["diagnostics"] if d["code"] == "ADDRESS_CONFLICT"]
    assert conflict["message"] == (f"segment {held} is held by Subnet/acme/web; an address "
                                   "in use never moves to another owner")
    assert (conflict["file"], conflict["path"]) == (NETWORKS, "/spec/segmentId")
    assert apply(tmp_path, repo).returncode == 1
    assert dump(lab.nb_remote) == before


def test_the_providers_own_hosts_are_never_handed_to_tenants() -> None:
    """Without allocationRanges the whole CIDR is the tenants' to draw from, except what
    unet knows to be the provider's: the first host, DNS and NTP servers, next hops.
    (globex's corp gets IPv6 too: a port on a provider network has its network's
    families only.)"""
    files = copy.deepcopy(EXAMPLE_FILES)
    globex = next(d for d in files["provider/tenants/globex.yaml"] if d["kind"] == "Tenant")
    globex["spec"]["allowedCidrs"].append("fd00::/8")
    corp = next(d for d in files["tenants/globex/network.yaml"]
                if d["kind"] == "VirtualNetwork")
    corp["spec"]["ipv6Cidr"] = "fd10:bbbb::/48"
    spec = _storage(files)["spec"]
    del spec["allocationRanges"]
    spec.update(dnsServers=["192.168.50.2"], ntpServers=["192.168.50.3"],
                ipv6Cidr="fd50::/64", dhcp=False)
    rows = _rows(files)
    _mac, ip4, ip6 = rows["Logical_Switch_Port/globex/BaremetalInstance/db-metal/2"].fields[
        "addresses"][0].split()
    assert (ip4, ip6) == ("192.168.50.4", "fd50::2"), "past .1, .2, .3 and ::1"
    for taken in ("192.168.50.1", "192.168.50.2", "192.168.50.3", "192.168.50.254"):
        claimed = copy.deepcopy(files)
        _db_metal(claimed)["spec"]["networkAttachments"][2]["ipAddress"] = taken
        assert _errors(claimed) == {("ADDRESS_INVALID", BAREMETAL,
                                     "/spec/networkAttachments/2/ipAddress")}, taken


def test_provider_networks_keep_apart_from_pools_and_from_each_other() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    files[NETWORKS].append(_doc("ProviderNetwork", "public-like", {
        "region": "region-b", "segmentId": 301, "ipv4Cidr": "198.51.100.0/25",
        "tenants": []}))
    assert ("POOL_OVERLAP", NETWORKS, "/spec/ipv4Cidr") in _errors(files)

    files = copy.deepcopy(EXAMPLE_FILES)
    files[NETWORKS].append(_doc("ProviderNetwork", "storage-wide", {
        "region": "region-b", "segmentId": 302, "ipv4Cidr": "192.168.50.0/23",
        "tenants": ["globex"]}))
    assert validate_memory(files).ok, "overlapping VLANs of the provider are its business"
    _db_metal(files)["spec"]["networkAttachments"].append(
        {"interface": "bmc0", "providerNetwork": "storage-wide"})
    assert _errors(files) == {("PROVIDER_NETWORK_ATTACHMENT_INVALID", BAREMETAL,
                               "/spec/networkAttachments/3/providerNetwork")}


def test_a_pull_requests_plan_sees_other_tenants_addresses_on_a_provider_network() -> None:
    """A PR plan renders only the tenants it touches, unless they attach to a provider
    network: its addresses are shared, so a claim on one another tenant holds is caught
    before the merge, not at the apply."""
    base = copy.deepcopy(EXAMPLE_FILES)
    _storage(base)["spec"]["tenants"] = ["globex", "initech"]
    _initech_in_region_b(base, {"providerNetwork": "storage-b"})
    head = copy.deepcopy(base)
    head["tenants/initech/nas-client.yaml"].append(_doc("ComputeInstance", "nas-2", {
        "networkAttachments": [{"subnet": "hosts", "primary": True},
                               {"providerNetwork": "storage-b",
                                "ipAddress": "192.168.50.100"}]}))  # db-metal's
    parsed = ParsedFiles()  # as `unet plan --base`: unchanged files are shared
    before, after = (_validated(files, parsed) for files in (base, head))
    assert changed_tenants(before, after) is None, "every tenant is planned"
    plan = plan_between(before, after, {})
    [conflict] = [d for d in plan.diagnostics if d.code == "ADDRESS_CONFLICT"]
    assert "held by BaremetalInstance/globex/db-metal" in conflict.message


def _validated(files: Files, parsed: ParsedFiles) -> Any:
    texts = {path: yaml.safe_dump_all(docs, sort_keys=False).encode()
             for path, docs in files.items() if docs}
    return validate_files(iter([SourceFile(path, len(text), lambda text=text: text)
                                for path, text in sorted(texts.items())]),
                          DEFAULT_MAX_FILE_BYTES, parsed)


def test_one_vlan_id_on_two_physical_networks_plans_cleanly_after_apply(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    for name, physnet, cidr in (("dup-a", "physnet-storage", "192.168.70.0/24"),
                                ("dup-b", "physnet-other", "192.168.71.0/24")):
        append_doc(repo, NETWORKS, _doc("ProviderNetwork", name, {
            "region": "region-b", "segmentId": 310, "physicalNetwork": physnet,
            "ipv4Cidr": cidr, "tenants": []}))
    assert apply(tmp_path, repo).returncode == 0
    code, document = plan_json(tmp_path, repo)
    assert code == 0, [d["message"] for d in document["diagnostics"]]
