"""VMs on hosting clusters as first-class fabric: one address authority, security groups on
every path, bindings people and VM templates can read (docs/kubernetes.md).

- The address authority: on random repos, the addresses each allocator of a bridged segment
  can hand out (unet, and each hosting cluster's IPAM as its rendered CUDN configures it)
  are pairwise disjoint, and every workload, wherever it runs, has addresses of its own.
- The rendered objects: a hosted VM has no fabric port but an Address_Set that records its
  allocations and that the fabric's rules use; on its cluster, MultiNetworkPolicies carry
  its groups' rules with remote groups as their members' addresses.
- `unet show bindings` against a real Northbound after `unet apply`, and offline.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from pathlib import Path
from typing import Any

import netaddr
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from unet.reconciler.allocate import ip_of_port
from unet.reconciler.desired import render_desired
from unet.reconciler.errors import UnetError
from unet.reconciler.objects import BackendObject

from .support.ovnlab import OvnLab
from .support.ovnrun import apply, row_named, unet
from .test_plan_golden import validated
from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

WEB_K1 = "unet_hosted.acme.web_k1.0"


def _objects(files: Files | None = None) -> list[BackendObject]:
    from .conftest import EXAMPLE

    head = validated(EXAMPLE) if files is None else validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    return render_desired(head, {}).objects


def _by_key(objects: list[BackendObject]) -> dict[str, BackendObject]:
    return {o.key: o for o in objects}


# --- the example: what is rendered ----------------------------------------------------------


def test_a_hosted_vm_has_no_fabric_port_but_an_address_set_holding_its_allocations() -> None:
    objects = _objects()
    ports = {o.fields["name"] for o in objects if o.table == "Logical_Switch_Port"}
    assert "unet.acme.vm.web-k1.0" not in ports and "unet.acme.vm.web-1.0" in ports
    sets = {o.fields["name"]: o for o in objects if o.table == "Address_Set"}
    v4, v6 = sets[f"{WEB_K1}_ip4"], sets[f"{WEB_K1}_ip6"]
    address = v4.fields["addresses"][0]
    assert ipaddress.ip_address(address) in ipaddress.ip_network("10.10.1.0/24")
    assert ipaddress.ip_address(v6.fields["addresses"][0]) in \
        ipaddress.ip_network("fd10:aaaa:0:1::/64")
    recorded = {k.split(":", 2)[2]: v for k, v in v4.meta.items() if k.startswith("unet:alloc:")}
    assert recorded == {"ipv4/acme/ComputeInstance/web-k1/0": address,
                        "mac/acme/ComputeInstance/web-k1/0": recorded[
                            "mac/acme/ComputeInstance/web-k1/0"]}
    fabric = {o.fields["addresses"][0].split()[1] for o in objects
              if o.table == "Logical_Switch_Port" and o.fields["type"] == ""}
    assert address not in fabric, "one allocator: the hosted VM's address is its own"


def test_the_fabric_rules_of_a_remote_group_reach_its_hosted_members() -> None:
    matches = [o.fields["match"] for o in _objects() if o.table == "ACL"
               and o.parent and o.parent[0] == "Port_Group/acme/prod/db"]
    # web-k1's NIC on the provider's services-a is a member too, as a fabric port there is
    assert "outport == @unet.acme.prod.db && ip4 && ip4.src == {$unet.acme.prod.web_ip4," \
           f"${WEB_K1}_ip4,$unet_hosted.acme.web_k1.1_ip4}} && tcp.dst == 5432" in matches
    assert "outport == @unet.acme.prod.db && ip6 && ip6.src == {$unet.acme.prod.web_ip6," \
           f"${WEB_K1}_ip6}} && tcp.dst == 5432" in matches


def test_the_cluster_allocates_no_address_and_selects_only_the_tenant_namespace() -> None:
    cudns = [o for o in _objects() if o.table == "ClusterUserDefinedNetwork"
             and o.owner.startswith("Subnet/")]  # a provider network's: its own test file
    assert cudns
    for cudn in cudns:
        localnet = cudn.fields["spec"]["network"]["localnet"]
        assert localnet["ipam"] == {"mode": "Disabled"}
        assert "subnets" not in localnet and "excludeSubnets" not in localnet
        tenant = cudn.fields["metadata"]["name"].split(".")[1]
        assert cudn.fields["spec"]["namespaceSelector"] == {"matchLabels": {
            "network.osac.io/tenant": tenant, "kubernetes.io/metadata.name": tenant}}


def test_policies_give_hosted_vms_the_fabric_semantics() -> None:
    objects = _by_key(_objects())
    isolate = objects["hosting-a1/MultiNetworkPolicy/acme/unet.web"].fields
    assert isolate["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/policy-for": "acme/unet.acme.web"}
    assert isolate["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert "hosting-a2/MultiNetworkPolicy/acme/unet.web" in objects, "every cluster isolates"
    assert "hosting-a2/MultiNetworkPolicy/acme/unet.web.web" not in objects, "no VM there"
    web = objects["hosting-a1/MultiNetworkPolicy/acme/unet.web.web"]
    assert web.owner == "SecurityGroup/acme/web"
    spec = web.fields["spec"]
    assert spec["podSelector"] == {"matchExpressions": [
        {"key": "network.osac.io/instance", "operator": "In", "values": ["web-k1"]}]}
    assert spec["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]},
        {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 80}]},
        {"from": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],
         "ports": [{"protocol": "TCP", "port": 22}]},
    ], "the ICMP rule is left out (POLICY_RULE_NOT_REALISED)"
    assert spec["egress"] == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]


def test_remote_groups_are_their_members_addresses_wherever_they_run() -> None:
    """db-1 moves to hosting-a2: its policy lets in port 5432 from every member of web (on
    the fabric and on hosting-a1), each address as a /32 or /128, and nothing else."""
    files = copy.deepcopy(EXAMPLE_FILES)
    db1 = next(d for d in files["tenants/acme/compute.yaml"] if d["metadata"]["name"] == "db-1")
    db1["spec"]["hostingCluster"] = "hosting-a2"
    objects = _objects(files)
    values = {}
    for obj in objects:
        for key, value in obj.meta.items():
            values[key.removeprefix("unet:alloc:")] = value
    web = [values[ip_of_port(f"acme/ComputeInstance/{name}/0", version)]
           for name in ("web-1", "web-2", "web-k1") for version in (4, 6)]
    web.append(values[ip_of_port("acme/ComputeInstance/web-k1/1", 4)])  # on services-a
    policy = _by_key(objects)["hosting-a2/MultiNetworkPolicy/acme/unet.db.db"].fields["spec"]
    peers = [p["ipBlock"]["cidr"] for p in policy["ingress"][0]["from"]]
    assert sorted(peers) == sorted(str(netaddr.IPNetwork(a).cidr) for a in web)
    assert policy["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 5432}]
    assert len(policy["ingress"]) == 1


def test_a_remote_group_without_members_allows_nobody() -> None:
    """An empty peer list would let every peer in: the rule is left out instead."""
    files = copy.deepcopy(EXAMPLE_FILES)
    groups = files["tenants/acme/security-groups.yaml"]
    groups.append({"apiVersion": "network.osac.io/v1alpha1", "kind": "SecurityGroup",
                   "metadata": {"name": "nobody"}, "spec": {"virtualNetwork": "prod"}})
    web = next(d for d in groups if d["metadata"]["name"] == "web")
    web["spec"]["ingress"] = [{"protocol": "tcp", "portFrom": 9, "portTo": 9,
                               "securityGroup": "nobody"}]
    spec = _by_key(_objects(files))["hosting-a1/MultiNetworkPolicy/acme/unet.web.web"] \
        .fields["spec"]
    assert "ingress" not in spec


# --- the address authority, on random repos -------------------------------------------------

PROVIDER = [
    {"apiVersion": "network.osac.io/v1alpha1", "kind": "NetworkManager",
     "metadata": {"name": "ovn"},
     "spec": {"role": "fabric", "plugin": "ovn", "regions": ["r"]}},
    {"apiVersion": "network.osac.io/v1alpha1", "kind": "NetworkManager",
     "metadata": {"name": "kubernetes"},
     "spec": {"role": "k8s", "plugin": "kubernetes", "regions": ["r"], "config": {
         "clusters": [{"name": "c1", "context": "c1"}, {"name": "c2", "context": "c2"}]}}},
    {"apiVersion": "network.osac.io/v1alpha1", "kind": "NetworkClass",
     "metadata": {"name": "standard"},
     "spec": {"region": "r", "default": True, "fabricManager": "ovn",
              "k8sManager": "kubernetes", "vipPrefixLength": 29,
              "segmentRange": {"start": 100, "end": 199}}},
    {"apiVersion": "network.osac.io/v1alpha1", "kind": "Tenant", "metadata": {"name": "t"},
     "spec": {"regions": ["r"]}},
]


@st.composite
def bridged_repos(draw: st.DrawFn) -> tuple[Files, netaddr.IPNetwork]:
    prefix = draw(st.integers(24, 27))
    net = netaddr.IPNetwork(f"10.20.0.0/{prefix}")
    hosts = list(net.iter_hosts())
    excluded = draw(st.lists(st.sampled_from(hosts[1:-9]), max_size=4, unique=True))
    workloads = []
    for index in range(draw(st.integers(1, 10))):
        attachment: dict[str, Any] = {"subnet": "s"}
        if draw(st.booleans()) and draw(st.booleans()):
            attachment["ipAddress"] = str(draw(st.sampled_from(hosts[1:-9])))
        spec: dict[str, Any] = {"networkAttachments": [attachment]}
        cluster = draw(st.sampled_from([None, "c1", "c2"]))
        if cluster is not None:
            spec["hostingCluster"] = cluster
        workloads.append({"apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
                          "metadata": {"name": f"vm-{index}"}, "spec": spec})
    subnet: dict[str, Any] = {"virtualNetwork": "n", "ipv4Cidr": str(net)}
    if excluded:
        subnet["excludeAddresses"] = [str(a) for a in excluded]
    files: Files = {
        "unet.yaml": [{"apiVersion": "network.osac.io/v1alpha1", "kind": "RepositoryConfig",
                       "metadata": {"name": "p"},
                       "spec": {"installation": "prop", "prune": True}}],
        "provider/base.yaml": PROVIDER,
        "tenants/t/net.yaml": [
            {"apiVersion": "network.osac.io/v1alpha1", "kind": "VirtualNetwork",
             "metadata": {"name": "n"}, "spec": {"region": "r", "ipv4Cidr": "10.20.0.0/16"}},
            {"apiVersion": "network.osac.io/v1alpha1", "kind": "Subnet",
             "metadata": {"name": "s"}, "spec": subnet},
            *workloads],
    }
    return files, net


def _cluster_ipam(cudn: BackendObject) -> netaddr.IPSet:
    """What OVN-Kubernetes' IPAM can hand out on a network, as its CUDN configures it."""
    localnet = cudn.fields["spec"]["network"]["localnet"]
    if localnet.get("ipam", {}).get("mode") == "Disabled":
        return netaddr.IPSet()
    return netaddr.IPSet(localnet.get("subnets", [])) - netaddr.IPSet(
        localnet.get("excludeSubnets", []))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bridged_repos())
