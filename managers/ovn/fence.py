"""The installation's lock, and writes that only its holder can make.

An OVSDB lock belongs to the connection that asked for it (RFC 7047, 4.1.8): when that
connection drops, the server gives the lock to the next run waiting for it. So the lock
is taken on the very connection that writes, and every write transaction begins with
`assert` of the lock: a connection that does not hold it cannot write at all.

That alone does not stop a run that lost its connection from writing its old plan once it
has the lock again, after another run changed everything. So the installation has a
generation, a tag in NB_Global that a run sets to a value of its own when it takes the
lock and with every write. Each write transaction `wait`s for the generation to still be
the one this run last set, and sets the next. After a lost connection, the run takes the
lock again and reads the generation: still its own, nothing happened (the lost
transaction did not commit); the one it was setting, the lost transaction did commit;
anything else, another run wrote meanwhile, and this run stops without writing anything
more. Like any OVSDB transaction, each is all or nothing.

In a cluster, each member keeps its own locks: two runs connected to different members
could both hold the lock. unet connects to the leader, and the generation keeps even
that case safe: writes are serialised by the leader, and a run's write fails unless the
generation is still the one that run set last. Every transaction carries a comment
naming the run, which `ovsdb-tool show-log` shows.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import tenacity

from unet.managers.sdk import BackendLocked, UnetError

from .rpc import ConnectionLost, Rpc, Unreachable

T = TypeVar("T")

LOCK_HOLDER_TAG = "unet:lock-holder:"
GENERATION_TAG = "unet:generation:"


class OvnError(UnetError):
    """The Northbound database cannot be reached or refused a change."""


class LockTimeout(OvnError, BackendLocked):
    """Another run held the lock longer than this run would wait."""


class ConcurrentWrite(OvnError):
    """The lock was lost, and another run wrote before it could be taken again."""


class Interrupted(Exception):
    """A write whose outcome is unknown: its connection or the lock was lost."""


class Fence:
    """The lock `unet_<installation>` and the writes made under it."""

    def __init__(self, connect: Callable[[], Rpc], installation: str) -> None:
        self._connect = connect
        self.installation = installation
        self.name = "unet_" + installation.replace("-", "_")  # lock names are OVSDB <id>s
        self._rpc: Rpc | None = None
        self.held = False
        self.lock_timeout = 60.0
        self.row: str | None = None  # NB_Global's UUID
        self.generation: str | None = None  # the value this run last set
        self.pending: str | None = None  # the value a write with unknown outcome sets
        self.me = f"{socket.gethostname()} pid {os.getpid()}"

    @property
    def rpc(self) -> Rpc:
        if self._rpc is None:
            self._rpc = self._connect()
        return self._rpc

    def close(self) -> None:
        if self._rpc is not None:
            self._rpc.close()
            self._rpc = None

    # -- reading ----------------------------------------------------------------------------
    def read(self, operations: list[dict[str, Any]],
             rows: Callable[[dict[str, Any]], Any] | None = None) -> list[Any]:
        """The rows of each select (`rows`: see Rpc.transact). While this run holds the
        lock, a lost connection is made again, to the leader, and the read done again once
        the lock is back and nobody else has written meanwhile (`regain`)."""
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                return self._read(operations, rows)
            except OvnError as exc:
                if not isinstance(exc.__cause__, ConnectionLost) or not self.held \
                        or self.generation is None or self.pending is not None \
                        or time.monotonic() > deadline:
                    raise
            self.regain()

    def _read(self, operations: list[dict[str, Any]],
              rows: Callable[[dict[str, Any]], Any] | None = None) -> list[Any]:
        try:
            results = self.rpc.transact(operations, rows)
        except ConnectionLost as exc:
            self.close()
            raise OvnError(f"reading the OVN Northbound database failed: {exc}") from exc
        problems = [r["error"] for r in results if isinstance(r, dict) and "error" in r]
        if problems:
            raise OvnError(f"reading the OVN Northbound database failed: {problems[0]}")
        return [r["rows"] for r in results]

    def tags(self, again: bool = True) -> tuple[str | None, dict[str, str]]:
        """NB_Global's UUID (None: there is no row yet) and its external_ids (`again`: after
        a lost connection, as `read` does)."""
        [found] = (self.read if again else self._read)([{
            "op": "select", "table": "NB_Global", "where": [],
            "columns": ["_uuid", "external_ids"]}])
        if not found:
            return None, {}
        return found[0]["_uuid"][1], dict(found[0]["external_ids"][1])

    # -- the lock ---------------------------------------------------------------------------
    def acquire(self, timeout: float, waiting: Callable[[str], None] = lambda _text: None
                ) -> None:
        """Take the lock (waiting up to `timeout`, telling `waiting` who holds it), name
        this run its holder, and start a generation of this run's own. A connection lost
        meanwhile (the leader changed, say) is made again, within `timeout`."""
        self.lock_timeout = timeout
        deadline = time.monotonic() + timeout

        def still_waiting() -> None:
            holder = self.tags()[1].get(LOCK_HOLDER_TAG + self.name, "holder unknown")
            waiting(f"waiting for the lock {self.name} held by {holder} (up to {timeout:g} s)")

        def take() -> bool:
            try:
                if not self.rpc.lock(self.name, max(0.0, deadline - time.monotonic()),
                                     still_waiting):
                    return False
                self._start_generation()
                return True
            except (ConnectionLost, OvnError):
                self.held = False
                self.close()
                raise

        try:  # again after a lost connection; not when no server (or leader) can be reached
            granted = _retried(take, stop=tenacity.stop_after_delay(timeout),
                               wait=tenacity.wait_fixed(0.2),
                               retry=tenacity.retry_if_exception(_lost))
        except tenacity.RetryError as exc:
            cause = exc.last_attempt.exception()
            raise OvnError(f"cannot take the lock {self.name}: {cause}") from cause
        except ConnectionLost as exc:
            raise OvnError(f"cannot take the lock {self.name}: {exc}") from exc
        if not granted:
            holder = self.tags()[1].get(LOCK_HOLDER_TAG + self.name, "holder unknown")
            raise LockTimeout(f"another unet run holds the lock {self.name} ({holder}); waited "
                              f"{timeout:g} s — try again later or raise --lock-timeout")

    def _start_generation(self) -> None:
        """Just granted the lock: this run is its holder, with a generation of its own."""
        self.held = True
        me = f"{self.me} since {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
        generation = _token()
        self._set({LOCK_HOLDER_TAG + self.name: me, GENERATION_TAG + self.installation:
                   generation}, "takes the lock")
        self.row, self.generation = self.tags(again=False)[0], generation

    def release(self) -> None:
        """Clear the holder tag, unless another run took over (its generation is not this
        run's: the tag is that run's now), and give the lock back (best effort: a lost
        connection has given it back already)."""
        if not self.held:
            return
        self.held = False
        try:
            if self._rpc is not None and self.name in self._rpc.locks:
                self._set({LOCK_HOLDER_TAG + self.name: None}, "lets go of the lock",
                          still_ours=self.generation is not None)
                self._rpc.unlock(self.name)
        except (ConnectionLost, OvnError):
            self.close()

    def _set(self, tags: dict[str, str | None], what: str, still_ours: bool = False) -> None:
        """Set (None: clear) NB_Global tags, asserting the lock (and with `still_ours`, that
        the generation is still the one this run set)."""
        row, _tags = self.tags(again=False)
        operations: list[dict[str, Any]] = [{"op": "assert", "lock": self.name},
                                            *([self._still()] if still_ours else []),
                                            self._comment(what)]
        if row is None:
            operations.append({"op": "insert", "table": "NB_Global", "row": {
                "external_ids": ["map", sorted([k, v] for k, v in tags.items() if v)]}})
        else:
            operations.append(tags_mutation(row, tags))
        try:
            results = self.rpc.transact(operations)
        except ConnectionLost as exc:
            self.close()
            raise OvnError(f"writing NB_Global tags failed: {exc}") from exc
        errors = [r for r in results if isinstance(r, dict) and r.get("error")]
        if errors:
            raise OvnError(f"the Northbound database refused to set NB_Global tags: "
                           f"{errors[0]['error']} {errors[0].get('details', '')}".strip())

    # -- writing ----------------------------------------------------------------------------
    def write(self, operations: list[dict[str, Any]]) -> list[Any]:
        """One transaction under the lock and the generation: the results of `operations`
        (and the transaction's own error, if it failed as a whole).

        Raises Interrupted when its outcome is unknown (call `regain`), ConcurrentWrite when
        another run wrote since this run's last write.
        """
        assert self.generation is not None and self.row is not None, "acquire() first"
        following = _token()
        guarded = [{"op": "assert", "lock": self.name}, self._still(), *operations,
                   tags_mutation(self.row, {GENERATION_TAG + self.installation: following}),
                   self._comment("writes")]
        self.pending = following
        try:
            results = self.rpc.transact(guarded)
        except ConnectionLost as exc:
            self.close()
            raise Interrupted(str(exc)) from exc
        first, second = [*results, None, None][:2]
        if isinstance(first, dict) and first.get("error"):  # "not owner": the lock is gone
            raise Interrupted(f"this run no longer holds the lock {self.name}")
        if isinstance(second, dict) and second.get("error"):
            raise self._concurrent("while this run held the lock")
        if not any(isinstance(r, dict) and r.get("error") for r in results):
            self.generation = following
        self.pending = None
        return results[2:2 + len(operations)] + results[4 + len(operations):]

    def _comment(self, what: str) -> dict[str, str]:
        """Who wrote a transaction, for people reading the database's log."""
        return {"op": "comment", "comment": f"unet {self.installation}: {self.me} {what}"}

    def _still(self) -> dict[str, Any]:
        """A `wait` that fails unless the generation is still the one this run set."""
        tag = ["map", [[GENERATION_TAG + self.installation, self.generation]]]
        return {"op": "wait", "timeout": 0, "table": "NB_Global",
                "where": [["external_ids", "includes", tag]], "columns": ["_uuid"],
                "until": "==", "rows": [{"_uuid": ["uuid", self.row]}]}

    def regain(self) -> bool:
        """After an interrupted write: the lock again, and whether that write committed.

        Raises ConcurrentWrite when another run wrote meanwhile, LockTimeout when the lock
        cannot be had within the lock timeout.
        """
        deadline = time.monotonic() + self.lock_timeout

        def relock() -> dict[str, str]:
            self.close()
            if not self.rpc.lock(self.name, max(0.0, deadline - time.monotonic())):
                raise LockTimeout(f"lost the lock {self.name} and could not take it again "
                                  f"within {self.lock_timeout:g} s; nothing more was written")
            self.row, tags = self.tags(again=False)
            return tags

        try:  # the server may be restarting: again every 0.2 s, up to the lock timeout
            tags = _retried(relock, stop=tenacity.stop_after_delay(self.lock_timeout),
                            wait=tenacity.wait_fixed(0.2),
                            retry=tenacity.retry_if_exception_type((ConnectionLost, OvnError))
                            & tenacity.retry_if_not_exception_type(LockTimeout))
        except tenacity.RetryError as exc:
            cause = exc.last_attempt.exception()
            raise OvnError(f"lost the connection to the Northbound database and could not "
                           f"get it back within {self.lock_timeout:g} s ({cause}); nothing "
                           "more was written") from cause
        now = tags.get(GENERATION_TAG + self.installation)
        if now is not None and now == self.pending:
            self.generation, self.pending = now, None
            return True
        if now is not None and now == self.generation:
            self.pending = None
            return False
        raise self._concurrent("while this run was disconnected")

    def _concurrent(self, when: str) -> ConcurrentWrite:
        return ConcurrentWrite(f"another unet run wrote to installation {self.installation} "
                               f"{when} (its generation in NB_Global changed); nothing more "
                               "was written by this run. Plan again: the next plan starts "
                               "from what is there now")


def _lost(exc: BaseException) -> bool:
    """A connection that was made and then lost (not one that could not be made)."""
    while exc is not None and not isinstance(exc, ConnectionLost):
        exc = exc.__cause__  # type: ignore[assignment]
    return isinstance(exc, ConnectionLost) and not isinstance(exc, Unreachable)


def tags_mutation(row: str | None, tags: Mapping[str, str | None]) -> dict[str, Any]:
    """A mutate of NB_Global's external_ids: each key deleted, then set again if not None."""
    keys = ["set", sorted(tags)]
    values = ["map", sorted([k, v] for k, v in tags.items() if v is not None)]
    return {"op": "mutate", "table": "NB_Global",
            "where": [["_uuid", "==", ["uuid", row]]] if row else [],
            "mutations": [["external_ids", "delete", keys], ["external_ids", "insert", values]]}


def _token() -> str:
    return uuid.uuid4().hex


def _retried(fn: Callable[[], T], **conditions: Any) -> T:
    """`tenacity.Retrying(**conditions)(fn)`, and the Retrying let go of afterwards: its
    per-thread state lists its own bound methods, a reference cycle that would keep `fn`
    (and through it this fence and its connection) alive until the cyclic collector ran."""
    retrying = tenacity.Retrying(**conditions)
    try:
        return retrying(fn)
    finally:
        retrying.iter_state.reset()
