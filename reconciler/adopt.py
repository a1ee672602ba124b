"""`unet import`: adopt backend objects that no installation owns (Terraform's `import`,
Argo CD's adoption), one VirtualNetwork at a time.

Two steps, as docs/import.md tells users:

- **import** (`apply=False`): the manager's `Adopter` (contract.py) reads what no
  installation owns and guesses the manifests of one tenant; they are rendered with the
  allocations those objects hold already, and a network is kept only when every object it
  renders is there, equal but for unet's tags, and holds nothing the manifests do not
  describe. The manifests of the networks kept are written to
  `tenants/<tenant>/imported/<network>.yaml`, for review. Nothing is written to the backend.
- **adopt** (`apply=True`), once they are merged: under the backend's lock, the repo as it
  is rendered and matched the same way, and the matching objects given unet's tags in one
  transaction. Nothing is created or deleted; the next plan is empty.

Everything else is refused, with a reason per object, and left as it is.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .contract import Adopter, Adoption, ImportedNetwork, Manager, Refusal
from .desired import render_desired
from .engine import say_waiting
from .errors import UnetError
from .model import Model
from .objects import BackendObject, Held, observed_allocations
from .plugins import managers_of
from .validate import Validation, validate_repo

#: Where the manifests of an imported network go, under the tenant's folder.
IMPORTED = "imported"

Pairs = list[tuple[BackendObject, BackendObject]]  # (rendered, found)


@dataclass
class NetworkReport:
    name: str
    file: str
    resources: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)  # tagged (or to be)
    reasons: list[str] = field(default_factory=list)  # why it is not adopted
    ids: set[str] = field(default_factory=set)  # of the objects it matched

    @property
    def adopted(self) -> bool:
        return not self.reasons and bool(self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "adopted": self.adopted, "file": self.file,
                "resources": self.resources, "rows": self.rows, "reasons": self.reasons}


@dataclass
class Report:
    manager: str
    tenant: str
    region: str
    applied: bool
    networks: list[NetworkReport] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        tagged = sum(len(n.rows) for n in self.networks if n.adopted)
        return {"manager": self.manager, "tenant": self.tenant, "region": self.region,
                "applied": self.applied,
                "plan": {"tag": tagged, "create": 0, "update": 0, "delete": 0},
                "networks": [n.to_json() for n in self.networks],
                "refused": [{"row": r.row, "reason": r.reason} for r in self.refused]}


@dataclass
class _Run:
    """What both steps share: the manager, its adopter, and what is held already."""

    manager: Manager
    adopter: Adopter
    tenant: str
    held: dict[str, Held]


def adopt_networks(repo: Path, head: Validation, manager: str, tenant: str,
                   region: str | None, apply: bool, lock_timeout: float = 60.0) -> Report:
    """Import (write the manifests) or, with `apply`, adopt (tag the objects)."""
    assert head.context is not None
    model = Model(head.context)
    found = managers_of(model, [manager], resolve=True)[manager]
    if not found.adopts:
        raise UnetError(f"NetworkManager {manager} (plugin {found.name}) cannot import: its "
                        "backend has no adoption (the ovn plugin has)")
    if model.get("Tenant", None, tenant) is None:
        raise UnetError(f"no Tenant named {tenant}: the provider declares it first "
                        "(provider/tenants/)")
    chosen = _region(model, manager, tenant, region)
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(found.connect(repo.resolve()))
        if apply:  # read under the lock: what is tagged is what was read
            stack.enter_context(session.lock(lock_timeout, say_waiting))
        observation = session.observe()
        adopter = session.adopter(observation)
        if adopter is None:
            raise UnetError(f"NetworkManager {manager} (plugin {found.name}) cannot import: "
                            "its backend has no adoption")
        networks = _distinct(adopter.networks(tenant, chosen))
        held = {**observed_allocations(observation.objects),
                **{key: value for n in networks for key, value in n.held.items()}}
        run = _Run(found, adopter, tenant, held)
        report = _adopt(run, head, manager, chosen) if apply else \
            _import(run, repo, manager, chosen, networks)
        report.refused = _refusals(adopter, networks, report)
        _say_why_held(report, networks)
    return report


def _say_why_held(report: Report, networks: list[ImportedNetwork]) -> None:
    """A row that a network's row holds and that inference refused (a port with dynamic
    addresses, say): its reason beside the network's, where the operator reads."""
    why = {r.row: r.reason for n in networks for r in n.refused}
    tail = ", which the manifests do not describe"
    for network in report.networks:
        network.reasons = [
            f"{reason} ({why[held]})" if reason.endswith(tail)
            and (held := reason[:-len(tail)].rpartition(" holds ")[2]) in why else reason
            for reason in network.reasons]


