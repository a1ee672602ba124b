"""The cyclic garbage collector's policy, chosen once per process, at its edge (cli.py).

Loading, planning and observing build millions of small objects, almost none of them in
reference cycles. The collector would scan them again and again (a quarter to a third of
the time at a thousand tenants) and find almost nothing. So no stage touches the
collector; the process decides:

it switches the collector off when it starts (`cli.entry`);

- a one-shot command leaves it off: the little cyclic garbage of one run goes with the
  process, and what is alive at exit is frozen, so that the collection the interpreter
  makes while shutting down does not scan it all once more;
- the daemon collects after each run, and freezes nothing, so nothing a run built is kept
  for good. A run builds no reference cycles of its own (tests/test_daemon_heap.py
  holds it to that): what it lets go of is freed at once, and the collection finds only
  the libraries' few cycles. So the daemon collects only the young generations (what was
  allocated since the last collection) after a run, and the whole heap after a run that
  planned everything (the first, each resync, a reload): a full collection scans the
  replica and the desired state a watching daemon keeps between runs, seconds of CPU at
  a thousand tenants, while a young one costs what the run allocated.
"""

from __future__ import annotations

import gc


def switch_off() -> None:
    """At the start of every unet process."""
    gc.disable()


def after_run(young_only: bool = False) -> None:
    """In the daemon, once a run has ended and dropped what it built (`young_only`: only
    what was allocated since the last collection, and what survived one)."""
    gc.collect(1 if young_only else 2)


def before_exit() -> None:
    """When the process ends."""
    gc.freeze()
