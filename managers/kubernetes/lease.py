"""The Lease that serialises runs on a hosting cluster, and the thread that renews it.

A run holds the Lease `unet-<installation>` in the manager's leaseNamespace on every
usable cluster (`Lease`), taking it when it is free, expired or this process's own, and
otherwise waiting for its holder (said at once, then every WAIT_NOTICE seconds) up to
the lock timeout (`LockTimeout`). A Lease that stops being renewed expires after its
duration as this process sees it, whatever the holder's clock says; one whose holder
is a process of this host that is gone is free at once. While held, a thread renews it
every third of its duration (`Renewer`); a renewal refused (someone else changed it) or
impossible marks it lost, and the cluster's remaining steps fail with that reason.
Letting go clears the holder and shortens the duration to a second.

The Lease also carries what each manager last applied (ANNOTATION_APPLIED: manager →
applied digest), which tells drift from changes of the repo.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import tenacity

from unet.managers.sdk import WAIT_NOTICE, BackendLocked

from .client import Cluster, KubernetesError, is_api_error, is_connection_error
from .codec import LABEL_MANAGED_BY
from .kinds import FIELD_MANAGER, LEASE

ANNOTATION_APPLIED = "network.osac.io/applied"  # on the Lease: manager -> applied digest


class LockTimeout(KubernetesError, BackendLocked):
    """Another run held the Lease longer than this run would wait."""


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def holder_identity() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


@dataclass
class _Holding:
    """Who holds a Lease, as last read, and since when it has not changed."""

    record: tuple[Any, ...] | None = None
    since: float = field(default_factory=time.monotonic)

    @property
    def holder(self) -> Any:
        return self.record[0] if self.record else None

    @property
    def renewed(self) -> Any:
        return self.record[1] if self.record else None

    def see(self, record: tuple[Any, ...]) -> None:
        if record != self.record:
            self.record, self.since = record, time.monotonic()

    def unchanged_for(self) -> float:
        return time.monotonic() - self.since


class _Notice:
    """Says what a wait is for at once, then every WAIT_NOTICE seconds."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.next = 0.0

    def __call__(self, text: str) -> None:
        if time.monotonic() >= self.next:
            self.say(text)
            self.next = time.monotonic() + WAIT_NOTICE


