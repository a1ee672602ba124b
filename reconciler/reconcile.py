"""`unet reconcile`: keep the backends equal to a branch, once (a scheduled CI job) or as a
daemon (a Kubernetes Deployment or CronJob).

One run: get the revision (pull the branch into a clone under the state dir, or read a
folder as it is), validate, plan against the live backends under their locks, and apply:
the repo's changes always, drift only when the repo says `reconcile: repair` (with
`reconcile: report` drift is reported and left). A revision that fails validation, or
whose plan has errors, is never applied: the last good revision is reconciled instead
and the run is reported as `invalid`.

Every run is logged as one JSON line on standard error, kept in the run history
(`history.jsonl` in the state dir, the last N runs; `unet reconcile history`) and,
for the daemon, reflected in Prometheus metrics served with /healthz and /readyz.
The plan and apply are those of `unet plan` and `unet apply` (commands.py, apply.py).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import re
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import UnetError
from .load import DEFAULT_MAX_FILE_BYTES

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
SUMMARY_LIMIT = 1024 * 1024  # GitHub's limit for one step's job summary, in bytes
DEFAULT_STATE_DIR = Path(".unet") / "reconcile"
DEFAULT_METRICS_PORT = 9610
HISTORY_FILE = "history.jsonl"
STATE_FILE = "state.json"
PORT_FILE = "metrics.port"

# Results of a run, in the history, the JSON log, the metrics and $GITHUB_OUTPUT.
OK = "ok"            # nothing to change: the backends match the revision
APPLIED = "applied"  # changes applied: the repo's, and drift when `reconcile: repair`
DRIFT = "drift"      # drift found and left in place (`reconcile: report`)
INVALID = "invalid"  # the revision fails validation or its plan has errors: not applied
LOCKED = "locked"    # another run held a backend lock for longer than --lock-timeout
ERROR = "error"      # anything else: a backend or Git unreachable, a failed apply
RESULTS = (OK, APPLIED, DRIFT, INVALID, LOCKED, ERROR)


class ReconcileError(UnetError):
    """A run could not be carried out; the message says why."""


# --- the record of one run ------------------------------------------------------------------


@dataclass
class Run:
    started: str = ""                 # UTC, ISO 8601
    source: str = ""                  # the repo URL or folder
    branch: str | None = None
    revision: str | None = None       # the commit found on the branch (or the folder's HEAD)
    reconciled: str | None = None     # the commit actually planned and applied (last good)
    result: str = ERROR
    message: str = ""
    mode: str | None = None           # the repo's spec.reconcile: report | repair
    counts: dict[str, int] = field(default_factory=dict)      # resources by plan action
    row_counts: dict[str, int] = field(default_factory=dict)  # backend objects by action
    drift: int = 0                    # backend objects changed outside unet
    repaired: int = 0                 # of those, repaired by this run
    applied: dict[str, int] = field(default_factory=dict)     # objects created/updated/deleted
    apply_seconds: float | None = None
    errors: int = 0                   # error diagnostics of the revision (invalid)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)  # the first few
    resources: dict[str, int] = field(default_factory=dict)   # manifests by kind (reconciled)
    locked_at: float | None = None    # epoch seconds: backend locks held from ...
    unlocked_at: float | None = None  # ... to (two runs never overlap here)
    duration: float = 0.0

    @property
    def changed(self) -> bool:
        return self.result in (APPLIED, DRIFT) or bool(self.drift)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


@dataclass
class _Outcome:
    """What planning (and maybe applying) one revision gave."""

    refused: str | None = None          # why the revision is not applied
    validation: Any = None


# --- one run --------------------------------------------------------------------------------


class Reconciler:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.state_dir = options.state_dir
        self._last_plan: Any = None  # the Plan of the last run
        self.parsed: Any = None  # ParsedFiles: the last run's files, kept parsed
        self._last_plan_json: dict[str, Any] | None = None
        self.last_validation: Any = None

    # state kept between runs: the last good revision
    def _state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.state_dir / STATE_FILE).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_state(self, **values: Any) -> None:
        state = {**self._state(), **values}
        _write_atomic(self.state_dir / STATE_FILE, json.dumps(state, indent=1) + "\n")

    @property
    def last_good(self) -> str | None:
        value = self._state().get("last_good")
        return value if isinstance(value, str) else None

    def run_once(self) -> Run:
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        run = Run(started=_now(), source=self.options.repo or str(self.options.path),
                  branch=self.options.branch if self.options.repo else None)
        self._last_plan, self._last_plan_json, self.last_validation = None, None, None
        try:
            self._run(run)
        except Exception as exc:  # a run never takes the daemon down; it is reported
            run.result = LOCKED if type(exc).__name__ == "LockTimeout" else ERROR
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
        from .plan_io import plan_to_json

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
                    f"{_short(good)} could not be reconciled: {exc}"
            if kept.refused is None:
                run.reconciled = good
                what = run.message
                run.result = INVALID
                run.message = (f"revision {_short(run.revision)} refused: {refused}; kept the "
                               f"last good revision {_short(good)}" + (f" ({what})" if what
                                                                       else ""))
                return
            why = why or f"the last good revision {_short(good)} is refused too"
        run.result = INVALID
        run.message = (f"revision {_short(run.revision)} refused: {refused}; nothing applied"
                       + (f" ({why})" if why else ""))

    def _pull(self) -> tuple[Path, str]:
        """The branch, fetched into the clone under the state dir; the clone's network repo."""
        import git

        assert self.options.repo is not None
        clone = self.state_dir / "checkout"
        url, branch = self.options.repo, self.options.branch
        if "://" not in url and ":" not in url.split("/", 1)[0] and Path(url).exists():
            url = str(Path(url).resolve())  # a local path: absolute, the clone lives elsewhere
        with _flock(self.state_dir / "checkout.lock"):
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
        from .apply import execute, session
        from .commands import _plan_live, _record  # the flow of `unet plan` / `unet apply`
        from .diff import NOOP
        from .model import Model
        from .pipeline import allocation_readers, managers_of
        from .plan import restrict_to
        from .validate import ParsedFiles, revision_info, validate_repo

        if self.parsed is None:
            self.parsed = ParsedFiles()
        head = validate_repo(folder, rev, self.options.max_file_size, self.parsed)
        if not head.ok:
            errors = [d for d in head.diagnostics if d.is_error]
            run.errors = len(errors)
            run.diagnostics = [d.to_json() for d in errors[:5]]
            first = errors[0]
            where = f" ({first.file}:{first.line})" if first.file and first.line else ""
            return _Outcome(refused=f"{len(errors)} validation errors, first {first.code}"
                                    f"{where}: {first.message}", validation=head)
        model = Model(head.context)  # type: ignore[arg-type]
        run.mode = str(model.config.reconcile)
        run.resources = dict(sorted(Counter(m.kind for m in head.manifests).items()))
        managers = managers_of(model, self.options.managers, resolve=True)
        readers = allocation_readers(model, managers)
        inputs = {"head": revision_info(folder, rev)}
        entered = False
        try:
            with session(managers, self.options.workdir, self.options.lock_timeout, readers,
                         _log_waiting):
                entered = True
                run.locked_at = time.time()
                plan = _plan_live(head, managers, inputs, False, readers)
                self._last_plan, self._last_plan_json = plan, None
                run.counts, run.row_counts = plan.counts, plan.row_counts
                run.drift = len(plan.drift_ids)
                if not plan.ok:
                    errors = [d for d in plan.diagnostics if d.is_error]
                    run.errors = len(errors)
                    run.diagnostics = [d.to_json() for d in errors[:5]]
                    return _Outcome(refused=f"the plan has {len(errors)} errors, first "
                                            f"{errors[0].code}: {errors[0].message}")
                repair = run.mode == "repair"
                if repair:
                    todo = plan
                else:
                    repo_changes = {c.uid for c in plan.changes if c.actions != (NOOP,)}
                    todo = restrict_to(plan, repo_changes - plan.drift_ids)
                if not todo.has_changes:
                    _record(managers, plan.desired_digests)
                    run.result = DRIFT if run.drift else OK
                    run.message = _drift_message(run.drift) if run.drift else \
                        "no changes: the backends match the revision"
                    return _Outcome()
                result = execute(todo.changes, todo.waves, managers, _quiet)
                run.applied = dict(result.counts)
                run.apply_seconds = round(result.seconds, 3)
                run.repaired = run.drift if repair else 0
                if result.failures or result.mismatches:
                    failed = {uid.split(":", 1)[0] for uid in result.failures}
                    _record({n: m for n, m in managers.items() if n not in failed},
                            plan.desired_digests)
                    problems = [f"{uid}: {why}" for uid, why in sorted(result.failures.items())]
                    problems += result.mismatches
                    raise ReconcileError(f"the apply did not complete: {len(problems)} objects "
                                         f"are not as planned, first {problems[0]}; the next "
                                         "run tries again")
                _record(managers, plan.desired_digests)
                counts = result.counts
                done = (f"applied {counts['create']} created, {counts['update']} updated, "
                        f"{counts['delete']} deleted in {result.seconds:.2f} s")
                if run.drift and not repair:
                    run.result, run.message = DRIFT, f"{done}; {_drift_message(run.drift)}"
                else:
                    run.result = APPLIED
                    run.message = done + (f" (repaired {run.drift} drifted objects)"
                                          if run.drift else "")
                return _Outcome()
        finally:
            if entered:
                run.unlocked_at = time.time()


