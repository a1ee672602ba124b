"""Workloads (ComputeInstance, BaremetalInstance, Cluster) and their network attachments."""

from __future__ import annotations

from typing import Any

import netaddr

from ..contract import ClusterManager
from ..diagnostics import Diagnostic, json_pointer
from ..models import Capability, Family, NetworkAttachment, primary_index
from ..schema import Manifest
from .classes import cluster_manager_of, require
from .context import Context, Path_
from .netutil import address as parse_address
from .netutil import is_address, parse_cidr, parse_ip
from .security import resolve_group

_CAPABILITY = {
    "ComputeInstance": Capability.COMPUTE_INSTANCES,
    "BaremetalInstance": Capability.BAREMETAL_INSTANCES,
    "Cluster": Capability.CLUSTERS,
}

Claims = dict[tuple[Any, ...], tuple[Manifest, Path_]]


def check_host_types(ctx: Context) -> None:
    for host_type in ctx.kind("HostType"):
        seen: set[str] = set()
        for index, interface in enumerate(host_type.obj.spec.interfaces):
            if interface.name in seen:
                ctx.report("INTERFACE_INVALID", host_type, ("spec", "interfaces", index, "name"),
                           f"interface '{interface.name}' is declared twice")
            seen.add(interface.name)


def check_workloads(ctx: Context) -> None:
    claims: Claims = {}
    hosted: list[tuple[Manifest, str, ClusterManager]] = []  # (VM, its network, its manager)
    for kind in _CAPABILITY:
        for workload in ctx.kind(kind):
            vn_name = _check_attachments(ctx, workload, claims)
            if vn_name is None:
                continue
            class_name = ctx.vn_class.get((workload.tenant, vn_name))
            require(ctx, workload, ("kind",), class_name, _CAPABILITY[kind], f"a {kind}")
            if kind == "ComputeInstance" and workload.obj.spec.hosting_cluster is not None:
                plugin = _check_hosting_cluster(ctx, workload, class_name)
                if plugin is not None:
                    hosted.append((workload, vn_name, plugin))
            if kind == "BaremetalInstance":
                _check_interfaces(ctx, workload)
            elif kind == "Cluster":
                _check_cluster(ctx, workload, vn_name, claims)
    _check_hosted_rules(ctx, hosted)


def _check_attachments(ctx: Context, workload: Manifest, claims: Claims) -> str | None:
    """Check every attachment; return the workload's VirtualNetwork when it has one."""
    attachments = workload.obj.spec.network_attachments
    vn_name: str | None = None
    provider: list[int] = []
    for index, attachment in enumerate(attachments):
        path = ("spec", "networkAttachments", index)
        if (attachment.subnet is None) == (attachment.provider_network is None):
            ctx.report("PROVIDER_NETWORK_ATTACHMENT_INVALID", workload, path,
                       "an attachment names a subnet or a providerNetwork: exactly one",
                       "subnet: a Subnet of the tenant; providerNetwork: a provider's "
                       "shared network")
            continue
        if attachment.provider_network is not None:
            provider.append(index)
            continue
        subnet = ctx.lookup(workload, (*path, "subnet"), "Subnet", attachment.subnet,
                            workload.tenant)
        if subnet is None or ctx.rejected(subnet, ("spec", "virtualNetwork")):
            continue  # the subnet, or its network, is reported
        this_vn = subnet.obj.spec.virtual_network
        if vn_name is None:
            vn_name = this_vn
        elif this_vn != vn_name:
            ctx.report("ATTACHMENTS_DIFFERENT_NETWORKS", workload, (*path, "subnet"),
                       f"subnet '{subnet.name}' lies in VirtualNetwork '{this_vn}', the first "
                       f"attachment's in '{vn_name}'",
                       "all attachments of a workload use one VirtualNetwork")
            continue
        _check_port(ctx, workload, path, attachment, subnet, this_vn, claims)
    if len(attachments) > 1:
        primaries = [i for i, a in enumerate(attachments) if a.primary]
        if len(primaries) != 1:
            ctx.report("PRIMARY_INVALID", workload, ("spec", "networkAttachments"),
                       f"{len(primaries)} of {len(attachments)} attachments are primary; "
                       "exactly one must be", "set primary: true on one attachment")
    for index in provider:
        _check_provider_attachment(ctx, workload, index, vn_name, claims)
    _check_provider_overlaps(ctx, workload, provider)
    return vn_name


