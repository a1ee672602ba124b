"""OVN ACLs as unet writes and reads them: the match of a security-group rule per address
family (`AclRule.matches`), and what an ACL row, as it is, opens to the outside
(`acl_exposure`, read back from its match, so that drift counts)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from unet.managers.sdk import parse_network, protocol_families


@dataclass(frozen=True)
class AclRule:
    protocol: str
    port_from: int | None = None
    port_to: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None
    cidr: str | None = None
    remote_group: str | None = None
    #: (tenant, network) of a remote group of a peered network; None: the rule's own
    remote_network: tuple[str, str] | None = None

    @classmethod
    def of(cls, rule: Any, remote_network: tuple[str, str] | None = None) -> AclRule:
        return cls(rule.protocol, rule.port_from, rule.port_to, rule.icmp_type, rule.icmp_code,
                   rule.cidr, rule.security_group, remote_network)

    def matches(self, pg: str, direction: str,
                members: Callable[[str, str, tuple[str, str] | None], str],
                families: tuple[str, ...]) -> list[str]:
        """One ACL match per address family the rule covers and the network has; `members`
        gives the match operand of a remote group's addresses in a family (of a peered
        network, when it names one)."""
        port = "outport" if direction == "ingress" else "inport"
        peer = "src" if direction == "ingress" else "dst"
        out = []
        for family in families:
            if int(family[-1]) not in protocol_families(self.protocol, self.icmp_type):
                continue  # ICMP types are per family: icmp with a type is ICMPv4
            if self.cidr is not None:
                if (":" in self.cidr) != (family == "ip6"):
                    continue
                remote = "" if self.cidr in ("0.0.0.0/0", "::/0") \
                    else f" && {family}.{peer} == {self.cidr}"
            else:
                assert self.remote_group is not None, "a rule has a CIDR or a group"
                remote = f" && {family}.{peer} == " \
                    f"{members(self.remote_group, family, self.remote_network)}"
            out.append(f"{port} == @{pg} && {family}{remote}{self._l4(family)}")
        return out

    def exposure(self, network_cidrs: list[Any]) -> str | None:
        """How the rule opens the group to sources outside its network, if it does."""
        if self.cidr is None:
            return None
        source = parse_network(self.cidr)
        if any(source.version == n.version and source in n for n in network_cidrs):
            return None
        world = " (anywhere)" if source.prefixlen == 0 else ""
        return f"{self.traffic} from {self.cidr}{world}"

    @property
    def traffic(self) -> str:
        """What the rule lets through, in words."""
        if self.protocol in ("tcp", "udp"):
            ports = "all ports" if self.port_from is None else (
                f"port {self.port_from}" if self.port_from == self.port_to
                else f"ports {self.port_from}-{self.port_to}")
            return f"{self.protocol} {ports}"
        if self.protocol in ("icmp", "icmpv6"):
            return self.protocol + (f" type {self.icmp_type}" if self.icmp_type is not None
                                    else "")
        return "all traffic"

    def _l4(self, family: str) -> str:
        if self.protocol in ("tcp", "udp"):
            if self.port_from is None:
                return f" && {self.protocol}"
            if self.port_from == self.port_to:
                return f" && {self.protocol}.dst == {self.port_from}"
            return (f" && {self.protocol}.dst >= {self.port_from} && "
                    f"{self.protocol}.dst <= {self.port_to}")
        if self.protocol in ("icmp", "icmpv6"):
            icmp = "icmp4" if family == "ip4" else "icmp6"
            text = f" && {icmp}"
            if self.icmp_type is not None:
                text += f" && {icmp}.type == {self.icmp_type}"
            if self.icmp_code is not None:
                text += f" && {icmp}.code == {self.icmp_code}"
            return text
        return ""


#: An ACL match as `AclRule.matches` writes it, and the rules people write in that style.
ACL_MATCH = re.compile(
    r"outport == @(?P<pg>\S+)(?: && (?P<family>ip[46]))?"
    r"(?: && ip[46]\.src == (?P<remote>\S+))?"
    r"(?: && (?P<l4>(?P<proto>tcp|udp)(?:\.dst == (?P<port>\d+)|\.dst >= (?P<low>\d+) && "
    r"(?:tcp|udp)\.dst <= (?P<high>\d+))?|icmp[46](?: && icmp[46]\.type == (?P<type>\d+))?"
    r"(?: && icmp[46]\.code == (?P<code>\d+))?))?")

#: The rule that lets IPv6 neighbour discovery through a network's default drop.
NEIGHBOUR_DISCOVERY = re.compile(r"outport == @\S+ && \(nd \|\| nd_rs \|\| nd_ra\)")


def acl_exposure(fields: Mapping[str, Any], group: str, cidrs: list[Any]) -> str | None:
    """What an ACL row, as it is, opens to traffic from outside its network (`cidrs`):
    None for what opens nothing; the match itself when unet cannot read it."""
    if fields.get("direction") != "to-lport" or not str(fields.get("action")).startswith(
            "allow"):
        return None
    match = str(fields.get("match"))
    if NEIGHBOUR_DISCOVERY.fullmatch(match):
        return None  # link-local: never from beyond the network's own segments
    found = ACL_MATCH.fullmatch(match)
    if found is None:
        return f"`{match}` (an allow rule unet cannot read) to {group}"
    remote = found["remote"]
    sets = remote.strip("{}").split(",") if remote is not None else []
    if sets and all(part.startswith("$") for part in sets):
        tenant, network = (part.replace("-", "_") for part in group.split("/")[:2])
        # the network's own groups, and its VMs on hosting clusters (`unet_hosted.<t>.…`)
        own = (f"$unet.{tenant}.{network}.", f"$unet_hosted.{tenant}.")
        foreign = [part for part in sets if not part.startswith(own)]
        if not foreign:
            return None  # the members of a group of the network
        remote = None  # the members of a peered network's group (render.py: `members`)
    protocol = found["proto"] or ("all" if not found["l4"] else
                                  "icmpv6" if found["l4"].startswith("icmp6") and found["type"]
                                  else "icmp")
    port_from = int(found["port"] or found["low"]) if found["port"] or found["low"] else None
    port_to = int(found["port"] or found["high"]) if port_from is not None else None
    rule = AclRule(protocol, port_from, port_to,
                 int(found["type"]) if found["type"] else None,
                 int(found["code"]) if found["code"] else None,
                 remote or ("::/0" if found["family"] == "ip6" else "0.0.0.0/0"))
    if sets and remote is None:
        peers = ", ".join(part[1:].rsplit("_", 1)[0] for part in sets)
        return f"{rule.traffic} from the members of {peers} (a peered network's group) " \
               f"to {group}"
    opened = rule.exposure(cidrs)
    return f"{opened} to {group}" if opened else None
