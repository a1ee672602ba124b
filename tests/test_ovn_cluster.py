"""unet against a clustered Northbound database: three ovsdb-servers of one Raft cluster
(`cluster` fixture, tests/support/ovncluster.py), reached through the comma-separated
remotes, while members die, stall and come back.

What unet promises (docs/ovn.md, "Across leader changes"): a run whose leader dies
either finishes on the new leader or stops with a clear error, never hangs and never
leaves a row twice or a row without its parent; the next run converges; two runs never
interleave their writes, even while a transaction of the first could still land on a
stalled old leader. Every wait is bounded by the ovn config's timeouts.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .conftest import use_northbound
from .support.ovncluster import OvnCluster
from .support.ovnrun import (
    TABLES,
    apply,
    desired_keys,
    ovsdb_server,
    plan,
    reaped,
    spawn,
    spawn_at_prompt,
    wait_for_text,
)
from .support.unixproxy import UnixProxy

INSTALLATION = "bench"
#: Non-root tables: parent table and column that hold their rows.
PARENTS = {"Logical_Switch_Port": [("Logical_Switch", "ports")],
           "Logical_Router_Port": [("Logical_Router", "ports")],
           "ACL": [("Port_Group", "acls"), ("Logical_Switch", "acls")],
           "NAT": [("Logical_Router", "nat")],
           "Logical_Router_Static_Route": [("Logical_Router", "static_routes")],
           "Gateway_Chassis": [("Logical_Router_Port", "gateway_chassis")]}
#: Short bounds, so that faults cost the tests seconds, not minutes.
TIMEOUTS = {"connectTimeoutSeconds": 2, "leaderTimeoutSeconds": 20,
            "transactionTimeoutSeconds": 5}


# --- repos ------------------------------------------------------------------------------


def make_repo(template: Path, target: Path, remote: str, tenants: int | None = None,
              **timeouts: float) -> Path:
    """A copy of the generated repo pointed at `remote`, with the timeouts, without
    `prevent-destroy` (so that tenants can leave), and with the first `tenants` only."""
    shutil.copytree(template, target)
    use_northbound(target, remote)
    managers = target / "provider" / "managers.yaml"
    settings = "".join(f"    {k}: {v:g}\n" for k, v in {**TIMEOUTS, **timeouts}.items())
    text = managers.read_text()
    line = f"    northbound: {remote}\n"
    assert line in text
    managers.write_text(text.replace(line, line + settings, 1))
    for network in target.glob("tenants/*/network.yaml"):
        network.write_text(network.read_text().replace('prevent-destroy: "true"',
                                                       'prevent-destroy: "false"'))
    if tenants is not None:
        for folder in sorted((target / "tenants").iterdir())[tenants:]:
            shutil.rmtree(folder)
            (target / "provider" / "tenants" / f"{folder.name}.yaml").unlink()
    return target


def repos(template: Path, tmp_path: Path, remote: str) -> tuple[Path, Path]:
    """Every tenant, and half of them: applying one after the other creates or deletes
    half of the rows."""
    full = make_repo(template, tmp_path / "full", remote)
    half = make_repo(template, tmp_path / "half", remote,
                     len(list((template / "tenants").iterdir())) // 2)
    return full, half


# --- what the database holds ------------------------------------------------------------


def census(cluster: OvnCluster) -> tuple[dict[str, Counter[str]], list[str]]:
    """Per table, how many rows carry each `unet:key` of the installation; and every
    problem: a key twice, a row without the installation's tag, a row of ours in a
    non-root table that no row of ours holds (an orphan, which OVSDB would have
    garbage-collected had nothing held it) or that two rows hold."""
    found = cluster.select(TABLES)
    counts: dict[str, Counter[str]] = {}
    problems: list[str] = []
    ours: dict[str, dict[str, dict[str, Any]]] = {}
    for table, rows in found.items():
        mine = {row["_uuid"][1]: row for row in rows
                if _tags(row).get("unet:installation") == INSTALLATION}
        ours[table] = mine
        counts[table] = Counter(_tags(row).get("unet:key") for row in mine.values())
        problems += [f"{table}: {key} {n} times" for key, n in counts[table].items() if n > 1]
        problems += [f"{table}: {len(rows) - len(mine)} rows without our tag"] \
            if len(rows) != len(mine) else []
    for child, parents in PARENTS.items():
        held: Counter[str] = Counter()
        for table, column in parents:
            for row in ours[table].values():
                held.update(_uuids(row[column]))
        for uuid, row in ours[child].items():
            key = _tags(row).get("unet:key")
            if held[uuid] != 1:
                problems.append(f"{child} {key}: held by {held[uuid]} rows of ours")
    return counts, problems


def _tags(row: dict[str, Any]) -> dict[str, str]:
    return dict(row["external_ids"][1])


def _uuids(value: Any) -> list[str]:
    if isinstance(value, list) and value and value[0] == "set":
        return [v[1] for v in value[1]]
    return [value[1]] if isinstance(value, list) and value and value[0] == "uuid" else []


def assert_converged(cluster: OvnCluster, repo: Path, cwd: Path) -> int:
    """No problem in the census, exactly the rows `repo` needs, and an empty plan."""
    counts, problems = census(cluster)
    assert problems == [], problems[:10]
    desired = desired_keys(repo)
    for table in TABLES:
        assert set(counts[table]) == desired.get(table, set()), table
    result = plan(cwd, repo, "--detailed-exitcode")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    return sum(c.total() for c in counts.values())


# --- running unet while the cluster misbehaves ------------------------------------------


def finished(proc: subprocess.Popen[bytes], out: Path, err: Path, timeout: float
             ) -> tuple[int, str, str]:
    """The run's exit code and output once it ends, within `timeout` (else it hung).
    It either applied everything or stopped with one clear error: never a traceback."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"unet hung: still running after {timeout:g} s\n"
                             + err.read_text()[-2000:]) from exc
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert "Traceback" not in stdout + stderr, stderr
    assert "internal error" not in stderr, stderr
    if proc.returncode == 0:
        assert "Apply complete" in stdout or "No changes." in stdout, stdout[-2000:]
    else:
        assert proc.returncode == 1, stderr
        last = [line for line in stderr.splitlines() if line.startswith("unet: ")]
        assert last, f"no error message: {stderr[-2000:]}"
    return proc.returncode, stdout, stderr


