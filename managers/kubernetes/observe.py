"""What the hosting clusters hold: this installation's objects of every kind unet writes,
and whose the others are.

Each cluster is read kind by kind (of its ConfigMaps, only those with the name unet
writes). An object of ours becomes a backend object (codec.py), and its UID is kept,
which makes deletes safe; one of ours being deleted (finalizers hold it) is noted as
terminating, not observed. Any other object is foreign, with whose it is: a desired
object of its key is a conflict. A kind the cluster does not serve, or may not list, is
missing on that cluster (only the latter is unobserved: not installed is known); any
other failure makes the cluster unusable for this run, and it is not read further.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from unet.managers.sdk import BackendObject, Observation

from .client import Cluster, is_api_error, is_connection_error
from .codec import classify, object_key, to_backend
from .kinds import KINDS
from .render import bindings_configmap


@dataclass
class KubernetesObservation(Observation):
    manager: str = ""
    foreign: dict[str, str] = field(default_factory=dict)  # key -> whose it is
    uids: dict[str, str] = field(default_factory=dict)  # key -> uid, for safe deletes
    terminating: set[str] = field(default_factory=set)  # keys of ours being deleted

    def conflicts(self, desired: Sequence[BackendObject]) -> list[str]:
        out = []
        for obj in desired:
            if obj.manager == self.manager and obj.key in self.foreign:
                cluster, kind, name = obj.key.split("/", 2)
                out.append(f"{kind} {name} on cluster {cluster} (for {obj.owner}) already "
                           f"exists and is {self.foreign[obj.key]}; unet never overwrites it")
        return out

    def unmanaged(self) -> list[str]:
        return [f"{key} ({whose})" for key, whose in sorted(self.foreign.items())]


def observe_cluster(cluster: Cluster, installation: str, manager: str,
                    into: KubernetesObservation) -> None:
    """Our objects of every kind on one cluster; failures are recorded on the cluster."""
    for kind in KINDS.values():
        if cluster.error is not None:
            return
        try:
            # of the cluster's ConfigMaps, only those with the name unet writes
            items = cluster.list(kind, **({"field_selector": "metadata.name="
                                                            + bindings_configmap(manager)}
                                          if kind.kind == "ConfigMap" else {}))
        except Exception as exc:
            if not (is_api_error(exc) or is_connection_error(exc)):
                raise
            message = cluster.explain(exc, "list", kind)
            if is_api_error(exc, 404) or is_api_error(exc, 403):
                cluster.missing[kind.kind] = message
                if is_api_error(exc, 403):  # not installed is known; not allowed to look is not
                    into.unobserved.append(message)
            else:
                cluster.error = message
            continue
        cluster.missing.pop(kind.kind, None)
        for item in items:
            metadata = item.get("metadata") or {}
            namespace = metadata.get("namespace") if kind.namespaced else None
            key = object_key(cluster.name, kind.kind, metadata.get("name", ""), namespace)
            whose = classify(item, installation, manager)
            if whose is not None:
                into.foreign[key] = whose
                continue
            if metadata.get("deletionTimestamp"):
                into.terminating.add(key)
                continue
            into.uids[key] = metadata.get("uid", "")
            into.objects.append(to_backend(cluster.name, manager, item))


