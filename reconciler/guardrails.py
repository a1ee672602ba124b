"""Guardrails: a provider's policy over who may reach tenants' workloads (docs/api.md,
"Guardrail").

A Guardrail is judged over the revision's reachability (reach.py), never over the text of
its rules: what counts is the ways in to each workload NIC that the rules, memberships,
external addresses and port forwards give together. An opening violates a guardrail when

- its source may have every address of `match.from` (`Opening.space` holds it: a rule's
  CIDR as far as it reaches the NIC; a group's members have no such space), so
  `from: 0.0.0.0/0` fires only on what comes from the whole IPv4 internet, through a public
  address; the same rule on a NIC without one reaches it from its network only;
- its traffic admits `match.protocol` to one of `match.ports` (any port when none is
  given; a rule of protocol `all` admits everything, and `match.protocol: all` matches any
  traffic); ports are the workload's own, after a port forward;
- its NIC is one the guardrail protects (`protects`: tenants, networks, groups; every list
  given must match) and no exemption names its tenant (and workload, when it lists some).

A violation is said once per guardrail and manifest field that grants it, naming every NIC
it opens (the first few, and how many more), with the public address and the traffic:
`GUARDRAIL_DENIED` (an error) for `action: deny`, `GUARDRAIL_WARNED` for `warn`. The field
is the first of the opening's causes (the rule, then the membership, then the external IP
attachment or port forward) that is new against a base revision when there is one (a pull
request's plan: the change that opened it), else the rule.

Nothing here runs unless the revision declares a Guardrail and passed every other check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import netaddr

from .allocate import Allocation, Allocations, external_key
from .check.context import Context
from .check.netutil import network
from .diagnostics import Diagnostic, json_pointer
from .model import Model
from .reach import Cause, Nic, Opening, Reachability, Traffic
from .schema import Manifest

#: NICs named in one diagnostic; the rest are counted.
SHOWN = 5
_CODE = {"deny": "GUARDRAIL_DENIED", "warn": "GUARDRAIL_WARNED"}
CODES = frozenset(_CODE.values())


@dataclass(frozen=True)
class Violation:
    """One way in to one NIC that one guardrail forbids."""

    guardrail: Manifest
    nic: Nic
    opening: Opening


def evaluate(ctx: Context) -> list[Violation]:
    """The violations of every Guardrail of a revision that passed its checks."""
    guardrails = ctx.kind("Guardrail")
    if not guardrails:
        return []
    reach = _Suspects(Model(ctx, _tenants(guardrails)), _fixed_addresses(ctx), guardrails)
    return [Violation(guardrail, reach.nics[opening.nic], opening)
            for guardrail in sorted(guardrails, key=lambda g: g.name)
            for opening in reach.openings
            if violates(guardrail, reach.nics[opening.nic], opening)]


def violates(guardrail: Manifest, nic: Nic, opening: Opening) -> bool:
    """Whether `opening` to `nic` is access `guardrail` forbids."""
    spec = guardrail.obj.spec
    return (_covers(opening.space, network(spec.match.from_))
            and _admits(opening.traffic, spec.match.protocol, spec.match.ports)
            and _protected(spec.protects, nic)
            and not any(_exempts(exemption, nic) for exemption in spec.exemptions))


def diagnostics(violations: list[Violation], head: Mapping[str, Manifest],
                base: Mapping[str, Manifest] | None = None) -> list[Diagnostic]:
    """One diagnostic per guardrail and granting field; `head` and `base`: the manifests
    by reference (`base`: of the revision a plan compares with, to point at the change)."""
    found: dict[tuple[str, Cause], list[Violation]] = {}
    for violation in violations:
        cause = _granting(violation.opening.because, head, base)
        found.setdefault((violation.guardrail.ref, cause), []).append(violation)
    return [_diagnostic(cause, group, head) for (_ref, cause), group in found.items()]


# -- what a guardrail matches ---------------------------------------------------------------


def _covers(space: netaddr.IPNetwork | None, wanted: netaddr.IPNetwork) -> bool:
    return space is not None and space.version == wanted.version and wanted in space


def _admits(traffic: Traffic, protocol: str, ports: list[int] | None) -> bool:
    if protocol == "all":
        return True
    wanted: list[int | None] = list(ports) if ports else [None]
    return any(traffic.admits(protocol, port) for port in wanted)


def _protected(scope: Any, nic: Nic) -> bool:
    return ((scope.tenants is None or nic.tenant in scope.tenants)
            and (scope.networks is None or nic.vn in scope.networks)
            and (scope.groups is None or any(g in scope.groups for g in nic.groups)))


def _exempts(exemption: Any, nic: Nic) -> bool:
    return exemption.tenant == nic.tenant and (
        exemption.workloads is None or nic.workload.name in exemption.workloads)


def _tenants(guardrails: list[Manifest]) -> frozenset[str] | None:
    """The only tenants any guardrail protects, when each names its tenants: the others'
    NICs need no reachability."""
    named = [g.obj.spec.protects.tenants for g in guardrails]
    if any(tenants is None for tenants in named):
        return None
    return frozenset(t for tenants in named for t in tenants)


def _fixed_addresses(ctx: Context) -> Allocations:
    """The public addresses a revision alone tells (ExternalIPs' fixed `address`); the
    others are shown as known after apply."""
    return Allocations({external_key(eip.tenant, eip.name): Allocation(eip.obj.spec.address)
                        for eip in ctx.kind("ExternalIP") if eip.obj.spec.address})


class _Suspects(Reachability):
    """The reachability as far as guardrails can see it: the ingress rules that may
    open what one of them forbids. It leaves out no violation: an opening's source space
    lies within its rule's CIDR, and its traffic within the rule's (a port forward only
    narrows it), so a rule whose CIDR does not hold a guardrail's `from`, or whose traffic
    admits none of its own, opens nothing it forbids; group remotes cover no CIDR."""

    def __init__(self, model: Model, allocations: Allocations,
                 guardrails: list[Manifest]) -> None:
        self._matches = [(network(g.obj.spec.match.from_), g.obj.spec.match)
                         for g in guardrails]
        self._suspect: dict[tuple[Any, ...], bool] = {}  # a rule → whether it may violate
        super().__init__(model, allocations)

    def rules(self, nic: Nic, direction: str) -> Iterator[tuple[Any, Cause, Cause]]:
        for found in super().rules(nic, direction):
            if direction != "ingress" or self._may_violate(found[0]):
                yield found

    def _may_violate(self, rule: Any) -> bool:
        traffic = Traffic.of(rule)
        known = self._suspect.get((traffic, rule.cidr))
        if known is None:
            cidr = network(rule.cidr) if rule.cidr is not None else None
            known = self._suspect[(traffic, rule.cidr)] = cidr is not None and any(
                _covers(cidr, wanted) and _admits(traffic, match.protocol, match.ports)
                for wanted, match in self._matches)
        return known


# -- where it is said -------------------------------------------------------------------------


def _granting(because: tuple[Cause, ...], head: Mapping[str, Manifest],
              base: Mapping[str, Manifest] | None) -> Cause:
    """The cause to point at: the first that `base` lacks, else the first (the rule)."""
    if base is not None:
        for cause in because:
            if not _existed(cause, head, base):
                return cause
    return because[0]


def _existed(cause: Cause, head: Mapping[str, Manifest], base: Mapping[str, Manifest]) -> bool:
    """Whether the base revision grants what `cause` does: the same value at its path, or,
    for an item of a list, the same item anywhere in the list (rules move when one is added
    before them)."""
    now, before = head.get(cause.ref), base.get(cause.ref)
    if now is None or before is None:
        return before is not None
    value = _at(now.data(), cause.path)
    if cause.path and isinstance(cause.path[-1], int):
        items = _at(before.data(), cause.path[:-1])
        return isinstance(items, list) and value in items
    return bool(_at(before.data(), cause.path) == value)


def _at(data: Any, path: Iterable[str | int]) -> Any:
    for part in path:
        if not _has(data, part):
            return None
        data = data[part]
    return data


def _has(data: Any, part: str | int) -> bool:
    if isinstance(data, list):
        return isinstance(part, int) and 0 <= part < len(data)
    return isinstance(data, dict) and part in data


def _diagnostic(cause: Cause, violations: list[Violation],
                head: Mapping[str, Manifest]) -> Diagnostic:
    guardrail = violations[0].guardrail
    spec = guardrail.obj.spec
    opened = "; ".join(_opened(v) for v in violations[:SHOWN])
    more = len(violations) - SHOWN
    if more > 0:
        opened += f"; and {more} more"
    where = head.get(cause.ref)
    return Diagnostic(
        _CODE[spec.action],
        f"{spec.message} (Guardrail {guardrail.name}): {opened}",
        file=where.doc.file if where else guardrail.doc.file,
        line=where.doc.line_of(cause.path) if where else guardrail.doc.line,
        path=json_pointer(cause.path) if where else "",
        hint=_hint(cause, violations[0].opening.because, guardrail, head))


def _opened(violation: Violation) -> str:
    """`acme/web-1/0 (ComputeInstance acme/web-1) gets tcp/22 from internet via 203.0.113.9`"""
    nic, opening = violation.nic, violation.opening
    return f"{nic.name} ({nic.workload.ref.replace('/', ' ', 1)}) gets {opening}"


def _hint(cause: Cause, because: tuple[Cause, ...], guardrail: Manifest,
          head: Mapping[str, Manifest]) -> str:
    others = [f"{c.what} at {_place(c, head)}" for c in because if c != cause]
    granted = f"granted together with the {', the '.join(others)}; " if others else ""
    return (f"{granted}change one of them, or have the provider exempt the tenant "
            f"(Guardrail {guardrail.name} at {guardrail.doc.file}:{guardrail.doc.line})")


def _place(cause: Cause, head: Mapping[str, Manifest]) -> str:
    found = head.get(cause.ref)
    if found is None:
        return cause.ref
    return f"{found.doc.file}:{found.doc.line_of(cause.path)}"
