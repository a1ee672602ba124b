"""External access: ExternalIPs, their attachments, NATGateways, cluster prerequisites."""

from __future__ import annotations

from collections import defaultdict

from ..diagnostics import Diagnostic, json_pointer
from ..models import Capability, Family, first_subnet, primary_index
from ..schema import Manifest
from .classes import require
from .context import Context, Path_
from .netutil import family_of, parse_ip


def check_external_ips(ctx: Context) -> None:
    per_pool: dict[str, list[Manifest]] = defaultdict(list)
    claimed: dict[tuple[str, int], Manifest] = {}
    for eip in ctx.kind("ExternalIP"):
        spec = eip.obj.spec
        pool = ctx.lookup(eip, ("spec", "pool"), "ExternalIPPool", spec.pool)
        if pool is None:
            continue
        tenant = ctx.get("Tenant", None, eip.tenant)
        if pool.obj.spec.tenants is not None and eip.tenant not in pool.obj.spec.tenants \
                and not ctx.rejected(pool, ("spec", "tenants")):
            ctx.report("POOL_NOT_ALLOWED", eip, ("spec", "pool"),
                       f"tenant {eip.tenant} may not allocate from ExternalIPPool '{pool.name}'",
                       "ask the provider to add the tenant to the pool's tenants")
            continue
        if tenant is not None and pool.obj.spec.region not in tenant.obj.spec.regions:
            ctx.report("REGION_NOT_ALLOWED", eip, ("spec", "pool"),
                       f"ExternalIPPool '{pool.name}' is in region {pool.obj.spec.region}, which "
                       f"tenant {eip.tenant} may not use")
            continue
        space = ctx.pools.get(pool.name)
        if space is None:
            continue
        per_pool[pool.name].append(eip)
        if spec.address is None:
            continue
        ip = parse_ip(ctx, eip, ("spec", "address"), spec.address, version=space.net.version)
        if ip is None:
            continue
        value = int(ip)
        outside = space.ranges_known and not any(a <= value <= b for a, b in space.ranges)
        if value in space.reserved or outside:
            ctx.report("ADDRESS_INVALID", eip, ("spec", "address"),
                       f"{ip} is not an allocatable address of ExternalIPPool '{pool.name}'",
                       "leave address out to have one allocated")
        elif (pool.name, value) in claimed:
            other = claimed[(pool.name, value)]
            if other.tenant != eip.tenant:  # a shared pool: each tenant's review sees it
                ctx.report("ADDRESS_CONFLICT", other, ("spec", "address"),
                           f"{ip} is also claimed by {eip.ref} in the shared pool "
                           f"'{pool.name}'", "give each ExternalIP its own address")
            ctx.report("ADDRESS_CONFLICT", eip, ("spec", "address"),
                       f"{ip} is already claimed by {other.ref}")
        else:
            claimed[(pool.name, value)] = eip
    for pool_name, eips in per_pool.items():
        _check_capacity(ctx, pool_name, eips)


def _check_capacity(ctx: Context, pool_name: str, eips: list[Manifest]) -> None:
    space = ctx.pools[pool_name]
    if not space.ranges_known:
        return  # a rejected range is reported; the pool's size is unknown
    capacity = sum(last - first + 1 for first, last in space.ranges)
    capacity -= sum(1 for a in space.reserved if any(lo <= a <= hi for lo, hi in space.ranges))
    if len(eips) <= capacity:
        return
    floating = sorted((e for e in eips if e.obj.spec.address is None), key=lambda e: e.ref)
    for eip in floating[max(0, capacity - (len(eips) - len(floating))):]:
        ctx.report("POOL_EXHAUSTED", eip, ("spec", "pool"),
                   f"ExternalIPPool '{pool_name}' has {capacity} addresses and {len(eips)} "
                   "ExternalIPs ask for one", "use another pool or release an ExternalIP")


