"""Guardrails' own fields: what they match and whom they name. Whether the revision obeys
them is decided over its reachability, after every check passed (reconciler/guardrails.py).
"""

from __future__ import annotations

from ..schema import Manifest
from .context import Context
from .netutil import parse_cidr


def check_guardrails(ctx: Context) -> None:
    """`match.from` is a canonical CIDR (0.0.0.0/0 and ::/0 included); `match.ports` go with
    tcp or udp only; the tenants a guardrail protects or exempts are declared (a misspelt
    tenant would leave its workloads unprotected, or protected against the provider's will)."""
    for guardrail in ctx.kind("Guardrail"):
        spec = guardrail.obj.spec
        parse_cidr(ctx, guardrail, ("spec", "match", "from"), spec.match.from_,
                   network_range=False)
        if spec.match.ports is not None and spec.match.protocol not in ("tcp", "udp"):
            ctx.report("RULE_PORTS_INVALID", guardrail, ("spec", "match", "ports"),
                       f"ports apply to tcp and udp only, not {spec.match.protocol}",
                       "remove ports: without them the guardrail matches every "
                       f"{spec.match.protocol} opening")
        _check_tenants(ctx, guardrail)


def _check_tenants(ctx: Context, guardrail: Manifest) -> None:
    spec = guardrail.obj.spec
    for index, tenant in enumerate(spec.protects.tenants or ()):
        ctx.lookup(guardrail, ("spec", "protects", "tenants", index), "Tenant", tenant)
    for index, exemption in enumerate(spec.exemptions):
        ctx.lookup(guardrail, ("spec", "exemptions", index, "tenant"), "Tenant",
                   exemption.tenant)