def _log_waiting(text: str) -> None:
    """Standard error holds one JSON object per line: so does the wait for a lock."""
    sys.stderr.write(json.dumps({"ts": _now(), "event": "waiting", "message": text},
                                sort_keys=True) + "\n")
    sys.stderr.flush()


def _drift_message(count: int) -> str:
    return (f"{count} backend objects were changed outside unet; reported, not "
            "repaired (spec.reconcile: report in unet.yaml; set it to repair, or run "
            "`unet apply`, to repair)")


def _quiet(manager: str, index: int, waves: int, steps: int) -> Callable[[int, int], None]:
    return lambda done, total: None


def _short(commit: str | None) -> str:
    return commit[:12] if commit else "(files on disk)"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _folder_commit(folder: Path) -> str | None:
    """The commit checked out in `folder`, when it is a Git work tree (for the record)."""
    try:
        import git

        return str(git.Repo(folder, search_parent_directories=True).head.commit.hexsha)
    except Exception:  # not a Git repo, no commit yet: the files are still reconciled
        return None


# --- files in the state dir -----------------------------------------------------------------


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def append_history(state_dir: Path, run: Run, keep: int) -> None:
    """Add a run to the history, keeping the last `keep` runs."""
    path = state_dir / HISTORY_FILE
    with _flock(state_dir / "history.lock"):
        lines = path.read_text().splitlines() if path.exists() else []
        lines.append(json.dumps(run.to_json(), sort_keys=True))
        _write_atomic(path, "\n".join(lines[-max(keep, 1):]) + "\n")


