"""Backend objects: what managers render and observe, and what the differ compares.

An object is a row (OVN) or a resource (Kubernetes) in a backend-neutral shape:
plain JSON fields, references to other objects by key, and the ownership tags.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Field value of something only the apply can know (PR mode: "known after apply").
UNKNOWN = "(known after apply)"

# Ownership tags stamped on every backend object (external_ids in OVN, labels in Kubernetes).
TAG_INSTALLATION = "unet:installation"
TAG_OWNER = "unet:owner"
TAG_KEY = "unet:key"
TAG_HASH = "unet:hash"
#: Hash of the owner's immutable fields: when it changes, the row is replaced.
TAG_IMMUTABLE = "unet:immutable"
#: The owner's immutable manifest fields, each with a short hash of its value
#: (`spec.ipv4Cidr=1a2b3c;spec.virtualNetwork=4d5e6f`): what tells a plan against the
#: backends which field of the manifest forces a replace. Written with the row, never a
#: reason to write it: not part of the row's content, so rows written before it existed
#: stay as they are (their replaces are then explained in the backend's terms).
TAG_IMMUTABLE_FIELDS = "unet:immutable-fields"
#: The regions of a shard's row (reconciler/shard.py): whose it is once its owner left the
#: repo. Written with the rows a shard writes, never a reason to write one.
TAG_REGIONS = "unet:regions"
#: Tags that are not part of a row's content (its hash and digests leave them out).
_NOT_CONTENT = frozenset({TAG_HASH, TAG_IMMUTABLE_FIELDS, TAG_REGIONS})
#: "true" on rows of resources annotated network.osac.io/prevent-destroy.
TAG_PROTECTED = "unet:protected"
#: Prefix of tags recording the allocations a row uses (principle 2).
TAG_ALLOCATION = "unet:alloc:"


@dataclass(frozen=True, slots=True)
class Held:
    """An allocation recorded on a backend object (principle 2).

    `scope` is the resource whose address space the value was drawn from, when the
    object lives inside that resource's object (a port inside its subnet's switch):
    the same address may be held once per subnet, and subnets of different networks
    may overlap.
    """

    value: str
    scope: str | None = None


def observed_allocations(objects: Iterable[BackendObject]) -> dict[str, Held]:
    """Allocation key → what holds it, as recorded on the observed objects."""
    objects = list(objects)
    owners = {(obj.manager, obj.key): obj.owner for obj in objects}
    out: dict[str, Held] = {}
    for obj in objects:
        scope = owners.get((obj.manager, obj.parent[0])) if obj.parent is not None else None
        for name, value in obj.meta.items():
            if name.startswith(TAG_ALLOCATION):
                key = name[len(TAG_ALLOCATION):]
                seen = out.get(key)
                # Recorded on rows of two scopes (older versions tagged every port of a
                # cluster with its VIPs): the scope is unknown, so every subnet holds it.
                out[key] = Held(value, scope if seen is None or seen.scope == scope else None)
    return out


@dataclass(frozen=True, slots=True)
class BackendObject:
    manager: str  # the NetworkManager that holds it, e.g. "ovn" or "kubernetes/hosting-a1"
    table: str  # OVN table or Kubernetes kind
    key: str  # stable identity within the manager, e.g. "Logical_Switch/acme/web"
    owner: str  # the resource it realises: "Subnet/acme/web"
    fields: Mapping[str, Any]  # columns; sets as sorted lists, maps as dicts
    refs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # column -> keys
    parent: tuple[str, str] | None = None  # (parent key, column) for rows owned by a parent
    unknown: frozenset[str] = frozenset()  # fields whose value only the apply knows
    # Extra tags stored beside the ownership tags (external_ids, annotations), e.g.
    # TAG_IMMUTABLE or a description of what an ACL exposes.
    meta: Mapping[str, str] = field(default_factory=dict)
    # Observed only: objects of others that live inside this one and would be destroyed
    # with it (an operator's port in a unet switch), described for people.
    holds: tuple[str, ...] = field(default=(), compare=False)
    # Desired only: fields the backend cannot change in place (a change replaces the
    # object), as paths under `fields`, e.g. "spec.network" of a ClusterUserDefinedNetwork.
    immutable_fields: tuple[str, ...] = field(default=(), compare=False)
    # Desired only: what the object stands for when that is not its owner's immutable
    # fields as a whole (a workload's port: its attachments), whose change replaces it.
    # Stamped as TAG_IMMUTABLE with the owner's tags (desired.py), as the owner's are.
    identity: Any = field(default=None, compare=False)
    # Computed once, when first asked (an object is frozen: set through object.__setattr__).
    # Each index of the objects by uid then holds the same string.
    _hash: str | None = field(default=None, init=False, compare=False, repr=False)
    _uid: str | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def uid(self) -> str:
        """Unique across managers."""
        if self._uid is None:
            object.__setattr__(self, "_uid", f"{self.manager}:{self.key}")
        return self._uid  # type: ignore[return-value]

    @property
    def depends(self) -> tuple[str, ...]:
        """Keys (same manager) that must exist before this object."""
        keys = [k for values in self.refs.values() for k in values]
        if self.parent is not None:
            keys.append(self.parent[0])
        return tuple(sorted(set(keys)))

    def content(self) -> dict[str, Any]:
        """Everything that is desired of the object, for hashing and comparing."""
        return {
            "fields": dict(self.fields),
            "refs": {k: list(v) for k, v in sorted(self.refs.items()) if v},
            "parent": list(self.parent) if self.parent else None,
            "meta": {k: v for k, v in sorted(self.meta.items()) if k not in _NOT_CONTENT},
        }

    @property
    def content_hash(self) -> str:
        """Computed once: digests, drift checks and the `unet:hash` tag all need it."""
        if self._hash is None:
            object.__setattr__(self, "_hash", content_hash(self.content()))
        return self._hash  # type: ignore[return-value]


def immutable_tag(values: Any) -> str:
    """The TAG_IMMUTABLE of a row: a hash of what may not change in place (its owner's
    immutable fields, or the part of them the row stands for). The differ replaces a row
    whose tag changes while its owner stays the same."""
    return content_hash(values)


def immutable_fields_tag(values: Mapping[str, Any]) -> str:
    """TAG_IMMUTABLE_FIELDS of a row whose owner's immutable fields are `values` (path →
    value, as models.immutable_values gives them); fields without a value are left out."""
    return ";".join(f"{path}={content_hash(value)[:6]}"
                    for path, value in sorted(values.items()) if value is not None)


def changed_immutable_fields(before: Mapping[str, str], after: Mapping[str, str]
                             ) -> tuple[str, ...]:
    """The immutable manifest fields whose values differ between two rows of one owner, as
    their TAG_IMMUTABLE_FIELDS record them (`before` and `after` are their tags); () when
    a row does not record them (written before the tag existed)."""
    old, new = before.get(TAG_IMMUTABLE_FIELDS), after.get(TAG_IMMUTABLE_FIELDS)
    if old is None or new is None or old == new:  # most rows of most plans: the same
        return ()
    was, now = _field_hashes(old), _field_hashes(new)
    return tuple(sorted(path for path in was.keys() | now.keys()
                        if was.get(path) != now.get(path)))


def _field_hashes(tag: str) -> dict[str, str]:
    return dict(part.rpartition("=")[::2] for part in tag.split(";") if part)


#: json.dumps with these options would build an encoder per call; the desired state's
#: digest hashes every object (155,000 at 1,000 tenants: 1.53 s, 1.33 s with one encoder).
_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


def content_hash(value: Any) -> str:
    return hashlib.sha256(_ENCODE(value).encode()).hexdigest()[:16]


#: Items encoded at once by `list_hash`: few calls of the encoder, and a short text each.
_LIST_CHUNK = 1000


def list_hash(items: Sequence[Any]) -> str:
    """content_hash(items) of a long list, encoded a chunk at a time: the text of every
    row at once (70 MB at 1,000 tenants) was the peak of a run that printed its plan."""
    digest = hashlib.sha256(b"[")
    for start in range(0, len(items), _LIST_CHUNK):
        text = _ENCODE(items[start:start + _LIST_CHUNK])[1:-1]
        digest.update((b"," if start else b"") + text.encode())
    digest.update(b"]")
    return digest.hexdigest()[:16]


def share_strings(value: Any) -> Any:
    """`value` with every string in it interned (dicts and lists changed in place): the
    desired and the observed rows then hold one copy of each value they share, a row's
    name, match, addresses and tags (95 MB of 1,000 tenants' rows were held twice)."""
    kind = type(value)
    if kind is str:
        return sys.intern(value)
    if kind is dict:
        for key, item in value.items():
            value[key] = share_strings(item)
    elif kind is list:
        for index, item in enumerate(value):
            value[index] = share_strings(item)
    elif kind is tuple:
        return tuple(share_strings(item) for item in value)
    return value


def index_objects(objects: Iterable[BackendObject]) -> dict[str, BackendObject]:
    """Objects by uid; a duplicate uid is a bug in a renderer."""
    out: dict[str, BackendObject] = {}
    for obj in objects:
        if obj.uid in out:
            raise ValueError(f"two objects render to {obj.uid}")
        out[obj.uid] = obj
    return out
