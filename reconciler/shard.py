"""Shards: one installation split over several runs (daemons), by region.

A shard is a set of regions (`--region`, repeatable). Its share of the repo is `unet.yaml`,
all of `provider/`, and the folders of the tenants whose regions all lie in the shard. A
run of the shard reads, validates, renders, observes and applies that share only, so it
holds about its share in memory; and it never writes a row of another shard, even though
the shards share one backend and one installation:

- **What a shard owns** (`Ownership.owns`): an object whose owner is a tenant's resource
  belongs to the shard holding the tenant (whatever the resource, declared or removed
  from the repo); one of a provider's resource with a region (an ExternalIPPool, a
  ProviderNetwork) to the shard of its region. A tenant whose regions are not all in one
  shard is refused (SHARD_SPLITS_TENANT): a tenant is never split.
- **What a shard writes** records its regions (`unet:regions`, not part of an object's
  content: written with the rows a shard writes, never a reason to write one), so that
  the rows of a tenant removed from the repo (its Tenant gone) still say whose they are.
- **What a shard reads** (`claimed`): of the installation's objects, only those it owns;
  an object whose owner the repo no longer knows, by its `unet:regions`, else by its
  parent's; one that says nothing (written before shards, by an unsharded run) belongs
  to no shard: an unsharded run removes it. Objects of other shards are, to a shard, as
  objects of another installation: never planned, changed or deleted, and a row of its
  own that holds one is not deleted (HOLDS_FOREIGN_OBJECTS).

What a shard cannot check is what lies between shards: the whole repo's validation
(the pull request's) does. docs/shards.md says how to run them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .diagnostics import Diagnostic
from .objects import TAG_REGIONS, BackendObject
from .schema import Manifest
from .sources import SourceFile

#: An object as `claimed` sees it: its owner, its TAG_REGIONS and its parent's key.
Entry = tuple[str, str | None, str | None]

#: The manifests of one file (the run's ParsedFiles: each file is parsed once).
ParseFn = Callable[[SourceFile], list[Manifest]]

#: The files of a revision that a path filter keeps (validate.repo_files).
Listing = Callable[[Callable[[str], bool]], Iterable[SourceFile | Diagnostic]]


@dataclass(frozen=True)
class Shard:
    """A set of regions that one run (one daemon) reconciles."""

    regions: frozenset[str]

    @property
    def name(self) -> str:
        return "+".join(sorted(self.regions))

    @classmethod
    def of(cls, regions: Iterable[str] | None) -> Shard | None:
        found = frozenset(regions or ())
        return cls(found) if found else None

    def holds(self, regions: Iterable[str]) -> bool | None:
        """Whether a tenant (or a row) of these regions is this shard's: True when all are
        its, False when none is, None when they are split between shards."""
        wanted = set(regions)
        inside = wanted & self.regions
        if inside == wanted and wanted:
            return True
        return False if not inside else None


# --- the share of the repo -----------------------------------------------------------------


def _outside_tenants(path: str) -> bool:
    return path != "tenants" and not path.startswith("tenants/")


@dataclass
class Share:
    """What a shard reads of a revision: its files, and why some tenants cannot be its."""

    items: list[SourceFile | Diagnostic]
    tenants: frozenset[str]


def share_files(shard: Shard, listing: Listing, parse: ParseFn) -> Share:
    """The files of the shard's share: `unet.yaml` and `provider/` whole (read first, to
    know the tenants and their regions), then its tenants' folders. `listing` lists the
    revision's files that a path filter keeps; `parse` gives the manifests of a file (the
    run's ParsedFiles: each file is parsed once)."""
    provider = list(listing(_outside_tenants))
    declared = [m for item in provider if isinstance(item, SourceFile)
                for m in parse(item) if m.kind in ("Tenant", "NetworkManager")]
    problems = [*_unknown_regions(shard, declared), *_split_tenants(shard, declared),
                *_split_managers(shard, declared)]
    tenants = frozenset(m.name for m in declared
                        if m.kind == "Tenant" and shard.holds(m.obj.spec.regions))
    if problems:  # the run stops on them: its tenants' files are not worth reading
        return Share([*provider, *problems], tenants)

    def keep(rel: str) -> bool:
        parts = rel.split("/")
        return parts[0] == "tenants" and (len(parts) == 1 or parts[1] in tenants)

    mine = [item for item in listing(keep)
            if (item.path if isinstance(item, SourceFile) else item.file or "")
            .startswith("tenants/")]
    return Share([*provider, *mine], tenants)


