"""Stage `check`: the semantic rules of RULES.md over all manifests of a revision."""

from __future__ import annotations

from typing import Any

from ..diagnostics import Diagnostic
from ..schema import Manifest
from .classes import check_classes, check_managers
from .context import Context, Identity
from .external import check_consumers, check_external_ips, check_quotas
from .guardrails import check_guardrails
from .networks import (
    check_networks,
    check_pools,
    check_pools_against_networks,
    check_provider_networks,
    check_subnets,
    check_tenants,
)
from .peering import check_peerings
from .placement import check_placement
from .security import check_security_groups
from .workloads import check_host_types, check_workloads

__all__ = ["Context", "check"]


def check(
    manifests: list[Manifest],
    plugins: dict[str, Any],
    unreadable: set[Identity] | None = None,
) -> tuple[Context, list[Diagnostic]]:
    """Run every rule; the context carries what later stages need (classes, address spaces).

    `unreadable` names documents that failed their YAML or the schema: declared but
    invalid, so what refers to them is not reported again (see Context.declared_invalid).
    """
    ctx = Context(manifests=manifests, plugins=plugins, declared_invalid=set(unreadable or ()))
    ctx.manifests = check_placement(ctx)
    check_managers(ctx)
    check_classes(ctx)
    allowed = check_tenants(ctx)
    check_host_types(ctx)
    check_pools(ctx)
    check_networks(ctx, allowed)
    check_pools_against_networks(ctx)
    check_subnets(ctx)
    check_provider_networks(ctx)
    check_peerings(ctx)
    check_security_groups(ctx)
    check_workloads(ctx)
    check_external_ips(ctx)
    check_consumers(ctx)
    check_quotas(ctx)
    check_guardrails(ctx)
    return ctx, ctx.diagnostics
