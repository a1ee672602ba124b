"""Provider networks on hosting clusters (issue 30, item 4). A ProviderNetwork whose class
has a k8sManager is, besides the fabric's localnet switch, an OVN-Kubernetes Localnet CUDN on
its VLAN on every hosting cluster of that manager, for the namespaces of the tenants it lists.
VMs there attach to it as fabric workloads do: addresses from unet (the one authority,
recorded on the fabric's Address_Sets), its `tenants` enforced (the CUDN's namespaces, and
PROVIDER_NETWORK_NOT_ALLOWED), their groups as MultiNetworkPolicies on the cluster.

The example's services-a (region-a, class standard-a) is one: acme's web-k1 on hosting-a1
has a NIC on it. The fabric side is traced in test_cluster_attachments.py; the rendered
objects are checked against the upstream CRDs here and in test_k8s_crds.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from unet.managers.kubernetes.codec import to_body
from unet.reconciler.desired import render_desired
from unet.reconciler.diff import Action, diff
from unet.reconciler.objects import observed_allocations

from .support import crds
from .support.ovnlab import OvnLab
from .support.ovnrun import apply, row_named, unet
from .test_plan_props import EXAMPLE_FILES, Files, validate_memory

NETWORKS = "provider/networks.yaml"
COMPUTE = "tenants/acme/compute.yaml"
CUDN = "ClusterUserDefinedNetwork"
CLUSTERS = ("hosting-a1", "hosting-a2")


def _objects(files: Files) -> dict[str, Any]:
    head = validate_memory(files)
    assert head.ok, [d.message for d in head.diagnostics if d.is_error]
    return {o.key: o for o in render_desired(head, {}).objects}


def _errors(files: Files) -> set[tuple[str, str, str]]:
    return {(d.code, d.file or "", d.path or "") for d in validate_memory(files).diagnostics
            if d.is_error}


def _services(files: Files) -> dict[str, Any]:
    return next(d for d in files[NETWORKS] if d["metadata"]["name"] == "services-a")


def _web_k1(files: Files) -> dict[str, Any]:
    return next(d for d in files[COMPUTE] if d["metadata"]["name"] == "web-k1")


def test_a_provider_network_is_a_localnet_on_its_vlan_on_every_hosting_cluster() -> None:
    objects = _objects(EXAMPLE_FILES)
    spec = _services(EXAMPLE_FILES)["spec"]
    for cluster in CLUSTERS:
        cudn = objects[f"{cluster}/{CUDN}/unet-pn.services-a"]
        assert cudn.owner == "ProviderNetwork/services-a"
        network = cudn.fields["spec"]["network"]
        assert network == {"topology": "Localnet", "localnet": {
            "role": "Secondary", "physicalNetworkName": "physnet-tenant", "mtu": 1500,
            "ipam": {"mode": "Disabled"},
            "vlan": {"mode": "Access", "access": {"id": spec["segmentId"]}}}}
        assert cudn.fields["spec"]["namespaceSelector"] == {"matchExpressions": [
            {"key": "network.osac.io/tenant", "operator": "In", "values": ["acme"]},
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["acme"]}]}
        assert crds.validate_object(to_body(cudn, "example", "kubernetes")) == []
    # The fabric's switch is on the same VLAN and physical network.
    localnet = objects["Logical_Switch_Port/None/services-a/localnet"]
    assert localnet.fields["tag_request"] == spec["segmentId"]
    assert localnet.fields["options"]["network_name"] == "physnet-tenant"


def test_a_fabric_only_provider_network_is_on_no_cluster() -> None:
    objects = _objects(EXAMPLE_FILES)
    assert not any("storage-b" in key for key in objects if key.startswith(CLUSTERS))


def test_the_hosted_vm_gets_unets_address_and_its_groups_on_the_cluster() -> None:
    objects = _objects(EXAMPLE_FILES)
    recorded = objects["Address_Set/acme/ComputeInstance/web-k1/1/ip4"]
    [address] = recorded.fields["addresses"]
    assert recorded.fields["name"] == "unet_hosted.acme.web_k1.1_ip4"
    assert 100 <= int(address.rsplit(".", 1)[1]) <= 199, "inside services-a's allocationRanges"
    assert "Address_Set/acme/ComputeInstance/web-k1/1/ip6" not in objects, "services-a is v4"
    assert "Logical_Switch_Port/acme/ComputeInstance/web-k1/1" not in objects

    # Isolation in the tenant's namespace on every cluster; web's rules for web-k1 on its own.
    for cluster in CLUSTERS:
        isolation = objects[f"{cluster}/MultiNetworkPolicy/acme/unet-pn.services-a"]
        assert isolation.fields["spec"] == {"podSelector": {},
                                            "policyTypes": ["Ingress", "Egress"]}
        assert isolation.fields["metadata"]["annotations"] == {
            "k8s.v1.cni.cncf.io/policy-for": "acme/unet-pn.services-a"}
    assert "hosting-a2/MultiNetworkPolicy/acme/unet-pn.services-a.prod.web" not in objects
    web = objects["hosting-a1/MultiNetworkPolicy/acme/unet-pn.services-a.prod.web"]
    assert web.owner == "SecurityGroup/acme/web"
    assert web.fields["spec"]["podSelector"] == {"matchExpressions": [
        {"key": "network.osac.io/instance", "operator": "In", "values": ["web-k1"]}]}
    on_subnet = objects["hosting-a1/MultiNetworkPolicy/acme/unet.web.web"]
    assert web.fields["spec"]["ingress"] == on_subnet.fields["spec"]["ingress"]
    for policy in (isolation, web):
        assert crds.validate_object(to_body(policy, "example", "kubernetes")) == []

    # k1-nodes' rules from `web` admit web-k1's address on services-a, on every cluster's
    # policies as on the fabric (the hosted VM's Address_Set).
    files = copy.deepcopy(EXAMPLE_FILES)
    nodes = next(d for d in files["tenants/acme/cluster-k1.yaml"]
                 if d["kind"] == "SecurityGroup")
    nodes["spec"]["ingress"].append({"protocol": "tcp", "portFrom": 9100, "portTo": 9100,
                                     "securityGroup": "web"})
    web_k1 = _web_k1(files)
    web_k1["spec"]["networkAttachments"][0]["securityGroups"] = ["k1-nodes"]
    objects = _objects(files)
    policy = objects["hosting-a1/MultiNetworkPolicy/acme/unet.web.k1-nodes"]
    metrics = next(r for r in policy.fields["spec"]["ingress"]
                   if r.get("ports") == [{"protocol": "TCP", "port": 9100}])
    assert {"ipBlock": {"cidr": f"{address}/32"}} in metrics["from"]


def test_its_tenants_change_in_place_and_its_mtu_replaces_the_cudn() -> None:
    """The CUDN's spec.network is immutable in the API server (as a subnet's)."""
    before = {o.uid: o for o in _objects(EXAMPLE_FILES).values()}
    allocated = observed_allocations(before.values())
    key = f"kubernetes:hosting-a1/{CUDN}/unet-pn.services-a"
    for field, value, action in (("tenants", ["acme", "initech"], Action.UPDATE),
                                 ("mtu", 9000, Action.REPLACE)):
        files = copy.deepcopy(EXAMPLE_FILES)
        _services(files)["spec"][field] = value
        head = validate_memory(files)
        after = {o.uid: o for o in render_desired(head, allocated).objects}
        changes = {c.uid: c for c in diff(after, before)}
        assert changes[key].action is action, field


def test_a_subnet_of_the_provider_networks_name_is_another_segment() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    files["tenants/acme/network.yaml"].append({
        "apiVersion": "network.osac.io/v1alpha1", "kind": "Subnet",
        "metadata": {"name": "services-a"},
        "spec": {"virtualNetwork": "prod", "ipv4Cidr": "10.10.20.0/24"}})
    files[COMPUTE].append({
        "apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
        "metadata": {"name": "svc-k1"},
        "spec": {"hostingCluster": "hosting-a1", "networkAttachments": [
            {"subnet": "services-a", "securityGroups": ["db"]}]}})
    objects = _objects(files)
    policies = {k.rsplit("/", 1)[1] for k in objects
                if k.startswith("hosting-a1/MultiNetworkPolicy/acme/")}
    assert {"unet.services-a", "unet.services-a.db", "unet-pn.services-a",
            "unet-pn.services-a.prod.web"} <= policies
    assert "unet-pn.services-a.prod.db" not in policies, "svc-k1 is not on the provider's"
    assert "unet.services-a.web" not in policies, "nor web-k1 on the subnet"


def test_the_binding_names_the_provider_networks_cudn() -> None:
    head = validate_memory(EXAMPLE_FILES)
    desired = render_desired(head, {})
    configmap = next(o for o in desired.objects
                     if o.key == "hosting-a1/ConfigMap/acme/unet-bindings.kubernetes")
    binding = json.loads(configmap.fields["data"]["vm.web-k1.json"])
    services = binding["attachments"][1]
    assert services["providerNetwork"] == "services-a" and services["primary"] is False
    assert services["segmentId"] == 1950 and services["ipv4"]["gateway"] is None
    assert services["dnsServers"] == ["192.168.80.10"]
    [element] = services["clusters"]
    assert element["network"] == "unet-pn.services-a"
    assert element["networkSelectionElement"] == {
        "name": "unet-pn.services-a", "namespace": "acme", "mac": services["mac"],
        "ips": [f"{services['ipv4']['address']}/24"]}


def test_the_tenants_list_is_enforced_on_the_clusters_too() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    _services(files)["spec"]["tenants"] = ["acme", "initech"]
    objects = _objects(files)
    selector = objects[f"hosting-a1/{CUDN}/unet-pn.services-a"].fields["spec"][
        "namespaceSelector"]["matchExpressions"]
    assert [e["values"] for e in selector] == [["acme", "initech"], ["acme", "initech"]]
    assert "hosting-a2/MultiNetworkPolicy/initech/unet-pn.services-a" in objects, \
        "isolated in every namespace the network reaches"

    # A tenant not listed: its VM may not attach, and its namespace gets no network.
    _services(files)["spec"]["tenants"] = ["initech"]
    assert ("PROVIDER_NETWORK_NOT_ALLOWED", COMPUTE, "/spec/networkAttachments/1/providerNetwork") \
        in _errors(files)
    _web_k1(files)["spec"]["networkAttachments"].pop()
    files["tenants/acme/cluster-k1.yaml"][0]["spec"]["networkAttachments"].pop()
    objects = _objects(files)
    selector = objects[f"hosting-a1/{CUDN}/unet-pn.services-a"].fields["spec"][
        "namespaceSelector"]["matchExpressions"]
    assert [e["values"] for e in selector] == [["initech"], ["initech"]]
    assert not any(k.startswith("hosting-a1/MultiNetworkPolicy/acme/unet-pn.") for k in objects)

    # Nobody: no network on the clusters at all (a selector of nobody is no selector).
    _services(files)["spec"]["tenants"] = []
    assert not any("services-a" in k for k in _objects(files) if k.startswith(CLUSTERS))


def test_a_provider_network_without_the_vms_k8s_manager_is_refused() -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    files["provider/classes.yaml"].append({
        "apiVersion": "network.osac.io/v1alpha1", "kind": "NetworkClass",
        "metadata": {"name": "fabric-a"},
        "spec": {"region": "region-a", "fabricManager": "ovn",
                 "segmentRange": {"start": 1000, "end": 1999}}})
    _services(files)["spec"]["networkClass"] = "fabric-a"
    errors = _errors(files)
    assert errors == {("PROVIDER_NETWORK_NOT_BRIDGED", COMPUTE,
                       "/spec/networkAttachments/1/providerNetwork")}, \
        "the Cluster k1, on the fabric, may attach: only the hosted VM cannot"
    [diagnostic] = [d for d in validate_memory(files).diagnostics if d.is_error]
    assert "'services-a' does not reach hosting cluster 'hosting-a1'" in diagnostic.message
    assert "NetworkClass 'fabric-a' has no k8sManager" in diagnostic.message
    assert diagnostic.line is not None

    _web_k1(files)["spec"].pop("hostingCluster")
    assert _errors(files) == set(), "the same VM on the fabric may"

    # A VM whose own class has no k8sManager: its hostingCluster is the one mistake.
    _web_k1(files)["spec"]["hostingCluster"] = "hosting-a1"
    files["tenants/acme/network.yaml"][0]["spec"]["networkClass"] = "fabric-a"
    errors = {code for code, _file, _path in _errors(files)}
    assert errors == {"HOSTING_CLUSTER_UNKNOWN"}, errors


def test_show_bindings_reads_the_provider_address_from_the_live_fabric(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    live = unet(tmp_path, "show", "bindings", str(repo), "--manager", "ovn", "--tenant",
                "acme", "--format", "json")
    assert live.returncode == 0, live.stderr
    vm = next(w for w in json.loads(live.stdout)["workloads"] if w["name"] == "web-k1")
    services = vm["attachments"][1]
    recorded = row_named(lab.nb_remote, "Address_Set", "unet_hosted.acme.web_k1.1_ip4")
    assert [services["ipv4"]["address"]] == list(recorded["addresses"])
    assert services["knownAfterApply"] == []
    assert services["clusters"][0]["networkSelectionElement"]["ips"] == [
        f"{services['ipv4']['address']}/24"]
