"""The backend contract (ARCHITECTURE.md, "Managers"); plugins see it through
managers/sdk.py, the core imports it from here.

A plugin is a `FabricManager` or `ClusterManager` class registered under the entry-point
group `unet.managers` and instantiated once per NetworkManager of a repo. A Manager is
pure: its typed config, the backend objects it renders, and how people read them.
`connect()` opens a `Session` to its backend: the session takes the lock, observes,
applies and records what it applied. What a session observes comes back as an
`Observation`, which the run hands to `apply()` again, so no state hides in the plugin and
no call depends on another having been made first. A plugin may add commands of its own
to the command line (command.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from .errors import UnetError
from .models import Capability

if TYPE_CHECKING:
    from .allocate import Allocations
    from .diff import Change
    from .model import Model
    from .objects import BackendObject, Held
    from .order import Step
    from .schema import Manifest
    from .shard import Ownership

#: Seconds between notices that a run still waits for another run's lock.
WAIT_NOTICE = 10.0

#: (wave number, waves, steps in it) → a callback for (done, total) as its steps are done.
ProgressFactory = Callable[[int, int, int], Callable[[int, int], None]]


class BackendLocked(UnetError):
    """Another run held the backend's lock for longer than this run would wait."""


class ManagerConfig(BaseModel):
    """A plugin's `spec.config` of a NetworkManager. Plugins subclass it with their fields
    (camelCase in manifests); its JSON Schema is the one the repo is validated against.
    `${ENV}` values are resolved before it is built for a run."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              alias_generator=to_camel)


@dataclass
class Observation:
    """What a session found in its backend: this installation's objects (`manager` set to
    the NetworkManager's name), the digest it recorded after its last apply, and whatever
    the plugin needs again to apply (subclasses add it).

    `unobserved` says, one line per part, which parts of the backend could not be read (a
    hosting cluster that is down, a list the credentials may not make): a plan cannot
    tell what exists there, so it fails (BACKEND_UNOBSERVED) rather than plan creates."""

    objects: list[BackendObject]
    applied_digest: str | None = None
    unobserved: list[str] = field(default_factory=list, kw_only=True)

    def conflicts(self, desired: Sequence[BackendObject]) -> list[str]:
        """Objects of others that stand where desired objects would go (never overwritten)."""
        return []

    def unmanaged(self) -> list[str]:
        """Objects in the backend that are not this installation's, for reports only."""
        return []


@dataclass
class ApplyOutcome:
    """What an apply did: per action how many objects, which steps were done, and which
    failed without stopping the others (uid → why), as a backend of independent parts
    (hosting clusters) fails only the part that is down. Other failures raise."""

    counts: dict[str, int] = field(default_factory=lambda: {"create": 0, "update": 0,
                                                            "delete": 0})
    done: set[str] = field(default_factory=set)
    failures: dict[str, str] = field(default_factory=dict)

    def did(self, step: Step) -> None:
        """`step` was carried out."""
        self.counts[step.action] += 1
        self.done.add(step.uid)


def each_step(waves: Sequence[Sequence[Step]], changes: Mapping[str, Change],
              progress: ProgressFactory) -> Iterator[tuple[Step, BackendObject]]:
    """For backends that write one object at a time: every step, wave by wave, with the
    object it writes (or deletes); progress is reported after each."""
    for index, wave in enumerate(waves):
        report = progress(index + 1, len(waves), len(wave))
        for done, step in enumerate(wave, start=1):
            change = changes[step.uid]
            obj = change.before if step.action == "delete" else change.after
            assert obj is not None
            yield step, obj
            report(done, len(wave))


class Exposure(NamedTuple):
    """What one backend object opens to the outside, for the plan's exposure summary.

    kind "rule" (entry: `rule`), "ip" (an external address forwarded to a workload) or
    "nat" (outbound address translation; entry for both: `address`, `target`).
    """

    kind: Literal["rule", "ip", "nat"]
    entry: dict[str, str]


class Watch:
    """A replica of a manager's objects (this installation's), kept current by the
    backend's own change feed on a connection of its own: what the reconcile daemon
    plans against, and what wakes it (`wake`) when someone changes an object."""

    def __init__(self) -> None:
        self.wake = threading.Event()  # set when a change arrives
        self.failure: str | None = None  # why the feed is down, while it is

    def take_changes(self) -> frozenset[str] | None:
        """The owners of the objects that changed since the last call; None when only a
        full plan can tell (the first state, a feed that could not resume)."""
        raise NotImplementedError

    def held(self) -> Mapping[str, Held]:
        """The allocations the replica's objects record, as `observed_allocations` finds
        them in an observation of every object (an input of the desired state): the same
        object, never changed, for as long as they stay the same, whatever else changes
        (the daemon keys its caches on its identity)."""
        raise NotImplementedError

    def observe(self, owners: Iterable[str] | None = None) -> Observation:
        """As Session.observe, from the replica once it holds every change committed
        before the call (only `owners`' objects, when given)."""
        raise NotImplementedError


