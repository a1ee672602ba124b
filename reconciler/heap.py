"""The cyclic garbage collector, paused while large acyclic data is built."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_collection(freeze: bool = True) -> Iterator[None]:
    """Loading and planning build millions of small objects.

    The cyclic collector would scan them again and again (a quarter to a third of
    the time at a thousand tenants) and find almost nothing: pause it. With
    `freeze`, what was built is moved out of the collector's sight for good: for
    data that lives until the command ends, never for what a daemon drops again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_enabled:
            gc.enable()