def the_error(stderr: str) -> str:
    return next(line for line in reversed(stderr.splitlines()) if line.startswith("unet: "))


# --- 1. the leader dies, again and again ------------------------------------------------

KILLS = 12
SEED = 18


def test_applies_survive_the_leader_killed_at_random_moments(
        cluster: OvnCluster, cluster_template: Path, tmp_path: Path) -> None:
    full, half = repos(cluster_template, tmp_path, cluster.remote)
    started = time.monotonic()
    first = apply(tmp_path, full)
    assert first.returncode == 0, first.stderr
    span = time.monotonic() - started  # one whole apply here: start-up to the last read
    rng = random.Random(SEED)
    landed: Counter[str] = Counter()
    outcomes: list[str] = []
    pace = 1.0  # the waits before a kill shrink each time one comes after the run ended
    n = 0
    while landed.total() - landed["after the run"] < KILLS:
        assert n < KILLS + 8, f"too many runs ended before the kill: {dict(landed)}"
        repo = (half, full)[n % 2]  # every run deletes or creates half of the rows
        n += 1
        proc, out, err = spawn(tmp_path, "apply", str(repo), "--auto-approve", "--manager",
                               "ovn")
        with reaped(proc):
            # A third of the kills anywhere in the run, the others while it writes (the
            # plan is printed right before the first transaction).
            if rng.random() < 1 / 3:
                deadline = time.monotonic() + rng.uniform(0.2, span) * pace
                while time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.005)
            else:
                wait_for_text(proc, (out,), "Backend rows:")
                time.sleep(rng.uniform(0.0, 0.4) * pace)
            leader = cluster.leader()
            if proc.poll() is not None:
                landed["after the run"] += 1
                pace *= 0.7  # a faster machine (or a warmer cache) than the first apply's
            else:
                printed = out.read_text()
                landed["writing" if "Backend rows:" in printed and "Apply complete"
                       not in printed else "reading or planning"] += 1
                cluster.kill(leader)
            code, _stdout, stderr = finished(proc, out, err, timeout=120)
        outcomes.append("finished" if code == 0 else the_error(stderr))
        if leader.pid() is None:
            cluster.restart(leader)  # the cluster keeps its quorum for the next kill
        problems = census(cluster)[1]
        assert problems == [], f"after run {n}: {problems[:10]}"
    killed = time.monotonic() - started

    assert landed["writing"] >= 4, f"too few kills hit the writes: {dict(landed)}"
    last = apply(tmp_path, full)
    assert last.returncode == 0, last.stdout[-2000:] + last.stderr
    rows = assert_converged(cluster, full, tmp_path)
    errors = Counter(o for o in outcomes if o != "finished")
    print(f"\n{KILLS} leader kills in {n} runs ({dict(landed)}) in {killed:.0f} s; "
          f"{outcomes.count('finished')} runs finished"
          + (f", the others stopped with: {dict(errors)}" if errors else "")
          + f"; then {rows} rows, converged")


