"""`unet plan`, `unet apply` and `unet show plan`: the stages joined for people."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .apply import (
    ApplyError,
    ApplyResult,
    StalePlan,
    check_appliable,
    execute,
    observe_all,
    session,
)
from .model import Model
from .pipeline import allocation_readers, managers_of, plan_between, plan_live
from .plan import Plan, restrict_to
from .plan_io import (
    DIGEST_FIELD,
    PlanFormatError,
    document_text,
    dumps,
    plan_to_json,
    read_plan,
)
from .plan_render import render_markdown, render_text
from .progress import Progress
from .report import render_human, summarize, use_colour
from .validate import ParsedFiles, Validation, revision_info, validate_repo

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2


def _display_prefix(path: Path) -> str:
    rel = os.path.relpath(path.resolve(), Path.cwd().resolve())
    return "" if rel == "." else Path(rel).as_posix() + "/"


def _print_validation(result: Validation, path: Path) -> None:
    summary = summarize(result.diagnostics, result.files, len(result.documents))
    render_human(result.diagnostics, summary, sys.stdout, _display_prefix(path),
                 use_colour(sys.stdout))


def print_plan(document: dict[str, Any], fmt: str) -> None:
    sys.stdout.write(render_plan(document, fmt))


def render_plan(document: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return document_text(document)
    if fmt == "markdown":
        return render_markdown(document)
    return render_text(document, use_colour(sys.stdout))


def _validated_head(path: Path, rev: str | None, max_bytes: int,
                    parsed: ParsedFiles | None = None) -> Validation | None:
    head = validate_repo(path, rev, max_bytes, parsed)
    if not head.ok:
        _print_validation(head, path)
        print("unet: the repo has errors; no plan", file=sys.stderr)
        return None
    return head


# --- plan -----------------------------------------------------------------------------------


@dataclass
class _Live:
    """What a plan against the backends needs: the head and the managers that serve it."""

    head: Validation
    managers: dict[str, Any]
    readers: dict[str, Any]  # observed only, for their allocations
    inputs: dict[str, Any]


def _live(path: Path, rev: str | None, max_file_size: int, only: list[str] | None,
          inputs: dict[str, Any] | None = None) -> _Live | None:
    head = _validated_head(path, rev, max_file_size)
    if head is None:
        return None
    model = Model(head.context)  # type: ignore[arg-type]
    managers = managers_of(model, only, resolve=True)
    return _Live(head, managers, allocation_readers(model, managers),
                 inputs or {"head": revision_info(path, rev)})


def plan(args: argparse.Namespace) -> int:
    if args.base is not None:
        return _plan_between(args)
    live = _live(args.path, args.rev, args.max_file_size, args.manager)
    if live is None:
        return EXIT_ERROR
    managers = live.managers
    with session(managers, Path.cwd(), args.lock_timeout, live.readers):
        result = _plan_live(live.head, managers, live.inputs, args.refresh_only, live.readers)
        unmanaged = _unmanaged(managers) if args.show_unmanaged else None
        reports = _reports(managers, result.changes)
    return _finish_plan(result, args, unmanaged, reports)


def _plan_between(args: argparse.Namespace) -> int:
    head_rev = args.head or args.rev
    inputs = {"head": revision_info(args.path, head_rev),
              "base": revision_info(args.path, args.base)}
    parsed = ParsedFiles()  # files both revisions hold are parsed once, and shared
    head = _validated_head(args.path, head_rev, args.max_file_size, parsed)
    if head is None:
        return EXIT_ERROR
    base = validate_repo(args.path, args.base, args.max_file_size, parsed)
    inputs["base"].update(valid=base.ok, errors=sum(d.is_error for d in base.diagnostics))
    result = plan_between(base, head, inputs)
    result.diagnostics += [d for d in head.diagnostics if not d.is_error]
    return _finish_plan(result, args, None)


def _plan_live(head: Validation, managers: dict[str, Any], inputs: dict[str, Any],
               refresh_only: bool, readers: dict[str, Any] | None = None) -> Plan:
    observed = observe_all(managers)
    applied = {name: m.applied_digest() for name, m in managers.items()}
    result = plan_live(head, managers, observed, inputs, applied,
                       observe_all(readers or {}))
    result.diagnostics += [d for d in head.diagnostics if not d.is_error]
    return restrict_to(result, result.drift_ids) if refresh_only else result


def _unmanaged(managers: dict[str, Any]) -> dict[str, list[str]]:
    return {name: m.unmanaged() for name, m in sorted(managers.items())}


def _reports(managers: dict[str, Any], changes: list[Any]) -> dict[str, list[str]]:
    """What the managers say about their backends (e.g. per-cluster readiness)."""
    out = {name: m.report(changes) for name, m in sorted(managers.items())}
    return {name: lines for name, lines in out.items() if lines}


def _print_reports(reports: dict[str, list[str]], markdown: bool = False) -> None:
    for lines in reports.values():
        text = "\n".join(lines)
        print(f"\n```text\n{text}\n```" if markdown else f"\n{text}")


def _finish_plan(result: Plan, args: argparse.Namespace,
                 unmanaged: dict[str, list[str]] | None,
                 reports: dict[str, list[str]] | None = None) -> int:
    document = plan_to_json(result)
    if args.out:
        args.out.write_text(dumps(result))
    if reports and args.format == "json":
        document["backend_report"] = reports
    print_plan(document, args.format)
    if reports and args.format != "json":
        _print_reports(reports, markdown=args.format == "markdown")
    if unmanaged is not None and args.format == "text":
        _print_unmanaged(unmanaged)
    if not result.ok:
        return EXIT_ERROR
    return EXIT_CHANGES if args.detailed_exitcode and result.has_changes else EXIT_OK


def _print_unmanaged(unmanaged: dict[str, list[str]]) -> None:
    total = sum(len(v) for v in unmanaged.values())
    print(f"\nUnmanaged: {total} backend objects are not this installation's "
          "(never changed by unet):")
    for manager, names in unmanaged.items():
        for name in names:
            print(f"  {manager}: {name}")


def show_plan(args: argparse.Namespace) -> int:
    try:
        document = _load_plan(args.file)
        text = render_plan(document, args.format)
    except ApplyError as exc:
        print(f"unet: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        # A file can pass the digest and the schema and still not be what unet wrote.
        print(f"unet: cannot read the plan {args.file}: not a plan unet wrote ({exc!r})",
              file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(text)
    return EXIT_OK


def _load_plan(path: Path) -> dict[str, Any]:
    try:
        return read_plan(path)
    except PlanFormatError as exc:
        raise ApplyError(f"cannot read the plan {path}: {exc}") from exc


# --- apply ----------------------------------------------------------------------------------


def apply(args: argparse.Namespace) -> int:
    try:
        if args.target.is_file():
            return _apply_saved(args)
        return _apply_repo(args)
    except ApplyError as exc:
        print(f"unet: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _apply_repo(args: argparse.Namespace) -> int:
    live = _live(args.target, args.rev, args.max_file_size, args.manager)
    if live is None:
        return EXIT_ERROR
    managers = live.managers
    with session(managers, Path.cwd(), args.lock_timeout, live.readers):
        result = _plan_live(live.head, managers, live.inputs, args.refresh_only, live.readers)
        document = plan_to_json(result)
        print_plan(document, "text")
        _print_reports(_reports(managers, result.changes))
        if not result.ok:
            print("unet: the plan has errors; nothing was applied", file=sys.stderr)
            return EXIT_ERROR
        if not result.has_changes:
            _record(managers, result.desired_digests)
            return EXIT_OK
        if not _confirmed(args.auto_approve):
            print("unet: apply cancelled; nothing was changed", file=sys.stderr)
            return EXIT_ERROR
        outcome = execute(result.changes, result.waves, managers, Progress().wave)
        return _report(outcome, managers, result.desired_digests, result.changes)


def _apply_saved(args: argparse.Namespace) -> int:
    """A saved plan, planned again from the revision it names against the backends as they
    are now, with every check; applied only when that gives the saved plan again."""
    document = _load_plan(args.target)
    check_appliable(document)
    inputs = document["inputs"]
    head = inputs["head"]
    path = Path(head["path"])
    if not path.is_dir():
        raise ApplyError(f"the plan was made from the repo at {path}, which is not here; "
                         "apply it from the folder it was made in")
    rev = head.get("commit") if head.get("rev") else None
    live = _live(path, rev, args.max_file_size, sorted(document["managers"]), inputs)
    if live is None:
        return EXIT_ERROR
    managers = live.managers
    with session(managers, Path.cwd(), args.lock_timeout, live.readers):
        result = _plan_live(live.head, managers, inputs, bool(inputs.get("refresh_only")),
                            live.readers)
        if result.fingerprint != document["observed_fingerprint"]:
            raise StalePlan("STALE_PLAN: the backends changed since the plan was made (its "
                            "observed-state fingerprint no longer matches); nothing was "
                            "applied. Make a new plan and apply that")
        fresh = plan_to_json(result)
        if not result.ok:
            print_plan(fresh, "text")
            print("unet: planned again, the saved plan has errors now; nothing was applied",
                  file=sys.stderr)
            return EXIT_ERROR
        difference = _difference(document, fresh)
        if difference:
            where = f"{path}" + (f" at {head['commit'][:12]}" if rev else "")
            raise ApplyError(f"{args.target} is not the plan that the repo at {where} gives "
                             f"against the backends now ({difference}): the repo changed "
                             "since the plan was made, or the plan was edited; nothing was "
                             "applied. Make a new plan and apply that")
        print_plan(fresh, "text")  # the plan made now: what is shown is what is applied
        _print_reports(_reports(managers, result.changes))
        if not result.has_changes:
            return EXIT_OK
        if not _confirmed(args.auto_approve):
            print("unet: apply cancelled; nothing was changed", file=sys.stderr)
            return EXIT_ERROR
        outcome = execute(result.changes, result.waves, managers, Progress().wave)
        return _report(outcome, managers, result.desired_digests, result.changes)


def _difference(saved: dict[str, Any], fresh: dict[str, Any]) -> str | None:
    """The first thing that differs between a saved plan and one made now, if any: every
    field counts (what a person reads is what is applied)."""
    def canonical(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    old = {c.get("id"): canonical(c) for c in saved["backend_changes"]}
    new = {c["id"]: canonical(c) for c in fresh["backend_changes"]}
    for uid in sorted(old.keys() | new.keys(), key=str):
        if old.get(uid) != new.get(uid):
            return f"first difference: backend change {uid}"
    for name in sorted(saved.keys() | fresh.keys()):
        if name != DIGEST_FIELD and canonical(saved.get(name)) != canonical(fresh.get(name)):
            return f"first difference: {name}"
    return None


def _confirmed(auto_approve: bool) -> bool:
    if auto_approve:
        return True
    if not sys.stdin.isatty():
        raise ApplyError("refusing to apply without confirmation: input is not a terminal; "
                         "pass --auto-approve (CI) after reviewing the plan")
    answer = input("\nApply these changes? Only 'yes' is accepted: ")
    return answer.strip() == "yes"


def _report(outcome: ApplyResult, managers: dict[str, Any], digests: dict[str, str],
            changes: list[Any]) -> int:
    counts = outcome.counts
    print(f"\nApply complete: {counts['create']} created, {counts['update']} updated, "
          f"{counts['delete']} deleted in {outcome.seconds:.1f} s.")
    _print_reports(_reports(managers, changes))
    if outcome.failures:
        _print_failures(outcome.failures)
        failed = {uid.split(":", 1)[0] for uid in outcome.failures}
        _record({n: m for n, m in managers.items() if n not in failed}, digests)
        return EXIT_ERROR
    if outcome.mismatches:
        print(f"unet: after the apply, {len(outcome.mismatches)} objects are not as planned:",
              file=sys.stderr)
        for line in outcome.mismatches[:20]:
            print(f"  {line}", file=sys.stderr)
        print("run `unet apply` again; if this persists, it is a bug in unet", file=sys.stderr)
        return EXIT_ERROR
    _record(managers, digests)
    return EXIT_OK


def _print_failures(failures: dict[str, str]) -> None:
    """Failed steps, grouped by reason (one unreachable cluster is one reason)."""
    by_reason: dict[str, list[str]] = {}
    for uid, why in sorted(failures.items()):
        by_reason.setdefault(why, []).append(uid)
    print(f"unet: {len(failures)} steps failed; everything else was applied:", file=sys.stderr)
    for why, uids in by_reason.items():
        shown = ", ".join(uids[:5]) + (f" and {len(uids) - 5} more" if len(uids) > 5 else "")
        print(f"  {why}\n    ({len(uids)} steps: {shown})", file=sys.stderr)
    print("run `unet apply` again once the cause is fixed", file=sys.stderr)


def _record(managers: dict[str, Any], digests: dict[str, str]) -> None:
    for name, manager in managers.items():
        if name in digests:
            manager.record_applied(digests[name])
