"""`unet reconcile`: keep the backends equal to a branch, once (a scheduled CI job) or as a
daemon (a Kubernetes Deployment or CronJob).

One run: get the revision (pull the branch into a clone under the state dir, or read a
folder as it is), validate, and hand it to the engine (engine.py): plan against the live
backends under their locks and apply the repo's changes always, drift only when the repo
says `reconcile: repair` (with `reconcile: report` drift is reported and left). A
revision that fails validation, or whose plan has errors, is never applied: the last
good revision is reconciled instead and the run is reported as `invalid`.

Every run is logged as one JSON line on standard error (report.py), kept in the run
history (history.py) and, for the daemon, reflected in Prometheus metrics served with
/healthz and /readyz (metrics.py, endpoints.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import engine, heap
from ..contract import BackendLocked, FabricManager
from ..diagnostics import Diagnostic
from ..engine import Outcome, RunFailed, RunOptions, run_managers
from ..errors import EXIT_OK, UnetError
from ..plan import Plan
from ..progress import working
from ..shard import Shard
from ..sources import DEFAULT_MAX_FILE_BYTES
from ..state import state_folder
from ..usage import Usage, after_apply, recorded
from ..validate import ParsedFiles, Validation, parsed_files, revision_info
from .election import ACTIVE, Election
from .endpoints import listen
from .history import (
    APPLIED,
    DEFAULT_STATE_DIR,
    DRIFT,
    ERROR,
    INVALID,
    LOCKED,
    OK,
    STANDBY,
    Run,
    append_history,
    flock,
    now,
    short,
    write_atomic,
)
from .incremental import Incremental, Rescope, Scope
from .metrics import DEFAULT_METRICS_PORT, Metrics
from .report import exit_code, github_outputs, log_line, markdown_report, summary
from .watching import Watches

STATE_FILE = "state.json"


class ReconcileError(UnetError):
    """A run could not be carried out; the message says why."""


@dataclass
class Options:
    path: Path = Path(".")            # the network repo: a folder, or one inside the clone
    repo: str | None = None           # a Git URL or path to pull; None: `path` as it is
    branch: str = "main"
    managers: list[str] | None = None
    lock_timeout: float = 60.0
    max_file_size: int = DEFAULT_MAX_FILE_BYTES
    state_dir: Path = DEFAULT_STATE_DIR
    workdir: Path = field(default_factory=Path.cwd)  # where `northbound: embedded` lives
    history_size: int = 100
    replicas: bool = False  # stand for election: one replica of several is active
    watch: bool = False  # plan against replicas of the backends, kept by their change feeds
    resync_interval: float = 3600.0  # with `watch`: a full plan at least this often
    parse_cache: bool = True  # the first run reads and writes the repo's parse cache
    regions: list[str] | None = None  # a shard's regions: its share only (shard.py)


@dataclass
class _Outcome:
    """What planning (and maybe applying) one revision gave."""

    refused: str | None = None          # why the revision is not applied
    validation: Any = None


# --- one run ------------------------------------------------------------------------------


class Reconciler:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.state_dir = options.state_dir
        self._last_plan: Plan | None = None  # of the last run
        self.parsed: ParsedFiles | None = None  # the last run's files, kept parsed
        self._last_plan_json: dict[str, Any] | None = None
        self.last_validation: Any = None
        #: The usage of the pools after the last run that planned (daemon gauges); None
        #: until one did, or after a run that planned nothing.
        self.usage: list[Usage] | None = None
        self.election = Election(options.workdir) if options.replicas else None
        self.watches = Watches(options.workdir) if options.watch else None
        self.incremental = Incremental(self.watches, options.managers,
                                       options.resync_interval, Shard.of(options.regions))

    # state kept between runs: the last good revision
    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.state_dir / STATE_FILE).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_state(self, **values: Any) -> None:
        state = {**self._state(), **values}
        write_atomic(self.state_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")

    @property
    def last_good(self) -> str | None:
        value = self._state().get("last_good")
        return value if isinstance(value, str) else None

    def run_once(self) -> Run:
        started = time.monotonic()
        state_folder(self.state_dir)
        run = Run(started=now(), source=self.options.repo or str(self.options.path),
                  branch=self.options.branch if self.options.repo else None)
        self._last_plan, self._last_plan_json, self.last_validation = None, None, None
        self.usage = None
        try:
            self._run(run)
        except Exception as exc:  # a run never takes the daemon down; it is reported
            run.result = LOCKED if isinstance(exc, BackendLocked) else ERROR
            if isinstance(exc, UnetError):
                run.message = str(exc)
            else:
                run.message = f"internal error: {type(exc).__name__}: {exc}"
                if os.environ.get("UNET_DEBUG"):
                    traceback.print_exc()
        if self.parsed is not None:
            self.parsed.forget_unused()  # what this run's revisions no longer hold
        run.duration = round(time.monotonic() - started, 3)
        append_history(self.state_dir, run, self.options.history_size)
        return run

    @property
    def last_plan(self) -> dict[str, Any] | None:
        """The last run's plan as JSON (built only when asked: large, and rarely needed)."""
        from ..plan_io import plan_to_json

        if self._last_plan is not None and self._last_plan_json is None:
            self._last_plan_json = plan_to_json(self._last_plan)
        return self._last_plan_json

    @property
    def last_plan_has_changes(self) -> bool:
        return self._last_plan is not None and bool(self._last_plan.has_changes)

    def _run(self, run: Run) -> None:
        if self.options.repo:
            folder, rev = self._pull()
            run.revision = rev
        else:
            folder, rev = self.options.path, None
            run.revision = _folder_commit(folder)
        outcome = self._reconcile(folder, rev, run)
        if outcome.refused is None:
            run.reconciled = run.revision
            self._save_state(last_good=run.revision, last_good_at=run.started)
            return
        # Never apply a revision that fails: keep (reconcile) the last good one instead.
        refused = outcome.refused
        self.last_validation = outcome.validation
        good = self.last_good if self.options.repo else None
        why = "no good revision yet" if self.options.repo and not good else ""
        if good and good != run.revision:
            try:
                kept = self._reconcile(folder, good, run)
            except Exception as exc:  # the refusal stays the news; say what else went wrong
                kept, why = _Outcome(refused="failed"), f"the last good revision " \
                    f"{short(good)} could not be reconciled: {exc}"
            if kept.refused is None:
                run.reconciled = good
                what = run.message
                run.result = INVALID
                run.message = (f"revision {short(run.revision)} refused: {refused}; kept the "
                               f"last good revision {short(good)}" + (f" ({what})" if what
                                                                       else ""))
                return
            why = why or f"the last good revision {short(good)} is refused too"
        run.result = INVALID
        run.message = (f"revision {short(run.revision)} refused: {refused}; nothing applied"
                       + (f" ({why})" if why else ""))

    def _pull(self) -> tuple[Path, str]:
        """The branch, fetched into the clone under the state dir; the clone's network repo."""
        import git

        assert self.options.repo is not None
        clone = self.state_dir / "checkout"
        url, branch = self.options.repo, self.options.branch
        if "://" not in url and ":" not in url.split("/", 1)[0] and Path(url).exists():
            url = str(Path(url).resolve())  # a local path: absolute, the clone lives elsewhere
        with flock(self.state_dir / "checkout.lock"):
            try:
                if not (clone / ".git").is_dir():
                    repo = git.Repo.clone_from(url, clone, no_checkout=True)
                else:
                    repo = git.Repo(clone)
                    repo.git.remote("set-url", "origin", url)
                repo.git.fetch("--quiet", "--prune", "origin",
                               f"+refs/heads/{branch}:refs/remotes/origin/{branch}")
                commit = repo.commit(f"refs/remotes/origin/{branch}").hexsha
                repo.git.checkout("--quiet", "--force", "--detach", commit)
            except (git.GitCommandError, git.BadName, ValueError) as exc:
                detail = getattr(exc, "stderr", "") or str(exc)
                raise ReconcileError(f"cannot pull branch {branch} of {self.options.repo}: "
                                     f"{str(detail).strip()}") from exc
        return clone / self.options.path, commit

    def _reconcile(self, folder: Path, rev: str | None, run: Run) -> _Outcome:
        """Validate `rev` of `folder` (None: the files), plan it live, apply what is due."""
        if self.parsed is None:
            # Parsed in this process alone: the daemon runs threads of its own (webhook,
            # watches, election), and only its first run parses many files (parse_workers.py).
            self.parsed = parsed_files(folder, self.options.max_file_size,
                                       self.options.parse_cache, processes=1)
        files, head = self.incremental.validate(folder, rev, self.options.max_file_size,
                                                self.parsed)
        self.parsed.save()  # the first run only: later runs are served from memory
        if not head.ok:
            return _refused(run, "validation error", head.diagnostics, validation=head)
        assert head.context is not None
        run.mode = str(head.context.kind("RepositoryConfig")[0].obj.spec.reconcile)
        run.resources = dict(sorted(Counter(m.kind for m in head.manifests).items()))
        if self.election is not None and self._elect(head) != ACTIVE:
            run.result, run.message = STANDBY, "another replica is active; standing by"
            return _Outcome()
        scope = self.incremental.scope(head, files)
        if scope is None:
            run.result = OK
            run.message = "no changes: neither the repo nor the backends changed since the " \
                          "last run"
            return _Outcome()
        inputs = {"head": revision_info(folder, rev)}
        try:
            outcome = self._run_engine(head, inputs, files, scope, run)
        except Rescope:  # a polled backend's allocations changed: this run plans everything
            scope = scope.everything()
            outcome = self._run_engine(head, inputs, files, scope, run)
        plan = outcome.plan
        assert plan is not None
        self.incremental.remember(files, scope, outcome)
        self.usage = _usage(outcome)
        if not plan.ok:
            return _refused(run, "error in the plan", plan.diagnostics)
        _conclude(run, outcome)
        return _Outcome()

    def _run_engine(self, head: Validation, inputs: dict[str, Any], files: str, scope: Scope,
                    run: Run) -> Outcome:
        """The run against the backends, reading the replicas where there are."""
        owners = scope.owners
        run.scope = "full" if owners is None else \
            f"{len(owners)} owner{'' if len(owners) == 1 else 's'}" + "".join(
                f", {name} whole" for name in sorted(scope.whole))
        options = RunOptions(workdir=self.options.workdir, lock_timeout=self.options.lock_timeout,
                             only=self.options.managers, waiting=_log_waiting)
        self.incremental.since = None  # until this run has ended well
        try:
            outcome = engine.run(head, inputs, options,
                                 lambda plan, _reports: self._gate(plan, run),
                                 self.incremental.reading(files, scope))
        except RunFailed as failed:
            locked = failed.outcome
            run.locked_at, run.unlocked_at = locked.locked_at, locked.unlocked_at
            run.pending = locked.pending(stopped=True)
            raise failed.cause from None
        run.locked_at, run.unlocked_at = outcome.locked_at, outcome.unlocked_at
        return outcome

    def _elect(self, head: Any) -> str:
        """This replica's role, standing for the lock of the repo's first fabric manager
        (the first manager, when there is no fabric)."""
        from ..model import Model

        assert self.election is not None and head.context is not None
        managers = run_managers(head, Model(head.context), self.options.managers)
        fabric = [name for name in sorted(managers)
                  if isinstance(managers[name], FabricManager)]
        return self.election.join(managers[(fabric or sorted(managers))[0]])

    def _gate(self, plan: Any, run: Run) -> Any:
        """The repo's changes always; drift only with `reconcile: repair`."""
        from ..plan import restrict_to

        self._last_plan, self._last_plan_json = plan, None
        run.counts, run.row_counts = plan.counts, plan.row_counts
        run.drift = len(plan.drift_ids)
        if not plan.ok:
            return None
        if run.mode != "repair":
            repo_changes = {c.uid for c in plan.changes if c.action.changes}
            plan = restrict_to(plan, repo_changes - plan.drift_ids)
        return plan


