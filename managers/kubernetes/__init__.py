"""The `kubernetes` manager: subnets bridged into hosting clusters (OVN-Kubernetes, MetalLB)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from managers.base import ManagerPlugin
from reconciler.models import Capability

if TYPE_CHECKING:
    from reconciler.allocate import Allocations
    from reconciler.model import Model
    from reconciler.objects import BackendObject


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
        },
    }

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        from .render import render

        return render(model, allocations, self.manager, self.config)
