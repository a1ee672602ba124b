"""The `kubernetes` manager: subnets bridged into hosting clusters (OVN-Kubernetes, MetalLB).

Render (render.py) is pure. The live side: the kinds unet writes (kinds.py), one API
client per hosting cluster (client.py), objects read and written as backend objects
(codec.py), the Lease that serialises runs (lease.py), observing (observe.py), and a
session that locks, observes and applies (session.py); a cluster that cannot be used
fails only its own steps (docs/kubernetes.md).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from unet.managers.sdk import (
    Allocations,
    BackendObject,
    Capability,
    ClusterManager,
    Exposure,
    Manifest,
    Model,
)

from .config import ClusterRef, KubernetesConfig

__all__ = ["ClusterRef", "KubernetesConfig", "KubernetesManager"]

if TYPE_CHECKING:
    from .session import KubernetesSession


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
        """A VM on one of these clusters attaches to its subnet's (or provider network's)
        network there, asking for unet's addresses and MAC; its pod carries the label the
        policies select."""

        from .render import LABEL_INSTANCE, object_name, provider_object_name

        cluster = Model.hosting_cluster(workload)
        if cluster not in self.hosting_clusters():
            return []
        namespace = self.config.namespace_of(workload.tenant)
        network = object_name(workload.tenant, binding["subnet"]) \
            if binding["providerNetwork"] is None else provider_object_name(
                binding["providerNetwork"])
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
        from .session import KubernetesSession

        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        clusters: dict[str, Cluster] = {}
        try:
            for entry in self.config.clusters:
                cluster = Cluster(entry.name, entry.context, self.config.timeout_seconds)
                cluster.connect(kubeconfig)
                clusters[cluster.name] = cluster
            yield KubernetesSession(self.manager, self.installation, self.config, clusters)
        finally:
            for cluster in clusters.values():
                cluster.close()
