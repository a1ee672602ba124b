"""Stage `diff`: desired × observed backend objects → changes with reasons.

Generic over managers: objects are compared by content (fields, references,
parent, extra tags). Field-level changes come from deepdiff, with sets held as
sorted lists by the managers so ordering never shows as a change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from deepdiff import DeepDiff
from deepdiff.helper import NotPresent

from .objects import (
    TAG_HASH,
    TAG_IMMUTABLE,
    TAG_IMMUTABLE_FIELDS,
    TAG_REGIONS,
    BackendObject,
    changed_immutable_fields,
)


class Action(StrEnum):
    """What a plan does to a backend object, or to a resource (Terraform's plans.Action).
    A replace is carried out as two steps, a delete and a create."""

    NOOP = "no-op"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    REPLACE = "replace"

    @property
    def is_replace(self) -> bool:
        return self is Action.REPLACE

    @property
    def changes(self) -> bool:
        return self is not Action.NOOP

    @property
    def deletes(self) -> bool:
        """Whether the object is deleted (and, for a replace, made again)."""
        return self in (Action.DELETE, Action.REPLACE)

    @property
    def steps(self) -> tuple[Action, ...]:
        """The backend steps that carry it out, in order."""
        if self is Action.REPLACE:
            return Action.DELETE, Action.CREATE
        return () if self is Action.NOOP else (self,)

    def to_json(self) -> list[str]:
        """As plans write it: its steps, `["no-op"]` for none."""
        return [str(step) for step in self.steps] or [str(self)]

    @classmethod
    def from_json(cls, actions: Iterable[str]) -> Action:
        listed = tuple(actions)
        return cls.REPLACE if listed == ("delete", "create") else cls(listed[0])


@dataclass(frozen=True, slots=True)
class FieldChange:
    path: str  # e.g. "addresses" or "options.router-port"
    before: Any
    after: Any


@dataclass
class Change:
    uid: str
    before: BackendObject | None
    after: BackendObject | None
    action: Action
    reason: str
    fields: list[FieldChange] = field(default_factory=list)
    forces: tuple[str, ...] = ()  # of a replace: what forces it ("parent", field paths)
    # of a replace: the owner's immutable manifest fields that changed, when the rows say
    owner_fields: tuple[str, ...] = ()

    @property
    def obj(self) -> BackendObject:
        found = self.after or self.before
        assert found is not None
        return found

    @property
    def is_replace(self) -> bool:
        return self.action is Action.REPLACE


def diff(desired: Mapping[str, BackendObject], observed: Mapping[str, BackendObject],
         prune: bool = True) -> list[Change]:
    """One change per object, no-ops included, sorted by uid.

    With `prune` off, observed objects that are no longer desired are kept
    (reported as no-op with the reason), as Flux does with prune: false.
    """
    changes: dict[str, Change] = {}
    for uid in sorted(desired.keys() | observed.keys()):
        changes[uid] = _compare(desired.get(uid), observed.get(uid), prune)
    _cascade_replacements(changes)
    return [changes[uid] for uid in sorted(changes)]


def _compare(want: BackendObject | None, have: BackendObject | None, prune: bool) -> Change:
    if have is None:
        assert want is not None
        return Change(want.uid, None, want, Action.CREATE, "not in the backend yet")
    if want is None:
        if not prune:
            return Change(have.uid, have, None, Action.NOOP,
                          "no longer in the repo; kept: prune is off")
        return Change(have.uid, have, None, Action.DELETE, "no longer in the repo")
    field_changes = _field_changes(have, want)
    owner_fields = changed_immutable_fields(have.meta, want.meta) \
        if have.owner == want.owner else ()
    if have.parent != want.parent:
        return Change(want.uid, have, want, Action.REPLACE,
                      f"moves from {_parent_text(have)} to {_parent_text(want)}", field_changes,
                      ("parent",), owner_fields)
    immutable_before = have.meta.get(TAG_IMMUTABLE)
    immutable_after = want.meta.get(TAG_IMMUTABLE)
    # The tag hashes the owner's immutable fields: it says something only about one owner.
    # A row that passes to another owner (a region's external switch to a new first pool)
    # is updated, not replaced.
    if have.owner == want.owner and immutable_before and immutable_after \
            and immutable_before != immutable_after:
        forced = tuple(c.path for c in field_changes
                       if any(c.path == f"fields.{p}" or c.path.startswith(f"fields.{p}.")
                              for p in want.immutable_fields))
        if owner_fields:
            reason = f"{want.owner} changed {', '.join(owner_fields)}, which cannot change " \
                     "in place"
        elif forced:
            reason = ", ".join(f.removeprefix("fields.") for f in forced) + \
                " cannot change in place"
        else:
            reason = f"an immutable field of {want.owner} changed"
        return Change(want.uid, have, want, Action.REPLACE, reason, field_changes, forced,
                      owner_fields)
    if not field_changes:
        _share_values(have, want)
        return Change(want.uid, have, want, Action.NOOP, "up to date")
    return Change(want.uid, have, want, Action.UPDATE, f"{changed_columns(field_changes)} changed",
                  field_changes)


def _share_values(have: BackendObject, want: BackendObject) -> None:
    """An observed object as desired holds the desired object's columns, references and
    uid, not equal copies: a plan holds both sides of every row, and at 1,000 tenants
    nearly all of 155,000 rows are the same on both (objects are not changed once made)."""
    object.__setattr__(have, "_uid", want.uid)
    if have.fields is not want.fields and have.fields == want.fields:
        object.__setattr__(have, "fields", want.fields)
    if have.refs is not want.refs and have.refs == want.refs:
        object.__setattr__(have, "refs", want.refs)


def changed_columns(field_changes: Sequence[FieldChange]) -> str:
    """The columns (or "tags") a change sets, for people: `addresses, port_security`."""
    names = {c.path.split(".")[1] if c.path.startswith(("fields.", "refs.")) else
             "tags" if c.path.startswith("meta.") else c.path.split(".")[0]
             for c in field_changes}
    return ", ".join(sorted(names))


def _field_changes(have: BackendObject, want: BackendObject) -> list[FieldChange]:
    if _same(have, want):  # nearly every row of a large plan: skip building copies
        return []
    before, after = _comparable(have), _comparable(want)
    if _regions_moved(have, want):  # a row of a tenant that moved, or written unsharded
        if TAG_REGIONS in have.meta:
            before["meta"][TAG_REGIONS] = have.meta[TAG_REGIONS]
        after["meta"][TAG_REGIONS] = want.meta[TAG_REGIONS]
    if before == after:
        return []
    # Sets are sorted lists and the order of list items never matters to a backend here.
    delta = DeepDiff(before, after, ignore_order=True, verbose_level=2, view="tree")
    out: list[FieldChange] = []
    for report in delta.values():
        for item in report:
            path = ".".join(str(p) for p in item.path(output_format="list"))
            out.append(FieldChange(path, _plain(item.t1), _plain(item.t2)))
    return sorted(out, key=lambda c: c.path)


def _same(have: BackendObject, want: BackendObject) -> bool:
    """Equal in everything desired (stricter than the comparison below: the owner's
    immutable tag counts too)."""
    return (have.fields == want.fields and have.parent == want.parent
            and (have.refs == want.refs or _set_refs(have) == _set_refs(want))
            and _unhashed(have.meta) == _unhashed(want.meta)
            and not _regions_moved(have, want))


def _regions_moved(have: BackendObject, want: BackendObject) -> bool:
    """A shard's row that records other regions than its owner's now, or none: written
    again (its tenant moved to another shard; it was written without shards, once), so
    that it says whose it is, and a shard finds it among its own (reconciler/shard.py).
    A run without shards never writes a row for its regions."""
    new = want.meta.get(TAG_REGIONS)
    return new is not None and have.meta.get(TAG_REGIONS) != new


#: Tags that are never a reason to write a row: the hash, and what is written with a row
#: for people and shards (the immutable fields; the regions of a shard's row, but for
#: `_regions_moved`).
_NOT_COMPARED = (TAG_HASH, TAG_IMMUTABLE_FIELDS, TAG_REGIONS)


def _unhashed(meta: Mapping[str, str]) -> Mapping[str, str]:
    if not any(tag in meta for tag in _NOT_COMPARED):
        return meta
    return {k: v for k, v in meta.items() if k not in _NOT_COMPARED}


def _set_refs(obj: BackendObject) -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in obj.refs.items() if v}


def _comparable(obj: BackendObject) -> dict[str, Any]:
    content = obj.content()
    content["meta"] = {k: v for k, v in content["meta"].items()
                       if k != TAG_IMMUTABLE and k not in _NOT_COMPARED}
    return content


def _plain(value: Any) -> Any:
    return None if isinstance(value, NotPresent) else value


def _parent_text(obj: BackendObject) -> str:
    return obj.parent[0] if obj.parent else "the top level"


def _cascade_replacements(changes: dict[str, Change]) -> None:
    """A row whose parent is replaced is recreated with it (OVSDB drops orphaned children)."""
    children: dict[str, list[str]] = {}
    for uid, change in changes.items():
        parent = change.obj.parent
        if parent is not None:
            children.setdefault(f"{change.obj.manager}:{parent[0]}", []).append(uid)
    pending = [uid for uid, c in changes.items() if c.is_replace]
    while pending:
        uid = pending.pop()
        for child in children.get(uid, ()):
            change = changes[child]
            if change.before is None or change.action.deletes:
                continue
            # A row kept because prune is off (no `after`) would vanish too: recreate it as is.
            replaced = changes[uid].obj
            changes[child] = Change(child, change.before, change.after or change.before,
                                    Action.REPLACE, f"{replaced.owner} is replaced, and with "
                                    f"it its {replaced.key}", change.fields)
            pending.append(child)
    _refresh_references(changes)


def _refresh_references(changes: dict[str, Change]) -> None:
    """References to a recreated row are weak and vanish with it: the referrer is updated."""
    replaced = {uid for uid, c in changes.items() if c.is_replace}
    if not replaced:
        return
    for uid, change in changes.items():
        if change.action.changes or change.after is None or change.before is None:
            continue
        manager = change.obj.manager
        hit = sorted(k for keys in change.after.refs.values() for k in keys
                     if f"{manager}:{k}" in replaced)
        if hit:
            changes[uid] = Change(uid, change.before, change.after, Action.UPDATE,
                                  f"references {hit[0]}, which is replaced")
