"""The `kubernetes` manager: subnets bridged into hosting clusters (OVN-Kubernetes, MetalLB).

Render (render.py) is pure. The live side (live.py) holds one API client per hosting
cluster; a cluster that cannot be used fails only its own steps (docs/kubernetes.md).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from managers.base import ManagerPlugin
from reconciler.models import Capability

if TYPE_CHECKING:
    from reconciler.allocate import Allocations
    from reconciler.diff import Change
    from reconciler.model import Model
    from reconciler.objects import BackendObject
    from reconciler.order import Step

    from .live import Cluster, Lease, Observed


class KubernetesManager(ManagerPlugin):
    name: ClassVar[str] = "kubernetes"
    role: ClassVar[Literal["fabric", "k8s"]] = "k8s"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.IPV4, Capability.IPV6, Capability.COMPUTE_INSTANCES}
    )
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["clusters"],
        "properties": {
            "clusters": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "context"],
                    "properties": {
                        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                        "context": {"type": "string", "minLength": 1},
                    },
                },
            },
            "physicalNetworkName": {
                "type": "string",
                "minLength": 1,
                "pattern": "^[^,:]+$",
                "default": "physnet-tenant",
            },
            "namespaceLabel": {
                "type": "string",
                "minLength": 1,
                "default": "network.osac.io/tenant",
            },
            "metallbNamespace": {
                "type": "string",
                "minLength": 1,
                "default": "metallb-system",
                "description": "Namespace of the MetalLB IPAddressPools and L2Advertisements",
            },
            "leaseNamespace": {
                "type": "string",
                "minLength": 1,
                "default": "unet-system",
                "description": "Namespace of the Lease that serialises applies",
            },
            "leaseDurationSeconds": {
                "type": "integer", "minimum": 2, "default": 30,
                "description": "How long a Lease of a run that stopped renewing it stays held",
            },
            "timeoutSeconds": {
                "type": "number", "exclusiveMinimum": 0, "default": 30,
                "description": "Timeout of one request to an API server",
            },
            "deleteTimeoutSeconds": {
                "type": "number", "minimum": 0, "default": 120,
                "description": "How long a replace waits for the old object's finalizers",
            },
        },
    }

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        from .render import render

        return render(model, allocations, self.manager, self.config)

    # --- the live side ----------------------------------------------------------------------

    _clusters: dict[str, Cluster] | None = None
    _observed: Observed | None = None
    _leases: dict[str, Lease] | None = None

    def _reset(self) -> None:
        self._failed: dict[str, str] = {}
        self._done: set[str] = set()

    @contextlib.contextmanager
    def connect(self, workdir: Path) -> Iterator[None]:
        from .live import Cluster

        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        timeout = float(self.config.get("timeoutSeconds", 30))
        self._clusters = {}
        self._reset()
        for entry in self.config.get("clusters", []):
            cluster = Cluster(entry["name"], entry["context"], timeout)
            cluster.connect(kubeconfig)
            self._clusters[cluster.name] = cluster
        try:
            yield
        finally:
            for cluster in self._clusters.values():
                cluster.close()
            self._clusters = None

    @property
    def clusters(self) -> dict[str, Cluster]:
        if self._clusters is None:
            raise RuntimeError("KubernetesManager.connect() first")
        return self._clusters

    @contextlib.contextmanager
    def lock(self, timeout: float, waiting: Callable[[str], None] = lambda _text: None
             ) -> Iterator[None]:
        """The Lease unet-<installation> in leaseNamespace, on every usable cluster."""
        from .live import KubernetesError, Lease, LockTimeout, Renewer

        namespace = self.config.get("leaseNamespace", "unet-system")
        duration = int(self.config.get("leaseDurationSeconds", 30))
        self._leases = {}
        try:
            for name, cluster in sorted(self.clusters.items()):
                if cluster.error is not None:
                    continue
                lease = Lease(cluster, namespace, f"unet-{self.installation}", duration)
                try:
                    lease.acquire(timeout, waiting=waiting)
                except LockTimeout:
                    raise
                except KubernetesError as exc:
                    cluster.error = str(exc)
                    continue
                self._leases[name] = lease
            with Renewer(list(self._leases.values()), max(0.5, duration / 3)).running():
                yield
        finally:
            for lease in self._leases.values():
                lease.release()
            self._leases = None

    def observe(self) -> list[BackendObject]:
        from .live import Observed, observe_cluster

        observed = Observed()
        for _, cluster in sorted(self.clusters.items()):
            observe_cluster(cluster, self.installation, self.manager, observed)
        self._observed = observed
        return observed.objects

    def conflicts(self, desired: list[BackendObject]) -> list[str]:
        foreign = self._observed.foreign if self._observed is not None else {}
        out = []
        for obj in desired:
            if obj.manager == self.manager and obj.key in foreign:
                cluster, kind, name = obj.key.split("/", 2)
                out.append(f"{kind} {name} on cluster {cluster} (for {obj.owner}) already "
                           f"exists and is {foreign[obj.key]}; unet never overwrites it")
        return out

    def unmanaged(self) -> list[str]:
        foreign = self._observed.foreign if self._observed is not None else {}
        return [f"{key} ({whose})" for key, whose in sorted(foreign.items())]

    def apply(self, waves: Sequence[Sequence[Step]], changes: dict[str, Change],
              progress: Callable[[int, int], None]) -> dict[str, int]:
        from .apply import apply_steps

        return apply_steps(self, waves, changes, progress)

    def failed_steps(self) -> dict[str, str]:
        return dict(getattr(self, "_failed", {}))

    def report(self, changes: Sequence[Change]) -> list[str]:
        from .apply import readiness_report

        return readiness_report(self, changes)

    def applied_digest(self) -> str | None:
        from .live import ANNOTATION_APPLIED

        if not self._leases or any(c.error for c in self.clusters.values()):
            return None
        values = set()
        for lease in self._leases.values():
            recorded = _json_map(lease.annotation(ANNOTATION_APPLIED))
            values.add(recorded.get(self.manager))
        return values.pop() if len(values) == 1 else None

    def record_applied(self, digest: str) -> None:
        import json

        from .live import ANNOTATION_APPLIED

        for name, lease in (self._leases or {}).items():
            if self.clusters[name].error is not None:
                continue
            recorded = _json_map(lease.annotation(ANNOTATION_APPLIED))
            recorded[self.manager] = digest
            with contextlib.suppress(Exception):  # only tells drift from repo changes later
                lease.annotate(ANNOTATION_APPLIED, json.dumps(recorded, sort_keys=True,
                                                              separators=(",", ":")))


def _json_map(text: str | None) -> dict[str, str]:
    import json

    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
