"""Render subnets of k8s-backed classes into objects for every hosting cluster.

Per subnet: an OVN-Kubernetes ClusterUserDefinedNetwork (Localnet, Secondary)
bridged to the subnet's fabric segment; per subnet with a VIP block: a MetalLB
IPAddressPool and L2Advertisement. Pure; the segment id is the one allocated
for the OVN localnet port (one allocation, read by both managers).

The CUDN's `spec.network` is immutable in the API server (CEL `self == oldSelf`), so
it is tagged with a hash of it as the immutable tag: when it changes, the plan
replaces the object (delete, then create) instead of an update the server would refuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import netaddr

from reconciler.allocate import Allocations, segment_key
from reconciler.errors import UnetError
from reconciler.model import Model
from reconciler.models import immutable_values
from reconciler.objects import TAG_ALLOCATION, TAG_IMMUTABLE, BackendObject, immutable_tag
from reconciler.schema import Manifest

if TYPE_CHECKING:
    from . import KubernetesConfig

MAX_EXCLUDE_SUBNETS = 25  # the CUDN CRD's maxItems


class RenderError(UnetError):
    """The model asks for an object the CRD would refuse."""


def object_name(tenant: str | None, subnet: str) -> str:
    return f"unet.{tenant}.{subnet}"


def render(model: Model, allocations: Allocations, manager: str,
           config: KubernetesConfig) -> list[BackendObject]:
    out: list[BackendObject] = []
    clusters = [c.name for c in config.clusters]
    for subnet in model.kind("Subnet"):
        cls = model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
        if cls is None or cls.obj.spec.k8s_manager != manager:
            continue
        for cluster in clusters:
            out.extend(_subnet_objects(model, allocations, manager, config, cluster, subnet))
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
        "subnets": [str(spaces[v].net) for v in sorted(spaces)],
        "mtu": subnet.obj.spec.mtu,
    }
    excluded = _excluded(spaces)
    if len(excluded) > MAX_EXCLUDE_SUBNETS:
        raise RenderError(
            f"{subnet.ref} needs {len(excluded)} excludeSubnets entries on its "
            f"ClusterUserDefinedNetwork (gateway, reserved addresses and VIP block, merged), "
            f"but the CRD allows at most {MAX_EXCLUDE_SUBNETS}: group its excludeAddresses "
            "into fewer contiguous blocks")
    if excluded:
        localnet["excludeSubnets"] = excluded
    unknown: frozenset[str] = frozenset()
    meta = {}
    if segment is not None:
        localnet["vlan"] = {"mode": "Access", "access": {
            "id": int(segment.value) if segment.known else segment.value}}
        if not segment.known:
            unknown = frozenset({"spec"})
        else:
            meta[TAG_ALLOCATION + segment_key(subnet.tenant, subnet.name)] = segment.value
    label = config.namespace_label
    network = {"topology": "Localnet", "localnet": localnet}
    meta[TAG_IMMUTABLE] = immutable_tag({"owner": immutable_values(subnet.obj),
                                        "network": network})
    objects = [BackendObject(manager, "ClusterUserDefinedNetwork",
                             f"{cluster}/ClusterUserDefinedNetwork/{name}", subnet.ref, {
        "apiVersion": "k8s.ovn.org/v1",
        "kind": "ClusterUserDefinedNetwork",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {label: str(subnet.tenant)}},
            "network": network,
        },
    }, unknown=unknown, meta=meta, immutable_fields=("spec.network",))]
    block = spaces[4].vip_block if 4 in spaces else None
    if block is not None:
        objects += _metallb(manager, config, cluster, subnet, name, block)
    return objects


def _excluded(spaces: dict[int, Any]) -> list[str]:
    """Gateway, reserved addresses and the VIP block, merged into as few CIDRs as possible."""
    nets = []
    for space in spaces.values():
        ends = {space.net.first, space.net.last} if space.net.version == 4 else {space.net.first}
        for address in sorted(space.reserved - ends):
            nets.append(netaddr.IPNetwork(netaddr.IPAddress(address, space.net.version)))
        if space.vip_block is not None:
            nets += netaddr.iprange_to_cidrs(netaddr.IPAddress(space.vip_block[0], 4),
                                             netaddr.IPAddress(space.vip_block[1], 4))
    return [str(n) for n in netaddr.cidr_merge(nets)]


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
