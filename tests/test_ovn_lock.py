"""One run at a time, even when the connection that holds the lock drops mid-apply.

The OVSDB lock belongs to a connection: when it drops, the server gives the lock to the
next run that asked. A run that lost it may write nothing more until it holds the lock
again and knows that nobody else wrote meanwhile. Here a proxy on a unix socket stands
between one run and a real ovsdb-server: the test stalls that run's traffic, cuts the
connection that asked for the lock, lets a second run (with a slightly different repo)
take the lock and apply, then lets the first run go on.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from .conftest import use_northbound
from .support.ovnlab import OvnLab
from .support.ovnrun import (
    apply,
    assert_consistent,
    desired_keys,
    listening_port,
    ovsdb_server,
    plan,
    reaped,
    spawn,
    spawn_at_prompt,
    wait_for_text,
)
from .support.unixproxy import UnixProxy
from .test_plan_golden import edit_text

LAST_TENANT_GROUPS = "tenants/tenant-00100/security-groups.yaml"


def _copy(template: Path, target: Path, remote: str) -> Path:
    shutil.copytree(template, target)
    use_northbound(target, remote)
    return target


def test_a_run_that_lost_its_lock_writes_nothing_after_the_run_that_took_it(
        lab: OvnLab, bench_template: Path, tmp_path: Path) -> None:
    with UnixProxy(tmp_path / "proxy.sock", lab.nb_sock) as proxy:
        first = _copy(bench_template, tmp_path / "first", proxy.remote)
        second = _copy(bench_template, tmp_path / "second", lab.nb_remote)
        edit_text(second, LAST_TENANT_GROUPS, "portFrom: 7946\n      portTo: 7946\n",
                  "portFrom: 7947\n      portTo: 7947\n")
        proc, out, err = spawn(tmp_path, "apply", str(first), "--auto-approve", "--manager",
                               "ovn")
        with reaped(proc):
            wait_for_text(proc, (out, err), "wave 1/")
            proxy.stall()
            assert proxy.cut_lock_connections() == 1
            taken = apply(tmp_path, second, "--lock-timeout", "30")
            assert taken.returncode == 0, taken.stdout[-2000:] + taken.stderr
            proxy.resume()
            proc.wait(timeout=120)
        message = err.read_text()
        assert proc.returncode == 1, out.read_text()[-2000:] + message
        assert "another unet run wrote to installation bench" in message
        assert "nothing more was written" in message

    # Exactly the second run's rows: none twice, none of the first run's stale plan.
    assert_consistent(lab, desired_keys(second))
    assert plan(tmp_path, second, "--detailed-exitcode").returncode == 0
    assert plan(tmp_path, _copy(bench_template, tmp_path / "again", lab.nb_remote),
                "--detailed-exitcode").returncode == 2, "the first repo's plan is not applied"


def test_the_lock_outlives_a_long_look_at_the_plan_over_tcp(example_copy: Path,
                                                             tmp_path: Path) -> None:
    """Over tcp: the server probes a silent client and drops it after two probe intervals
    (10 s by default), and the lock with it. A person reading the plan takes longer."""
    with ovsdb_server(tmp_path / "tcp", "ptcp:0:127.0.0.1") as log:
        remote = f"tcp:127.0.0.1:{listening_port(log)}"
        subprocess.run(["ovn-nbctl", f"--db={remote}", "init"], check=True)
        use_northbound(example_copy, remote)
        out = tmp_path / "apply.out"
        proc, controller = spawn_at_prompt(tmp_path, out, "apply", str(example_copy),
                                           "--manager", "ovn")
        try:
            with reaped(proc):
                wait_for_text(proc, (out,), "Apply these changes?")
                time.sleep(13)
                os.write(controller, b"yes\n")
                assert proc.wait(timeout=60) == 0, out.read_text()[-2000:]
        finally:
            os.close(controller)
        assert "Apply complete" in out.read_text()
        assert "no response to inactivity probe" not in log.read_text()


def test_a_run_that_waits_for_the_lock_says_for_whom_at_once_and_every_ten_seconds(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    out = tmp_path / "first.out"
    first, controller = spawn_at_prompt(tmp_path, out, "apply", str(repo), "--manager", "ovn")
    try:
        with reaped(first):
            wait_for_text(first, (out,), "Apply these changes?")
            second, _out, err = spawn(tmp_path, "plan", str(repo), "--manager", "ovn",
                                      "--lock-timeout", "30")
            with reaped(second):
                notice = f"unet: waiting for the lock unet_example held by " \
                         f"{socket.gethostname()} pid {first.pid} since "
                started = time.monotonic()
                wait_for_text(second, (err,), notice, timeout=5)
                assert time.monotonic() - started < 5, "at once"
                deadline = time.monotonic() + 15
                while err.read_text().count(notice) < 2 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert err.read_text().count(notice) == 2, err.read_text()
                assert time.monotonic() - started >= 9.5, "every ten seconds, not more often"
                os.write(controller, b"no\n")  # the first run lets go: the second goes on
                assert second.wait(timeout=60) == 0, err.read_text()
                assert first.wait(timeout=30) == 1  # cancelled at the prompt
    finally:
        os.close(controller)


def test_a_run_that_another_run_took_over_from_never_clears_its_holder_tag(
        lab: OvnLab) -> None:
    """In a cluster, two runs can each hold the lock on their own member; the one that was
    taken over from must not, on letting go, clear the holder tag the other run set (it
    is what waiting runs read to say for whom they wait)."""
    from unet.managers.ovn.fence import GENERATION_TAG, LOCK_HOLDER_TAG, Fence
    from unet.managers.ovn.rpc import Rpc, Timeouts

    fence = Fence(lambda: Rpc(lab.nb_remote, Timeouts(), None), "took-over")
    fence.acquire(5.0)
    holder, generation = LOCK_HOLDER_TAG + fence.name, GENERATION_TAG + "took-over"
    assert fence.tags()[1][holder].startswith(fence.me)
    # What the other run writes when it takes over on its own member.
    lab.nbctl("set", "NB_Global", ".", f'external_ids:"{holder}"="build-9 pid 7"',
              f'external_ids:"{generation}"="theirs"')
    fence.release()
    assert lab.nbctl("get", "NB_Global", ".", f'external_ids:"{holder}"').strip() == \
        '"build-9 pid 7"'
