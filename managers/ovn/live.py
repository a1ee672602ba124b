"""Talking to a real OVN Northbound database: observe, apply, lock.

Only rows tagged with this installation are read as ours, and only those are
ever changed or deleted. Rows of non-root tables are added to and removed from
their parent's column; OVSDB drops them when no parent holds them, so nothing
can be orphaned. A wave of steps is one transaction (large waves are split);
every transaction's result is checked.

One connection of unet's own (`rpc.py`), to the leader of a cluster (the only
server of a standalone database): it gives the schema, plain OVSDB `transact`
requests read the installation's rows with one `select` and write each wave as
one transaction of insert/update/delete/mutate operations built from the plan,
and it holds the installation's lock, which every write asserts (`fence.py`).
When it is lost (the leader died, say), it is made again to the new leader. An
OVS IDL would convert every value of every row twice (to its own types and
back), which cost more than the server's own work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import ovs.db.schema

from managers.sdk import (
    TAG_HASH,
    TAG_INSTALLATION,
    TAG_KEY,
    TAG_OWNER,
    ApplyOutcome,
    BackendObject,
    Change,
    Observation,
    ProgressFactory,
    Step,
)

from .fence import ConcurrentWrite, Fence, Interrupted, LockTimeout, OvnError
from .render import MANAGED_COLUMNS, PARENT_COLUMNS, REF_COLUMNS
from .rpc import ConnectionLost, Rpc, Timeouts, TlsFailed
from .tls import TlsClient

__all__ = ["ConcurrentWrite", "LockTimeout", "Northbound", "OvnError", "OvnObservation"]

#: Tables whose rows people and ovn-nbctl find by name: a foreign row there blocks the name.
NAMED_TABLES = ("Logical_Switch", "Logical_Router", "Logical_Switch_Port", "Logical_Router_Port",
                "Port_Group", "Address_Set", "Gateway_Chassis")
MAX_ROWS_PER_TRANSACTION = 5000
#: Seconds a waiter for a held lock stays queued before it asks again.
_HOLD_POLL = 5.0


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


class Northbound:
    """One connection to an OVN Northbound database."""

    def __init__(self, remote: str, timeouts: Timeouts | None = None,
                 tls: TlsClient | None = None) -> None:
        """`tls`: this manager's TLS for ssl: remotes (tls.py)."""
        self.remote = remote
        self.timeouts = timeouts or Timeouts()
        self.tls = tls
        if tls is None and (remote.startswith("ssl:") or ",ssl:" in remote):
            raise OvnError("an ssl: remote needs sslKey, sslCert and sslCaCert in the ovn "
                           "config")
        self._first: Rpc | None = Rpc(remote, self.timeouts, tls)  # kept for the first fence
        schema = self._schema()
        self.db = schema  # its tables' column types decode and encode values
        self.schema = {name: table.columns for name, table in schema.tables.items()}
        self.holding = _holding_columns(schema)
        self.fences: dict[str, Fence] = {}  # per installation: its lock and writes
        # While applying: our rows, key → (table, UUID), and the keys of those inserted.
        self.uuids: dict[str, tuple[str, str]] = {}
        self.inserted: set[str] = set()

    def close(self) -> None:
        for fence in self.fences.values():
            fence.close()
        self.fences.clear()  # each holds self._connect: a cycle, were they kept
        if self._first is not None:
            self._first.close()

    def _schema(self) -> ovs.db.schema.DbSchema:
        """The server's schema, read on the first connection."""
        assert self._first is not None
        try:
            return ovs.db.schema.DbSchema.from_json(self._first.schema())
        except TlsFailed as exc:  # it names the server and what failed
            self._first.close()
            raise OvnError(str(exc)) from exc
        except ConnectionLost as exc:
            self._first.close()
            raise OvnError(f"cannot reach the OVN Northbound database at {self.remote}: "
                           f"{exc}") from exc

    def fence(self, installation: str) -> Fence:
        """The connection that reads, writes and holds the lock for `installation`."""
        if installation not in self.fences:
            self.fences[installation] = Fence(self._connect, installation)
        return self.fences[installation]

    def _connect(self) -> Rpc:
        """unet's own connection, to a cluster's leader (made when first used)."""
        rpc, self._first = self._first or Rpc(self.remote, self.timeouts, self.tls), None
        return rpc

    # -- observe ----------------------------------------------------------------------------
    def observe(self, installation: str, manager: str) -> OvnObservation:
        operations = [_select(table, installation, True, self.holding.get(table, {}))
                      for table in MANAGED_COLUMNS]
        operations += [_select(table, installation, False) for table in NAMED_TABLES]
        results = self.fence(installation).read(operations)
        ours = dict(zip(MANAGED_COLUMNS, results[:len(MANAGED_COLUMNS)], strict=True))
        names = dict(zip(NAMED_TABLES, results[len(MANAGED_COLUMNS):], strict=True))
        keys = _keys(ours)
        inside = _foreign_inside(ours, self.holding, keys[0])
        described = self._describe(installation, {child for found in inside.values()
                                                  for child in found})
        return _observe(self.db, ours, names, manager, keys, inside, described)

    def _describe(self, installation: str, children: set[tuple[str, str]]) -> dict[str, str]:
        """UUID → how people know each of these rows of others (one request for all)."""
        if not children:
            return {}
        order = sorted(children)
        operations = []
        for table, uuid in order:
            columns = [c for c in _LABELS.get(table, ("name",)) if c in self.schema[table]]
            operations.append({"op": "select", "table": table, "columns": columns,
                               "where": [["_uuid", "==", ["uuid", uuid]]]})
        out = {}
        for (table, uuid), found in zip(order, self.fence(installation).read(operations),
                                        strict=True):
            out[uuid] = _label(table, uuid, found[0] if found else {})
        return out

    # -- apply ------------------------------------------------------------------------------
    def apply(self, uuids: dict[str, tuple[str, str]], waves: Sequence[Sequence[Step]],
              changes: dict[str, Change], installation: str,
              progress: ProgressFactory) -> ApplyOutcome:
        """Each wave (split above MAX_ROWS_PER_TRANSACTION rows) as one OVSDB transaction,
        on the rows `uuids` names (as observed)."""
        self.uuids, self.inserted = dict(uuids), set()
        self._check_still_free(changes, installation)
        outcome = ApplyOutcome()
        for index, wave in enumerate(waves):
            report = progress(index + 1, len(waves), len(wave))
            done = 0
            for chunk in _chunks(list(wave), MAX_ROWS_PER_TRANSACTION):
                self._apply_chunk(chunk, changes, installation)
                for step in chunk:
                    outcome.did(step)
                done += len(chunk)
                report(done, len(wave))
        return outcome

    def _check_still_free(self, changes: dict[str, Change], installation: str) -> None:
        """Before the first write: the rows this apply deletes still hold no rows of others
        (someone may have added one since the plan was made, while it was being read).
        Each delete also asserts it in its own transaction; this stops the apply before it
        begins rather than half-way."""
        doomed = sorted({c.before.key for c in changes.values()
                         if c.before is not None and c.action.deletes
                         and c.before.key in self.uuids
                         and self.uuids[c.before.key][0] in self.holding})
        if not doomed:
            return
        operations = [{"op": "select", "table": self.uuids[key][0],
                       "where": [["_uuid", "==", ["uuid", self.uuids[key][1]]]],
                       "columns": list(self.holding[self.uuids[key][0]])} for key in doomed]
        ours = {uuid for _table, uuid in self.uuids.values()}
        fence = self.fence(installation)
        for key, found in zip(doomed, fence.read(operations), strict=True):
            table = self.uuids[key][0]
            others = {(self.holding[table][column], child) for row in found
                      for column in self.holding[table]
                      for child in _atoms(row[column]) if child not in ours}
            if others:
                described = sorted(self._describe(installation, others).values())
                raise OvnError(f"HOLDS_FOREIGN_OBJECTS: {table} {key} now holds what unet does "
                               f"not own ({', '.join(described)}), added since the plan was "
                               "made; deleting it would destroy them. Nothing was applied: "
                               "plan again")

    def _apply_chunk(self, steps: list[Step], changes: dict[str, Change],
                     installation: str) -> None:
        """One transaction; after a lost connection, again unless it did commit."""
        fence = self.fence(installation)
        while True:
            wave = _Wave(steps, changes, self.uuids, self.inserted, installation, self.db,
                         self.holding)
            if not wave.operations:
                return
            try:
                results = fence.write(wave.operations)
            except Interrupted:
                if self._recover(fence, installation):
                    self.inserted.update(obj.key for obj in wave.created)
                    return
                continue
            wave.check(results)
            wave.settle(results, self.uuids)
            self.inserted.update(obj.key for obj in wave.created)
            return

    def _recover(self, fence: Fence, installation: str) -> bool:
        """After an interrupted write: the lock again and our rows read back (the UUIDs of
        rows it inserted, if it committed); whether it committed. Raises ConcurrentWrite when
        another run wrote meanwhile."""
        committed = False
        while True:
            committed = fence.regain() or committed
            try:
                self.uuids = self._our_uuids(installation)
                return committed
            except OvnError:
                continue  # lost again while reading: take the lock again first

    def _our_uuids(self, installation: str) -> dict[str, tuple[str, str]]:
        """Key → (table, UUID) of the installation's rows."""
        operations = [{**_select(table, installation, True), "columns": ["_uuid", "external_ids"]}
                      for table in MANAGED_COLUMNS]
        results = self.fence(installation).read(operations)
        _key_of, uuids = _keys(dict(zip(MANAGED_COLUMNS, results, strict=True)))
        return uuids

    # -- lock -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, installation: str, timeout: float,
             waiting: Callable[[str], None] = lambda _text: None) -> Iterator[None]:
        """Hold the OVSDB named lock `unet_<installation>` for the duration."""
        fence = self.fence(installation)
        fence.acquire(timeout, waiting)
        try:
            yield
        finally:
            fence.release()

    @contextlib.contextmanager
    def hold(self, name: str) -> Iterator[Callable[[], bool]]:
        """Hold the OVSDB lock `name` on a connection of its own until the context ends,
        waiting as long as it takes; the server hands it to the next waiter when this
        connection ends (the process died, the network failed)."""
        rpc = self._connect()
        try:
            while not rpc.lock(name, _HOLD_POLL):
                pass  # still queued behind the holder: ask again
            yield lambda: name in rpc.locks
        finally:
            rpc.close()

    def global_tag(self, installation: str, tag: str) -> str | None:
        """A tag unet keeps in NB_Global.external_ids."""
        return self.fence(installation).tags()[1].get(tag) or None

    def set_global_tag(self, installation: str, tag: str, value: str) -> None:
        """Set a tag in NB_Global.external_ids, as one of this run's writes."""
        fence = self.fence(installation)
        while True:
            try:
                fence.write([{"op": "mutate", "table": "NB_Global",
                              "where": [["_uuid", "==", ["uuid", fence.row]]],
                              "mutations": [["external_ids", "delete", ["set", [tag]]],
                                            ["external_ids", "insert",
                                             ["map", [[tag, value]]]]]}])
                return
            except Interrupted:
                if fence.regain():
                    return