def check_consumers(ctx: Context) -> None:
    consumers: dict[tuple[str | None, str], Manifest] = {}
    nat_per_network: dict[tuple[str | None, str], Manifest] = {}
    for attachment in ctx.kind("ExternalIPAttachment"):
        eip = _consume(ctx, attachment, consumers)
        _check_ports(ctx, attachment)
        vn = _check_target(ctx, attachment, eip)
        if vn is not None:
            require(ctx, attachment, ("kind",), ctx.vn_class.get((attachment.tenant, vn.name)),
                    Capability.EXTERNAL_IPS, "an ExternalIPAttachment")
            _same_region(ctx, attachment, eip, vn)
    for gateway in ctx.kind("NATGateway"):
        eip = _consume(ctx, gateway, consumers)
        spec = gateway.obj.spec
        # Counted by the network it names, found or not: a network whose manifest is
        # broken is reported once, not again as a Cluster lacking its gateway.
        first = nat_per_network.setdefault((gateway.tenant, spec.virtual_network), gateway)
        if first is not gateway:
            ctx.report("NAT_GATEWAY_DUPLICATE", gateway, ("spec", "virtualNetwork"),
                       f"VirtualNetwork '{spec.virtual_network}' already has NATGateway "
                       f"'{first.name}'", "one NATGateway serves the whole VirtualNetwork")
        vn = ctx.lookup(gateway, ("spec", "virtualNetwork"), "VirtualNetwork",
                        spec.virtual_network, gateway.tenant)
        if vn is None:
            continue
        require(ctx, gateway, ("kind",), ctx.vn_class.get((gateway.tenant, vn.name)),
                Capability.NAT_GATEWAYS, "a NATGateway")
        _same_region(ctx, gateway, eip, vn)
        _check_nat_family(ctx, gateway, eip, vn)
    _check_cluster_prerequisites(ctx, nat_per_network)


def _check_ports(ctx: Context, attachment: Manifest) -> None:
    seen: dict[tuple[str, int], int] = {}
    for index, forward in enumerate(attachment.obj.spec.ports or ()):
        first = seen.setdefault((forward.protocol, forward.external_port), index)
        if first != index:
            ctx.report("PORT_FORWARD_DUPLICATE", attachment, ("spec", "ports", index),
                       f"{forward.protocol} port {forward.external_port} is already forwarded "
                       f"by ports[{first}]", "forward each external port once")


def _consume(ctx: Context, consumer: Manifest,
             consumers: dict[tuple[str | None, str], Manifest]) -> Manifest | None:
    name = consumer.obj.spec.external_ip
    eip = ctx.lookup(consumer, ("spec", "externalIP"), "ExternalIP", name, consumer.tenant)
    if eip is None:
        return None
    first = consumers.setdefault((consumer.tenant, name), consumer)
    if first is not consumer:
        ctx.report("EXTERNAL_IP_IN_USE", consumer, ("spec", "externalIP"),
                   f"ExternalIP '{name}' is already used by {first.ref}",
                   "each consumer needs its own ExternalIP")
    return eip


def _family(ctx: Context, eip: Manifest | None) -> int | None:
    """An ExternalIP's address family: its pool's (None: not known)."""
    space = ctx.pools.get(eip.obj.spec.pool) if eip is not None else None
    return space.net.version if space is not None else None


def _check_nat_family(ctx: Context, gateway: Manifest, eip: Manifest | None,
                      vn: Manifest) -> None:
    """A NATGateway translates its network's CIDR of its ExternalIP's family (v6→v6 for
    an IPv6 one): the network must have one."""
    version = _family(ctx, eip)
    if eip is None or version is None or \
            Family(version).cidr_of(vn.obj.spec) is not None or \
            ctx.rejected(vn, ("spec", Family(version).cidr_field)):  # reported at the network
        return
    family = Family(version).label
    ctx.report("NAT_GATEWAY_FAMILY_MISSING", gateway, ("spec", "externalIP"),
               f"NATGateway '{gateway.name}' cannot translate {family} ExternalIP "
               f"'{eip.name}': VirtualNetwork '{vn.name}' has no {family} CIDR",
               f"use an ExternalIP of a pool of the network's family, or give the network an "
               f"{family} CIDR")


