"""The manager contract (ARCHITECTURE.md, "Managers").

A plugin is a class registered under the entry-point group `unet.managers`. It
declares its name, role, capabilities and config schema as class attributes,
and is instantiated once per NetworkManager that uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from reconciler.models import Capability

if TYPE_CHECKING:
    from reconciler.allocate import Allocations
    from reconciler.diff import Change
    from reconciler.model import Model
    from reconciler.objects import BackendObject
    from reconciler.order import Step


#: Seconds between notices that a run still waits for another run's lock.
WAIT_NOTICE = 10.0


class ManagerPlugin:
    """Base of manager plugins."""

    name: ClassVar[str]
    role: ClassVar[Literal["fabric", "k8s"]]
    capabilities: ClassVar[frozenset[Capability]]
    #: JSON Schema of the NetworkManager's `spec.config` for this plugin.
    config_schema: ClassVar[dict[str, Any]]
    #: The config field naming the backend, when the plugin cannot tell its own objects from
    #: those of another NetworkManager of the installation in one backend: two managers of
    #: an installation may then not name the same one.
    backend_field: ClassVar[str | None] = None

    def __init__(self, manager: str, config: dict[str, Any], installation: str) -> None:
        self.manager = manager  # the NetworkManager's name: the `manager` of every object
        self.config = config
        self.installation = installation

    def connect(self, workdir: Path) -> AbstractContextManager[None]:
        """Open what observe, apply and lock need (connections, an embedded server)."""
        raise NotImplementedError

    def conflicts(self, desired: list[BackendObject]) -> list[str]:
        """Objects of others that stand where desired objects would go (never overwritten)."""
        return []

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        """The backend objects the model needs from this manager. Pure: no I/O."""
        raise NotImplementedError

    def observe(self) -> list[BackendObject]:
        """This installation's objects in the backend, as they are now."""
        raise NotImplementedError

    def apply(self, waves: Sequence[Sequence[Step]], changes: dict[str, Change],
              progress: Callable[[int, int], None]) -> dict[str, int]:
        """Carry out the waves of steps, batched into as few transactions as is safe.

        Returns how many objects were created, updated and deleted.
        """
        raise NotImplementedError

    def failed_steps(self) -> dict[str, str]:
        """Steps (uid → why) of the last apply that failed without stopping the others.

        A manager whose backend has independent parts (the Kubernetes manager's hosting
        clusters) fails only the steps of the part that is down and applies the rest;
        the reconciler reports these and exits 1. Others raise instead.
        """
        return {}

    def report(self, changes: Sequence[Change]) -> list[str]:
        """Lines for people about the backends, shown after a plan and after an apply
        (e.g. which hosting clusters are reachable and where each subnet is ready)."""
        return []

    def exposure(self, obj: BackendObject, model: Model) -> str | None:
        """What `obj`, as it is (an observed object, drift included), opens to traffic from
        outside its network, in the words of the plan's exposure summary; None: nothing."""
        return None

    def unmanaged(self) -> list[str]:
        """Names of backend objects that are not this installation's (for reports only)."""
        return []

    def applied_digest(self) -> str | None:
        """The digest of the desired state this manager last applied, if it keeps one."""
        return None

    def record_applied(self, digest: str) -> None:
        """Remember the digest of the desired state just applied (to tell drift later)."""

    def lock(self, timeout: float, waiting: Callable[[str], None] = lambda _text: None
             ) -> AbstractContextManager[None]:
        """A lock held in the backend itself for the whole apply. While another run holds
        it, `waiting` is told so (who holds it, since when) at once and every WAIT_NOTICE
        seconds."""
        raise NotImplementedError
