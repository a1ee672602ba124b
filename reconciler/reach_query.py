"""`unet reach FROM TO`: whether a new connection from one end to the other is let through,
and why, answered from the reachability model (reach.py) of a revision.

An end is `internet`, an address or CIDR, or `tenant/workload` (optionally `/nic`, the
attachment's position). An address that is a NIC's stands for that NIC; an external
address stands for the NIC it leads to. From a NIC, a connection must pass its own egress
rules and then, on the way, the target's ingress rules: inside one network directly, to
another network through the target's public address (leaving by the source network's
NATGateway, whose address the target then sees), out to the internet through the
NATGateway of the family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import netaddr

from .allocate import port_key
from .check.netutil import network
from .contract import Probe
from .errors import UnetError
from .models import Family
from .reach import INTERNET, Cause, Nic, Public, Reachability, Traffic


@dataclass
class End:
    """One end of a question: NICs, or addresses outside every NIC (`space`)."""

    text: str
    nics: list[Nic] = field(default_factory=list)
    space: netaddr.IPNetwork | None = None  # None with no NIC: the whole internet
    public: Public | None = None  # an external address given as the target

    @property
    def outside(self) -> bool:
        return not self.nics


#: Where a probe from "the internet" is sent from: benchmarking space (RFC 2544, RFC 5180),
#: outside every network.
OUTSIDE = {4: "198.18.0.1", 6: "2001:2::1"}


@dataclass(frozen=True)
class Check:
    """One path the model's answer rests on, as a probe a fabric can trace: the model's
    verdict for it (`allowed`, `why`), and the network (tenant, VirtualNetwork) whose
    fabric the probe enters."""

    probe: Probe
    allowed: bool
    why: str
    network: tuple[str, str]


@dataclass
class Answer:
    allowed: bool
    because: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "because": self.because}


def parse_port(text: str | None) -> tuple[str, int | None]:
    """`tcp/443`, `udp/53`, `icmp`, `icmpv6` → (protocol, port); none: tcp, any port."""
    if text is None:
        return "tcp", None
    protocol, _, port = text.partition("/")
    if protocol not in ("tcp", "udp", "icmp", "icmpv6") or (port and not port.isdigit()) or (
            port and not 1 <= int(port) <= 65535) or (port and protocol.startswith("icmp")):
        raise UnetError(f"--port {text}: write PROTOCOL/PORT (tcp/443, udp/53) or icmp, icmpv6")
    return protocol, int(port) if port else None


def resolve(reach: Reachability, text: str) -> End:
    """An end as people write it; an unknown workload is an error naming what exists."""
    if text == INTERNET:
        return End(text)
    if "/" in text and not _is_network(text):
        parts = text.split("/")
        if len(parts) not in (2, 3):
            raise UnetError(f"'{text}': write tenant/workload, tenant/workload/nic, an "
                            "address, a CIDR or internet")
        prefix = "/".join(parts) + ("" if len(parts) == 3 else "/")
        nics = [n for name, n in sorted(reach.nics.items())
                if (name == prefix if len(parts) == 3 else name.startswith(prefix))]
        if not nics:
            known = sorted({n.name.rsplit("/", 1)[0] for n in reach.nics.values()
                            if n.tenant == parts[0]})
            raise UnetError(f"no workload NIC '{text}' in this revision" + (
                f"; workloads of {parts[0]}: {', '.join(known)}" if known else ""))
        return End(text, nics)
    try:
        space = network(text)
    except (netaddr.AddrFormatError, ValueError) as exc:
        raise UnetError(f"'{text}' is not internet, an address, a CIDR or tenant/workload"
                        ) from exc
    if space.size == 1:
        address = space.ip
        owners = [n for n in reach.nics.values() if n.has(address)]
        if owners:
            return End(text, owners)
        for nic in reach.nics.values():
            for public in nic.public:
                if public.address is not None and netaddr.IPAddress(public.address) == address:
                    return End(text, [nic], public=public)
    return End(text, space=space)


def _is_network(text: str) -> bool:
    try:
        network(text)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return False
    return True


class Question:
    """One question: from an end to an end, on a protocol and port."""

    def __init__(self, reach: Reachability, source: End, target: End, protocol: str,
                 port: int | None) -> None:
        self.reach, self.source, self.target = reach, source, target
        self.protocol, self.port = protocol, port
        #: Filled by `answer()`: the paths it judged that a fabric can trace.
        self.checks: list[Check] = []

    def answer(self) -> Answer:
        if self.source.outside and self.target.outside:
            return Answer(False, ["neither end is a workload of this revision: unet answers "
                                  "for its workloads' NICs"])
        found: list[tuple[bool, str]] = []
        if self.source.outside:
            for nic in self.target.nics:
                found += self._inbound(nic)
        elif self.target.outside:
            for nic in self.source.nics:
                found += self._outbound(nic)
        else:
            for source in self.source.nics:
                for target in self.target.nics:
                    found += self._between(source, target)
        allowed = any(ok for ok, _ in found)
        return Answer(allowed, [why for ok, why in found if ok == allowed] or
                      ["no NIC of the two ends shares an address family"])

    # -- from outside -------------------------------------------------------------------------
    def _inbound(self, nic: Nic) -> list[tuple[bool, str]]:
        publics = [p for p in nic.public if self.target.public in (None, p)
                   and (self.source.space is None or p.family == self.source.space.version)]
        if not publics:
            return [(False, f"{nic.name} has no public address"
                     + ("" if self.source.space is None else
                        f" of {self.source.text}'s family")
                     + ": nothing outside its network reaches it (an ExternalIPAttachment "
                       "to its workload would)")]
        return [self._checked(self._through(nic, public), nic, nic, public.address,
                              public.family, self._outside(public.family, self.source.space))
                for public in publics]

    def _through(self, nic: Nic, public: Public, sender: str | None = None
                 ) -> tuple[bool, str]:
        internal = self._forwarded(public)
        if internal is False:
            return False, (f"{public.shown} forwards only "
                           + ", ".join(f"{p}/{e}" for p, e, _i in public.forwards or ())
                           + f", not {self.protocol}/{self.port}")
        space = self.source.space if sender is None else network(sender)
        causes = self._admitted(nic, "ingress", public.family, space, None,
                                None if internal is True else internal)
        where = f"{public.shown} → {nic.name}"
        if not causes:
            return False, (f"{where}: no ingress rule of {_groups(nic)} admits "
                           f"{self._what(internal)} from {sender or self.source.text}")
        return True, f"{where}: " + "; ".join(map(str, causes))

    def _forwarded(self, public: Public) -> int | bool:
        """The internal port the connection reaches: True when it is the same."""
        if public.forwards is None:
            return True
        for protocol, external, internal in public.forwards:
            if protocol == self.protocol and (self.port is None or self.port == external):
                return internal
        return False

    # -- to outside ---------------------------------------------------------------------------
    def _outbound(self, nic: Nic) -> list[tuple[bool, str]]:
        out = []
        for family in sorted(nic.addresses):
            space = self.target.space
            if space is not None and space.version != family:
                continue
            causes = self._admitted(nic, "egress", family, space, None, None)
            if not causes:
                out.append(self._checked(
                    (False, f"{nic.name}: no egress rule of {_groups(nic)} admits "
                            f"{self._what(True)} to {self.target.text}"),
                    nic, None, self._outside(family, space), family))
                continue
            if space is not None and self._stays_inside(nic, family, space):
                out.append((True, f"{nic.name} → {self.target.text} stays inside its network "
                                  "(or a provider network it is on): "
                                  + "; ".join(map(str, causes))))
                continue
            exit_ = self._exit(nic, family)
            if exit_ is None:
                out.append(self._checked((False, self._no_exit(nic, family)), nic, None,
                                         self._outside(family, space), family))
                continue
            out.append(self._checked(
                (True, f"{nic.name} → {self.target.text} leaves through NATGateway "
                       f"{exit_}: " + "; ".join(map(str, causes))),
                nic, None, self._outside(family, space), family))
        return out or [(False, f"{nic.name} has no address of {self.target.text}'s family")]

    def _stays_inside(self, nic: Nic, family: int, space: netaddr.IPNetwork) -> bool:
        """Whether `space` is reached without the network's router leading out: its own
        CIDR, what its subnets route to an appliance inside it, its provider networks."""
        model = self.reach.model
        own = model.network_cidrs(nic.tenant, nic.vn).get(family)
        inside = [own] if own is not None else []
        inside += [network(c) for c in model.routed_inside(nic.tenant, nic.vn, family)]
        return any(space in cidr for cidr in inside)

    def _no_exit(self, nic: Nic, family: int) -> str:
        if not self.reach.routed(nic, family):
            return (f"{nic.name}: its segment {nic.segment[1]} has no IPv{family} gateway: "
                    "nothing of that family leaves it")
        return (f"{nic.name}: its network {nic.vn} has no NATGateway of IPv{family}: new "
                "connections never leave it")

    def _exit(self, nic: Nic, family: int) -> str | None:
        """The NATGateway a new connection of `family` leaves the NIC's network through:
        None when its segment has no gateway of the family or its network no NATGateway."""
        if not self.reach.routed(nic, family):
            return None
        model = self.reach.model
        gateway = model.nat_gateways.get((nic.tenant, nic.vn))
        if gateway is None or model.external_ip_family(
                nic.tenant, gateway.obj.spec.external_ip) != family:
            return None
        address = self.reach.external_address(nic.tenant, gateway.obj.spec.external_ip)
        return f"{gateway.name} ({address or 'address known after apply'})"

    # -- between NICs -------------------------------------------------------------------------
    def _between(self, source: Nic, target: Nic) -> list[tuple[bool, str]]:
        out = []
        # A public address is routed to through the source's way out, even to a NIC of a
        # peered network: the peering routes the peer's CIDRs, not its public addresses.
        direct = self.target.public is None or (source.tenant, source.vn) == (
            target.tenant, target.vn)
        for family in sorted(set(source.addresses) & set(target.addresses)):
            if direct and self.reach.path(source, target, family):
                out.append(self._checked(self._direct(source, target, family), source,
                                         target, target.addresses[family], family))
        if out:
            return out
        for public in target.public:
            if public.family in source.addresses:
                out.append(self._checked(self._hairpin(source, target, public), source,
                                         target, public.address, public.family))
        return out or [(False, f"{source.name} and {target.name} are on no common path "
                               "(other networks, isolated segments or families) and "
                               f"{target.name} has no public address")]

    def _direct(self, source: Nic, target: Nic, family: int) -> tuple[bool, str]:
        src = _address(source, family)
        dst = _address(target, family)
        out = self._admitted(source, "egress", family, dst, target, None)
        if not out:
            return False, (f"IPv{family}: no egress rule of {source.name}'s {_groups(source)} "
                           f"admits {self._what(True)} to {target.name}")
        into = self._admitted(target, "ingress", family, src, source, None)
        if not into:
            return False, (f"IPv{family}: no ingress rule of {target.name}'s {_groups(target)} "
                           f"admits {self._what(True)} from {source.name}")
        return True, (f"IPv{family} {source.name} → {target.name}: "
                      + "; ".join(map(str, (*out, *into))))

    def _hairpin(self, source: Nic, target: Nic, public: Public) -> tuple[bool, str]:
        family = public.family
        exit_ = self._exit(source, family)
        if exit_ is None:
            return False, (f"{target.name} is reached from other networks at {public.shown}, "
                           f"and {self._no_exit(source, family)}")
        dst = network(public.address) if public.address else None
        if not self._admitted(source, "egress", family, dst, None, None):
            return False, (f"no egress rule of {source.name}'s {_groups(source)} admits "
                           f"{self._what(True)} to {public.shown}")
        gateway = self.reach.model.nat_gateways[(source.tenant, source.vn)]
        sender = self.reach.external_address(source.tenant, gateway.obj.spec.external_ip)
        ok, why = self._through(target, public, sender=sender)
        return ok, f"leaving through NATGateway {exit_}, {why}"

    # -- probes -------------------------------------------------------------------------------
    def _checked(self, found: tuple[bool, str], nic: Nic, target: Nic | None,
                 destination: str | None, family: int, sender: str | None = None
                 ) -> tuple[bool, str]:
        """`found`, after recording it as a check when it can be traced: every address is
        known, and a tcp or udp question names its port (a probe is one packet). A
        `sender` is an address outside every network, entering `nic`'s; without one, the
        probe is sent by `nic`."""
        outside = sender is not None
        sender = sender if outside else nic.addresses.get(family)
        if destination is None or sender is None or (
                self.protocol in ("tcp", "udp") and self.port is None):
            return found
        probe = Probe(None if outside else port_key(nic.workload, nic.index), sender,
                      destination, None if target is None else
                      port_key(target.workload, target.index), family, self.protocol,
                      self.port, self._region(nic) if outside else None)
        self.checks.append(Check(probe, found[0], found[1], (nic.tenant, nic.vn)))
        return found

    def _region(self, nic: Nic) -> str | None:
        klass = self.reach.model.class_of(nic.tenant, nic.vn)
        return None if klass is None else str(klass.obj.spec.region)

    @staticmethod
    def _outside(family: int, space: netaddr.IPNetwork | None) -> str:
        """The address a probe to or from `space` (None: the internet) uses: its own when
        it is one address, else its first host."""
        if space is None or space.version != family:
            return OUTSIDE[family]
        return str(space.ip if space.size == 1 else space[1 if space.size > 2 else 0])

    # -- rules --------------------------------------------------------------------------------
    def _admitted(self, nic: Nic, direction: str, family: int,
                  peer: netaddr.IPNetwork | None, peer_nic: Nic | None,
                  port: int | None) -> list[Cause]:
        """The rules of `nic` that admit this connection in `direction` from or to `peer`
        (None: every address of the family, the internet)."""
        port = self.port if port is None else port
        for rule, written, membership in self.reach.rules(nic, direction):
            if not _traffic_passes(rule, self.protocol, port, family):
                continue
            if rule.security_group is not None:
                if peer_nic is not None and rule.security_group in peer_nic.groups and \
                        (peer_nic.tenant, peer_nic.vn) == self.reach.remote_network(nic, rule):
                    return [written, membership]
                continue
            cidr = network(rule.cidr)
            if cidr.version == family and ((peer is None and cidr.prefixlen == 0)
                                           or (peer is not None and peer in cidr)):
                return [written, membership]
        return []

    def _what(self, internal: int | bool) -> str:
        port = self.port if internal is True else internal
        return self.protocol + (f"/{port}" if port else "")


def _traffic_passes(rule: Any, protocol: str, port: int | bool | None, family: int) -> bool:
    if Family(family) not in rule.families:
        return False
    return Traffic.of(rule).admits(protocol, port if isinstance(port, int) else None)


def _address(nic: Nic, family: int) -> netaddr.IPNetwork | None:
    address = nic.addresses.get(family)
    return network(address) if address is not None else None


def _groups(nic: Nic) -> str:
    return "group " + nic.groups[0] if len(nic.groups) == 1 else \
        "groups " + ", ".join(nic.groups)


def ask(reach: Reachability, source: str, target: str, port: str | None) -> Answer:
    return probes(reach, source, target, port)[0]


def probes(reach: Reachability, source: str, target: str, port: str | None
           ) -> tuple[Answer, list[Check]]:
    """The answer, and the paths it rests on as probes a fabric can trace (one per NIC pair
    and family, per public address, per way out), each with the model's own verdict."""
    protocol, number = parse_port(port)
    question = Question(reach, resolve(reach, source), resolve(reach, target), protocol,
                        number)
    return question.answer(), question.checks