def _check_target(ctx: Context, attachment: Manifest, eip: Manifest | None
                  ) -> Manifest | None:
    """Check the target; return its VirtualNetwork when it is declared and placed."""
    target = attachment.obj.spec.target
    path: Path_ = ("spec", "target")
    if target.kind == "Cluster" and target.endpoint is None:
        ctx.report("ENDPOINT_REQUIRED", attachment, path,
                   "a Cluster target needs endpoint: api or ingress")
    elif target.kind != "Cluster" and target.endpoint is not None:
        ctx.report("ENDPOINT_FORBIDDEN", attachment, (*path, "endpoint"),
                   f"endpoint applies to Cluster targets only, not {target.kind}",
                   "remove endpoint")
    workload = ctx.get(target.kind, attachment.tenant, target.name)
    if workload is None:
        if not ctx.declared(target.kind, attachment.tenant, target.name):
            ctx.diagnostics.append(_pending(attachment))
        return None
    subnet = ctx.get("Subnet", attachment.tenant,
                     first_subnet(workload.obj.spec.network_attachments))
    if subnet is None:
        return None
    _check_reachable(ctx, attachment, workload, eip)
    return ctx.get("VirtualNetwork", attachment.tenant, subnet.obj.spec.virtual_network)


def _check_reachable(ctx: Context, attachment: Manifest, workload: Manifest,
                     eip: Manifest | None) -> None:
    """The NAT goes to the target's address of the ExternalIP's family (v6→v6, never
    NAT64), behind the router: its primary subnet needs a CIDR and a gateway of that
    family, and a Cluster's VIP (in its only subnet) must be of that family."""
    version = _family(ctx, eip) or 4
    family = Family(version).label
    attachments = workload.obj.spec.network_attachments
    primary = attachments[primary_index(attachments)]
    spaces = ctx.subnets.get((attachment.tenant, primary.subnet))
    if spaces is None:
        return  # the subnet is reported
    space = spaces.get(version)
    endpoint = attachment.obj.spec.target.endpoint
    vip = _vip_family(workload, endpoint)
    if space is None and _rejected_family(ctx, attachment.tenant, primary.subnet, version):
        return  # it has one, rejected and reported
    if space is None:
        why = f"its subnet '{primary.subnet}' has no {family} CIDR"
    elif space.gateway is None:
        why = f"its subnet '{primary.subnet}' has no {family} gateway"
    elif vip is not None and vip != version:
        why = f"its {endpoint} VIP is {Family(vip).label}"
    else:
        return
    where = f"at {family} ExternalIP '{eip.name}'" if eip is not None else "from outside"
    ctx.report("ATTACHMENT_TARGET_UNREACHABLE", attachment, ("spec", "target", "name"),
               f"{workload.ref} cannot be reached {where}: {why}",
               f"make the workload's primary subnet one with an {family} CIDR and gateway, "
               "or use an ExternalIP of the target's family")


def _vip_family(workload: Manifest, endpoint: str | None) -> int | None:
    """The family of a Cluster's VIP for `endpoint`: a fixed one's; allocated ones are
    IPv4. None for other workloads."""
    if workload.kind != "Cluster" or endpoint is None:
        return None
    fixed = workload.obj.spec.api_vip if endpoint == "api" else workload.obj.spec.ingress_vip
    return family_of(fixed) if fixed is not None else 4


def _rejected_family(ctx: Context, tenant: str | None, subnet_name: str | None,
                     version: int) -> bool:
    """Whether a check rejected the subnet's CIDR or gateway of `version` (so it has no
    space of that family)."""
    subnet = ctx.get("Subnet", tenant, subnet_name)
    family = Family(version)
    return subnet is not None and ctx.rejected(
        subnet, ("spec", family.cidr_field), ("spec", family.gateway_field))


