"""A replica of the installation's Northbound rows, kept by OVSDB monitors: what the
reconcile daemon plans against instead of reading every row on every run.

A connection of its own (`rpc.py`, to a cluster's leader) holds two conditional
monitors: one of the installation's rows (every column unet reads, tag
`unet:installation` included in the condition, so the server sends nothing of other
rows), one of the names of everyone else's rows in the named tables and of
NB_Global's tags. A thread applies each update as it arrives and notes the owners
(`unet:owner`) of the rows it touched, before and after; the daemon plans for those
owners only.

After a lost connection the monitors are made again with `monitor_cond_since` and the
last transaction id seen: a clustered server that still has the history sends only
what changed since, and only those owners are planned; otherwise (a standalone
server, a restarted one, a database restored from a backup) it sends every row, the
replica is replaced, and the next plan is a full one.

Reading the replica is safe under the run's lock because ovsdb-server sends a
connection's pending monitor updates before any reply on that connection: once an
echo sent after the lock was taken is answered, every change committed before is in
the replica (`sync`).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from unet.managers.sdk import (
    TAG_ALLOCATION,
    TAG_INSTALLATION,
    TAG_KEY,
    TAG_OWNER,
    BackendObject,
    Held,
    Watch,
)

from .codec import (
    OvnObservation,
    Row,
    atoms,
    compact_row,
    keys_of,
    rows_inside,
    tag,
    to_object,
    unnamed_inside,
)
from .fence import OvnError
from .northbound import Northbound
from .rpc import ConnectionLost, Rpc
from .schema import MANAGED_COLUMNS, NAMED_TABLES, PARENT_COLUMNS

OURS, OTHERS = "unet-ours", "unet-others"
_ZERO_TXN = "00000000-0000-0000-0000-000000000000"
#: Seconds the thread holds the connection per look: a `sync` waits at most this long.
_SLICE = 0.02
#: Seconds between attempts to connect again after the connection was lost.
_RETRY = 1.0


class OvnWatch(Watch):
    """The replica, and the thread that keeps it."""

    def __init__(self, nb: Northbound, installation: str, manager: str, applied_tag: str
                 ) -> None:
        super().__init__()
        self.nb = nb
        self.installation = installation
        self.manager = manager
        self.applied_tag = applied_tag
        # Each row as its JSON text, decoded when read: as decoded objects the replica
        # was the daemon's largest part (565 MiB at 1,000 tenants).
        self.rows: dict[str, dict[str, str]] = {table: {} for table in MANAGED_COLUMNS}
        self.others: dict[str, dict[str, str]] = {table: {} for table in NAMED_TABLES}
        self.global_ids: dict[str, str] = {}
        self.last_txn = _ZERO_TXN
        self.loaded = threading.Event()  # the first full state arrived
        self.failure: str | None = None  # why the connection is down, while it is
        self.reconnects = 0
        self._lock = threading.RLock()  # the replica: the thread writes, runs read
        self._index = _Index()
        self._held: dict[str, Held] | None = None  # the last held()
        self._owners: set[str] = set()
        self._everything = True  # the next plan must be a full one
        self._columns = {table: list(nb.schema.columns_read(table)) for table in MANAGED_COLUMNS}
        self._defaults = {table: {c: _default(nb.schema.type_of(table, c)) for c in columns}
                          for table, columns in self._columns.items()}
        self._rpc: Rpc | None = None
        # A quiet connection is probed well before it would count as dead: over a unix
        # socket the server sends no inactivity probes of its own.
        self._probe = min(5.0, nb.timeouts.transaction / 3)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True,
                                        name=f"unet-watch {manager}")

    # -- the contract -----------------------------------------------------------------------
    def start(self, timeout: float) -> None:
        """Connect and load every row (waiting up to `timeout` seconds for the first state);
        raises OvnError at once when the server cannot be reached."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.loaded.wait(0.1):
            if self.failure is not None or time.monotonic() > deadline:
                raise OvnError(self.failure or f"watching {self.nb.remote}: no initial state "
                                               f"within {timeout:g} s")

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        if self._rpc is not None:
            self._rpc.close()

    def take_changes(self) -> frozenset[str] | None:
        with self._lock:
            owners = None if self._everything else frozenset(self._owners)
            self._owners, self._everything = set(), False
            return owners

    def held(self) -> dict[str, Held]:
        with self._lock:
            index = self._index
            if index.stale:
                index.rebuild(self.rows)
            held = index.held()
            if self._held is not None and held is not self._held and held == self._held:
                held = self._held  # the same object while the same: see Watch.held
            self._held = held
            return held

    def sync(self) -> None:
        """Every change committed before this call is in the replica (see the module's
        docstring); raises OvnError when the connection is down."""
        rpc = self._rpc
        if rpc is None or self.failure is not None:
            raise OvnError(f"{self.failure or 'the watch is not connected'}; the next run "
                           "reads the database itself")
        try:
            rpc.echo()
        except ConnectionLost as exc:
            raise OvnError(f"watching {self.nb.remote}: {exc}; the next run reads the "
                           "database itself") from exc

    def observe(self, owners: Iterable[str] | None = None) -> OvnObservation:
        """The installation's objects as the replica holds them after `sync` (only those of
        `owners`, when given: the references and parents of the others still count)."""
        self.sync()
        with self._lock:
            index = self._index
            if index.stale:
                index.rebuild(self.rows)
            wanted = [(table, uuid) for table, rows in self.rows.items() for uuid in rows] \
                if owners is None else sorted({place for owner in owners
                                               for place in index.owned.get(owner, ())})
            parent_of = index.parents([uuid for _table, uuid in wanted])
            objects, inside, children = [], {}, []
            for table, uuid in wanted:  # one row decoded at a time: never all of them
                row = _plain_row(self.rows[table][uuid])
                found = rows_inside(self.nb.schema, table, row, index.key_of)
                if found:
                    inside[uuid] = found
                    if table in PARENT_COLUMNS:
                        children += unnamed_inside(table, row, found)
                if uuid in index.key_of:
                    objects.append(to_object(self.nb.schema, table, row, index.key_of,
                                             parent_of, self.manager, ()))
            names = {table: set(found.values()) for table, found in self.others.items()
                     if found}
            uuids = dict(index.uuids)
            applied = self.global_ids.get(self.applied_tag)
        if inside:  # rows of others inside ours: described for people, with one request
            described = self.nb.describe(self.installation,
                                         {child for found in inside.values() for child in found})
            objects = [_with_holds(obj, inside.get(uuids[obj.key][1], ()), described)
                       for obj in objects]
        return OvnObservation(objects, applied or None, self.manager, names, sorted(children),
                              uuids)

    # -- the thread -------------------------------------------------------------------------
    def _keep(self) -> None:
        while not self._closed.is_set():
            try:
                self._connect()
                self.failure = None
                while not self._closed.is_set():
                    rpc = self._rpc
                    assert rpc is not None
                    if not rpc.listen(_SLICE, quiet=self._probe):
                        time.sleep(0.01)  # let `sync` have the connection
            except Exception as exc:  # the server is away: keep trying, report meanwhile
                self.failure = f"watching {self.nb.remote}: {exc}"
                if self._rpc is not None:
                    self._rpc.close()
                    self._rpc = None
                self._closed.wait(_RETRY)

    def _connect(self) -> None:
        rpc = Rpc(self.nb.remote, self.nb.timeouts, self.nb.tls)
        rpc.on_update = self._notified
        rpc.rows = _columns_as_text
        found, last, updates = rpc.monitor_cond_since(OURS, self._ours_requests(), self.last_txn)
        others = rpc.monitor_cond(OTHERS, self._others_requests())
        with self._lock:
            if not found:
                self.rows = {table: {} for table in MANAGED_COLUMNS}
                self._index = _Index()
                self._everything = True
            again = self.loaded.is_set()
            self.others = {table: {} for table in NAMED_TABLES}
            self.global_ids = {}
            self._apply_ours(updates)
            self._apply_others(others)
            self.last_txn = last
        self._rpc = rpc
        self.loaded.set()
        if again:  # what changed while it was away is only known now: a run, at once
            self.reconnects += 1
            self.wake.set()

    def _ours_requests(self) -> dict[str, Any]:
        ours = ["external_ids", "includes", ["map", [[TAG_INSTALLATION, self.installation]]]]
        return {table: [{"columns": columns, "where": [ours]}]
                for table, columns in self._columns.items()}

    def _others_requests(self) -> dict[str, Any]:
        others = ["external_ids", "excludes", ["map", [[TAG_INSTALLATION, self.installation]]]]
        out: dict[str, Any] = {table: [{"columns": ["name"], "where": [others]}]
                               for table in NAMED_TABLES}
        out["NB_Global"] = [{"columns": ["external_ids"]}]
        return out

    def _notified(self, method: str, params: list[Any]) -> None:
        with self._lock:
            if method == "update3" and params and params[0] == OURS:
                self._apply_ours(params[2])
                self.last_txn = params[1]
            elif method == "update2" and params and params[0] == OTHERS:
                self._apply_others(params[1])
                return  # others' names and unet's own marks: nothing to plan
            else:
                return
        self.wake.set()

    # -- applying updates -------------------------------------------------------------------
    def _apply_ours(self, updates: dict[str, Any]) -> None:
        """Take `updates` into the replica, each row let go of once taken (an initial state
        is every row: its text and the row's new text are not held at once)."""
        for table, rows in updates.items():
            held = self.rows[table]
            for uuid in list(rows):
                update = rows.pop(uuid)
                text = held.get(uuid)
                before = _decoded(text) if text is not None else None
                after = self._updated(table, uuid, before, update)
                if after is None:
                    held.pop(uuid, None)
                else:
                    held[uuid] = _encoded(after)
                self._index.update(table, uuid, before, after)
                for row in (before, after):
                    if row is not None:
                        self._owners.add(tag(row, TAG_OWNER) or "")

    def _updated(self, table: str, uuid: str, before: Row | None, update: dict[str, Any]
                 ) -> Row | None:
        if "delete" in update:
            return None
        new = _new_row(update)
        if new is not None:
            return {**self._defaults[table], **new, "_uuid": ["uuid", uuid]}
        if before is None:  # a change to a row never seen: only a full plan can tell
            self._everything = True
            return None
        row = dict(before)
        for column, diff in update.get("modify", {}).items():
            row[column] = _patched(row[column], diff, self.nb.schema.type_of(table, column))
        return row

    def _apply_others(self, updates: dict[str, Any]) -> None:
        for table, rows in updates.items():
            for uuid, update in rows.items():
                if table == "NB_Global":
                    if "delete" in update:
                        self.global_ids = {}
                        continue
                    new = _new_row(update)
                    if new is not None:
                        self.global_ids = dict(new.get("external_ids", ["map", []])[1])
                    elif "external_ids" in update.get("modify", {}):
                        self.global_ids = _patched_map(self.global_ids,
                                                       update["modify"]["external_ids"])
                    continue
                if "delete" in update:
                    self.others[table].pop(uuid, None)
                    continue
                new = _new_row(update) or update.get("modify")
                if new is not None and isinstance(new.get("name"), str):
                    self.others[table][uuid] = new["name"]


