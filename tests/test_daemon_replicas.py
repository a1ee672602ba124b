"""`unet reconcile --replicas`: two daemons over the same backends (a Deployment of two). One
is active and applies; the other stands by and says so on /readyz and in its metrics; when
the active one dies, the other takes over at once, and no two ever apply at once.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from pathlib import Path

from .support.gitops import add_instance, ovn_only_repo
from .support.ovnlab import OvnLab
from .test_gitops_daemon import (
    get,
    history,
    metric,
    metrics,
    metrics_port,
    spawn,
    stopped_at_end,
    wait_until,
)


def _replica(tmp_path: Path, repo: Path, name: str
             ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    state = tmp_path / f"state-{name}"
    proc, _out, err = spawn(tmp_path, "reconcile", "--path", str(repo), "--replicas",
                            "--interval", "1s", "--jitter", "0", "--lock-timeout", "5",
                            "--metrics-port", "0", "--metrics-address", "127.0.0.1",
                            "--state-dir", str(state), name=name)
    return proc, err, state


def _role(port: int) -> str | None:
    status, body = get(port, "/readyz")
    return json.loads(body).get("role") if status == 200 else None


def test_one_replica_applies_the_other_stands_by_and_takes_over(lab: OvnLab,
                                                                tmp_path: Path) -> None:
    repo = ovn_only_repo(tmp_path / "repo", northbound=lab.nb_remote, mode="repair")
    first, first_err, first_state = _replica(tmp_path, repo, "first")
    with stopped_at_end(first):
        first_port = metrics_port(first_state, first, first_err)
        wait_until("the first replica active", lambda: _role(first_port) == "active", first,
                   first_err)
        wait_until("the repo applied", lambda: any(
            r["result"] == "applied" for r in history(first_state)), first, first_err)

        second, second_err, second_state = _replica(tmp_path, repo, "second")
        with stopped_at_end(second):
            second_port = metrics_port(second_state, second, second_err)
            wait_until("the second replica standing by", lambda: len(history(second_state)) >= 2,
                       second, second_err)
            assert _role(second_port) == "standby", "ready to take over: 200, role standby"
            assert {r["result"] for r in history(second_state)} == {"standby"}
            assert metric(metrics(second_port), "unet_reconcile_active") == 0
            assert metric(metrics(first_port), "unet_reconcile_active") == 1

            # The active replica dies without a word; the standby takes over at once.
            killed = time.monotonic()
            first.send_signal(signal.SIGKILL)
            wait_until("the standby active", lambda: _role(second_port) == "active", second,
                       second_err, timeout=10)
            took = time.monotonic() - killed
            assert took < 5, f"took over after {took:.1f} s"

            # ... and applies what the repo asks for next.
            add_instance(repo, "web-9")
            applied = wait_until("web-9 applied by the second replica", lambda: next(
                (r for r in history(second_state) if r["result"] == "applied"), None),
                second, second_err)
            assert applied["applied"]["create"] >= 1
            assert metric(metrics(second_port), "unet_reconcile_active") == 1
            events = [json.loads(line)["event"] for line in second_err.read_text().splitlines()
                      if line.startswith("{")]
            assert "active" in events

    # Never two at once: the windows in which each replica held the backend locks to apply.
    windows = sorted((r["locked_at"], r["unlocked_at"], name)
                     for name, state in (("first", first_state), ("second", second_state))
                     for r in history(state) if r["result"] == "applied" and r["locked_at"])
    for (_start, end, who), (start, _end, other) in itertools.pairwise(windows):
        assert end <= start, f"{who} and {other} applied at once"
