"""`unet reach --live`: the model's answer cross-checked with the live fabric.

Every path the answer rests on (reach_query.probes) is handed as a `Probe` to the fabric
manager of the network it enters (`FabricManager.trace`), and the model's verdict for the
path is compared with what the backend does with that first packet. The comparison is
backend-neutral: what a backend needs to trace (a Southbound, ovn-trace) is the plugin's.

The answer agrees when every path the backend could tell about has the model's verdict;
a path it cannot tell about (`delivered` None) is reported, not counted; with no path
told about at all, agreement is unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .contract import FabricManager, Traced
from .model import Model
from .plugins import managers_of
from .reach_query import Check


@dataclass
class TracedPath:
    """One path: the model's verdict and the backend's."""

    check: Check
    manager: str
    traced: Traced | None

    @property
    def path(self) -> str:
        probe = self.check.probe
        what = probe.protocol + (f"/{probe.port}" if probe.port else "")
        return f"{probe.source or probe.sender} → {probe.destination} ({what})"

    @property
    def live(self) -> bool | None:
        return None if self.traced is None else self.traced.delivered

    @property
    def agrees(self) -> bool | None:
        return None if self.live is None else self.live == self.check.allowed

    def to_json(self) -> dict[str, Any]:
        probe = self.check.probe
        return {"path": self.path, "from": probe.source or probe.sender,
                "to": probe.target or "outside", "address": probe.destination,
                "manager": self.manager, "model": self.check.allowed,
                "live": self.live, "because": self.check.why,
                "detail": list(self.traced.detail) if self.traced else
                ["the manager cannot trace packets"]}


@dataclass
class Live:
    paths: list[TracedPath] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool | None:
        told = [p.agrees for p in self.paths if p.agrees is not None]
        return None if not told else all(told)

    def to_json(self) -> dict[str, Any]:
        return {"agrees": self.agrees, "probes": [p.to_json() for p in self.paths],
                "notes": self.notes}

    def lines(self, backend: str = "the fabric") -> list[str]:
        """`live: agrees`, `live: DISAGREES — ...` per path, or `live: not checked`."""
        if self.agrees is None:
            return ["live: not checked — " + ("; ".join(self.notes) or "nothing to trace")]
        out = ["live: agrees" if self.agrees else ""]
        for path in self.paths:
            if path.agrees is False:
                said = "allowed" if path.check.allowed else "not allowed"
                out.append(f"live: DISAGREES — {path.path}: the model says {said}, "
                           f"{path.manager} says " + "; ".join(_detail(path)))
        return [line for line in out if line] + [f"  note: {n}" for n in self.notes]


def _detail(path: TracedPath) -> list[str]:
    return list(path.traced.detail) if path.traced and path.traced.detail else \
        ["delivered" if path.live else "not delivered"]


def cross_check(model: Model, checks: list[Check], workdir: Path, protocol: str,
                port: int | None) -> Live:
    """Each check traced by the fabric manager of its network."""
    live = Live()
    if not checks:
        live.notes.append(
            f"give --port {protocol}/PORT: a probe is one packet" if protocol in ("tcp", "udp")
            and port is None else "no path of this answer can be traced (addresses known "
            "only after apply, or a path that never leaves the model)")
        return live
    names = {check.network: _manager_name(model, check) for check in checks}
    managers = managers_of(model, sorted({n for n in names.values() if n}), resolve=True)
    for check in checks:
        name = names[check.network]
        manager = managers.get(name or "")
        if not isinstance(manager, FabricManager):
            live.notes.append(f"{check.network[0]}/{check.network[1]} has no fabric manager")
            continue
        traced = manager.trace(workdir, check.probe)
        live.paths.append(TracedPath(check, manager.manager, traced))
        if traced is None or traced.delivered is None:
            why = "; ".join(traced.detail) if traced else \
                f"NetworkManager {manager.manager} cannot trace packets"
            if why not in live.notes:
                live.notes.append(why)
    return live


def _manager_name(model: Model, check: Check) -> str | None:
    klass = model.class_of(*check.network)
    return None if klass is None else str(klass.obj.spec.fabric_manager)