def _distinct(networks: list[ImportedNetwork]) -> list[ImportedNetwork]:
    """The networks, but those whose names several give (routers `a_b` and `a.b`): those
    refused, for one name is one VirtualNetwork."""
    counts = Counter(n.name for n in networks)
    return [n if counts[n.name] == 1 else ImportedNetwork(n.name, refused=[Refusal(
        f"network {n.name}", f"{counts[n.name]} routers give this name: rename all but one "
                             "(a router's name is free to choose) and import again")])
            for n in networks if counts[n.name] == 1 or n is _first(networks, n.name)]


def _first(networks: list[ImportedNetwork], name: str) -> ImportedNetwork:
    return next(n for n in networks if n.name == name)


def _region(model: Model, manager: str, tenant: str, region: str | None) -> str:
    """The region the tenant's networks on `manager` are in: `region`, or the only one."""
    regions = model.get("Tenant", None, tenant).obj.spec.regions  # type: ignore[union-attr]
    served = model.manager(manager).obj.spec.regions  # type: ignore[union-attr]
    possible = sorted(set(regions) & set(served))
    if region is not None:
        if region not in possible:
            raise UnetError(f"region {region} is not one of tenant {tenant}'s regions that "
                            f"{manager} serves ({', '.join(possible) or 'none'})")
        return str(region)
    if len(possible) != 1:
        raise UnetError(f"tenant {tenant} has {len(possible) or 'no'} regions that {manager} "
                        f"serves ({', '.join(possible) or 'none'}): name one with --region")
    return str(possible[0])


# --- import ---------------------------------------------------------------------------------


def _import(run: _Run, repo: Path, manager: str, region: str,
            networks: list[ImportedNetwork]) -> Report:
    """Keep the networks whose manifests validate and render exactly what is there; write
    their files."""
    reports = {n.name: NetworkReport(n.name, _file(run.tenant, n.name),
                                     [f"{m['kind']}/{run.tenant}/{m['metadata']['name']}"
                                      for m in n.manifests],
                                     reasons=[f"{r.row}: {r.reason}" for r in n.refused
                                              if not n.manifests])
               for n in networks}
    candidates = [n for n in networks if n.manifests]
    while candidates:  # each round that fails drops a network: the rest is checked again
        with _with_manifests(repo, run.tenant, candidates) as copy:
            validation = validate_repo(copy)
        failed = _invalid(validation, run.tenant, candidates)
        if not failed:
            verdict = _verify(run, validation, {n.name for n in candidates})
            for name in verdict.pairs:
                reports[name].rows = _shown(run, verdict.pairs[name])
                reports[name].ids = {verdict.adoption.ids[have.key]
                                     for _want, have in verdict.pairs[name]}
            failed = verdict.reasons
        for name, reasons in failed.items():
            reports[name].reasons += reasons
        candidates = [n for n in candidates if n.name not in failed]
        if not failed:
            break
    for network in candidates:
        _write(repo, reports[network.name], network)
    return Report(manager, run.tenant, region, applied=False,
                  networks=[reports[n.name] for n in networks])


@contextlib.contextmanager
def _with_manifests(repo: Path, tenant: str, networks: list[ImportedNetwork]) -> Iterator[Path]:
    """A copy of the repo's manifests with the networks' files added."""
    with tempfile.TemporaryDirectory(prefix="unet-import-") as scratch:
        copy = Path(scratch) / "repo"
        shutil.copytree(repo, copy, symlinks=True,
                        ignore=shutil.ignore_patterns(".unet", ".git"))
        for network in networks:
            target = copy / _file(tenant, network.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_yaml(network))
        yield copy


