"""What a large plan holds in memory: each observed row that is as desired shares the
desired row's values, and the digests of every row are never one text of every row."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from unet.reconciler import objects
from unet.reconciler.diff import Action, diff
from unet.reconciler.objects import BackendObject, index_objects
from unet.reconciler.plan import desired_digest, fingerprint


def _row(key: str, match: str, owner: str = "SecurityGroup/t1/web") -> BackendObject:
    return BackendObject("ovn", "ACL", key, owner, {"match": match, "priority": 1000},
                         {"port_group": ("pg-" + key,)}, None, frozenset(),
                         {"unet:hash": "h-" + key})


def test_an_observed_row_as_desired_holds_the_desired_rows_values() -> None:
    desired = [_row(f"acl-{n}", f"ip4.src == 10.0.0.{n}") for n in range(3)]
    observed = [_row(f"acl-{n}", f"ip4.src == 10.0.0.{n}") for n in range(3)]
    observed[2] = _row("acl-2", "ip4.src == 10.9.9.9")  # drifted: keeps its own values
    changes = {c.uid: c for c in diff(index_objects(desired), index_objects(observed))}
    same = changes["ovn:acl-0"]
    assert same.action is Action.NOOP and same.before is not None and same.after is not None
    assert same.before.fields is same.after.fields and same.before.refs is same.after.refs
    assert same.before.meta is not same.after.meta or same.before.meta == same.after.meta
    drifted = changes["ovn:acl-2"]
    assert drifted.action is Action.UPDATE and drifted.before is not None
    assert drifted.before.fields["match"] == "ip4.src == 10.9.9.9"


def _whole_text_hash(value: Any) -> str:
    """content_hash as it was: the JSON text of the whole value, hashed at once."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each text the digests encode."""
    lengths: list[int] = []
    encode = objects._ENCODE

    def counting(value: Any) -> str:
        text = encode(value)
        lengths.append(len(text))
        return text

    monkeypatch.setattr(objects, "_ENCODE", counting)
    return lengths


def test_the_fingerprint_is_what_it_was_without_one_text_of_every_row(
        encoded: list[int]) -> None:
    rows = [_row(f"acl-{n:05d}", f"ip4.src == 10.0.{n // 250}.{n % 250}") for n in range(5000)]
    expected = _whole_text_hash(sorted((o.uid, o.fields, o.refs, o.parent, o.meta)
                                       for o in rows))
    assert fingerprint(rows) == expected
    assert max(encoded) < sum(encoded) / 4


def test_the_desired_digest_is_what_it_was_without_one_text_of_every_row(
        encoded: list[int]) -> None:
    rows = [_row(f"acl-{n:05d}", f"ip4.src == 10.0.{n // 250}.{n % 250}") for n in range(5000)]
    pairs = sorted((o.uid, o.content_hash) for o in rows)
    encoded.clear()
    assert desired_digest(rows) == "2:" + _whole_text_hash(pairs)
    assert max(encoded) < sum(encoded) / 4


def test_the_entries_of_a_plan_document_share_their_lists() -> None:
    """A plan of an initial apply at 10,000 tenants has 1.5 million entries: their empty
    lists, actions and waves are one list per value, not five lists per entry."""
    from unet.reconciler.diff import Change
    from unet.reconciler.plan import PLAINLY
    from unet.reconciler.plan_io import _change_json

    rows = [_row(f"acl-{n}", "ip4") for n in range(3)]
    noops = [_change_json(Change(r.uid, r, r, Action.NOOP, "up to date"), {}, False, PLAINLY)
             for r in rows]
    assert noops[0] == {"id": "ovn:acl-0", "manager": "ovn", "table": "ACL", "key": "acl-0",
                        "owner": "SecurityGroup/t1/web", "actions": ["no-op"],
                        "reason": "up to date", "before": None, "after": None, "changes": [],
                        "forces_replacement": [], "unknown": [], "drift": False, "waves": []}
    creates = [_change_json(Change(r.uid, None, r, Action.CREATE, "new"),
                            {f"create {r.uid}": 2}, False, PLAINLY) for r in rows]
    assert creates[0]["actions"] == ["create"] and creates[0]["waves"] == [2]
    assert creates[0]["changes"] == creates[0]["unknown"] == []
    lists = {id(entry[name]) for entry in (*noops, *creates)
             for name in ("actions", "changes", "forces_replacement", "unknown", "waves")}
    assert len(lists) <= 4  # [], ["no-op"], ["create"], [2]
