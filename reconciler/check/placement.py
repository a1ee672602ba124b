"""Placement and identity: the folder is the authority over who owns a manifest."""

from __future__ import annotations

from ..diagnostics import Diagnostic
from ..schema import Manifest
from ..sources import REPO_CONFIG_FILE
from .context import Context


def check_placement(ctx: Context) -> list[Manifest]:
    """Report misplaced and duplicate manifests; return the ones that may go on."""
    placed: list[Manifest] = []
    for manifest in ctx.manifests:
        if _placement_ok(ctx, manifest):
            placed.append(manifest)
    for manifest in placed:
        first = ctx.index.get(manifest.identity)
        if first is not None:
            ctx.report("DUPLICATE_NAME", manifest, ("metadata", "name"),
                       f"{manifest.ref} is already declared in {first.doc.file}:{first.doc.line}",
                       "rename one of them")
            continue
        ctx.index[manifest.identity] = manifest
        ctx.by_kind[manifest.kind].append(manifest)
    _check_repo_config(ctx)
    _check_tenant_folders(ctx)
    return [m for m in placed if id(m) not in ctx.invalid]


def _placement_ok(ctx: Context, manifest: Manifest) -> bool:
    scope, area, kind = manifest.obj.scope, manifest.doc.area, manifest.kind
    expected = {"root": "root", "provider": "provider", "tenant": "tenants"}[scope]
    if area == expected and (area != "tenants" or manifest.doc.tenant):
        if scope == "tenant":
            declared = manifest.obj.metadata.tenant
            if declared is not None and declared != manifest.doc.tenant:
                ctx.report("TENANT_MISMATCH", manifest, ("metadata", "tenant"),
                           f"metadata.tenant is '{declared}' but the file lies in "
                           f"tenants/{manifest.doc.tenant}/",
                           "the folder decides the tenant: remove metadata.tenant or move "
                           "the file")
                ctx.declared_invalid.add(manifest.identity)  # the folder's, all the same
                return False
        return True
    where = {
        "root": f"only in {REPO_CONFIG_FILE} at the root",
        "provider": "only under provider/",
        "tenant": "only under tenants/<tenant>/",
    }[scope]
    ctx.report("KIND_NOT_ALLOWED_HERE", manifest, ("kind",),
               f"{kind} does not belong in {manifest.doc.file}; it may be declared {where}",
               "move the manifest; folders decide ownership (CODEOWNERS)")
    return False


def _check_repo_config(ctx: Context) -> None:
    configs = ctx.kind("RepositoryConfig")
    if len(configs) > 1:
        for extra in configs[1:]:
            ctx.report("REPO_CONFIG_MISSING", extra, ("kind",),
                       "more than one RepositoryConfig", f"keep one, in {REPO_CONFIG_FILE}")
    if not configs and not ctx.declares_invalid("RepositoryConfig"):
        ctx.diagnostics.append(
            Diagnostic("REPO_CONFIG_MISSING",
                       f"no RepositoryConfig: the repo needs {REPO_CONFIG_FILE} at its root",
                       file=REPO_CONFIG_FILE, line=None,
                       hint="create unet.yaml with kind RepositoryConfig, spec.installation and "
                            "spec.prune"))


def _check_tenant_folders(ctx: Context) -> None:
    known = {m.name for m in ctx.kind("Tenant")}
    known |= {name for kind, _, name in ctx.declared_invalid if kind == "Tenant"}
    reported: set[str] = set()
    for manifest in ctx.manifests:
        tenant = manifest.doc.tenant
        if manifest.doc.area != "tenants" or tenant is None or tenant in known:
            continue
        if id(manifest) in ctx.invalid:
            continue
        if tenant not in reported:
            reported.add(tenant)
            ctx.report("UNKNOWN_TENANT", manifest, ("metadata",),
                       f"tenants/{tenant}/ has no Tenant '{tenant}'",
                       f"declare a Tenant named '{tenant}' under provider/")
        else:
            ctx.invalid.add(id(manifest))