def _file(tenant: str, network: str) -> str:
    return f"tenants/{tenant}/{IMPORTED}/{network}.yaml"


def _yaml(network: ImportedNetwork) -> str:
    head = (f"# Network {network.name}, imported by `unet import` from backend rows no "
            "installation owns:\n# review, merge, then run `unet import --apply` "
            "(docs/import.md).\n")
    return head + str(yaml.safe_dump_all(network.manifests, sort_keys=False))


def _invalid(validation: Validation, tenant: str, networks: list[ImportedNetwork]
             ) -> dict[str, list[str]]:
    """The networks whose manifests do not validate, with the diagnostics; an error in
    another file (a quota, say) refuses them all."""
    files = {_file(tenant, n.name): n.name for n in networks}
    out: dict[str, list[str]] = {}
    for diagnostic in validation.diagnostics:
        if not diagnostic.is_error:
            continue
        text = f"{diagnostic.code}: {diagnostic.message}"
        name = files.get(diagnostic.file or "")
        for network in [name] if name is not None else list(files.values()):
            out.setdefault(network, []).append(text)
    return out


def _write(repo: Path, report: NetworkReport, network: ImportedNetwork) -> None:
    target = repo / report.file
    text = _yaml(network)
    if target.exists() and target.read_text() != text:
        report.reasons.append(f"{report.file} exists with other content: move it away to "
                              "import again, or adopt it with --apply")
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


# --- matching -------------------------------------------------------------------------------


def _units(model: Model, tenant: str) -> dict[str, str]:
    """Owner → the VirtualNetwork it belongs to, of the tenant's resources on networks."""
    out = {vn.ref: vn.name for vn in model.kind("VirtualNetwork") if vn.tenant == tenant}
    for kind in ("Subnet", "SecurityGroup"):
        out.update((found.ref, found.obj.spec.virtual_network) for found in model.kind(kind)
                   if found.tenant == tenant)
    for workload in model.workloads:
        network = model.network_of_workload(workload)
        if workload.tenant == tenant and network is not None:
            out[workload.ref] = network
    return out


@dataclass
class _Verdict:
    reasons: dict[str, list[str]]  # network → why not
    pairs: dict[str, Pairs]  # network → (rendered, found)
    adoption: Adoption


def _verify(run: _Run, validation: Validation, names: set[str]) -> _Verdict:
    """Per network: the rendered objects paired with the unowned objects they stand for, and
    what stops its adoption (an object to create, a field that differs, an object held that
    nothing renders)."""
    desired = render_desired(validation, run.held, tenants=frozenset({run.tenant}))
    unit_of = _units(desired.model, run.tenant)
    wanted = [o for o in desired.objects if unit_of.get(o.owner) in names]
    mine = [o for o in wanted if o.manager == run.manager.manager]
    adoption = run.adopter.match(mine)
    describe = run.manager.describe
    reasons: dict[str, list[str]] = {}
    pairs: dict[str, Pairs] = {}
    absent = {o.key for o in wanted if o not in mine or o.key not in adoption.objects}
    for obj in wanted:
        unit = unit_of[obj.owner]
        have = adoption.objects.get(obj.key) if obj in mine else None
        if have is None:
            if obj.parent is None or obj.parent[0] not in absent:  # children: with it
                reasons.setdefault(unit, []).append(_created(obj, wanted, obj in mine,
                                                             describe))
            continue
        pairs.setdefault(unit, []).append((obj, have))
        reasons.setdefault(unit, []).extend(_differences(obj, have, describe(have)))
    owners = {o.key: unit_of[o.owner] for o in mine}
    for parent, child in adoption.extra:
        verb = "" if child.startswith("refers to ") else "holds "  # a reference, not a child
        reasons.setdefault(owners[parent], []).append(
            f"{describe(adoption.objects[parent])} {verb}{child}, which the manifests do not "
            "describe")
    return _Verdict({u: r for u, r in reasons.items() if r}, pairs, adoption)