def _chunks(items: list[Step], size: int) -> Iterator[list[Step]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# --- observe --------------------------------------------------------------------------------


# Columns read and written per table: the managed ones, the tags, parents' and references.
_COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(dict.fromkeys((*columns, "external_ids", *PARENT_COLUMNS.get(table, ()),
                                *REF_COLUMNS.get(table, ()))))
    for table, columns in MANAGED_COLUMNS.items()
}


def _select(table: str, installation: str, ours: bool,
            holding: dict[str, str] | None = None) -> dict[str, Any]:
    """Our rows with the columns unet uses (and those holding rows inside them), or the
    names of everyone else's rows."""
    tag = ["external_ids", "includes" if ours else "excludes",
           ["map", [[TAG_INSTALLATION, installation]]]]
    columns = list(dict.fromkeys(["_uuid", *_COLUMNS[table], *(holding or {})])) if ours \
        else ["_uuid", "name"]
    return {"op": "select", "table": table, "where": [tag], "columns": columns}


def _holding_columns(schema: Any) -> dict[str, dict[str, str]]:
    """Per table of ours, the columns whose rows live only inside the row (strong references
    to non-root tables), with the table they hold: what is there goes with the row."""
    out: dict[str, dict[str, str]] = {}
    for table in MANAGED_COLUMNS:
        for name, column in schema.tables[table].columns.items():
            child = column.type.key.ref_table_name
            if child and column.type.key.ref_type == "strong" \
                    and not schema.tables[child].is_root:
                out.setdefault(table, {})[name] = child
    return out


