"""How unet's OVSDB connection takes a whole JSON message out of what it received
(rpc._take_message): the bytes of a message are let go of before its rows are decoded, so
that a reply of every row is never held three times (its bytes, its text, its rows)."""

from __future__ import annotations

import json

from unet.managers.ovn.rpc import _take_message


def test_a_whole_message_is_taken_out_of_the_buffer() -> None:
    message = {"id": 1, "result": [{"rows": [{"_uuid": ["uuid", "u1"]}]}], "error": None}
    buffer = bytearray(json.dumps(message).encode())
    assert _take_message(buffer) == message
    assert buffer == bytearray()


def test_what_follows_a_message_stays_for_the_next() -> None:
    first, second = b'{"id":1,"result":[],"error":null}', b'{"id":2,"res'
    buffer = bytearray(first + second)
    assert _take_message(buffer) == {"id": 1, "result": [], "error": None}
    assert buffer == bytearray(second)


def test_an_incomplete_message_leaves_the_buffer_as_it_was() -> None:
    text = '{"id":1,"result":[{"rows":[{"name":"é"}]}'
    buffer = bytearray(text.encode())
    assert _take_message(buffer) is None
    assert buffer == bytearray(text.encode())


def test_text_beyond_ascii_before_the_end_keeps_the_rest_exact() -> None:
    first = '{"id":1,"result":[{"rows":[{"name":"ünïcödé"}]}],"error":null}'.encode()
    buffer = bytearray(first + b'{"id"')
    found = _take_message(buffer)
    assert found is not None and found["result"][0]["rows"][0]["name"] == "ünïcödé"
    assert buffer == bytearray(b'{"id"')


def test_the_bytes_are_let_go_of_before_the_rows_are_decoded() -> None:
    seen: list[int] = []
    buffer = bytearray(b'{"id":1,"result":[{"rows":[{"_uuid":"u1"}]}],"error":null}')

    def row(obj: dict[str, object]) -> dict[str, object]:
        seen.append(len(buffer))
        return obj

    assert _take_message(buffer, row) is not None
    assert seen and all(length == 0 for length in seen)


def test_a_watchs_new_rows_stay_text_until_the_replica_takes_them() -> None:
    """The daemon's initial state of every row: each row's columns are kept as their text
    while the message is decoded (decoded at once, OVSDB's JSON of every row held five
    times its text), and read back whole when the replica takes the row."""
    from unet.managers.ovn.watch import _columns_as_text, _new_row

    columns = {"name": "unet.acme.prod", "ports": ["set", [["uuid", "p1"], ["uuid", "p2"]]],
               "external_ids": ["map", [["unet:owner", "VirtualNetwork/acme/prod"]]]}
    message = {"id": 1, "result": [False, "txn-1", {"Logical_Switch": {
        "u1": {"initial": columns}, "u2": {"insert": columns},
        "u3": {"modify": {"name": "other"}}, "u4": {"delete": None}}}]}
    decoded = _take_message(bytearray(json.dumps(message).encode()), _columns_as_text)
    assert decoded is not None
    rows = decoded["result"][2]["Logical_Switch"]
    assert isinstance(rows["u1"]["initial"], str) and isinstance(rows["u2"]["insert"], str)
    assert _new_row(rows["u1"]) == _new_row(rows["u2"]) == columns
    assert rows["u3"] == {"modify": {"name": "other"}} and rows["u4"] == {"delete": None}
    assert _new_row({"initial": columns}) == columns  # decoded without the hook: as it is


def test_a_transaction_on_a_watchs_connection_leaves_its_hook() -> None:
    """The watch decodes every message of its connection with `_columns_as_text`; a
    transaction's own hook holds for its reply only, then the connection's is back."""
    from unet.managers.ovn.rpc import Rpc, Timeouts
    from unet.managers.ovn.watch import _columns_as_text

    rpc = Rpc("unix:/nonexistent", Timeouts(1, 1, 1))
    rpc.rows = _columns_as_text
    during: list[object] = []

    def request(method: str, params: list[object]) -> list[object]:
        during.append(rpc.rows)
        return []

    rpc._request = request  # type: ignore[method-assign]
    assert rpc.transact([], json.loads) == []
    assert during == [json.loads] and rpc.rows is _columns_as_text
