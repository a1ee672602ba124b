"""What each workload needs to bind to its network: addresses, gateway, DNS, routes, MTU,
segment, and on a hosting cluster the network to attach to (`unet show bindings`, and the
ConfigMap the kubernetes manager publishes for VM templates). Pure: read from the model and
the allocations, which come from the live backends (or are unknown until an apply).

The JSON format is versioned (`format_version`) and documented in docs/output-formats.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import netaddr

from .allocate import (
    Allocations,
    external_key,
    ip_of_port,
    mac_of_port,
    port_key,
    segment_key,
    vip_key,
)
from .contract import ClusterManager
from .model import Model
from .models import segment_of
from .schema import Manifest

if TYPE_CHECKING:
    from .contract import Manager

FORMAT_VERSION = "1.0"
KNOWN_AFTER_APPLY = "(known after apply)"
_SHORT = {"ComputeInstance": "vm", "BaremetalInstance": "bm", "Cluster": "cluster"}


class AllocatedValues:
    """Allocated values by key; what is not known yet is None and listed by field."""

    def __init__(self, allocations: Allocations) -> None:
        self.allocations = allocations

    def get(self, key: str, field: str, unknown: list[str]) -> str | None:
        found = self.allocations.get(key)
        if found is None or not found.known:
            unknown.append(field)
            return None
        return found.value


def binding_key(workload: Manifest) -> str:
    """The workload's key in the published ConfigMap: `<vm|bm|cluster>.<name>.json`."""
    return f"{_SHORT[workload.kind]}.{workload.name}.json"


def bindings(model: Model, allocations: Allocations, managers: Mapping[str, Manager],
             tenant: str | None = None) -> dict[str, Any]:
    """Every workload's binding (of one tenant, with `tenant`), in a fixed order."""
    values = AllocatedValues(allocations)
    workloads = [w for w in sorted(model.workloads, key=lambda w: w.ref)
                 if tenant is None or w.tenant == tenant]
    return {"format_version": FORMAT_VERSION, "installation": model.installation,
            "workloads": [workload_binding(model, values, managers, w) for w in workloads]}


def workload_binding(model: Model, values: AllocatedValues, managers: Mapping[str, Manager],
                     workload: Manifest) -> dict[str, Any]:
    spec = workload.obj.spec
    out: dict[str, Any] = {"tenant": workload.tenant, "kind": workload.kind,
                           "name": workload.name,
                           "hostingCluster": model.hosting_cluster(workload)}
    vn = model.network_of_workload(workload)
    cls = model.class_of(workload.tenant, vn) if vn is not None else None
    found = managers.get(cls.obj.spec.k8s_manager or "") if cls is not None else None
    k8s = found if isinstance(found, ClusterManager) else None
    primary = next((i for i, a in enumerate(spec.network_attachments) if a.primary), 0)
    out["attachments"] = [
        _attachment(model, values, k8s, workload, index, index == primary)
        for index in range(len(spec.network_attachments))]
    if workload.kind == "Cluster":
        unknown: list[str] = []
        out["apiVip"] = values.get(vip_key(workload.tenant, workload.name, "api"), "apiVip",
                                   unknown)
        out["ingressVip"] = values.get(vip_key(workload.tenant, workload.name, "ingress"),
                                       "ingressVip", unknown)
        out["knownAfterApply"] = unknown
    out["externalIPs"] = _external_ips(model, values, workload)
    return out