def _check_provider_overlaps(ctx: Context, workload: Manifest, provider: list[int]) -> None:
    """Two provider networks of one workload with the same addresses: it could not route."""
    attachments = workload.obj.spec.network_attachments
    seen: list[tuple[str, netaddr.IPNetwork]] = []
    for index in provider:
        name = attachments[index].provider_network
        for net in ctx.subnets.get((None, name), {}).values():
            clash = next((other for other, theirs in seen if theirs.version == net.net.version
                          and (net.net in theirs or theirs in net.net)), None)
            if clash is not None and clash != name:
                ctx.report("PROVIDER_NETWORK_ATTACHMENT_INVALID", workload,
                           ("spec", "networkAttachments", index, "providerNetwork"),
                           f"ProviderNetwork '{name}' ({net.net}) overlaps ProviderNetwork "
                           f"'{clash}', which the workload attaches to as well",
                           "a workload cannot route to two networks with the same addresses")
            seen.append((name, net.net))


def _check_port(ctx: Context, workload: Manifest, path: Path_, attachment: NetworkAttachment,
                segment: Manifest, vn_name: str, claims: Claims) -> None:
    """An attachment's groups (of the workload's network) and its fixed values."""
    for g_index, group in enumerate(attachment.security_groups):
        resolve_group(ctx, workload, (*path, "securityGroups", g_index), group, vn_name)
    for version in Family:
        text = getattr(attachment, version.address_attr)
        if text is not None:
            _claim_address(ctx, workload, (*path, version.address_field), text, version,
                           segment, claims, is_vip=False)
    if attachment.mac_address is not None:
        _claim_mac(ctx, workload, (*path, "macAddress"), attachment.mac_address, segment,
                   claims)


def _check_provider_attachment(ctx: Context, workload: Manifest, index: int,
                               vn_name: str | None, claims: Claims) -> None:
    """A second NIC on a provider's network: allowed to the tenant, never the primary,
    fabric ports only, in the workload's region and fabric manager, apart from its network."""
    attachments = workload.obj.spec.network_attachments
    attachment, path = attachments[index], ("spec", "networkAttachments", index)
    network = ctx.lookup(workload, (*path, "providerNetwork"), "ProviderNetwork",
                         attachment.provider_network)
    if network is None:
        return
    if workload.tenant not in network.obj.spec.tenants \
            and not ctx.rejected(network, ("spec", "tenants")):
        ctx.report("PROVIDER_NETWORK_NOT_ALLOWED", workload, (*path, "providerNetwork"),
                   f"tenant {workload.tenant} may not attach to ProviderNetwork "
                   f"'{network.name}'", "the provider lists who may in its spec.tenants")
        return
    vn = ctx.get("VirtualNetwork", workload.tenant, vn_name)
    why = _provider_attachment_problem(ctx, workload, index, network, vn)
    if why is not None:
        ctx.report("PROVIDER_NETWORK_ATTACHMENT_INVALID", workload,
                   (*path, "providerNetwork"), why[0], why[1])
    elif not _bridged_to_its_cluster(ctx, workload, path, network, vn):
        return
    elif vn is not None and _provider_fixed_values_allowed(ctx, workload, path, attachment,
                                                           network, vn):
        _check_port(ctx, workload, path, attachment, network, vn.name, claims)


def _bridged_to_its_cluster(ctx: Context, workload: Manifest, path: Path_, network: Manifest,
                            vn: Manifest | None) -> bool:
    """A VM on a hosting cluster reaches a provider network through the localnet that the
    provider network's class's k8sManager renders on its hosting clusters: that manager
    must be the VM's own (whose cluster it runs on). Fabric workloads need none."""
    if vn is None or getattr(workload.obj.spec, "hosting_cluster", None) is None:
        return True
    mine = ctx.get("NetworkClass", None, ctx.vn_class.get((vn.tenant, vn.name)))
    theirs = ctx.get("NetworkClass", None, ctx.provider_network_class.get(network.name))
    if mine is None or theirs is None:
        return True  # the class is reported
    wanted, has = mine.obj.spec.k8s_manager, theirs.obj.spec.k8s_manager
    if wanted is None or has == wanted:
        return True  # (no k8sManager of its own: its hostingCluster is reported)
    why = f"its NetworkClass '{theirs.name}' has no k8sManager" if has is None else \
        f"its NetworkClass '{theirs.name}' bridges it to the hosting clusters of k8sManager " \
        f"'{has}', not of '{wanted}'"
    ctx.report("PROVIDER_NETWORK_NOT_BRIDGED", workload, (*path, "providerNetwork"),
               f"ProviderNetwork '{network.name}' does not reach hosting cluster "
               f"'{workload.obj.spec.hosting_cluster}': {why}",
               f"give the provider network a class whose k8sManager is '{wanted}', or run the "
               "VM on the fabric (leave hostingCluster out)")
    return False


