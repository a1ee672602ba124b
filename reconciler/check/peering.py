"""VirtualNetworkPeerings: two networks of one region routed to each other, once the owners
of both declare it, each in their own folder."""

from __future__ import annotations

from ..models import Capability
from ..schema import Manifest
from .classes import require
from .context import Context

#: (tenant, network) of one side of a peering
Side = tuple[str | None, str]


def peer_of(peering: Manifest) -> Side:
    """The network a peering names as its peer (its own tenant when the peer names none)."""
    peer = peering.obj.spec.peer
    return (peer.tenant or peering.tenant, peer.virtual_network)


def own_side(peering: Manifest) -> Side:
    return (peering.tenant, peering.obj.spec.virtual_network)


def check_peerings(ctx: Context) -> None:
    """Each peering on its own side; established (ctx.peered) when both sides declare it
    and neither has an error."""
    declared: dict[tuple[Side, Side], Manifest] = {}
    written = {(own_side(p), peer_of(p)) for p in ctx.kind("VirtualNetworkPeering")}
    for peering in ctx.kind("VirtualNetworkPeering"):
        own, peer = own_side(peering), peer_of(peering)
        if peer[0] != own[0] and (peer, own) not in written and \
                not ctx.declares_invalid("VirtualNetworkPeering", peer[0]):
            ctx.requested.add(id(peering))
    for peering in ctx.kind("VirtualNetworkPeering"):
        pair = (own_side(peering), peer_of(peering))
        if _check_one(ctx, peering, declared.get(pair)) and \
                _check_other_peers(ctx, peering, declared):
            declared.setdefault(pair, peering)
    # Which tenants declare a peering with a problem, before the pending ones below are said:
    # a PEERING_PENDING said here marks its peering too, and silenced every later pending
    # peering towards the same tenant (a tenant's own two networks, say).
    troubled = {peer[0]: _has_invalid_peering(ctx, peer[0]) for (_own, peer) in declared}
    for (own, peer), peering in declared.items():
        reverse = declared.get((peer, own))
        if reverse is None:
            if (peer, own) not in written and not troubled[peer[0]]:
                _pending(ctx, peering, peer)
            continue
        if id(peering) not in ctx.invalid and id(reverse) not in ctx.invalid:
            ctx.peered.setdefault(own, {})[peer] = peering


def _check_other_peers(ctx: Context, peering: Manifest,
                       declared: dict[tuple[Side, Side], Manifest]) -> bool:
    """A network's router routes to each of its peers: two peers whose CIDRs overlap
    would make its routes ambiguous."""
    own, peer = own_side(peering), peer_of(peering)
    peer_cidrs = ctx.networks.get(peer, {})
    for (side, other), earlier in declared.items():
        if side != own or other == peer:
            continue
        for version, other_cidr in ctx.networks.get(other, {}).items():
            peer_cidr = peer_cidrs.get(version)
            if peer_cidr is not None and (peer_cidr in other_cidr or other_cidr in peer_cidr):
                ctx.report("PEERING_CIDR_OVERLAP", peering, ("spec", "peer"),
                           f"{peer[0]}/{peer[1]} ({peer_cidr}) overlaps {other[0]}/{other[1]} "
                           f"({other_cidr}), which {own[0]}/{own[1]} is already peered with "
                           f"by VirtualNetworkPeering '{earlier.name}': its routes would be "
                           "ambiguous", "peer a network with networks whose CIDRs are disjoint")
                return False
    return True


def _check_one(ctx: Context, peering: Manifest, earlier: Manifest | None) -> bool:
    """Report what is wrong with one side; whether it may count as declared."""
    spec = peering.obj.spec
    own = ctx.lookup(peering, ("spec", "virtualNetwork"), "VirtualNetwork",
                     spec.virtual_network, peering.tenant)
    tenant, name = peer_of(peering)
    if id(peering) in ctx.requested and not ctx.declared("Tenant", None, str(tenant)):
        _pending(ctx, peering, (tenant, name), missing="Tenant")
        return False
    if tenant != peering.tenant and ctx.lookup(
            peering, ("spec", "peer", "tenant"), "Tenant", str(tenant)) is None:
        return False
    if (tenant, name) == own_side(peering):
        ctx.report("PEERING_INVALID", peering, ("spec", "peer"),
                   f"VirtualNetwork '{name}' cannot peer with itself",
                   "name another network as the peer")
        return False
    if earlier is not None:
        ctx.report("PEERING_INVALID", peering, ("spec", "peer"),
                   f"VirtualNetwork '{spec.virtual_network}' is already peered with "
                   f"{tenant}/{name} by VirtualNetworkPeering '{earlier.name}'",
                   "remove one of them")
        return False
    if id(peering) in ctx.requested and not ctx.declared("VirtualNetwork", tenant, name):
        _pending(ctx, peering, (tenant, name), missing="VirtualNetwork")
        return False
    peer = ctx.lookup(peering, ("spec", "peer", "virtualNetwork"), "VirtualNetwork", name,
                      tenant)
    if own is None or peer is None:
        return False
    return _check_pair(ctx, peering, own, peer)