# --- 2. a member comes back with a stale log --------------------------------------------


def test_a_member_restarted_with_a_stale_log_catches_up(cluster_template: Path,
                                                         tmp_path: Path) -> None:
    with OvnCluster(tmp_path / "cl", northd=True) as cluster:
        _stale_member(cluster, cluster_template, tmp_path)
        # ovn-northd followed the leader through all of it and compiled the result.
        cluster.sync()
        datapaths = subprocess.run(["ovn-sbctl", f"--db={cluster.sb_remote}",
                                    "--columns=external_ids", "list", "Datapath_Binding"],
                                   capture_output=True, text=True, check=True).stdout
        found = cluster.select(("Logical_Switch", "Logical_Router"), ("name",))
        for row in found["Logical_Switch"] + found["Logical_Router"]:
            assert f"name={row['name']}" in datapaths, row["name"]


def _stale_member(cluster: OvnCluster, cluster_template: Path, tmp_path: Path) -> None:
    full, half = repos(cluster_template, tmp_path, cluster.remote)
    assert apply(tmp_path, full).returncode == 0
    stale = cluster.followers()[0]
    cluster.terminate(stale)
    behind = cluster.index(cluster.leader())
    result = apply(tmp_path, half)  # two of three members: still a majority
    assert result.returncode == 0, result.stderr
    assert cluster.index(cluster.leader()) > behind

    cluster.restart(stale)  # waits until it has applied what the leader has
    mine = cluster.select(TABLES, ("_uuid",))
    theirs = _select_on(stale, TABLES)
    assert {t: sorted(r["_uuid"][1] for r in rows) for t, rows in theirs.items()} == \
        {t: sorted(r["_uuid"][1] for r in rows) for t, rows in mine.items()}
    assert_converged(cluster, half, tmp_path)

    # The member that was behind leads: unet works on what it holds.
    for _ in range(6):
        leader = cluster.leader()
        if leader is stale:
            break
        cluster.kill(leader)
        cluster.leader()
        cluster.restart(leader)
    assert cluster.leader() is stale, "the restarted member never became the leader"
    assert plan(tmp_path, half, "--detailed-exitcode").returncode == 0
    result = apply(tmp_path, full)
    assert result.returncode == 0, result.stderr
    assert_converged(cluster, full, tmp_path)


