"""One hosting cluster's API server: its client, the requests unet makes, and failures
explained.

One `ApiClient` per hosting cluster, from its kubeconfig context. Custom resources go
through the kubernetes client's `CustomObjectsApi` (the Lease too: it is read and written
as a plain object of `coordination.k8s.io/v1`), the bindings ConfigMap through the core
API; every answer is the JSON the server sent. Objects are written by server-side apply
with one field manager (`unet`), forced: the applied configuration holds only the fields
unet renders, so forcing takes back exactly those fields (drift) and no other. Deletes
name the UID that was observed, so an object that was replaced by someone else's in
between is never deleted. Lists are read in pages of LIST_PAGE objects. Only connecting
is retried, never a request that was sent.

A cluster that cannot be used (unknown context, unreadable kubeconfig, unreachable,
credentials refused, RBAC) is marked with the reason (`error`), a kind it lacks or may
not read likewise (`missing`); `explain` turns a failed request into one sentence that
says what to do.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from unet.managers.sdk import UnetError

from .kinds import FIELD_MANAGER, Kind

LIST_PAGE = 500


class KubernetesError(UnetError):
    """A hosting cluster refused or could not carry out a request."""


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


