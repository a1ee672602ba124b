"""The kinds of object unet writes into hosting clusters, and where their APIs are.

Each kind is served by one API group and version under one plural name (its resource),
cluster-wide or per namespace; `installs_with` says what provides it, for the message
when a cluster lacks it. Most are custom resources of the networking stack (OVN-
Kubernetes, MetalLB, multi-network policies); the bindings ConfigMap is core (group "",
its body `data`, not `spec`). The Lease that serialises runs is read and written like
them. Everything is written under one field manager, `unet`.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The field manager of unet's server-side applies, and the value of its managed-by label.
FIELD_MANAGER = "unet"


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    installs_with: str  # what provides the CRD, for the message when it is missing
    body: str = "spec"  # the top-level field holding what unet writes

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def describe(self) -> str:
        what = "the CRD" if self.group else "the API"
        return f"{what} {self.crd} ({self.kind}, {self.api_version})"


#: The kinds unet renders, by kind name.
KINDS = {k.kind: k for k in (
    Kind("ClusterUserDefinedNetwork", "k8s.ovn.org", "v1", "clusteruserdefinednetworks", False,
         "OVN-Kubernetes with user-defined networks (the ClusterUserDefinedNetwork CRD)"),
    Kind("IPAddressPool", "metallb.io", "v1beta1", "ipaddresspools", True, "MetalLB"),
    Kind("L2Advertisement", "metallb.io", "v1beta1", "l2advertisements", True, "MetalLB"),
    Kind("MultiNetworkPolicy", "k8s.cni.cncf.io", "v1beta1", "multi-networkpolicies", True,
         "the multi-network policy API (OVN-Kubernetes with multi-network policies enabled)"),
    Kind("ConfigMap", "", "v1", "configmaps", True, "Kubernetes", body="data"),
)}
#: The lock of a run (lease.py).
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", True, "Kubernetes")
