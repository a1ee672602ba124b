"""One write transaction of an apply: a wave's steps as OVSDB operations (RFC 7047, 5.2).

Each step of a wave becomes operations on the rows the plan was made against (key →
(table, UUID), as observed and as this apply changed them since):

- a create inserts the row under a name of this transaction (`uuid-name`), and adds it
  to its parent's column; a create of a key that exists already is an update;
- an update writes the fields that changed, and the references whose keys changed or
  name rows inserted since (a replaced row is a new row: OVSDB dropped the weak
  reference to the old one); every row gets its tags again (`unet:installation`,
  `unet:owner`, `unet:key`, `unet:hash` and the object's meta);
- a delete removes the row from its parent's column and deletes it; a row of a table
  that holds rows of non-root tables must hold none by then (our rows inside it went in
  earlier waves, so anything left is someone else's, which the delete would destroy).

References to rows inserted here use their names, references to existing rows their
UUIDs. Every existing row the transaction builds on is asserted to be there (`wait`),
so a row deleted meanwhile fails the whole transaction instead of orphaning a child. A
parent's column changes with one `mutate` per parent and column, not one per child (a
region's switch holds thousands of ports). Large waves are split in transactions of at
most MAX_ROWS_PER_TRANSACTION steps (`chunks`).

The transaction is written through the fence (fence.py), which adds the lock and the
generation; `check` turns a refused transaction into a sentence, and `settle` records
the UUIDs the server gave the inserted rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from unet.managers.sdk import (
    TAG_HASH,
    TAG_INSTALLATION,
    TAG_KEY,
    TAG_OWNER,
    BackendObject,
    Change,
    Step,
)

from .codec import encode
from .fence import OvnError
from .schema import REF_COLUMNS, Schema

MAX_ROWS_PER_TRANSACTION = 5000

Operation = dict[str, Any]


def chunks(items: list[Step], size: int = MAX_ROWS_PER_TRANSACTION) -> Iterator[list[Step]]:
    """`items` in runs of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


class Transaction:
    """The OVSDB operations of one transaction's steps (`operations`), and the objects it
    inserts (`created`)."""

    def __init__(self, steps: list[Step], changes: dict[str, Change],
                 uuids: dict[str, tuple[str, str]], inserted: set[str], installation: str,
                 schema: Schema) -> None:
        """`uuids`: key → (table, UUID) of the rows there now; `inserted`: keys of the rows
        inserted by earlier transactions of this apply."""
        self.uuids = uuids
        self.schema = schema
        self.inserted = inserted
        self.installation = installation
        self.names: dict[str, str] = {}  # key → uuid-name of the rows inserted here
        self.new_tables: dict[str, str] = {}  # key → table of the rows inserted here
        self.deleted: list[str] = []
        self.created: list[BackendObject] = []
        self.operations: list[Operation] = []
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
        columns = self.schema.holding.get(found[0])
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
        columns = self.schema.db.tables[obj.table].columns
        row = {name: encode(value, columns[name].type) for name, value in obj.fields.items()
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
        """Raises OvnError, saying why, when the server refused the transaction."""
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