def _provider_fixed_values_allowed(ctx: Context, workload: Manifest, path: Path_,
                                   attachment: NetworkAttachment, network: Manifest,
                                   vn: Manifest) -> bool:
    """The provider's hosts on its VLAN are unknown to unet: a tenant may fix an address
    only inside what the provider hands out, and never a MAC (it could be a host's); and
    only of a family of its own network (the port has no other, model.port_spaces)."""
    ok = True
    if attachment.mac_address is not None:
        ctx.report("ADDRESS_INVALID", workload, (*path, "macAddress"),
                   f"a fixed MAC on ProviderNetwork '{network.name}' could be one of the "
                   "provider's hosts'", "leave macAddress out: unet derives one")
        ok = False
    spaces = ctx.subnets.get((None, network.name), {})
    own = ctx.networks.get((vn.tenant, vn.name), {})
    for version in Family:
        text, field = getattr(attachment, version.address_attr), version.address_field
        space = spaces.get(version)
        if text is not None and space is not None and version not in own:
            family = version.label
            ctx.report("ADDRESS_INVALID", workload, (*path, field),
                       f"VirtualNetwork '{vn.name}' has no {family} CIDR: the workload gets no "
                       f"{family} address on ProviderNetwork '{network.name}'",
                       f"leave {field} out, or give the VirtualNetwork an {family} CIDR")
            ok = False
            continue
        valid = text is not None and is_address(text)
        if text is None or space is None or not valid:
            continue  # a malformed one is reported with the other fixed values
        value = int(parse_address(text))
        if space.net.first <= value <= space.net.last and not any(
                first <= value <= last for first, last in space.ranges):
            ctx.report("ADDRESS_INVALID", workload, (*path, field),
                       f"{text} is outside the allocationRanges of ProviderNetwork "
                       f"'{network.name}': the rest of it is the provider's",
                       "pick an address inside its allocationRanges, or leave it out")
            ok = False
    return ok


def _provider_attachment_problem(ctx: Context, workload: Manifest, index: int,
                                 network: Manifest, vn: Manifest | None
                                 ) -> tuple[str, str] | None:
    """(what is wrong, hint) with attaching `workload` to `network`, or None."""
    attachments = workload.obj.spec.network_attachments
    if len(attachments) == 1 or attachments[index].primary:
        return (f"ProviderNetwork '{network.name}' cannot be the primary attachment",
                "attach the workload to a Subnet of its own network as primary, and the "
                "provider network beside it")
    if vn is None:
        return None  # the workload's own network is reported
    if network.obj.spec.region != vn.obj.spec.region:
        return (f"ProviderNetwork '{network.name}' is in region {network.obj.spec.region}, "
                f"the workload's VirtualNetwork '{vn.name}' in {vn.obj.spec.region}",
                "attach a provider network of the workload's region")
    mine = ctx.get("NetworkClass", None, ctx.vn_class.get((vn.tenant, vn.name)))
    theirs = ctx.get("NetworkClass", None, ctx.provider_network_class.get(network.name))
    if mine is not None and theirs is not None \
            and mine.obj.spec.fabric_manager != theirs.obj.spec.fabric_manager:
        return (f"ProviderNetwork '{network.name}' is realised by fabric manager "
                f"'{theirs.obj.spec.fabric_manager}', VirtualNetwork '{vn.name}' by "
                f"'{mine.obj.spec.fabric_manager}'", "a port and its security groups live in "
                "one Northbound: attach a provider network of the same fabric")
    own_nets = ctx.networks.get((vn.tenant, vn.name), {})
    spaces = ctx.subnets.get((None, network.name), {})
    for version, own in own_nets.items():
        space = spaces.get(version)
        if space is not None and (space.net in own or own in space.net):
            return (f"ProviderNetwork '{network.name}' ({space.net}) overlaps the workload's "
                    f"VirtualNetwork '{vn.name}' ({own})",
                    "a workload cannot route to two networks with the same addresses")
    cidrs = (("spec", "ipv4Cidr"), ("spec", "ipv6Cidr"))
    if spaces and own_nets and not spaces.keys() & own_nets.keys() \
            and not ctx.rejected(vn, *cidrs) and not ctx.rejected(network, *cidrs):
        # (a rejected CIDR is unknown, not absent: its family may be the one in common)
        families = " and ".join(Family(v).label for v in sorted(own_nets))
        return (f"ProviderNetwork '{network.name}' has no address family of VirtualNetwork "
                f"'{vn.name}' ({families})", "a port on it has only the families of the "
                "workload's own network, whose groups filter it: attach a provider network "
                "of one of them")
    return None


