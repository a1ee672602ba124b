"""What every manager plugin declares: its name, role, capabilities and config schema."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from reconciler.models import Capability


class ManagerPlugin:
    """Base of manager plugins, registered under the entry-point group `unet.managers`."""

    name: ClassVar[str]
    role: ClassVar[Literal["fabric", "k8s"]]
    capabilities: ClassVar[frozenset[Capability]]
    #: JSON Schema of the NetworkManager's `spec.config` for this plugin.
    config_schema: ClassVar[dict[str, Any]]
