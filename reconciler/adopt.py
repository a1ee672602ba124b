"""`unet import`: adopt backend rows that no installation owns (Terraform's `import`, Argo
CD's adoption), one VirtualNetwork at a time.

Two steps, as docs/import.md tells users:

- **import** (`adopt_networks(..., apply=False)`): read the rows, infer the manifests of
  one tenant (managers/ovn/adopt.py), render them with the allocations the rows already
  hold, and keep a network only when every row it renders is there already, equal but
  for unet's tags, and it holds nothing the manifests do not describe. The manifests of
  the networks kept are written to `tenants/<tenant>/imported/<network>.yaml`, for review.
- **adopt** (`apply=True`), once they are merged: the repo as it is rendered and matched
  the same way, and the matching rows given unet's tags in one transaction under the
  installation's lock. Nothing is created or deleted; the next plan is empty.

Everything else is refused, with a reason per row, and left as it is.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .desired import Desired, render_desired
from .diff import Action, Change
from .errors import UnetError
from .model import Model
from .objects import BackendObject, Held, observed_allocations
from .order import Step
from .plugins import managers_of
from .validate import Validation, validate_repo

if TYPE_CHECKING:
    from unet.managers.ovn.adopt import Matched, Network, Refusal, Rows
    from unet.managers.ovn.manager import OvnSession

#: Where the manifests of an imported network go, under the tenant's folder.
IMPORTED = "imported"
#: Attempts at a set of networks that validates: each drops the networks that do not.
_ROUNDS = 4


@dataclass
class NetworkReport:
    name: str
    file: str
    resources: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)  # tagged (or to be)
    reasons: list[str] = field(default_factory=list)  # why it is not adopted
    uuids: set[str] = field(default_factory=set)  # of the rows it matched

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
    refused: list[tuple[str, str]] = field(default_factory=list)  # (row, reason)

    def to_json(self) -> dict[str, Any]:
        tagged = sum(len(n.rows) for n in self.networks if n.adopted)
        return {"manager": self.manager, "tenant": self.tenant, "region": self.region,
                "applied": self.applied,
                "plan": {"tag": tagged, "create": 0, "update": 0, "delete": 0},
                "networks": [n.to_json() for n in self.networks],
                "refused": [{"row": row, "reason": reason} for row, reason in self.refused]}


def adopt_networks(repo: Path, head: Validation, manager: str, tenant: str,
                   region: str | None, apply: bool, lock_timeout: float = 60.0) -> Report:
    """Import (write the manifests) or, with `apply`, adopt (tag the rows)."""
    from unet.managers.ovn.adopt import infer, read_rows
    from unet.managers.ovn.manager import OvnManager

    assert head.context is not None
    model = Model(head.context)
    found = managers_of(model, [manager], resolve=True)[manager]
    if not isinstance(found, OvnManager):
        raise UnetError(f"unet import reads OVN managers only; NetworkManager {manager} is a "
                        f"{found.name} manager")
    if model.get("Tenant", None, tenant) is None:
        raise UnetError(f"no Tenant named {tenant}: the provider declares it first "
                        "(provider/tenants/)")
    chosen = _region(model, manager, tenant, region)
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(found.connect(repo.resolve()))
        assert isinstance(session, _session_type())
        if apply:  # read under the lock: what is tagged is what was read
            stack.enter_context(session.lock(lock_timeout, lambda _text: None))
        observation = session.observe()
        ours = observed_allocations(observation.objects)
        rows = read_rows(session.nb, model.installation)
        networks = infer(rows, tenant, chosen)
        held = {**ours, **_held(networks)}
        if apply:
            report = _adopt(head, session, manager, tenant, chosen, rows, held,
                            observation.uuids)
        else:
            report = _import(repo, session, manager, tenant, chosen, rows, networks, held,
                             observation.uuids)
    report.refused = sorted({(r.row, r.reason) for r in _refusals(rows, networks, report)})
    return report


def _session_type() -> type[OvnSession]:
    from unet.managers.ovn.manager import OvnSession

    return OvnSession


def _region(model: Model, manager: str, tenant: str, region: str | None) -> str:
    """The region the tenant's networks on `manager` are in: `region`, or the only one."""
    spec = model.get("Tenant", None, tenant).obj.spec  # type: ignore[union-attr]
    served = model.manager(manager).obj.spec.regions  # type: ignore[union-attr]
    possible = sorted(set(spec.regions) & set(served))
    if region is not None:
        if region not in possible:
            raise UnetError(f"region {region} is not one of tenant {tenant}'s regions that "
                            f"{manager} serves ({', '.join(possible) or 'none'})")
        return str(region)
    if len(possible) != 1:
        raise UnetError(f"tenant {tenant} has {len(possible) or 'no'} regions that {manager} "
                        f"serves ({', '.join(possible) or 'none'}): name one with --region")
    return str(possible[0])


