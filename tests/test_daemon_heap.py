"""The daemon's memory: run after run in one process, nothing a run built is kept for good.

The garbage-collector policy is the process's (reconciler/heap.py): the daemon collects
after each run and freezes nothing. Frozen objects are out of the collector's sight for
good, so a stage that froze what it built would grow the daemon by each run's garbage.
"""

from __future__ import annotations

import gc
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from unet.reconciler import heap
from unet.reconciler.daemon.loop import Options, Reconciler

CYCLES = 8


@pytest.fixture
def daemon_heap() -> Iterator[None]:
    """The daemon's policy for the test, and the test process's own back afterwards."""
    enabled = gc.isenabled()
    heap.switch_off()
    yield
    if enabled:
        gc.enable()


def test_daemon_cycles_freeze_nothing_and_do_not_grow(repo: Path, tmp_path: Path,
                                                      daemon_heap: None) -> None:
    reconciler = Reconciler(Options(path=repo, managers=["ovn"], state_dir=tmp_path / "state",
                                    workdir=tmp_path))
    rules = repo / "tenants" / "acme" / "security-groups.yaml"
    original = rules.read_text()
    assert "cidr: 192.0.2.0/24" in original
    frozen = gc.get_freeze_count()
    threads = threading.active_count()
    alive = []
    for cycle in range(CYCLES):
        # Every run applies something: a rule opened, then closed again.
        rules.write_text(original.replace("cidr: 192.0.2.0/24", "cidr: 198.51.100.0/24")
                         if cycle % 2 else original)
        run = reconciler.run_once()
        heap.after_run()
        assert run.result == "applied", f"cycle {cycle}: {run.message}"
        assert gc.get_freeze_count() == frozen, f"run {cycle + 1} froze objects for good"
        assert gc.garbage == [], f"run {cycle + 1} left uncollectable objects"
        assert threading.active_count() == threads, f"run {cycle + 1} left a thread running"
        alive.append(len(gc.get_objects()))
    # After two runs of warming up (caches, parsed files), runs of the same size leave the
    # same number of objects alive.
    steady = alive[2:]
    assert max(steady) - min(steady) < 100, f"objects alive after each run: {alive}"


def test_a_run_leaves_none_of_its_objects_to_the_cyclic_collector(
        repo: Path, tmp_path: Path, daemon_heap: None) -> None:
    """What a run built is freed when the run lets go of it: its objects form no reference
    cycles. The daemon's collection after a run then has little to find, and a one-shot
    command (which never collects) does not carry a first render's garbage to its end.
    A full collection of the daemon's heap costs seconds at a thousand tenants."""
    reconciler = Reconciler(Options(path=repo, managers=["ovn"], state_dir=tmp_path / "state",
                                    workdir=tmp_path))
    reconciler.run_once()  # imports, and the libraries' one-time caches
    heap.after_run()
    rules = repo / "tenants" / "acme" / "security-groups.yaml"  # SSH from an IPv6 office
    rules.write_text(rules.read_text().replace("cidr: 192.0.2.0/24", "cidr: 2001:db8::/32"))
    assert reconciler.run_once().result == "applied"
    assert_no_cycles_of_ours()


def assert_no_cycles_of_ours() -> None:
    """A full collection finds none of unet's objects, and no exception (whose traceback
    would hold its callers' frames and all they hold)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        ours = Counter(type(o).__qualname__ for o in gc.garbage
                       if type(o).__module__.startswith(("reconciler.", "managers.")))
        exceptions = Counter(type(o).__qualname__ for o in gc.garbage
                             if isinstance(o, BaseException))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not ours, f"unet's objects in reference cycles after a run: {ours.most_common(8)}"
    assert not exceptions, f"exceptions kept alive by their tracebacks: {exceptions}"
