"""The `ovn` manager: tenant networks as rows of the OVN Northbound database."""

from __future__ import annotations

import contextlib
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

    from .live import Northbound

_NAME = {"type": "string", "minLength": 1, "maxLength": 63}


class OvnManager(ManagerPlugin):
    name: ClassVar[str] = "ovn"
    role: ClassVar[Literal["fabric", "k8s"]] = "fabric"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(Capability)
    # Rows carry the installation, not the manager: one OVN manager per Northbound database.
    backend_field: ClassVar[str | None] = "northbound"
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

    _nb: Northbound | None = None
    _foreign: dict[str, set[str]] | None = None
    _foreign_children: list[str] | None = None

    @contextlib.contextmanager
    def connect(self, workdir: Path) -> Iterator[None]:
        from .embedded import EmbeddedNorthbound
        from .live import Northbound

        remote = self.config.get("northbound", "embedded")
        with contextlib.ExitStack() as stack:
            if remote == "embedded":
                remote = stack.enter_context(EmbeddedNorthbound(workdir)).remote
            ssl = {k: self.config[k] for k in ("sslKey", "sslCert", "sslCaCert")
                   if k in self.config}
            self._nb = Northbound(remote, ssl=ssl)
            stack.callback(self._nb.close)
            try:
                yield
            finally:
                self._nb = None

    @property
    def nb(self) -> Northbound:
        if self._nb is None:
            raise RuntimeError("OvnManager.connect() first")
        return self._nb

    def observe(self) -> list[BackendObject]:
        observed = self.nb.observe(self.installation, self.manager)
        self._foreign = observed.foreign_names
        self._foreign_children = observed.foreign_children
        return observed.objects

    def conflicts(self, desired: list[BackendObject]) -> list[str]:
        foreign = self._foreign or {}
        return [f"{obj.table} named '{obj.fields.get('name')}' (for {obj.owner}) already exists "
                "and is not managed by this installation"
                for obj in desired
                if obj.manager == self.manager and obj.fields.get("name") in foreign.get(
                    obj.table, ())]

    def apply(self, waves: Sequence[Sequence[Step]], changes: dict[str, Change],
              progress: Callable[[int, int], None]) -> dict[str, int]:
        return self.nb.apply(waves, changes, self.installation, progress)

    def exposure(self, obj: BackendObject, model: Model) -> str | None:
        if obj.table != "ACL" or obj.parent is None:
            return None
        from .render import acl_exposure

        group = obj.parent[0].split("/", 1)[1]  # Port_Group/<tenant>/<network>[/<group>]
        tenant, network = group.split("/")[:2]
        return acl_exposure(obj.fields, group,
                            list(model.network_cidrs(tenant, network).values()))

    def unmanaged(self) -> list[str]:
        return [f"{table} {name}" for table, names in sorted((self._foreign or {}).items())
                for name in sorted(names)] + list(self._foreign_children or ())

    def applied_digest(self) -> str | None:
        return self.nb.global_tag(self.installation, self._applied_tag)

    def record_applied(self, digest: str) -> None:
        self.nb.set_global_tag(self.installation, self._applied_tag, digest)

    @property
    def _applied_tag(self) -> str:
        return f"unet:applied:{self.installation}:{self.manager}"

    def lock(self, timeout: float, waiting: Callable[[str], None] = lambda _text: None
             ) -> contextlib.AbstractContextManager[None]:
        return self.nb.lock(self.installation, timeout, waiting)
