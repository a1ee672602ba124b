"""Objects of the hosting clusters as backend objects, and backend objects as the
configurations unet applies.

What is ours: objects labelled `network.osac.io/managed-by: unet`,
`network.osac.io/installation: <installation>` and `network.osac.io/manager: <manager>`
(`classify` says whose anything else is, for messages). Nothing else is ever changed or
deleted.

An object of ours reads back as the backend object it was rendered as (`to_backend`):
its key is `<cluster>/<kind>/[<namespace>/]<name>`; its fields are apiVersion, kind,
name, namespace, the annotations of others' APIs that unet writes (MANAGED_ANNOTATIONS)
and of its body only the parts unet writes (MANAGED_SPEC; the whole body for
WHOLE_BODY kinds), so server defaults and fields others own never show as drift; the
spec fields that name other objects of ours (REFERENCES) are its references; owner, hash
and meta come from unet's annotations.

The applied configuration (`to_body`) is the rendered object with unet's labels and
annotations: owner, key, content hash and meta (JSON).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from unet.managers.sdk import TAG_HASH, BackendObject

from .kinds import FIELD_MANAGER, KINDS
from .render import POLICY_FOR

LABEL_MANAGED_BY = "network.osac.io/managed-by"
LABEL_INSTALLATION = "network.osac.io/installation"
LABEL_MANAGER = "network.osac.io/manager"
ANNOTATION_OWNER = "network.osac.io/owner"
ANNOTATION_KEY = "network.osac.io/key"
ANNOTATION_HASH = "network.osac.io/hash"
ANNOTATION_META = "network.osac.io/meta"

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
    """The parts of `value` that `template` names (True: the whole subtree)."""
    out = {}
    for name, sub in template.items():
        if isinstance(value, dict) and name in value:
            picked = value[name] if sub is True else project(sub, value[name])
            if picked != {} or sub is True:
                out[name] = picked
    return out


def object_key(cluster: str, kind: str, name: str, namespace: str | None) -> str:
    """The key of an object: `<cluster>/<kind>/[<namespace>/]<name>`."""
    return f"{cluster}/{kind}/{namespace + '/' if namespace else ''}{name}"


def refs_of(cluster: str, kind: str, namespace: str | None,
            spec: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """The keys of the objects of ours a spec names, per field (REFERENCES)."""
    out = {}
    for fieldname, target in REFERENCES.get(kind, {}).items():
        names = spec.get(fieldname) or []
        if names:
            out[fieldname] = tuple(sorted(object_key(cluster, target, n, namespace)
                                          for n in names))
    return out


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


def status_configmap(manager: str, installation: str, namespace: str,
                     document: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap `unet-status.<manager>` a tenant reads its manifests' status from
    (status.py's document of them, key `status.json`). Written after an apply, not planned:
    it tells what the apply did, which no plan knows."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"unet-status.{manager}", "namespace": namespace,
                         "labels": {LABEL_MANAGED_BY: FIELD_MANAGER,
                                    LABEL_INSTALLATION: installation, LABEL_MANAGER: manager}},
            "data": {"status.json": json.dumps(document, sort_keys=True,
                                               separators=(",", ":"))}}
