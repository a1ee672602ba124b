"""Validate Kubernetes objects the way the API server does for the kinds unet writes.

Three layers, as the API server applies them to a custom resource:

1. ObjectMeta: the name (DNS-1123 subdomain), namespace (DNS-1123 label), label keys
   and values, annotation keys and total size.
2. The structural schema (`openAPIV3Schema` of the CRD version), checked with jsonschema.
   The API server prunes unknown fields silently; here they are errors, because a field
   the server drops would make every plan show a change that never goes away.
3. The CEL rules (`x-kubernetes-validations`), evaluated with cel-python and the
   Kubernetes CIDR/IP library functions (`isCIDR`, `cidr`, `isIP`, `ip`, `family`,
   `containsIP`, `containsCIDR`, `masked`, `prefixLength`). Transition rules (those that
   mention `oldSelf`) run only when the old object is given, as on an update.

ConfigMaps (core `v1`, no CRD) get ObjectMeta and the checks of the API server's
`ValidateConfigMap`/`ValidateConfigMapUpdate` instead (`configmap_errors`).

The CRDs are read from the upstream copies shipped in `managers/kubernetes/crds/`
(byte-for-byte, see SOURCES.md there), or from the folder `UNET_CRD_DIR` names. This
module is used by the tests and by the contract-test API server; cel-python is a test
dependency: none of this ships with unet.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CRD_DIR = REPO_ROOT / "managers" / "kubernetes" / "crds"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
ANNOTATIONS_MAX_BYTES = 256 * 1024
CONFIGMAP_MAX_BYTES = 1024 * 1024  # corev1.MaxSecretSize: data and binaryData values together
CONFIGMAP_FIELDS = ("apiVersion", "kind", "metadata", "data", "binaryData", "immutable")


class CrdsMissing(RuntimeError):
    """The upstream CRD reference files are not where they should be."""


@dataclass(frozen=True)
class Crd:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    schema: dict[str, Any]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


def crd_dir() -> Path:
    found = Path(os.environ.get("UNET_CRD_DIR") or DEFAULT_CRD_DIR)
    if not found.is_dir() or not any(found.glob("*.yaml")):
        raise CrdsMissing(
            f"the upstream CRD reference files are not in {found}; unet ships them in "
            "managers/kubernetes/crds/ (set UNET_CRD_DIR to use another folder)")
    return found


@lru_cache(maxsize=4)
def load_crds(directory: str | None = None) -> dict[tuple[str, str], Crd]:
    """(apiVersion, kind) → CRD version, for every served version in the folder."""
    out: dict[tuple[str, str], Crd] = {}
    for path in sorted(Path(directory or crd_dir()).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                crd = Crd(spec["group"], version["name"], spec["names"]["kind"],
                          spec["names"]["plural"], spec["scope"] == "Namespaced",
                          version["schema"]["openAPIV3Schema"])
                out[(crd.api_version, crd.kind)] = crd
    return out


# --- the checks ---------------------------------------------------------------------------


def validate_object(obj: dict[str, Any], old: dict[str, Any] | None = None,
                    crds: dict[tuple[str, str], Crd] | None = None) -> list[str]:
    """Every reason the API server would refuse `obj` (an update of `old`, if given)."""
    core = CORE_KINDS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if core is not None:
        return core(obj, old)
    crds = load_crds() if crds is None else crds
    crd = crds.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    if crd is None:
        return [f"no CRD serves {obj.get('apiVersion')} {obj.get('kind')}"]
    errors = _metadata_errors(obj.get("metadata"), crd.namespaced)
    schema_errors, blocking = _schema_errors(obj, crd)
    errors += schema_errors
    if not blocking:  # as the API server: CEL runs unless a type or required error blocks it
        errors += _cel_errors(crd.schema, obj, old)
    return errors


def _metadata_errors(meta: Any, namespaced: bool) -> list[str]:
    if not isinstance(meta, dict):
        return ["metadata: Required value"]
    errors = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errors.append("metadata.name: Required value")
    elif len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        errors.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain "
                      "must consist of lower case alphanumeric characters, '-' or '.'")
    namespace = meta.get("namespace")
    if namespaced and not namespace:
        errors.append("metadata.namespace: Required value")
    elif not namespaced and namespace:
        errors.append("metadata.namespace: Forbidden: not allowed on this type (cluster scope)")
    elif namespace and (len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace)):
        errors.append(f"metadata.namespace: Invalid value: {namespace!r}")
    for key, value in (meta.get("labels") or {}).items():
        errors += [f"metadata.labels: {e}" for e in _qualified_name_errors(key)]
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            errors.append(f"metadata.labels: Invalid value: {value!r}: a valid label must be "
                          "63 characters or less, alphanumeric, '-', '_' or '.'")
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errors += [f"metadata.annotations: {e}" for e in _qualified_name_errors(key)]
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        errors.append(f"metadata.annotations: Too long: must have at most "
                      f"{ANNOTATIONS_MAX_BYTES} bytes")
    return errors


def _qualified_name_errors(key: str) -> list[str]:
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        errors.append(f"Invalid value: {key!r}: prefix part must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        errors.append(f"Invalid value: {key!r}: name part must consist of alphanumeric "
                      "characters, '-', '_' or '.', at most 63, starting and ending with an "
                      "alphanumeric character")
    return errors


def configmap_errors(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """ValidateConfigMap (ValidateConfigMapUpdate with `old`) of the API server, and the
    typed decoding before it: unknown fields and non-string values are errors here."""
    errors = _metadata_errors(obj.get("metadata"), namespaced=True)
    errors += [f"{key}: field not declared in schema" for key in obj
               if key not in CONFIGMAP_FIELDS]
    if not isinstance(obj.get("immutable", False), bool):
        errors.append("immutable: Invalid value: must be a boolean")
    binary = obj.get("binaryData") or {}
    total = 0
    for field in ("data", "binaryData"):
        bag = obj.get(field) or {}
        if not isinstance(bag, dict):
            errors.append(f"{field}: Invalid value: must be a map of string to string")
            continue
        for key, value in bag.items():
            errors += [f"{field}[{key}]: Invalid value: {key!r}: {message}"
                       for message in _configmap_key_errors(key)]
            if field == "data" and isinstance(binary, dict) and key in binary:
                errors.append(f"data[{key}]: Invalid value: {key!r}: duplicate of key "
                              "present in binaryData")
            if not isinstance(value, str):
                errors.append(f"{field}[{key}]: Invalid value: must be a string")
                continue
            try:  # binaryData travels as base64; its decoded bytes count
                total += len(value.encode() if field == "data"
                             else base64.b64decode(value, validate=True))
            except ValueError:
                errors.append(f"{field}[{key}]: Invalid value: illegal base64 data")
    if total > CONFIGMAP_MAX_BYTES:
        errors.append(f"<root>: Too long: must have at most {CONFIGMAP_MAX_BYTES} bytes")
    if old is not None and old.get("immutable") is True:
        if obj.get("immutable") is not True:
            errors.append("immutable: Forbidden: field is immutable when `immutable` is set")
        errors += [f"{field}: Forbidden: field is immutable when `immutable` is set"
                   for field in ("data", "binaryData")
                   if (obj.get(field) or {}) != (old.get(field) or {})]
    return errors


def _configmap_key_errors(key: str) -> list[str]:
    """IsConfigMapKey of k8s.io/apimachinery."""
    errors = []
    if len(key.encode()) > 253:
        errors.append("must be no more than 253 characters")
    if not _CONFIGMAP_KEY.fullmatch(key):
        errors.append("a valid config key must consist of alphanumeric characters, '-', "
                      "'_' or '.'")
    if key in (".", ".."):
        errors.append(f"must not be {key!r}")
    elif key.startswith(".."):
        errors.append("must not start with '..'")
    return errors


#: Core kinds (no CRD) and their validation, as the API server's built-in code does it.
CORE_KINDS: dict[tuple[str, str], Callable[[dict[str, Any], dict[str, Any] | None],
                                           list[str]]] = {("v1", "ConfigMap"): configmap_errors}


def _schema_errors(obj: dict[str, Any], crd: Crd) -> tuple[list[str], bool]:
    """The schema's errors, and whether one of them keeps CEL from running."""
    validator = _validator(crd.api_version, crd.kind)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    errors = []
    blocking = False
    for error in sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path)):
        path = ".".join(str(p) for p in error.absolute_path) or "(root)"
        errors.append(f"{path}: {error.message}")
        blocking = blocking or error.validator in ("type", "required", "additionalProperties")
    return errors, blocking


