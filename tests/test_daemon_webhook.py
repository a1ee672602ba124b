"""`POST /hooks/git` (issue 17's webhook): a signed push webhook makes the daemon fetch and
apply at once, although its interval is an hour; a forged one is refused and triggers
nothing; without --webhook-secret-env there is no endpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from unet.reconciler.daemon.endpoints import listen
from unet.reconciler.daemon.metrics import PORT_FILE, Metrics

from .support.gitops import add_instance, commit_all, git, ovn_only_repo
from .test_gitops_daemon import (
    _env,
    history,
    metrics_port,
    pushed_origin,
    spawn,
    stopped_at_end,
    wait_until,
)

SECRET = b"s3cret-of-the-test"


def _post(port: int, body: bytes, signature: str | None, event: str = "push") -> int:
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    request = urllib.request.Request(f"http://127.0.0.1:{port}/hooks/git", data=body,
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _signed(body: bytes, secret: bytes = SECRET) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def test_a_signed_push_webhook_makes_the_daemon_apply_at_once(tmp_path: Path) -> None:
    work = ovn_only_repo(tmp_path / "work", mode="repair")
    origin, first = pushed_origin(tmp_path, work)
    daemon_dir, state = tmp_path / "daemon", tmp_path / "state"
    daemon_dir.mkdir()
    proc, err = _daemon(daemon_dir, state, "--repo", str(origin), secret=True)
    with stopped_at_end(proc):
        port = metrics_port(state, proc, err)
        wait_until("the first revision applied", lambda: any(
            r["revision"] == first and r["result"] == "applied" for r in history(state)),
            proc, err)
        # The run its own writes wake (it watches the database), which finds nothing to do.
        wait_until("the daemon quiet", lambda: history(state)[-1]["result"] == "ok", proc, err)

        add_instance(work, "web-9")
        second = commit_all(work, "web-9")
        git(work, "push", "-q", "origin", "main")
        body = json.dumps({"ref": "refs/heads/main", "after": second}).encode()

        assert _post(port, body, None) == 401
        assert _post(port, body, _signed(body, b"not the secret")) == 401
        assert _post(port, body, _signed(body + b" ")) == 401
        assert _post(port, body, _signed(body), event="ping") == 200
        time.sleep(2)
        assert not any(r["revision"] == second for r in history(state)), \
            "refused or ping webhooks trigger nothing"

        sent = time.monotonic()
        assert _post(port, body, _signed(body)) == 202
        wait_until("the pushed revision applied", lambda: any(
            r["revision"] == second and r["result"] == "applied" for r in history(state)),
            proc, err, timeout=30)
        assert time.monotonic() - sent < 30, "an hour's interval, applied at once"


def test_without_a_secret_there_is_no_endpoint_and_a_missing_secret_is_said(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    missing = subprocess.run(
        [sys.executable, "-m", "unet.reconciler.cli", "reconcile", "--path", str(tmp_path),
         "--webhook-secret-env", "UNET_TEST_HOOK_UNSET"], cwd=tmp_path,
        env={k: v for k, v in _env().items() if k != "UNET_TEST_HOOK_UNSET"},
        capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 1
    assert "--webhook-secret-env UNET_TEST_HOOK_UNSET: the environment variable is not set" \
        in missing.stderr
    work = ovn_only_repo(tmp_path / "work")
    proc, err = _daemon(tmp_path, state, "--path", str(work), secret=False)
    with stopped_at_end(proc):
        port = metrics_port(state, proc, err)
        body = b"{}"
        assert _post(port, body, _signed(body)) == 404
        _first_run_done(state, proc, err)


def test_a_malformed_request_is_refused_without_a_traceback(tmp_path: Path) -> None:
    work, state = ovn_only_repo(tmp_path / "work"), tmp_path / "state"
    proc, err = _daemon(tmp_path, state, "--path", str(work), secret=True)
    with stopped_at_end(proc):
        port = metrics_port(state, proc, err)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n"
                         b"X-Hub-Signature-256: sha256=00\r\n\r\n")
            assert conn.recv(200).startswith(b"HTTP/1.0 400")
        assert _post(port, b"x" * 100, None) == 401  # still serving
        _first_run_done(state, proc, err)
        assert "Traceback" not in err.read_text()


def _first_run_done(state: Path, proc: subprocess.Popen[bytes], err: Path) -> None:
    """Before the daemon is killed: its run (and the database server it started) ended."""
    wait_until("the first run recorded", lambda: history(state), proc, err)


def _daemon(cwd: Path, state: Path, *source: str, secret: bool
            ) -> tuple[subprocess.Popen[bytes], Path]:
    """`unet reconcile` with an hour's interval (only a webhook can make it run sooner),
    taking SECRET from UNET_TEST_HOOK when `secret`."""
    hook = ("--webhook-secret-env", "UNET_TEST_HOOK") if secret else ()
    proc, _out, err = spawn(cwd, "reconcile", *source, "--interval", "1h", "--metrics-port",
                            "0", "--metrics-address", "127.0.0.1", "--state-dir", str(state),
                            *hook, name="daemon", env={"UNET_TEST_HOOK": SECRET.decode()})
    return proc, err


_CLIENT = r"""
import json, sys, time, urllib.error, urllib.request
port, signature, body = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
time.sleep(0.5)  # the daemon is busy by now
answers = {}
for name, request in (
        ("healthz", urllib.request.Request(f"http://127.0.0.1:{port}/healthz")),
        ("webhook", urllib.request.Request(
            f"http://127.0.0.1:{port}/hooks/git", data=body, method="POST",
            headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": signature}))):
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            answers[name] = [response.status, time.monotonic() - started]
    except Exception as exc:
        answers[name] = [repr(exc), time.monotonic() - started]
print(json.dumps(answers))
"""


def _hold_the_interpreter_lock(seconds: float) -> float:
    """Long C-level work that never lets other threads run (as decoding a huge reply or a
    full collection of a big heap does): a regular expression that backtracks, sized to
    last at least `seconds`."""
    start = time.monotonic()
    re.match(r"(a+)+$", "a" * 20 + "b")  # each further "a" doubles the time
    unit = max(time.monotonic() - start, 1e-3)
    n = 21 + max(0, math.ceil(math.log2(seconds / unit)))  # one more: a busy machine
    start = time.monotonic()
    re.match(r"(a+)+$", "a" * n + "b")
    return time.monotonic() - start


def test_health_and_webhooks_are_answered_while_the_daemon_is_busy(tmp_path: Path) -> None:
    """GitHub gives a webhook 10 s and a kubelet's liveness probe 1 s; a daemon run at
    thousands of tenants holds Python's lock for longer than that at a time. The
    endpoints must not wait for it, and the push still wakes the daemon once it is free."""
    metrics = Metrics()
    endpoints = listen(metrics, "127.0.0.1", 0, tmp_path, SECRET)
    port = int((tmp_path / PORT_FILE).read_text())
    body = b'{"ref": "refs/heads/main"}'
    try:
        client = subprocess.Popen([sys.executable, "-c", _CLIENT, str(port), _signed(body),
                                   body.decode()], stdout=subprocess.PIPE, text=True)
        held = _hold_the_interpreter_lock(3.0)
        out, _ = client.communicate(timeout=30)
        answers = json.loads(out)
        assert held >= 3.0, f"the lock was held {held:.1f} s only: the test proves nothing"
        assert answers["healthz"][0] == 200, answers
        assert answers["webhook"][0] == 202, answers
        assert endpoints.wake.wait(5), "the webhook woke the daemon once it was free"
    finally:
        endpoints.close()


def test_the_daemon_stops_with_a_reason_when_its_endpoints_process_ends(tmp_path: Path) -> None:
    """A daemon whose /healthz nobody answers any more is of no use behind a liveness
    probe: it says why and stops, so that its supervisor starts it again whole."""
    work, state = ovn_only_repo(tmp_path / "work"), tmp_path / "state"
    proc, err = _daemon(tmp_path, state, "--path", str(work), secret=True)
    with stopped_at_end(proc):
        port = metrics_port(state, proc, err)
        _first_run_done(state, proc, err)
        children = [int(pid) for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                    .read_text().split()
                    if b"daemon.endpoints" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(children) == 1, "the endpoints are served by a process of their own"
        os.kill(children[0], signal.SIGKILL)
        assert proc.wait(timeout=30) == 1
        assert "the process serving /metrics, /healthz and the webhook ended" in err.read_text()
        assert "Traceback" not in err.read_text()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