def _foreign_inside(ours: dict[str, list[dict[str, Any]]], holding: dict[str, dict[str, str]],
                    key_of: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """UUID of each of our rows → the rows of others it holds, as (table, UUID)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for table, columns in holding.items():
        for row in ours[table]:
            for column, child_table in columns.items():
                for child in _atoms(row[column]):
                    if child not in key_of:
                        out.setdefault(row["_uuid"][1], []).append((child_table, child))
    return out


def _observe(db: Any, ours: dict[str, list[dict[str, Any]]],
             names: dict[str, list[dict[str, Any]]], manager: str,
             keys: tuple[dict[str, str], dict[str, tuple[str, str]]],
             inside: dict[str, list[tuple[str, str]]], described: dict[str, str]) -> OvnObservation:
    """Backend objects from the rows of a `select` (OVSDB's JSON, decoded here)."""
    key_of, uuids = keys
    parent_of: dict[str, tuple[str, str]] = {}
    for table, columns in PARENT_COLUMNS.items():
        for row in ours[table]:
            for column in columns:
                for child in _atoms(row[column]):
                    parent_of[child] = (key_of[row["_uuid"][1]], column)
    children = sorted(f"{child_table} {child} in {table} {row.get('name')}"
                      for table in PARENT_COLUMNS for row in ours[table]
                      for child_table, child in inside.get(row["_uuid"][1], ())
                      if child_table not in NAMED_TABLES)
    objects = [_object(db, table, row, key_of, parent_of, manager,
                       tuple(sorted(described[c] for _t, c in inside.get(row["_uuid"][1], ()))))
               for table in sorted(ours) for row in ours[table] if row["_uuid"][1] in key_of]
    foreign = {table: {row["name"] for row in rows} for table, rows in names.items() if rows}
    return OvnObservation(objects, None, manager, foreign, children, uuids)


#: The columns that tell people which row of others this is, for tables without a name.
_LABELS: dict[str, tuple[str, ...]] = {
    "ACL": ("direction", "priority", "action", "match"),
    "NAT": ("type", "external_ip", "logical_ip"),
    "Logical_Router_Static_Route": ("ip_prefix", "nexthop"),
    "Logical_Router_Policy": ("priority", "action", "match"),
    "QoS": ("direction", "priority", "match"),
}


def _label(table: str, uuid: str, row: dict[str, Any]) -> str:
    if "name" in row and not isinstance(row["name"], list):
        return f"{table} {row['name']}"
    values = {column: _atom(value) for column, value in row.items()}
    if table == "NAT":
        text = f"{values['type']} {values['external_ip']} ↔ {values['logical_ip']}"
    elif table == "Logical_Router_Static_Route":
        text = f"{values['ip_prefix']} via {values['nexthop']}"
    elif "match" in values:
        parts = [str(values[c]) for c in _LABELS[table] if c != "match"]
        text = " ".join(parts) + f" `{values['match']}`"
    else:
        return f"{table} {uuid}"
    return f"{table} {uuid} ({text})"


def _keys(ours: dict[str, list[dict[str, Any]]]
          ) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """Row UUID → key, and key → (table, UUID). Two rows with one key (copied by hand,
    say) would stop every plan: the first by UUID keeps the key, the others get keys
    nothing desires, so they go."""
    key_of: dict[str, str] = {}
    uuids: dict[str, tuple[str, str]] = {}
    for table in MANAGED_COLUMNS:
        found = sorted((_tag(row, TAG_KEY), row["_uuid"][1]) for row in ours[table])
        for key, uuid in found:
            if key is None:
                continue
            if key in uuids:
                key = f"{key}#duplicate-{uuid}"
            key_of[uuid] = key
            uuids[key] = (table, uuid)
    return key_of, uuids


def _object(db: Any, table: str, row: dict[str, Any], key_of: dict[str, str],
            parent_of: dict[str, tuple[str, str]], manager: str,
            holds: tuple[str, ...]) -> BackendObject:
    uuid = row["_uuid"][1]
    fields = {name: decode(row[name]) for name, decode in _decoders(db, table)}
    refs = {}
    for column in REF_COLUMNS.get(table, ()):
        keys = tuple(sorted(key_of.get(t, f"foreign:{t}") for t in _atoms(row[column])))
        if keys:
            refs[column] = keys
    meta = dict(row["external_ids"][1])
    owner = meta.pop(TAG_OWNER, "")
    meta.pop(TAG_INSTALLATION, None)
    meta.pop(TAG_KEY, None)
    return BackendObject(manager, table, key_of[uuid], owner, fields, refs,
                         parent_of.get(uuid), frozenset(), meta, holds)


_DECODERS: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}


def _decoders(db: Any, table: str) -> list[tuple[str, Callable[[Any], Any]]]:
    """Per managed column, the function that decodes its values (chosen once per table)."""
    found = _DECODERS.get(table)
    if found is None:
        schema = db.tables[table].columns
        found = _DECODERS[table] = [(name, _decoder(schema[name].type))
                                    for name in MANAGED_COLUMNS[table]]
    return found


def _tag(row: dict[str, Any], name: str) -> str | None:
    return next((value for key, value in row["external_ids"][1] if key == name), None)


def _atom(value: Any) -> Any:
    return value[1] if isinstance(value, list) else value  # ["uuid", "..."] → "..."


def _atoms(value: Any) -> list[Any]:
    """Elements of a set as OVSDB sends it: ["set", [...]], or a lone element."""
    if isinstance(value, list) and value and value[0] == "set":
        return [_atom(v) for v in value[1]]
    return [_atom(value)]


def _decoder(kind: Any) -> Callable[[Any], Any]:
    """Column values as the renderers write them: None, scalar, sorted list or dict."""
    if kind.is_map():
        return lambda value: {str(_atom(k)): _atom(v) for k, v in sorted(value[1])}
    if kind.is_optional():
        return lambda value: next(iter(_atoms(value)), None)
    if kind.is_set():
        return lambda value: sorted(_atoms(value))
    return _atom


# --- apply ----------------------------------------------------------------------------------


class _Wave:
    """The OVSDB operations of one transaction's steps.

    Rows inserted here get names; references to them use the names, references to
    existing rows their UUIDs. A row joins (or leaves) its parent's column in the same
    transaction, and rows the transaction needs are asserted to exist (`wait`), so a
    row deleted meanwhile fails the whole transaction instead of orphaning a child.
    """

    def __init__(self, steps: list[Step], changes: dict[str, Change],
                 uuids: dict[str, tuple[str, str]], inserted: set[str], installation: str,
                 db: Any, holding: dict[str, dict[str, str]]) -> None:
        self.uuids = uuids
        self.holding = holding
        self.inserted = inserted  # rows inserted by earlier transactions of this apply
        self.installation = installation
        self.tables = db.tables
        self.names: dict[str, str] = {}  # key → uuid-name of the rows inserted here
        self.new_tables: dict[str, str] = {}  # key → table of the rows inserted here
        self.deleted: list[str] = []
        self.created: list[BackendObject] = []
        self.operations: list[dict[str, Any]] = []
        self.asserted: set[str] = set()
        # (parent table, parent reference, column, "insert"|"delete") → children: one
        # mutation per parent, not one per child (a region's switch holds thousands)
        self.mutations: dict[tuple[str, str, str, str, str], list[list[str]]] = {}
        objects = [(step.action, changes[step.uid]) for step in steps]
        for action, change in objects:
            if action == "delete":
                self._delete(change.before)
            elif action == "create":
                assert change.after is not None
                if change.after.key in uuids:  # there already: treat as an update
                    self._update(None, change.after)
                else:
                    self.names[change.after.key] = f"row{len(self.names)}"
                    self.new_tables[change.after.key] = change.after.table
        for action, change in objects:
            if action == "create" and change.after is not None \
                    and change.after.key in self.names:
                self._insert(change.after)
            elif action == "update":
                self._update(change.before, change.after)
        for (table, kind, ref, column, mutator), children in self.mutations.items():
            self.operations.append({"op": "mutate", "table": table,
                                    "where": [["_uuid", "==", [kind, ref]]],
                                    "mutations": [[column, mutator, ["set", children]]]})

    def _mutate(self, table: str, parent: list[str], column: str, mutator: str,
                child: list[str]) -> None:
        self.mutations.setdefault((table, parent[0], parent[1], column, mutator),
                                  []).append(child)

    def _ref(self, key: str) -> list[str] | None:
        if key in self.names:
            return ["named-uuid", self.names[key]]
        found = self.uuids.get(key)
        return ["uuid", found[1]] if found is not None else None

    def _exists(self, key: str) -> list[str]:
        """A reference to an existing row, asserted to still be there; or a new row's name."""
        ref = self._ref(key)
        if ref is None:
            raise OvnError(f"{key} does not exist")
        if ref[0] == "uuid" and key not in self.asserted:
            self.asserted.add(key)
            table = self.uuids[key][0]
            self.operations.append({"op": "wait", "timeout": 0, "table": table,
                                    "where": [["_uuid", "==", ref]], "columns": ["_uuid"],
                                    "until": "==", "rows": [{"_uuid": ref}]})
        return ref

    def _delete(self, obj: BackendObject | None) -> None:
        assert obj is not None
        found = self.uuids.get(obj.key)
        if found is None:
            return  # already gone (a parent took it along): nothing to do
        ref = ["uuid", found[1]]
        if obj.parent is not None and obj.parent[0] in self.uuids:
            table, uuid = self.uuids[obj.parent[0]]
            self._mutate(table, ["uuid", uuid], obj.parent[1], "delete", ref)
        columns = self.holding.get(found[0])
        if columns:  # our rows inside it went in earlier waves: anything left is someone's
            self.operations.append({"op": "wait", "timeout": 0, "table": found[0],
                                    "where": [["_uuid", "==", ref]], "columns": list(columns),
                                    "until": "==",
                                    "rows": [{column: ["set", []] for column in columns}]})
        self.operations.append({"op": "delete", "table": found[0],
                                "where": [["_uuid", "==", ref]]})
        self.deleted.append(obj.key)

    def _insert(self, obj: BackendObject) -> None:
        self.created.append(obj)
        self.operations.append({"op": "insert", "table": obj.table, "uuid-name":
                                self.names[obj.key], "row": self._row(obj, None)})
        if obj.parent is not None:
            try:
                parent = self._exists(obj.parent[0])
            except OvnError as exc:
                raise OvnError(f"{obj.key}: its parent {obj.parent[0]} does not exist") from exc
            table = self.uuids[obj.parent[0]][0] if parent[0] == "uuid" else \
                self.new_tables[obj.parent[0]]
            self._mutate(table, parent, obj.parent[1], "insert",
                         ["named-uuid", self.names[obj.key]])

    def _update(self, before: BackendObject | None, after: BackendObject | None) -> None:
        assert after is not None
        try:
            ref = self._exists(after.key)
        except OvnError as exc:
            raise OvnError(f"{after.key} disappeared during the apply") from exc
        self.operations.append({"op": "update", "table": self.uuids[after.key][0],
                                "where": [["_uuid", "==", ref]],
                                "row": self._row(after, before)})

    def _row(self, obj: BackendObject, before: BackendObject | None) -> dict[str, Any]:
        columns = self.tables[obj.table].columns
        row = {name: _value(value, columns[name].type) for name, value in obj.fields.items()
               if before is None or before.fields.get(name) != value}
        for column in REF_COLUMNS.get(obj.table, ()):
            wanted = obj.refs.get(column, ())
            # The same keys may name new rows: a referenced row replaced in this apply is
            # a new row, and OVSDB dropped the (weak) reference to the old one.
            if before is not None and before.refs.get(column, ()) == wanted and not any(
                    key in self.inserted or key in self.names for key in wanted):
                continue
            targets = [ref for ref in map(self._ref, wanted) if ref is not None]
            if columns[column].type.is_optional():
                targets = targets[:1]
            row[column] = ["set", targets]
        tags = {**obj.meta, TAG_INSTALLATION: self.installation, TAG_OWNER: obj.owner,
                TAG_KEY: obj.key, TAG_HASH: obj.content_hash}
        row["external_ids"] = ["map", sorted([k, v] for k, v in tags.items())]
        return row

    def check(self, results: list[Any]) -> None:
        errors = [r for r in results if isinstance(r, dict) and r.get("error")]
        if not errors:
            return
        first = errors[0]
        if first["error"] == "timed out":  # a `wait`: a row we need is not as observed
            raise OvnError("a row this transaction builds on changed meanwhile (deleted, or "
                           "given rows of others that deleting it would destroy); nothing of "
                           "the transaction was written: plan again")
        details = f" ({first['details']})" if first.get("details") else ""
        raise OvnError(f"the Northbound database refused the transaction: "
                       f"{first['error']}{details}")

    def settle(self, results: list[Any], uuids: dict[str, tuple[str, str]]) -> None:
        """Remember the real UUIDs of the inserted rows, forget the deleted ones."""
        inserted = [r["uuid"][1] for r, op in zip(results, self.operations, strict=False)
                    if op["op"] == "insert"]
        for obj, uuid in zip(self.created, inserted, strict=True):
            uuids[obj.key] = (obj.table, uuid)
        for key in self.deleted:
            uuids.pop(key, None)


def _value(value: Any, kind: Any) -> Any:
    """A column value as OVSDB's JSON writes it."""
    if kind.is_map():
        return ["map", sorted([k, v] for k, v in value.items())]
    if kind.is_optional():
        return ["set", []] if value is None else value
    if kind.is_set():
        return ["set", list(value)]
    return value
