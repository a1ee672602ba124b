"""The `ovn` manager: tenant networks as rows of the OVN Northbound database."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from unet.managers.sdk import (
    Allocations,
    ApplyOutcome,
    BackendObject,
    Capability,
    Change,
    Exposure,
    FabricManager,
    Model,
    Observation,
    Probe,
    ProgressFactory,
    Session,
    Step,
    Traced,
)

from .config import OvnConfig

if TYPE_CHECKING:
    from unet.reconciler.shard import Ownership

    from .adopt import OvnAdopter
    from .codec import OvnObservation
    from .northbound import Northbound
    from .rpc import Timeouts
    from .tls import TlsClient
    from .trace import Southbound
    from .watch import OvnWatch


class OvnManager(FabricManager):
    name: ClassVar[str] = "ovn"
    capabilities: ClassVar[frozenset[Capability]] = frozenset(Capability)
    Config: ClassVar[type[OvnConfig]] = OvnConfig
    # Rows carry the installation, not the manager: one OVN manager per Northbound database.
    backend_field: ClassVar[str | None] = "northbound"
    watchable: ClassVar[bool] = True
    adopts: ClassVar[bool] = True
    config: OvnConfig

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        from .render import render

        return render(model, allocations, self.manager, self.config)

    def describe(self, obj: BackendObject) -> str:
        from .reading import describe

        return describe(obj)

    def exposure(self, obj: BackendObject, model: Model) -> Exposure | None:
        from .reading import exposure

        return exposure(obj, model)

    @contextlib.contextmanager
    def connect(self, workdir: Path) -> Iterator[OvnSession]:
        from .embedded import EmbeddedNorthbound
        from .northbound import Northbound

        remote = self.config.northbound
        with contextlib.ExitStack() as stack:
            if remote == "embedded":
                remote = stack.enter_context(EmbeddedNorthbound(workdir)).remote
            nb = Northbound(remote, self._timeouts(), tls=self._tls(remote))
            stack.callback(nb.close)
            yield OvnSession(nb, self.manager, self.installation, self.ownership)

    def trace(self, workdir: Path, probe: Probe) -> Traced | None:
        """ovn-trace on the configured `southbound` (trace.py); without one, "cannot tell",
        saying so. The Southbound's ports are read once per manager and run."""
        from .trace import trace

        southbound = self._southbound()
        if southbound is None:
            return Traced(None, None, (f"no southbound configured for NetworkManager "
                                       f"{self.manager}: answered from the model alone",))
        return trace(southbound, probe)

    def _southbound(self) -> Southbound | None:
        from .trace import Southbound, TraceError

        remote = self.config.southbound
        if remote is None:
            return None
        cached: Southbound | None = getattr(self, "_sb", None)
        if cached is None:
            files = self.config.tls_files()
            tls = () if files is None or "ssl:" not in remote else \
                ("-p", files.key, "-c", files.cert, "-C", files.ca_cert)
            try:
                cached = Southbound(remote, tls)
            except TraceError as exc:
                raise TraceError(f"NetworkManager {self.manager}: {exc}") from exc
            self._sb = cached
        return cached

    def _tls(self, remote: str) -> TlsClient | None:
        """This manager's own TLS for its ssl: servers (tls.py: the OVS library's SSL
        settings are one per process)."""
        from .fence import OvnError
        from .tls import TlsClient, TlsConfigError, ssl_members

        files = self.config.tls_files()
        if files is None or not ssl_members(remote):
            return None
        try:
            return TlsClient(files, self.config.server_name)
        except TlsConfigError as exc:
            raise OvnError(f"NetworkManager {self.manager}: {exc}") from exc

    def _timeouts(self) -> Timeouts:
        from .rpc import Timeouts

        return Timeouts(self.config.connect_timeout_seconds, self.config.leader_timeout_seconds,
                        self.config.transaction_timeout_seconds)


class OvnSession(Session):
    def __init__(self, nb: Northbound, manager: str, installation: str,
                 ownership: Ownership | None = None) -> None:
        """`ownership`: of a shard's run, whose rows are the shard's (reconciler/shard.py)."""
        self.nb = nb
        self.manager = manager
        self.installation = installation
        self.ownership = ownership

    def lock(self, timeout: float, waiting: Callable[[str], None]
             ) -> contextlib.AbstractContextManager[None]:
        return self.nb.lock(self.installation, timeout, waiting)

    def hold(self, name: str) -> contextlib.AbstractContextManager[Callable[[], bool]]:
        """The lock `name` (a daemon's election: one active replica per shard)."""
        shard = "" if self.ownership is None else \
            "_" + re.sub(r"[^A-Za-z0-9_]", "_", self.ownership.shard.name)
        return self.nb.hold(f"unet_{self.installation}{shard}_{name}")

    def observe(self) -> OvnObservation:
        observation = self.nb.observe(self.installation, self.manager, self.ownership)
        observation.applied_digest = self.nb.global_tag(self.installation, self._applied_tag)
        return observation

    def observe_owners(self, owners: frozenset[str]) -> OvnObservation:
        return self.nb.observe(self.installation, self.manager, self.ownership, owners)

    def apply(self, observation: Observation, waves: Sequence[Sequence[Step]],
              changes: dict[str, Change], progress: ProgressFactory) -> ApplyOutcome:
        from .codec import OvnObservation

        assert isinstance(observation, OvnObservation)
        return self.nb.apply(observation.uuids, waves, changes, self.installation, progress)

    def record_applied(self, digest: str) -> None:
        self.nb.set_global_tag(self.installation, self._applied_tag, digest)

    def adopter(self, observation: Observation) -> OvnAdopter:
        from .adopt import OvnAdopter
        from .codec import OvnObservation

        assert isinstance(observation, OvnObservation)
        return OvnAdopter(self.nb, self.installation, self.manager, observation.uuids)

    @contextlib.contextmanager
    def watch(self, timeout: float) -> Iterator[OvnWatch]:
        from .watch import OvnWatch

        watch = OvnWatch(self.nb, self.installation, self.manager, self._applied_tag)
        try:
            watch.start(timeout)
            yield watch
        finally:
            watch.close()

    @property
    def _applied_tag(self) -> str:
        """Where the digest of what was last applied is kept: per manager, and per shard
        (two shards share the manager and the database, not what they applied)."""
        shard = f":{self.ownership.shard.name}" if self.ownership is not None else ""
        return f"unet:applied:{self.installation}:{self.manager}{shard}"