def read_history(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / HISTORY_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                out.append(item)
    return out


# --- reports: JSON log line, text, Markdown, GitHub outputs ---------------------------------


def log_line(run: Run, stream: Any = None) -> None:
    """One JSON line per run (standard error: standard output is for people)."""
    record = {"ts": _now(), "event": "reconcile", **run.to_json()}
    stream = stream or sys.stderr
    stream.write(json.dumps(record, sort_keys=True) + "\n")
    stream.flush()


def headline(run: Run) -> str:
    where = f"{run.branch} @ " if run.branch else ""
    return f"unet reconcile: {where}{_short(run.revision)}: {run.result}: {run.message}"


def markdown_report(run: Run, plan: dict[str, Any] | None, validation: Any = None,
                    limit: int = SUMMARY_LIMIT) -> str:
    """The job summary: the run first, then the plan found (cut to fit `limit` bytes)."""
    from .plan_render import render_markdown
    from .report import markdown_summary, summarize

    title = {OK: "no changes", APPLIED: "changes applied", DRIFT: "drift found, not repaired",
             INVALID: "revision refused", LOCKED: "skipped: the backends are locked",
             ERROR: "failed"}[run.result]
    revision = (f"`{run.branch}` " if run.branch else "") + f"`{_short(run.revision)}`"
    rows = [("revision", revision), ("result", f"**{run.result}**: {run.message}")]
    if run.reconciled and run.reconciled != run.revision:
        rows.append(("reconciled", f"`{_short(run.reconciled)}` (the last good revision)"))
    if run.mode:
        rows.append(("drift handling", f"`reconcile: {run.mode}`"))
    rows.append(("drift", f"{run.drift} objects changed outside unet"
                          + (f", {run.repaired} repaired" if run.repaired else "")))
    if run.applied:
        rows.append(("applied", f"{run.applied.get('create', 0)} created, "
                                f"{run.applied.get('update', 0)} updated, "
                                f"{run.applied.get('delete', 0)} deleted in "
                                f"{run.apply_seconds or 0:.2f} s"))
    rows.append(("duration", f"{run.duration:.2f} s"))
    head = [f"### unet reconcile: {title}", "", "| | |", "|---|---|"]
    head += ["| " + key + " | " + value.replace("|", "\\|") + " |" for key, value in rows]
    text = "\n".join(head) + "\n\n"
    if validation is not None:
        summary = summarize(validation.diagnostics, validation.files,
                            len(validation.documents))
        text += markdown_summary(sorted(validation.diagnostics, key=lambda d: d.sort_key()),
                                 summary)
    if plan is not None and (plan["has_changes"] or plan["diagnostics"]):
        budget = limit - len(text.encode()) - 200
        body = render_markdown(plan, limit=max(budget, 1000))
        while len(body.encode()) > budget and budget > 1000:  # multi-byte characters
            budget = budget * 9 // 10
            body = render_markdown(plan, limit=budget)
        if run.mode == "report":
            body = body.replace("and will be repaired.", "and are left in place "
                                "(`reconcile: report`).")
        text += body
    data = text.encode()
    return data[:limit].decode(errors="ignore") if len(data) > limit else text


def github_outputs(run: Run, path: str) -> None:
    changes = sum(v for k, v in run.row_counts.items() if k != "no-op")
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"result={run.result}\ndrift={run.drift}\nrepaired={run.repaired}\n"
                  f"changes={changes}\nrevision={run.revision or ''}\n"
                  f"reconciled={run.reconciled or ''}\n")