def _usage(outcome: Outcome) -> list[Usage] | None:
    """What the backends hold of every pool once the run is over: what they recorded, and
    what the plan allocated (applied, or about to be: the figures of `show usage` after
    the next apply)."""
    desired = outcome.desired
    if desired is None:
        return None
    return recorded(desired.model.full, after_apply(desired.held, desired.allocations,
                                                    bool(desired.model.config.prune)))


def _log_waiting(text: str) -> None:
    """Standard error holds one JSON object per line: so does the wait for a lock."""
    sys.stderr.write(json.dumps({"ts": now(), "event": "waiting", "message": text},
                                sort_keys=True) + "\n")
    sys.stderr.flush()


def _refused(run: Run, what: str, diagnostics: list[Diagnostic],
             validation: Validation | None = None) -> _Outcome:
    """A run that goes no further for errors: the first five recorded, the first one said."""
    errors = [d for d in diagnostics if d.is_error]
    run.errors = len(errors)
    run.diagnostics = [d.to_json() for d in errors[:5]]
    first = errors[0]
    where = f" ({first.file}:{first.line})" if first.file and first.line else ""
    counted = what if len(errors) == 1 else what.replace("error", "errors", 1)
    return _Outcome(refused=f"{len(errors)} {counted}, first {first.code}{where}: "
                            f"{first.message}", validation=validation)


