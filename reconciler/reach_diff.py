"""What a change lets in: the reachability of two revisions compared, per workload NIC.

An entry says what a NIC can now be reached from that it could not (`gained`), or no
longer can (`lost`), with the cause, found by what differs between the two revisions
around that opening, the first that applies: the workload is new, it joined the group
whose rule admits it, a public address now leads to it (an ExternalIPAttachment, a port
forward), the source group has new members, the provider network names new tenants, a
peering now routes it; otherwise a rule of its groups changed. Internet-facing entries
(through a public address) come first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .reach import Nic, Opening, Reachability


def reach_diff(before: Reachability | None, after: Reachability) -> list[dict[str, Any]]:
    """The entries of a plan's `reachability`, internet-facing first, then by NIC."""
    entries = [*_entries(before, after, "gained")]
    if before is not None:
        entries += _entries(after, before, "lost")
    return sorted(entries, key=lambda e: (not e["internet"], e["change"] != "gained",
                                         e["nic"], e["opening"]))


def _entries(old: Reachability | None, new: Reachability, change: str
             ) -> Iterator[dict[str, Any]]:
    had = {o.key: o for o in old.openings} if old is not None else {}
    for opening in new.openings:
        previous = had.get(opening.key)
        added = tuple(m for m in opening.members
                      if previous is None or m not in previous.members)
        if previous is not None and not added:
            continue
        nic = new.nics[opening.nic]
        cause = _cause(old.nics.get(opening.nic) if old else None, nic, opening, previous,
                       added, change)
        if cause == "rule":
            cause = _peering_cause(old, opening, change) or \
                _rule_cause(old, new, opening, change)
        yield _entry(nic, opening, change, cause, added if previous is not None else ())


def _cause(old: Nic | None, nic: Nic, opening: Opening, previous: Opening | None,
           added: tuple[str, ...], change: str) -> str:
    verb = {"gained": ("added", "joined", "attached", "new"),
            "lost": ("removed", "left", "detached", "gone")}[change]
    if old is None:
        return f"workload {verb[0]}"
    if previous is not None:
        what = "members" if opening.source.startswith("group ") else "tenants"
        return f"{opening.source} has {verb[3]} {what}: {', '.join(added)}"
    membership = next((c for c in opening.because if c.what == "membership"), None)
    group = nic.groups[int(membership.path[-1])] if membership is not None else None
    if group is not None and group not in old.groups:
        return f"group {group} {verb[1]}"
    if opening.via is not None:
        reached = next(c.ref for c in opening.because if c.what == "external IP")
        before = next((p for p in old.public if p.attachment.ref == reached), None)
        if before is None:
            return f"external IP {verb[2]}"
        mine = next(p for p in nic.public if p.attachment.ref == reached)
        if before.forwards != mine.forwards:
            return "port forwards changed"
    return "rule"


def _peering_cause(old: Reachability | None, opening: Opening, change: str) -> str | None:
    """The peering that routes it was not established in the other revision."""
    peering = next((c for c in opening.because if c.what == "peering"), None)
    if peering is None or old is None or peering.ref in old.model.established_peerings:
        return None
    return f"peering {peering.ref.rsplit('/', 1)[1]} " + \
        ("established" if change == "gained" else "ended")


def _rule_cause(old: Reachability | None, new: Reachability, opening: Opening,
                change: str) -> str:
    """A rule that admits it is new (or gone); or the rule is as it was and what it reaches
    changed."""
    written = next(c for c in opening.because if c.what == "rule")
    kind, tenant, name = [*written.ref.split("/"), "", ""][:3]
    rules = []
    if old is not None and kind == "SecurityGroup" and len(written.path) == 3:
        group = old.model.get(kind, tenant, name)
        rules = list(getattr(group.obj.spec, str(written.path[1]))) if group else []
    mine = new.model.get(kind, tenant, name)
    rule = getattr(mine.obj.spec, str(written.path[1]))[int(written.path[2])] \
        if mine is not None and len(written.path) == 3 else None
    if rule is not None and rule in rules:
        return "a segment, family or address of it changed"
    return f"rule {'added' if change == 'gained' else 'removed'}"


def _entry(nic: Nic, opening: Opening, change: str, cause: str,
           members: tuple[str, ...]) -> dict[str, Any]:
    return {
        "nic": nic.name, "workload": nic.workload.ref, "change": change,
        "internet": opening.internet_facing, "opening": str(opening),
        "source": opening.source, "traffic": str(opening.traffic),
        "family": f"IPv{opening.family}", "via": opening.via, "cause": cause,
        "members": list(members or opening.members),
        "because": [str(c) for c in opening.because],
    }


#: Exposure entries of a live plan, as what they do to the NICs behind them.
_LIVE = (("rules_opened", "gained", "the apply writes the rule"),
         ("rules_closed", "lost", "the apply removes the rule"),
         ("drift_opened", "lost", "drift: opened outside unet; the apply closes it"))


def live_reach(exposure: dict[str, list[dict[str, str]]], reach: Reachability
               ) -> list[dict[str, Any]]:
    """A live plan's reachability: the revision the backends last applied is not known, so
    it is what the plan's rows open, close, and repair of drift, per NIC of the group each
    rule belongs to (the managers' words for the rule; rules from outside the network only,
    as the exposure summary has them)."""
    entries = []
    for key, change, cause in _LIVE:
        for entry in exposure.get(key, ()):
            for nic in _nics_of(entry["owner"], reach):
                entries.append({
                    "nic": nic.name, "workload": nic.workload.ref, "change": change,
                    "internet": bool(nic.public), "opening": entry["rule"], "source": "",
                    "traffic": "", "family": "", "via": None, "cause": cause,
                    "members": [], "because": [entry["owner"]]})
    return sorted(entries, key=lambda e: (not e["internet"], e["change"] != "gained",
                                         e["nic"], e["opening"]))


def _nics_of(owner: str, reach: Reachability) -> list[Nic]:
    """The NICs a security group's rules (or a network's implicit default group's) filter."""
    kind, _, rest = owner.partition("/")
    tenant, _, name = rest.partition("/")
    if kind == "SecurityGroup":
        group = reach.model.get(kind, tenant, name)
        vn = group.obj.spec.virtual_network if group is not None else ""
    elif kind == "VirtualNetwork":
        vn, name = name, "default"
    else:
        return []
    return list(reach.members.get((tenant, vn, name), ()))