def _held(networks: list[Network]) -> dict[str, Held]:
    return {key: Held(value, scope) for network in networks
            for key, (value, scope) in network.held.items()}


# --- import ---------------------------------------------------------------------------------


def _import(repo: Path, session: OvnSession, manager: str, tenant: str, region: str,
            rows: Rows, networks: list[Network], held: dict[str, Held],
            ours: dict[str, tuple[str, str]]) -> Report:
    report = Report(manager, tenant, region, applied=False)
    reports = {n.name: NetworkReport(n.name, _file(tenant, n.name),
                                     [f"{m['kind']}/{tenant}/{m['metadata']['name']}"
                                      for m in n.manifests],
                                     reasons=[f"{r.row}: {r.reason}" for r in n.refused
                                              if not n.manifests])
               for n in networks}
    candidates = [n for n in networks if n.manifests]
    for _round in range(_ROUNDS):
        if not candidates:
            break
        with _with_manifests(repo, tenant, candidates) as copy:
            validation = validate_repo(copy)
        failed = _invalid(validation, tenant, candidates)
        if not failed:
            desired = render_desired(validation, held)
            failed = _unmatched(desired, tenant, rows, session, manager, ours, reports,
                                {n.name for n in candidates})
        for name, reasons in failed.items():
            reports[name].reasons += reasons
        candidates = [n for n in candidates if n.name not in failed]
        if not failed:
            break
    for network in candidates:
        _write(repo, reports[network.name], network)
    report.networks = [reports[n.name] for n in networks]
    return report


@contextlib.contextmanager
def _with_manifests(repo: Path, tenant: str, networks: list[Network]) -> Iterator[Path]:
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


def _yaml(network: Network) -> str:
    head = (f"# Network {network.name}, imported by `unet import` from Northbound rows no "
            "installation owns:\n# review, merge, then run `unet import --apply` "
            "(docs/import.md).\n")
    return head + str(yaml.safe_dump_all(network.manifests, sort_keys=False))


