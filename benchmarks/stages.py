"""The stages: the unet commands the benchmark measures, and how each is set up and judged.

A `Stage` gives a command's arguments for a size, an untimed `prepare` before every
repetition (an empty cache, a fresh backend, an applied backend with drift), a `check` that
reads the run's output into an `Outcome` (clean or not, and a note for the table), and an
untimed `verify` after the last repetition. `STAGES` is the table of them, by name, in the
order they are measured; `DAEMON_STAGES` are measured by benchmarks/daemon.py and each is
compared with the one-shot stage it replaces; `CLUSTERED` pairs a stage on the 3-member
cluster with the same stage on one server; `SOURCES` are the ways a stage reads the repo
(the folder, or `--rev HEAD`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .fixture import Fixture, Run, run_unet
from .generate import PR_BRANCH
from .northbound import NbServer
from .system import BenchError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run's output says: clean or not, and a short note for the table."""

    ok: bool
    note: str = ""
    errors: int = 0
    warnings: int = 0


@dataclass(frozen=True, slots=True)
class Stage:
    """A unet command to measure.

    `argv` gives its arguments for a size (rev: None for the files on disk, or a Git
    revision). `prepare` runs before every repetition, untimed (e.g. a fresh backend
    before `apply`); `check` reads the run's output; `verify` runs once after the
    last repetition, untimed, and returns a problem or None. `sources` are the ways
    the stage can read the repo; `heavy` stages are repeated `--heavy-repeat` times.
    """

    argv: Callable[[Fixture, str | None], list[str]]
    check: Callable[[Fixture, Run], Outcome]
    prepare: Callable[[Fixture, str | None], None] | None = None
    verify: Callable[[Fixture], str | None] | None = None
    sources: tuple[str, ...] = ("folder", "rev")
    heavy: bool = False
    title: str = ""
    backend: str = "standalone"  # or "cluster": three ovsdb-servers in one Raft cluster

    def reads(self, fx: Fixture) -> Path:
        """The copy of the repo the stage reads: the live one for the live stages."""
        return fx.repo if self.sources != ("folder",) else fx.live


def _validate_argv(fx: Fixture, rev: str | None) -> list[str]:
    argv = ["validate", str(fx.repo), "--format", "json"]
    return [*argv, "--rev", rev] if rev else argv


def _check_validate(fx: Fixture, run: Run) -> Outcome:
    summary = run.output_json().get("summary", {})
    if not summary:
        return Outcome(False, f"{run.exited()}: {run.tail()}", errors=-1)
    errors, warnings = int(summary.get("errors", -1)), int(summary.get("warnings", -1))
    return Outcome(run.exit_code == 0 and errors == 0,
                   f"{summary.get('documents', 0):,} manifests, {summary.get('files', 0):,} "
                   "files", errors, warnings)


def _prepare_validate_cold(fx: Fixture, rev: str | None) -> None:
    """No cached validation result and no parsed file: the run parses and checks
    everything."""
    shutil.rmtree(fx.cache_dir, ignore_errors=True)


def _prepare_validate_warm(fx: Fixture, rev: str | None) -> None:
    """A run right before, untimed, on an empty cache: what it leaves behind (unet's cache
    of validation results, the page cache) is what the timed run finds."""
    _prepare_validate_cold(fx, rev)
    run_unet(_validate_argv(fx, rev), fx, "warm-up")


def _prepare_validate_parsed(fx: Fixture, rev: str | None) -> None:
    """What a first validate left behind, but its result: the timed run reads every file
    back from the parse cache and checks them all, as a run does after a change to a
    file (which it parses) or a CI job with a restored `~/.cache/unet`."""
    _prepare_validate_warm(fx, rev)
    for entry in fx.cache_dir.glob("validate-*.json"):
        entry.unlink()


def _prepare_plan_pr_parsed(fx: Fixture, rev: str | None) -> None:
    """The parse cache an earlier plan of the same pull request left: both revisions'
    files are read back (a CI job that keeps `~/.cache/unet` with actions/cache)."""
    _prepare_validate_cold(fx, rev)
    run_unet(_plan_pr_argv(fx, rev), fx, "warm-up")


