"""Talking to a real OVN Northbound database through ovsdbapp: observe, apply, lock.

Only rows tagged with this installation are read as ours, and only those are
ever changed or deleted. Rows of non-root tables are added to and removed from
their parent's column; OVSDB drops them when no parent holds them, so nothing
can be orphaned. A wave of steps is one transaction (large waves are split);
every transaction's result is checked.
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
        for table in TABLES:
            helper.register_table(table)
        self.idl = connection.OvsdbIdl(remote, helper, leader_only=True)
        self.conn = connection.Connection(self.idl, timeout)
        try:
            self.conn.start()
        except Exception as exc:
            raise OvnError(f"cannot sync with the OVN Northbound database at {remote}: "
                           f"{exc}") from exc
        self.idl.cooperative_yield = lambda: time.sleep(0)  # type: ignore[method-assign]

    def close(self) -> None:
        self.conn.stop(timeout=5)

    # -- observe ----------------------------------------------------------------------------
    def observe(self, installation: str, manager: str) -> Observed:
        with self.conn.lock:
            return _observe(self.idl, installation, manager)

    # -- apply ------------------------------------------------------------------------------
    def apply(self, waves: Sequence[Sequence[Step]], changes: dict[str, Change],
              installation: str, progress: Callable[[int, int], None]) -> dict[str, int]:
        counts = {"create": 0, "update": 0, "delete": 0}
        done = 0
        total = sum(len(w) for w in waves)
        rows = _RowIndex(self.idl, installation)
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


def _read(row: Any, column: Any) -> Any:
    """A column value as the renderers write it: None, scalar, sorted list or dict."""
    value = getattr(row, column.name)
    kind = column.type
    if kind.is_map():
        return {str(k): v for k, v in sorted(value.items())}
    if kind.is_optional():
        return value[0] if value else None
    if kind.is_set():
        return sorted(value)
    return value


def _write(column: Any, value: Any) -> Any:
    kind = column.type
    if kind.is_map():
        return value
    if kind.is_optional():
        return [] if value is None else [value]
    return value  # sets (sorted lists) and scalars


# --- observe --------------------------------------------------------------------------------


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


def _observe(idl: Any, installation: str, manager: str) -> Observed:
    ours: dict[str, list[Any]] = {}
    foreign: dict[str, set[str]] = {}
    key_of: dict[Any, str] = {}
    for table, key, row in _our_rows(idl, installation):
        ours.setdefault(table, []).append(row)
        key_of[row.uuid] = key
    for table in NAMED_TABLES:
        for row in idl.tables[table].rows.values():
            if row.uuid not in key_of:
                foreign.setdefault(table, set()).add(row.name)
    parent_of: dict[Any, tuple[str, str]] = {}
    children: list[str] = []
    for table, columns in PARENT_COLUMNS.items():
        for row in ours.get(table, ()):
            for column in columns:
                for child in getattr(row, column):
                    parent_of[child.uuid] = (key_of[row.uuid], column)
                    if child.uuid not in key_of and child._table.name not in NAMED_TABLES:
                        children.append(f"{child._table.name} {child.uuid} in {table} "
                                        f"{row.name}")
    objects = [_object(idl, table, row, key_of, parent_of, manager)
               for table, rows in sorted(ours.items()) for row in rows]
    return Observed(objects, foreign, sorted(children))


def _object(idl: Any, table: str, row: Any, key_of: dict[Any, str],
            parent_of: dict[Any, tuple[str, str]], manager: str) -> BackendObject:
    schema = idl.tables[table].columns
    fields = {name: _read(row, schema[name]) for name in MANAGED_COLUMNS[table]}
    refs = {}
    for column in REF_COLUMNS.get(table, ()):
        targets = getattr(row, column)
        targets = targets if isinstance(targets, list) else [targets]
        keys = tuple(sorted(key_of.get(t.uuid, f"foreign:{t.uuid}") for t in targets if t))
        if keys:
            refs[column] = keys
    tags = dict(row.external_ids)
    meta = {k: v for k, v in tags.items() if k not in (TAG_INSTALLATION, TAG_OWNER, TAG_KEY)}
    return BackendObject(manager, table, key_of[row.uuid], tags.get(TAG_OWNER, ""), fields,
                         refs, parent_of.get(row.uuid), frozenset(), meta)


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

