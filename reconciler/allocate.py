"""Stage `allocate`: deterministic addresses, MACs, segment ids and VIPs.

Allocations live in the backend objects that use them (principle 2). This stage
takes what is already allocated there (observed) and the validated model, keeps
every observed allocation that is still valid, and gives everything new the
lowest free value, in a fixed order, so the same inputs always give the same
result. Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import netaddr

from .check.context import AddressSpace
from .model import Model
from .objects import UNKNOWN
from .schema import Manifest


@dataclass(frozen=True, slots=True)
class Allocation:
    value: str
    known: bool = True  # False: chosen here, but only the apply makes it true (PR mode)


@dataclass
class Allocations:
    values: dict[str, Allocation] = field(default_factory=dict)
    # (code, message): what could not be allocated, e.g. a subnet with no free address
    problems: list[tuple[str, str]] = field(default_factory=list)

    def get(self, key: str) -> Allocation | None:
        return self.values.get(key)


# --- keys -----------------------------------------------------------------------------------


def port_key(workload: Manifest, index: int) -> str:
    return f"{workload.tenant}/{workload.kind}/{workload.name}/{index}"


def mac_of_port(port: str) -> str:
    return f"mac/{port}"


def ip_of_port(port: str, version: int) -> str:
    return f"ipv{version}/{port}"


def segment_key(tenant: str | None, subnet: str) -> str:
    return f"segment/{tenant}/{subnet}"


def vip_key(tenant: str | None, cluster: str, endpoint: str) -> str:
    return f"vip/{tenant}/{cluster}/{endpoint}"


def external_key(tenant: str | None, eip: str) -> str:
    return f"eip/{tenant}/{eip}"


def router_gateway_key(tenant: str | None, vn: str) -> str:
    return f"gateway/{tenant}/{vn}"


# --- the stage ------------------------------------------------------------------------------


def allocate(model: Model, observed: Mapping[str, str], new_are_unknown: bool = False
             ) -> Allocations:
    """All allocations of the model; observed ones are kept when still valid."""
    out = Allocations()
    _Allocator(model, observed, new_are_unknown, out).run()
    return out


class _Allocator:
    def __init__(self, model: Model, observed: Mapping[str, str], new_are_unknown: bool,
                 out: Allocations) -> None:
        self.model = model
        self.installation = model.installation
        self.observed = observed
        self.new_known = not new_are_unknown
        self.out = out

    def run(self) -> None:
        """Segment ids and external addresses are shared by all tenants: always allocated
        for the whole revision. Subnet addresses only for the tenants the model shows."""
        self.held = _held_addresses(self.observed)
        self._segments()
        for subnet in self.model.kind("Subnet"):
            self._subnet_addresses(subnet)
        self._external_addresses()

    def _keep(self, key: str, value: str) -> None:
        self.out.values[key] = Allocation(value, True)

    def _new(self, key: str, value: str) -> None:
        self.out.values[key] = Allocation(value if self.new_known else UNKNOWN, self.new_known)

    # segment ids: unique per k8s manager (one physical network), from the class's range
    def _segments(self) -> None:
        groups: dict[str, list[tuple[Manifest, Manifest]]] = {}
        for subnet in self.model.full.kind("Subnet"):
            cls = self.model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
            if cls is not None and cls.obj.spec.k8s_manager is not None:
                groups.setdefault(cls.obj.spec.k8s_manager, []).append((subnet, cls))
        for members in groups.values():
            used: set[int] = set()
            pending: list[tuple[Manifest, Manifest]] = []
            for subnet, cls in sorted(members, key=lambda pair: pair[0].ref):
                key = segment_key(subnet.tenant, subnet.name)
                seen = self.observed.get(key)
                seg_range = cls.obj.spec.segment_range
                if seen is not None and seen.isdigit() and int(seen) not in used \
                        and seg_range.start <= int(seen) <= seg_range.end:
                    used.add(int(seen))
                    self._keep(key, seen)
                else:
                    pending.append((subnet, cls))
            for subnet, cls in pending:
                seg_range = cls.obj.spec.segment_range
                free = next((s for s in range(seg_range.start, seg_range.end + 1)
                             if s not in used), None)
                if free is None:
                    self.out.problems.append(("SEGMENT_RANGE_EXHAUSTED",
                                              f"no free segment id for {subnet.ref} in "
                                              f"{seg_range.start}-{seg_range.end}"))
                    continue
                used.add(free)
                self._new(segment_key(subnet.tenant, subnet.name), str(free))

    # port addresses, MACs and cluster VIPs of one subnet
    def _subnet_addresses(self, subnet: Manifest) -> None:
        spaces = self.model.subnet_spaces(subnet.tenant, subnet.name)
        attachments = list(self._attachments_of(subnet))
        self._macs(subnet, attachments)
        for version, space in spaces.items():
            self._addresses(subnet, version, space, attachments)

    def _attachments_of(self, subnet: Manifest) -> Iterator[tuple[str, Manifest, object]]:
        for workload in self.model.workloads_by_subnet.get((subnet.tenant, subnet.name), ()):
            for index, attachment in enumerate(workload.obj.spec.network_attachments):
                if attachment.subnet == subnet.name:
                    yield port_key(workload, index), workload, attachment

    def _macs(self, subnet: Manifest, attachments: list[tuple[str, Manifest, object]]) -> None:
        used = {int(netaddr.EUI(a.mac_address)) for _p, _w, a in attachments
                if a.mac_address is not None}  # type: ignore[attr-defined]
        for port, _workload, attachment in attachments:
            key = mac_of_port(port)
            fixed = attachment.mac_address  # type: ignore[attr-defined]
            if fixed is not None:
                self._keep(key, str(netaddr.EUI(fixed, dialect=netaddr.mac_unix_expanded)))
                continue
            seen = self.observed.get(key)
            if seen is not None and _mac_int(seen) not in used:
                used.add(_mac_int(seen))
                self._keep(key, seen)
                continue
            mac = derived_mac(self.installation, port, used)
            used.add(_mac_int(mac))
            self._keep(key, mac)  # derived from identity: known even before apply

    def _addresses(self, subnet: Manifest, version: int, space: AddressSpace,
                   attachments: list[tuple[str, Manifest, object]]) -> None:
        taken = set(space.reserved)
        wanted: list[str] = []
        fixed_field = "ip_address" if version == 4 else "ipv6_address"
        for port, _workload, attachment in attachments:
            fixed = getattr(attachment, fixed_field)
            if fixed is not None:
                taken.add(int(netaddr.IPAddress(fixed)))
                self._keep(ip_of_port(port, version), str(netaddr.IPAddress(fixed)))
            else:
                wanted.append(ip_of_port(port, version))
        vips = self._vips(subnet, version)
        for key, fixed in vips:
            if fixed is not None:
                taken.add(int(netaddr.IPAddress(fixed)))
                self._keep(key, str(netaddr.IPAddress(fixed)))
        vip_keys = [key for key, fixed in vips if fixed is None]
        keep_in_vip_block = set(vip_keys)
        for key in [*wanted, *vip_keys]:  # keep what was observed before choosing anything new
            seen = self.observed.get(key)
            if seen is None:
                continue
            value = _ip_int(seen, version)
            in_block = space.vip_block is not None and \
                space.vip_block[0] <= (value or 0) <= space.vip_block[1]
            if value is not None and space.net.first <= value <= space.net.last \
                    and value not in taken and \
                    (not in_block or key in keep_in_vip_block):
                taken.add(value)
                self._keep(key, seen)
        taken |= self._held_elsewhere((subnet.tenant, version), space, {*wanted, *vip_keys})
        block = space.vip_block
        vip_ranges = [block] if block is not None else space.ranges
        for keys, ranges, skip in ((wanted, space.ranges, block), (vip_keys, vip_ranges, None)):
            self._hand_out(keys, _FreeAddresses(ranges, taken, skip), taken, version,
                           f"subnet {subnet.ref}")

    def _vips(self, subnet: Manifest, version: int) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = []
        for cluster in self.model.workloads_by_subnet.get((subnet.tenant, subnet.name), ()):
            spec = cluster.obj.spec
            if cluster.kind != "Cluster" or spec.network_attachments[0].subnet != subnet.name:
                continue
            for endpoint, fixed in (("api", spec.api_vip), ("ingress", spec.ingress_vip)):
                if fixed is not None and _ip_int(fixed, version) is None:
                    continue
                if fixed is None and version != 4:
                    continue  # allocated VIPs are IPv4, like the VIP block
                out.append((vip_key(cluster.tenant, cluster.name, endpoint), fixed))
        return out

    def _held_elsewhere(self, group: tuple[str | None, int], space: AddressSpace,
                        mine: set[str]) -> set[int]:
        """Addresses of `space` held by observed objects other than `mine`.

        They are not handed out again in the same run: a port kept because prune is
        off, or one deleted in a later wave, would otherwise share its address.
        """
        return {value for key, value in self.held.get(group, ())
                if key not in mine and space.net.first <= value <= space.net.last}

    # external addresses: ExternalIPs, and router gateway ports without a NATGateway
    def _external_addresses(self) -> None:
        per_pool: dict[str, list[tuple[str, str | None]]] = {}
        for eip in self.model.full.kind("ExternalIP"):
            per_pool.setdefault(eip.obj.spec.pool, []).append(
                (external_key(eip.tenant, eip.name), eip.obj.spec.address))
        for tenant, vn, pool in self.model.full.gateway_pools():
            per_pool.setdefault(pool, []).append((router_gateway_key(tenant, vn), None))
        for pool_name, wanted in sorted(per_pool.items()):
            space = self.model.pool_space(pool_name)
            if space is not None:
                self._pool(pool_name, space, wanted)

    def _pool(self, pool_name: str, space: AddressSpace,
              wanted: list[tuple[str, str | None]]) -> None:
        version = space.net.version
        taken = set(space.reserved)
        for key, fixed in wanted:
            if fixed is not None:
                taken.add(int(netaddr.IPAddress(fixed)))
                self._keep(key, str(netaddr.IPAddress(fixed)))
        for key, fixed in wanted:
            seen = self.observed.get(key)
            value = _ip_int(seen, version) if seen is not None and fixed is None else None
            if value is not None and value not in taken and \
                    any(a <= value <= b for a, b in space.ranges):
                taken.add(value)
                self._keep(key, str(netaddr.IPAddress(value, version)))
        taken |= self._held_elsewhere(("external", version), space, {k for k, _f in wanted})
        self._hand_out([k for k, _f in wanted], _FreeAddresses(space.ranges, taken, None),
                       taken, version, f"ExternalIPPool {pool_name}")

    def _hand_out(self, keys: list[str], free: _FreeAddresses, taken: set[int], version: int,
                  where: str) -> None:
        """The lowest free address to each key that has none yet."""
        for key in keys:
            if key in self.out.values:
                continue
            value = free.next()
            if value is None:
                code = "POOL_EXHAUSTED" if where.startswith("ExternalIPPool") \
                    else "SUBNET_TOO_SMALL"
                self.out.problems.append((code, f"{where} has no free IPv{version} address "
                                                f"for {key}"))
                continue
            taken.add(value)
            self._new(key, str(netaddr.IPAddress(value, version)))


def _held_addresses(observed: Mapping[str, str]) -> dict[tuple[str | None, int],
                                                        list[tuple[str, int]]]:
    """Observed addresses by (tenant, family) for ports and VIPs, ("external", family) else."""
    out: dict[tuple[str | None, int], list[tuple[str, int]]] = {}
    for key, text in observed.items():
        kind, _, rest = key.partition("/")
        if kind not in ("ipv4", "ipv6", "vip", "eip", "gateway"):
            continue
        try:
            ip = netaddr.IPAddress(text, flags=netaddr.INET_PTON)
        except (netaddr.AddrFormatError, TypeError, ValueError):
            continue
        owner = "external" if kind in ("eip", "gateway") else rest.split("/", 1)[0]
        out.setdefault((owner, ip.version), []).append((key, int(ip)))
    return out


class _FreeAddresses:
    """Lowest free addresses of some ranges, in increasing order."""

    def __init__(self, ranges: list[tuple[int, int]], taken: set[int],
                 skip: tuple[int, int] | None) -> None:
        self.ranges = sorted(ranges)
        self.taken = taken
        self.skip = skip
        self.index = 0
        self.cursor = self.ranges[0][0] if self.ranges else 0

    def next(self) -> int | None:
        while self.index < len(self.ranges):
            first, last = self.ranges[self.index]
            self.cursor = max(self.cursor, first)
            while self.cursor <= last:
                value = self.cursor
                self.cursor += 1
                if self.skip is not None and self.skip[0] <= value <= self.skip[1]:
                    self.cursor = self.skip[1] + 1
                    continue
                if value not in self.taken:
                    return value
            self.index += 1
        return None


def derived_mac(installation: str, identity: str, used: set[int]) -> str:
    """A locally administered unicast MAC from the identity; bumped past collisions."""
    for attempt in range(1000):
        digest = hashlib.sha256(f"{installation}/{identity}/{attempt}".encode()).digest()
        value = (0x02 << 40) | int.from_bytes(digest[:5], "big")
        if value not in used:
            return str(netaddr.EUI(value, dialect=netaddr.mac_unix_expanded))
    raise RuntimeError("no free MAC")  # 1000 collisions in 2^40 values: not reachable


def _mac_int(text: str) -> int:
    try:
        return int(netaddr.EUI(text))
    except (netaddr.AddrFormatError, TypeError, ValueError):
        return -1


def _ip_int(text: str, version: int) -> int | None:
    try:
        ip = netaddr.IPAddress(text, flags=netaddr.INET_PTON)
    except (netaddr.AddrFormatError, TypeError, ValueError):
        return None
    return int(ip) if ip.version == version else None