def _plan_pr_argv(fx: Fixture, rev: str | None) -> list[str]:
    return ["plan", str(fx.repo), "--base", "main", "--head", PR_BRANCH, "--format", "json"]


def _check_plan_pr(fx: Fixture, run: Run) -> Outcome:
    plan = run.output_json()
    if not plan:
        return Outcome(False, f"{run.exited()}: {run.tail()}", errors=-1)
    errors = sum(1 for d in plan.get("diagnostics", []) if d.get("severity") == "error")
    counts = plan.get("counts", {})
    rows = plan.get("row_counts", {})
    note = ("resources " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if v
                                     and k != "no-op")
            + "; rows " + ", ".join(f"{v} {k}" for k, v in sorted(rows.items()) if v))
    return Outcome(run.exit_code == 0 and bool(plan.get("valid")) and
                   bool(plan.get("has_changes")), note, errors)


def _live_argv(command: str) -> Callable[[Fixture, str | None], list[str]]:
    def argv(fx: Fixture, rev: str | None) -> list[str]:
        if command == "apply":
            return ["apply", str(fx.live), "--auto-approve", "--manager", "ovn"]
        return ["reconcile", "--once", "--path", str(fx.live), "--manager", "ovn",
                "--state-dir", str(fx.state_dir)]
    return argv


def _prepare_apply(fx: Fixture, rev: str | None) -> None:
    fx.applied = False
    fx.nb.start()
    _prepare_validate_cold(fx, rev)


def _check_apply(fx: Fixture, run: Run) -> Outcome:
    done = [line for line in run.stdout().splitlines() if line.startswith("Apply complete")]
    ok = run.exit_code == 0 and bool(done)
    fx.applied = ok
    return Outcome(ok, done[0] if done else f"{run.exited()}: {run.tail()}",
                   errors=0 if ok else 1)


def ensure_applied(fx: Fixture) -> None:
    """The server holds the live repo, applied (a fresh server and an untimed apply)."""
    if fx.applied and fx.nb.pid() is not None:
        return
    _prepare_apply(fx, None)
    run = run_unet(_live_argv("apply")(fx, None), fx, "setup-apply")
    if not _check_apply(fx, run).ok:
        raise BenchError(f"the untimed apply failed: {run.tail()}")


def _reconcile_record(run: Run) -> dict[str, Any]:
    """The JSON line `unet reconcile` logs for its run (standard error)."""
    for line in reversed(run.stderr().splitlines()):
        if line.startswith("{") and '"event": "reconcile"' in line:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                return record
    return {}


def check_reconcile(expect: str) -> Callable[[Fixture, Run], Outcome]:
    """A check of `unet reconcile --once`: its run's record says `expect` ("applied": with
    every drifted row repaired)."""
    def check(fx: Fixture, run: Run) -> Outcome:
        record = _reconcile_record(run)
        result = record.get("result")
        note = (f"{result}: {record.get('message', run.tail())}" if record
                else f"{run.exited()}: {run.tail()}")[:120]
        if expect == "applied":
            ok = result == "applied" and int(record.get("repaired", 0)) >= fx.drifted > 0
        else:
            ok = result == expect
        return Outcome(ok and run.exit_code == 0, note, errors=0 if ok else 1)
    return check


def _prepare_reconcile_noop(fx: Fixture, rev: str | None) -> None:
    ensure_applied(fx)
    _prepare_validate_cold(fx, rev)  # the untimed apply left the parse cache warm


def _prepare_drift(fx: Fixture, rev: str | None) -> None:
    ensure_applied(fx)
    _prepare_validate_cold(fx, rev)
    fx.drifted = make_drift(fx.nb)


