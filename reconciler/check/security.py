"""SecurityGroups and their rules."""

from __future__ import annotations

from typing import Any

from ..models import Capability, Family, Rule
from ..schema import Manifest
from .classes import require
from .context import Context, Path_
from .netutil import parse_cidr
from .peering import peer_of

DEFAULT_GROUP = "default"


def check_security_groups(ctx: Context) -> None:
    for group in ctx.kind("SecurityGroup"):
        spec = group.obj.spec
        vn = ctx.lookup(group, ("spec", "virtualNetwork"), "VirtualNetwork",
                        spec.virtual_network, group.tenant)
        if vn is not None:
            require(ctx, group, ("kind",), ctx.vn_class.get((vn.tenant, vn.name)),
                    Capability.SECURITY_GROUPS, "a SecurityGroup")
        for direction in ("ingress", "egress"):
            seen: dict[tuple[Any, ...], int] = {}
            for index, rule in enumerate(getattr(spec, direction)):
                path = ("spec", direction, index)
                key = _check_rule(ctx, group, path, rule)
                if key is None:
                    continue
                if key in seen:
                    ctx.report("RULE_DUPLICATE", group, path,
                               f"this {direction} rule repeats rule {seen[key] + 1}",
                               "remove one of them")
                else:
                    seen[key] = index


def _check_rule(ctx: Context, group: Manifest, path: Path_, rule: Rule
                ) -> tuple[Any, ...] | None:
    """Report what is wrong with a rule; return its normalised identity when it is valid."""
    ok = _check_ports(ctx, group, path, rule) & _check_icmp(ctx, group, path, rule)
    if (rule.cidr is None) == (rule.security_group is None):
        ctx.report("RULE_REMOTE_INVALID", group, path,
                   "a rule needs exactly one remote: cidr or securityGroup",
                   "cidr: 0.0.0.0/0 means anywhere; securityGroup: NAME means its members")
        return None
    remote: str | None = None
    if rule.peering is not None and rule.security_group is None:
        ctx.report("PEERING_INVALID", group, (*path, "peering"),
                   "`peering` names whose group `securityGroup` is: give securityGroup too",
                   "a CIDR of the peer network needs no peering: write cidr alone")
        return None
    if rule.cidr is not None:
        net = parse_cidr(ctx, group, (*path, "cidr"), rule.cidr, network_range=False)
        remote = str(net) if net is not None else None
        if net is not None and ok:
            _check_effect(ctx, group, path, rule, net.version)
    elif rule.security_group is not None:  # one of the two, as checked above
        if ok:
            _check_effect(ctx, group, path, rule, None)
        remote = rule.security_group
        if rule.peering is not None:
            remote = f"{rule.peering}/{rule.security_group}"
            ok &= _check_peer_group(ctx, group, path, rule.peering, rule.security_group)
        else:
            ok &= resolve_group(ctx, group, (*path, "securityGroup"), rule.security_group,
                                group.obj.spec.virtual_network) is not None
    if not ok or remote is None:
        return None
    return (rule.protocol, rule.port_from, rule.port_to, rule.icmp_type, rule.icmp_code,
            rule.cidr is not None, remote)


def _check_peer_group(ctx: Context, group: Manifest, path: Path_, peering_name: str,
                      name: str) -> bool:
    """A rule's group of a peered network: the peering must be of the rule's network,
    and the group of its peer (once the peer network is declared: until then the
    peering is pending, and says so)."""
    peering = ctx.lookup(group, (*path, "peering"), "VirtualNetworkPeering", peering_name,
                         group.tenant)
    if peering is None:
        return False
    vn = group.obj.spec.virtual_network
    if ctx.rejected(group, ("spec", "virtualNetwork")) or \
            ctx.rejected(peering, ("spec", "virtualNetwork")):
        return False  # reported where it was rejected
    if peering.obj.spec.virtual_network != vn:
        ctx.report("PEERING_INVALID", group, (*path, "peering"),
                   f"VirtualNetworkPeering '{peering_name}' peers VirtualNetwork "
                   f"'{peering.obj.spec.virtual_network}', not this group's '{vn}'",
                   f"name a peering of VirtualNetwork '{vn}'")
        return False
    tenant, peer_vn = peer_of(peering)
    if id(peering) in ctx.requested or not ctx.declared("VirtualNetwork", tenant, peer_vn) \
            or name == DEFAULT_GROUP:
        return True  # a request the other tenant never answered: the rule admits nothing
    found = ctx.get("SecurityGroup", tenant, name)
    if found is None:
        return ctx.lookup(group, (*path, "securityGroup"), "SecurityGroup", name,
                          tenant) is not None
    if found.obj.spec.virtual_network != peer_vn:
        if ctx.rejected(found, ("spec", "virtualNetwork")):
            return False  # reported there
        ctx.report("SECURITY_GROUP_WRONG_NETWORK", group, (*path, "securityGroup"),
                   f"SecurityGroup '{name}' of tenant {tenant} belongs to VirtualNetwork "
                   f"'{found.obj.spec.virtual_network}', not the peer network '{peer_vn}'",
                   "name a group of the peer network")
        return False
    return True


