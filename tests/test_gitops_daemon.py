"""`unet reconcile` as a daemon and as concurrent one-shot runs, against the embedded OVN
Northbound database: pushes applied within the interval, an invalid push refused with the
last good revision kept, hand edits repaired or reported, the metrics endpoint and the
run history following each of these, and two reconcilers never applying at once.

Every unet process runs as a subprocess and is stopped by its pid at the end of its test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from unet.managers.ovn.embedded import EmbeddedNorthbound
from unet.managers.ovn.northbound import Northbound
from unet.reconciler.daemon.cli import parse_duration
from unet.reconciler.daemon.history import Run
from unet.reconciler.daemon.report import markdown_report

from .conftest import ROOT
from .support.gitops import add_instance, break_repo, commit_all, git, ovn_only_repo, set_mode

LSP = "unet.acme.vm.web-1.0"
TIMEOUT = 60  # seconds for anything the daemon should do within a few intervals


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("UNET_DEBUG", "GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT")}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), NO_COLOR="1")
    return env


def spawn(cwd: Path, *args: str, name: str, env: dict[str, str] | None = None
          ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """unet in the background; `env` adds to the test environment."""
    out, err = cwd / f"{name}.out", cwd / f"{name}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=cwd,
                                env={**_env(), **(env or {})}, stdout=stdout, stderr=stderr)
    return proc, out, err


@contextlib.contextmanager
def stopped_at_end(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    """Stopped as a Deployment stops them (SIGTERM), killed if that takes too long: a
    watching daemon holds its embedded database server until it stops."""
    try:
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def wait_until(what: str, check: Callable[[], Any], proc: subprocess.Popen[bytes] | None = None,
               err: Path | None = None, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"unet exited ({proc.returncode}) while waiting for {what}: "
                                 + (err.read_text() if err else ""))
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}"
                                 + (f"\n{err.read_text()[-3000:]}" if err else ""))
        time.sleep(0.1)


def nbctl(remote: str, *args: str) -> str:
    return subprocess.run(["ovn-nbctl", f"--db={remote}", *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def ports(remote: str) -> str:
    return nbctl(remote, "--bare", "--columns=name", "list", "Logical_Switch_Port")


def hand_edit(remote: str) -> None:
    nbctl(remote, "set", "Logical_Switch_Port", LSP, "options:requested-chassis=hv9")


def edited(remote: str) -> bool:
    return "hv9" in nbctl(remote, "get", "Logical_Switch_Port", LSP, "options")


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metrics_port(state: Path, proc: subprocess.Popen[bytes], err: Path) -> int:
    """The port a daemon started with --metrics-port 0 listens on, once it does."""
    port_file = state / "metrics.port"
    return int(wait_until("the metrics port", lambda: port_file.exists()
                          and port_file.read_text().strip(), proc, err))


def metrics(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(port, "/metrics")
    assert status == 200
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def metric(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float | None:
    return values.get((name, frozenset(labels.items())))


def history(state: Path) -> list[dict[str, Any]]:
    path = state / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_of(state: Path, revision: str, **fields: Any) -> dict[str, Any] | None:
    """The latest run of `revision` whose fields have the given values (or a predicate)."""
    for run in reversed(history(state)):
        if run["revision"] == revision and all(
                value(run[key]) if callable(value) else run[key] == value
                for key, value in fields.items()):
            return run
    return None


def pushed_origin(tmp_path: Path, work: Path) -> tuple[Path, str]:
    """A bare origin with `work`'s files committed and pushed on main; the commit."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(work, "init", "-q", "-b", "main")
    git(work, "remote", "add", "origin", str(origin))
    commit = commit_all(work, "base")
    git(work, "push", "-q", "origin", "main")
    return origin, commit


