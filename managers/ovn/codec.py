"""Northbound rows as backend objects, and backend objects' values as OVSDB writes them.

Rows come as OVSDB's JSON (RFC 7047, 5.1): an atom, `["uuid", …]`, `["set", […]]` (or a
lone element) and `["map", [[key, value], …]]`. Reading every row (northbound.py) and the
replica the daemon keeps (watch.py) turn the installation's rows into objects alike:

- a row's key is its `unet:key` tag; two rows with one key (copied by hand, say) would
  stop every plan, so the first by UUID keeps it and the others get keys nothing
  desires, and go (`keys_of`);
- its fields are the managed columns, decoded as the renderers write them: None, a
  scalar, a sorted list or a dict (`to_object`);
- each reference is the sorted keys of the rows it names (`foreign:<UUID>` for a row
  that is not ours); a child row names its parent's key and the parent's column;
- its tags, but for owner, installation and key, are the object's meta;
- rows of others a row of ours holds (`rows_inside`) are named for people (`label`) in
  the object's `holds`: deleting the row would destroy them. Those of unnamed tables
  are listed on the observation too (`unnamed_inside`).

Writing (transaction.py) encodes a field's value back with `encode`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from sys import intern
from typing import Any

import ovs.db.types

from unet.managers.sdk import TAG_INSTALLATION, TAG_KEY, TAG_OWNER, BackendObject, Observation

from .schema import MANAGED_COLUMNS, NAMED_TABLES, REF_COLUMNS, Schema

Row = dict[str, Any]


@dataclass
class OvnObservation(Observation):
    manager: str = ""
    foreign_names: dict[str, set[str]] = field(default_factory=dict)  # table -> names not ours
    foreign_children: list[str] = field(default_factory=list)  # unnamed, not ours, in ours
    uuids: dict[str, tuple[str, str]] = field(default_factory=dict)  # key → (table, UUID)

    def conflicts(self, desired: Sequence[BackendObject]) -> list[str]:
        return [f"{obj.table} named '{obj.fields.get('name')}' (for {obj.owner}) already "
                "exists and is not managed by this installation"
                for obj in desired
                if obj.manager == self.manager
                and obj.fields.get("name") in self.foreign_names.get(obj.table, ())]

    def unmanaged(self) -> list[str]:
        return [f"{table} {name}" for table, names in sorted(self.foreign_names.items())
                for name in sorted(names)] + list(self.foreign_children)


# --- values ---------------------------------------------------------------------------------


def atom(value: Any) -> Any:
    return value[1] if isinstance(value, list) else value  # ["uuid", "..."] → "..."


def atoms(value: Any) -> list[Any]:
    """Elements of a set as OVSDB sends it: ["set", [...]], or a lone element (or a
    compact row's tuple)."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, list) and value and value[0] == "set":
        return [atom(v) for v in value[1]]
    return [atom(value)]


def pairs(value: Any) -> Any:
    """The (key, value) pairs of a map as OVSDB sends it, or of a compact row's dict."""
    return value.items() if isinstance(value, dict) else value[1]


def uuid_of(row: Row) -> str:
    found = row["_uuid"]
    return found if isinstance(found, str) else str(found[1])


def tag(row: Row, name: str) -> str | None:
    """One of a row's tags (external_ids), or None."""
    tags = row["external_ids"]
    if isinstance(tags, dict):
        return tags.get(name)
    return next((value for key, value in tags[1] if key == name), None)


def compact_row(obj: dict[str, Any]) -> dict[str, Any]:
    """A row of a reply as it is decoded (json's object_hook, see Rpc.transact), its values
    made plain at once: a UUID its text, a set a tuple of atoms, a map a dict whose keys
    are interned (every row repeats the same tags). At 155,000 rows, OVSDB's JSON of every
    row held at once was twice the rows made plain. Objects that are not rows (the reply,
    each select's result) are left as they are."""
    if "_uuid" not in obj:
        return obj
    return {column: _plain(value) for column, value in obj.items()}


def brief_unless_of(owners: frozenset[str], children: Sequence[str]
                    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """compact_row for a read of some owners' rows: a row of anyone else keeps only what
    tells its key, its name and the rows it holds (`children`, its table's columns)."""
    kept = ("_uuid", "name", *children)

    def hook(obj: dict[str, Any]) -> dict[str, Any]:
        row = compact_row(obj)
        tags = row.get("external_ids")
        if not isinstance(tags, dict) or tags.get(TAG_OWNER) in owners:
            return row
        brief = {column: row[column] for column in kept if column in row}
        key = tags.get(TAG_KEY)
        brief["external_ids"] = {TAG_KEY: key} if key is not None else {}
        return brief

    return hook


def _plain(value: Any) -> Any:
    """Text is interned (inline: this runs for every value of every row): every row
    repeats the same tag names, and the desired rows hold the same values
    (objects.share_strings). A UUID is a row's own: not interned."""
    kind = type(value)
    if kind is str:
        return intern(value)
    if kind is not list:
        return value
    tag, inner = value
    if tag == "set":
        return tuple(e[1] if type(e) is list else intern(e) if type(e) is str else e
                     for e in inner)
    if tag == "map":
        return {k[1] if type(k) is list else intern(k) if type(k) is str else k:
                v[1] if type(v) is list else intern(v) if type(v) is str else v
                for k, v in inner}
    return inner  # ["uuid", …] or ["named-uuid", …]


def encode(value: Any, kind: ovs.db.types.Type) -> Any:
    """A field's value as OVSDB's JSON writes it in a column of type `kind`."""
    if kind.is_map():
        return ["map", sorted([k, v] for k, v in value.items())]
    if kind.is_optional():
        return ["set", []] if value is None else value
    if kind.is_set():
        return ["set", list(value)]
    return value


def _decoder(kind: ovs.db.types.Type) -> Callable[[Any], Any]:
    """Column values as the renderers write them: None, scalar, sorted list or dict. A
    compact row's are nearly so (its map of text keys is taken as it is: dicts compare,
    and are hashed, whatever their order)."""
    if kind.is_map():
        text_keys = kind.key.type == ovs.db.types.StringType
        return lambda value: value if text_keys and isinstance(value, dict) else \
            {str(atom(k)): atom(v) for k, v in sorted(pairs(value))}
    if kind.is_optional():
        return lambda value: (value[0] if value else None) if isinstance(value, tuple) \
            else next(iter(atoms(value)), None)
    if kind.is_set():
        return lambda value: sorted(atoms(value))
    return atom


_DECODERS: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}


def _decoders(schema: Schema, table: str) -> list[tuple[str, Callable[[Any], Any]]]:
    """Per managed column, the function that decodes its values (chosen once per table)."""
    found = _DECODERS.get(table)
    if found is None:
        found = _DECODERS[table] = [(name, _decoder(schema.type_of(table, name)))
                                    for name in MANAGED_COLUMNS[table]]
    return found


# --- rows as objects ------------------------------------------------------------------------


def keys_of(ours: dict[str, list[Row]]) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """Row UUID → key, and key → (table, UUID), of the rows of each managed table. Two rows
    with one key: the first by UUID keeps the key, the others get keys nothing desires."""
    key_of: dict[str, str] = {}
    uuids: dict[str, tuple[str, str]] = {}
    for table in MANAGED_COLUMNS:
        found = sorted((key, uuid_of(row)) for row in ours[table]
                       if (key := tag(row, TAG_KEY)) is not None)  # keyless: no object of ours
        for key, uuid in found:
            if key in uuids:
                key = f"{key}#duplicate-{uuid}"
            key_of[uuid] = key
            uuids[key] = (table, uuid)
    return key_of, uuids


def to_object(schema: Schema, table: str, row: Row, key_of: dict[str, str],
              parent_of: dict[str, tuple[str, str]], manager: str,
              holds: tuple[str, ...]) -> BackendObject:
    """The object a row of ours is (`key_of`: every row of ours, for references;
    `parent_of`: child UUID → (parent key, column); `holds`: rows of others inside it).
    A compact row's tags become the object's meta, not copied: the row is spent."""
    uuid = uuid_of(row)
    fields = {name: decode(row[name]) for name, decode in _decoders(schema, table)}
    refs = {}
    for column in REF_COLUMNS.get(table, ()):
        keys = tuple(sorted(key_of.get(t, f"foreign:{t}") for t in atoms(row[column])))
        if keys:
            refs[column] = keys
    tags = row["external_ids"]
    meta = tags if isinstance(tags, dict) else dict(tags[1])
    owner = meta.pop(TAG_OWNER, "")
    meta.pop(TAG_INSTALLATION, None)
    meta.pop(TAG_KEY, None)
    return BackendObject(manager, table, key_of[uuid], owner, fields, refs,
                         parent_of.get(uuid), frozenset(), meta, holds)


def rows_inside(schema: Schema, table: str, row: Row, key_of: dict[str, str]
                ) -> list[tuple[str, str]]:
    """The rows of others this row of ours holds, as (table, UUID)."""
    return [(child_table, child) for column, child_table in schema.holding.get(table, {}).items()
            for child in atoms(row[column]) if child not in key_of]


def unnamed_inside(table: str, row: Row, inside: list[tuple[str, str]]) -> list[str]:
    """Those of `inside` (rows of others held by `row`) that people cannot find by name, in
    words; a row of others in a named table is a foreign name already."""
    return [f"{child_table} {child} in {table} {row.get('name')}"
            for child_table, child in inside if child_table not in NAMED_TABLES]


# --- rows of others, for people -------------------------------------------------------------


#: The columns that tell people which row of others this is, for tables without a name.
LABEL_COLUMNS: dict[str, tuple[str, ...]] = {
    "ACL": ("direction", "priority", "action", "match"),
    "NAT": ("type", "external_ip", "logical_ip"),
    "Logical_Router_Static_Route": ("ip_prefix", "nexthop"),
    "Logical_Router_Policy": ("priority", "action", "match"),
    "QoS": ("direction", "priority", "match"),
}


def label(table: str, uuid: str, row: Row) -> str:
    """How people know a row of others: its name, or what LABEL_COLUMNS read of it."""
    if "name" in row and not isinstance(row["name"], list):
        return f"{table} {row['name']}"
    values = {column: atom(value) for column, value in row.items()}
    if table == "NAT":
        text = f"{values['type']} {values['external_ip']} ↔ {values['logical_ip']}"
    elif table == "Logical_Router_Static_Route":
        text = f"{values['ip_prefix']} via {values['nexthop']}"
    elif "match" in values:
        parts = [str(values[c]) for c in LABEL_COLUMNS[table] if c != "match"]
        text = " ".join(parts) + f" `{values['match']}`"
    else:
        return f"{table} {uuid}"
    return f"{table} {uuid} ({text})"
