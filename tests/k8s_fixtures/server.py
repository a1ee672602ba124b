"""A small Kubernetes API server stand-in for the contract tests (see README.md here).

One `FakeCluster` is one API server on 127.0.0.1 (port 0), speaking plain HTTP with a
bearer token. It serves list/get/create/replace/server-side-apply/delete for the
custom resources unet writes, Leases and ConfigMaps (core `/api/v1`), answers errors
with the recorded Status bodies in responses/, and checks every stored object against
the upstream CRDs (ConfigMaps against the API server's built-in ConfigMap validation).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from ..support.crds import CORE_KINDS, load_crds, validate_object

RESPONSES = Path(__file__).resolve().parent / "responses"
TOKEN = "contract-test-token"
USER = "system:serviceaccount:unet-system:unet"
CUDN_FINALIZER = "k8s.ovn.org/user-defined-network-protection"

# plural -> (group, version, kind, namespaced); group "" is the core group under /api
RESOURCES = {
    "clusteruserdefinednetworks": ("k8s.ovn.org", "v1", "ClusterUserDefinedNetwork", False),
    "ipaddresspools": ("metallb.io", "v1beta1", "IPAddressPool", True),
    "l2advertisements": ("metallb.io", "v1beta1", "L2Advertisement", True),
    "multi-networkpolicies": ("k8s.cni.cncf.io", "v1beta1", "MultiNetworkPolicy", True),
    "leases": ("coordination.k8s.io", "v1", "Lease", True),
    "configmaps": ("", "v1", "ConfigMap", True),
}
#: Built-in kinds: served whatever CRDs a test leaves out.
ALWAYS_SERVED = ("leases", "configmaps")
#: Maps that server-side apply treats as one value (x-kubernetes-map-type: atomic).
ATOMIC = {("spec", "namespaceSelector")}
_PATH = re.compile(r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)/"
                   r"(?:namespaces/(?P<namespace>[^/]+)/)?(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")
_SELECTOR_TERM = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*([^=!\s]*)\s*$")
#: A real cluster's kube-controller-manager puts this ConfigMap in every namespace.
ROOT_CA = "kube-root-ca.crt"


def api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def response(template: str, **values: Any) -> dict[str, Any]:
    """A recorded Status body with its {placeholders} filled in."""
    body = json.loads((RESPONSES / f"{template}.json").read_text())
    core = values.get("group") == ""  # "configmaps" not "configmaps.", "v1" not "/v1"

    def fill(node: Any) -> Any:
        if isinstance(node, str):
            if core:
                node = node.replace(".{group}", "").replace("{group}/", "")
            return re.sub(r"\{(\w+)\}", lambda m: str(values.get(m.group(1), m.group(0))), node)
        if isinstance(node, dict):  # details.group is left out for the core group
            return {k: fill(v) for k, v in node.items() if not (core and v == "{group}")}
        if isinstance(node, list):
            return [fill(v) for v in node]
        return node

    return fill(body)  # type: ignore[no-any-return]


class ApiError(Exception):
    def __init__(self, code: int, body: dict[str, Any] | str) -> None:
        super().__init__(code)
        self.code = code
        self.body = body


# --- field ownership for server-side apply ---------------------------------------------------


def leaf_paths(value: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Owned paths of an applied object: maps recurse, lists and atomic maps are leaves."""
    if isinstance(value, dict) and value and prefix not in ATOMIC:
        out: set[tuple[str, ...]] = set()
        for key, child in value.items():
            if not prefix and key in ("apiVersion", "kind"):
                continue
            if prefix == ("metadata",) and key not in ("labels", "annotations", "finalizers"):
                continue
            out |= leaf_paths(child, (*prefix, key))
        return out
    return {prefix} if prefix else set()


