"""What became of each manifest, as a tenant reads it (`unet show status`): the revision its
backend objects are at, the values allocated to it, and one condition, in the manner of
Argo CD's per-resource sync status and Kubernetes conditions:

- `Ready`: its backend objects are what the revision asks (nothing to apply);
- `Pending`: not yet, and why (the plan's reason: to create, to update, drift, or a
  target not declared yet);
- `Failed`: the plan cannot realise it, and the error (file:line, code, message).

Made from a plan against the backends (read without their locks: nothing is changed) and
the allocations they record. Pure. With a tenant, nothing of another tenant is in it: its
manifests only, their own allocations, and the errors said at its own files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .allocate import holder_of
from .diagnostics import Diagnostic
from .models import TENANT_KINDS
from .objects import Held
from .plan import Plan
from .schema import Manifest

FORMAT_VERSION = "1.0"
READY, PENDING, FAILED = "Ready", "Pending", "Failed"
#: Warnings that leave a manifest pending: what they say it waits for (a target, the
#: other side of a peering: nothing is routed until it is declared).
PENDING_CODES = frozenset({"TARGET_PENDING", "PEERING_PENDING"})
#: A tenant's resource as messages name it, `Kind/tenant/name` (allocate.holder_of) or
#: `Kind tenant/name` (guardrails), not inside a longer path such as a backend object's
#: `Logical_Switch_Port/acme/...`.
_TENANT_REF = re.compile(r"(?<![\w/])(" + "|".join(sorted(TENANT_KINDS, key=len, reverse=True))
                         + r")[/ ]([^/\s;,:()'\"]+)/([^/\s;,:()'\"]+)")


def status(manifests: Iterable[Manifest], plan: Plan, held: Mapping[str, Held],
           revision: str | None, tenant: str | None = None,
           unread: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every manifest's status (of `tenant`'s manifests only, with it), in a fixed order.
    `unread`: the manifests with objects where a manager could not read its backend (→ the
    manager), which the plan leaves out: never Ready, as what is there is unknown."""
    every = list(manifests)
    chosen = [m for m in every if tenant is None or m.tenant == tenant]
    said = _said_at(chosen, plan.diagnostics)
    resources = {r.address: r for r in plan.resources}
    unread = unread or {}
    return _document(chosen, plan.installation, revision, tenant, allocated_values(held),
                     lambda m: _condition(said.get(m.ref, []), resources.get(m.ref),
                                          unread.get(m.ref)),
                     {m.name for m in every if m.kind == "Tenant"})


def after_apply(manifests: Iterable[Manifest], plan: Plan, applied: Plan,
                left: Mapping[str, str], values: Mapping[str, dict[str, str]],
                revision: str | None, tenant: str) -> dict[str, Any]:
    """A tenant's status once `applied` (of `plan`) was carried out: Pending what the apply
    `left` (owner → why) and the changes it was not to make (drift left in place), as a
    target not declared yet; Ready at `revision` the rest. `manifests`: the tenant's;
    `values`: what allocated_values gives of the allocations."""
    said = _said_at(list(manifests), plan.diagnostics)
    done = {c.uid for c in applied.changes}
    resources = {r.address: r for r in plan.resources}

    def condition(manifest: Manifest) -> dict[str, Any]:
        if manifest.ref in left:
            return {"type": PENDING, "reason": "APPLY_FAILED", "message": left[manifest.ref]}
        resource = resources.get(manifest.ref)
        if resource is not None and any(c.action.changes and c.uid not in done
                                        for c in resource.changes):
            return {"type": PENDING, "reason": "NOT_APPLIED",
                    "message": f"left by this apply: {resource.reason}"}
        return _condition(said.get(manifest.ref, []), None)

    return _document(manifests, plan.installation, revision, tenant, values, condition)


def _document(manifests: Iterable[Manifest], installation: str, revision: str | None,
              tenant: str | None, values: Mapping[str, dict[str, str]],
              condition_of: Callable[[Manifest], dict[str, Any]],
              tenants: Iterable[str] = ()) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for manifest in sorted(manifests, key=lambda m: m.ref):
        condition = condition_of(manifest)
        if tenant is not None:
            condition = {**condition, "message": own_words(condition["message"], tenant,
                                                           tenants)}
        out.append({"kind": manifest.kind, "tenant": manifest.tenant, "name": manifest.name,
                    "file": manifest.doc.file, "line": manifest.doc.line,
                    "revision": revision if condition["type"] == READY else None,
                    "allocated": values.get(manifest.ref, {}), "condition": condition})
    return {"format_version": FORMAT_VERSION, "installation": installation,
            "revision": revision, "tenant": tenant, "manifests": out,
            "counts": {kind: sum(m["condition"]["type"] == kind for m in out)
                       for kind in (READY, PENDING, FAILED)}}