def test_every_allocator_of_a_segment_hands_out_addresses_no_other_can(
        repo: tuple[Files, netaddr.IPNetwork]) -> None:
    files, net = repo
    head = validate_memory(files)
    assume(head.ok)  # e.g. two fixed addresses drawn alike: ADDRESS_CONFLICT, tested elsewhere
    desired = render_desired(head, {})
    assert head.context is not None
    space = head.context.subnets[("t", "s")][4]
    unet_can = netaddr.IPSet()
    for first, last in space.ranges:
        unet_can.add(netaddr.IPRange(first, last))
    unet_can -= netaddr.IPSet(netaddr.IPAddress(r, 4) for r in space.reserved)
    if space.vip_block is not None:  # Cluster VIPs: also unet's
        unet_can.add(netaddr.IPRange(*space.vip_block))
    allocators = {"unet": unet_can}
    for cudn in (o for o in desired.objects if o.table == "ClusterUserDefinedNetwork"):
        allocators[cudn.key.split("/", 1)[0]] = _cluster_ipam(cudn)
    for pool in (o for o in desired.objects if o.table == "IPAddressPool"):
        assert pool.fields["spec"]["autoAssign"] is False, "MetalLB hands out nothing itself"
    names = sorted(allocators)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            assert not allocators[first] & allocators[second], (first, second)

    given_out = [a.value for key, a in desired.allocations.values.items()
                 if key.startswith("ipv4/")]
    assert len(given_out) == len(set(given_out)) == sum(
        1 for docs in files.values() for d in docs if d["kind"] == "ComputeInstance")
    assert all(netaddr.IPAddress(a) in net for a in given_out)
    hosted = {o.fields["name"]: o.fields["addresses"][0] for o in desired.objects
              if o.table == "Address_Set" and o.fields["name"].startswith("unet_hosted.")}
    for doc in files["tenants/t/net.yaml"]:
        if doc["kind"] == "ComputeInstance" and "hostingCluster" in doc["spec"]:
            name = doc["metadata"]["name"].replace("-", "_")
            assert hosted[f"unet_hosted.t.{name}.0_ip4"] in given_out