def exit_code(run: Run, detailed: bool) -> int:
    if run.result in (INVALID, LOCKED, ERROR):
        return EXIT_ERROR
    return EXIT_CHANGES if detailed and run.changed else EXIT_OK


# --- metrics and health ---------------------------------------------------------------------


class Metrics:
    """Prometheus metrics on their own registry (not the process-global one)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info

        self.registry = registry = CollectorRegistry()
        p = "unet_reconcile_"
        self.runs = Counter(p + "runs", "Reconcile runs, by result", ["result"],
                            registry=registry)
        for result in RESULTS:
            self.runs.labels(result)
        self.last_run = Gauge(p + "last_run_timestamp_seconds",
                              "When the last run finished (Unix time)", registry=registry)
        self.last_success = Gauge(p + "last_success_timestamp_seconds",
                                  "When a run last ended without error (Unix time)",
                                  registry=registry)
        self.last_result = Enum(p + "last_result", "Result of the last run", states=list(RESULTS),
                                registry=registry)
        self.drift = Gauge(p + "drift_objects",
                           "Backend objects changed outside unet, found by the last run",
                           registry=registry)
        self.repaired = Counter(p + "repaired_objects", "Drifted backend objects repaired",
                                registry=registry)
        self.plan = Gauge(p + "plan_resources", "Resources by action in the last run's plan",
                          ["action"], registry=registry)
        self.rows = Gauge(p + "plan_backend_objects",
                          "Backend objects by action in the last run's plan", ["action"],
                          registry=registry)
        self.applied = Counter(p + "applied_objects", "Backend objects changed by applies",
                               ["action"], registry=registry)
        self.apply_duration = Histogram(p + "apply_duration_seconds", "Duration of applies",
                                        buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
                                        registry=registry)
        self.last_apply = Gauge(p + "last_apply_duration_seconds",
                                "Duration of the last apply", registry=registry)
        self.run_duration = Gauge(p + "last_run_duration_seconds",
                                  "Duration of the last run", registry=registry)
        self.resources = Gauge(p + "resources", "Manifests of the reconciled revision by kind",
                               ["kind"], registry=registry)
        self.revision = Info(p + "revision", "The revision of the branch and the one applied",
                             registry=registry)
        self.ready = False
        self.last = "none"
        self.good: str | None = None

    def observe(self, run: Run) -> None:
        now = time.time()
        self.runs.labels(run.result).inc()
        self.last_run.set(now)
        self.last_result.state(run.result)
        self.run_duration.set(run.duration)
        if run.result not in (ERROR, LOCKED):
            self.last_success.set(now)
        if run.result == LOCKED:  # nothing was observed: keep the last figures
            self.last = run.result
            return
        self.drift.set(run.drift)
        if run.repaired:
            self.repaired.inc(run.repaired)
        for action in ("delete", "replace", "create", "update", "no-op"):
            self.plan.labels(action).set(run.counts.get(action, 0))
            self.rows.labels(action).set(run.row_counts.get(action, 0))
        for action, count in run.applied.items():
            self.applied.labels(action).inc(count)
        if run.apply_seconds is not None:
            self.apply_duration.observe(run.apply_seconds)
            self.last_apply.set(run.apply_seconds)
        if run.resources:
            self.resources.clear()
            for kind, count in run.resources.items():
                self.resources.labels(kind).set(count)
        if run.reconciled or run.result in (OK, APPLIED, DRIFT):
            self.good = run.reconciled or run.revision or "files"
        self.revision.info({"branch": run.branch or "", "revision": run.revision or "",
                            "reconciled": run.reconciled or "", "last_good": self.good or ""})
        self.last = run.result
        self.ready = self.good is not None and run.result != ERROR

    def readiness(self) -> dict[str, Any]:
        return {"ready": self.ready, "last_result": self.last, "last_good_revision": self.good}


def serve_metrics(metrics: Metrics, address: str, port: int) -> Any:
    """/metrics, /healthz (the process is alive) and /readyz on a thread; returns the server."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                body = json.dumps(metrics.readiness()).encode() + b"\n"
                self._send(200 if metrics.ready else 503, body, "application/json")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # requests are not worth a log line each

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="unet-metrics", daemon=True).start()
    return server


