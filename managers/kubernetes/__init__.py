"""The `kubernetes` manager: subnets bridged into hosting clusters (OVN-Kubernetes, MetalLB)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from managers.base import ManagerPlugin
from reconciler.models import Capability


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
            "leaseNamespace": {
                "type": "string",
                "minLength": 1,
                "default": "unet-system",
                "description": "Namespace of the Lease that serialises applies",
            },
        },
    }
