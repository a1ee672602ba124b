"""The `ovn` manager: tenant networks as rows of the OVN Northbound database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from managers.base import ManagerPlugin
from reconciler.models import Capability

if TYPE_CHECKING:
    from reconciler.allocate import Allocations
    from reconciler.model import Model
    from reconciler.objects import BackendObject

_NAME = {"type": "string", "minLength": 1, "maxLength": 63}


class OvnManager(ManagerPlugin):
    name: ClassVar[str] = "ovn"
    role: ClassVar[Literal["fabric", "k8s"]] = "fabric"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(Capability)
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "northbound": {
                "type": "string",
                "description": "OVSDB connection (tcp:HOST:PORT, ssl:HOST:PORT, unix:PATH, "
                "several separated by ',' for a cluster) or 'embedded'",
                "pattern": r"^(embedded|\$\{[A-Za-z_][A-Za-z0-9_]*\}|"
                r"((tcp|ssl):[^,]+:[0-9]+|unix:[^,]+)(,((tcp|ssl):[^,]+:[0-9]+|unix:[^,]+))*)$",
                "default": "embedded",
            },
            "externalNetwork": {**_NAME, "default": "physnet-external"},
            "gatewayChassis": {
                "type": "array",
                "items": _NAME,
                "minItems": 1,
                "default": ["gw-1"],
            },
            "sslKey": {"type": "string", "description": "Private key file for ssl: remotes"},
            "sslCert": {"type": "string", "description": "Certificate file for ssl: remotes"},
            "sslCaCert": {"type": "string", "description": "CA certificate for ssl: remotes"},
        },
    }

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        from .render import render

        return render(model, allocations, self.manager, self.config)
