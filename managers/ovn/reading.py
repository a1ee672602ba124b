"""How people read OVN rows in plans: what a row is (`describe`) and what it opens to
the outside (`exposure`)."""

from __future__ import annotations

from unet.managers.sdk import BackendObject, Exposure, Model

from .acls import acl_exposure


def describe(obj: BackendObject) -> str:
    """How people know a row, in plans: rows without a name by what they do."""
    fields = obj.fields
    if obj.table == "ACL":
        return f"ACL {fields['direction']} {fields['priority']} {fields['action']} " \
               f"`{fields['match']}`"
    if obj.table == "NAT":
        return f"NAT {fields['type']} {fields['external_ip']} ↔ {fields['logical_ip']}"
    if obj.table == "Logical_Router_Static_Route":
        return f"route {fields['ip_prefix']} via {fields['nexthop']}"
    if obj.table == "DHCP_Options":
        return f"DHCP_Options {fields['cidr']}"
    return f"{obj.table} {fields.get('name', obj.key)}"


def exposure(obj: BackendObject, model: Model) -> Exposure | None:
    """What a row, as it is, opens to the outside: an allow rule (read back from its
    match, so drift counts too), or an address translation."""
    shared = _provider_port(obj, model)
    if shared is not None:
        return Exposure("rule", {"rule": shared})
    if obj.table == "Load_Balancer":  # forwarded ports: address:port/protocol → target
        vips = obj.fields.get("vips") or {}
        protocol = obj.fields.get("protocol")
        return Exposure("ip", {"address": ", ".join(f"{v}/{protocol}" for v in sorted(vips)),
                               "target": ", ".join(vips[v] for v in sorted(vips))})
    if obj.table == "NAT":
        inbound = obj.fields.get("type") in ("dnat", "dnat_and_snat")
        return Exposure("ip" if inbound else "nat", {"address": str(obj.fields.get("external_ip")),
                               "target": str(obj.fields.get("logical_ip"))})
    if obj.table == "Logical_Router_Static_Route" and "/peering/" in obj.key:
        return Exposure("rule", {"rule": _peering_route(obj)})
    if obj.table != "ACL" or obj.parent is None:
        return None
    group = obj.parent[0].split("/", 1)[1]  # Port_Group/<tenant>/<network>[/<group>]
    tenant, network = group.split("/")[:2]
    opened = acl_exposure(obj.fields, group, list(model.network_cidrs(tenant, network).values()))
    return Exposure("rule", {"rule": opened}) if opened else None


def _provider_port(obj: BackendObject, model: Model) -> str | None:
    """A workload's port on a provider network is reachable by every tenant on it (its
    groups decide what passes): said as what it opens, naming who shares the VLAN."""
    parent = obj.parent[0] if obj.parent is not None else ""
    if obj.table == "Address_Set":
        return _hosted_provider_nic(obj, model)
    if obj.table != "Logical_Switch_Port" or obj.fields.get("type") != "" \
            or not parent.startswith("Logical_Switch/None/"):
        return None
    return _shared(parent.split("/", 2)[2], str(obj.fields.get("name")), model)


def _hosted_provider_nic(obj: BackendObject, model: Model) -> str | None:
    """A VM on a hosting cluster has no port here, but the Address_Set of its NIC on a
    provider network says the same (once: the set of its first family)."""
    parts = obj.key.split("/")  # Address_Set/<tenant>/ComputeInstance/<vm>/<n>/ip<v>
    if len(parts) != 6 or parts[2] != "ComputeInstance":
        return None
    vm = model.get("ComputeInstance", parts[1], parts[3])
    attachments = vm.obj.spec.network_attachments if vm is not None else []
    index = int(parts[4]) if parts[4].isdigit() else len(attachments)
    if vm is None or index >= len(attachments) or Model.hosting_cluster(vm) is None:
        return None
    attachment = attachments[index]
    families = sorted(model.port_spaces(vm, attachment))
    if attachment.provider_network is None or not families or parts[5] != f"ip{families[0]}":
        return None
    return _shared(attachment.provider_network, f"{parts[1]}/{parts[3]}/{index} on hosting "
                   f"cluster {Model.hosting_cluster(vm)}", model)


def _shared(name: str, nic: str, model: Model) -> str:
    network = model.get("ProviderNetwork", None, name)
    who = ", ".join(network.obj.spec.tenants) if network is not None else "its tenants"
    return (f"provider network {name} (shared by {who}, and the provider's hosts) to "
            f"{nic}, as far as its groups allow")


def _peering_route(obj: BackendObject) -> str:
    """A peering's route (key `…/<tenant>/<network>/peering/<tenant>/<network>[/ipv6]`):
    the network's router now leads to the peer's CIDR (the peer's own route leads back)."""
    own, peer = obj.key.split("/", 1)[1].split("/peering/")
    peer = "/".join(peer.split("/")[:2])
    return (f"network {own} to network {peer} ({obj.fields.get('ip_prefix')}), routed by "
            "a peering: the groups of both decide what passes")
