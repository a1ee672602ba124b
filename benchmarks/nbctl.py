"""The initial apply against an ovn-nbctl script that loads the same rows.

`nbctl_script(plan)` turns the live plan of an empty Northbound (`unet plan --format json`)
into ovn-nbctl invocations, one per tenant, the provider's rows first: each is one
transaction of `--`-chained `create` commands, with the same columns, references and
external_ids as `unet apply` writes; a row is listed in its parent's column when both are in
the transaction, and added to its parent otherwise. A reference to another tenant's row is
refused (BenchError). `compare_nbctl` times unet's apply against running that script on a
fresh server, one process per invocation; it checks that the script loaded as many rows as
the plan creates and, when asked (the smallest size), that unet then plans no change: the
same rows.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Mapping
from typing import Any

from unet.managers.ovn.schema import PARENT_COLUMNS
from unet.reconciler.objects import TAG_HASH, TAG_INSTALLATION, TAG_KEY, TAG_OWNER, BackendObject
from unet.reconciler.plan_io import changes_from_json

from .fixture import Fixture, run_child
from .measure import measure
from .northbound import OVN_TABLES
from .results import Comparison, Result
from .stages import plan_live
from .system import BenchError


def nbctl_value(value: Any) -> str:
    """A column value in ovn-nbctl's (ovs-vsctl's) syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}={nbctl_value(v)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(nbctl_value(v) for v in value) + "]"
    raise BenchError(f"cannot write {value!r} for ovn-nbctl")


def nbctl_script(plan: dict[str, Any]) -> list[list[str]]:
    """The initial load of a live plan as ovn-nbctl invocations, one per tenant (provider
    rows first), each one transaction of `--`-chained commands: the same rows, the same
    columns and the same external_ids as `unet apply` writes."""
    objects = _created(plan)
    groups: dict[str, list[BackendObject]] = {}
    for obj in objects:
        groups.setdefault(obj.key.split("/")[1], []).append(obj)
    by_key = {obj.key: obj for obj in objects}
    tenant_groups = sorted(g for g in groups if g.startswith("tenant-"))
    ordered = [g for g in sorted(groups) if g not in tenant_groups] + tenant_groups
    return [_transaction(groups[group], by_key, plan["installation"]) for group in ordered]


def _created(plan: dict[str, Any]) -> list[BackendObject]:
    """The objects the plan creates, in the order of its waves."""
    changes = {c.uid: c for c in changes_from_json(plan)}
    order = [step.split(" ", 1)[1] for wave in plan["waves"] for step in wave["steps"]
             if step.startswith("create ")]
    return [after for after in (changes[uid].after for uid in order) if after is not None]


def _transaction(members: list[BackendObject], by_key: Mapping[str, BackendObject],
                 installation: str) -> list[str]:
    """One group's rows as one transaction: each created under an id of the transaction
    (`--id=@rN`), and added to its parent when the parent is not in the group."""
    ids = {obj.key: f"@r{n}" for n, obj in enumerate(members)}
    children: dict[str, dict[str, list[str]]] = {}
    for obj in members:
        if obj.parent is not None and obj.parent[0] in ids:
            children.setdefault(obj.parent[0], {}).setdefault(obj.parent[1], []).append(
                ids[obj.key])
    commands: list[str] = []
    for obj in members:
        values = _columns(obj, ids, children.get(obj.key, {}), installation)
        commands += ["--", f"--id={ids[obj.key]}", "create", obj.table, *values]
        if obj.parent is not None and obj.parent[0] not in ids:
            parent = by_key[obj.parent[0]]
            commands += ["--", "add", parent.table, parent.fields["name"], obj.parent[1],
                         ids[obj.key]]
    return commands


def _columns(obj: BackendObject, ids: Mapping[str, str], children: Mapping[str, list[str]],
             installation: str) -> list[str]:
    """A row's `column=value` arguments: its fields, its references and its children as
    ids of the transaction, and the external_ids unet tags it with."""
    values = [f"{name}={nbctl_value(value)}" for name, value in obj.fields.items()
              if value is not None]
    for column, targets in obj.refs.items():
        missing = [t for t in targets if t not in ids]
        if missing:
            raise BenchError(f"{obj.key} refers to {missing[0]} of another tenant")
        values.append(f"{column}=[{','.join(ids[t] for t in targets)}]")
    for column, members_ids in children.items():
        assert column in PARENT_COLUMNS[obj.table]
        values.append(f"{column}=[{','.join(members_ids)}]")
    tags = {**obj.meta, TAG_INSTALLATION: installation, TAG_OWNER: obj.owner, TAG_KEY: obj.key,
            TAG_HASH: obj.content_hash}
    values.append(f"external_ids={nbctl_value(tags)}")
    return values


def compare_nbctl(fx: Fixture, unet: Result | None, heavy: int, check_equal: bool) -> Comparison:
    """unet's initial apply against an ovn-nbctl script loading the same rows."""
    if unet is None:
        unet = measure("apply", "folder", fx, heavy)
    invocations, rows = _script(fx)
    fx.nb.start()
    load = os.getloadavg()[0]
    print(f"  ovn-nbctl script: {len(invocations):,} invocations, {rows:,} rows ...", end="",
          file=sys.stderr, flush=True)
    _write_sample(fx, invocations)
    server_before = fx.nb.cpu_s()
    start = time.perf_counter()
    cpu, failure = _run_script(fx, invocations)
    wall = time.perf_counter() - start
    server_cpu = fx.nb.cpu_s() - server_before
    print(f" {wall:.1f}s", file=sys.stderr)
    ok, note = (False, failure) if failure else _loaded(fx, rows, len(invocations), check_equal)
    return Comparison("initial apply vs ovn-nbctl script", fx.tenants,
                      "unet apply (validate, observe, plan, apply, confirm)",
                      "ovn-nbctl, one invocation (one transaction) per tenant",
                      unet.wall_s, unet.cpu_s, wall, cpu, unet.server_cpu_s, server_cpu,
                      ok=ok and unet.ok, note=note, load=round(load, 2))


def _script(fx: Fixture) -> tuple[list[list[str]], int]:
    """The script of the live plan of an empty server, and how many rows the plan creates."""
    fx.nb.start()
    fx.applied = False
    planned = plan_live(fx, "nbctl-plan", "--format", "json")
    plan = planned.output_json()
    if not plan:
        raise BenchError(f"the plan for the ovn-nbctl script failed: {planned.tail()}")
    rows = sum(1 for c in plan["backend_changes"] if "create" in c["actions"])
    return nbctl_script(plan), rows


def _write_sample(fx: Fixture, invocations: list[list[str]]) -> None:
    """The script's first invocations as a shell script, for people to read."""
    script = fx.scratch / "nbctl-script.sh"
    script.write_text("".join(f"ovn-nbctl --db={fx.nb.remote} "
                              + " ".join(shlex.quote(a) for a in args) + "\n"
                              for args in invocations[:3]) + "# ...\n")


def _run_script(fx: Fixture, invocations: list[list[str]]) -> tuple[float, str]:
    """Run the invocations in order, until one fails: their CPU time, and what failed."""
    cpu = 0.0
    for args in invocations:
        run = run_child(["ovn-nbctl", f"--db={fx.nb.remote}", *args], fx, "nbctl")
        cpu += run.cpu_s
        if run.exit_code != 0:
            return cpu, f"ovn-nbctl failed: {run.tail()}"
    return cpu, ""


def _loaded(fx: Fixture, rows: int, invocations: int, check_equal: bool) -> tuple[bool, str]:
    """Whether the script loaded the plan's rows (and, when `check_equal`, the same rows as
    unet would: unet plans no change after it); the note for the table."""
    loaded = sum(len(fx.nb.ours(table, "_uuid")) for table in OVN_TABLES)
    if loaded != rows:
        return False, f"the script loaded {loaded:,} rows, the plan has {rows:,}"
    note = f"{rows:,} rows in {invocations:,} invocations"
    if not check_equal:
        return True, note
    if plan_live(fx, "nbctl-verify", "--detailed-exitcode").exit_code != 0:
        return False, "after the script, unet plans changes: the rows differ"
    return True, note + "; unet plans no change after it (same rows)"
