"""Progress of long work: a bar per wave on a terminal, one line per wave in CI logs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None) -> None:
        self.stream = stream or sys.stderr  # as it is now, not when this module was loaded
        self.interactive = self.stream.isatty() if interactive is None else interactive

    def wave(self, manager: str, index: int, waves: int, steps: int) -> Callable[[int, int], None]:
        """A callback for one wave: called with (done, total) as batches commit."""
        label = f"{manager}: wave {index}/{waves}"
        started = time.monotonic()

        def report(done: int, total: int) -> None:
            if self.interactive:
                width = 30
                filled = width * done // max(total, 1)
                bar = "#" * filled + "." * (width - filled)
                end = "\n" if done >= total else ""
                self.stream.write(f"\r{label} [{bar}] {done}/{total}{end}")
            elif done >= total:
                self.stream.write(f"{label}: {total} steps in "
                                  f"{time.monotonic() - started:.2f} s\n")
            self.stream.flush()

        return report