def _claim_address(ctx: Context, workload: Manifest, path: Path_, text: str, version: int,
                   segment: Manifest, claims: Claims, is_vip: bool) -> None:
    """A fixed address on a Subnet or a ProviderNetwork (`segment`)."""
    ip = parse_ip(ctx, workload, path, text, version=version)
    if ip is None:
        return
    space = ctx.subnets.get((segment.tenant, segment.name), {}).get(version)
    what = f"{'subnet' if segment.kind == 'Subnet' else 'provider network'} '{segment.name}'"
    if space is None:
        if Family(version).cidr_of(segment.obj.spec) is None:
            ctx.report("ADDRESS_INVALID", workload, path,
                       f"{what} has no {Family(version).label} CIDR")
        return
    value = int(ip)
    problem = None
    if ip not in space.net:
        problem = f"{ip} is outside {what} ({space.net})"
    elif value in space.reserved:
        problem = f"{ip} is reserved in {what} (network, broadcast, gateway, DHCP server " \
                  "or excluded)"
    elif not is_vip and space.vip_block and space.vip_block[0] <= value <= space.vip_block[1]:
        problem = f"{ip} lies in the VIP block of {what}"
    if problem:
        ctx.report("ADDRESS_INVALID", workload, path, problem, "pick a free address of the subnet")
        return
    _claim(ctx, claims, ("ip", segment.tenant, segment.name, value), workload, path, str(ip))


def _claim_mac(ctx: Context, workload: Manifest, path: Path_, text: str, segment: Manifest,
               claims: Claims) -> None:
    mac = netaddr.EUI(text)
    if int(mac) >> 40 & 1:
        ctx.report("ADDRESS_INVALID", workload, path, f"{text} is a multicast MAC address",
                   "use a unicast address, e.g. 02:00:00:00:00:01 (locally administered)")
        return
    _claim(ctx, claims, ("mac", segment.tenant, segment.name, int(mac)), workload, path, text)


def _claim(ctx: Context, claims: Claims, key: tuple[Any, ...], manifest: Manifest, path: Path_,
           shown: str) -> None:
    first = claims.get(key)
    if first is None:
        claims[key] = (manifest, path)
        return
    owner, owner_path = first
    if key[1] is None and owner.tenant != manifest.tenant:  # on a provider network: both
        ctx.report("ADDRESS_CONFLICT", owner, owner_path,  # tenants' reviews see it
                   f"{shown} is also claimed by {manifest.ref} ({manifest.doc.file}:"
                   f"{manifest.doc.line_of(path)}) on a shared provider network",
                   "give each consumer its own address")
    ctx.report("ADDRESS_CONFLICT", manifest, path,
               f"{shown} is already claimed by {owner.ref} ({owner.doc.file}:"
               f"{owner.doc.line_of(first[1])})", "give each consumer its own address")


def _check_hosting_cluster(ctx: Context, vm: Manifest, class_name: str | None
                           ) -> ClusterManager | None:
    """The cluster is one of the class's k8sManager's; that manager (None: not known)."""
    cls = ctx.get("NetworkClass", None, class_name)
    if cls is None:
        return None  # the class itself is reported
    wanted, manager = vm.obj.spec.hosting_cluster, cls.obj.spec.k8s_manager
    plugin = cluster_manager_of(ctx, manager) if manager else None
    if manager and plugin is None:
        return None  # the manager's config is reported, or known only at run time
    clusters = plugin.hosting_clusters() if plugin is not None else ()
    if wanted in clusters:
        return plugin
    where = f"k8sManager '{manager}' has " + (", ".join(clusters) or "none") if manager \
        else "it has no k8sManager"
    ctx.report("HOSTING_CLUSTER_UNKNOWN", vm, ("spec", "hostingCluster"),
               f"'{wanted}' is not a hosting cluster of NetworkClass '{cls.name}' ({where})",
               "name a cluster of the class's k8sManager, or leave the field out for a VM on "
               "the fabric")
    return None