def _conclude(run: Run, outcome: Outcome) -> None:
    """What a run that planned without errors did: nothing (or only found drift), or
    applied; an apply that did not complete is an error, which the next run retries."""
    if outcome.applied is None:
        run.result = DRIFT if run.drift else OK
        run.message = _drift_message(run.drift) if run.drift else \
            "no changes: the backends match the revision"
        return
    run.applied = dict(outcome.counts)
    run.apply_seconds = round(outcome.seconds, 3)
    repair = run.mode == "repair"
    run.repaired = run.drift if repair else 0
    if not outcome.complete:
        problems = [f"{uid}: {why}" for uid, why in sorted(outcome.failures.items())]
        problems += [f"{uid}: {how}" for uid, how in outcome.mismatches.items()]
        run.pending = outcome.pending()
        raise ReconcileError(f"the apply did not complete: {len(problems)} objects are not as "
                             f"planned, first {problems[0]}; left pending: "
                             f"{', '.join(run.pending[:5])}"
                             + (f" and {len(run.pending) - 5} more" if len(run.pending) > 5
                                else "") + "; the next run tries again")
    counts = outcome.counts
    done = (f"applied {counts['create']} created, {counts['update']} updated, "
            f"{counts['delete']} deleted in {outcome.seconds:.2f} s")
    if run.drift and not repair:
        run.result, run.message = DRIFT, f"{done}; {_drift_message(run.drift)}"
    else:
        run.result = APPLIED
        run.message = done + (f" (repaired {run.drift} drifted objects)" if run.drift else "")