def make_drift(nb: NbServer, share: float = 0.01) -> int:
    """Change the addresses of 1% of our Logical_Switch_Ports and delete 1% of our ACLs,
    in one ovn-nbctl transaction; return how many rows changed."""
    ports = sorted(nb.ours("Logical_Switch_Port", "_uuid,name"), key=lambda row: row["name"])
    groups = sorted(nb.ours("Port_Group", "_uuid,name,acls"), key=lambda row: row["name"])
    acls = [(group["_uuid"], acl) for group in groups for acl in sorted(group["acls"])]
    commands: list[str] = []
    changed_ports, deleted_acls = spread(ports, share), spread(acls, share)
    for n, port in enumerate(changed_ports):
        address = f"02:de:ad:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x} " \
                  f"10.99.{n >> 8 & 0xFF}.{n & 0xFF}"
        commands += ["--", "set", "Logical_Switch_Port", port["_uuid"],
                     f'addresses="{address}"']
    for group, acl in deleted_acls:
        commands += ["--", "remove", "Port_Group", group, "acls", acl]
    nb.nbctl(*commands)
    return len(changed_ports) + len(deleted_acls)


def spread(items: Sequence[T], share: float) -> list[T]:
    """`share` of the items (at least one), evenly spread over them."""
    if not items:
        return []
    count = max(1, round(len(items) * share))
    return [items[i * len(items) // count] for i in range(count)]


def plan_live(fx: Fixture, name: str, *flags: str) -> Run:
    """`unet plan` of the live copy against the backend of the stage (--manager ovn)."""
    return run_unet(["plan", str(fx.live), "--manager", "ovn", *flags], fx, name)


def _verify_no_changes(fx: Fixture) -> str | None:
    """After the repair, a live plan must be empty."""
    run = plan_live(fx, "verify-plan", "--detailed-exitcode")
    if run.exit_code != 0:
        return f"the plan after the repair is not empty ({run.exited()}): {run.tail()}"
    return None


# --- shards: the two regions of the synthetic repo, each a run of its own ----------------

#: The shards of the synthetic repo (its two regions), in the order they apply.
SHARDS = ("region-a", "region-b")


def _shard_argv(command: str, region: str) -> Callable[[Fixture, str | None], list[str]]:
    def argv(fx: Fixture, rev: str | None) -> list[str]:
        return [*_live_argv(command)(fx, rev), "--region", region] if command == "apply" \
            else ["reconcile", "--once", "--path", str(fx.live), "--manager", "ovn",
                  "--region", region, "--state-dir", str(fx.state_dir / region)]
    return argv


def _prepare_shard_apply(region: str) -> Callable[[Fixture, str | None], None]:
    """The shards before this one applied, and no more: a fresh server for the first, the
    first applied (untimed, when it is not already) for the second."""
    before = frozenset(SHARDS[:SHARDS.index(region)])

    def prepare(fx: Fixture, rev: str | None) -> None:
        if fx.nb.shards == before and fx.nb.pid() is not None and not fx.applied:
            _prepare_validate_cold(fx, rev)
            return
        _prepare_apply(fx, rev)
        for earlier in SHARDS[:SHARDS.index(region)]:
            run = run_unet(_shard_argv("apply", earlier)(fx, None), fx, f"setup-{earlier}")
            if not _check_apply(fx, run).ok:
                raise BenchError(f"the untimed apply of shard {earlier} failed: {run.tail()}")
            fx.nb.shards |= {earlier}
        fx.applied = False
        _prepare_validate_cold(fx, rev)

    return prepare


def _check_shard_apply(region: str) -> Callable[[Fixture, Run], Outcome]:
    def check(fx: Fixture, run: Run) -> Outcome:
        outcome = _check_apply(fx, run)
        fx.nb.shards = fx.nb.shards | {region} if outcome.ok else frozenset({"?"})
        fx.applied = fx.nb.shards == frozenset(SHARDS)  # all of them: the whole repo
        return outcome
    return check


def _prepare_shard_noop(fx: Fixture, rev: str | None) -> None:
    """Every shard applied (by the shards: an unsharded apply writes rows that record no
    regions, which the first run of a shard writes again)."""
    if fx.nb.shards != frozenset(SHARDS) or fx.nb.pid() is None:
        _prepare_shard_apply(SHARDS[-1])(fx, rev)
        run = run_unet(_shard_argv("apply", SHARDS[-1])(fx, None), fx, "setup-last-shard")
        if not _check_shard_apply(SHARDS[-1])(fx, run).ok:
            raise BenchError(f"the untimed apply of the shards failed: {run.tail()}")
    _prepare_validate_cold(fx, rev)


def _shard_stages() -> dict[str, Stage]:
    """Each shard's apply (the shards before it applied), then each one's no-op reconcile
    (all of them applied)."""
    out: dict[str, Stage] = {}
    for region in SHARDS:
        out[f"apply-shard-{region}"] = Stage(
            _shard_argv("apply", region), _check_shard_apply(region),
            prepare=_prepare_shard_apply(region), sources=("folder",), heavy=True,
            title=f"apply of shard {region} (--region {region}; the shards before it "
                  "applied)")
    for region in SHARDS:
        out[f"reconcile-noop-shard-{region}"] = Stage(
            _shard_argv("reconcile", region), check_reconcile("ok"),
            prepare=_prepare_shard_noop, sources=("folder",), heavy=True,
            title=f"reconcile --once of shard {region}, nothing to do (every shard "
                  "applied)")
    return out


STAGES: dict[str, Stage] = {
    "validate": Stage(_validate_argv, _check_validate, prepare=_prepare_validate_cold,
                      title="validate, cold (no cached result)"),
    "validate-warm": Stage(_validate_argv, _check_validate, prepare=_prepare_validate_warm,
                           title="validate, warm (right after a first validate)"),
    "validate-parsed": Stage(_validate_argv, _check_validate, prepare=_prepare_validate_parsed,
                             title="validate with the parse cache warm, results cache cold"),
    "plan-pr": Stage(_plan_pr_argv, _check_plan_pr, prepare=_prepare_validate_cold,
                     sources=("rev",),
                     title="PR plan, one tenant changed (--base main --head pr), parse cache "
                           "cold"),
    "plan-pr-parsed": Stage(_plan_pr_argv, _check_plan_pr, prepare=_prepare_plan_pr_parsed,
                            sources=("rev",),
                            title="PR plan, one tenant changed, parse cache warm (from the "
                                  "same plan before)"),
    "apply": Stage(_live_argv("apply"), _check_apply, prepare=_prepare_apply,
                   sources=("folder",), heavy=True,
                   title="initial apply to an empty Northbound (--manager ovn)"),
    "reconcile-noop": Stage(_live_argv("reconcile"), check_reconcile("ok"),
                            prepare=_prepare_reconcile_noop, sources=("folder",), heavy=True,
                            title="reconcile --once, nothing to do"),
    "reconcile-drift": Stage(_live_argv("reconcile"), check_reconcile("applied"),
                             prepare=_prepare_drift, verify=_verify_no_changes,
                             sources=("folder",), heavy=True,
                             title="reconcile --once repairing 1% drift (reconcile: repair)"),
    "apply-cluster": Stage(_live_argv("apply"), _check_apply, prepare=_prepare_apply,
                           sources=("folder",), heavy=True, backend="cluster",
                           title="initial apply to an empty 3-member Northbound cluster"),
    "reconcile-noop-cluster": Stage(_live_argv("reconcile"), check_reconcile("ok"),
                                    prepare=_prepare_reconcile_noop, sources=("folder",),
                                    heavy=True, backend="cluster",
                                    title="reconcile --once, nothing to do, on the cluster"),
    **_shard_stages(),
}
#: Each shard's stage and the unsharded stage whose peak memory it is compared with.
SHARDED = {f"{stage}-shard-{region}": stage for stage in ("apply", "reconcile-noop")
           for region in SHARDS}
#: The daemon's stages (daemon.py): a long-running `unet reconcile`, not one command per
#: repetition; each is compared with the one-shot stage it replaces.
DAEMON_STAGES = {"daemon-repair": "reconcile-drift", "daemon-idle": "reconcile-noop",
                 "daemon-commit": "reconcile-noop"}
DAEMON_TITLES = {
    "daemon-repair": "daemon: a hand edit to one row repaired (20 over tables: the median; "
                     "the note: max and median per kind)",
    "daemon-idle": "daemon: a run with nothing changed (CPU per run)",
    "daemon-commit": "daemon: a commit changing one tenant applied after the fetch"}
#: Clustered stages and the standalone stage each is compared with.
CLUSTERED = {"apply-cluster": "apply", "reconcile-noop-cluster": "reconcile-noop"}
SOURCES: dict[str, str | None] = {"folder": None, "rev": "HEAD"}
