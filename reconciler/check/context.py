"""What every semantic check shares: the manifests by identity and the diagnostics sink."""

from __future__ import annotations

import difflib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import netaddr

from ..diagnostics import Diagnostic, json_pointer
from ..models import Capability
from ..schema import Manifest

Path_ = tuple[str | int, ...]
Identity = tuple[str, str | None, str]  # (kind, tenant or None, name)


@dataclass(slots=True)
class AddressSpace:
    """What the address checks need to know of a subnet (one family) or a pool."""

    net: netaddr.IPNetwork
    gateway: int | None
    reserved: set[int]  # never handed out: network, broadcast, gateway, excluded
    ranges: list[tuple[int, int]]  # where allocation draws from
    vip_block: tuple[int, int] | None = None  # cluster VIPs only
    ranges_known: bool = True  # False when a declared range was rejected: capacity unknown
    #: Reserved addresses that a port already holding one keeps: the first host of a subnet
    #: without an IPv4 gateway and with DHCP off, which unet handed out before it kept it.
    kept_if_held: set[int] = field(default_factory=set)
    owner: str = ""  # "Subnet/acme/web"


@dataclass
class Context:
    manifests: list[Manifest]
    plugins: dict[str, Any]  # plugin name -> plugin class
    diagnostics: list[Diagnostic] = field(default_factory=list)
    by_kind: dict[str, list[Manifest]] = field(default_factory=lambda: defaultdict(list))
    index: dict[tuple[str, str | None, str], Manifest] = field(default_factory=dict)
    # Resolved facts later checks and stages rely on.
    default_class: dict[str, str] = field(default_factory=dict)  # region -> class
    class_caps: dict[str, frozenset[Capability]] = field(default_factory=dict)
    # (tenant, vn) -> class; a tenant is None for the provider (never, for a network)
    vn_class: dict[tuple[str | None, str], str] = field(default_factory=dict)
    provider_network_class: dict[str, str] = field(default_factory=dict)
    networks: dict[tuple[str | None, str], dict[int, netaddr.IPNetwork]] = field(
        default_factory=dict)
    # (tenant, subnet), or (None, name) of a ProviderNetwork -> its address spaces
    subnets: dict[tuple[str | None, str], dict[int, AddressSpace]] = field(default_factory=dict)
    pools: dict[str, AddressSpace] = field(default_factory=dict)
    # (tenant, vn) -> (peer tenant, peer vn) -> its own side's VirtualNetworkPeering, for
    # peerings both sides declare without an error (check/peering.py)
    peered: dict[tuple[str | None, str], dict[tuple[str | None, str], Manifest]] = field(
        default_factory=dict)
    # id() of the VirtualNetworkPeerings of another tenant's network that the other tenant
    # has not answered (no side of its own): requests, which constrain nothing of its own
    requested: set[int] = field(default_factory=set)
    invalid: set[int] = field(default_factory=set)  # id() of manifests that failed a check
    # Identities of manifests that failed their YAML, the schema or their placement: declared,
    # so nothing that names one says it is missing; not usable, so nothing is derived from it.
    declared_invalid: set[Identity] = field(default_factory=set)
    # id() of a manifest -> the paths of its fields a check rejected (see `rejected`)
    rejected_fields: dict[int, list[Path_]] = field(default_factory=dict)
    said: set[Diagnostic] = field(default_factory=set)  # what `report` said, said once

    def kind(self, kind: str) -> list[Manifest]:
        return self.by_kind.get(kind, [])

    def get(self, kind: str, tenant: str | None, name: str | None) -> Manifest | None:
        if name is None:
            return None
        return self.index.get((kind, tenant, name))

    def declared(self, kind: str, tenant: str | None, name: str | None) -> bool:
        """Whether a manifest declares this identity, valid or not."""
        if name is None:
            return False
        identity = (kind, tenant, name)
        return identity in self.index or identity in self.declared_invalid

    def declares_invalid(self, kind: str, tenant: str | None = None) -> bool:
        """Whether an invalid manifest of `kind` (in `tenant`) is declared: it may be the one
        a check looks for, and its error is reported already."""
        return any(k == kind and t == tenant for k, t, _name in self.declared_invalid)

    def rejected(self, manifest: Manifest, *fields: Path_) -> bool:
        """Whether a check rejected one of `fields` of the manifest, a part of one, or what
        holds it. What the manifest tells others there is then unknown, not absent: a check
        that misses a fact there stays quiet, as the error is reported once, at its cause."""
        paths = self.rejected_fields.get(id(manifest), ())
        return any(path[:len(wanted)] == wanted or wanted[:len(path)] == path
                   for path in paths for wanted in fields)

    def reject_quietly(self, manifest: Manifest, path: Path_) -> None:
        """Reject a field that depends on another manifest's rejected one (a subnet's CIDR
        when its network's is): unknown to those who rely on it, with no second error."""
        self.rejected_fields.setdefault(id(manifest), []).append(tuple(path))

    def report(
        self,
        code: str,
        manifest: Manifest,
        path: Path_,
        message: str,
        hint: str | None = None,
    ) -> None:
        self.invalid.add(id(manifest))
        diagnostic = Diagnostic(
            code,
            message,
            file=manifest.doc.file,
            line=manifest.doc.line_of(path),
            path=json_pointer(path),
            hint=hint,
        )
        if diagnostic.is_error:
            self.reject_quietly(manifest, path)
        if diagnostic not in self.said:  # a field checked once per address family, say
            self.said.add(diagnostic)
            self.diagnostics.append(diagnostic)

    def lookup(
        self,
        manifest: Manifest,
        path: Path_,
        kind: str,
        name: str,
        tenant: str | None = None,
    ) -> Manifest | None:
        """Resolve a reference, or report REF_NOT_FOUND unless it names an invalid manifest
        (None either way)."""
        found = self.get(kind, tenant, name)
        if found is None and (kind, tenant, name) not in self.declared_invalid:
            where = f" in tenant {tenant}" if tenant else ""
            self.report("REF_NOT_FOUND", manifest, path, f"no {kind} named '{name}'{where}",
                        _similar_hint(self, kind, tenant, name))
        return found


def _similar_hint(ctx: Context, kind: str, tenant: str | None, name: str) -> str | None:
    names = [m.name for m in ctx.kind(kind) if m.identity[1] == tenant]
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return f"did you mean '{close[0]}'?"
    if names and len(names) <= 8:
        return "declared: " + ", ".join(sorted(names))
    return None
