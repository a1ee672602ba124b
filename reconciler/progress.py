"""Progress of long work: a bar per wave on a terminal (rich), one line per wave in CI logs;
and a status line (`working`) for work silent for seconds, on a terminal only."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
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


# --- the status line of long work -----------------------------------------------------------

#: Seconds of silence before the status line shows (UNET_PROGRESS_AFTER changes it).
SHOW_AFTER = 2.0

_current: _Line | None = None


class _Line:
    """A spinner, what is being done and the time it has taken, on one line of standard
    error, from `after` seconds on; ended (erased) by the end of the work or by the first
    output, so that it never mixes with what is printed."""

    def __init__(self, stream: TextIO, after: float) -> None:
        self.stream, self.text = stream, "working"
        self.lock = threading.Lock()
        self.bars: Any = None
        self.task: Any = None
        self.stopped = False
        self.timer = threading.Timer(after, self._show)
        self.timer.daemon = True
        self.saved = (sys.stdout, sys.stderr)

    def start(self) -> None:
        sys.stdout = _Watched(sys.stdout, self)
        sys.stderr = _Watched(sys.stderr, self)
        self.timer.start()

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as Bars
        from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.stopped:
                return
            self.bars = Bars(SpinnerColumn(), TextColumn("{task.description}"),
                             TimeElapsedColumn(), console=Console(file=self.stream),
                             transient=True, redirect_stdout=False, redirect_stderr=False)
            self.task = self.bars.add_task(self.text, total=None)
            self.bars.start()

    def say(self, text: str) -> None:
        with self.lock:
            self.text = text
            if self.bars is not None and not self.stopped:
                self.bars.update(self.task, description=text, refresh=True)

    def stop(self) -> None:
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            self.timer.cancel()
            if self.bars is not None:
                self.bars.stop()
            sys.stdout, sys.stderr = self.saved


@contextlib.contextmanager
def working(stream: TextIO | None = None) -> Iterator[None]:
    """Long work that may be silent for seconds: a status line on a terminal (standard
    error: there it never mixes with a result piped elsewhere). Never when standard error
    is not a terminal (CI, tests, logs), nor inside another."""
    global _current
    stream = stream or sys.stderr
    if _current is not None or not stream.isatty() or os.environ.get("TERM") == "dumb":
        yield
        return
    line = _current = _Line(stream, _show_after())
    line.start()
    try:
        yield
    finally:
        line.stop()
        _current = None


def say(text: str) -> None:
    """What the work does now (`observing ovn`), shown by the status line if there is one."""
    if _current is not None:
        _current.say(text)


def quiet() -> None:
    """No more status line in this work: what comes next prints, prompts or has its own
    progress bars."""
    if _current is not None:
        _current.stop()


def _show_after() -> float:
    try:
        return max(0.0, float(os.environ.get("UNET_PROGRESS_AFTER", SHOW_AFTER)))
    except ValueError:
        return SHOW_AFTER


class _Watched:
    """Standard output or error while a status line may show: the first write ends it."""

    def __init__(self, stream: TextIO, line: _Line) -> None:
        self._stream, self._line = stream, line

    def write(self, text: str) -> int:
        self._line.stop()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