def _check_ports(ctx: Context, group: Manifest, path: Path_, rule: Rule) -> bool:
    low, high = rule.port_from, rule.port_to
    if low is None and high is None:
        return True
    if rule.protocol not in ("tcp", "udp"):
        field = "portFrom" if low is not None else "portTo"
        ctx.report("RULE_PORTS_INVALID", group, (*path, field),
                   f"ports apply to tcp and udp only, not {rule.protocol}",
                   "remove portFrom/portTo")
    elif low is None or high is None:
        ctx.report("RULE_PORTS_INVALID", group, (*path, "portTo" if high is None else "portFrom"),
                   "give both portFrom and portTo, or neither",
                   f"for a single port write portFrom: {low or high} and portTo: {low or high}")
    elif not (1 <= low <= 65535 and 1 <= high <= 65535):
        bad = "portFrom" if not 1 <= low <= 65535 else "portTo"
        ctx.report("RULE_PORTS_INVALID", group, (*path, bad), "ports are 1..65535")
    elif low > high:
        ctx.report("RULE_PORTS_INVALID", group, (*path, "portFrom"),
                   f"portFrom {low} is above portTo {high}", "swap them")
    else:
        return True
    return False


def _check_icmp(ctx: Context, group: Manifest, path: Path_, rule: Rule) -> bool:
    icmp_type, icmp_code = rule.icmp_type, rule.icmp_code
    if icmp_type is None and icmp_code is None:
        return True
    if rule.protocol not in ("icmp", "icmpv6"):
        ctx.report("RULE_ICMP_INVALID", group,
                   (*path, "icmpType" if icmp_type is not None else "icmpCode"),
                   f"icmpType/icmpCode apply to icmp and icmpv6 only, not {rule.protocol}")
    elif icmp_type is None:
        ctx.report("RULE_ICMP_INVALID", group, (*path, "icmpCode"),
                   "icmpCode needs an icmpType")
    elif not 0 <= icmp_type <= 255 or (icmp_code is not None and not 0 <= icmp_code <= 255):
        bad = "icmpType" if not 0 <= icmp_type <= 255 else "icmpCode"
        ctx.report("RULE_ICMP_INVALID", group, (*path, bad), "icmp type and code are 0..255")
    else:
        return True
    return False


def _check_effect(ctx: Context, group: Manifest, path: Path_, rule: Rule,
                  remote: int | None) -> None:
    """A rule that can match nothing renders no ACL at all: say so (RULE_NO_EFFECT)."""
    vn = group.obj.spec.virtual_network
    network = ctx.networks.get((group.tenant, vn))
    if not network:
        return  # the VirtualNetwork's own problems are reported there
    families = set(network) | _rejected_families(ctx, group.tenant, vn)
    protocol = rule.families
    if remote is not None and remote not in families:
        ctx.report("RULE_NO_EFFECT", group, path,
                   f"the rule matches nothing: its remote {rule.cidr} is IPv{remote} and "
                   f"VirtualNetwork '{vn}' has no IPv{remote}",
                   f"give the VirtualNetwork an ipv{remote}Cidr, or remove the rule")
    elif remote is not None and remote not in protocol:
        named = "icmp with icmpType is ICMPv4" if rule.protocol == "icmp" else \
            "icmpv6 is ICMPv6"
        ctx.report("RULE_NO_EFFECT", group, path,
                   f"the rule matches nothing: {named}, and its remote {rule.cidr} is "
                   f"IPv{remote}",
                   "for ICMPv6 types use protocol: icmpv6" if remote == 6
                   else "for ICMPv4 types use protocol: icmp")
    elif not protocol & families:
        ctx.report("RULE_NO_EFFECT", group, path,
                   f"the rule matches nothing: {rule.protocol} is IPv{min(protocol)} only and "
                   f"VirtualNetwork '{vn}' has no IPv{min(protocol)}",
                   "remove the rule, or give the VirtualNetwork that family")


def _rejected_families(ctx: Context, tenant: str | None, vn_name: str) -> set[int]:
    """Families whose CIDR the VirtualNetwork has rejected: it may have them, for all a rule
    can tell (the CIDR's error is reported)."""
    vn = ctx.get("VirtualNetwork", tenant, vn_name)
    return {family for family in Family
            if vn is not None and ctx.rejected(vn, ("spec", family.cidr_field))}


def resolve_group(ctx: Context, manifest: Manifest, path: Path_, name: str,
                  vn_name: str) -> Manifest | str | None:
    """The group `name` as seen from VirtualNetwork `vn_name` of the manifest's tenant.

    Returns the declared group, DEFAULT_GROUP for the implicit one, or None after
    reporting why it cannot be used.
    """
    group = ctx.get("SecurityGroup", manifest.tenant, name)
    if group is None:
        if name == DEFAULT_GROUP:
            return DEFAULT_GROUP
        ctx.lookup(manifest, path, "SecurityGroup", name, manifest.tenant)
        return None
    if group.obj.spec.virtual_network != vn_name:
        if name == DEFAULT_GROUP:  # the tenant's own `default` belongs to another network
            return DEFAULT_GROUP
        if ctx.rejected(group, ("spec", "virtualNetwork")) or \
                ctx.rejected(manifest, ("spec", "virtualNetwork")):
            return None  # the group's network, or the one naming it, is reported
        ctx.report("SECURITY_GROUP_WRONG_NETWORK", manifest, path,
                   f"SecurityGroup '{name}' belongs to VirtualNetwork "
                   f"'{group.obj.spec.virtual_network}', not '{vn_name}'",
                   "use a group of the same VirtualNetwork")
        return None
    return group