def test_the_daemon_follows_the_branch(tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", mode="repair")
    origin, c1 = pushed_origin(tmp_path, work)
    daemon_dir = tmp_path / "daemon"  # its working dir: `northbound: embedded` lives here
    daemon_dir.mkdir()
    state = tmp_path / "state"

    with EmbeddedNorthbound(daemon_dir) as nb:  # kept running, to edit it by hand
        remote = nb.remote
        proc, _out, err = spawn(daemon_dir, "reconcile", "--repo", str(origin), "--branch",
                                "main", "--interval", "1s", "--jitter", "0.2",
                                "--metrics-port", "0", "--metrics-address", "127.0.0.1",
                                "--state-dir", str(state), name="daemon")
        with stopped_at_end(proc):
            port = metrics_port(state, proc, err)
            assert get(port, "/healthz") == (200, "ok\n")

            # 1. The branch is applied; the metrics and readiness say so.
            run = wait_until("c1 applied", lambda: run_of(state, c1, result="applied"),
                             proc, err)
            assert run["applied"]["create"] == 163 and run["reconciled"] == c1
            assert LSP in ports(remote)
            wait_until("ready", lambda: get(port, "/readyz")[0] == 200, proc, err)
            values = metrics(port)
            assert metric(values, "unet_reconcile_runs_total", result="applied") == 1
            assert metric(values, "unet_reconcile_resources", kind="ComputeInstance") == 8
            assert metric(values, "unet_reconcile_apply_duration_seconds_count") == 1
            assert metric(values, "unet_reconcile_applied_objects_total", action="create") == 163
            assert (metric(values, "unet_reconcile_last_run_timestamp_seconds") or 0) > 0
            info = [labels for (name, labels) in values if name == "unet_reconcile_revision_info"]
            assert info and dict(info[0])["last_good"] == c1

            # 2. A push is applied within the interval.
            add_instance(work, "web-9")
            c2 = commit_all(work, "add web-9")
            git(work, "push", "-q", "origin", "main")
            pushed = time.monotonic()
            wait_until("c2 applied", lambda: run_of(state, c2, result="applied"), proc, err)
            assert time.monotonic() - pushed < 10
            assert "unet.acme.vm.web-9.0" in ports(remote)
            wait_until("9 instances in the metrics", lambda: metric(
                metrics(port), "unet_reconcile_resources", kind="ComputeInstance") == 9)

            # 3. An invalid push is refused; the last good revision stays.
            break_repo(work)
            c3 = commit_all(work, "overlapping subnet")
            git(work, "push", "-q", "origin", "main")
            run = wait_until("c3 refused", lambda: run_of(state, c3, result="invalid"),
                             proc, err)
            assert run["reconciled"] == c2 and run["errors"] >= 1
            assert f"kept the last good revision {c2[:12]}" in run["message"]
            assert run["diagnostics"][0]["code"] == "SUBNET_OVERLAP"
            # The run is in the history a moment before its metrics are published.
            wait_until("the metrics of the refused run", lambda: metric(
                metrics(port), "unet_reconcile_last_result",
                unet_reconcile_last_result="invalid") == 1, proc, err)
            values = metrics(port)
            assert (metric(values, "unet_reconcile_runs_total", result="invalid") or 0) >= 1
            assert metric(values, "unet_reconcile_last_result",
                          unet_reconcile_last_result="invalid") == 1
            info = [dict(labels) for (name, labels) in values
                    if name == "unet_reconcile_revision_info"]
            assert info[0]["revision"] == c3 and info[0]["last_good"] == c2
            assert get(port, "/readyz")[0] == 200  # the last good revision is kept: ready
            assert "unet.acme.vm.web-9.0" in ports(remote)

            # 4. A hand edit is repaired (reconcile: repair), still against the last good.
            hand_edit(remote)
            run = wait_until("the hand edit repaired", lambda: run_of(
                state, c3, repaired=lambda n: n >= 1), proc, err)
            assert run["result"] == "invalid" and run["drift"] >= 1
            assert not edited(remote)
            assert (metric(metrics(port), "unet_reconcile_repaired_objects_total") or 0) >= 1

            # 5. Fixed, and switched to `reconcile: report`: a hand edit is only reported.
            git(work, "revert", "--no-edit", "HEAD")
            set_mode(work, "report")
            c4 = commit_all(work, "fixed; report drift only")
            git(work, "push", "-q", "origin", "main")
            wait_until("c4 good", lambda: run_of(state, c4, result=lambda r: r in ("ok",
                                                                               "applied")),
                       proc, err)
            hand_edit(remote)
            run = wait_until("drift reported", lambda: run_of(state, c4, result="drift"),
                             proc, err)
            assert run["drift"] == 1 and run["repaired"] == 0
            assert "reported, not repaired" in run["message"]
            count = len(history(state))
            wait_until("another run", lambda: len(history(state)) > count + 1, proc, err)
            assert edited(remote)  # still: reported only
            values = metrics(port)
            assert metric(values, "unet_reconcile_drift_objects") == 1
            assert metric(values, "unet_reconcile_last_result",
                          unet_reconcile_last_result="drift") == 1
            assert get(port, "/readyz")[0] == 200

            # SIGTERM: the daemon stops after the run in progress.
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0

    lines = [json.loads(line) for line in err.read_text().splitlines() if line.startswith("{")]
    events = [line["event"] for line in lines]
    assert events[0] == "start" and events[-1] == "stop"
    runs = [line for line in lines if line["event"] == "reconcile"]
    assert len(runs) >= 8 and all({"revision", "result", "counts", "duration"} <= r.keys()
                                  for r in runs)

    shown = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "reconcile", "history",
                            "--state-dir", str(state), "--limit", "0"], cwd=daemon_dir,
                           env=_env(), capture_output=True, text=True, check=True).stdout
    assert shown.startswith("STARTED") and c3[:12] in shown and "invalid" in shown
    data = json.loads(subprocess.run(
        [sys.executable, "-m", "unet.reconciler.cli", "reconcile", "history", "--state-dir",
         str(state), "--format", "json", "--limit", "3"], cwd=daemon_dir, env=_env(),
        capture_output=True, text=True, check=True).stdout)
    assert len(data) == 3 and all(run["revision"] == c4 for run in data)