def _drift_message(count: int) -> str:
    objects = f"{count} backend object{'' if count == 1 else 's'}"
    return (f"{objects} changed outside unet; reported, not "
            "repaired (spec.reconcile: report in unet.yaml; set it to repair, or run "
            "`unet apply`, to repair)")


def _folder_commit(folder: Path) -> str | None:
    """The commit checked out in `folder`, when it is a Git work tree whose files under
    `folder` are that commit's (for the record); None when they differ from it (changed
    or new files): what was reconciled is the files on disk, which no commit holds."""
    try:
        import git

        repo = git.Repo(folder, search_parent_directories=True)
        commit = str(repo.head.commit.hexsha)
        inside = folder.resolve().relative_to(Path(repo.working_dir).resolve()).as_posix()
        return None if repo.is_dirty(untracked_files=True, path=inside) else commit
    except Exception:  # not a Git repo, no commit yet: the files are still reconciled
        return None


# --- once, or as a daemon -----------------------------------------------------------------


@dataclass
class Serving:
    """How the runs are served: metrics, and for the daemon the time between runs."""

    metrics_address: str = "0.0.0.0"
    metrics_port: int | None = None  # once: only when given; the daemon: the default port
    interval: float = 300.0
    jitter: float = 0.1  # each interval varies by up to this fraction
    webhook_secret: bytes | None = None  # serve POST /hooks/git, signed with it


