"""Address parsing with diagnostics, and the O(n log n) overlap sweep."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import TypeVar

import netaddr

from ..models import Family
from ..schema import Manifest
from .context import Context, Path_

T = TypeVar("T")

_RESERVED = [
    (netaddr.IPNetwork(cidr, version=6 if ":" in cidr else 4), what)
    for cidr, what in (
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
    )
]


def family_of(text: str) -> int:
    """Told to netaddr, which otherwise tries IPv4 first: its failed attempt raises an
    exception whose traceback holds the caller's frames (and all they hold) in a reference
    cycle, freed only by the cyclic collector."""
    return 6 if ":" in text else 4


def address(text: str) -> netaddr.IPAddress:
    """An address validation accepted (family_of says why it is told its family)."""
    return netaddr.IPAddress(text, family_of(text))


def is_address(text: str) -> bool:
    """An IPv4 or IPv6 address, its family tried first (see family_of)."""
    return bool(netaddr.valid_ipv6(text) if family_of(text) == 6 else netaddr.valid_ipv4(text))


def network(text: str) -> netaddr.IPNetwork:
    """A CIDR (or an address, as a /32 or /128) validation accepted, as `address`."""
    return netaddr.IPNetwork(text, version=family_of(text))


def parse_cidr(
    ctx: Context,
    manifest: Manifest,
    path: Path_,
    text: str,
    version: int | None = None,
    network_range: bool = True,
) -> netaddr.IPNetwork | None:
    """A canonical CIDR, or None after reporting why not.

    `network_range` marks CIDRs that define where addresses live (networks, subnets,
    pools); those may not touch reserved ranges. Rule remotes and route destinations
    may be anything, 0.0.0.0/0 included.
    """
    net, problem = _cidr_verdict(text, version, network_range)
    if problem is not None:
        ctx.report(problem[0], manifest, path, problem[1], problem[2])
    return net


#: A verdict's problem: its code, message and hint.
_Problem = tuple[str, str, str | None]


@lru_cache(maxsize=1 << 16)
def _cidr_verdict(text: str, version: int | None, network_range: bool
                  ) -> tuple[netaddr.IPNetwork | None, _Problem | None]:
    """parse_cidr's answer for a text, the same wherever it is written: a repo says the
    same CIDRs many times (every tenant's 10.0.0.0/16), and both revisions of a plan say
    most of them. The network is shared: nobody changes one in place."""
    try:
        if "/" not in text:
            raise netaddr.AddrFormatError("no prefix length")
        net = netaddr.IPNetwork(text, version=family_of(text))
    except (netaddr.AddrFormatError, ValueError, TypeError):
        return None, ("CIDR_INVALID", f"'{text}' is not a CIDR",
                      "write an address and a prefix length, e.g. 10.0.1.0/24")
    if version is not None and net.version != version:
        return None, ("CIDR_INVALID", f"'{text}' is an {Family(net.version).label} CIDR; "
                      f"this field takes {Family(version).label}", None)
    if net.ip != net.network:
        return None, ("CIDR_NOT_CANONICAL", f"'{text}' has host bits set",
                      f"did you mean {net.cidr}?")
    if network_range:
        for reserved, what in _RESERVED:
            if reserved.version == net.version and (reserved in net or net in reserved):
                return None, ("CIDR_RESERVED", f"'{text}' overlaps the {what} range {reserved}",
                              "use a private range such as 10.0.0.0/8 or fc00::/7")
    return net.cidr, None


def parse_ip(
    ctx: Context,
    manifest: Manifest,
    path: Path_,
    text: str,
    code: str = "ADDRESS_INVALID",
    version: int | None = None,
) -> netaddr.IPAddress | None:
    try:
        ip = netaddr.IPAddress(text, family_of(text), flags=netaddr.INET_PTON)
    except (netaddr.AddrFormatError, ValueError, TypeError):
        ctx.report(code, manifest, path, f"'{text}' is not an IP address")
        return None
    if version is not None and ip.version != version:
        ctx.report(code, manifest, path,
                   f"'{text}' is an {Family(ip.version).label} address; "
                   f"{Family(version).label} expected")
        return None
    return ip


def overlaps(items: Iterable[tuple[int, int, T]]) -> Iterator[tuple[T, T]]:
    """Pairs (earlier, later) of overlapping closed intervals, by sort and sweep.

    Each interval that overlaps an earlier one is reported once, paired with the
    earlier interval reaching furthest: enough to name every offender without
    comparing all pairs.
    """
    furthest: tuple[int, T] | None = None
    for first, last, item in sorted(items, key=lambda entry: (entry[0], -entry[1])):
        if furthest is not None and first <= furthest[0]:
            yield furthest[1], item
        if furthest is None or last > furthest[0]:
            furthest = (last, item)


def first_host(net: netaddr.IPNetwork) -> netaddr.IPAddress:
    return netaddr.IPAddress(net.first + 1, net.version)


def reserved_ends(net: netaddr.IPNetwork) -> set[int]:
    """Network and broadcast addresses (IPv4); the subnet-router anycast (IPv6)."""
    if net.version == 4:
        return {net.first, net.last}
    return {net.first}
