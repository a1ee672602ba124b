"""Talking to a real OVN Northbound database through ovsdbapp: observe, apply, lock.

Only rows tagged with this installation are read as ours, and only those are
ever changed or deleted. Rows of non-root tables are added to and removed from
their parent's column; OVSDB drops them when no parent holds them, so nothing
can be orphaned. A wave of steps is one transaction (large waves are split);
every transaction's result is checked.

Speed: the ovsdbapp connection (leader handling, the lock, transactions) starts
with conditions that match none of the managed tables' rows, so connecting
costs nothing; it loads this installation's rows, and only the columns unet
uses, when there is something to apply. Observing reads the same rows with one
OVSDB `select` on the server the connection uses, decoded straight from JSON:
the IDL's per-value conversions would cost ten times as much for a no-op run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ovs import jsonrpc
from ovs import stream as ovs_stream
from ovsdbapp.backend.ovs_idl import connection, idlutils
from ovsdbapp.backend.ovs_idl.transaction import Transaction

from reconciler.diff import Change
from reconciler.errors import UnetError
from reconciler.objects import (
    TAG_HASH,
    TAG_INSTALLATION,
    TAG_KEY,
    TAG_OWNER,
    BackendObject,
)
from reconciler.order import Step

from .render import MANAGED_COLUMNS, PARENT_COLUMNS, REF_COLUMNS

TABLES = (*MANAGED_COLUMNS, "NB_Global")
#: Tables whose rows people and ovn-nbctl find by name: a foreign row there blocks the name.
NAMED_TABLES = ("Logical_Switch", "Logical_Router", "Logical_Switch_Port", "Logical_Router_Port",
                "Port_Group", "Address_Set", "Gateway_Chassis")
MAX_ROWS_PER_TRANSACTION = 5000
LOCK_HOLDER_TAG = "unet:lock-holder:"


class OvnError(UnetError):
    """The Northbound database cannot be reached or refused a change."""


class LockTimeout(OvnError):
    pass


@dataclass
class Observed:
    objects: list[BackendObject]
    foreign_names: dict[str, set[str]] = field(default_factory=dict)  # table -> names not ours
    foreign_children: list[str] = field(default_factory=list)  # unnamed, not ours, in ours


class Northbound:
    """One connection to an OVN Northbound database."""

    def __init__(self, remote: str, timeout: float = 60.0,
                 ssl: dict[str, str] | None = None) -> None:
        self.remote = remote
        self.timeout = timeout
        if remote.startswith("ssl:") or ",ssl:" in remote:
            _configure_ssl(ssl or {})
        try:
            helper = idlutils.get_schema_helper(remote, "OVN_Northbound")
        except Exception as exc:  # ovsdbapp raises a bare Exception when it cannot connect
            raise OvnError(f"cannot reach the OVN Northbound database at {remote}: {exc}") \
                from exc
        for table, columns in _COLUMNS.items():
            helper.register_columns(table, list(columns))
        helper.register_table("NB_Global")
        self.idl = connection.OvsdbIdl(remote, helper, leader_only=True)
        for table in MANAGED_COLUMNS:
            self.idl.cond_change(table, [False])  # rows come when there is work: _load_rows
        self.idl.cooperative_yield = lambda: None  # type: ignore[method-assign]
        self.conn = connection.Connection(self.idl, timeout)
        try:
            self.conn.start()
        except Exception as exc:
            raise OvnError(f"cannot sync with the OVN Northbound database at {remote}: "
                           f"{exc}") from exc
        self.rows: _RowIndex | None = None

    def close(self) -> None:
        self.conn.stop(timeout=5)

    # -- observe ----------------------------------------------------------------------------
    def observe(self, installation: str, manager: str) -> Observed:
        with self.conn.lock:
            remote = self.idl._session.get_name()  # the server the connection chose (leader)
        operations = [_select(table, installation, True) for table in MANAGED_COLUMNS]
        operations += [_select(table, installation, False) for table in NAMED_TABLES]
        results = _transact(remote, operations, self.timeout)
        ours = dict(zip(MANAGED_COLUMNS, results[:len(MANAGED_COLUMNS)], strict=True))
        names = dict(zip(NAMED_TABLES, results[len(MANAGED_COLUMNS):], strict=True))
        return _observe(self.idl, ours, names, manager)

    # -- apply ------------------------------------------------------------------------------
    def _load_rows(self, installation: str) -> _RowIndex:
        """Monitor this installation's rows from now on (the first apply waits for them)."""
        if self.rows is None:
            condition = [["external_ids", "includes",
                          ["map", [[TAG_INSTALLATION, installation]]]]]
            with self.conn.lock:
                for table in MANAGED_COLUMNS:
                    self.idl.cond_change(table, condition)
            self.conn.txns.alert_notify()
            deadline = time.monotonic() + self.timeout
            while True:
                with self.conn.lock:  # the server acks a condition after sending its rows
                    if all(self.idl.tables[t].condition_state.acked == condition
                           for t in MANAGED_COLUMNS):
                        break
                if time.monotonic() > deadline:
                    raise OvnError("the Northbound database did not send our rows in time")
                time.sleep(0.01)
            with self.conn.lock:
                self.rows = _RowIndex(self.idl, installation)
        return self.rows

    def apply(self, waves: Sequence[Sequence[Step]], changes: dict[str, Change],
              installation: str, progress: Callable[[int, int], None]) -> dict[str, int]:
        counts = {"create": 0, "update": 0, "delete": 0}
        done = 0
        total = sum(len(w) for w in waves)
        rows = self._load_rows(installation)
        for wave in waves:
            for chunk in _chunks(list(wave), MAX_ROWS_PER_TRANSACTION):
                command = _WaveCommand(chunk, changes, rows, installation)
                self._commit([command])
                for step in chunk:
                    counts[step.action] += 1
                done += len(chunk)
                progress(done, total)
        return counts

    def _commit(self, commands: list[Any]) -> None:
        txn = Transaction(_Api(self.idl), self.conn, self.timeout, check_error=True,
                          log_errors=False)
        for command in commands:
            txn.add(command)
        try:
            txn.commit()
        except Exception as exc:
            raise OvnError(f"the Northbound database refused the transaction: {exc}") from exc

    # -- lock -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, installation: str, timeout: float) -> Iterator[None]:
        """Hold the OVSDB named lock `unet_<installation>` for the duration."""
        name = "unet_" + installation.replace("-", "_")  # lock names are OVSDB <id>s
        with self.conn.lock:
            self.idl.set_lock(name)
        self.conn.txns.alert_notify()
        deadline = time.monotonic() + timeout
        while True:
            with self.conn.lock:
                if self.idl.has_lock:
                    break
            if time.monotonic() > deadline:
                holder = self._holder(name)
                with self.conn.lock:
                    self.idl.set_lock(None)
                raise LockTimeout(f"another unet run holds the lock {name} ({holder}); waited "
                                  f"{timeout:g} s — try again later or raise --lock-timeout")
            time.sleep(0.05)
        me = f"{socket.gethostname()} pid {os.getpid()} since " \
             f"{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        self.set_global_tag(LOCK_HOLDER_TAG + name, me)
        try:
            yield
        finally:
            with contextlib.suppress(OvnError):
                self.set_global_tag(LOCK_HOLDER_TAG + name, None)
            with self.conn.lock:
                self.idl.set_lock(None)
            self.conn.txns.alert_notify()

    def _holder(self, name: str) -> str:
        return self.global_tag(LOCK_HOLDER_TAG + name) or "holder unknown"

    def global_tag(self, tag: str) -> str | None:
        """A tag unet keeps in NB_Global.external_ids."""
        with self.conn.lock:
            for row in self.idl.tables["NB_Global"].rows.values():
                value = row.external_ids.get(tag)
                if value:
                    return str(value)
        return None

    def set_global_tag(self, tag: str, value: str | None) -> None:
        self._commit([_SetGlobalTag(tag, value)])