def own_words(message: str, tenant: str, tenants: Iterable[str] = ()) -> str:
    """A message as `tenant` may read it: another tenant's resource is named by its kind
    alone (a plan names the holder of an address a fixed value asks for, which in a shared
    pool may be another tenant's); a NIC of one of the other `tenants` (`globex/db-1/0`,
    as reachability names it) and a file of theirs (`tenants/globex/...`) by what they
    are."""
    said = _TENANT_REF.sub(lambda found: found[0] if found[2] == tenant
                           else f"another tenant's {found[1]}", message)
    others = sorted({t for t in tenants if t != tenant}, key=len, reverse=True)
    if not others:
        return said
    names = "|".join(map(re.escape, others))
    said = re.sub(r"(?<![\w.-])tenants/(?:" + names + r")/[^\s;,:()'\"]+(?::\d+)*",
                  "another tenant's file", said)
    nic = re.compile(r"(?<![\w./-])(?:" + names + r")/[a-z0-9-]+(?:/\d+)?(?![\w./-])")
    return nic.sub("another tenant's NIC", said)


def tenant_of(owner: str) -> str | None:
    """The tenant of an object's owner (`Kind/tenant/name`, or `Tenant/name`)."""
    parts = owner.split("/")
    if len(parts) == 3:
        return parts[1]
    return parts[1] if parts[0] == "Tenant" and len(parts) == 2 else None


def _condition(said: list[Diagnostic], resource: Any, unread: str | None = None
               ) -> dict[str, Any]:
    errors = [d for d in said if d.is_error]
    if errors:
        first = errors[0]
        return {"type": FAILED, "reason": first.code,
                "message": f"{first.file}:{first.line}: {first.message}"
                + (f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else "")}
    waiting = [d for d in said if d.code in PENDING_CODES]
    if waiting:
        return {"type": PENDING, "reason": waiting[0].code, "message": waiting[0].message}
    if resource is not None and resource.action.changes:
        return {"type": PENDING, "reason": str(resource.action).upper().replace("-", "_"),
                "message": f"not yet applied: {resource.reason}"}
    if unread is not None:
        return {"type": PENDING, "reason": "BACKEND_UNOBSERVED",
                "message": f"NetworkManager '{unread}' could not read its backend: whether "
                           "its objects there are what the revision asks is unknown"}
    return {"type": READY, "reason": "Applied",
            "message": "its backend objects are what the revision asks"}


def _said_at(manifests: list[Manifest], diagnostics: Iterable[Diagnostic]
             ) -> dict[str, list[Diagnostic]]:
    """The diagnostics said in each manifest's document (a document runs from its first
    line to the next document of the file)."""
    by_file: dict[str, list[Manifest]] = {}
    for manifest in manifests:
        by_file.setdefault(manifest.doc.file, []).append(manifest)
    for documents in by_file.values():
        documents.sort(key=lambda m: m.doc.line)
    out: dict[str, list[Diagnostic]] = {}
    for diagnostic in diagnostics:
        documents = by_file.get(diagnostic.file or "", [])
        found = [m for m in documents if m.doc.line <= (diagnostic.line or 0)]
        if found:
            out.setdefault(found[-1].ref, []).append(diagnostic)
    return out


def allocated_values(held: Mapping[str, Held]) -> dict[str, dict[str, str]]:
    """The recorded allocations by the manifest that holds them, named for people:
    `ipv4[0]`, `mac[0]` (by attachment), `apiVip`, `address`, `segmentId`..."""
    out: dict[str, dict[str, str]] = {}
    for key, found in sorted(held.items()):
        out.setdefault(holder_of(key), {})[_field_name(key)] = found.value
    return out


def _field_name(key: str) -> str:
    kind, _, rest = key.partition("/")
    parts = rest.split("/")
    if kind in ("ipv4", "ipv6", "mac"):
        return f"{kind}[{parts[-1]}]"
    if kind == "vip":
        return f"{parts[-1]}Vip"
    if kind == "gateway":
        return "routerAddress" + ("" if len(parts) < 3 else f"[{parts[2]}]")
    return {"eip": "address", "segment": "segmentId"}.get(kind, key)


def render_text(document: dict[str, Any]) -> str:
    lines = [f"{m['kind']} {m['tenant'] + '/' if m['tenant'] else ''}{m['name']}: "
             f"{m['condition']['type']}"
             + (f" at {_short(m['revision'])}" if m["revision"] else "")
             + ("" if m["condition"]["type"] == READY else f" ({m['condition']['reason']}: "
                f"{m['condition']['message']})")
             + "".join(f"\n  {name} {value}" for name, value in m["allocated"].items())
             for m in document["manifests"]]
    counts = document["counts"]
    lines.append(f"\n{counts[READY]} ready, {counts[PENDING]} pending, {counts[FAILED]} "
                 f"failed ({_short(document['revision'])})")
    return "\n".join(lines) + "\n"


def _short(revision: str | None) -> str:
    return f"revision {revision[:12]}" if revision else "the files on disk"
