"""Render subnets of k8s-backed classes into objects for every hosting cluster.

Per subnet and cluster: an OVN-Kubernetes ClusterUserDefinedNetwork (Localnet, Secondary,
IPAM disabled: unet is the only address authority) bridged to the subnet's fabric segment,
selecting the tenant's namespace; MultiNetworkPolicies that give VMs on the cluster the
fabric's security-group semantics; per subnet with a VIP block a MetalLB IPAddressPool and
L2Advertisement. Per tenant and cluster: the ConfigMap `unet-bindings.<manager>`
(bindings.py) that VM templates read their addresses from. Pure; the segment id is the one
allocated for the OVN localnet port (one allocation, read by both managers).

The CUDN's `spec.network` is immutable in the API server (CEL `self == oldSelf`), so
it is tagged with a hash of it as the immutable tag: when it changes, the plan
replaces the object (delete, then create) instead of an update the server would refuse.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import netaddr

from unet.managers.sdk import (
    TAG_ALLOCATION,
    AllocatedValues,
    Allocations,
    BackendObject,
    ClusterManager,
    Exposure,
    Manifest,
    Model,
    UnetError,
    binding_key,
    immutable_values,
    ip_of_port,
    port_key,
    primary_index,
    segment_key,
    segment_of,
    vip_key,
    workload_binding,
)
from unet.managers.sdk import (
    parse_network as network,
)

if TYPE_CHECKING:
    from .config import KubernetesConfig

POLICY_FOR = "k8s.v1.cni.cncf.io/policy-for"  # names the network a policy filters
LABEL_INSTANCE = "network.osac.io/instance"  # the VM's pod carries its ComputeInstance name
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # set by the API server on every namespace


def bindings_configmap(manager: str) -> str:
    """One per manager: two k8s managers may serve one tenant on one cluster."""
    return f"unet-bindings.{manager}"

CONFIGMAP_MAX_BYTES = 1024 * 1024  # what the API server accepts in a ConfigMap's data
_PROTOCOLS = {"tcp": "TCP", "udp": "UDP"}
_WORLD = {4: "0.0.0.0/0", 6: "::/0"}


def unrealisable(rule: Any) -> str | None:
    """Why MultiNetworkPolicy v1beta1 cannot say what a security-group rule says, if it
    cannot: it matches TCP, UDP and SCTP, one port or all (`endPort` is not served)."""
    if rule.protocol not in (*_PROTOCOLS, "all"):
        return f"MultiNetworkPolicy matches TCP, UDP and SCTP only, not {rule.protocol}"
    if rule.port_from is not None and rule.port_from != rule.port_to:
        return "MultiNetworkPolicy v1beta1 matches one port or all, not a range"
    return None


def object_name(tenant: str | None, subnet: str) -> str:
    return f"unet.{tenant}.{subnet}"


def provider_object_name(network: str) -> str:
    """A ProviderNetwork's CUDN, as its OVN switch is named: never a subnet's
    `unet.<tenant>.<subnet>`."""
    return f"unet-pn.{network}"


def render(model: Model, allocations: Allocations, manager: ClusterManager,
           config: KubernetesConfig) -> list[BackendObject]:
    out: list[BackendObject] = []
    bridged: dict[str | None, list[Manifest]] = {}  # tenant → workloads of bridged networks
    for workload in model.workloads:
        vn = model.network_of_workload(workload)
        cls = model.class_of(workload.tenant, vn) if vn is not None else None
        if cls is not None and cls.obj.spec.k8s_manager == manager.manager:
            bridged.setdefault(workload.tenant, []).append(workload)
    hosted = _hosted_groups(model, bridged)
    tenants: set[str | None] = set()
    for subnet in model.kind("Subnet"):
        cls = model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
        if cls is None or cls.obj.spec.k8s_manager != manager.manager:
            continue
        tenants.add(subnet.tenant)
        segment = _Segment(object_name(subnet.tenant, subnet.name), f"unet.{subnet.name}",
                           subnet.ref)
        vn = subnet.obj.spec.virtual_network
        for cluster in config.clusters:
            out.extend(_subnet_objects(model, allocations, manager.manager, config,
                                       cluster.name, subnet))
            policies = _Policies(model, allocations, manager.manager, config, cluster.name,
                                 segment, subnet.tenant, vn, bridged.get(subnet.tenant, []))
            out.append(policies.isolation())
            members = hosted.get((subnet.tenant, (subnet.tenant, subnet.name), cluster.name),
                                 {})
            out.extend(policies.objects({g: vms for (_vn, g), vms in members.items()}))
    for provider in model.kind("ProviderNetwork"):
        cls = model.provider_network_class(provider.name)
        if cls is not None and cls.obj.spec.k8s_manager == manager.manager:
            out.extend(_provider_network_objects(model, allocations, manager.manager, config,
                                                 provider, hosted, bridged))
    for tenant in sorted(tenants, key=str):
        out.extend(_bindings_maps(model, allocations, manager, config, tenant,
                                  bridged.get(tenant, [])))
    return out


#: (tenant, segment, cluster) → (VirtualNetwork, group) → the VMs on that cluster that use
#: the group there (groups are their own network's); a segment is (tenant, subnet) or
#: (None, provider network), as segment_of gives it
HostedGroups = dict[tuple[str | None, tuple[str | None, str], str],
                    dict[tuple[str, str], set[str]]]


def _hosted_groups(model: Model, bridged: dict[str | None, list[Manifest]]) -> HostedGroups:
    out: HostedGroups = {}
    for workloads in bridged.values():
        for vm in workloads:
            cluster, vn = model.hosting_cluster(vm), model.network_of_workload(vm)
            if cluster is None or vn is None:
                continue
            for attachment in vm.obj.spec.network_attachments:
                groups = out.setdefault((vm.tenant, segment_of(vm.tenant, attachment),
                                         cluster), {})
                for group in attachment.security_groups:
                    groups.setdefault((vn, group), set()).add(vm.name)
    return out


def _provider_network_objects(model: Model, allocations: Allocations, manager: str,
                              config: KubernetesConfig, provider: Manifest,
                              hosted: HostedGroups, bridged: dict[str | None, list[Manifest]]
                              ) -> Iterator[BackendObject]:
    """A provider's VLAN on every hosting cluster, for the namespaces of the tenants that
    may use it (its `tenants` that have networks here): a Localnet CUDN on its segment and,
    per such namespace, the isolation and the groups of the VMs there that attach to it."""
    allowed = sorted(t for t in _bridged_tenants(model.full, manager)
                     if t in provider.obj.spec.tenants)
    if not allowed:
        return  # a selector of nobody: nothing to bridge
    name = provider_object_name(provider.name)
    spec = provider.obj.spec
    localnet = {"role": "Secondary", "physicalNetworkName": spec.physical_network,
                "mtu": spec.mtu, "ipam": {"mode": "Disabled"},
                "vlan": {"mode": "Access", "access": {"id": spec.segment_id}}}
    body = {"topology": "Localnet", "localnet": localnet}
    selector = {"matchExpressions": [
        {"key": config.namespace_label, "operator": "In", "values": allowed},
        {"key": NAMESPACE_NAME, "operator": "In",
         "values": sorted({config.namespace_of(t) for t in allowed})}]}
    segment = _Segment(name, name, provider.ref)
    for cluster in config.clusters:
        yield BackendObject(manager, "ClusterUserDefinedNetwork",
                            f"{cluster.name}/ClusterUserDefinedNetwork/{name}", provider.ref, {
            "apiVersion": "k8s.ovn.org/v1", "kind": "ClusterUserDefinedNetwork",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": selector, "network": body},
        }, immutable_fields=("spec.network",),
            identity={"owner": immutable_values(provider.obj), "network": body})
        for tenant in allowed:
            if model.tenants is None or tenant in model.tenants:  # else not in this scope
                members = hosted.get((tenant, (None, provider.name), cluster.name), {})
                yield from _provider_policies(model, allocations, manager, config, cluster.name,
                                              segment, tenant, members, bridged.get(tenant, []))


def _provider_policies(model: Model, allocations: Allocations, manager: str,
                       config: KubernetesConfig, cluster: str, segment: _Segment, tenant: str,
                       members: dict[tuple[str, str], set[str]], workloads: list[Manifest]
                       ) -> Iterator[BackendObject]:
    """In one tenant's namespace: the isolation, and its VMs' groups per network."""
    by_network: dict[str, dict[str, set[str]]] = {}
    for (vn, group), vms in members.items():
        by_network.setdefault(vn, {})[group] = vms
    yield _Policies(model, allocations, manager, config, cluster, segment, tenant, "",
                    workloads).isolation()
    for vn, groups in sorted(by_network.items()):
        yield from _Policies(model, allocations, manager, config, cluster, segment, tenant, vn,
                             workloads).objects(groups, qualified=True)


def _bridged_tenants(model: Model, manager: str) -> set[str]:
    """The tenants with a network this manager bridges: their namespaces are set up."""
    out = set()
    for subnet in model.kind("Subnet"):
        cls = model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
        if cls is not None and cls.obj.spec.k8s_manager == manager and subnet.tenant:
            out.add(subnet.tenant)
    return out


def _subnet_objects(model: Model, allocations: Allocations, manager: str,
                    config: KubernetesConfig, cluster: str, subnet: Manifest
                    ) -> list[BackendObject]:
    spaces = model.subnet_spaces(subnet.tenant, subnet.name)
    name = object_name(subnet.tenant, subnet.name)
    segment = allocations.get(segment_key(subnet.tenant, subnet.name))
    localnet: dict[str, Any] = {
        "role": "Secondary",
        "physicalNetworkName": config.physical_network_name,
        "mtu": subnet.obj.spec.mtu,
        # unet hands out every address of the segment: the cluster hands out none, and VMs
        # ask for theirs (and their MAC) in the network selection element.
        "ipam": {"mode": "Disabled"},
    }
    unknown: frozenset[str] = frozenset()
    meta = {}
    if segment is not None:
        localnet["vlan"] = {"mode": "Access", "access": {
            "id": int(segment.value) if segment.known else segment.value}}
        if not segment.known:
            unknown = frozenset({"spec"})
        else:
            meta[TAG_ALLOCATION + segment_key(subnet.tenant, subnet.name)] = segment.value
    network = {"topology": "Localnet", "localnet": localnet}
    # Its network's attachment to the physical network cannot change in place either: a
    # change of it replaces the object, as one of the subnet's immutable fields does.
    identity = {"owner": immutable_values(subnet.obj), "network": network}
    selector = {config.namespace_label: str(subnet.tenant),
                NAMESPACE_NAME: config.namespace_of(subnet.tenant)}
    objects = [BackendObject(manager, "ClusterUserDefinedNetwork",
                             f"{cluster}/ClusterUserDefinedNetwork/{name}", subnet.ref, {
        "apiVersion": "k8s.ovn.org/v1",
        "kind": "ClusterUserDefinedNetwork",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": selector}, "network": network},
    }, unknown=unknown, meta=meta, immutable_fields=("spec.network",), identity=identity)]
    block = spaces[4].vip_block if 4 in spaces else None
    if block is not None:
        objects += _metallb(manager, config, cluster, subnet, name, block)
    return objects


@dataclass(frozen=True)
class _Segment:
    """What a tenant's VMs attach to on a cluster: a subnet's or a provider network's CUDN."""

    network: str  # the CUDN's name
    prefix: str  # of its policies' names in the tenant's namespace
    owner: str  # the resource its isolation belongs to


