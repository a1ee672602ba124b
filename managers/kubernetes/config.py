"""The `kubernetes` manager's config: its hosting clusters and how it names what it writes
there (a NetworkManager's `config`)."""

from __future__ import annotations

from pydantic import Field

from unet.managers.sdk import ManagerConfig


class ClusterRef(ManagerConfig):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    context: str = Field(min_length=1)


class KubernetesConfig(ManagerConfig):
    clusters: list[ClusterRef] = Field(min_length=1)
    physical_network_name: str = Field("physnet-tenant", min_length=1, pattern="^[^,:]+$")
    namespace_label: str = Field("network.osac.io/tenant", min_length=1)
    tenant_namespace: str = Field(
        "{tenant}", pattern=r"^[a-z0-9-]*\{tenant\}[a-z0-9-]*$",
        description="The namespace of a tenant's VMs on every hosting cluster; {tenant} is "
                    "the tenant's name. It must also carry the namespaceLabel")
    metallb_namespace: str = Field(
        "metallb-system", min_length=1,
        description="Namespace of the MetalLB IPAddressPools and L2Advertisements")
    lease_namespace: str = Field("unet-system", min_length=1,
                                 description="Namespace of the Lease that serialises applies")
    lease_duration_seconds: int = Field(
        30, ge=2, description="How long a Lease of a run that stopped renewing it stays held")
    timeout_seconds: float = Field(30, gt=0, description="Timeout of one request to an API "
                                                         "server")
    delete_timeout_seconds: float = Field(
        120, ge=0, description="How long a replace waits for the old object's finalizers")

    def namespace_of(self, tenant: str | None) -> str:
        return self.tenant_namespace.replace("{tenant}", str(tenant))