# --- the command line -----------------------------------------------------------------------


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """`5m`, `90s`, `1h30m`, `2.5` (seconds)."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a duration (e.g. 30s, 5m, 1h)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    value = hours * 3600 + minutes * 60 + seconds
    if value <= 0:
        raise argparse.ArgumentTypeError("the interval must be positive")
    return value


def add_parser(commands: Any) -> None:
    """`unet reconcile` and `unet reconcile history`, on the CLI's subcommands."""
    parser = commands.add_parser(
        "reconcile", help="keep the backends equal to a branch: once, or as a daemon",
        description="Observe, plan and apply, repeatedly: the repo's changes always, drift "
                    "only with `reconcile: repair` in unet.yaml. A revision that fails "
                    "validation is never applied; the last good one is kept.")
    parser.add_argument("--repo", metavar="URL_OR_PATH",
                        help="Git repository to pull (cloned under the state dir); without "
                             "it, the folder --path as it is on disk")
    parser.add_argument("--branch", default="main", help="branch to follow (default main)")
    parser.add_argument("--path", type=Path, default=Path("."),
                        help="the network repo: a folder, or one inside --repo (default .)")
    parser.add_argument("--once", action="store_true",
                        help="one run, then exit (scheduled jobs); the default is a daemon")
    parser.add_argument("--interval", type=parse_duration, default=300.0, metavar="DURATION",
                        help="time between runs of the daemon: 30s, 5m, 1h (default 5m)")
    parser.add_argument("--jitter", type=float, default=0.1, metavar="FRACTION",
                        help="vary each interval randomly by up to this fraction (default "
                             "0.1), so that replicas do not run in step")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="with --once: exit 2 when the run found changes or drift")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR",
                        help="clone, run history and state (default .unet/reconcile)")
    parser.add_argument("--history-size", type=int, default=100, metavar="N",
                        help="runs kept in the history (default 100)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help=f"serve /metrics, /healthz, /readyz (daemon default "
                             f"{DEFAULT_METRICS_PORT}; 0: any free port, written to "
                             f"DIR/{PORT_FILE}; --once: only when given)")
    parser.add_argument("--metrics-address", default="0.0.0.0", metavar="ADDRESS",
                        help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_BYTES,
                        metavar="BYTES", help=argparse.SUPPRESS)
    parser.add_argument("--manager", action="append", metavar="NAME",
                        help="only this NetworkManager (repeatable; default: all)")
    parser.add_argument("--lock-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long to wait for another run's lock (default 60)")
    parser.set_defaults(func=command)
    what = parser.add_subparsers(dest="reconcile_what", required=False, metavar="history",
                                 parser_class=type(parser))
    history = what.add_parser("history", help="the last runs: revision, counts, result")
    history.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR")
    history.add_argument("--format", choices=("text", "json"), default="text")
    history.add_argument("--limit", type=int, default=20, metavar="N",
                         help="show the last N runs (default 20; 0: all kept)")
    history.set_defaults(func=history_command)


def options_of(args: argparse.Namespace) -> Options:
    return Options(path=args.path, repo=args.repo, branch=args.branch, managers=args.manager,
                   lock_timeout=args.lock_timeout, max_file_size=args.max_file_size,
                   state_dir=args.state_dir, workdir=Path.cwd(),
                   history_size=args.history_size)


def command(args: argparse.Namespace) -> int:
    reconciler = Reconciler(options_of(args))
    if args.once:
        return _once(reconciler, args)
    return _daemon(reconciler, args)


def _once(reconciler: Reconciler, args: argparse.Namespace) -> int:
    from .plan_render import render_text
    from .report import use_colour

    metrics = server = None
    if args.metrics_port is not None:
        metrics = Metrics()
        server = _listen(metrics, args, reconciler.state_dir)
    try:
        run = reconciler.run_once()
        if metrics is not None:
            metrics.observe(run)
        log_line(run)
        if reconciler.last_plan_has_changes:
            sys.stdout.write(render_text(reconciler.last_plan, use_colour(sys.stdout)) + "\n")
        print(headline(run))
        if os.environ.get("GITHUB_STEP_SUMMARY"):
            with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write(markdown_report(run, reconciler.last_plan, reconciler.last_validation))
        if os.environ.get("GITHUB_OUTPUT"):
            github_outputs(run, os.environ["GITHUB_OUTPUT"])
        return exit_code(run, args.detailed_exitcode)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _listen(metrics: Metrics, args: argparse.Namespace, state_dir: Path) -> Any:
    port = DEFAULT_METRICS_PORT if args.metrics_port is None else args.metrics_port
    try:
        server = serve_metrics(metrics, args.metrics_address, port)
    except OSError as exc:
        raise ReconcileError(f"cannot listen on {args.metrics_address}:{port}: "
                             f"{exc.strerror}") from exc
    actual = server.server_address[1]
    _write_atomic(state_dir / PORT_FILE, f"{actual}\n")
    return server


def _daemon(reconciler: Reconciler, args: argparse.Namespace) -> int:
    from .heap import long_running

    long_running()
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    reconciler.state_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics()
    server = _listen(metrics, args, reconciler.state_dir)
    sys.stderr.write(json.dumps({"ts": _now(), "event": "start", "source": args.repo or
                                 str(args.path), "branch": args.branch if args.repo else None,
                                 "interval": args.interval, "metrics_port":
                                 server.server_address[1],
                                 "state_dir": str(reconciler.state_dir)}) + "\n")
    sys.stderr.flush()
    try:
        while not stop.is_set():
            run = reconciler.run_once()
            metrics.observe(run)
            log_line(run)
            delay = args.interval * (1 + random.uniform(-args.jitter, args.jitter))
            stop.wait(max(delay, 0.0))
    finally:
        server.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.stderr.write(json.dumps({"ts": _now(), "event": "stop"}) + "\n")
    return EXIT_OK


def history_command(args: argparse.Namespace) -> int:
    runs = read_history(args.state_dir)
    if args.limit:
        runs = runs[-args.limit:]
    if args.format == "json":
        json.dump(runs, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
        return EXIT_OK
    if not runs:
        print(f"no runs recorded in {args.state_dir / HISTORY_FILE}")
        return EXIT_OK
    print(f"{'STARTED':20}  {'REVISION':12}  {'RESULT':8}  {'PLAN -/±/+/~':13}  "
          f"{'DRIFT':>5}  {'DURATION':>8}  MESSAGE")
    for run in runs:
        counts = run.get("counts") or {}
        plan = "/".join(str(counts.get(a, 0)) for a in ("delete", "replace", "create",
                                                          "update")) if counts else "-"
        revision = (run.get("revision") or "files")[:12]
        print(f"{run.get('started', ''):20}  {revision:12}  "
              f"{run.get('result', ''):8}  {plan:13}  {run.get('drift', 0):>5}  "
              f"{run.get('duration', 0):>7.1f}s  {run.get('message', '')}")
    return EXIT_OK
