"""The reconcile daemon's replicas of its backends (contract.Watch): opened once the
repo names its managers, kept for the life of the daemon, opened again when the managers
or their configs change.

Watching needs every manager of the run to have a change feed (`Session.watch`) and no
manager read only for its allocations (a hosting cluster's k8s manager without its fabric):
otherwise the daemon reads the backends on every run, as `--once` does.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from unet.reconciler.objects import Held

from ..contract import Manager, Watch
from .history import now

#: Seconds to wait for a replica's first full state.
LOAD_TIMEOUT = 600.0


class Watches:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.watches: dict[str, Watch] = {}
        self.unsupported: str | None = None  # why the daemon polls instead
        self._key: str | None = None
        self._stack = contextlib.ExitStack()
        self._relays: list[threading.Thread] = []
        self.wake = threading.Event()  # a change arrived in some replica
        self._held: tuple[list[Mapping[str, Held]], dict[str, Held]] | None = None

    def follow(self, managers: Mapping[str, Manager], readers: Mapping[str, Manager]
               ) -> dict[str, Watch]:
        """The replicas of these managers' backends (opened now if need be); {} when they
        cannot be watched, or a replica's feed is down: the run then reads the backends."""
        key = json.dumps({name: [type(m).__name__, m.config.model_dump(mode="json")]
                          for name, m in sorted(managers.items())}, sort_keys=True)
        if key != self._key:
            self.close()
            unwatchable = sorted(name for name, m in managers.items() if not m.watchable)
            self.unsupported = \
                f"the backend of {', '.join(unwatchable)} has no change feed" if unwatchable \
                else "a manager is read for its allocations only" if readers else None
            if self.unsupported is None:
                self._open(managers)
            else:
                _log(f"not watching: {self.unsupported}; reading the backends on every run")
            if self.watches or self.unsupported is not None:
                self._key = key  # else not reachable now: the next run tries again
        if self.unsupported is not None or any(w.failure for w in self.watches.values()):
            return {}
        return dict(self.watches)

    def _open(self, managers: Mapping[str, Manager]) -> None:
        try:
            for name in sorted(managers):
                session = self._stack.enter_context(managers[name].connect(self.workdir))
                watch = self._stack.enter_context(session.watch(LOAD_TIMEOUT))
                self.watches[name] = watch
                relay = threading.Thread(target=self._relay, args=(watch,), daemon=True,
                                         name=f"unet-wake {name}")
                relay.start()
                self._relays.append(relay)
        except Exception as exc:  # not reachable now: this run reads, the next tries again
            self.close()
            _log(f"cannot watch the backends: {exc}; reading them on every run meanwhile")

    def _relay(self, watch: Watch) -> None:
        while watch in self.watches.values():
            if watch.wake.wait(0.1):
                watch.wake.clear()
                self.wake.set()

    def changes(self) -> frozenset[str] | None:
        """Owners whose backend objects changed since the last call; None: plan everything."""
        owners: set[str] = set()
        everything = False
        for watch in self.watches.values():
            found = watch.take_changes()
            if found is None:
                everything = True
            else:
                owners |= found
        return None if everything or not self.watches else frozenset(owners)

    def held(self) -> Mapping[str, Held]:
        """The allocations the replicas' objects record (as a read of them all finds); the
        same object while they stay the same."""
        found = [watch.held() for _name, watch in sorted(self.watches.items())]
        if len(found) == 1:
            return found[0]
        if self._held is not None and all(a is b for a, b in zip(self._held[0], found,
                                                                   strict=True)):
            return self._held[1]
        out: dict[str, Held] = {}
        for _name, watch in sorted(self.watches.items()):
            for key, held in watch.held().items():
                seen = out.get(key)
                out[key] = held if seen is None or seen.scope == held.scope else \
                    Held(held.value, None)
        self._held = (found, out)
        return out

    def close(self) -> None:
        """The replicas closed, and the threads that relay their news ended."""
        self.watches = {}
        for relay in self._relays:
            relay.join()
        self._relays = []
        self._stack.close()
        self._stack = contextlib.ExitStack()


def _log(message: str) -> None:
    sys.stderr.write(json.dumps({"ts": now(), "event": "watch", "message": message},
                                sort_keys=True) + "\n")
    sys.stderr.flush()