@lru_cache(maxsize=16)
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    crd = load_crds()[(api_version, kind)]
    schema = _json_schema(crd.schema, top=True)
    return jsonschema.Draft7Validator(schema)


def _json_schema(node: dict[str, Any], top: bool = False) -> dict[str, Any]:
    """OpenAPI v3 (structural) → JSON Schema: strict about unknown fields, nullable as null."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("description", "format", "nullable",
                                                      "default", "example"):
            continue
        if key == "properties":
            out[key] = {k: _json_schema(v) for k, v in value.items()
                        if not (top and k in ("apiVersion", "kind", "metadata"))}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = _json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_json_schema(v) for v in value]
        else:
            out[key] = value
    if (node.get("type") == "object" and "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


# --- CEL ------------------------------------------------------------------------------------


def _cel_errors(schema: dict[str, Any], obj: dict[str, Any],
                old: dict[str, Any] | None) -> list[str]:
    errors = []
    start = _ABSENT if old is None else old
    for path, node, value, old_value in _walk(schema, obj, start, "", top=True):
        for rule in node.get("x-kubernetes-validations", ()):
            text = rule["rule"]
            transition = "oldSelf" in text
            if transition and old_value is _ABSENT:
                continue  # only on update, and only where the old object had the field
            message = rule.get("message") or f"failed rule: {text}"
            try:
                ok = _evaluate(text, value, old_value if transition else _ABSENT)
            except Exception as exc:  # the API server reports an evaluation error as invalid
                errors.append(f"{path or '<root>'}: Invalid value: {message} "
                              f"(rule evaluation error: {exc})")
                continue
            if not ok:
                errors.append(f"{path or '<root>'}: Invalid value: {message}")
    return errors


class _Absent:
    pass


_ABSENT = _Absent()


def _walk(schema: dict[str, Any], value: Any, old: Any, path: str, top: bool = False
          ) -> Iterator[tuple[str, dict[str, Any], Any, Any]]:
    """(path, schema node, value, old value or _ABSENT) for every node present in value."""
    yield path, schema, value, old
    if isinstance(value, dict):
        for key, child in schema.get("properties", {}).items():
            if top and key == "metadata":
                continue
            if key in value:
                old_child = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
                yield from _walk(child, value[key], old_child, f"{path}.{key}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                old_item = old.get(key, _ABSENT) if isinstance(old, dict) else _ABSENT
                yield from _walk(extra, item, old_item, f"{path}[{key}]")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):  # items are not correlated with the old list
            yield from _walk(schema["items"], item, _ABSENT, f"{path}[{index}]")


def _evaluate(rule: str, value: Any, old: Any) -> bool:
    import celpy

    program = _program(rule)
    activation = {"self": celpy.json_to_cel(value)}
    if old is not _ABSENT:
        activation["oldSelf"] = celpy.json_to_cel(old)
    return bool(program.evaluate(activation))


@lru_cache(maxsize=512)
def _program(rule: str) -> Any:
    try:
        import celpy
    except ImportError as exc:  # pragma: no cover - a test extra
        raise RuntimeError("CEL rules need cel-python: pip install -e '.[test]'") from exc
    env = celpy.Environment()
    return env.program(env.compile(rule), functions=_FUNCTIONS)


# Kubernetes CEL library: IP and CIDR (k8s.io/apiserver/pkg/cel/library/{ip,cidr}.go)


class IP:
    def __init__(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
        self.address = address

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __str__(self) -> str:
        return str(self.address)


class CIDR:
    def __init__(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address,
                 prefix: int) -> None:
        self.address = address
        self.prefix = prefix
        self.network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and (other.address, other.prefix) == (
            self.address, self.prefix)

    def __hash__(self) -> int:
        return hash((self.address, self.prefix))

    def __str__(self) -> str:
        return f"{self.address}/{self.prefix}"


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """As Kubernetes' ip(): no zones, no IPv4-mapped IPv6, no leading zeros."""
    if "%" in text:
        raise ValueError(f"IP address with zone value is not allowed: {text}")
    address = ipaddress.ip_address(text)  # rejects leading zeros in IPv4
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address is not allowed: {text}")
    return address


