"""One run at a time, even when the connection that holds the lock drops mid-apply.

The OVSDB lock belongs to a connection: when it drops, the server gives the lock to the
next run that asked. A run that lost it may write nothing more until it holds the lock
again and knows that nobody else wrote meanwhile. Here a proxy on a unix socket stands
between one run and a real ovsdb-server: the test stalls that run's traffic, cuts the
connection that asked for the lock, lets a second run (with a slightly different repo)
take the lock and apply, then lets the first run go on.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .conftest import use_northbound
from .ovnlab import OvnLab
from .ovnrun import (
    apply,
    assert_consistent,
    desired_keys,
    plan,
    reaped,
    spawn,
    wait_for_text,
)
from .test_plan_golden import edit_text
from .unixproxy import UnixProxy

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