class Session:
    """One connection to a manager's backend, for one run."""

    #: Whether `publish_status` publishes anything (the status is made only for those).
    publishes_status: ClassVar[bool] = False

    def lock(self, timeout: float, waiting: Callable[[str], None]
             ) -> AbstractContextManager[None]:
        """Hold the backend's own lock for the rest of the run; raise BackendLocked when
        another run holds it longer than `timeout` seconds, and tell `waiting` meanwhile,
        at once and every WAIT_NOTICE seconds, who holds it."""
        raise NotImplementedError

    def hold(self, name: str) -> AbstractContextManager[Callable[[], bool]]:
        """Wait as long as it takes for the backend's lock `name` (not the run's lock), then
        hold it until the context ends. The context gives a function that says whether it
        is still held: a lost connection loses it, and the backend lets the next waiter
        have it. Electing one active replica of a daemon uses this; a backend without such
        a lock raises NotImplementedError."""
        raise NotImplementedError

    def observe(self) -> Observation:
        raise NotImplementedError

    def observe_owners(self, owners: frozenset[str]) -> Observation:
        """Only these owners' objects: what an apply changed, read back to confirm it. By
        default `observe()` filtered; a backend read whole anyway can build fewer objects."""
        found = self.observe()
        found.objects = [obj for obj in found.objects if obj.owner in owners]
        return found

    def apply(self, observation: Observation, waves: Sequence[Sequence[Step]],
              changes: dict[str, Change], progress: ProgressFactory) -> ApplyOutcome:
        """Carry out the waves of steps (this manager's only), batched into as few backend
        transactions as is safe, on the backend as `observation` found it."""
        raise NotImplementedError

    def record_applied(self, digest: str) -> None:
        """Remember the digest of the desired state just applied (to tell drift later)."""

    def report(self, changes: Sequence[Change], outcome: ApplyOutcome | None) -> list[str]:
        """Lines for people about the backend, after a plan (no outcome) or an apply."""
        return []

    def publish_status(self, statuses: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Optional: after an apply, publish each tenant's status (`unet show status`'s
        document of its manifests alone; tenant → document) where that tenant reads it, for
        the tenants this manager serves whose objects the apply changed. Lines for people
        about what could not be published: never raises for a backend's problem (the
        apply is done; the status is news about it)."""
        return []

    def watch(self, timeout: float) -> AbstractContextManager[Watch]:
        """A replica of this installation's objects for as long as the context lasts (its
        first state loaded within `timeout` seconds). Optional: a backend without a change
        feed raises NotImplementedError, and the daemon reads it on every run."""
        raise NotImplementedError

    def adopter(self, observation: Observation) -> Adopter | None:
        """What reads the backend's objects that no installation owns, for `unet import`
        (`observation`: this installation's objects, as just observed). Optional: None,
        the default, when the backend cannot adopt."""
        return None


# --- adoption (`unet import`, reconciler/adopt.py) -------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A backend object `unet import` leaves as it is, and why."""

    row: str  # how people know it: `Logical_Switch_Port sw0-vm1`
    reason: str


@dataclass
class ImportedNetwork:
    """One VirtualNetwork read back from objects no installation owns: its manifests (as
    plain documents), the allocations its objects hold already (so that nothing moves),
    and what of it the manifests cannot say."""

    name: str
    manifests: list[dict[str, Any]] = field(default_factory=list)
    held: dict[str, Held] = field(default_factory=dict)
    refused: list[Refusal] = field(default_factory=list)


@dataclass
class Adoption:
    """Rendered objects paired with objects no installation owns: each found one as it is
    now (under the rendered key), the backend's id of it, and the objects a found one holds
    that nothing rendered ((key of the holder, how people know the held one); one it only
    refers to, as a switch its load balancers, is told as `refers to <how people know it>`)."""

    objects: dict[str, BackendObject]
    ids: dict[str, str]
    extra: list[tuple[str, str]] = field(default_factory=list)


class Adopter:
    """A backend's side of `unet import`: read what no installation owns, guess the
    manifests, pair rendered objects with what is there, and tag the pairs."""

    def networks(self, tenant: str, region: str) -> list[ImportedNetwork]:
        raise NotImplementedError

    def refused(self) -> list[Refusal]:
        """Objects that are not adoption's to take (another installation's)."""
        raise NotImplementedError

    def unowned(self) -> dict[str, str]:
        """Every object no installation owns: its id → how people know it."""
        raise NotImplementedError

    def match(self, desired: Sequence[BackendObject]) -> Adoption:
        raise NotImplementedError

    def tag(self, pairs: Sequence[tuple[BackendObject, BackendObject]]) -> None:
        """Make each found object (second) the rendered one's (first) by its tags alone,
        in one transaction; the run holds the backend's lock."""
        raise NotImplementedError


class Manager:
    """Base of manager plugins: one instance per NetworkManager that uses the plugin. A
    plugin subclasses FabricManager or ClusterManager, which say its role."""

    name: ClassVar[str]
    role: ClassVar[Literal["fabric", "k8s"]]
    capabilities: ClassVar[frozenset[Capability]]
    Config: ClassVar[type[ManagerConfig]] = ManagerConfig
    #: The config field naming the backend, when the plugin cannot tell its own objects from
    #: those of another NetworkManager of the installation in one backend: two managers of
    #: an installation may then not name the same one.
    backend_field: ClassVar[str | None] = None
    #: Its sessions keep a replica of the backend (`Session.watch`): the reconcile daemon
    #: watches it instead of reading it on every run.
    watchable: ClassVar[bool] = False
    #: Whether its sessions have an `adopter` (`unet import`).
    adopts: ClassVar[bool] = False

    def __init__(self, manager: str, config: ManagerConfig, installation: str) -> None:
        self.manager = manager  # the NetworkManager's name: the `manager` of every object
        self.config = config
        self.installation = installation
        #: Set by the engine for a run of a shard (reconciler/shard.py): which of the
        #: installation's objects are the shard's. A session may read only those (the
        #: engine keeps only those of what it observes anyway), and records what it
        #: applied as the shard's (`ownership.shard.name`), not the installation's.
        self.ownership: Ownership | None = None

    @classmethod
    def config_schema(cls) -> dict[str, Any]:
        """JSON Schema of the NetworkManager's `spec.config` for this plugin."""
        return cls.Config.model_json_schema(by_alias=True)

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        """The backend objects the model needs from this manager. Pure: no I/O."""
        raise NotImplementedError

    def describe(self, obj: BackendObject) -> str:
        """How people know one of its objects, in plans."""
        name = obj.fields.get("name")
        return f"{obj.table} {name if isinstance(name, str) else obj.key}"

    def exposure(self, obj: BackendObject, model: Model) -> Exposure | None:
        """What `obj`, as it is (an observed object, drift included), opens to traffic from
        outside its network; None: nothing."""
        return None

    def connect(self, workdir: Path) -> AbstractContextManager[Session]:
        """Open a session to the backend (`workdir` holds local state, e.g. an embedded
        server)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Probe:
    """The first packet of a new connection, as `unet reach --live` asks a fabric about it.

    `source` is the sending NIC's backend key (`port_key`), or None for a sender outside
    every network, which enters the fabric in `region`; `sender` is the address it is sent
    from. `destination` is the address it is sent to (a NIC's own, a public address, or one
    outside); `target` is the NIC key the model expects it to reach, None for outside.
    `protocol` is tcp, udp, icmp or icmpv6; `port` the tcp/udp destination port."""

    source: str | None
    sender: str
    destination: str
    target: str | None
    family: int
    protocol: str
    port: int | None
    region: str | None = None


@dataclass(frozen=True)
class Traced:
    """What the live backend does with a probe: `delivered` True when it reaches `to` (a
    NIC key, or `outside`), False when it is dropped or goes elsewhere, None when the
    backend cannot tell (say why in `detail`). `detail` holds the backend's own words:
    the stage and rule that decided, where it went."""

    delivered: bool | None
    to: str | None = None
    detail: tuple[str, ...] = ()


class FabricManager(Manager):
    """A fabric: virtual networks, subnets, security groups, external IPs and NAT, and the
    ports of workloads on it (OVN). It allocates and records what the repo needs."""

    role: ClassVar[Literal["fabric", "k8s"]] = "fabric"

    def trace(self, workdir: Path, probe: Probe) -> Traced | None:
        """Optional: what the live backend does with the first packet of `probe`, for
        `unet reach --live` (`workdir` as for `connect`). None: this fabric cannot trace
        packets at all; a Traced with `delivered` None: it cannot tell for this probe.
        Problems reaching the backend are a `UnetError` naming the manager."""
        return None


class ClusterManager(Manager):
    """Hosting clusters: bridges a fabric's subnets to the VMs they run (Kubernetes)."""

    role: ClassVar[Literal["fabric", "k8s"]] = "k8s"

    def physical_network(self) -> str | None:
        """The physical network the hosting clusters bridge subnets onto (the fabric gives
        each subnet a port there), if it has one."""
        return None

    def hosting_clusters(self) -> tuple[str, ...]:
        """The hosting clusters it runs VMs on (`ComputeInstance.spec.hostingCluster` names
        one of them)."""
        return ()

    def unrealisable(self, rule: Any) -> str | None:
        """Why it cannot realise a security-group rule for VMs on its hosting clusters, if
        it cannot (reported as POLICY_RULE_NOT_REALISED)."""
        return None

    def bindings(self, workload: Manifest, index: int, binding: Mapping[str, Any]
                 ) -> list[dict[str, Any]]:
        """What a workload's attachment `index` needs on its clusters to bind (`binding`:
        its addresses as bindings.py found them), one entry per cluster."""
        return []