class _Api:
    """The little of an ovsdbapp API object that Transaction needs."""

    def __init__(self, idl: Any) -> None:
        self.idl = idl

    @property
    def tables(self) -> Any:
        return self.idl.tables


def _configure_ssl(ssl: dict[str, str]) -> None:
    from ovs.stream import Stream

    missing = [k for k in ("sslKey", "sslCert", "sslCaCert") if not ssl.get(k)]
    if missing:
        raise OvnError(f"an ssl: remote needs {', '.join(missing)} in the ovn config")
    Stream.ssl_set_private_key_file(ssl["sslKey"])
    Stream.ssl_set_certificate_file(ssl["sslCert"])
    Stream.ssl_set_ca_cert_file(ssl["sslCaCert"])


def _chunks(items: list[Step], size: int) -> Iterator[list[Step]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


# --- values ---------------------------------------------------------------------------------


def _write(column: Any, value: Any) -> Any:
    kind = column.type
    if kind.is_map():
        return value
    if kind.is_optional():
        return [] if value is None else [value]
    return value  # sets (sorted lists) and scalars


# --- observe --------------------------------------------------------------------------------


# Columns read and written per table: the managed ones, the tags, parents' and references.
_COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(dict.fromkeys((*columns, "external_ids", *PARENT_COLUMNS.get(table, ()),
                                *REF_COLUMNS.get(table, ()))))
    for table, columns in MANAGED_COLUMNS.items()
}