@dataclass
class Lease:
    """The Lease `unet-<installation>` on one cluster, held for one run."""

    cluster: Cluster
    namespace: str
    name: str
    duration: int
    identity: str = field(default_factory=holder_identity)
    current: dict[str, Any] | None = None  # the Lease as last read or written
    taken: bool = False  # False when this process held it already (re-entrant)
    lost: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _call(self, verb: str, request: Callable[[], Any]) -> Any:
        """A request on the Lease; API and connection failures become one clear message."""
        try:
            return request()
        except Exception as exc:
            if is_api_error(exc, 409) or (is_api_error(exc, 404) and verb == "create"):
                raise
            if is_api_error(exc) or is_connection_error(exc):
                raise KubernetesError(self.cluster.explain(
                    exc, verb, LEASE, self.name, self.namespace)) from exc
            raise

    def acquire(self, timeout: float, sleep: Callable[[float], None] = time.sleep,
                waiting: Callable[[str], None] = lambda _text: None) -> None:
        """Take the Lease, waiting up to `timeout` for its holder (told to `waiting` at once
        and every WAIT_NOTICE seconds)."""
        holding = _Holding()
        notice = _Notice(waiting)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_delay(timeout), sleep=sleep,
            wait=tenacity.wait_fixed(0.25), retry=tenacity.retry_if_result(lambda taken: not taken),
            before_sleep=lambda _state: notice(
                f"waiting for the Lease {self.namespace}/{self.name} on {self.cluster.label} "
                f"held by {holding.holder} (renewed {holding.renewed}; up to {timeout:g} s)")
            if holding.holder else None)
        try:
            retrying(self._try_take, holding)
        except tenacity.RetryError:
            raise LockTimeout(
                f"another unet run holds the Lease {self.namespace}/{self.name} on "
                f"{self.cluster.label}: {holding.holder} (renewed {holding.renewed}); "
                f"waited {timeout:g} s — try again later or raise --lock-timeout") from None

    def _try_take(self, holding: _Holding) -> bool:
        """One attempt: the Lease is ours now (created, free, expired or ours already), or
        `holding` says who has it. A Lease that stops being renewed expires after its
        duration as this process sees it, whatever the holder's clock says."""
        lease = self._call("get", lambda: self.cluster.get(LEASE, self.name, self.namespace))
        if lease is None:
            return self._create()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        holding.see((holder, spec.get("renewTime"), lease["metadata"].get("resourceVersion")))
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        expired = holding.unchanged_for() > duration or _stale(holder, spec, duration)
        if not holder or holder == self.identity or expired:
            return self._take(lease, reentrant=holder == self.identity)
        return False

    def _create(self) -> bool:
        stamp = now_micro()
        body = {"apiVersion": LEASE.api_version, "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {LABEL_MANAGED_BY: FIELD_MANAGER}},
                "spec": {"holderIdentity": self.identity,
                         "leaseDurationSeconds": self.duration,
                         "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}}
        try:
            self.current = self._call("create", lambda: self.cluster.create(
                LEASE, self.namespace, body))
        except Exception as exc:
            if is_api_error(exc, 409):  # someone created it first: read it again
                return False
            if is_api_error(exc, 404):
                raise KubernetesError(
                    f"the Lease namespace {self.namespace} does not exist on "
                    f"{self.cluster.label}: create it (kubectl create namespace "
                    f"{self.namespace}) or set leaseNamespace in the manager's config") \
                    from exc
            raise
        self.taken = True
        return True

    def _take(self, lease: dict[str, Any], reentrant: bool) -> bool:
        spec = dict(lease.get("spec") or {})
        stamp = now_micro()
        if spec.get("holderIdentity") != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = stamp
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration,
                    renewTime=stamp)
        try:
            self.current = self._call("update", lambda: self.cluster.replace(
                LEASE, self.namespace, {**lease, "spec": spec}))
        except Exception as exc:
            if is_api_error(exc, 409):  # changed under us: read it again
                return False
            raise
        self.taken = not reentrant
        return True

    def renew(self) -> None:
        with self.lock:
            if self.current is None or self.lost:
                return
            lease = self.current
            spec = {**lease.get("spec", {}), "renewTime": now_micro()}
            try:
                self.current = self.cluster.replace(LEASE, self.namespace,
                                                    {**lease, "spec": spec})
            except Exception as exc:
                if is_api_error(exc, 409):
                    self.lost = (f"lost the Lease {self.namespace}/{self.name} on "
                                 f"{self.cluster.label}: someone else changed it")
                elif is_api_error(exc) or is_connection_error(exc):
                    self.lost = "cannot renew the Lease: " + self.cluster.explain(
                        exc, "update", LEASE, self.name, self.namespace)
                else:
                    raise

    def annotate(self, key: str, value: str) -> None:
        """Set an annotation on the held Lease (the applied digest)."""
        with self.lock:
            if self.current is None or self.lost:
                return
            lease = self.current
            metadata = dict(lease["metadata"])
            metadata["annotations"] = {**(metadata.get("annotations") or {}), key: value}
            self.current = self._call("update", lambda: self.cluster.replace(
                LEASE, self.namespace, {**lease, "metadata": metadata}))

    def annotation(self, key: str) -> str | None:
        if self.current is None:
            return None
        return ((self.current.get("metadata") or {}).get("annotations") or {}).get(key)

    def release(self) -> None:
        with self.lock:
            if self.current is None or not self.taken or self.lost:
                return
            lease = self.current
            spec = {k: v for k, v in (lease.get("spec") or {}).items()
                    if k not in ("holderIdentity", "acquireTime")}
            spec.update(leaseDurationSeconds=1, renewTime=now_micro())
            with contextlib.suppress(Exception):  # it expires anyway
                self.current = self.cluster.replace(LEASE, self.namespace,
                                                    {**lease, "spec": spec})


def _stale(holder: str | None, spec: dict[str, Any], duration: float) -> bool:
    """The holder is a process of this host that is gone, or the lease ran out long ago."""
    if holder:
        host, _, pid = holder.partition(" pid ")
        if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
            return True
    renewed = spec.get("renewTime")
    if isinstance(renewed, str):
        with contextlib.suppress(ValueError):
            when = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
            # a generous allowance for clock skew between this host and the holder's
            return (datetime.now(UTC) - when).total_seconds() > duration + 60
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Renewer:
    """Renews held Leases every third of their duration until stopped."""

    def __init__(self, leases: list[Lease], every: float) -> None:
        self.leases = leases
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="unet-lease-renewer",
                                       daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            for lease in self.leases:
                with contextlib.suppress(Exception):
                    lease.renew()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self.thread.start()
        try:
            yield
        finally:
            self.stop.set()
            self.thread.join(timeout=10)