def _parse_cidr(text: str) -> CIDR:
    address, slash, prefix = text.partition("/")
    if not slash or not prefix.isdigit() or (len(prefix) > 1 and prefix[0] == "0"):
        raise ValueError(f"network address parse error during conversion from string: {text}")
    parsed = _parse_ip(address)
    if int(prefix) > parsed.max_prefixlen:
        raise ValueError(f"invalid prefix length: {text}")
    return CIDR(parsed, int(prefix))


def _bool(value: bool) -> Any:
    from celpy import celtypes

    return celtypes.BoolType(value)


def _int(value: int) -> Any:
    from celpy import celtypes

    return celtypes.IntType(value)


def _is_ip(text: Any) -> Any:
    try:
        _parse_ip(str(text))
    except ValueError:
        return _bool(False)
    return _bool(True)


def _is_cidr(text: Any) -> Any:
    try:
        _parse_cidr(str(text))
    except ValueError:
        return _bool(False)
    return _bool(True)


def _ip(value: Any) -> Any:
    if isinstance(value, CIDR):  # cidr.ip(): the address part
        return IP(value.address)
    return IP(_parse_ip(str(value)))


def _cidr(value: Any) -> CIDR:
    return _parse_cidr(str(value))


def _family(value: Any) -> Any:
    if isinstance(value, IP):
        return _int(value.address.version)
    raise TypeError("family() needs an IP")


def _contains_ip(cidr: CIDR, value: Any) -> Any:
    address = value.address if isinstance(value, IP) else _parse_ip(str(value))
    return _bool(address.version == cidr.network.version and address in cidr.network)


def _contains_cidr(cidr: CIDR, value: Any) -> Any:
    other = value if isinstance(value, CIDR) else _parse_cidr(str(value))
    return _bool(other.network.version == cidr.network.version
                 and other.network.subnet_of(cidr.network))  # type: ignore[arg-type]


def _masked(cidr: CIDR) -> CIDR:
    return CIDR(cidr.network.network_address, cidr.prefix)


def _prefix_length(cidr: CIDR) -> Any:
    return _int(cidr.prefix)


_FUNCTIONS = {
    "isIP": _is_ip, "isCIDR": _is_cidr, "ip": _ip, "cidr": _cidr, "family": _family,
    "containsIP": _contains_ip, "containsCIDR": _contains_cidr, "masked": _masked,
    "prefixLength": _prefix_length,
}