def _select(table: str, installation: str, ours: bool) -> dict[str, Any]:
    """Our rows with the columns unet uses, or the names of everyone else's rows."""
    tag = ["external_ids", "includes" if ours else "excludes",
           ["map", [[TAG_INSTALLATION, installation]]]]
    return {"op": "select", "table": table, "where": [tag],
            "columns": ["_uuid", *_COLUMNS[table]] if ours else ["_uuid", "name"]}


def _transact(remote: str, operations: list[dict[str, Any]], timeout: float) -> list[Any]:
    """One OVSDB transaction on a connection of its own; the rows of each select."""
    error, connection_stream = ovs_stream.Stream.open_block(
        ovs_stream.Stream.open(remote), int(timeout * 1000))
    if error:
        raise OvnError(f"cannot reach the OVN Northbound database at {remote}: "
                       f"{os.strerror(error)}")
    rpc = jsonrpc.Connection(connection_stream)
    try:
        request = jsonrpc.Message.create_request("transact", ["OVN_Northbound", *operations])
        error, reply = rpc.transact_block(request)
    finally:
        rpc.close()
    if error or reply is None or reply.error is not None:
        why = os.strerror(error) if error else (reply.error if reply else "no reply")
        raise OvnError(f"reading the OVN Northbound database failed: {why}")
    results = reply.result
    problems = [r["error"] for r in results if isinstance(r, dict) and "error" in r]
    if problems:
        raise OvnError(f"reading the OVN Northbound database failed: {problems[0]}")
    return [r["rows"] for r in results]


def _our_rows(idl: Any, installation: str) -> Iterator[tuple[str, str, Any]]:
    """(table, key, row) of the installation's rows.

    Two rows with one key (copied by hand, say) would stop every plan: the first by
    UUID keeps the key, the others get keys of their own that nothing desires, so
    they are deleted.
    """
    seen: set[str] = set()
    for table in MANAGED_COLUMNS:
        found = [(row.external_ids[TAG_KEY], str(row.uuid), row)
                 for row in idl.tables[table].rows.values()
                 if row.external_ids.get(TAG_INSTALLATION) == installation
                 and TAG_KEY in row.external_ids]
        for key, uuid, row in sorted(found, key=lambda item: item[:2]):
            yield table, key if key not in seen else f"{key}#duplicate-{uuid}", row
            seen.add(key)


def _observe(idl: Any, ours: dict[str, list[dict[str, Any]]],
             names: dict[str, list[dict[str, Any]]], manager: str) -> Observed:
    """Backend objects from the rows of a `select` (OVSDB's JSON, decoded here)."""
    key_of = _keys(ours)
    parent_of: dict[str, tuple[str, str]] = {}
    children: list[str] = []
    for table, columns in PARENT_COLUMNS.items():
        for row in ours[table]:
            uuid = row["_uuid"][1]
            for column in columns:
                child_table = idl.tables[table].columns[column].type.key.ref_table_name
                for child in _atoms(row[column]):
                    parent_of[child] = (key_of[uuid], column)
                    if child not in key_of and child_table not in NAMED_TABLES:
                        children.append(f"{child_table} {child} in {table} {row.get('name')}")
    objects = [_object(idl, table, row, key_of, parent_of, manager)
               for table in sorted(ours) for row in ours[table] if row["_uuid"][1] in key_of]
    foreign = {table: {row["name"] for row in rows} for table, rows in names.items() if rows}
    return Observed(objects, foreign, sorted(children))