def _created(obj: BackendObject, wanted: list[BackendObject], here: bool,
             describe: Callable[[BackendObject], str]) -> str:
    """An object the manifests render that is not there, with the objects inside it."""
    if not here:
        return f"would create {obj.table} {obj.key} on {obj.manager} (for {obj.owner})"
    inside = Counter(o.table for o in wanted if o.parent is not None and o.parent[0] == obj.key)
    holding = f" with {', '.join(f'{n} {t}' for t, n in sorted(inside.items()))}" \
        if inside else ""
    return f"would create {describe(obj)}{holding} (for {obj.owner})"


def _differences(want: BackendObject, have: BackendObject, shown: str) -> list[str]:
    """What adopting `have` as `want` would change besides unet's tags, in words."""
    out = [_difference(shown, column, have.fields.get(column), value)
           for column, value in want.fields.items() if have.fields.get(column) != value]
    for column in sorted(set(have.refs) | set(want.refs)):
        here, wanted = have.refs.get(column, ()), want.refs.get(column, ())
        if tuple(here) == tuple(wanted):
            continue
        # What differs, not both lists: a network's group of fifty ports lacking one.
        lacks = [key for key in wanted if key not in here]
        extra = [key for key in here if key not in wanted]
        parts = ([f"lacks {', '.join(lacks)}"] if lacks else []) + \
            ([f"also refers to {', '.join(extra)}, which the manifests do not"]
             if extra else [])
        out.append(f"{shown}: {column} {'; '.join(parts)}" if parts else
                   f"{shown}: {column} refers to {list(here)}, the manifests give "
                   f"{list(wanted)}")
    if have.parent != want.parent:
        out.append(f"{shown}: is in {have.parent}, the manifests put it in {want.parent}")
    return out


def _difference(shown: str, column: str, have: Any, want: Any) -> str:
    """One column that differs; of a map (DHCP options, other_config), only the keys that
    differ, so that the one key to set is not lost among those that agree."""
    if isinstance(have, dict) and isinstance(want, dict):
        keys = sorted(k for k in {*have, *want} if have.get(k) != want.get(k))
        return (f"{shown}: {column} differ in {', '.join(keys)}: "
                f"{ {k: have[k] for k in keys if k in have}!r} here, the manifests give "
                f"{ {k: want[k] for k in keys if k in want}!r}")
    return f"{shown}: {column} is {have!r}, the manifests give {want!r}"


def _shown(run: _Run, pairs: Pairs) -> list[str]:
    return sorted(run.manager.describe(have) for _want, have in pairs)


# --- adopt ----------------------------------------------------------------------------------


def _adopt(run: _Run, head: Validation, manager: str, region: str) -> Report:
    """Tag the unowned objects that the repo's networks of the tenant render exactly, a
    network at a time; networks none of whose objects are unowned are not adoption's
    business (unet's already, or not built yet)."""
    report = Report(manager, run.tenant, region, applied=True)
    assert head.context is not None
    names = set(_units(Model(head.context), run.tenant).values())
    verdict = _verify(run, head, names)
    tagged: Pairs = []
    for name in sorted(verdict.pairs):
        found = verdict.pairs[name]
        network = NetworkReport(name, _file(run.tenant, name),
                                sorted({want.owner for want, _have in found}),
                                _shown(run, found), verdict.reasons.get(name, []),
                                {verdict.adoption.ids[have.key] for _want, have in found})
        report.networks.append(network)
        if network.adopted:
            tagged += found
    if tagged:
        run.adopter.tag(tagged)
    return report


def _refusals(adopter: Adopter, networks: list[ImportedNetwork], report: Report
              ) -> list[Refusal]:
    """Every unowned object that stays as it is, with why."""
    out = [*adopter.refused(), *(r for n in networks for r in n.refused)]
    said = {r.row for r in out}
    adopted = {i for n in report.networks if n.adopted for i in n.ids}
    refused = {i: n.name for n in report.networks if not n.adopted for i in n.ids}
    for found, shown in adopter.unowned().items():
        if found in adopted or shown in said:
            continue
        if found in refused:
            out.append(Refusal(shown, f"its network {refused[found]} is not adopted (its "
                                      "reasons are above)"))
        else:
            out.append(Refusal(shown, "no imported manifest describes it (unet reads routers, "
                                      "their switches, plain ports, port groups and DHCP "
                                      "options)"))
    return sorted(set(out), key=lambda r: (r.row, r.reason))