def _pending(attachment: Manifest) -> Diagnostic:
    target = attachment.obj.spec.target
    path = ("spec", "target", "name")
    return Diagnostic("TARGET_PENDING",
                      f"{target.kind} '{target.name}' is not declared (yet): the attachment "
                      "stays pending until it appears",
                      file=attachment.doc.file, line=attachment.doc.line_of(path),
                      path=json_pointer(path))


def _same_region(ctx: Context, consumer: Manifest, eip: Manifest | None, vn: Manifest) -> None:
    if eip is None:
        return
    pool = ctx.get("ExternalIPPool", None, eip.obj.spec.pool)
    if pool is not None and pool.obj.spec.region != vn.obj.spec.region:
        ctx.report("REGION_NOT_ALLOWED", consumer, ("spec", "externalIP"),
                   f"ExternalIP '{eip.name}' comes from region {pool.obj.spec.region}; "
                   f"VirtualNetwork '{vn.name}' is in {vn.obj.spec.region}",
                   "use an ExternalIP of a pool in the same region")


def _check_cluster_prerequisites(ctx: Context,
                                 nat_per_network: dict[tuple[str | None, str], Manifest]) -> None:
    api_targets = {
        (a.tenant, a.obj.spec.target.name)
        for a in ctx.kind("ExternalIPAttachment")
        if a.obj.spec.target.kind == "Cluster" and a.obj.spec.target.endpoint == "api"
    }
    unsure_api = _unsure_tenants(ctx, "ExternalIPAttachment", ("spec", "target"))
    unsure_nat = _unsure_tenants(ctx, "NATGateway", ("spec", "virtualNetwork"))
    for cluster in ctx.kind("Cluster"):
        subnet = ctx.get("Subnet", cluster.tenant,
                         first_subnet(cluster.obj.spec.network_attachments))
        if subnet is None or ctx.rejected(subnet, ("spec", "virtualNetwork")):
            continue
        vn = subnet.obj.spec.virtual_network
        missing = []
        if (cluster.tenant, cluster.name) not in api_targets and cluster.tenant not in unsure_api:
            missing.append("without an ExternalIPAttachment with endpoint api: its API is "
                           "unreachable from outside until one exists")
        if (cluster.tenant, vn) not in nat_per_network and cluster.tenant not in unsure_nat:
            missing.append(f"without a NATGateway on VirtualNetwork '{vn}': its nodes cannot "
                           "open connections to the outside (image pulls, updates) until one "
                           "exists")
        if missing:  # OSAC leaves the order to the cluster template: a warning, not a veto
            ctx.diagnostics.append(Diagnostic(
                "CLUSTER_PREREQUISITE_MISSING",
                f"Cluster '{cluster.name}' is planned " + "; and ".join(missing),
                file=cluster.doc.file, line=cluster.doc.line_of(("kind",)), path="/kind",
                hint="declare them in the same tenant when the cluster should be reached "
                     "or reach out"))


def _unsure_tenants(ctx: Context, kind: str, field: Path_) -> set[str | None]:
    """Tenants with an invalid `kind` (or one whose `field` is rejected) that may be the one a
    cluster lacks: its error is reported, and a warning would repeat it."""
    tenants = {tenant for k, tenant, _name in ctx.declared_invalid if k == kind}
    return tenants | {m.tenant for m in ctx.kind(kind) if ctx.rejected(m, field)}


def check_quotas(ctx: Context) -> None:
    counts: dict[tuple[str | None, str], list[Manifest]] = defaultdict(list)
    for manifest in ctx.manifests:
        if manifest.obj.scope == "tenant":
            counts[(manifest.tenant, manifest.kind)].append(manifest)
    for tenant in ctx.kind("Tenant"):
        for kind, limit in (tenant.obj.spec.quotas or {}).items():
            members = counts.get((tenant.name, kind), [])
            if len(members) > limit:
                for extra in sorted(members, key=lambda m: m.name)[limit:]:
                    ctx.report("QUOTA_EXCEEDED", extra, ("metadata", "name"),
                               f"tenant {tenant.name} declares {len(members)} {kind}s; its "
                               f"quota is {limit}", "ask the provider to raise spec.quotas")