def _select_on(member: Any, tables: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Rows read from one member itself (leader or not)."""
    import json

    request = ["OVN_Northbound", *({"op": "select", "table": t, "where": [],
                                    "columns": ["_uuid"]} for t in tables)]
    result = subprocess.run(["ovsdb-client", "--timeout=30", "transact", member.remote,
                             json.dumps(request)], capture_output=True, text=True, check=True)
    return {t: r["rows"] for t, r in zip(tables, json.loads(result.stdout), strict=True)}


# --- 3. the leader stalls (a partition, as far as the others can tell) ------------------


def test_an_apply_goes_on_when_its_leader_stalls(
        cluster: OvnCluster, cluster_template: Path, tmp_path: Path) -> None:
    full, half = repos(cluster_template, tmp_path, cluster.remote)
    for repo in (full, half):  # the stalled run creates half of the rows
        assert apply(tmp_path, repo).returncode == 0
    proc, out, err = spawn(tmp_path, "apply", str(full), "--auto-approve", "--manager", "ovn")
    with reaped(proc):
        wait_for_text(proc, (out,), "Backend rows:")
        time.sleep(0.1)
        old = cluster.leader()
        cluster.pause(old)
        stalled = time.monotonic()
        try:
            new = cluster.leader()
            assert new is not old
            code, _stdout, stderr = finished(proc, out, err, timeout=90)
            waited = time.monotonic() - stalled
        finally:
            cluster.resume(old)
    assert code == 0, stderr  # it finished on the new leader
    bound = TIMEOUTS["transactionTimeoutSeconds"] + TIMEOUTS["connectTimeoutSeconds"] * 3
    assert waited < bound + 30, f"took {waited:.1f} s after the leader stalled"
    # The old leader comes back as a follower; whatever it still had of the run's
    # transaction did not land twice.
    cluster.wait_caught_up(old)
    time.sleep(1)
    assert_converged(cluster, full, tmp_path)
    print(f"\nthe leader stalled mid-apply; the run went on and finished {waited:.1f} s later")


# --- 4. two runs and the lock across a leader change ------------------------------------


def _unet_transactions(cluster: OvnCluster) -> list[tuple[int, str]]:
    """The committed transactions of unet runs, oldest first, as (pid, what) from the
    comment each carries ("unet bench: HOST pid N writes")."""
    leader = cluster.leader()
    for member in cluster.members:
        cluster.wait_caught_up(member)
    out = []
    for entry in cluster.committed_log(leader):
        comment = entry["data"][1].get("_comment", "")
        if comment.startswith(f"unet {INSTALLATION}: "):
            words = comment.split()
            pid = int(words[words.index("pid") + 1])
            out.append((pid, " ".join(words[words.index("pid") + 2:])))
    return out


def _lock_handover(cluster: OvnCluster, cluster_template: Path, tmp_path: Path,
                   fault: str) -> None:
    # The first run waits long for its stalled transaction; the second gives up on the
    # stalled leader quickly: so the second takes over while the first's transaction
    # could still land.
    first_repo = make_repo(cluster_template, tmp_path / "first", cluster.remote,
                           transactionTimeoutSeconds=15)
    second_repo = make_repo(cluster_template, tmp_path / "second", cluster.remote,
                            len(list((cluster_template / "tenants").iterdir())) // 2,
                            transactionTimeoutSeconds=3)
    out = tmp_path / "first.out"
    first, controller = spawn_at_prompt(tmp_path, out, "apply", str(first_repo), "--manager",
                                        "ovn", "--lock-timeout", "120")
    try:
        with reaped(first):
            wait_for_text(first, (out,), "Apply these changes?")
            second, out2, err2 = spawn(tmp_path, "apply", str(second_repo), "--auto-approve",
                                       "--manager", "ovn", "--lock-timeout", "120")
            with reaped(second):
                wait_for_text(second, (err2,), "waiting for the lock unet_bench held by")
                leader = cluster.leader()
                if fault == "stop":
                    cluster.pause(leader)  # the first run's writes will sit in it
                    os.write(controller, b"yes\n")
                    wait_for_text(second, (out2, err2), "wave 1/", timeout=60)
                    cluster.resume(leader)  # what it holds of the first run may land now
                else:
                    os.write(controller, b"yes\n")
                    time.sleep(random.Random(SEED).uniform(0.05, 0.4))
                    cluster.kill(leader)
                code2, _o2, stderr2 = finished(second, out2, err2, timeout=120)
            first.wait(timeout=120)
    finally:
        os.close(controller)
    text = out.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert code2 == 0, stderr2
    if leader.pid() is None:
        cluster.restart(leader)
    else:
        cluster.wait_caught_up(leader)
    if first.returncode != 0:  # it lost the race: it says so, and wrote nothing more
        assert first.returncode == 1, text[-3000:]
        assert "another unet run wrote to installation bench" in text, text[-3000:]
        assert "nothing more was written" in text

    # The proof, from the Raft log: the second run's transactions form one block, and
    # the first run wrote nothing after it began (it may only clear the holder tag).
    log = _unet_transactions(cluster)
    runs = [pid for pid, _what in log]
    assert first.pid in runs and second.pid in runs, log
    begin = runs.index(second.pid)
    end = len(runs) - runs[::-1].index(second.pid)
    assert set(runs[begin:end]) == {second.pid}, f"interleaved: {log}"
    assert all(what == "lets go of the lock" for pid, what in log[end:] if pid == first.pid), \
        f"the first run wrote after the second: {log[end:]}"
    assert [what for pid, what in log if pid == second.pid][-1] == "lets go of the lock"
    assert_converged(cluster, second_repo, tmp_path)
    outcome = "finished first" if first.returncode == 0 else "stopped"
    print(f"\n{fault}: the first run {outcome}; {sum(1 for p in runs if p == first.pid)} "
          f"transactions of the first run, then {end - begin} of the second")


def test_two_runs_never_interleave_when_the_leader_dies(
        cluster: OvnCluster, cluster_template: Path, tmp_path: Path) -> None:
    _lock_handover(cluster, cluster_template, tmp_path, "kill")


def test_two_runs_never_interleave_when_the_leader_stalls(
        cluster: OvnCluster, cluster_template: Path, tmp_path: Path) -> None:
    _lock_handover(cluster, cluster_template, tmp_path, "stop")


# --- 5. every wait is bounded -----------------------------------------------------------


def test_no_leader_is_an_error_within_the_leader_timeout(
        cluster: OvnCluster, cluster_template: Path, tmp_path: Path) -> None:
    repo = make_repo(cluster_template, tmp_path / "repo", cluster.remote,
                     leaderTimeoutSeconds=3)
    lonely, *gone = cluster.members
    for member in gone:
        cluster.kill(member)
    started = time.monotonic()
    result = plan(tmp_path, repo)
    waited = time.monotonic() - started
    assert result.returncode == 1
    print(f"\nno leader: error after {waited:.1f} s: {result.stderr}")
    assert f"no leader among {lonely.remote}, " in result.stderr, result.stderr
    assert "within 3 s (leaderTimeoutSeconds)" in result.stderr
    assert f"{lonely.remote} is not " in result.stderr  # what each said
    assert 3 <= waited < 3 + 20, waited
    for member in gone:
        cluster.restart(member, wait=False)
    cluster.wait_until_settled()
    result = apply(tmp_path, repo)
    assert result.returncode == 0, result.stderr


def test_a_server_that_accepts_but_never_answers_is_an_error_within_the_bounds(
        cluster_template: Path, tmp_path: Path) -> None:
    socket_path = tmp_path / "nb" / "nb.sock"
    with ovsdb_server(tmp_path / "nb", f"punix:{socket_path}"), \
            UnixProxy(tmp_path / "silent.sock", socket_path) as proxy:
        subprocess.run(["ovn-nbctl", f"--db=unix:{socket_path}", "init"], check=True)
        repo = make_repo(cluster_template, tmp_path / "repo", proxy.remote,
                         transactionTimeoutSeconds=3)

        # Connecting: the proxy accepts, and nothing ever comes back.
        proxy.stall()
        started = time.monotonic()
        result = plan(tmp_path, repo)
        at_connect = time.monotonic() - started
        assert result.returncode == 1
        assert f"cannot reach the OVN Northbound database at {proxy.remote}: {proxy.remote} " \
               "accepted the connection but did not answer within 2 s (connectTimeoutSeconds)" \
               in result.stderr, result.stderr
        assert at_connect < 2 + 15, at_connect

        # Mid-apply: the server stops answering; the run gives up within the transaction
        # timeout, then the lock timeout to get it back.
        proxy.resume()
        proc, out, err = spawn(tmp_path, "apply", str(repo), "--auto-approve", "--manager",
                               "ovn", "--lock-timeout", "4")
        with reaped(proc):
            wait_for_text(proc, (out,), "Backend rows:")
            proxy.stall()
            stalled = time.monotonic()
            code, _stdout, stderr = finished(proc, out, err, timeout=60)
            waited = time.monotonic() - stalled
        assert code == 1, stderr
        error = the_error(stderr)
        assert proxy.remote in error and "within" in error, error
        assert "nothing more was written" in error or "reading" in error, error
        assert waited < 3 + 4 + 2 + 15, waited
        print(f"\nsilent at connect: error after {at_connect:.1f} s; "
              f"silent mid-apply: error {waited:.1f} s later: {error}")