def _check_hosted_rules(ctx: Context, hosted: list[tuple[Manifest, str, ClusterManager]]
                        ) -> None:
    """Rules of groups that VMs on hosting clusters use and that their manager cannot
    realise there: one POLICY_RULE_NOT_REALISED per rule, at the rule, naming the VMs."""
    users: dict[tuple[int, str, int], tuple[Manifest, str, list[str]]] = {}
    for vm, vn, plugin in hosted:
        for name in {g for a in vm.obj.spec.network_attachments for g in a.security_groups}:
            group = ctx.get("SecurityGroup", vm.tenant, name)
            if group is None or group.obj.spec.virtual_network != vn:
                continue  # the implicit default: every rule can be realised
            for direction in ("ingress", "egress"):
                for position, rule in enumerate(getattr(group.obj.spec, direction)):
                    if ctx.rejected(group, ("spec", direction, position)):
                        continue  # its error says it: no second word on it
                    why = plugin.unrealisable(rule)
                    if why is not None:
                        users.setdefault((id(group), direction, position),
                                         (group, why, []))[2].append(vm.name)
    for (_, direction, position), (group, why, vms) in sorted(
            users.items(), key=lambda item: (item[1][0].ref, item[0][1], item[0][2])):
        path = ("spec", direction, position)
        ctx.diagnostics.append(Diagnostic(
            "POLICY_RULE_NOT_REALISED",
            f"{direction} rule {position + 1} of SecurityGroup '{group.name}' is left out for "
            f"its VMs on hosting clusters ({', '.join(sorted(vms))}): {why}; the traffic it "
            "allows reaches them only if another rule allows it",
            file=group.doc.file, line=group.doc.line_of(path), path=json_pointer(path),
            hint="allow it with a rule the cluster can express (one port, or protocol all), "
                 "or run the VMs on the fabric"))


def _check_interfaces(ctx: Context, workload: Manifest) -> None:
    spec = workload.obj.spec
    host_type = ctx.lookup(workload, ("spec", "hostType"), "HostType", spec.host_type)
    roles = {i.name: i.role for i in host_type.obj.spec.interfaces} if host_type else None
    used: set[str] = set()
    several = len(spec.network_attachments) > 1
    for index, attachment in enumerate(spec.network_attachments):
        path = ("spec", "networkAttachments", index)
        name = attachment.interface
        if name is None:
            if several:
                ctx.report("INTERFACE_REQUIRED", workload, path,
                           "with several attachments each needs an interface",
                           "name one of the HostType's interfaces" + (
                               ": " + ", ".join(n for n, r in roles.items() if r != "lifecycle")
                               if roles else ""))
            continue
        if roles is not None and name not in roles:
            ctx.report("INTERFACE_INVALID", workload, (*path, "interface"),
                       f"HostType '{spec.host_type}' has no interface '{name}'",
                       "known: " + ", ".join(roles))
        elif roles is not None and roles[name] == "lifecycle":
            ctx.report("INTERFACE_INVALID", workload, (*path, "interface"),
                       f"'{name}' is a lifecycle interface; tenants cannot attach it")
        elif name in used:
            ctx.report("INTERFACE_INVALID", workload, (*path, "interface"),
                       f"interface '{name}' is used by two attachments")
        used.add(name)


def _check_cluster(ctx: Context, cluster: Manifest, vn_name: str, claims: Claims) -> None:
    """Its VIPs (in its primary subnet, never a provider network) and its inner CIDRs."""
    spec = cluster.obj.spec
    subnet_name = spec.network_attachments[primary_index(spec.network_attachments)].subnet
    spaces = ctx.subnets.get((cluster.tenant, subnet_name), {})
    subnet = ctx.get("Subnet", cluster.tenant, subnet_name)
    if subnet is not None:
        for field, text in (("apiVip", spec.api_vip), ("ingressVip", spec.ingress_vip)):
            if text is not None:
                _claim_address(ctx, cluster, ("spec", field), text, 4 if ":" not in text else 6,
                               subnet, claims, is_vip=True)
    cidrs: list[tuple[str, netaddr.IPNetwork]] = []
    for field, text in (("podCidr", spec.network.pod_cidr),
                        ("serviceCidr", spec.network.service_cidr)):
        net = parse_cidr(ctx, cluster, ("spec", "network", field), text)
        if net is not None:
            cidrs.append((field, net))
    others = [("the VirtualNetwork", n) for n in ctx.networks.get((cluster.tenant, vn_name),
                                                                  {}).values()]
    others += [("the subnet", s.net) for s in spaces.values()]
    others += [(f"ProviderNetwork '{a.provider_network}'", s.net)
               for a in spec.network_attachments if a.provider_network is not None
               for s in ctx.subnets.get((None, a.provider_network), {}).values()]
    for position, (field, net) in enumerate(cidrs):
        for what, other in [*(("podCidr", c) for _f, c in cidrs[:position]), *others]:
            if net.version == other.version and (net in other or other in net):
                ctx.report("CLUSTER_CIDR_OVERLAP", cluster, ("spec", "network", field),
                           f"{field} {net} overlaps {what} ({other})",
                           "pick pod and service CIDRs apart from each other and the network")
                break
