"""Talking to a real OVN Northbound database: observe, apply, lock.

Only rows tagged with this installation are read as ours, and only those are
ever changed or deleted. Rows of non-root tables are added to and removed from
their parent's column; OVSDB drops them when no parent holds them, so nothing
can be orphaned. A wave of steps is one transaction (large waves are split);
every transaction's result is checked.

One connection of unet's own (`rpc.py`), to the leader of a cluster (the only
server of a standalone database): it gives the schema (`schema.py`), plain OVSDB
`transact` requests read the installation's rows with one `select` (turned into
objects by `codec.py`) and write each wave as one transaction of
insert/update/delete/mutate operations built from the plan (`transaction.py`), and it
holds the installation's lock, which every write asserts (`fence.py`). When it is lost
(the leader died, say), it is made again to the new leader. An OVS IDL would convert
every value of every row twice (to its own types and back), which cost more than the
server's own work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from unet.managers.sdk import (
    TAG_INSTALLATION,
    TAG_KEY,
    TAG_OWNER,
    TAG_REGIONS,
    ApplyOutcome,
    Change,
    ProgressFactory,
    Step,
)

from .codec import (
    LABEL_COLUMNS,
    OvnObservation,
    Row,
    atoms,
    brief_unless_of,
    compact_row,
    keys_of,
    label,
    rows_inside,
    tag,
    to_object,
    unnamed_inside,
    uuid_of,
)
from .fence import ConcurrentWrite, Fence, Interrupted, LockTimeout, OvnError, tags_mutation
from .rpc import ConnectionLost, Rpc, Timeouts, TlsFailed
from .schema import MANAGED_COLUMNS, NAMED_TABLES, PARENT_COLUMNS, Schema
from .tls import TlsClient
from .transaction import Transaction, chunks

__all__ = ["ConcurrentWrite", "LockTimeout", "Northbound", "OvnError", "OvnObservation"]



class Claims(Protocol):
    """Of a shard's run (reconciler/shard.py, Ownership): the regions its rows record, and
    which rows it claims of {UUID: (owner, regions tag, parent UUID)}."""

    def values(self) -> list[str]: ...

    def claimed(self, entries: Mapping[str, tuple[str, str | None, str | None]]) -> set[str]: ...


#: Seconds a waiter for a held lock stays queued before it asks again.
_HOLD_POLL = 5.0


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
        self.schema = self._schema()  # its tables' column types decode and encode values
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

    def _schema(self) -> Schema:
        """The server's schema, read on the first connection."""
        assert self._first is not None
        try:
            return Schema.from_json(self._first.schema())
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
    def observe(self, installation: str, manager: str, claims: Claims | None = None,
                owners: frozenset[str] | None = None) -> OvnObservation:
        """The installation's rows as objects (only `owners`' rows, when given: the others
        still count for references and parents), and the names of everyone else's rows.
        With `claims` (a shard's run), only the rows it claims are read as ours
        (`_shard_rows`); the others are, to this run, rows of others."""
        if claims is None:
            ours, names = self._rows(installation) if owners is None else \
                self._owners_rows(installation, owners)
            key_of, uuids = keys_of(ours)
            parent_of = _parents(ours, key_of)
        else:
            ours, names, parent_of, uuids = self._shard_rows(installation, claims)
            key_of, own = keys_of(ours)
            uuids.update(own)
        inside = {uuid_of(row): found for table in self.schema.holding for row in ours[table]
                  if (found := rows_inside(self.schema, table, row, key_of))}
        described = self.describe(installation, {child for found in inside.values()
                                                 for child in found})
        children = sorted(text for table in PARENT_COLUMNS for row in ours[table]
                          for text in unnamed_inside(table, row,
                                                     inside.get(uuid_of(row), [])))
        objects = []
        for table in sorted(ours):  # each table's rows let go of once they are objects
            rows, ours[table] = ours[table], []
            objects += [to_object(self.schema, table, row, key_of, parent_of, manager,
                                  tuple(sorted(described[c] for _t, c in inside.get(uuid, ()))))
                        for row in rows if (uuid := uuid_of(row)) in key_of
                        and (owners is None or tag(row, TAG_OWNER) in owners)]
        foreign = {table: {row["name"] for row in rows} for table, rows in names.items() if rows}
        return OvnObservation(objects, None, manager, foreign, children, uuids)

    def _rows(self, installation: str) -> tuple[dict[str, list[Row]], dict[str, list[Row]]]:
        """Every row of the installation, in one transaction; and everyone else's names."""
        operations = [_select(table, installation, self.schema.columns_read(table))
                      for table in MANAGED_COLUMNS]
        operations += [_select(table, installation) for table in NAMED_TABLES]
        results = self.fence(installation).read(operations, compact_row)
        return (dict(zip(MANAGED_COLUMNS, results[:len(MANAGED_COLUMNS)], strict=True)),
                dict(zip(NAMED_TABLES, results[len(MANAGED_COLUMNS):], strict=True)))

    def _owners_rows(self, installation: str, owners: frozenset[str]
                     ) -> tuple[dict[str, list[Row]], dict[str, list[Row]]]:
        """Every row of the installation, the rows of others than `owners` kept brief (what
        tells their keys and children), a table at a time; and everyone else's names.

        What an apply confirms, under the installation's lock: one reply of every row was
        the peak of an apply (its text and its rows beside the desired state and the
        plan). A row someone else writes between two tables' reads is theirs either way."""
        fence = self.fence(installation)
        ours = {table: fence.read([_select(table, installation, self.schema.columns_read(table))],
                                  brief_unless_of(owners, self._children_columns(table)))[0]
                for table in MANAGED_COLUMNS}
        names = dict(zip(NAMED_TABLES, fence.read([_select(table, installation)
                                                   for table in NAMED_TABLES], compact_row),
                         strict=True))
        return ours, names

    def _children_columns(self, table: str) -> tuple[str, ...]:
        """The columns of `table` that hold rows: of ours (PARENT_COLUMNS) or not."""
        return tuple(dict.fromkeys((*PARENT_COLUMNS.get(table, ()),
                                    *self.schema.holding.get(table, {}))))

    def _shard_rows(self, installation: str, claims: Claims
                    ) -> tuple[dict[str, list[Row]], dict[str, list[Row]],
                               dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
        """A shard's rows, selected on the server by the regions they record: in one
        transaction, in full, the rows that record one of the shard's (`claims.values`);
        then, a table at a time (and kept only as `_Brief`s), the tags and children of the
        others, which tell whether the shard still claims some of them (written without
        shards, of a tenant that moved in): those are read again in full. Returns the
        shard's rows, everyone else's names, the parent (key, column) of each of the
        shard's rows, and the (table, UUID) of those parents that are not the shard's (a
        moved tenant's port on the switch of the region it left)."""
        values = claims.values()
        operations = [_select(table, installation, self.schema.columns_read(table), value)
                      for table in MANAGED_COLUMNS for value in values]
        operations += [_select(table, installation) for table in NAMED_TABLES]
        results = self.fence(installation).read(operations, compact_row)
        per_table = len(values)
        own = {table: [row for found in results[i * per_table:(i + 1) * per_table]
                       for row in found] for i, table in enumerate(MANAGED_COLUMNS)}
        names = dict(zip(NAMED_TABLES, results[per_table * len(MANAGED_COLUMNS):],
                         strict=True))
        briefs = {uuid_of(row): _brief(table, row) for table in MANAGED_COLUMNS
                  for row in own[table]}
        for table in MANAGED_COLUMNS:  # one at a time: only one table's tags decoded at once
            found = self.fence(installation).read([_select_others(table, installation,
                                                                  values)], compact_row)[0]
            briefs.update((uuid_of(row), _brief(table, row)) for row in found)
        parent_of = {child: (uuid, column) for uuid, brief in briefs.items()
                     for column, child in brief.children}
        keep = claims.claimed({uuid: (brief.owner, brief.regions,
                                      parent_of.get(uuid, (None, ""))[0])
                               for uuid, brief in briefs.items()})
        ours = {table: [row for row in own[table] if uuid_of(row) in keep]
                for table in MANAGED_COLUMNS}
        if len(keep) > sum(map(len, ours.values())):  # some of the others are the shard's
            full = self.fence(installation).read(
                [_select_others(table, installation, values, self.schema.columns_read(table))
                 for table in MANAGED_COLUMNS], compact_row)
            for table, rows in zip(MANAGED_COLUMNS, full, strict=True):
                ours[table] += [row for row in rows if uuid_of(row) in keep]
        parents = {child: (briefs[uuid].key, column)
                   for child, (uuid, column) in parent_of.items() if child in keep}
        theirs = {briefs[uuid].key: (briefs[uuid].table, uuid)
                  for child, (uuid, _column) in parent_of.items()
                  if child in keep and uuid not in keep}
        return ours, names, parents, theirs

    def describe(self, installation: str, rows: set[tuple[str, str]]) -> dict[str, str]:
        """UUID → how people know each of these rows of others, (table, UUID) each (one
        request for all)."""
        if not rows:
            return {}
        order = sorted(rows)
        operations = []
        for table, uuid in order:
            columns = [c for c in LABEL_COLUMNS.get(table, ("name",))
                       if self.schema.has_column(table, c)]
            operations.append({"op": "select", "table": table, "columns": columns,
                               "where": [["_uuid", "==", ["uuid", uuid]]]})
        out = {}
        for (table, uuid), found in zip(order, self.fence(installation).read(operations),
                                        strict=True):
            out[uuid] = label(table, uuid, found[0] if found else {})
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
            for chunk in chunks(list(wave)):
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
        holding = self.schema.holding
        doomed = sorted({c.before.key for c in changes.values()
                         if c.before is not None and c.action.deletes
                         and c.before.key in self.uuids
                         and self.uuids[c.before.key][0] in holding})
        if not doomed:
            return
        operations = [{"op": "select", "table": self.uuids[key][0],
                       "where": [["_uuid", "==", ["uuid", self.uuids[key][1]]]],
                       "columns": list(holding[self.uuids[key][0]])} for key in doomed]
        ours = {uuid for _table, uuid in self.uuids.values()}
        fence = self.fence(installation)
        for key, found in zip(doomed, fence.read(operations), strict=True):
            table = self.uuids[key][0]
            others = {(holding[table][column], child) for row in found
                      for column in holding[table]
                      for child in atoms(row[column]) if child not in ours}
            if others:
                described = sorted(self.describe(installation, others).values())
                raise OvnError(f"HOLDS_FOREIGN_OBJECTS: {table} {key} now holds what unet does "
                               f"not own ({', '.join(described)}), added since the plan was "
                               "made; deleting it would destroy them. Nothing was applied: "
                               "plan again")

    def _apply_chunk(self, steps: list[Step], changes: dict[str, Change],
                     installation: str) -> None:
        """One transaction; after a lost connection, again unless it did commit."""
        fence = self.fence(installation)
        while True:
            transaction = Transaction(steps, changes, self.uuids, self.inserted, installation,
                                      self.schema)
            if not transaction.operations:
                return
            try:
                results = fence.write(transaction.operations)
            except Interrupted:
                if self._recover(fence, installation):
                    self.inserted.update(obj.key for obj in transaction.created)
                    return
                continue
            transaction.check(results)
            transaction.settle(results, self.uuids)
            self.inserted.update(obj.key for obj in transaction.created)
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
        operations = [_select(table, installation, ("external_ids",))
                      for table in MANAGED_COLUMNS]
        results = self.fence(installation).read(operations)
        _key_of, uuids = keys_of(dict(zip(MANAGED_COLUMNS, results, strict=True)))
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
                fence.write([tags_mutation(fence.row, {tag: value})])
                return
            except Interrupted:
                if fence.regain():
                    return


def _select(table: str, installation: str, columns: Sequence[str] | None = None,
            regions: str | None = None) -> dict[str, Any]:
    """The installation's rows with `columns` (those that record `regions`, when given);
    without columns, the names of everyone else's rows."""
    tags = [[TAG_INSTALLATION, installation], *([[TAG_REGIONS, regions]] if regions else [])]
    tag = ["external_ids", "includes" if columns is not None else "excludes", ["map", tags]]
    return {"op": "select", "table": table, "where": [tag],
            "columns": ["_uuid", *columns] if columns is not None else ["_uuid", "name"]}


def _select_others(table: str, installation: str, values: Sequence[str],
                   columns: Sequence[str] | None = None) -> dict[str, Any]:
    """The installation's rows that record none of the regions `values`: with `columns`,
    or with their tags and the rows they hold only (what tells whose they are)."""
    where = [["external_ids", "includes", ["map", [[TAG_INSTALLATION, installation]]]],
             *(["external_ids", "excludes", ["map", [[TAG_REGIONS, value]]]]
               for value in values)]
    read = columns if columns is not None else ("external_ids", *PARENT_COLUMNS.get(table, ()))
    return {"op": "select", "table": table, "where": where, "columns": ["_uuid", *read]}


class _Brief(NamedTuple):
    """What a shard's read keeps of a row to tell whose it is: its tags and children."""

    table: str
    key: str
    owner: str
    regions: str | None
    children: tuple[tuple[str, str], ...]  # (column, child UUID)


def _brief(table: str, row: Row) -> _Brief:
    return _Brief(table, tag(row, TAG_KEY) or "", tag(row, TAG_OWNER) or "",
                  tag(row, TAG_REGIONS),
                  tuple((column, child) for column in PARENT_COLUMNS.get(table, ())
                        for child in atoms(row[column])))


def _parents(ours: dict[str, list[Row]], key_of: dict[str, str]
             ) -> dict[str, tuple[str, str]]:
    """Child UUID → (parent key, column), of the children of our rows."""
    parent_of: dict[str, tuple[str, str]] = {}
    for table, columns in PARENT_COLUMNS.items():
        for row in ours[table]:
            parent = key_of.get(uuid_of(row))
            if parent is None:  # tagged ours by hand without a key: no object of ours
                continue
            for column in columns:
                for child in atoms(row[column]):
                    parent_of[child] = (parent, column)
    return parent_of
