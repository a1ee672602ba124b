"""Stage `allocate`: deterministic addresses, MACs, segment ids and VIPs.

Allocations live in the backend objects that use them (principle 2). This stage
takes what is already allocated there (observed) and the validated model, keeps
every observed allocation that is still valid, and gives everything new the
lowest free value, in a fixed order, so the same inputs always give the same
result. Nothing here does I/O.

An allocation in use never moves to another owner: every value the backends hold
(for a desired object, or for one kept because pruning is off, or deleted later in
the same apply) is never handed out again, and a fixed value that another owner
holds is refused (`ADDRESS_CONFLICT`), never taken from it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import netaddr

from .check.context import AddressSpace
from .check.netutil import address as parse_address
from .load import Path_
from .model import Model
from .models import Family, NetworkAttachment, primary_index, segment_of
from .objects import UNKNOWN, Held
from .schema import Manifest


@dataclass(frozen=True, slots=True)
class Allocation:
    value: str
    known: bool = True  # False: chosen here, but only the apply makes it true (PR mode)
    scope: str | None = None  # the Subnet of a port address, MAC or VIP

    def held(self) -> Held:
        return Held(self.value, self.scope)


@dataclass(frozen=True, slots=True)
class AllocationProblem:
    """What could not be allocated, and the manifest field that asked for it."""

    code: str
    message: str
    manifest: Manifest | None = None
    path: Path_ = ()
    hint: str | None = None


#: What one part of an allocation gave: its values and its problems.
Part = tuple[dict[str, Allocation], list[AllocationProblem]]


@dataclass(frozen=True)
class Shared:
    """What every tenant shares, as an allocation of the whole revision gave it: segment
    ids, and external and router gateway addresses (`allocate`'s `shared`)."""

    segments: Part
    external: Part


@dataclass
class Allocations:
    values: dict[str, Allocation] = field(default_factory=dict)
    problems: list[AllocationProblem] = field(default_factory=list)
    shared: Shared | None = None  # the part of what tenants share
    adopted: bool = False  # whether some row keeps values of its own (`ADOPTED`)

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


def router_gateway_key(tenant: str | None, vn: str, version: int = 4) -> str:
    """A router's external address of its own (the IPv4 one keeps its first key)."""
    return f"gateway/{tenant}/{vn}" + ("" if version == 4 else f"/ipv{version}")


#: Prefix of the values an adopted row keeps: `adopted/Logical_Switch/acme/web/name`.
ADOPTED = "adopted/"


def adopted_key(row_key: str, column: str) -> str:
    return f"{ADOPTED}{row_key}/{column}"


def holder_of(key: str) -> str:
    """The resource an allocation key belongs to, as Kind/tenant/name (nothing secret)."""
    kind, _, rest = key.partition("/")
    parts = rest.split("/")
    if kind in ("ipv4", "ipv6", "mac") and len(parts) == 4:
        return f"{parts[1]}/{parts[0]}/{parts[2]}"
    if kind == "segment" and parts[0] == "None":
        return f"ProviderNetwork/{parts[1]}"
    named = {"vip": "Cluster", "eip": "ExternalIP", "gateway": "VirtualNetwork",
             "segment": "Subnet"}.get(kind)
    return f"{named}/{parts[0]}/{parts[1]}" if named and len(parts) >= 2 else key


# --- the stage ------------------------------------------------------------------------------

#: Said of every fixed value another owner holds.
_HAND_OVER = ("pick a free value, or leave the field out to have one allocated; to hand this "
              "one over, remove it from its holder and apply that first, then claim it")

#: (port key, index, workload, attachment)
Attachment = tuple[str, int, Manifest, NetworkAttachment]


def allocate(model: Model, observed: Mapping[str, Held], new_are_unknown: bool = False,
             shared: Shared | None = None) -> Allocations:
    """All allocations of the model; observed ones are kept when still valid.

    `shared`: what tenants share, as an allocation of the same revision gave it with the
    same observed segment ids and external addresses: taken as it is (a render of some
    tenants then costs what they cost, not what the whole revision's pools do)."""
    out = Allocations()
    _Allocator(model, observed, new_are_unknown, out).run(shared)
    return out


class _Allocator:
    def __init__(self, model: Model, observed: Mapping[str, Held], new_are_unknown: bool,
                 out: Allocations) -> None:
        self.model = model
        self.installation = model.installation
        self.observed = observed
        self.held = observed.parsed if isinstance(observed, ParsedHoldings) \
            else _Holdings(observed)
        self.new_known = not new_are_unknown
        self.out = out

    def run(self, shared: Shared | None) -> None:
        """Segment ids and external addresses are shared by all tenants: always allocated
        for the whole revision (or taken from `shared`). Subnet addresses only for the
        tenants the model shows."""
        segments = self._part(self._segments, shared.segments if shared else None)
        for segment in (*self.model.kind("Subnet"), *self.model.kind("ProviderNetwork")):
            self._subnet_addresses(segment)
        external = self._part(self._external_addresses, shared.external if shared else None)
        self.out.shared = Shared(segments, external)
        self._adopted()

    def _adopted(self) -> None:
        """What a row had when it was adopted (`unet import`) and keeps, as a value it holds:
        its name, a router port's MAC (`adopted/<row key>/<column>`). Nothing else holds
        them, so they are kept as they are."""
        for key in self.observed:
            if key.startswith(ADOPTED):
                self._keep(key, self.observed[key].value)
                self.out.adopted = True

    def _part(self, allocate: Callable[[], None], known: Part | None) -> Part:
        """What `allocate` adds to the allocations (`known`: added as it is instead)."""
        if known is not None:
            self.out.values.update(known[0])
            self.out.problems.extend(known[1])
            return known
        values, problems = len(self.out.values), len(self.out.problems)
        allocate()  # a part only adds keys of its own kinds
        return (dict(itertools.islice(self.out.values.items(), values, None)),
                self.out.problems[problems:])

    def _keep(self, key: str, value: str, scope: str | None = None) -> None:
        self.out.values[key] = Allocation(value, True, scope)

    def _new(self, key: str, value: str, scope: str | None = None) -> None:
        self.out.values[key] = Allocation(value if self.new_known else UNKNOWN, self.new_known,
                                          scope)

    def _seen(self, key: str) -> str | None:
        found = self.observed.get(key)
        return found.value if found is not None else None

    def _claim(self, key: str, value: int, holders: Mapping[int, str], shown: str,
               manifest: Manifest, path: Path_) -> None:
        """A fixed value: refused when another owner's allocation holds it. The owner's own
        other port (its attachments reordered) hands it over, unless that port keeps it."""
        holder = holders.get(value)
        if holder is not None and holder != key and not self._handed_over(holder, key):
            self.out.problems.append(AllocationProblem(
                "ADDRESS_CONFLICT", f"{shown} is held by {holder_of(holder)}; an address in "
                "use never moves to another owner", manifest, path, _HAND_OVER))

    def _handed_over(self, holder: str, key: str) -> bool:
        """Whether `holder`, a key of the same resource as `key`, lets go of its value: it
        keeps none in this allocation (so far), or another one (it moved subnet)."""
        if holder_of(holder) != holder_of(key):
            return False
        kept = self.out.values.get(holder)
        return kept is None or kept.value != self._seen(holder)

    def _moved(self, key: str, shown: str, where: Manifest | None, why: str) -> None:
        """A held value the change makes unallocatable: it would move; refused instead."""
        self.out.problems.append(AllocationProblem(
            "ALLOCATION_IN_USE", f"{shown} is held by {holder_of(key)}, and {why}; an "
            "allocation in use never moves", where, ("spec",),
            "keep it allocatable, or first move its holder off it (another fixed value, or "
            "remove it) and apply that"))

    # segment ids: unique per k8s manager (one physical network), from the class's range
    def _segments(self) -> None:
        groups: dict[str, list[tuple[Manifest, Manifest]]] = {}
        for subnet in self.model.full.kind("Subnet"):
            cls = self.model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
            if cls is not None and cls.obj.spec.k8s_manager is not None:
                groups.setdefault(cls.obj.spec.k8s_manager, []).append((subnet, cls))
        desired = {segment_key(s.tenant, s.name) for members in groups.values()
                   for s, _cls in members}
        # Which physical network a kept or removed subnet's segment is on is not known
        # here: its id is held on all of them.
        stray = {value for key, value in self.held.segments.items() if key not in desired}
        provider = self._provider_segments()
        for members in groups.values():
            used: set[int] = stray | provider
            pending: list[tuple[Manifest, Manifest]] = []
            for subnet, cls in sorted(members, key=lambda pair: pair[0].ref):
                key = segment_key(subnet.tenant, subnet.name)
                seen = self.held.segments.get(key)
                seg_range = cls.obj.spec.segment_range
                if seen is not None and seen not in used \
                        and seg_range.start <= seen <= seg_range.end:
                    used.add(seen)
                    self._keep(key, str(seen))
                else:
                    pending.append((subnet, cls))
            for subnet, cls in pending:
                seg_range = cls.obj.spec.segment_range
                free = next((s for s in range(seg_range.start, seg_range.end + 1)
                             if s not in used), None)
                if free is None:
                    self.out.problems.append(AllocationProblem(
                        "SEGMENT_RANGE_EXHAUSTED", f"no free segment id for {subnet.ref} in "
                        f"{seg_range.start}-{seg_range.end}", subnet, ("spec",),
                        "make room (a larger segmentRange, fewer subnets) and plan again"))
                    continue
                used.add(free)
                self._new(segment_key(subnet.tenant, subnet.name), str(free))

    def _provider_segments(self) -> set[int]:
        """ProviderNetworks' fixed segment ids: never handed to a tenant Subnet (on any
        physical network, as a segment of unknown network is held), nor taken from one."""
        holders = {value: key for key, value in self.held.segments.items()
                   if not key.startswith(segment_key(None, ""))}  # provider ones: validated
        fixed: set[int] = set()
        for network in self.model.full.kind("ProviderNetwork"):
            segment = network.obj.spec.segment_id
            self._claim(segment_key(None, network.name), segment, holders, f"segment {segment}",
                        network, ("spec", "segmentId"))
            self._keep(segment_key(None, network.name), str(segment))
            fixed.add(segment)
        return fixed

    # port addresses, MACs and cluster VIPs of one subnet
    def _subnet_addresses(self, subnet: Manifest) -> None:
        spaces = self.model.subnet_spaces(subnet.tenant, subnet.name)
        attachments = list(self._attachments_of(subnet))
        self._macs(subnet, attachments)
        for version, space in spaces.items():
            ports = [a for a in attachments if version in self.model.port_spaces(a[2], a[3])]
            self._addresses(subnet, version, space, ports)

    def _attachments_of(self, subnet: Manifest) -> Iterator[Attachment]:
        for workload in self.model.workloads_by_subnet.get((subnet.tenant, subnet.name), ()):
            for index, attachment in enumerate(workload.obj.spec.network_attachments):
                if segment_of(workload.tenant, attachment) == (subnet.tenant, subnet.name):
                    yield port_key(workload, index), index, workload, attachment

    def _macs(self, subnet: Manifest, attachments: list[Attachment]) -> None:
        held = self.held.macs(subnet)
        used: set[int] = set()
        for port, _index, _workload, attachment in attachments:
            key = mac_of_port(port)
            seen = self._seen(key)
            if attachment.mac_address is None and seen is not None \
                    and _mac_int(seen) not in used:
                used.add(_mac_int(seen))
                held[_mac_int(seen)] = key  # kept here, wherever it was recorded
                self._keep(key, seen, subnet.ref)
        for port, index, workload, attachment in attachments:
            if attachment.mac_address is not None:
                key, mac = mac_of_port(port), netaddr.EUI(attachment.mac_address)
                shown = str(netaddr.EUI(mac, dialect=netaddr.mac_unix_expanded))
                self._claim(key, int(mac), held, shown, workload,
                            ("spec", "networkAttachments", index, "macAddress"))
                used.add(int(mac))
                self._keep(key, shown, subnet.ref)
        used |= held.keys()
        for port, _index, _workload, _attachment in attachments:
            key = mac_of_port(port)
            if key not in self.out.values:
                mac = derived_mac(self.installation, port, used)
                used.add(_mac_int(mac))
                self._keep(key, mac, subnet.ref)  # derived from identity: known before apply

    def _addresses(self, subnet: Manifest, version: int, space: AddressSpace,
                   attachments: list[Attachment]) -> None:
        held = self.held.addresses(subnet, version, space)
        reserved = space.reserved - space.kept_if_held  # what no held allocation keeps
        taken = set(reserved)
        family = Family(version)
        claims: list[tuple[str, str, Manifest, Path_]] = []
        wanted: list[str] = []
        for port, index, workload, attachment in attachments:
            fixed = getattr(attachment, family.address_attr)
            key = ip_of_port(port, version)
            if fixed is not None:
                claims.append((key, fixed, workload, ("spec", "networkAttachments", index,
                                                      family.address_field)))
            else:
                wanted.append(key)
        vip_keys: list[str] = []
        for key, fixed, cluster, field_name in self._vips(subnet, version):
            if fixed is not None:
                claims.append((key, fixed, cluster, ("spec", field_name)))
            else:
                vip_keys.append(key)
        block = space.vip_block
        for key in [*wanted, *vip_keys]:  # what is held stays where it is
            seen = self._seen(key)
            value = _ip_int(seen, version) if seen is not None else None
            if seen is None or value is None or not space.net.first <= value <= space.net.last:
                continue  # new, or from another subnet (a port moving is replaced)
            in_block = block is not None and block[0] <= value <= block[1]
            if value in reserved or (in_block and key not in vip_keys):
                self._moved(key, seen, subnet, f"subnet {subnet.ref} no longer hands it out "
                            "(reserved: its gateway, an excluded address, or the VIP block)")
            elif value not in taken:
                taken.add(value)
                held[value] = key  # kept here, wherever it was recorded
                self._keep(key, seen, subnet.ref)
        for key, fixed, manifest, path in claims:
            address = parse_address(fixed)
            self._claim(key, int(address), held, str(address), manifest, path)
            taken.add(int(address))
            self._keep(key, str(address), subnet.ref)
        taken |= held.keys() | space.reserved
        vip_ranges = [block] if block is not None else space.ranges
        for keys, ranges, skip in ((wanted, space.ranges, block), (vip_keys, vip_ranges, None)):
            self._hand_out(keys, _FreeAddresses(ranges, taken, skip), taken, version,
                           f"subnet {subnet.ref}", subnet, subnet.ref)

    def _vips(self, subnet: Manifest, version: int
              ) -> list[tuple[str, str | None, Manifest, str]]:
        """(key, fixed value, cluster, field) of the VIPs of clusters on this subnet."""
        out: list[tuple[str, str | None, Manifest, str]] = []
        for cluster in self.model.workloads_by_subnet.get((subnet.tenant, subnet.name), ()):
            spec = cluster.obj.spec
            primary = spec.network_attachments[primary_index(spec.network_attachments)] \
                if cluster.kind == "Cluster" else None
            if primary is None or primary.subnet != subnet.name:
                continue
            for endpoint, field_name, fixed in (("api", "apiVip", spec.api_vip),
                                                ("ingress", "ingressVip", spec.ingress_vip)):
                if fixed is not None and _ip_int(fixed, version) is None:
                    continue
                if fixed is None and version != 4:
                    continue  # allocated VIPs are IPv4, like the VIP block
                out.append((vip_key(cluster.tenant, cluster.name, endpoint), fixed, cluster,
                            field_name))
        return out

    # external addresses: ExternalIPs, and router gateway ports without a NATGateway
    def _external_addresses(self) -> None:
        per_pool: dict[str, list[tuple[str, Manifest | None]]] = {}
        for eip in self.model.full.kind("ExternalIP"):
            per_pool.setdefault(eip.obj.spec.pool, []).append(
                (external_key(eip.tenant, eip.name), eip))
        for tenant, vn, version, pool in self.model.full.gateway_pools():
            per_pool.setdefault(pool, []).append((router_gateway_key(tenant, vn, version),
                                                  None))
        for pool_name, wanted in sorted(per_pool.items()):
            space = self.model.pool_space(pool_name)
            if space is not None:
                self._pool(pool_name, space, wanted)

    def _pool(self, pool_name: str, space: AddressSpace,
              wanted: list[tuple[str, Manifest | None]]) -> None:
        version = space.net.version
        held = self.held.external(version, space)
        taken = set(space.reserved)
        fixed = {key: eip for key, eip in wanted
                 if eip is not None and eip.obj.spec.address is not None}
        pool = self.model.get("ExternalIPPool", None, pool_name)
        for key, _eip in wanted:
            seen = self._seen(key)
            value = _ip_int(seen, version) if seen is not None else None
            if key in fixed or value is None or not space.net.first <= value <= space.net.last:
                continue
            if value in space.reserved:
                self._moved(key, seen or "", pool, f"ExternalIPPool {pool_name} no longer "
                            "hands it out (its gateway, or excluded)")
            elif value not in taken:
                taken.add(value)
                held[value] = key
                self._keep(key, str(netaddr.IPAddress(value, version)))
        for key, eip in fixed.items():
            address = parse_address(eip.obj.spec.address)
            self._claim(key, int(address), held, str(address), eip, ("spec", "address"))
            taken.add(int(address))
            self._keep(key, str(address))
        taken |= held.keys()
        self._hand_out([k for k, _eip in wanted], _FreeAddresses(space.ranges, taken, None),
                       taken, version, f"ExternalIPPool {pool_name}", pool)

    def _hand_out(self, keys: list[str], free: _FreeAddresses, taken: set[int], version: int,
                  where: str, manifest: Manifest | None, scope: str | None = None) -> None:
        """The lowest free address to each key that has none yet."""
        for key in keys:
            if key in self.out.values:
                continue
            value = free.next()
            if value is None:
                code = "POOL_EXHAUSTED" if where.startswith("ExternalIPPool") \
                    else "SUBNET_TOO_SMALL"
                self.out.problems.append(AllocationProblem(
                    code, f"{where} has no free IPv{version} address for {key}", manifest,
                    ("spec",), "make room (a larger range or subnet, fewer consumers) and "
                    "plan again"))
                continue
            taken.add(value)
            self._new(key, str(netaddr.IPAddress(value, version)), scope)


class ParsedHoldings(Mapping[str, Held]):
    """Observed allocations, parsed once for several renders with the same ones (parsing
    100,000 of them takes a quarter of a second). A read-only view: the mapping it is made
    of must not change while it is in use."""

    def __init__(self, observed: Mapping[str, Held]) -> None:
        self._observed = observed
        self.parsed = _Holdings(observed)

    @classmethod
    def of(cls, observed: Mapping[str, Held]) -> ParsedHoldings:
        return observed if isinstance(observed, ParsedHoldings) else cls(observed)

    @property
    def observed(self) -> Mapping[str, Held]:
        return self._observed

    def updated(self, observed: Mapping[str, Held], keys: Iterable[str]) -> ParsedHoldings:
        """The holdings of `observed`, which differ from these in `keys` only: these, with
        those keys parsed again (these stay as they are)."""
        out = ParsedHoldings.__new__(ParsedHoldings)
        out._observed = observed
        out.parsed = self.parsed.updated(self._observed, observed, keys)
        return out

    def __getitem__(self, key: str) -> Held:
        return self._observed[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._observed)

    def __len__(self) -> int:
        return len(self._observed)


#: (family or "mac", value, key) of a recorded address or MAC.
_Entry = tuple[int | str, int, str]
#: Where recorded addresses and MACs are kept: ("subnet", its ref), ("tenant", its name)
#: when the subnet is unknown, ("external", "") for external and gateway addresses.
_Where = tuple[str, str]


class _Holdings:
    """The observed allocations, by the space each one is drawn from, parsed once."""

    def __init__(self, observed: Mapping[str, Held]) -> None:
        self.segments: dict[str, int] = {}
        self._lists: dict[_Where, list[_Entry]] = defaultdict(list)
        for key, held in observed.items():
            self._put(key, held, True)

    def _put(self, key: str, held: Held, add: bool, copied: bool = False) -> None:
        """Keep (`add`) or forget what `key` records; `copied`: in a new list (the one
        there is shared with other holdings)."""
        kind, _, rest = key.partition("/")
        if kind == "segment":
            if not add:
                self.segments.pop(key, None)
            elif held.value.isdigit():
                self.segments[key] = int(held.value)
            return
        if kind in ("ipv4", "ipv6", "vip", "mac"):
            parsed = (("mac", _mac_int(held.value)) if kind == "mac"
                      else _ip_family_int(held.value))
            where = ("subnet", held.scope) if held.scope is not None \
                else ("tenant", rest.split("/", 1)[0])
        elif kind in ("eip", "gateway"):
            parsed, where = _ip_family_int(held.value), ("external", "")
        else:
            return
        if parsed is None:
            return
        if not add:
            self._lists[where] = [e for e in self._lists.get(where, ()) if e[2] != key]
        elif copied:
            self._lists[where] = [*self._lists.get(where, ()), (*parsed, key)]
        else:
            self._lists[where].append((*parsed, key))

    def updated(self, before: Mapping[str, Held], after: Mapping[str, Held],
                keys: Iterable[str]) -> _Holdings:
        """The holdings of `after`, these being those of `before`: the lists that hold
        `keys` made anew, every other shared with these."""
        out = copy.copy(self)
        out.segments = dict(self.segments)
        out._lists = defaultdict(list, self._lists)
        for key in keys:
            old, new = before.get(key), after.get(key)
            if old is not None:
                out._put(key, old, False)
            if new is not None:
                out._put(key, new, True, copied=True)
        return out

    def _of(self, subnet: Manifest) -> list[_Entry]:
        return [*self._lists.get(("subnet", subnet.ref), ()),
                *self._lists.get(("tenant", str(subnet.tenant)), ())]

    def addresses(self, subnet: Manifest, version: int, space: AddressSpace) -> dict[int, str]:
        out: dict[int, str] = {}
        for family, value, key in self._of(subnet):
            if family == version and space.net.first <= value <= space.net.last:
                out.setdefault(value, key)
        return out

    def macs(self, subnet: Manifest) -> dict[int, str]:
        return {value: key for family, value, key in self._of(subnet) if family == "mac"}

    def external(self, version: int, space: AddressSpace) -> dict[int, str]:
        """Pools never overlap: an external address is held in the pool that holds it."""
        out: dict[int, str] = {}
        for family, value, key in self._lists.get(("external", ""), ()):
            if family == version and space.net.first <= value <= space.net.last:
                out.setdefault(value, key)
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
    found = _ip_family_int(text)
    return found[1] if found is not None and found[0] == version else None


def _ip_family_int(text: str) -> tuple[int, int] | None:
    """(family, value) of an address; None when it is not one."""
    # Parse failures raise, and the garbage collector is paused while planning: their
    # tracebacks would pile up. Text with a ':' is only ever IPv6.
    if not text:
        return None
    version = 6 if ":" in text else 4
    try:
        return version, int(netaddr.IPAddress(text, version, flags=netaddr.INET_PTON))
    except (netaddr.AddrFormatError, TypeError, ValueError):
        return None