def _check_pair(ctx: Context, peering: Manifest, own: Manifest, peer: Manifest) -> bool:
    """Region, managers and CIDRs of the two networks: what keeps them from peering."""
    named = f"{own.tenant}/{own.name} and {peer.tenant}/{peer.name}"
    if own.obj.spec.region != peer.obj.spec.region:
        ctx.report("PEERING_REGION_MISMATCH", peering, ("spec", "peer"),
                   f"{named} are in regions {own.obj.spec.region} and "
                   f"{peer.obj.spec.region}: a peering joins networks of one region")
        return False
    if not _same_fabric(ctx, peering, own, peer, named):
        return False
    for version, mine in sorted(ctx.networks.get((own.tenant, own.name), {}).items()):
        theirs = ctx.networks.get((peer.tenant, peer.name), {}).get(version)
        if theirs is not None and (mine in theirs or theirs in mine):
            ctx.report("PEERING_CIDR_OVERLAP", peering, ("spec", "peer"),
                       f"{named} overlap: {mine} and {theirs}; routes between them would "
                       "be ambiguous",
                       "peer networks whose CIDRs are disjoint")
            return False
    return True


def _same_fabric(ctx: Context, peering: Manifest, own: Manifest, peer: Manifest,
                 named: str) -> bool:
    """Both networks on the OVN fabric of one manager: a network on hosting clusters has
    no router of unet's to route through."""
    classes = [ctx.get("NetworkClass", None, ctx.vn_class.get((vn.tenant, vn.name)))
               for vn in (own, peer)]
    if any(c is None for c in classes):
        return False  # the class is reported where it is named
    for vn, cls in zip((own, peer), classes, strict=True):
        assert cls is not None
        if cls.obj.spec.k8s_manager is not None:
            ctx.report("PEERING_NOT_SUPPORTED", peering, ("spec", "peer") if vn is peer
                       else ("spec", "virtualNetwork"),
                       f"VirtualNetwork {vn.tenant}/{vn.name} is realised on hosting clusters "
                       f"(NetworkClass '{cls.name}' has k8sManager "
                       f"'{cls.obj.spec.k8s_manager}'): unet does not peer such networks yet",
                       "peer networks whose NetworkClass has no k8sManager")
            return False
    for vn, cls in zip((own, peer), classes, strict=True):
        assert cls is not None
        if not require(ctx, peering, ("spec", "peer") if vn is peer else
                       ("spec", "virtualNetwork"), cls.name, Capability.PEERINGS,
                       f"a VirtualNetworkPeering of {vn.tenant}/{vn.name}"):
            return False
    managers = {c.obj.spec.fabric_manager for c in classes if c is not None}
    if len(managers) != 1 or None in managers:
        ctx.report("PEERING_NOT_SUPPORTED", peering, ("spec", "peer"),
                   f"{named} are realised by different fabric managers "
                   f"({', '.join(sorted(str(m) for m in managers))})",
                   "peer networks of one fabric manager")
        return False
    return True


def _has_invalid_peering(ctx: Context, tenant: str | None) -> bool:
    """Whether the tenant declares a peering with an error: it may be the other side, and
    its error is reported already."""
    return ctx.declares_invalid("VirtualNetworkPeering", tenant) or any(
        id(p) in ctx.invalid for p in ctx.kind("VirtualNetworkPeering") if p.tenant == tenant)


def _pending(ctx: Context, peering: Manifest, peer: Side, missing: str | None = None
             ) -> None:
    """A warning: the other side is not declared. `missing` (a kind): nor is the peer
    network or its tenant, which never answered (removed, or misspelt here). A request
    that names it must not keep its tenant from removing its own network, nor the provider
    from removing the tenant: the requester's folder is not theirs to edit."""
    tenant, name = peer
    own = own_side(peering)
    if missing is not None:  # no close name: another tenant's names are not this one's
        what = f"there is no tenant {tenant}" if missing == "Tenant" else \
            f"tenant {tenant} declares no VirtualNetwork '{name}', nor the other side"
        ctx.report("PEERING_PENDING", peering, ("spec", "peer", "tenant")
                   if missing == "Tenant" else ("spec", "peer", "virtualNetwork"),
                   f"peering pending: {what}; nothing is routed",
                   f"check the name; remove this peering if the "
                   f"{'tenant' if missing == 'Tenant' else 'network'} is gone")
        return
    ctx.report("PEERING_PENDING", peering, ("spec", "peer"),
               f"peering pending: tenant {tenant} has not declared the other side; "
               "nothing is routed between "
               f"{own[0]}/{own[1]} and {tenant}/{name} until it is",
               f"in tenants/{tenant}/, a VirtualNetworkPeering with virtualNetwork: {name} "
               f"and peer: {{tenant: {own[0]}, virtualNetwork: {own[1]}}}")