def _invalid(validation: Validation, tenant: str, networks: list[Network]
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


def _write(repo: Path, report: NetworkReport, network: Network) -> None:
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
    out = {}
    for vn in model.kind("VirtualNetwork"):
        if vn.tenant == tenant:
            out[vn.ref] = vn.name
    for kind in ("Subnet", "SecurityGroup"):
        for found in model.kind(kind):
            if found.tenant == tenant:
                out[found.ref] = found.obj.spec.virtual_network
    for workload in model.workloads:
        network = model.network_of_workload(workload)
        if workload.tenant == tenant and network is not None:
            out[workload.ref] = network
    return out


@dataclass
class _Verdict:
    reasons: dict[str, list[str]]  # network → why not
    pairs: dict[str, list[tuple[BackendObject, BackendObject]]]  # network → (want, have)
    matched: Matched


def _verify(desired: Desired, tenant: str, rows: Rows, session: OvnSession, manager: str,
            ours: dict[str, tuple[str, str]], names: set[str]) -> _Verdict:
    """Per network: the rendered rows paired with the unowned rows they stand for, and what
    stops its adoption (a row to create, a field that differs, a row held that nothing
    renders)."""
    from unet.managers.ovn.adopt import match
    from unet.managers.ovn.reading import describe

    unit_of = _units(desired.model, tenant)
    wanted = [o for o in desired.objects if unit_of.get(o.owner) in names]
    matched = match([o for o in wanted if o.manager == manager], rows, session.nb, manager,
                    ours)
    reasons: dict[str, list[str]] = {}
    pairs: dict[str, list[tuple[BackendObject, BackendObject]]] = {}
    absent = {o.key for o in wanted if o.manager != manager or o.key not in matched.objects}
    for obj in wanted:
        unit = unit_of[obj.owner]
        have = matched.objects.get(obj.key) if obj.manager == manager else None
        if have is None:
            if obj.parent is None or obj.parent[0] not in absent:  # children: with it
                reasons.setdefault(unit, []).append(_created(obj, wanted, manager, describe))
            continue
        pairs.setdefault(unit, []).append((obj, have))
        reasons.setdefault(unit, []).extend(_differences(obj, have, describe(have)))
    owners = {o.key: unit_of[o.owner] for o in wanted if o.manager == manager}
    for parent, child in matched.extra:
        reasons.setdefault(owners[parent], []).append(
            f"{describe(matched.objects[parent])} holds {child}, which the manifests do not "
            "describe")
    return _Verdict({u: r for u, r in reasons.items() if r}, pairs, matched)


def _created(obj: BackendObject, wanted: list[BackendObject], manager: str,
             describe: Callable[[BackendObject], str]) -> str:
    """A row the manifests render that is not there, with the rows inside it."""
    if obj.manager != manager:
        return f"would create {obj.table} {obj.key} on {obj.manager} (for {obj.owner})"
    inside = Counter(o.table for o in wanted if o.parent is not None and o.parent[0] == obj.key)
    holding = f" with {', '.join(f'{n} {t}' for t, n in sorted(inside.items()))}" \
        if inside else ""
    return f"would create {describe(obj)}{holding} (for {obj.owner})"


def _differences(want: BackendObject, have: BackendObject, shown: str) -> list[str]:
    """What adopting `have` as `want` would change besides unet's tags, in words."""
    out = [f"{shown}: {column} is {have.fields.get(column)!r}, the manifests give {value!r}"
           for column, value in want.fields.items() if have.fields.get(column) != value]
    out += [f"{shown}: {column} refers to {list(have.refs.get(column, ()))}, the manifests "
            f"give {list(keys)}" for column, keys in
            sorted({**{c: () for c in have.refs}, **want.refs}.items())
            if tuple(have.refs.get(column, ())) != tuple(keys)]
    if have.parent != want.parent:
        out.append(f"{shown}: is in {have.parent}, the manifests put it in {want.parent}")
    return out


def _unmatched(desired: Desired, tenant: str, rows: Rows, session: OvnSession, manager: str,
               ours: dict[str, tuple[str, str]], reports: dict[str, NetworkReport],
               names: set[str]) -> dict[str, list[str]]:
    """The networks that cannot be adopted as imported, with why; the others' reports get
    the rows they tag."""
    verdict = _verify(desired, tenant, rows, session, manager, ours, names)
    for name in names:
        found = verdict.pairs.get(name, [])
        reports[name].rows = sorted(_label(have) for _want, have in found)
        reports[name].uuids = {verdict.matched.uuids[have.key][1] for _want, have in found}
    return verdict.reasons


def _label(obj: BackendObject) -> str:
    from unet.managers.ovn.reading import describe

    return describe(obj)


# --- adopt ----------------------------------------------------------------------------------


def _adopt(head: Validation, session: OvnSession, manager: str, tenant: str, region: str,
           rows: Rows, held: dict[str, Held], ours: dict[str, tuple[str, str]]) -> Report:
    """Tag the unowned rows that the repo's networks of `tenant` render exactly, a network
    at a time; networks none of whose rows are unowned are not adoption's business."""
    report = Report(manager, tenant, region, applied=True)
    desired = render_desired(head, held)
    names = set(_units(desired.model, tenant).values())
    verdict = _verify(desired, tenant, rows, session, manager, ours, names)
    changes: dict[str, Change] = {}
    for name in sorted(verdict.pairs):
        found = verdict.pairs[name]
        network = NetworkReport(name, _file(tenant, name),
                                sorted({want.owner for want, _have in found}),
                                sorted(_label(have) for _want, have in found),
                                verdict.reasons.get(name, []))
        network.uuids = {verdict.matched.uuids[have.key][1] for _want, have in found}
        report.networks.append(network)
        if network.adopted:
            changes.update((want.uid, Change(want.uid, have, want, Action.UPDATE, "adopted"))
                           for want, have in found)
    if changes:
        steps = [Step(Action.UPDATE, uid) for uid in sorted(changes)]
        session.nb.apply({**ours, **verdict.matched.uuids}, [steps], changes,
                         session.installation, lambda _i, _n, _s: lambda _d, _t: None)
    return report


def _refusals(rows: Rows, networks: list[Network], report: Report) -> Iterator[Refusal]:
    """Every unowned row that stays as it is, with why."""
    from unet.managers.ovn.adopt import Refusal

    yield from rows.refused
    said = set()
    for network in networks:
        for refusal in network.refused:
            said.add(refusal.row)
            yield refusal
    adopted = {uuid for n in report.networks if n.adopted for uuid in n.uuids}
    refused = {uuid: n.name for n in report.networks if not n.adopted for uuid in n.uuids}
    for found in rows.free.values():
        for uuid in found:
            shown = rows.label(uuid)
            if uuid in adopted or shown in said:
                continue
            if uuid in refused:
                yield Refusal(shown, f"its network {refused[uuid]} is not adopted (its "
                              "reasons are above)", refused[uuid])
            else:
                yield Refusal(shown, "no imported manifest describes it (unet reads routers, "
                              "their switches, plain ports, port groups and DHCP options)")
