"""The reconcile daemon's replicas of its backends (contract.Watch): opened once the
repo names its managers, kept for the life of the daemon, opened again when the managers
or their configs change.

Watching is decided per manager: a manager whose backend has a change feed
(`Manager.watchable`, `Session.watch`) is watched, whether the run plans it or reads it
only for its allocations (a hosting cluster's k8s manager run without its fabric reads
the fabric's); the others are read on every run (polled), as `--once` reads them. One
manager that cannot be watched does not stop the others from being watched. While a
replica's feed is down, the daemon reads every backend on every run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Mapping, Sequence
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
        self.polled: frozenset[str] = frozenset()  # read on every run: no change feed
        self._key: str | None = None
        self._stack = contextlib.ExitStack()
        self._relays: list[threading.Thread] = []
        self.wake = threading.Event()  # a change arrived in some replica
        self._held = HeldMerge()

    def follow(self, managers: Mapping[str, Manager], readers: Mapping[str, Manager]
               ) -> dict[str, Watch]:
        """The replicas of the backends of these managers (planned) and readers (read for
        their allocations) that have a change feed, opened now if need be; {} when a
        replica's feed is down or cannot be opened: the run then reads every backend."""
        key = json.dumps({name: [type(m).__name__, name in readers,
                                 m.config.model_dump(mode="json")]
                          for name, m in sorted({**managers, **readers}.items())},
                         sort_keys=True)
        if key != self._key:
            self.close()
            everyone = {**managers, **readers}
            watchable = sorted(name for name, m in everyone.items() if m.watchable)
            self.polled = frozenset(everyone) - frozenset(watchable)
            if self.polled:
                _log(f"reading {', '.join(sorted(self.polled))} on every run: "
                     f"{'its backend has' if len(self.polled) == 1 else 'their backends have'}"
                     " no change feed" + (f"; watching {', '.join(watchable)}"
                                          if watchable else ""))
            self._open({name: everyone[name] for name in watchable})
            if self.watches or not watchable:
                self._key = key  # else not reachable now: the next run tries again
        if any(w.failure for w in self.watches.values()):
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
        """Owners whose watched objects changed since the last call; None: plan
        everything."""
        owners: set[str] = set()
        everything = False
        for watch in self.watches.values():
            found = watch.take_changes()
            if found is None:
                everything = True
            else:
                owners |= found
        return None if everything or not self.watches else frozenset(owners)

    def held(self, polled: Mapping[str, Mapping[str, Held]], order: Sequence[str]
             ) -> Mapping[str, Held]:
        """The allocations the backends record (as a read of them all finds): the
        replicas', and `polled`'s (each polled manager's, as its last read found them),
        taken in `order` (the engine's: the managers', then the readers'); the same object
        while they stay the same."""
        return self._held([self.watches[name].held() if name in self.watches
                           else polled[name] for name in order])

    def close(self) -> None:
        """The replicas closed, and the threads that relay their news ended."""
        self.watches = {}
        for relay in self._relays:
            relay.join()
        self._relays = []
        self._stack.close()
        self._stack = contextlib.ExitStack()


class HeldMerge:
    """The allocations several backends record, merged as a read of them all merges them
    (objects.observed_allocations: a value recorded with two scopes has none); the last
    merge again while every part is the same object."""

    def __init__(self) -> None:
        self._last: tuple[list[Mapping[str, Held]], Mapping[str, Held]] | None = None

    def __call__(self, parts: list[Mapping[str, Held]]) -> Mapping[str, Held]:
        if len(parts) == 1:
            return parts[0]
        if self._last is not None and len(self._last[0]) == len(parts) \
                and all(a is b for a, b in zip(self._last[0], parts, strict=True)):
            return self._last[1]
        out: dict[str, Held] = {}
        for part in parts:
            for key, held in part.items():
                seen = out.get(key)
                out[key] = held if seen is None or seen.scope == held.scope else \
                    Held(held.value, None)
        self._last = (parts, out)
        return out


def _log(message: str) -> None:
    sys.stderr.write(json.dumps({"ts": now(), "event": "watch", "message": message},
                                sort_keys=True) + "\n")
    sys.stderr.flush()
