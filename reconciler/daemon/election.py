"""One active replica among several: `unet reconcile` run as a Deployment of two or more.

The active replica is the one holding the lock `active` of the backend of the repo's
first fabric manager (an OVSDB lock; on a Kubernetes-only repo, a Lease). A thread holds
it for the life of the process; the others wait in the backend's queue and stand by:
their runs plan nothing and apply nothing. When the active replica dies, its connection
ends (or its Lease stops being renewed) and the backend hands the lock to a standby
within that backend's own timeout. The per-run locks and the write fence still guard
every apply, so two replicas never write at once even while they disagree on who leads.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from .history import now

ACTIVE = "active"
STANDBY = "standby"


class Election:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.role = STANDBY
        self.became_active = threading.Event()  # wakes the daemon for a run at once
        self._decided = threading.Event()  # the first answer: held, or queued behind
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def join(self, manager: Any, timeout: float = 2.0) -> str:
        """Start standing for `manager`'s lock (once); the role, after waiting up to
        `timeout` seconds for the backend's first answer."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._stand, args=(manager,), daemon=True,
                                            name="unet-election")
            self._thread.start()
        self._decided.wait(timeout)
        return self.role

    def stop(self) -> None:
        self._stop.set()

    def _stand(self, manager: Any) -> None:
        while not self._stop.is_set():
            try:
                with manager.connect(self.workdir) as session:
                    self._decided.set()  # connected and queued: standby until granted
                    with session.hold(ACTIVE) as held:
                        self._become(ACTIVE, f"this replica is active (the lock of "
                                             f"NetworkManager {manager.manager})")
                        while held() and not self._stop.wait(0.5):
                            pass
            except Exception as exc:  # the backend is away: stand by, and try again
                _log("election", f"cannot stand for the lock: {exc}")
            self._decided.set()
            if self.role == ACTIVE:
                self._become(STANDBY, "this replica lost the lock: standing by")
            self._stop.wait(1.0)

    def _become(self, role: str, message: str) -> None:
        self.role = role
        if role == ACTIVE:
            self.became_active.set()
        _log(role, message)


def _log(event: str, message: str) -> None:
    sys.stderr.write(json.dumps({"ts": now(), "event": event, "message": message},
                                sort_keys=True) + "\n")
    sys.stderr.flush()