def _keys(ours: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Row UUID → key. Two rows with one key (copied by hand, say) would stop every plan:
    the first by UUID keeps the key, the others get keys nothing desires, so they go."""
    key_of: dict[str, str] = {}
    seen: set[str] = set()
    for table in MANAGED_COLUMNS:
        found = sorted((_tags(row).get(TAG_KEY), row["_uuid"][1]) for row in ours[table])
        for key, uuid in found:
            if key is None:
                continue
            key_of[uuid] = key if key not in seen else f"{key}#duplicate-{uuid}"
            seen.add(key)
    return key_of


def _object(idl: Any, table: str, row: dict[str, Any], key_of: dict[str, str],
            parent_of: dict[str, tuple[str, str]], manager: str) -> BackendObject:
    schema = idl.tables[table].columns
    uuid = row["_uuid"][1]
    fields = {name: _decode(row[name], schema[name].type) for name in MANAGED_COLUMNS[table]}
    refs = {}
    for column in REF_COLUMNS.get(table, ()):
        keys = tuple(sorted(key_of.get(t, f"foreign:{t}") for t in _atoms(row[column])))
        if keys:
            refs[column] = keys
    tags = _tags(row)
    meta = {k: v for k, v in tags.items() if k not in (TAG_INSTALLATION, TAG_OWNER, TAG_KEY)}
    return BackendObject(manager, table, key_of[uuid], tags.get(TAG_OWNER, ""), fields, refs,
                         parent_of.get(uuid), frozenset(), meta)


def _tags(row: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in row["external_ids"][1]}


def _atom(value: Any) -> Any:
    return value[1] if isinstance(value, list) else value  # ["uuid", "..."] → "..."


def _atoms(value: Any) -> list[Any]:
    """Elements of a set as OVSDB sends it: ["set", [...]], or a lone element."""
    if isinstance(value, list) and value and value[0] == "set":
        return [_atom(v) for v in value[1]]
    return [_atom(value)]


def _decode(value: Any, kind: Any) -> Any:
    """A column value as the renderers write it: None, scalar, sorted list or dict."""
    if kind.is_map():
        return {str(_atom(k)): _atom(v) for k, v in sorted(value[1])}
    if kind.is_optional():
        atoms = _atoms(value)
        return atoms[0] if atoms else None
    if kind.is_set():
        return sorted(_atoms(value))
    return _atom(value)


# --- apply ----------------------------------------------------------------------------------


class _RowIndex:
    """Our rows by key: real rows from the IDL, plus rows inserted in the open transaction."""

    def __init__(self, idl: Any, installation: str) -> None:
        self.idl = idl
        self.installation = installation
        self.uuids: dict[str, tuple[str, Any]] = {}
        self.pending: dict[str, Any] = {}
        self.refresh()

    def refresh(self) -> None:
        """Read our rows from the IDL again, e.g. before ovsdbapp retries a transaction.

        After a reconnect, an attempt whose reply was lost may have committed: its rows
        are in the IDL now, and are found here instead of being inserted twice.
        """
        self.uuids.clear()
        self.pending.clear()
        for table, key, row in _our_rows(self.idl, self.installation):
            self.uuids[key] = (table, row.uuid)

    def get(self, key: str) -> Any:
        if key in self.pending:
            return self.pending[key]
        found = self.uuids.get(key)
        if found is None:
            return None
        table, uuid = found
        return self.idl.tables[table].rows.get(uuid)

    def settle(self, txn: Any) -> None:
        """After a commit: remember the real UUIDs of the rows we inserted."""
        for key, row in self.pending.items():
            real = txn.get_insert_uuid(row.uuid)
            if real is not None:
                self.uuids[key] = (row._table.name, real)
        self.pending.clear()


class _WaveCommand:
    """One wave's steps as row operations inside an ovsdbapp transaction."""

    result = None  # what ovsdbapp hands back per command

    def __init__(self, steps: list[Step], changes: dict[str, Change], rows: _RowIndex,
                 installation: str) -> None:
        self.steps = steps
        self.changes = changes
        self.rows = rows
        self.installation = installation
        self.attempts = 0

    def __str__(self) -> str:
        return f"unet wave of {len(self.steps)} steps"

    def run_idl(self, txn: Any) -> None:
        self.attempts += 1
        if self.attempts > 1:  # ovsdbapp retries after a reconnect: see what did commit
            self.rows.refresh()
        self.rows.pending.clear()
        for step in self.steps:
            change = self.changes[step.uid]
            if step.action == "delete":
                self._delete(change.before)
            elif step.action == "create":
                self._create(txn, change.after)
        for step in self.steps:  # references may name rows inserted above
            change = self.changes[step.uid]
            if step.action == "create":
                self._finish(self.rows.get(change.after.key), change.after)
            elif step.action == "update":
                self._update(change.before, change.after)

    def post_commit(self, txn: Any) -> None:
        self.rows.settle(txn)

    def _delete(self, obj: BackendObject | None) -> None:
        assert obj is not None
        row = self.rows.get(obj.key)
        if row is None:
            return  # already gone (a parent took it along): nothing to do
        if obj.parent is not None:
            parent = self.rows.get(obj.parent[0])
            if parent is not None:
                parent.delvalue(obj.parent[1], row)
        row.delete()
        self.rows.uuids.pop(obj.key, None)

    def _create(self, txn: Any, obj: BackendObject | None) -> None:
        assert obj is not None
        row = self.rows.get(obj.key)  # there already: an earlier attempt did commit
        if row is None:
            row = txn.insert(self.rows.idl.tables[obj.table])
        self.rows.pending[obj.key] = row

    def _finish(self, row: Any, obj: BackendObject | None) -> None:
        assert obj is not None
        self._set_fields(row, obj, None)
        if obj.parent is not None:
            parent = self.rows.get(obj.parent[0])
            if parent is None:
                raise OvnError(f"{obj.key}: its parent {obj.parent[0]} does not exist")
            parent.addvalue(obj.parent[1], row)

    def _update(self, before: BackendObject | None, after: BackendObject | None) -> None:
        assert after is not None
        row = self.rows.get(after.key)
        if row is None:
            raise OvnError(f"{after.key} disappeared during the apply")
        self._set_fields(row, after, before)

    def _set_fields(self, row: Any, obj: BackendObject, before: BackendObject | None) -> None:
        columns = self.rows.idl.tables[obj.table].columns
        for name, value in obj.fields.items():
            if before is None or before.fields.get(name) != value:
                setattr(row, name, _write(columns[name], value))
        for column in REF_COLUMNS.get(obj.table, ()):
            wanted = obj.refs.get(column, ())
            if before is not None and before.refs.get(column, ()) == wanted:
                continue
            targets = [self.rows.get(k) for k in wanted]
            targets = [t for t in targets if t is not None]
            setattr(row, column, targets[:1] if columns[column].type.is_optional() else targets)
        row.external_ids = {**obj.meta, TAG_INSTALLATION: self.installation,
                            TAG_OWNER: obj.owner, TAG_KEY: obj.key,
                            TAG_HASH: obj.content_hash}


class _SetGlobalTag:
    """Set (or clear) a tag in NB_Global.external_ids: the lock holder, the applied digest."""

    result = None

    def __init__(self, tag: str, value: str | None) -> None:
        self.tag = tag
        self.value = value

    def __str__(self) -> str:
        return f"unet global tag {self.tag}"

    def run_idl(self, txn: Any) -> None:
        table = txn.idl.tables["NB_Global"]
        rows = list(table.rows.values())
        row = rows[0] if rows else txn.insert(table)
        if self.value is None:
            row.delkey("external_ids", self.tag)
        else:
            row.setkey("external_ids", self.tag, self.value)

    def post_commit(self, txn: Any) -> None:
        pass