# --- bindings -------------------------------------------------------------------------------


def test_show_bindings_reads_the_allocations_from_the_live_fabric(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    offline = unet(tmp_path, "show", "bindings", str(repo), "--offline", "--tenant", "acme",
                   "--format", "json")
    assert offline.returncode == 0, offline.stderr
    vm = next(w for w in json.loads(offline.stdout)["workloads"] if w["name"] == "web-k1")
    assert vm["attachments"][0]["ipv4"]["address"] is None
    assert "ipv4.address" in vm["attachments"][0]["knownAfterApply"]
    text = unet(tmp_path, "show", "bindings", str(repo), "--offline", "--tenant", "acme").stdout
    assert "IPv4 (known after apply)" in text

    assert apply(tmp_path, repo).returncode == 0
    live = unet(tmp_path, "show", "bindings", str(repo), "--manager", "ovn", "--format", "json")
    assert live.returncode == 0, live.stderr
    document = json.loads(live.stdout)
    assert document["format_version"] == "1.0"
    workloads = {(w["tenant"], w["name"]): w for w in document["workloads"]}
    hosted = workloads[("acme", "web-k1")]
    assert hosted["hostingCluster"] == "hosting-a1"
    binding = hosted["attachments"][0]
    recorded = row_named(lab.nb_remote, "Address_Set", f"{WEB_K1}_ip4")["addresses"]
    assert [binding["ipv4"]["address"]] == list(recorded)
    assert binding["ipv4"]["gateway"] == "10.10.1.1" and binding["ipv4"]["prefixLength"] == 24
    assert binding["mtu"] == 1500 and binding["dnsServers"] == ["192.0.2.53", "192.0.2.54"]
    assert binding["knownAfterApply"] == []
    localnet = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.web.localnet")
    assert binding["segmentId"] == localnet["tag_request"], "one segment, read from the fabric"
    assert binding["clusters"] == [{
        "cluster": "hosting-a1", "namespace": "acme", "network": "unet.acme.web",
        "networkSelectionElement": {
            "name": "unet.acme.web", "namespace": "acme", "mac": binding["mac"],
            "ips": [f"{binding['ipv4']['address']}/24", f"{binding['ipv6']['address']}/64"]},
        "podLabels": {"network.osac.io/instance": "web-k1"}}]
    web1 = workloads[("acme", "web-1")]["attachments"][0]
    port = row_named(lab.nb_remote, "Logical_Switch_Port", "unet.acme.vm.web-1.0")
    assert port["addresses"][0].split()[:2] == [web1["mac"], web1["ipv4"]["address"]]
    assert workloads[("acme", "web-1")]["externalIPs"][0]["address"].startswith("203.0.113.")
    cluster = workloads[("acme", "k1")]
    assert cluster["apiVip"] and cluster["ingressVip"] and cluster["knownAfterApply"] == []

    assert unet(tmp_path, "show", "bindings", str(repo), "--tenant", "nobody").returncode == 1


def test_rules_a_cluster_cannot_express_are_left_out_and_said() -> None:
    """A port range (no `endPort` in the served v1beta1) is not widened to one port or to
    all: it is left out, with POLICY_RULE_NOT_REALISED, as ICMP is."""
    files = copy.deepcopy(EXAMPLE_FILES)
    web = next(d for d in files["tenants/acme/security-groups.yaml"]
               if d["metadata"]["name"] == "web")
    web["spec"]["ingress"].append({"protocol": "udp", "portFrom": 8000, "portTo": 8010,
                                   "cidr": "10.0.0.0/8"})
    head = validate_memory(files)
    warned = [d.message for d in head.diagnostics if d.code == "POLICY_RULE_NOT_REALISED"]
    assert len(warned) == 2 and any("not a range" in m for m in warned) \
        and any("not icmp" in m for m in warned)
    spec = _by_key(render_desired(head, {}).objects)[
        "hosting-a1/MultiNetworkPolicy/acme/unet.web.web"].fields["spec"]
    assert all(p.get("protocol") == "TCP" for r in spec["ingress"] for p in r["ports"])


def test_bindings_too_large_for_a_configmap_are_a_clear_error() -> None:
    """The API server refuses a ConfigMap over 1 MiB: the plan says so first, by name."""
    files = copy.deepcopy(EXAMPLE_FILES)
    web = next(d for d in files["tenants/acme/network.yaml"] if d["metadata"]["name"] == "web")
    web["spec"]["routes"] = [{"destination": f"172.{16 + i // 256}.{i % 256}.0/24",
                              "nexthop": "10.10.1.5"} for i in range(8000)]
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    with pytest.raises(UnetError, match=r"the bindings of tenant acme would take [\d,]+ bytes "
                                        r"in the ConfigMap acme/unet-bindings.kubernetes"):
        render_desired(head, {})


def test_the_default_group_of_another_network_is_not_this_networks() -> None:
    """A tenant's declared `default` belongs to one network; on another the implicit
    default applies, on the clusters as on the fabric (no rule of the other network)."""
    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/initech/network.yaml"] += [
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "VirtualNetwork",
         "metadata": {"name": "lab2"}, "spec": {"region": "region-b", "ipv4Cidr": "10.0.0.0/8"}},
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "SecurityGroup",
         "metadata": {"name": "default"},
         "spec": {"virtualNetwork": "lab2",
                  "ingress": [{"protocol": "all", "cidr": "10.0.0.0/8"}]}}]
    files["tenants/initech/compute.yaml"].append(
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
         "metadata": {"name": "vm-k"},
         "spec": {"hostingCluster": "hosting-a1", "networkAttachments": [{"subnet": "build"}]}})
    objects = _by_key(_objects(files))
    policy = objects["hosting-a1/MultiNetworkPolicy/initech/unet.build.default"]
    assert policy.owner == "VirtualNetwork/initech/lab"
    peers = [p["ipBlock"]["cidr"] for p in policy.fields["spec"]["ingress"][0]["from"]]
    assert "10.0.0.0/8" not in peers and all(p.endswith("/32") for p in peers)
    assert policy.fields["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]


def test_without_a_nat_gateway_hosted_vms_open_nothing_outside_either() -> None:
    """initech's lab has an attachment and no NATGateway: as the fabric's drop does for
    its ports, the cluster's policies let initech's hosted VM open connections only
    inside the network (replies to inbound ones flow, NetworkPolicy being stateful)."""
    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/initech/compute.yaml"].append(
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
         "metadata": {"name": "vm-k"},
         "spec": {"hostingCluster": "hosting-a1", "networkAttachments": [{"subnet": "build"}]}})
    files["tenants/initech/external.yaml"].append(
        {"apiVersion": "network.osac.io/v1alpha1", "kind": "ExternalIPAttachment",
         "metadata": {"name": "launch-web"},
         "spec": {"externalIP": "launch-web", "target": {"kind": "ComputeInstance",
                                                           "name": "vm-k"}}})
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    lab = str(head.context.networks[("initech", "lab")][4])
    policy = _by_key(render_desired(head, {}).objects)[
        "hosting-a1/MultiNetworkPolicy/initech/unet.build.default"]
    assert policy.fields["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": lab}}]}]