def _unknown_regions(shard: Shard, declared: list[Manifest]) -> list[Diagnostic]:
    """A region no Tenant uses and no NetworkManager serves (a misspelt `--region`) would
    make a shard of nothing, whose every plan says "No changes"."""
    known = sorted({region for m in declared for region in m.obj.spec.regions})
    out = []
    for region in sorted(shard.regions - set(known)):
        close = difflib.get_close_matches(region, known, n=1)
        out.append(Diagnostic(
            "SHARD_REGION_UNKNOWN",
            f"region {region} (--region) is used by no Tenant and served by no "
            "NetworkManager: the shard would hold nothing of it",
            hint=f"did you mean {close[0]}?" if close else
            f"the regions of the repo: {', '.join(known) or 'none'}"))
    return out


def _split_tenants(shard: Shard, declared: list[Manifest]) -> list[Diagnostic]:
    return [Diagnostic(
        "SHARD_SPLITS_TENANT",
        f"tenant {m.name} uses regions {', '.join(m.obj.spec.regions)}, not all of them in "
        f"this shard ({', '.join(sorted(shard.regions))}): a tenant belongs to one shard",
        file=m.doc.file, line=m.doc.line, path="/spec/regions",
        hint="give one shard every region of the tenant (--region, repeated)")
        for m in declared if m.kind == "Tenant" and shard.holds(m.obj.spec.regions) is None]


def _split_managers(shard: Shard, declared: list[Manifest]) -> list[Diagnostic]:
    """A k8s manager allocates its subnets' segment ids over all its regions: a shard
    that had only some of them could hand out an id another shard's subnet holds."""
    return [Diagnostic(
        "SHARD_SPLITS_MANAGER",
        f"NetworkManager {m.name} (k8s) serves regions {', '.join(m.obj.spec.regions)}, not "
        f"all of them in this shard ({', '.join(sorted(shard.regions))}): its segment ids "
        "are allocated over all of them", file=m.doc.file, line=m.doc.line,
        path="/spec/regions", hint="give one shard every region of the manager")
        for m in declared if m.kind == "NetworkManager" and m.obj.spec.role == "k8s"
        and shard.holds(m.obj.spec.regions) is None]


# --- what a shard owns ---------------------------------------------------------------------


@dataclass
class Ownership:
    """Whose each owner is, from a shard's validated share (which holds every Tenant and
    every provider resource of the revision)."""

    shard: Shard
    tenant_regions: dict[str, frozenset[str]] = field(default_factory=dict)
    provider_region: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def of(cls, shard: Shard, manifests: Iterable[Manifest]) -> Ownership:
        found = cls(shard)
        for m in manifests:
            if m.kind == "Tenant":
                found.tenant_regions[m.name] = frozenset(m.obj.spec.regions)
            elif m.obj.scope != "tenant":
                found.provider_region[m.ref] = getattr(m.obj.spec, "region", None)
        return found

    def regions_of(self, owner: str) -> frozenset[str] | None:
        """The regions of an owner the revision declares (a tenant's resource: its
        tenant's; a provider's: its own), None for one it does not."""
        parts = owner.split("/")
        if len(parts) == 3:
            return self.tenant_regions.get(parts[1])
        region = self.provider_region.get(owner, "")
        if region == "":
            return None
        return frozenset({region} if region else ())

    def owns(self, owner: str) -> bool | None:
        """Whether the shard owns the objects of `owner`; None when the revision does not
        know the owner (removed from the repo)."""
        regions = self.regions_of(owner)
        if regions is None:
            return None
        return bool(self.shard.holds(regions))

    def values(self) -> list[str]:
        """The regions tags the shard's rows record: its tenants' region sets and its
        regions (of the provider's rows)."""
        tenants = {",".join(sorted(regions)) for regions in self.tenant_regions.values()
                   if regions and self.shard.holds(regions)}
        return sorted(tenants | set(self.shard.regions))

    def tag(self, owner: str) -> str | None:
        regions = self.regions_of(owner)
        return ",".join(sorted(regions)) if regions else None

    def claimed(self, entries: Mapping[str, Entry]) -> set[str]:
        """The keys of the objects (key → Entry) that are this shard's: by owner, else by
        the regions they record, else as their parent; else nobody's."""
        memo: dict[str, bool] = {}

        def mine(key: str, depth: int = 0) -> bool:
            found = memo.get(key)
            if found is None:
                owner, tag, parent = entries[key]
                found = self.owns(owner)
                if found is None and tag:
                    found = bool(self.shard.holds(tag.split(",")))
                if found is None:
                    found = parent is not None and parent in entries and depth < 8 \
                        and mine(parent, depth + 1)
                memo[key] = found
            return found

        return {key for key in entries if mine(key)}

    def claim(self, objects: list[BackendObject]) -> list[BackendObject]:
        """Of one manager's objects, the shard's."""
        entries = {o.key: (o.owner, o.meta.get(TAG_REGIONS),
                           o.parent[0] if o.parent else None) for o in objects}
        keep = self.claimed(entries)
        return [o for o in objects if o.key in keep]

