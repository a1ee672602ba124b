"""Talking to the hosting clusters' API servers: observe, server-side apply, delete, Lease.

One `ApiClient` per hosting cluster, from its kubeconfig context. Every request goes
through the kubernetes client's `CustomObjectsApi` (the Lease too: a Lease is read and
written as a plain object of `coordination.k8s.io/v1`).

What is ours: objects labelled `network.osac.io/managed-by: unet`,
`network.osac.io/installation: <installation>` and `network.osac.io/manager: <manager>`.
Nothing else is ever changed or deleted. Objects are written by server-side apply with
one field manager (`unet`), forced: the applied configuration holds only the fields unet
renders, so forcing takes back exactly those fields (drift) and no other. Deletes name the
UID that was observed, so an object that was replaced by someone else's in between is
never deleted.

A cluster that cannot be used (unknown context, unreachable, credentials refused, RBAC)
is marked with the reason; its steps fail with that reason and the other clusters go on.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import tenacity

from managers.sdk import TAG_HASH, WAIT_NOTICE, BackendLocked, BackendObject, UnetError

from .render import POLICY_FOR, bindings_configmap

if TYPE_CHECKING:
    from . import KubernetesObservation

FIELD_MANAGER = "unet"
LABEL_MANAGED_BY = "network.osac.io/managed-by"
LABEL_INSTALLATION = "network.osac.io/installation"
LABEL_MANAGER = "network.osac.io/manager"
ANNOTATION_OWNER = "network.osac.io/owner"
ANNOTATION_KEY = "network.osac.io/key"
ANNOTATION_HASH = "network.osac.io/hash"
ANNOTATION_META = "network.osac.io/meta"
ANNOTATION_APPLIED = "network.osac.io/applied"  # on the Lease: manager -> applied digest
LIST_PAGE = 500


class KubernetesError(UnetError):
    """A hosting cluster refused or could not carry out a request."""


class LockTimeout(KubernetesError, BackendLocked):
    """Another run held the Lease longer than this run would wait."""


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool
    installs_with: str  # what provides the CRD, for the message when it is missing
    body: str = "spec"  # the top-level field holding what unet writes

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def describe(self) -> str:
        what = "the CRD" if self.group else "the API"
        return f"{what} {self.crd} ({self.kind}, {self.api_version})"


KINDS = {k.kind: k for k in (
    Kind("ClusterUserDefinedNetwork", "k8s.ovn.org", "v1", "clusteruserdefinednetworks", False,
         "OVN-Kubernetes with user-defined networks (the ClusterUserDefinedNetwork CRD)"),
    Kind("IPAddressPool", "metallb.io", "v1beta1", "ipaddresspools", True, "MetalLB"),
    Kind("L2Advertisement", "metallb.io", "v1beta1", "l2advertisements", True, "MetalLB"),
    Kind("MultiNetworkPolicy", "k8s.cni.cncf.io", "v1beta1", "multi-networkpolicies", True,
         "the multi-network policy API (OVN-Kubernetes with multi-network policies enabled)"),
    Kind("ConfigMap", "", "v1", "configmaps", True, "Kubernetes", body="data"),
)}
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", True, "Kubernetes")

#: The parts of each kind's spec that unet writes (True: the whole subtree). Observe
#: reads back exactly these, so server defaults and fields others own never show as drift.
MANAGED_SPEC: dict[str, dict[str, Any]] = {
    "ClusterUserDefinedNetwork": {
        "namespaceSelector": True,
        "network": {"topology": True, "localnet": {
            "role": True, "physicalNetworkName": True, "subnets": True,
            "excludeSubnets": True, "mtu": True, "vlan": True, "ipam": True}},
    },
    "IPAddressPool": {"addresses": True, "autoAssign": True},
    "L2Advertisement": {"ipAddressPools": True},
    "MultiNetworkPolicy": {"podSelector": True, "policyTypes": True, "ingress": True,
                           "egress": True},
}
#: Kinds whose whole body (`Kind.body`) is unet's.
WHOLE_BODY = frozenset({"ConfigMap"})
#: Annotations of others' APIs that unet writes, read back like the spec.
MANAGED_ANNOTATIONS = {"MultiNetworkPolicy": (POLICY_FOR,)}
#: Fields that name other objects of ours: (spec field, kind named), same namespace.
REFERENCES = {"L2Advertisement": {"ipAddressPools": "IPAddressPool"}}


def project(template: dict[str, Any], value: Any) -> Any:
    out = {}
    for name, sub in template.items():
        if isinstance(value, dict) and name in value:
            picked = value[name] if sub is True else project(sub, value[name])
            if picked != {} or sub is True:
                out[name] = picked
    return out


def object_key(cluster: str, kind: str, name: str, namespace: str | None) -> str:
    return f"{cluster}/{kind}/{namespace + '/' if namespace else ''}{name}"


def refs_of(cluster: str, kind: str, namespace: str | None,
            spec: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    out = {}
    for fieldname, target in REFERENCES.get(kind, {}).items():
        names = spec.get(fieldname) or []
        if names:
            out[fieldname] = tuple(sorted(object_key(cluster, target, n, namespace)
                                          for n in names))
    return out


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- errors ---------------------------------------------------------------------------------


def _status_message(exc: Any) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


def is_api_error(exc: BaseException, status: int | None = None) -> bool:
    from kubernetes.client.exceptions import ApiException

    return isinstance(exc, ApiException) and (status is None or exc.status == status)


def is_connection_error(exc: BaseException) -> bool:
    import urllib3

    return isinstance(exc, urllib3.exceptions.HTTPError | OSError)


# --- one cluster ----------------------------------------------------------------------------


@dataclass
class Cluster:
    """One hosting cluster: its API client and what is known to be wrong with it."""

    name: str
    context: str
    timeout: float = 30.0
    api: Any = None  # kubernetes.client.ApiClient
    server: str = ""
    error: str | None = None  # the cluster cannot be used in this run, and why
    missing: dict[str, str] = field(default_factory=dict)  # kind -> why it cannot be used

    @property
    def label(self) -> str:
        return f"cluster {self.name} (context {self.context})"

    def connect(self, kubeconfig: str) -> None:
        import urllib3
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        try:
            contexts, _ = config.list_kube_config_contexts(kubeconfig)
        except (ConfigException, OSError, ValueError) as exc:
            self.error = f"cannot read the kubeconfig {kubeconfig}: {exc}"
            return
        names = sorted(c["name"] for c in contexts or ())
        if self.context not in names:
            self.error = (f"the kubeconfig context '{self.context}' of {self.label} is not in "
                          f"{kubeconfig} (contexts there: {', '.join(names) or 'none'}); "
                          "set KUBECONFIG or fix `context` in the manager's config")
            return
        configuration = client.Configuration()
        # Retry only what is safe to retry: connecting. Never a request that was sent.
        configuration.retries = urllib3.Retry(total=2, connect=2, read=0, status=0, other=0,
                                              backoff_factor=0.1, raise_on_status=False)
        try:
            self.api = config.new_client_from_config(
                config_file=kubeconfig, context=self.context, persist_config=False,
                client_configuration=configuration)
        except (ConfigException, OSError, ValueError) as exc:
            self.error = f"cannot use the kubeconfig context '{self.context}' of " \
                         f"{self.label}: {exc}"
            return
        self.server = configuration.host

    def close(self) -> None:
        if self.api is not None:
            with contextlib.suppress(Exception):
                self.api.close()
            self.api = None

    # -- failures as messages --------------------------------------------------------------
    def explain(self, exc: BaseException, verb: str, kind: Kind,
                name: str | None = None, namespace: str | None = None) -> str:
        """One clear sentence for a failed request."""
        what = kind.crd + (f" {name}" if name else "")
        where = f" in namespace {namespace}" if namespace else \
            (" (cluster-wide)" if not kind.namespaced or name is None else "")
        if is_api_error(exc):
            status = exc.status  # type: ignore[attr-defined]
            message = _status_message(exc)
            if status == 403:
                return (f"RBAC: the credentials of {self.label} may not {verb} "
                        f"{what}{where} (403 Forbidden: {message}); grant the verb "
                        f"'{verb}' on resource '{kind.plural}' in API group '{kind.group}' "
                        "(see docs/kubernetes.md)")
            if status == 401:
                return (f"the API server of {self.label} refused the credentials "
                        f"(401 Unauthorized): {message}")
            if status == 404 and name is None:
                return (f"{kind.describe()} is not installed on {self.label}: install "
                        f"{kind.installs_with} there first")
            return f"{verb} {what}{where} on {self.label} failed ({status}): {message}"
        if is_connection_error(exc):
            reason = _connection_reason(exc)
            return f"{self.label} is unreachable: cannot connect to {self.server}: {reason}"
        return f"{verb} {what}{where} on {self.label} failed: {exc}"

    # -- requests --------------------------------------------------------------------------
    @property
    def objects(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> Any:
        """The core API, for the one core kind unet writes: ConfigMap."""
        from kubernetes import client

        return client.CoreV1Api(self.api)

    def _plain(self, obj: Any) -> dict[str, Any]:
        """A typed core object as the JSON the server sent."""
        return self.api.sanitize_for_serialization(obj)  # type: ignore[no-any-return]

    def list(self, kind: Kind, **query: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            if kind.group:
                page = self.objects.list_cluster_custom_object(
                    kind.group, kind.version, kind.plural, limit=LIST_PAGE, _continue=token,
                    _request_timeout=self.timeout, **query)
            else:
                page = self._plain(self.core.list_config_map_for_all_namespaces(
                    limit=LIST_PAGE, _continue=token, _request_timeout=self.timeout,
                    **query))
            for item in page.get("items", []):
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def get(self, kind: Kind, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            if not kind.group:
                return self._plain(self.core.read_namespaced_config_map(
                    name, namespace, _request_timeout=self.timeout))
            if kind.namespaced:
                return self.objects.get_namespaced_custom_object(  # type: ignore[no-any-return]
                    kind.group, kind.version, namespace, kind.plural, name,
                    _request_timeout=self.timeout)
            return self.objects.get_cluster_custom_object(  # type: ignore[no-any-return]
                kind.group, kind.version, kind.plural, name, _request_timeout=self.timeout)
        except Exception as exc:
            if is_api_error(exc, 404):
                return None
            raise

    def apply(self, kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply under the field manager `unet`, forced (only our fields)."""
        meta = body["metadata"]
        common = {"field_manager": FIELD_MANAGER, "force": True,
                  "_content_type": "application/apply-patch+yaml",
                  "_request_timeout": self.timeout}
        if not kind.group:
            return self._plain(self.core.patch_namespaced_config_map(
                meta["name"], meta["namespace"], body, **common))
        if kind.namespaced:
            return self.objects.patch_namespaced_custom_object(  # type: ignore[no-any-return]
                kind.group, kind.version, meta["namespace"], kind.plural, meta["name"], body,
                **common)
        return self.objects.patch_cluster_custom_object(  # type: ignore[no-any-return]
            kind.group, kind.version, kind.plural, meta["name"], body, **common)

    def delete(self, kind: Kind, name: str, namespace: str | None, uid: str | None) -> None:
        from kubernetes import client

        options = client.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=client.V1Preconditions(uid=uid) if uid else None)
        try:
            if not kind.group:
                self.core.delete_namespaced_config_map(name, namespace, body=options,
                                                       _request_timeout=self.timeout)
            elif kind.namespaced:
                self.objects.delete_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name, body=options,
                    _request_timeout=self.timeout)
            else:
                self.objects.delete_cluster_custom_object(
                    kind.group, kind.version, kind.plural, name, body=options,
                    _request_timeout=self.timeout)
        except Exception as exc:
            if not is_api_error(exc, 404):  # already gone: what we wanted
                raise

    def create(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.objects.create_namespaced_custom_object(  # type: ignore[no-any-return]
            kind.group, kind.version, namespace, kind.plural, body,
            field_manager=FIELD_MANAGER, _request_timeout=self.timeout)

    def replace(self, kind: Kind, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.objects.replace_namespaced_custom_object(  # type: ignore[no-any-return]
            kind.group, kind.version, namespace, kind.plural, body["metadata"]["name"], body,
            field_manager=FIELD_MANAGER, _request_timeout=self.timeout)


def _connection_reason(exc: BaseException) -> str:
    """The innermost cause of a connection failure, in a few words."""
    seen: set[int] = set()
    current: Any = exc
    last = str(exc)
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = f"{type(current).__name__} {current}"
        if isinstance(current, ConnectionRefusedError) or "Connection refused" in text:
            return "connection refused"
        if isinstance(current, TimeoutError) or "timed out" in text.lower():
            return "timed out"
        if "RemoteDisconnected" in text or "Connection aborted" in text:
            return "the server closed the connection without answering"
        if "Name or service not known" in text or "nodename nor servname" in text \
                or "NameResolutionError" in text:
            return "the host name does not resolve"
        if "SSL" in text or "CERTIFICATE" in text:
            return f"TLS failed: {current}"
        last = str(current)
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else (
            current.__cause__ or current.__context__)
    return last


# --- observing ------------------------------------------------------------------------------


def classify(item: dict[str, Any], installation: str, manager: str) -> str | None:
    """None when the object is ours; otherwise who it belongs to, for messages."""
    labels = (item.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != FIELD_MANAGER:
        return "not managed by unet (it lacks the label network.osac.io/managed-by=unet)"
    other = labels.get(LABEL_INSTALLATION)
    if other != installation:
        return f"managed by unet installation '{other}'"
    if labels.get(LABEL_MANAGER) != manager:
        return f"managed by the NetworkManager '{labels.get(LABEL_MANAGER)}' of this " \
               "installation"
    return None


def to_backend(cluster: str, manager: str, item: dict[str, Any]) -> BackendObject:
    kind = item["kind"]
    metadata = item.get("metadata") or {}
    namespace = metadata.get("namespace") if KINDS[kind].namespaced else None
    annotations = metadata.get("annotations") or {}
    body = KINDS[kind].body
    spec = dict(item.get(body) or {}) if kind in WHOLE_BODY else \
        project(MANAGED_SPEC[kind], item.get(body) or {})
    written = {name: annotations[name] for name in MANAGED_ANNOTATIONS.get(kind, ())
               if name in annotations}
    fields: dict[str, Any] = {
        "apiVersion": item.get("apiVersion", KINDS[kind].api_version),
        "kind": kind,
        "metadata": {"name": metadata["name"], **({"namespace": namespace} if namespace
                                                   else {}),
                     **({"annotations": written} if written else {})},
        body: spec,
    }
    try:
        meta = json.loads(annotations.get(ANNOTATION_META, "{}"))
        if not isinstance(meta, dict):
            meta = {}
    except ValueError:
        meta = {}
    meta = {str(k): str(v) for k, v in meta.items()}
    if ANNOTATION_HASH in annotations:
        meta[TAG_HASH] = annotations[ANNOTATION_HASH]
    key = object_key(cluster, kind, metadata["name"], namespace)
    return BackendObject(manager, kind, key, annotations.get(ANNOTATION_OWNER, ""), fields,
                         refs_of(cluster, kind, namespace, spec), None, frozenset(), meta)


def to_body(obj: BackendObject, installation: str, manager: str) -> dict[str, Any]:
    """The applied configuration: the rendered object plus our labels and annotations."""
    fields = copy.deepcopy(dict(obj.fields))
    meta = {k: v for k, v in sorted(obj.meta.items()) if k != TAG_HASH}
    body = KINDS[fields["kind"]].body
    return {
        "apiVersion": fields["apiVersion"],
        "kind": fields["kind"],
        "metadata": {
            **fields["metadata"],
            "labels": {LABEL_MANAGED_BY: FIELD_MANAGER, LABEL_INSTALLATION: installation,
                       LABEL_MANAGER: manager},
            "annotations": {**fields["metadata"].get("annotations", {}),
                            ANNOTATION_OWNER: obj.owner, ANNOTATION_KEY: obj.key,
                            ANNOTATION_HASH: obj.content_hash,
                            ANNOTATION_META: json.dumps(meta, sort_keys=True,
                                                        separators=(",", ":"))},
        },
        body: fields[body],
    }


def observe_cluster(cluster: Cluster, installation: str, manager: str,
                    into: KubernetesObservation) -> None:
    """Our objects of every kind on one cluster; failures are recorded on the cluster."""
    for kind in KINDS.values():
        if cluster.error is not None:
            return
        try:
            # of the cluster's ConfigMaps, only those with the name unet writes
            items = cluster.list(kind, **({"field_selector": "metadata.name="
                                                            + bindings_configmap(manager)}
                                          if kind.kind == "ConfigMap" else {}))
        except Exception as exc:
            if not (is_api_error(exc) or is_connection_error(exc)):
                raise
            message = cluster.explain(exc, "list", kind)
            if is_api_error(exc, 404) or is_api_error(exc, 403):
                cluster.missing[kind.kind] = message
                if is_api_error(exc, 403):  # not installed is known; not allowed to look is not
                    into.unobserved.append(message)
            else:
                cluster.error = message
            continue
        cluster.missing.pop(kind.kind, None)
        for item in items:
            metadata = item.get("metadata") or {}
            namespace = metadata.get("namespace") if kind.namespaced else None
            key = object_key(cluster.name, kind.kind, metadata.get("name", ""), namespace)
            whose = classify(item, installation, manager)
            if whose is not None:
                into.foreign[key] = whose
                continue
            if metadata.get("deletionTimestamp"):
                into.terminating.add(key)
                continue
            into.uids[key] = metadata.get("uid", "")
            into.objects.append(to_backend(cluster.name, manager, item))


# --- the Lease ------------------------------------------------------------------------------


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