class _Policies:
    """The MultiNetworkPolicies of one segment, tenant and network on one cluster: every pod
    on the segment is isolated (the fabric's default drop), and each security group of the
    VMs there allows what its rules allow (stateful, as NetworkPolicy is), remote groups as
    the addresses of their members wherever they run."""

    def __init__(self, model: Model, allocations: Allocations, manager: str,
                 config: KubernetesConfig, cluster: str, segment: _Segment,
                 tenant: str | None, vn: str, workloads: list[Manifest]) -> None:
        self.model, self.values = model, AllocatedValues(allocations)
        self.workloads = workloads  # the tenant's, of the networks this manager bridges
        self.manager, self.cluster, self.segment = manager, cluster, segment
        self.tenant, self.vn = tenant, vn
        self.namespace = config.namespace_of(tenant)
        self.network = segment.network
        self.families = sorted(model.network_cidrs(self.tenant, self.vn))
        self.unknown: list[str] = []

    def isolation(self) -> BackendObject:
        return self._policy(self.segment.prefix, {}, [], [])

    def objects(self, members: dict[str, set[str]], qualified: bool = False
                ) -> Iterator[BackendObject]:
        """A policy per group of `members` (group → its VMs here); `qualified` names the
        network too (on a provider network, two networks' groups may meet)."""
        for group, vms in sorted(members.items()):
            self.unknown = []
            ingress, egress = self._rules(group)
            selector = {"matchExpressions": [{"key": LABEL_INSTANCE, "operator": "In",
                                              "values": sorted(vms)}]}
            name = f"{self.vn}.{group}" if qualified else group
            yield self._policy(f"{self.segment.prefix}.{name}", selector, ingress, egress,
                               group)

    def _declared(self, name: str) -> Manifest | None:
        """The group as the network sees it: a `default` of another network is not it."""
        group = self.model.get("SecurityGroup", self.tenant, name)
        return group if group is not None and group.obj.spec.virtual_network == self.vn \
            else None

    def _rules(self, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        group = self._declared(name)
        if group is None:  # the implicit default: in from its members, out to anywhere
            peers = self._group_peers("default")
            return ([{"from": peers}] if peers else [], self._confined(
                [{"to": [{"ipBlock": {"cidr": _WORLD[v]}} for v in self.families]}]))
        ingress = [r for r in (self._rule(rule, "from") for rule in group.obj.spec.ingress) if r]
        egress = [r for r in (self._rule(rule, "to") for rule in group.obj.spec.egress) if r]
        return ingress, self._confined(egress)

    def _confined(self, egress: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """As on the fabric: in a family without a NATGateway but with a way out, no new
        connection leaves the network (OSAC), so destinations of that family are cut to
        its inside (replies flow regardless)."""
        cidrs = self.model.network_cidrs(self.tenant, self.vn)
        inside = {version: [network(c) for c in (
            str(cidrs[version]), *self.model.routed_inside(self.tenant, self.vn, version))]
            for version in self.model.egress_closed(self.tenant, self.vn) if version in cidrs}
        if not inside:
            return egress
        out = []
        for rule in egress:
            peers: list[dict[str, Any]] = []
            for peer in rule["to"]:
                net = network(peer["ipBlock"]["cidr"])
                own = inside.get(net.version)
                cut = [net] if own is None or any(net in o for o in own) else \
                    [o for o in own if o in net]
                peers += [{"ipBlock": {"cidr": str(n)}} for n in cut
                          if {"ipBlock": {"cidr": str(n)}} not in peers]
            if peers:
                out.append({**rule, "to": peers})
        return out

    def _rule(self, rule: Any, side: str) -> dict[str, Any] | None:
        """One NetworkPolicy rule; None when it can match nothing here (an ICMP rule, a
        remote of a family the network lacks, a remote group without members)."""
        if unrealisable(rule):
            return None  # POLICY_RULE_NOT_REALISED said so at validation
        if rule.cidr is not None:
            if network(rule.cidr).version not in self.families:
                return None
            peers = [{"ipBlock": {"cidr": rule.cidr}}]
        else:
            peers = self._group_peers(rule.security_group)
        if not peers:
            return None  # no peer at all would mean every peer
        out: dict[str, Any] = {side: peers}
        if rule.protocol in _PROTOCOLS:
            port: dict[str, Any] = {"protocol": _PROTOCOLS[rule.protocol]}
            if rule.port_from is not None:
                port["port"] = rule.port_from
            out["ports"] = [port]
        return out

    def _group_peers(self, group: str) -> list[dict[str, Any]]:
        """The addresses of the group's members in the network, wherever they run (the
        fabric's `$pg_<group>_ip4`: port addresses, and a Cluster port's VIPs)."""
        addresses: set[str] = set()
        for workload in self.workloads:
            if self.model.network_of_workload(workload) != self.vn:
                continue
            attachments = workload.obj.spec.network_attachments
            for index, attachment in enumerate(attachments):
                if group not in attachment.security_groups:
                    continue
                port = port_key(workload, index)
                keys = [ip_of_port(port, v) for v in self.families
                        if v in self.model.port_spaces(workload, attachment)]
                if workload.kind == "Cluster" and index == primary_index(attachments):
                    keys += [vip_key(self.tenant, workload.name, e) for e in ("api", "ingress")]
                for alloc in keys:
                    value = self.values.get(alloc, alloc, self.unknown)
                    if value is not None:
                        addresses.add(str(network(value).cidr))
        return [{"ipBlock": {"cidr": a}} for a in sorted(addresses, key=network)]

    def _policy(self, name: str, selector: dict[str, Any], ingress: list[dict[str, Any]],
                egress: list[dict[str, Any]], group: str | None = None) -> BackendObject:
        spec: dict[str, Any] = {"podSelector": selector, "policyTypes": ["Ingress", "Egress"]}
        if ingress:  # an empty list is left out by the API server; absent means none
            spec["ingress"] = ingress
        if egress:
            spec["egress"] = egress
        owner = self.segment.owner
        if group is not None:
            declared = self._declared(group)
            owner = declared.ref if declared is not None else f"VirtualNetwork/{self.tenant}/" \
                                                              f"{self.vn}"
        return BackendObject(
            self.manager, "MultiNetworkPolicy",
            f"{self.cluster}/MultiNetworkPolicy/{self.namespace}/{name}", owner, {
                "apiVersion": "k8s.cni.cncf.io/v1beta1", "kind": "MultiNetworkPolicy",
                "metadata": {"name": name, "namespace": self.namespace,
                             "annotations": {POLICY_FOR: f"{self.namespace}/{self.network}"}},
                "spec": spec,
            }, unknown=frozenset({"spec"}) if self.unknown else frozenset())


def _bindings_maps(model: Model, allocations: Allocations, manager: ClusterManager,
                   config: KubernetesConfig, tenant: str | None,
                   workloads: list[Manifest]) -> list[BackendObject]:
    """The tenant's bindings where its VM templates can read them, on every cluster: one
    key per workload of the networks this manager bridges."""
    values = AllocatedValues(allocations)
    data = {}
    unknown = False
    for workload in workloads:
        binding = workload_binding(model, values, {manager.manager: manager}, workload)
        unknown |= any(a["knownAfterApply"] for a in binding["attachments"]) or bool(
            binding.get("knownAfterApply"))
        data[binding_key(workload)] = json.dumps(binding, sort_keys=True,
                                                 separators=(",", ":"))
    namespace = config.namespace_of(tenant)
    name = bindings_configmap(manager.manager)
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_MAX_BYTES:
        raise UnetError(f"the bindings of tenant {tenant} would take {size:,} bytes in the "
                        f"ConfigMap {namespace}/{name}, and a ConfigMap holds at most "
                        f"{CONFIGMAP_MAX_BYTES:,}: fewer workloads, attachments or routes per "
                        "tenant in the networks bridged to hosting clusters")
    return [BackendObject(
        manager.manager, "ConfigMap", f"{cluster.name}/ConfigMap/{namespace}/{name}",
        f"Tenant/{tenant}", {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }, unknown=frozenset({"data"}) if unknown else frozenset())
        for cluster in config.clusters]


def _metallb(manager: str, config: KubernetesConfig, cluster: str, subnet: Manifest, name: str,
             block: tuple[int, int]) -> list[BackendObject]:
    namespace = config.metallb_namespace
    first, last = netaddr.IPAddress(block[0], 4), netaddr.IPAddress(block[1], 4)
    addresses = [str(c) for c in netaddr.iprange_to_cidrs(first, last)]
    pool = BackendObject(manager, "IPAddressPool", f"{cluster}/IPAddressPool/{namespace}/{name}",
                         subnet.ref, {
        "apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"addresses": addresses, "autoAssign": False},
    })
    advertisement = BackendObject(
        manager, "L2Advertisement", f"{cluster}/L2Advertisement/{namespace}/{name}", subnet.ref, {
            "apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ipAddressPools": [name]},
        }, refs={"ipAddressPools": (pool.key,)})
    return [pool, advertisement]


def policy_exposure(obj: BackendObject, model: Model) -> Exposure | None:
    """What a MultiNetworkPolicy, as it is (drift included), lets in from outside its
    network: its ingress rules whose address blocks lie outside the network."""
    if obj.table != "MultiNetworkPolicy":
        return None
    kind, _, rest = obj.owner.partition("/")
    tenant, _, name = rest.partition("/")
    vn, group = name, "default"
    if kind == "SecurityGroup":
        declared = model.get("SecurityGroup", tenant, name)
        vn, group = (declared.obj.spec.virtual_network if declared else ""), name
    elif kind != "VirtualNetwork":
        return None  # a subnet's isolation: lets nothing in
    cidrs = list(model.network_cidrs(tenant, vn).values())
    cluster = obj.key.split("/", 1)[0]
    opened = []
    for rule in obj.fields.get("spec", {}).get("ingress") or []:
        what = _what(rule.get("ports"))
        for peer in rule.get("from") or [{"ipBlock": {"cidr": "0.0.0.0/0"}}]:
            cidr = (peer.get("ipBlock") or {}).get("cidr")
            if cidr is None:
                opened.append(f"{what} from pods the policy selects by label")
                continue
            source = network(cidr)
            if any(source.version == n.version and source in n for n in cidrs):
                continue
            world = " (anywhere)" if source.prefixlen == 0 else ""
            opened.append(f"{what} from {cidr}{world}")
    if not opened:
        return None
    # The network it filters (`<namespace>/<CUDN>`): a provider network's is said.
    cudn = str(obj.fields.get("metadata", {}).get("annotations", {}).get(POLICY_FOR, ""))
    cudn = cudn.split("/", 1)[-1]
    prefix = provider_object_name("")
    where = f" on provider network {cudn.removeprefix(prefix)}" if cudn.startswith(prefix) \
        else ""
    return Exposure("rule", {"rule": f"{'; '.join(opened)} to {tenant}/{vn}/{group}{where} "
                                     f"on hosting cluster {cluster}"})


def _what(ports: list[dict[str, Any]] | None) -> str:
    if not ports:
        return "all traffic"
    out = []
    for port in ports:
        protocol = str(port.get("protocol", "TCP")).lower()
        out.append(f"{protocol} port {port['port']}" if "port" in port
                   else f"{protocol} all ports")
    return ", ".join(out)