def _attachment(model: Model, values: AllocatedValues, k8s: ClusterManager | None,
                workload: Manifest, index: int, primary: bool) -> dict[str, Any]:
    attachment = workload.obj.spec.network_attachments[index]
    tenant, name = segment_of(workload.tenant, attachment)
    segment = model.get("Subnet" if tenant is not None else "ProviderNetwork", tenant, name)
    assert segment is not None  # validated
    spec = segment.obj.spec
    port = port_key(workload, index)
    unknown: list[str] = []
    out: dict[str, Any] = {
        "index": index, "primary": primary,
        "network": getattr(spec, "virtual_network", None),
        "subnet": name if tenant is not None else None,
        "providerNetwork": name if tenant is None else None,
        "securityGroups": list(attachment.security_groups)}
    spaces = model.port_spaces(workload, attachment)
    for version in (4, 6):
        space = spaces.get(version)
        if space is None:
            out[f"ipv{version}"] = None
            continue
        address = values.get(ip_of_port(port, version), f"ipv{version}.address", unknown)
        gateway = space.gateway
        out[f"ipv{version}"] = {
            "address": address, "prefixLength": space.net.prefixlen,
            "gateway": str(netaddr.IPAddress(gateway, version)) if gateway is not None else None}
    out["mac"] = values.get(mac_of_port(port), "mac", unknown)
    out["mtu"] = spec.mtu
    out["dnsServers"] = list(spec.dns_servers)
    out["routes"] = [{"destination": r.destination, "nexthop": r.nexthop} for r in spec.routes]
    segment_id = values.get(segment_key(tenant, name), "segmentId", unknown) \
        if k8s is not None or tenant is None else None  # only a bridged segment has one
    out["segmentId"] = int(segment_id) if segment_id is not None else None
    out["clusters"] = k8s.bindings(workload, index, out) if k8s is not None else []
    out["knownAfterApply"] = unknown
    return out


def _external_ips(model: Model, values: AllocatedValues, workload: Manifest
                  ) -> list[dict[str, Any]]:
    out = []
    for attachment in model.kind("ExternalIPAttachment"):
        target = attachment.obj.spec.target
        if attachment.tenant != workload.tenant or (target.kind, target.name) != (
                workload.kind, workload.name):
            continue
        unknown: list[str] = []
        name = attachment.obj.spec.external_ip
        out.append({"externalIP": name, "endpoint": target.endpoint,
                    "address": values.get(external_key(workload.tenant, name), "address",
                                          unknown),
                    "knownAfterApply": unknown})
    return out


# --- for people -----------------------------------------------------------------------------


def render_text(document: dict[str, Any]) -> str:
    """The bindings as people read them: one block per workload."""
    lines: list[str] = []
    for workload in document["workloads"]:
        where = f" on hosting cluster {workload['hostingCluster']}" \
            if workload["hostingCluster"] else ""
        lines.append(f"{workload['kind']} {workload['tenant']}/{workload['name']}{where}")
        if workload["kind"] == "Cluster":
            lines.append(f"  api VIP {_shown(workload['apiVip'])}, ingress VIP "
                         f"{_shown(workload['ingressVip'])}")
        for eip in workload["externalIPs"]:
            endpoint = f" ({eip['endpoint']})" if eip["endpoint"] else ""
            lines.append(f"  external IP {eip['externalIP']}{endpoint}: "
                         f"{_shown(eip['address'])}")
        for item in workload["attachments"]:
            lines += _attachment_lines(item)
        lines.append("")
    return "\n".join(lines)


def _attachment_lines(item: dict[str, Any]) -> list[str]:
    primary = ", primary" if item["primary"] else ""
    where = f"subnet {item['network']}/{item['subnet']}" if item["subnet"] else \
        f"provider network {item['providerNetwork']}"
    out = [f"  [{item['index']}] {where}{primary}, groups {', '.join(item['securityGroups'])}"]
    for version in (4, 6):
        family = item[f"ipv{version}"]
        if family is not None:
            address = _shown(family["address"])
            shown = f"{address}/{family['prefixLength']}" if family["address"] else address
            out.append(f"      IPv{version} {shown}, gateway {family['gateway'] or 'none'}")
    out.append(f"      MAC {_shown(item['mac'])}, MTU {item['mtu']}"
               + (f", segment {_shown(item['segmentId'])}"
                  if item["segmentId"] is not None or "segmentId" in item["knownAfterApply"]
                  else ""))
    if item["dnsServers"]:
        out.append(f"      DNS {', '.join(item['dnsServers'])}")
    for route in item["routes"]:
        out.append(f"      route {route['destination']} via {route['nexthop']}")
    for cluster in item["clusters"]:
        labels = ", ".join(f"{k}={v}" for k, v in cluster["podLabels"].items())
        element = json.dumps(cluster["networkSelectionElement"], separators=(", ", ": "))
        out.append(f"      on {cluster['cluster']}: attach network {cluster['namespace']}/"
                   f"{cluster['network']}, pod labels {labels}")
        out.append(f"      network selection element: {element}")
    return out


def _shown(value: Any) -> str:
    return KNOWN_AFTER_APPLY if value is None else str(value)