def test_two_reconcilers_never_apply_at_once(tmp_path: Path) -> None:
    repo = ovn_only_repo(tmp_path / "repo")
    state = tmp_path / ".unet" / "reconcile"
    args = ("reconcile", "--once", "--detailed-exitcode", "--path", "repo")
    first = spawn(tmp_path, *args, name="first")
    second = spawn(tmp_path, *args, name="second")
    with stopped_at_end(first[0], second[0]):
        codes = sorted(p.wait(timeout=120) for p, _, _ in (first, second))
    logs = [json.loads(err.read_text().strip().splitlines()[-1]) for _, _, err in
            (first, second)]
    assert codes == [0, 2], [err.read_text() for _, _, err in (first, second)]
    applied, found = sorted(logs, key=lambda log: log["result"])
    assert applied["result"] == "applied" and applied["applied"]["create"] == 163
    assert found["result"] == "ok" and found["applied"] == {}  # it saw the other's work
    one, two = sorted(logs, key=lambda log: log["locked_at"])
    assert one["unlocked_at"] <= two["locked_at"]  # the lock: never at the same time
    assert len(history(state)) == 2
    again = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=tmp_path,
                           env=_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr

    # A reconciler that cannot get the lock in time says who holds it, and applies nothing.
    with EmbeddedNorthbound(tmp_path) as nb:
        holder = Northbound(nb.remote)
        try:
            with holder.lock("example", 10):
                add_instance(repo, "web-9")
                locked = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *args,
                                         "--lock-timeout", "1"], cwd=tmp_path, env=_env(),
                                        capture_output=True, text=True, timeout=120)
        finally:
            holder.close()
        assert locked.returncode == 1
        log = json.loads(locked.stderr.strip().splitlines()[-1])
        assert log["result"] == "locked" and f"pid {os.getpid()}" in log["message"]
        assert "unet.acme.vm.web-9.0" not in ports(nb.remote)


def test_once_refuses_an_invalid_folder_without_touching_a_backend(tmp_path: Path) -> None:
    repo = ovn_only_repo(tmp_path / "repo")
    break_repo(repo)
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    done = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "reconcile", "--once",
                           "--detailed-exitcode", "--path", "repo"], cwd=tmp_path,
                          env={**_env(), "GITHUB_STEP_SUMMARY": str(summary),
                               "GITHUB_OUTPUT": str(outputs)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "invalid: revision (files on disk) refused: 1 validation error, first " \
           "SUBNET_OVERLAP (tenants/acme/network.yaml:" in done.stdout
    assert "result=invalid\n" in outputs.read_text()
    text = summary.read_text()
    assert text.startswith("### unet reconcile: revision refused\n")
    assert "| ❌ | `SUBNET_OVERLAP` |" in text
    assert not (tmp_path / ".unet" / "ovn").exists()  # validated before any backend


def test_durations() -> None:
    assert parse_duration("5m") == 300 and parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90 and parse_duration("2.5") == 2.5
    for bad in ("", "soon", "0s", "5 m"):
        with pytest.raises(Exception, match=r"duration|positive"):
            parse_duration(bad)


def test_the_job_summary_fits_and_puts_the_run_first(tmp_path: Path) -> None:
    """Summary first, plan details cut from the end with a note, under the byte limit."""
    from unet.reconciler.plan_io import plan_to_json
    from unet.reconciler.planner import plan_between
    from unet.reconciler.validate import validate_repo

    repo = ovn_only_repo(tmp_path / "repo")
    plan = plan_to_json(plan_between(None, validate_repo(repo), {"head": {"path": "repo"}}))
    run = Run(revision="c" * 40, branch="main", result="applied", message="applied 123",
              mode="report", counts=plan["counts"], row_counts=plan["row_counts"],
              applied={"create": 123, "update": 0, "delete": 0}, apply_seconds=0.2)
    changed = sum(n for action, n in plan["counts"].items() if action != "no-op")
    whole = markdown_report(run, plan)
    assert whole.startswith("### unet reconcile: changes applied\n")
    assert whole.count("<details>") == changed > 30 and "not shown here" not in whole
    for limit in (12_000, 16_000):  # the summary (counts, reachability, exposure) is ~9 KB
        cut = markdown_report(run, plan, limit=limit)
        assert len(cut.encode()) <= limit
        assert cut.startswith("### unet reconcile: changes applied\n")
        assert f"| resources | 0 | 0 | {plan['counts']['create']} | 0 |" in cut
        assert "more changed resources not shown here" in cut
        assert cut.count("<details>") == cut.count("</details>") < changed
    tight = markdown_report(run, plan, limit=4000)  # less than the summary itself
    assert len(tight.encode()) <= 4000 and tight.endswith("the run's plan has the rest._\n")