def get_path(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def set_path(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        obj = obj.setdefault(part, {})
    obj[path[-1]] = copy.deepcopy(value)


def drop_path(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    parents = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, part in reversed(parents):  # empty maps left behind go too
        if parent[part] == {}:
            del parent[part]


_MISSING = object()


def fields_v1(paths: set[tuple[str, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(paths):
        node = out
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return out


def apply_defaults(schema: dict[str, Any], value: Any) -> None:
    if not isinstance(value, dict):
        return
    for key, child in schema.get("properties", {}).items():
        if key not in value and "default" in child:
            value[key] = copy.deepcopy(child["default"])
        if key in value:
            apply_defaults(child, value[key])


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


_VALIDATED: dict[str, list[str]] = {}


def _validate(obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """validate_object, remembered: the same object on another cluster needs no new run."""
    def plain(o: dict[str, Any] | None) -> Any:
        if o is None:
            return None
        meta = {k: v for k, v in o["metadata"].items() if k in ("name", "namespace", "labels")}
        meta["annotations"] = {k: len(v) for k, v in
                               (o["metadata"].get("annotations") or {}).items()}
        return {**o, "metadata": meta}

    key = json.dumps([plain(obj), plain(old)], sort_keys=True)
    if key not in _VALIDATED:
        _VALIDATED[key] = validate_object(obj, old)
    return _VALIDATED[key]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- one API server --------------------------------------------------------------------------


class FakeCluster:
    def __init__(self, name: str, kinds: tuple[str, ...] | None = None,
                 namespaces: tuple[str, ...] = ("default", "unet-system", "metallb-system"),
                 finalizer_seconds: float | None = None, plain_404: bool = False) -> None:
        self.name = name
        self.plain_404 = plain_404  # an unserved API group: a bare "404 page not found"
        self.served = set(kinds if kinds is not None else RESOURCES) | set(ALWAYS_SERVED)
        self.namespaces = set(namespaces)
        self.finalizer_seconds = finalizer_seconds  # None: the CUDN controller is absent
        self.store: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.owners: dict[tuple[str, str, str], dict[str, set[tuple[str, ...]]]] = {}
        self.deleting: dict[tuple[str, str, str], float] = {}
        self.deny: set[tuple[str, str]] = set()  # (verb, plural) RBAC refuses
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.RLock()
        self.version = 1000
        self.crds = load_crds()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        for namespace in sorted(self.namespaces):
            self.put({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": ROOT_CA, "namespace": namespace},
                      "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n(contract test)\n"
                                         "-----END CERTIFICATE-----\n"}},
                     manager="kube-controller-manager")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeCluster:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    # -- helpers for tests (what a person or a controller does on the cluster) ---------------
    def objects(self, plural: str) -> list[dict[str, Any]]:
        with self.lock:
            self._reap()
            return [copy.deepcopy(o) for (p, _, _), o in sorted(self.store.items())
                    if p == plural]

    def get(self, plural: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self.lock:
            self._reap()
            found = self.store.get((plural, namespace, name))
            return copy.deepcopy(found) if found else None

    def edit(self, plural: str, name: str, change: Callable[[dict[str, Any]], None],
             namespace: str = "", manager: str = "kubectl-edit") -> None:
        """An update by someone else (kubectl edit): the fields it changes become theirs."""
        with self.lock:
            key = (plural, namespace, name)
            old = self.store[key]
            new = copy.deepcopy(old)
            change(new)
            changed = {p for p in leaf_paths(new) | leaf_paths(old)
                       if get_path(new, p) != get_path(old, p)}
            owners = self.owners.setdefault(key, {})
            for paths in owners.values():
                paths -= changed
            owners.setdefault(manager, set()).update(
                p for p in changed if get_path(new, p) is not _MISSING)
            self._store(key, new, old)

    def put(self, obj: dict[str, Any], manager: str = "kubectl-client-side-apply") -> None:
        """An object created by someone else, as is."""
        plural = next(p for p, r in RESOURCES.items() if r[2] == obj["kind"])
        with self.lock:
            meta = obj["metadata"]
            key = (plural, meta.get("namespace", ""), meta["name"])
            self.owners[key] = {manager: leaf_paths(obj)}
            self._store(key, copy.deepcopy(obj), None)

    def remove(self, plural: str, name: str, namespace: str = "") -> None:
        with self.lock:
            self.store.pop((plural, namespace, name), None)
            self.owners.pop((plural, namespace, name), None)

    # -- the API ------------------------------------------------------------------------------
    def handle(self, method: str, url: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, Any]:
        parsed = urlparse(url)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        with self.lock:
            self.requests.append((method, parsed.path))
            self._reap()
            if headers.get("authorization") != f"Bearer {TOKEN}":
                raise ApiError(401, response("status_unauthorized"))
            if method == "GET":
                found = self._discovery(parsed.path)
                if found is not None:
                    return 200, found
            match = _PATH.match(parsed.path)
            if not match or match["plural"] not in self.served \
                    or match["plural"] not in RESOURCES:
                raise ApiError(404, "404 page not found\n" if self.plain_404
                               else response("status_resource_not_found"))
            plural, name, namespace = match["plural"], match["name"], match["namespace"] or ""
            group, version, kind, _ = RESOURCES[plural]
            if (match["group"] or "", match["version"]) != (group, version):
                raise ApiError(404, response("status_resource_not_found"))
            names = {"plural": plural, "group": group, "version": version, "kind": kind,
                     "name": name or "", "namespace": namespace, "user": USER}
            verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update",
                    "PATCH": "patch", "DELETE": "delete"}[method]
            if (verb, plural) in self.deny:
                template = "status_forbidden_namespaced" if namespace else \
                    "status_forbidden_cluster"
                raise ApiError(403, response(template, verb=verb, **names))
            payload = json.loads(body) if body else None
            if verb == "list":
                return 200, self._list(plural, namespace, query, names)
            if verb == "create":
                return 201, self._create(plural, namespace, payload, names)
            assert name is not None
            key = (plural, namespace, name)
            if verb == "get":
                return 200, copy.deepcopy(self._existing(key, names))
            if verb == "update":
                return 200, self._replace(key, payload, names)
            if verb == "patch":
                content = headers.get("content-type", "").split(";")[0]
                if content == "application/merge-patch+json":
                    manager = query.get("fieldManager", "unknown")
                    old = copy.deepcopy(self._existing(key, names))
                    self.edit(plural, name, lambda o: _merge(o, payload), namespace, manager)
                    return 200, copy.deepcopy(self.store.get(key, old))
                if content != "application/apply-patch+yaml":
                    raise ApiError(415, "only server-side apply and merge patches are served")
                if not query.get("fieldManager"):
                    raise ApiError(422, response("status_bad_request_field_manager"))
                return self._apply(key, payload, query, names)
            return 200, self._delete(key, payload, names)

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """What the live tests read before they start: CRDs and namespaces."""
        prefix = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        if path.startswith(prefix):
            from ..support.crds import crd_dir

            name = path[len(prefix):]
            for file in crd_dir().glob("*.yaml"):
                crd = yaml.safe_load(file.read_text())
                served = next(p for p, r in RESOURCES.items()
                              if r[2] == crd["spec"]["names"]["kind"])
                if crd["metadata"]["name"] == name and served in self.served:
                    crd["status"] = {"conditions": [
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                         "message": "the initial names have been accepted",
                         "lastTransitionTime": now()}],
                        "acceptedNames": crd["spec"]["names"],
                        "storedVersions": [v["name"] for v in crd["spec"]["versions"]
                                           if v.get("storage")]}
                    return crd  # type: ignore[no-any-return]
            raise ApiError(404, response("status_object_not_found", name=name,
                                         plural="customresourcedefinitions",
                                         group="apiextensions.k8s.io"))
        namespace = _NAMESPACE_PATH.match(path)
        if namespace:
            name = namespace["name"]
            if name not in self.namespaces:
                raise ApiError(404, response("status_namespace_not_found", namespace=name))
            return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
                    "status": {"phase": "Active"}}
        return None

    def _list(self, plural: str, namespace: str, query: dict[str, str],
              names: dict[str, Any]) -> dict[str, Any]:
        items = [copy.deepcopy(o) for (p, ns, _), o in sorted(self.store.items())
                 if p == plural and (not namespace or ns == namespace)]
        labels = _selector(query.get("labelSelector", ""))
        fields = _selector(query.get("fieldSelector", ""))
        for key, _, _ in fields:
            if key not in ("metadata.name", "metadata.namespace"):
                raise ApiError(400, response("status_bad_request",
                                             message=f"field label not supported: {key}"))
        items = [o for o in items
                 if all(((o["metadata"].get("labels") or {}).get(k) == v) == equal
                        for k, equal, v in labels)
                 and all((o["metadata"].get(k.split(".")[1], "") == v) == equal
                         for k, equal, v in fields)]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items)
        page = items[start:start + limit]
        body = response("list", resourceVersion=self.version, **names)
        for item in page:
            item.pop("apiVersion", None)  # as in a real list: the envelope says it
            item.pop("kind", None)
        body["items"] = page
        more = start + limit < len(items)
        body["metadata"]["continue"] = str(start + limit) if more else ""
        return body

    def _existing(self, key: tuple[str, str, str], names: dict[str, Any]) -> dict[str, Any]:
        found = self.store.get(key)
        if found is None:
            raise ApiError(404, response("status_object_not_found", **names))
        return found

    def _check_namespace(self, namespace: str, names: dict[str, Any]) -> None:
        if namespace and namespace not in self.namespaces:
            raise ApiError(404, response("status_namespace_not_found", **names))

    def _create(self, plural: str, namespace: str, obj: dict[str, Any],
                names: dict[str, Any]) -> dict[str, Any]:
        names = {**names, "name": obj["metadata"]["name"]}
        self._check_namespace(namespace, names)
        key = (plural, namespace, obj["metadata"]["name"])
        if key in self.store:
            raise ApiError(409, response("status_already_exists", **names))
        obj["metadata"]["namespace"] = namespace
        self.owners[key] = {"unet-update": leaf_paths(obj)}
        return self._store(key, obj, None, names)

    def _replace(self, key: tuple[str, str, str], obj: dict[str, Any],
                 names: dict[str, Any]) -> dict[str, Any]:
        old = self._existing(key, names)
        if obj["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise ApiError(409, response("status_conflict_modified", **names))
        return self._store(key, obj, old, names)

    def _apply(self, key: tuple[str, str, str], patch: dict[str, Any], query: dict[str, str],
               names: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        manager, force = query["fieldManager"], query.get("force") == "true"
        old = self.store.get(key)
        if old is None:
            self._check_namespace(key[1], names)
        applied = leaf_paths(patch)
        owners = self.owners.setdefault(key, {}) if old is not None else {}
        new = copy.deepcopy(old) if old is not None else {
            "apiVersion": patch["apiVersion"], "kind": patch["kind"],
            "metadata": {"name": key[2], **({"namespace": key[1]} if key[1] else {})}}
        for other, paths in owners.items():
            if other == manager:
                continue
            clash = sorted(p for p in applied & paths
                           if get_path(new, p) != get_path(patch, p))
            if clash and not force:
                raise ApiError(409, response("status_conflict_apply", other=other,
                                             path="." + ".".join(clash[0]), **names))
            paths -= applied
        previous = owners.get(manager, set())
        held_by_others = set().union(*(p for m, p in owners.items() if m != manager)) \
            if owners else set()
        for path in previous - applied - held_by_others:
            drop_path(new, path)
        for path in applied:
            set_path(new, path, get_path(patch, path))
        owners[manager] = applied
        self.owners[key] = owners
        stored = self._store(key, new, old, names)
        return (200 if old is not None else 201), stored

    def _delete(self, key: tuple[str, str, str], options: dict[str, Any] | None,
                names: dict[str, Any]) -> dict[str, Any]:
        found = self._existing(key, names)
        want = ((options or {}).get("preconditions") or {}).get("uid")
        if want and want != found["metadata"]["uid"]:
            raise ApiError(409, response("status_conflict_precondition", want=want,
                                         have=found["metadata"]["uid"], **names))
        if found["metadata"].get("finalizers"):
            found["metadata"].setdefault("deletionTimestamp", now())
            self.deleting.setdefault(key, time.monotonic() + (self.finalizer_seconds or 0))
            self._bump(found)
            return copy.deepcopy(found)
        del self.store[key]
        self.owners.pop(key, None)
        if not names["group"]:  # the core registry answers with a Status, not the object
            return response("status_deleted", uid=found["metadata"]["uid"], **names)
        return copy.deepcopy(found)

    def _reap(self) -> None:
        """The CUDN controller removes its finalizer once nothing uses the network."""
        for key, when in list(self.deleting.items()):
            if time.monotonic() >= when:
                self.store.pop(key, None)
                self.owners.pop(key, None)
                del self.deleting[key]

    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def _store(self, key: tuple[str, str, str], obj: dict[str, Any],
               old: dict[str, Any] | None, names: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        plural = key[0]
        group, version, kind, _ = RESOURCES[plural]
        obj["apiVersion"], obj["kind"] = api_version(group, version), kind
        crd = self.crds.get((obj["apiVersion"], kind))
        meta = obj["metadata"]
        if old is not None:
            for server_field in ("uid", "creationTimestamp", "generation", "finalizers",
                                 "deletionTimestamp"):
                if server_field in old["metadata"]:
                    meta[server_field] = old["metadata"][server_field]
                else:
                    meta.pop(server_field, None)
            if "status" in old:
                obj["status"] = old["status"]
        else:
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now())
            if crd is not None:  # built-in ConfigMaps and Leases have no generation
                meta["generation"] = 1
            if plural == "clusteruserdefinednetworks" and self.finalizer_seconds is not None:
                meta["finalizers"] = [CUDN_FINALIZER]
                obj["status"] = {"conditions": [{
                    "type": "NetworkCreated", "status": "True", "lastTransitionTime": now(),
                    "reason": "NetworkAttachmentDefinitionCreated",
                    "message": "NetworkAttachmentDefinition has been created"}]}
        meta.pop("managedFields", None)
        if crd is not None:
            apply_defaults(crd.schema, obj)
        if crd is not None or (obj["apiVersion"], kind) in CORE_KINDS:
            check = {k: v for k, v in obj.items() if k != "status"}
            before = {k: v for k, v in old.items() if k != "status"} if old else None
            if before is not None:
                before["metadata"] = {k: v for k, v in before["metadata"].items()
                                      if k != "managedFields"}
            errors = _validate(check, before)
            if errors:
                raise ApiError(422, response(
                    "status_invalid", errors="[" + ", ".join(errors) + "]",
                    **(names or {"kind": kind, "group": group, "name": meta["name"]})))
        if old is not None:
            unchanged = {k: v for k, v in obj.items() if k != "metadata"} == {
                k: v for k, v in old.items() if k != "metadata"} and \
                {k: v for k, v in meta.items() if k != "resourceVersion"} == \
                {k: v for k, v in old["metadata"].items()
                 if k not in ("resourceVersion", "managedFields")}
            if unchanged:
                meta["resourceVersion"] = old["metadata"]["resourceVersion"]
                meta["managedFields"] = self._managed_fields(key, obj)
                self.store[key] = obj
                return copy.deepcopy(obj)
            if "generation" in meta and obj.get("spec") != old.get("spec"):
                meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self._bump(obj)
        meta["managedFields"] = self._managed_fields(key, obj)
        self.store[key] = obj
        return copy.deepcopy(obj)

    def _managed_fields(self, key: tuple[str, str, str], obj: dict[str, Any]
                        ) -> list[dict[str, Any]]:
        return [{"manager": manager, "operation": "Apply" if manager == "unet" else "Update",
                 "apiVersion": obj["apiVersion"], "time": now(), "fieldsType": "FieldsV1",
                 "fieldsV1": fields_v1(paths)}
                for manager, paths in sorted(self.owners.get(key, {}).items()) if paths]


def _selector(text: str) -> list[tuple[str, bool, str]]:
    """(key, equal, value) terms of a label or field selector; `in`, `notin` and bare keys
    are not known here."""
    terms = []
    for part in filter(None, text.split(",")):
        match = _SELECTOR_TERM.match(part)
        if not match:
            raise ApiError(400, response(
                "status_bad_request", message=f"unable to parse requirement: {part!r} (the "
                "contract-test server knows only key=value, key==value and key!=value)"))
        terms.append((match[1], match[2] != "!=", match[3]))
    return terms


def _handler(cluster: FakeCluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                code, payload = cluster.handle(self.command, self.path, headers, body)
            except ApiError as exc:
                code, payload = exc.code, exc.body
            if isinstance(payload, str):
                data, kind = payload.encode(), "text/plain; charset=utf-8"
            else:
                data, kind = json.dumps(payload).encode(), "application/json"
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


# --- kubeconfig ------------------------------------------------------------------------------


def write_kubeconfig(path: Path, servers: dict[str, str], token: str = TOKEN) -> Path:
    """One context per cluster name, each with its own server URL and the token."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "current-context": next(iter(servers), ""),
        "clusters": [{"name": name, "cluster": {"server": url}}
                     for name, url in servers.items()],
        "users": [{"name": "unet", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "unet"}}
                     for name in servers],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def refused_url() -> str:
    """An address where nothing listens: connection refused."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
