"""The cyclic garbage collector's policy, chosen once per process, at its edge (cli.py).

Loading, planning and observing build millions of small objects, almost none of them in
reference cycles. The collector would scan them again and again (a quarter to a third of
the time at a thousand tenants) and find almost nothing. So no stage touches the
collector; the process decides:

it switches the collector off when it starts (`cli.entry`);

- a one-shot command leaves it off: the little cyclic garbage of one run goes with the
  process, and what is alive at exit is frozen, so that the collection the interpreter
  makes while shutting down does not scan it all once more;
- the daemon collects once after each run: that run's cyclic garbage is freed before the
  next one begins, and nothing is frozen, so nothing a run built is kept for good. A
  watching daemon keeps a replica of the backends and the desired state between runs,
  millions of objects that a full collection would scan after every run (3 s at a
  thousand tenants): after a run that only planned a few owners it collects the young
  generations (what that run allocated), and a full collection follows any run that
  validated or rendered (whose garbage may have lived long enough to grow old).
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
