"""The cyclic garbage collector, paused while large acyclic data is built."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Whether this process runs one command and exits (the default) or keeps running
#: (the reconcile daemon): only the first may keep what it builds out of the
#: collector's sight for good.
_one_shot = True


def long_running() -> None:
    """Called by a daemon: data of one run is dropped again, never frozen."""
    global _one_shot
    _one_shot = False


@contextlib.contextmanager
def paused_collection(transient: bool = False) -> Iterator[None]:
    """Loading and planning build millions of small objects.

    The cyclic collector would scan them again and again (a quarter to a third of
    the time at a thousand tenants) and find almost nothing: pause it. Then what
    was built is frozen (moved out of the collector's sight), so that neither the
    next collection nor the one at exit scans it all again; `transient` data is
    not frozen in a long-running process, which drops it again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _one_shot or not transient:
            gc.freeze()
        if was_enabled:
            gc.enable()


def before_exit() -> None:
    """Everything is dropped at exit: no collection need look at it once more."""
    gc.freeze()