class _Index:
    """What observing needs across rows, kept as rows change rather than found again by
    reading every row: keys, the rows of each owner, and each child's parent."""

    def __init__(self) -> None:
        self.key_of: dict[str, str] = {}  # row UUID → key
        self.uuids: dict[str, tuple[str, str]] = {}  # key → (table, UUID)
        self.owned: dict[str, set[tuple[str, str]]] = {}  # owner → (table, UUID) of its rows
        self.parent_of: dict[str, tuple[str, str]] = {}  # child UUID → (parent UUID, column)
        self.owner_of: dict[str, str] = {}  # row UUID → owner
        self.allocations: dict[str, list[tuple[str, str]]] = {}  # row UUID → its alloc tags
        self.stale = False  # two rows claimed one key: `rebuild` settles who keeps it
        # What `held()` gave last, found again only for the rows changed since (`dirty`;
        # None: every row): what each row records there (its scope, its tags), and how many
        # rows record each key.
        self._held: dict[str, Held] | None = None
        self._dirty: set[str] | None = None
        self._recorded: dict[str, tuple[str | None, list[tuple[str, str]]]] = {}
        self._recorders: dict[str, int] = {}

    def update(self, table: str, uuid: str, before: Row | None, after: Row | None) -> None:
        old_owner = tag(before, TAG_OWNER) if before is not None else None
        new_owner = tag(after, TAG_OWNER) if after is not None else None
        if before is not None and old_owner is not None:
            self.owned.get(old_owner, set()).discard((table, uuid))
        if after is not None and new_owner is not None:
            self.owned.setdefault(new_owner, set()).add((table, uuid))
        found = [(key[len(TAG_ALLOCATION):], value) for key, value in after["external_ids"][1]
                 if key.startswith(TAG_ALLOCATION)] if after is not None else []
        self._changed(table, uuid, before, after, old_owner != new_owner)
        self.owner_of.pop(uuid, None)
        self.allocations.pop(uuid, None)
        if after is not None:
            self.owner_of[uuid] = new_owner or ""
            if found:
                self.allocations[uuid] = found
        old_key = tag(before, TAG_KEY) if before is not None else None
        new_key = tag(after, TAG_KEY) if after is not None else None
        if old_key != new_key or after is None:
            key = self.key_of.pop(uuid, None)
            if key is not None and self.uuids.get(key) == (table, uuid):
                del self.uuids[key]
            self.stale = self.stale or (key is not None and "#duplicate-" in key)
            if new_key is not None:
                if new_key in self.uuids:
                    self.stale = True
                else:
                    self.key_of[uuid], self.uuids[new_key] = new_key, (table, uuid)
        for column in PARENT_COLUMNS.get(table, ()):
            gone = set(atoms(before[column])) if before is not None else set()
            new = set(atoms(after[column])) if after is not None else set()
            for child in gone - new:
                if self.parent_of.get(child, ("",))[0] == uuid:
                    del self.parent_of[child]
            for child in new - gone:
                self.parent_of[child] = (uuid, column)

    def _changed(self, table: str, uuid: str, before: Row | None, after: Row | None,
                 owner: bool) -> None:
        """The rows whose recorded allocations `held()` must read again: this one, and the
        children it gains or loses, or all of them when its owner (their scope) or its key
        changes or it comes or goes."""
        if self._dirty is None:
            return
        self._dirty.add(uuid)
        whole = owner or before is None or after is None \
            or tag(before, TAG_KEY) != tag(after, TAG_KEY)
        for column in PARENT_COLUMNS.get(table, ()):
            gone = set(atoms(before[column])) if before is not None else set()
            new = set(atoms(after[column])) if after is not None else set()
            self._dirty |= (gone | new) if whole else (gone ^ new)

    def rebuild(self, rows: dict[str, dict[str, str]]) -> None:
        """Keys as a read of every row gives them (codec.keys_of: the first by UUID keeps a
        key two rows claim)."""
        self.key_of, self.uuids = keys_of({table: [_decoded(text) for text in found.values()]
                                         for table, found in rows.items()})
        self.stale = False
        self._dirty = None

    def held(self) -> dict[str, Held]:
        """As reconciler.objects.observed_allocations finds them: a value's scope is the
        owner of the row's parent (unknown when rows of two scopes record it). The same
        object while it stays the same; after a change, found again from the rows changed,
        unless one of their keys is recorded by other rows too."""
        if self._held is None or self._dirty is None:
            return self._held_anew()
        dirty, self._dirty = self._dirty, set()
        changed: dict[str, Held | None] = {}
        for uuid in dirty:
            old = self._recorded.pop(uuid, None)
            new = self._recording(uuid)
            if new is not None:
                self._recorded[uuid] = new
            if old == new:
                continue
            for key, _value in old[1] if old is not None else ():
                self._recorders[key] -= 1
                if not self._recorders[key]:
                    del self._recorders[key]
                changed.setdefault(key, None)
            if new is not None:
                scope, found = new
                for key, value in found:
                    self._recorders[key] = self._recorders.get(key, 0) + 1
                    changed[key] = Held(value, scope)
        if any(self._recorders.get(key, 0) != (held is not None)
               for key, held in changed.items()):
            return self._held_anew()  # a key of several rows: their order decides
        last = self._held
        if all(last.get(key) == held for key, held in changed.items()):
            return last
        out = dict(last)
        for key, held in changed.items():
            if held is None:
                out.pop(key, None)
            else:
                out[key] = held
        self._held = out
        return out

    def _recording(self, uuid: str) -> tuple[str | None, list[tuple[str, str]]] | None:
        """The scope and the allocations a row records, as `held()` reads them."""
        found = self.allocations.get(uuid)
        if found is None or uuid not in self.key_of:
            return None  # a row observing would not give (no key)
        parent = self.parent_of.get(uuid)
        scope = self.owner_of.get(parent[0]) if parent is not None \
            and parent[0] in self.key_of else None
        return scope, found

    def _held_anew(self) -> dict[str, Held]:
        out: dict[str, Held] = {}
        self._recorded, self._recorders, self._dirty = {}, {}, set()
        for uuid in self.allocations:
            recorded = self._recording(uuid)
            if recorded is None:
                continue
            self._recorded[uuid] = recorded
            scope, found = recorded
            for key, value in found:
                seen = out.get(key)
                out[key] = Held(value, scope if seen is None or seen.scope == scope else None)
                self._recorders[key] = self._recorders.get(key, 0) + 1
        self._held = out
        return out

    def parents(self, uuids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """Child UUID → (parent key, column), for these rows."""
        out = {}
        for uuid in uuids:
            found = self.parent_of.get(uuid)
            if found is not None and found[0] in self.key_of:
                out[uuid] = (self.key_of[found[0]], found[1])
        return out


def _with_holds(obj: BackendObject, inside: Iterable[tuple[str, str]],
                described: dict[str, str]) -> BackendObject:
    holds = tuple(sorted(described[child] for _table, child in inside))
    return dataclasses.replace(obj, holds=holds) if holds else obj


def _default(kind: Any) -> Any:
    """A column's default value, as OVSDB's JSON writes it (update2 leaves defaults out)."""
    if kind.is_map():
        return ["map", []]
    if kind.is_set() or kind.is_optional():
        return ["set", []]
    return _SCALAR_DEFAULTS.get(kind.key.type.to_string(), ["uuid", _ZERO_TXN])


_SCALAR_DEFAULTS: dict[str, Any] = {"integer": 0, "real": 0.0, "boolean": False, "string": ""}


def _encoded(row: Row) -> str:
    return json.dumps(row, separators=(",", ":"))


def _decoded(text: str) -> Row:
    return json.loads(text)  # type: ignore[no-any-return]


#: A replica's row made plain for an object (codec.compact_row): its strings interned, so
#: that the observed objects share them with the desired ones, as a read's do.
_plain_row: Callable[[str], Row] = json.JSONDecoder(object_hook=compact_row).decode


def _new_row(update: dict[str, Any]) -> Row | None:
    """The columns of an update2 `initial` or `insert` (those left out hold their default),
    kept as their text until now (`_columns_as_text`) or not."""
    found = update["initial"] if "initial" in update else update.get("insert")
    return _decoded(found) if isinstance(found, str) else found


def _columns_as_text(obj: dict[str, Any]) -> dict[str, Any]:
    """json's object_hook for the watch's messages: the columns of a row's `initial` or
    `insert` kept as their JSON text until the replica takes the row. A whole initial
    state decoded at once held five times its text: 690 MB at the daemon's start at
    1,000 tenants, beside the revision's validation."""
    if len(obj) == 1:
        for key in ("initial", "insert"):
            columns = obj.get(key)
            if isinstance(columns, dict):
                return {key: _encoded(columns)}
    return obj


def _patched(value: Any, diff: Any, kind: Any) -> Any:
    """A column's value after an update2 `modify`: scalars are replaced, a set's diff is the
    elements added or removed, a map's the keys added, removed or given a new value."""
    if kind.is_map():
        pairs = _patched_map({_hashable(k): v for k, v in _pairs(value)}, diff)
        return ["map", [[list(k) if isinstance(k, tuple) else k, v] for k, v in pairs.items()]]
    if kind.is_set() or kind.is_optional():
        elements = _elements(value)
        for element in _elements(diff):
            if element in elements:
                elements.remove(element)
            else:
                elements.append(element)
        return elements[0] if len(elements) == 1 else ["set", elements]
    return diff


def _patched_map(current: dict[Any, Any], diff: Any) -> dict[Any, Any]:
    out = dict(current)
    for key, value in _pairs(diff):
        key = _hashable(key)
        if key not in out:
            out[key] = value
        elif out[key] == value:
            del out[key]
        else:
            out[key] = value
    return out


def _pairs(value: Any) -> list[list[Any]]:
    return value[1] if isinstance(value, list) and value and value[0] == "map" else []


def _elements(value: Any) -> list[Any]:
    if isinstance(value, list) and value and value[0] == "set":
        return list(value[1])
    return [value]


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
