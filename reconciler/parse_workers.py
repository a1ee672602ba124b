"""A run's new files parsed in worker processes (`ParsedFiles.parse_all`, validate.py).

A cold run of a big repo spends a good part of its time parsing (reading the YAML,
building its data, checking the schemas), file by file, each file on its own. So when a
run has at least PARALLEL_FROM files that neither it nor the parse cache parsed before,
and it may use more than one processor, worker processes parse them. They are sent
chunks of files in order, two chunks each under way; a worker's file comes back as its
parse cache entry (`parse_cache.encode`: plain data), which the run reads back in order
while the workers go on (`decode`, the very step a cache hit takes, with its tests: a
decoded entry is the parse) and hands as it is to the parse cache. A worker builds no
pydantic models, which reading the entry builds anyway. Below PARALLEL_FROM, starting
the workers costs about what they save.

The run only reads back: sharing the parse with its workers (taking the last chunks
itself while their results were not ready) took more wall time on a busy machine
(docs/performance.md, "Parsing in several processes").

The workers are forked: a fresh Python would spend longer importing unet than a worker
spends parsing. A fork copies only the thread that forks, so a lock another thread held
at that moment (the status line's, progress.py, or the lock of the standard stream it
was writing to) stays held in the worker for good. A worker therefore touches nothing
those threads use: its first step gives it standard streams of its own, on /dev/null;
then it parses, and it ends with `os._exit`, which flushes only those. It ignores Ctrl-C
(the run stops it) and is killed when the run ends, however the run ends. The daemon,
whose threads are more (webhook, watches, election) and which parses only what changed
after its first run, parses in its own process.

A worker that dies (killed, out of memory) or raises ends the workers' part, never the
run: what they gave so far is kept and the run parses the rest itself. The pool notices
a worker's death (BrokenProcessPool), so nothing waits for it. `UNET_DEBUG=1` says what
failed.

`UNET_PARSE_WORKERS=N` sets how many processes parse: N workers, or with 1 the run's own
process alone. By default: one per processor the run may use (and its container's CPU
limit allows), at most MAX_PROCESSES; on Linux only, where forking a Python process is
safe (macOS's system libraries are not).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import sys
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

#: New files a run parses in workers from: below, starting them costs about what they save
#: (docs/performance.md, "Parsing in several processes").
PARALLEL_FROM = 200
MAX_PROCESSES = 8
WORKERS_ENV = "UNET_PARSE_WORKERS"
#: Files a worker takes at a time, at most: few round trips, and the last ones still
#: spread out among the workers.
CHUNK = 32
#: Chunks per worker at the least: one that is slow to start leaves its work to the others.
_CHUNKS_PER_WORKER = 4
#: Chunks under way per worker: one it works on, one it takes next without waiting for the
#: run to read results back and send more.
_SENT_PER_WORKER = 2

Task = TypeVar("Task")
Result = TypeVar("Result")


def parse_processes() -> int:
    """How many processes parse a one-shot run's new files: workers, or 1, the run's own."""
    if sys.platform != "linux":
        return 1
    try:
        return max(1, int(os.environ.get(WORKERS_ENV, "")))
    except ValueError:
        return min(len(os.sched_getaffinity(0)), _cpu_limit() or MAX_PROCESSES, MAX_PROCESSES)


#: A container's CPU limit: cgroup v2's quota and period, else v1's (the processors a
#: process may run on are the host's all the same).
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
CFS_QUOTA = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
             Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def _cpu_limit() -> int | None:
    """How many whole processors' time the container's limit gives, or None without one."""
    try:
        if CPU_MAX.exists():
            quota, period = CPU_MAX.read_text().split()
        else:
            quota, period = (path.read_text() for path in CFS_QUOTA)
        allowed, each = int(quota), int(period)
    except (OSError, ValueError):  # no cgroup files, or v2's "max": no limit
        return None
    return max(1, allowed // each) if allowed > 0 else None  # v1's -1: no limit


def mapped(work: Callable[[Task], Result], tasks: Sequence[Task],
           workers: int) -> Iterator[Result]:
    """`work` of each task, in order, done by `workers` forked processes. Ends early, after
    the results so far, when the workers fail (one died or raised, or none could start):
    the caller does the rest itself."""
    from concurrent.futures import ProcessPoolExecutor  # only a run this big needs them

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_isolated, initargs=(os.getpid(),))
    chunks = _Chunks(pool, work, tasks, workers)
    try:
        with _forking():  # the first chunk sent starts the workers
            chunks.send()
        while chunks.sent:
            results = chunks.next()
            chunks.send()  # before these are read back: the workers go on meanwhile
            yield from results
    except Exception:  # whatever a worker raised, or how it died: the caller does the rest
        if os.environ.get("UNET_DEBUG"):
            traceback.print_exc()
        _kill(pool)
    finally:
        pool.shutdown()


class _Chunks(Generic[Task, Result]):
    """Tasks sent to the workers in chunks, from the first on, a few chunks per worker at a
    time: never all at once, since a pool that breaks then fails on the work it was told
    to cancel (Python 3.11's) and says so on standard error."""

    def __init__(self, pool: ProcessPoolExecutor, work: Callable[[Task], Result],
                 tasks: Sequence[Task], workers: int) -> None:
        self.pool, self.work = pool, work
        size = max(1, min(CHUNK, len(tasks) // (workers * _CHUNKS_PER_WORKER)))
        self.todo = (tasks[start:start + size] for start in range(0, len(tasks), size))
        self.sent: deque[Future[list[Result]]] = deque()
        self.most = _SENT_PER_WORKER * workers

    def send(self) -> None:
        """The next chunks sent, until `most` are under way."""
        for part in itertools.islice(self.todo, self.most - len(self.sent)):
            self.sent.append(self.pool.submit(_each, self.work, part))

    def next(self) -> list[Result]:
        """The results of the first chunk under way, once they are ready."""
        return self.sent.popleft().result()


def _each(work: Callable[[Task], Result], tasks: Sequence[Task]) -> list[Result]:
    """In a worker: a chunk's tasks done."""
    return [work(task) for task in tasks]


def _kill(pool: ProcessPoolExecutor) -> None:
    """The workers of a pool that failed: what they would still do is not wanted, and a
    pool that could not send them some work waits for it at shutdown for good (Python
    3.11's, when a task cannot be pickled)."""
    for process in list((pool._processes or {}).values()):
        process.kill()


@contextlib.contextmanager
def _forking() -> Iterator[None]:
    """Around the forks: what the standard streams hold is written first (a worker must not
    write it again), and Python's warning that forking a process with threads is unsafe
    is not shown: workers touch nothing of the other threads' (the module's docstring)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or odd stream: nothing to write
            stream.flush()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*multi-threaded.*fork", DeprecationWarning)
        yield


def _isolated(parent: int) -> None:
    """A worker's first step: standard streams of its own, no Ctrl-C (the run stops its
    workers), and no life after its parent's (it would wait for work for good)."""
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the worker's, for good)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with(parent)


_PR_SET_PDEATHSIG = 1


def _end_with(parent: int) -> None:
    """Be killed when `parent` ends, however it ends (Linux's prctl)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before prctl
        os._exit(1)
