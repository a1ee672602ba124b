"""The `kubernetes` manager: subnets bridged into hosting clusters (OVN-Kubernetes, MetalLB).

Render (render.py) is pure. The live side: the kinds unet writes (kinds.py), one API
client per hosting cluster (client.py), objects read and written as backend objects
(codec.py), the Lease that serialises runs (lease.py), observing (observe.py) and
applying (apply.py); a cluster that cannot be used fails only its own steps
(docs/kubernetes.md).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from managers.sdk import (
    Allocations,
    ApplyOutcome,
    BackendLocked,
    BackendObject,
    Capability,
    Change,
    ClusterManager,
    Exposure,
    Manifest,
    Model,
    Observation,
    ProgressFactory,
    Session,
    Step,
)

from .config import ClusterRef, KubernetesConfig

__all__ = ["ClusterRef", "KubernetesConfig", "KubernetesManager", "KubernetesSession"]

if TYPE_CHECKING:
    from .client import Cluster
    from .lease import Lease
    from .observe import KubernetesObservation


class KubernetesManager(ClusterManager):
    name: ClassVar[str] = "kubernetes"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.IPV4, Capability.IPV6, Capability.COMPUTE_INSTANCES}
    )
    Config: ClassVar[type[KubernetesConfig]] = KubernetesConfig
    config: KubernetesConfig

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        from .render import render

        return render(model, allocations, self, self.config)

    def describe(self, obj: BackendObject) -> str:
        cluster = obj.key.split("/", 1)[0]
        meta = obj.fields["metadata"]
        where = f" in {meta['namespace']}" if obj.table in ("MultiNetworkPolicy", "ConfigMap") \
            else ""
        return f"{obj.table} {meta['name']}{where} on cluster {cluster}"

    def exposure(self, obj: BackendObject, model: Model) -> Exposure | None:
        from .render import policy_exposure

        return policy_exposure(obj, model)

    def physical_network(self) -> str | None:
        return self.config.physical_network_name

    def hosting_clusters(self) -> tuple[str, ...]:
        return tuple(cluster.name for cluster in self.config.clusters)

    def unrealisable(self, rule: Any) -> str | None:
        from .render import unrealisable

        return unrealisable(rule)

    def bindings(self, workload: Manifest, index: int, binding: Mapping[str, Any]
                 ) -> list[dict[str, Any]]:
        """A VM on one of these clusters attaches to its subnet's network there, asking for
        unet's addresses and MAC; its pod carries the label the policies select."""

        from .render import LABEL_INSTANCE, object_name

        cluster = Model.hosting_cluster(workload)
        if cluster not in self.hosting_clusters():
            return []
        namespace = self.config.namespace_of(workload.tenant)
        network = object_name(workload.tenant, binding["subnet"])
        families = [binding[f"ipv{v}"] for v in (4, 6) if binding[f"ipv{v}"] is not None]
        known = all(f["address"] for f in families)
        ips = [f"{f['address']}/{f['prefixLength']}" for f in families] if known else None
        element = {"name": network, "namespace": namespace, "ips": ips, "mac": binding["mac"]}
        return [{"cluster": cluster, "namespace": namespace, "network": network,
                 "networkSelectionElement": element,
                 "podLabels": {LABEL_INSTANCE: workload.name}}]

    @contextlib.contextmanager
    def connect(self, workdir: Path) -> Iterator[KubernetesSession]:
        from .client import Cluster

        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        clusters: dict[str, Cluster] = {}
        try:
            for entry in self.config.clusters:
                cluster = Cluster(entry.name, entry.context, self.config.timeout_seconds)
                cluster.connect(kubeconfig)
                clusters[cluster.name] = cluster
            yield KubernetesSession(self, clusters)
        finally:
            for cluster in clusters.values():
                cluster.close()


class KubernetesSession(Session):
    """API clients of every hosting cluster, and the Leases while they are held."""

    def __init__(self, manager: KubernetesManager, clusters: dict[str, Cluster]) -> None:
        self.manager = manager.manager
        self.installation = manager.installation
        self.config = manager.config
        self.clusters = clusters
        self.leases: dict[str, Lease] = {}

    @contextlib.contextmanager
    def lock(self, timeout: float, waiting: Callable[[str], None]) -> Iterator[None]:
        """The Lease unet-<installation> in leaseNamespace, on every usable cluster."""
        from .client import KubernetesError
        from .lease import Lease, Renewer

        duration = self.config.lease_duration_seconds
        try:
            for name, cluster in sorted(self.clusters.items()):
                if cluster.error is not None:
                    continue
                lease = Lease(cluster, self.config.lease_namespace,
                              f"unet-{self.installation}", duration)
                try:
                    lease.acquire(timeout, waiting=waiting)
                except BackendLocked:
                    raise
                except KubernetesError as exc:
                    cluster.error = str(exc)
                    continue
                self.leases[name] = lease
            with Renewer(list(self.leases.values()), max(0.5, duration / 3)).running():
                yield
        finally:
            for lease in self.leases.values():
                lease.release()
            self.leases = {}

    @contextlib.contextmanager
    def hold(self, name: str) -> Iterator[Callable[[], bool]]:
        """The Lease unet-<installation>-<name> on the first usable cluster, renewed while
        held; when the holder stops renewing, it expires and the next waiter takes it."""
        from .lease import Lease, LockTimeout, Renewer

        usable = [c for _n, c in sorted(self.clusters.items()) if c.error is None]
        if not usable:
            raise BackendLocked("no hosting cluster is reachable to hold the Lease "
                                f"unet-{self.installation}-{name} on")
        duration = self.config.lease_duration_seconds
        lease = Lease(usable[0], self.config.lease_namespace,
                      f"unet-{self.installation}-{name}", duration)
        while True:
            try:
                lease.acquire(5.0)
                break
            except LockTimeout:
                continue  # still held by another replica: ask again
        try:
            with Renewer([lease], max(0.5, duration / 3)).running():
                yield lambda: lease.lost is None
        finally:
            lease.release()

    def observe(self) -> KubernetesObservation:
        from .observe import KubernetesObservation, observe_cluster

        observation = KubernetesObservation([], self._applied_digest(), self.manager)
        for _, cluster in sorted(self.clusters.items()):
            observe_cluster(cluster, self.installation, self.manager, observation)
            if cluster.error is not None:
                observation.unobserved.append(cluster.error)
        return observation

    def apply(self, observation: Observation, waves: Sequence[Sequence[Step]],
              changes: dict[str, Change], progress: ProgressFactory) -> ApplyOutcome:
        from .apply import apply_steps
        from .observe import KubernetesObservation

        assert isinstance(observation, KubernetesObservation)
        return apply_steps(self, observation, waves, changes, progress)

    def report(self, changes: Sequence[Change], outcome: ApplyOutcome | None) -> list[str]:
        from .apply import readiness_report

        return readiness_report(self, changes, outcome)

    def _applied_digest(self) -> str | None:
        from .lease import ANNOTATION_APPLIED

        if not self.leases or any(c.error for c in self.clusters.values()):
            return None
        values = set()
        for lease in self.leases.values():
            recorded = _json_map(lease.annotation(ANNOTATION_APPLIED))
            values.add(recorded.get(self.manager))
        return values.pop() if len(values) == 1 else None

    def record_applied(self, digest: str) -> None:
        import json

        from .lease import ANNOTATION_APPLIED

        for name, lease in self.leases.items():
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