def once(reconciler: Reconciler, serving: Serving, detailed_exitcode: bool,
         fmt: str = "text") -> int:
    """One run. text: its plan and a summary on standard output, its JSON line on standard
    error unless that is a terminal (logs keep it; people read the summary); json: the run's
    record on standard output, alone. The job summary and step outputs on GitHub."""
    metrics, endpoints = Metrics(), None
    if serving.metrics_port is not None:
        endpoints = listen(metrics, serving.metrics_address, serving.metrics_port,
                           reconciler.state_dir)
    try:
        with working():
            run = reconciler.run_once()
        if endpoints is not None:
            metrics.observe(run)
            metrics.usage(reconciler.usage)
            endpoints.publish(metrics)
        _print_run(reconciler, run, fmt)
        if os.environ.get("GITHUB_STEP_SUMMARY"):
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write(markdown_report(run, reconciler.last_plan, reconciler.last_validation))
        if os.environ.get("GITHUB_OUTPUT"):
            github_outputs(run, os.environ["GITHUB_OUTPUT"])
        return exit_code(run, detailed_exitcode)
    finally:
        if endpoints is not None:
            endpoints.close()


def _print_run(reconciler: Reconciler, run: Run, fmt: str) -> None:
    from ..plan_render import render_text
    from ..report import use_colour

    # The plan's JSON only when the run changed something: seconds to build.
    plan = reconciler.last_plan if reconciler.last_plan_has_changes else None
    if fmt == "json":
        record = {"format_version": "1.0", **run.to_json(), "plan": plan}
        sys.stdout.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return
    if not sys.stderr.isatty():
        log_line(run)
    if plan is not None:
        sys.stdout.write(render_text(plan, use_colour(sys.stdout)) + "\n")
    print("\n".join(summary(run)))


def serve(reconciler: Reconciler, serving: Serving) -> int:
    """Run after run until SIGTERM or SIGINT, each run's garbage collected before the next."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    state_folder(reconciler.state_dir)
    metrics = Metrics()
    port = DEFAULT_METRICS_PORT if serving.metrics_port is None else serving.metrics_port
    endpoints = listen(metrics, serving.metrics_address, port, reconciler.state_dir,
                       serving.webhook_secret)
    options = reconciler.options
    sys.stderr.write(json.dumps({"ts": now(), "event": "start",
                                 "source": options.repo or str(options.path),
                                 "branch": options.branch if options.repo else None,
                                 "interval": serving.interval,
                                 "metrics_port": endpoints.port,
                                 "state_dir": str(reconciler.state_dir)}) + "\n")
    sys.stderr.flush()
    try:
        while not stop.is_set():
            if endpoints.lost.is_set():
                raise UnetError("the process serving /metrics, /healthz and the webhook "
                                "ended: stopping, so that the daemon is started again whole")
            run = reconciler.run_once()
            metrics.observe(run, reconciler.election)
            metrics.usage(reconciler.usage)
            endpoints.publish(metrics)
            log_line(run)
            heap.after_run(young_only=run.scope != "full")
            delay = serving.interval * (1 + random.uniform(-serving.jitter, serving.jitter))
            wakes = [endpoints.wake] + ([reconciler.election.became_active]
                                      if reconciler.election is not None else []) \
                + ([reconciler.watches.wake] if reconciler.watches is not None else [])
            _wait(stop, wakes, max(delay, 0.0))
    finally:
        if reconciler.election is not None:
            reconciler.election.stop()
        if reconciler.watches is not None:
            reconciler.watches.close()
        endpoints.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.stderr.write(json.dumps({"ts": now(), "event": "stop"}) + "\n")
    return EXIT_OK


#: Seconds a change in the backends is left to settle before the run it wakes (a person's
#: ovn-nbctl command is several transactions), and the most it is left to.
SETTLE, SETTLE_MAX = 0.05, 0.5


def _wait(stop: threading.Event, wakes: list[threading.Event], seconds: float) -> None:
    """Until the next run: the interval, or less when something asks for a run now (a
    verified webhook, this replica becoming active, a change in a watched backend)."""
    deadline = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < deadline:
        woken = [event for event in wakes if event.is_set()]
        if woken:
            _settle(stop, woken)
            return
        stop.wait(min(0.05, max(deadline - time.monotonic(), 0.0)))


def _settle(stop: threading.Event, woken: list[threading.Event]) -> None:
    """Until the events stay quiet for SETTLE seconds (at most SETTLE_MAX)."""
    end = time.monotonic() + SETTLE_MAX
    while not stop.is_set():
        for event in woken:
            event.clear()
        stop.wait(SETTLE)
        if time.monotonic() >= end or not any(event.is_set() for event in woken):
            return
