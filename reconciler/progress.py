"""Progress of long work: a bar per wave on a terminal (rich), one line per wave in CI logs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None) -> None:
        self.stream = stream or sys.stderr  # as it is now, not when this module was loaded
        self.interactive = self.stream.isatty() if interactive is None else interactive

    def wave(self, manager: str, index: int, waves: int, steps: int) -> Callable[[int, int], None]:
        """A callback for one wave: called with (done, total) as batches commit."""
        label = f"{manager}: wave {index}/{waves}"
        if self.interactive:
            return _bar(label, self.stream)
        started = time.monotonic()

        def report(done: int, total: int) -> None:
            if done >= total:
                self.stream.write(f"{label}: {total} steps in "
                                  f"{time.monotonic() - started:.2f} s\n")
                self.stream.flush()

        return report


def _bar(label: str, stream: TextIO) -> Callable[[int, int], None]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bars

    bars = Bars(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(file=stream))
    task: list[Any] = []

    def report(done: int, total: int) -> None:
        if not task:
            bars.start()
            task.append(bars.add_task(label, total=total))
        bars.update(task[0], completed=done, total=total)
        if done >= total:
            bars.stop()

    return report
