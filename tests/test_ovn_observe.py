"""unet's read of every row of its installation (northbound.Northbound.observe), against a
real OVN Northbound database: rows are made plain while the reply is decoded, and give the
same objects as OVSDB's JSON of them would."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from unet.managers.ovn.codec import compact_row, keys_of, to_object, uuid_of
from unet.managers.ovn.northbound import Northbound, _select
from unet.managers.ovn.schema import MANAGED_COLUMNS

from .support.ovnlab import OvnLab
from .support.ovnrun import INSTALLATION, apply


def _read(nb: Northbound, plain: bool) -> dict[str, list[dict[str, Any]]]:
    operations = [_select(table, INSTALLATION, nb.schema.columns_read(table))
                  for table in MANAGED_COLUMNS]
    fence = nb.fence(INSTALLATION)
    rows = fence.read(operations, compact_row) if plain else fence.read(operations)
    return dict(zip(MANAGED_COLUMNS, rows, strict=True))


def _json_lists(value: Any) -> list[Any]:
    """OVSDB's JSON values (["uuid", …], ["set", …], ["map", …]) anywhere in `value`."""
    if isinstance(value, list):
        return [value] if value and value[0] in ("uuid", "named-uuid", "set", "map") else \
            [found for item in value for found in _json_lists(item)]
    if isinstance(value, dict):
        return [found for item in value.values() for found in _json_lists(item)]
    return []


def test_rows_are_plain_as_they_are_decoded_and_give_the_same_objects(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    nb = Northbound(lab.nb_remote)
    try:
        raw, plain = _read(nb, plain=False), _read(nb, plain=True)
    finally:
        nb.close()
    assert sum(len(rows) for rows in plain.values()) > 100
    assert _json_lists(plain) == []  # no OVSDB JSON is held for any row
    assert _json_lists(raw) != []
    tags = [key for rows in plain.values() for row in rows for key in row["external_ids"]]
    assert all(key is tags[0] or key != tags[0] for key in tags)  # one string per tag name

    def objects(ours: dict[str, list[dict[str, Any]]]) -> list[Any]:
        key_of, _uuids = keys_of(ours)
        return [to_object(nb.schema, table, row, key_of, {}, "ovn", ())
                for table in sorted(ours) for row in ours[table] if uuid_of(row) in key_of]

    assert objects(plain) == objects(raw)


def test_observing_some_owners_gives_their_objects_as_a_whole_read_does(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """What an apply confirms: the objects of the owners it changed, their references to
    others' rows resolved as a read of every row resolves them."""
    assert apply(tmp_path, repo).returncode == 0
    nb = Northbound(lab.nb_remote)
    try:
        everything = nb.observe(INSTALLATION, "ovn").objects
        owners = frozenset(sorted({obj.owner for obj in everything})[:3])
        some = nb.observe(INSTALLATION, "ovn", owners=owners).objects
    finally:
        nb.close()
    assert some and {obj.owner for obj in some} == owners
    assert some == [obj for obj in everything if obj.owner in owners]
    assert any(obj.refs or obj.parent for obj in some)


def test_the_desired_and_the_observed_rows_share_each_value_they_hold(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """Each name, match and tag a row holds in both is one string in memory, not two."""
    from unet.reconciler.desired import render_desired
    from unet.reconciler.objects import observed_allocations
    from unet.reconciler.validate import validate_repo

    assert apply(tmp_path, repo).returncode == 0
    nb = Northbound(lab.nb_remote)
    try:
        observed = {obj.uid: obj for obj in nb.observe(INSTALLATION, "ovn").objects}
    finally:
        nb.close()
    desired = render_desired(validate_repo(repo), observed_allocations(observed.values()))
    pairs = [(want, observed[want.uid]) for want in desired.objects if want.uid in observed]
    assert len(pairs) > 100
    for want, have in pairs:
        assert want.owner is have.owner and want.key is have.key
        for name, value in want.fields.items():
            if isinstance(value, str) and value == have.fields.get(name):
                assert value is have.fields[name], (want.uid, name)


def test_a_compact_row_holds_every_kind_of_value_plainly() -> None:
    """UUIDs as text (map keys too: a UUID-keyed map would not make a dict of lists), sets as
    tuples, maps as dicts, scalars as they are; objects that are not rows untouched."""
    raw = {"_uuid": ["uuid", "u1"], "m": ["map", [[["uuid", "k1"], "v"], ["a", ["uuid", "u2"]]]],
           "s": ["set", ["x", ["uuid", "u3"]]], "o": ["set", []], "n": 5, "r": ["uuid", "u4"]}
    assert compact_row(raw) == {"_uuid": "u1", "m": {"k1": "v", "a": "u2"}, "s": ("x", "u3"),
                                "o": (), "n": 5, "r": "u4"}
    result = {"rows": []}
    assert compact_row(result) is result


def test_observing_some_owners_reads_a_table_at_a_time_and_keeps_others_brief(
        lab: OvnLab, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An apply's confirmation: one reply of every row beside the plan was an apply's peak
    of memory. Each reply holds one table; the rows of other owners keep their keys and
    children only; the objects are those of a whole read (the test above)."""
    from unet.managers.ovn.fence import Fence

    assert apply(tmp_path, repo).returncode == 0
    replies: list[tuple[list[str], list[list[dict[str, Any]]]]] = []  # of our rows
    read = Fence.read

    def spying(self: Fence, operations: list[dict[str, Any]], *args: Any) -> Any:
        found = read(self, operations, *args)
        if any(op["where"][0][1] == "includes" for op in operations):  # not others' names
            replies.append(([op["table"] for op in operations], copy.deepcopy(found)))
        return found

    nb = Northbound(lab.nb_remote)
    try:
        everything = nb.observe(INSTALLATION, "ovn").objects
        owners = frozenset(sorted({obj.owner for obj in everything})[:2])
        monkeypatch.setattr(Fence, "read", spying)
        some = nb.observe(INSTALLATION, "ovn", owners=owners).objects
    finally:
        nb.close()
    assert some == [obj for obj in everything if obj.owner in owners]
    assert len(replies) == len(MANAGED_COLUMNS)
    assert all(len(tables) == 1 for tables, _found in replies)
    others = [row for _tables, found in replies for rows in found for row in rows
              if row["external_ids"].get("unet:owner") not in owners]
    assert others and all(set(row["external_ids"]) <= {"unet:key"} for row in others)
    assert not any({"match", "addresses", "options", "networks"} & set(row) for row in others)
