"""`unet plan`, `unet apply` and `unet show plan`: the stages joined for people."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import engine
from .command import Command
from .contract import ProgressFactory
from .diagnostics import Diagnostic
from .engine import ApplyError, Outcome, Reports, RunOptions, check_appliable, check_same
from .errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, UsageError
from .model import Model
from .plan import Plan
from .plan_io import PlanFormatError, document_text, dumps, plan_to_json, read_plan
from .plan_render import internet_facing, render_markdown, render_text
from .planner import invalid_plan, plan_between
from .plugins import managers_of
from .progress import Progress, quiet, say, working
from .report import (
    display_prefix,
    github_annotations,
    render_human,
    render_json,
    sources_of,
    summarize,
    use_colour,
)
from .shard import Shard
from .sources import placement
from .validate import (
    ParsedFiles,
    Validation,
    against_base,
    parsed_files,
    revision_info,
    validate_repo,
)


def _print_invalid(head: Validation, args: argparse.Namespace, path: Path, rev: str | None,
                   plan: tuple[str, dict[str, Any]] | None = None) -> None:
    """The errors of a repo that gives no plan, in the format asked for: a plan command's
    JSON, Markdown or GitHub output is a plan document with them (valid false, no change;
    `plan` is its mode and inputs), so that what parses a plan parses this too. Text quotes
    the lines of what was validated (the revision, not the working tree)."""
    fmt = getattr(args, "format", "text")
    tenant = getattr(args, "tenant", None)
    diagnostics = head.diagnostics if tenant is None else _tenants_own(head, tenant)
    summary = summarize(diagnostics, head.files, len(head.documents))
    others = sum(d.is_error for d in head.diagnostics) - summary.errors
    if others:  # the repo is invalid however many of the errors are the tenant's
        summary = replace(summary, errors=summary.errors + others)
    if fmt != "text" and plan is not None:
        print_plan(plan_to_json(invalid_plan(head, *plan)), fmt, path)
    elif fmt == "json":
        render_json(diagnostics, summary, sys.stdout, display_prefix(path))
    else:
        render_human(diagnostics, summary, sys.stdout, display_prefix(path),
                     use_colour(sys.stdout), sources_of(path, rev))
    if others:
        print(f"unet: {others} more error{'' if others == 1 else 's'} outside "
              f"tenants/{tenant}/, not shown in a tenant's view", file=sys.stderr)


def _tenants_own(head: Validation, tenant: str) -> list[Diagnostic]:
    """What a tenant's view (`--tenant`) shows of a repo's problems: those said in its own
    files, naming no other tenant's resource; never another tenant's file, line or
    message."""
    from .status import own_words

    tenants = {m.name for m in head.manifests if m.kind == "Tenant"}
    return [replace(d, message=own_words(d.message, tenant, tenants),
                    hint=None if d.hint is None else own_words(d.hint, tenant, tenants))
            for d in head.diagnostics if placement(d.file or "")[1] == tenant]


def print_plan(document: dict[str, Any], fmt: str, repo: Path | None = None) -> None:
    sys.stdout.write(render_plan(document, fmt, repo))


def render_plan(document: dict[str, Any], fmt: str, repo: Path | None = None) -> str:
    if fmt == "json":
        return document_text(document)
    if fmt == "markdown":
        return render_markdown(document)
    if fmt == "github":
        workspace = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd())
        return _github_plan(document, display_prefix(repo, workspace) if repo else "")
    return render_text(document, use_colour(sys.stdout))


def _github_plan(document: dict[str, Any], prefix: str) -> str:
    """Annotations for the plan's diagnostics, the text plan in the log, and the Markdown
    plan in the job summary."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(render_markdown(document) + "\n")
    opened = "".join(f"::warning title=Opens to the internet::{e['nic']} can now be reached "
                     f"with {e['opening']} ({e['cause']})\n"
                     for e in internet_facing(document)[:10])
    return github_annotations(document["diagnostics"], prefix) + opened + render_text(document)


def _validated_head(args: argparse.Namespace, path: Path, rev: str | None,
                    parsed: ParsedFiles | None = None,
                    plan: tuple[str, dict[str, Any]] | None = None,
                    base: Callable[[], Validation] | None = None) -> Validation | None:
    """The repo at `path` (`rev`), validated; None, said why, when it has errors (`plan`:
    the mode and inputs of the plan it would have given). Parsed files come from and go to
    the parse cache, unless `parsed` is the caller's. With `base` (a pull request's), what
    a guardrail forbids is said at the change that opened it."""
    say("validating")
    own = parsed_files(path, args.max_file_size, not args.no_cache) if parsed is None \
        else parsed
    head = validate_repo(path, rev, args.max_file_size, own, _shard(args))
    if base is not None and head.violations:
        head = against_base(head, base())
    if parsed is None:
        own.save()
    if not head.ok:
        _print_invalid(head, args, path, rev, plan)
        print("unet: the repo has errors; no plan", file=sys.stderr)
        return None
    return head


def _shard(args: argparse.Namespace) -> Shard | None:
    """The shard of `--region` (or of the saved plan being applied), if any."""
    return Shard.of(getattr(args, "region", None))


def _inputs(args: argparse.Namespace, path: Path, rev: str | None) -> dict[str, Any]:
    """What a live plan records of its input: the revision, and the shard it is of."""
    inputs: dict[str, Any] = {"head": revision_info(path, rev)}
    shard = _shard(args)
    if shard is not None:
        inputs["shard"] = {"regions": sorted(shard.regions)}
    return inputs


# --- plan -----------------------------------------------------------------------------------


def _options(args: argparse.Namespace, repo: Path) -> RunOptions:
    """How to run against the backends; local state (the embedded database) lives in the
    repo's `.unet/`, wherever unet is run from."""
    lock_timeout = 60.0 if args.lock_timeout is None else args.lock_timeout
    return RunOptions(workdir=repo.resolve(), lock_timeout=lock_timeout,
                      only=args.manager, refresh_only=args.refresh_only, progress=_progress)


def _progress(manager: str) -> ProgressFactory:
    wave = Progress().wave
    return lambda index, waves, steps: wave(manager, index, waves, steps)


def plan(args: argparse.Namespace) -> int:
    _check_plan_arguments(args)
    with working():
        return _plan(args)


def _check_plan_arguments(args: argparse.Namespace) -> None:
    """Flags that would be silently ignored are refused, before anything starts."""
    if args.base is None:
        if args.head is not None:
            raise UsageError("--head needs --base: it is the revision a plan between two "
                             "revisions ends at; to plan one revision against the backends, "
                             "give --rev")
    else:
        if args.head is not None and args.rev is not None:
            raise UsageError("--rev and --head both name the revision a plan between two "
                             "revisions ends at: give one")
        unused = [flag for flag, given in (("--refresh-only", args.refresh_only),
                                           ("--show-unmanaged", args.show_unmanaged),
                                           ("--manager", args.manager),
                                           ("--lock-timeout", args.lock_timeout is not None))
                  if given]
        if unused:
            raise UsageError(f"{', '.join(unused)}: a plan between two revisions reads no "
                             "backend (--base stands for what they hold); leave "
                             f"{'it' if len(unused) == 1 else 'them'} out")
    if args.show_unmanaged and args.format not in ("text", "json"):
        raise UsageError(f"--show-unmanaged lists backend objects in the text and json "
                         f"formats, not in {args.format}")


def _plan(args: argparse.Namespace) -> int:
    if args.base is not None:
        if args.region:
            raise ApplyError("a plan between two revisions is of the whole repo: it shows "
                             "every shard's part of the merge (docs/shards.md); leave "
                             "out --region")
        return _plan_between(args)
    inputs = _inputs(args, args.path, args.rev)
    head = _validated_head(args, args.path, args.rev, plan=("live", inputs))
    if head is None:
        return EXIT_ERROR
    outcome = engine.run(head, inputs, _options(args, args.path))
    assert outcome.plan is not None
    unmanaged = outcome.unmanaged if args.show_unmanaged else None
    return _finish_plan(outcome.plan, args, unmanaged, outcome.reports)


def _plan_between(args: argparse.Namespace) -> int:
    head_rev = args.head or args.rev
    inputs = {"head": revision_info(args.path, head_rev),
              "base": revision_info(args.path, args.base)}
    # Files both revisions hold are parsed once, and shared.
    parsed = parsed_files(args.path, args.max_file_size, not args.no_cache)
    validated: list[Validation] = []

    def base_revision() -> Validation:
        # The base is summed up as valid or not and its error count: none of its warnings
        # is shown, so how full its pools are is not worked out.
        if not validated:
            validated.append(validate_repo(args.path, args.base, args.max_file_size, parsed,
                                           usage_warnings=False))
        return validated[0]

    head = _validated_head(args, args.path, head_rev, parsed, plan=("pr", inputs),
                           base=base_revision)
    if head is None:
        parsed.save()
        return EXIT_ERROR
    base = base_revision()
    parsed.save()
    inputs["base"].update(valid=base.ok, errors=sum(d.is_error for d in base.diagnostics))
    say("planning")
    result = plan_between(base, head, inputs)
    return _finish_plan(result, args, None)


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
    if unmanaged is not None and args.format == "json":
        document["unmanaged"] = unmanaged
    print_plan(document, args.format, args.path)
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
    _check_apply_arguments(args)
    try:
        with working():
            if args.target.is_file():
                return _apply_saved(args)
            return _apply_repo(args)
    except ApplyError as exc:
        print(f"unet: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _check_apply_arguments(args: argparse.Namespace) -> None:
    """Flags that would be silently ignored are refused, before anything starts."""
    if args.format == "json" and not args.auto_approve:
        raise UsageError("--format json prints no plan to confirm: give --auto-approve "
                         "(after reviewing the plan, e.g. `unet plan -o FILE`)")
    if not args.target.is_file():
        return
    given = [flag for flag, value in (("--rev", args.rev),
                                      ("--refresh-only", args.refresh_only),
                                      ("--manager", args.manager),
                                      ("--region", args.region)) if value]
    if given:
        raise UsageError(f"{', '.join(given)}: a saved plan names its own revision, managers, "
                         f"shard and mode; apply {args.target} without "
                         f"{'it' if len(given) == 1 else 'them'}, or plan again")


def _apply_repo(args: argparse.Namespace) -> int:
    head = _validated_head(args, args.target, args.rev)
    if head is None:
        return EXIT_ERROR

    def gate(plan: Plan, reports: Reports) -> Plan | None:
        quiet()  # what follows prints, asks, or draws its own bars
        if args.format == "text":
            print_plan(plan_to_json(plan), "text")
            _print_reports(reports)
        return _approved(plan, args.auto_approve)

    inputs = _inputs(args, args.target, args.rev)
    return _applied(_run_apply(head, inputs, _options(args, args.target), gate),
                    args.format)


def _apply_saved(args: argparse.Namespace) -> int:
    """A saved plan, planned again from the revision it names against the backends as they
    are now, with every check; applied only when that gives the saved plan again."""
    document = _load_plan(args.target)
    check_appliable(document)
    inputs = document["inputs"]
    head_info = inputs["head"]
    path = Path(head_info["path"])
    if not path.is_dir():
        raise ApplyError(f"the plan was made from the repo at {path}, which is not here; "
                         "apply it from the folder it was made in")
    rev = head_info.get("commit") if head_info.get("rev") else None
    args.region = (inputs.get("shard") or {}).get("regions")  # the saved plan's shard
    head = _validated_head(args, path, rev)
    if head is None:
        return EXIT_ERROR
    where = f"{path}" + (f" at {head_info['commit'][:12]}" if rev else "")

    def gate(plan: Plan, reports: Reports) -> Plan | None:
        quiet()
        fresh = check_same(document, plan, f"{args.target} is not the plan that the repo "
                                           f"at {where} gives against the backends now")
        if args.format == "text":  # the plan made now: what is shown is what is applied
            print_plan(fresh, "text")
        if not plan.ok:
            print("unet: planned again, the saved plan has errors now; nothing was applied",
                  file=sys.stderr)
            return None
        if args.format == "text":
            _print_reports(reports)
        return _approved(plan, args.auto_approve)

    options = replace(_options(args, path), only=sorted(document["managers"]),
                      refresh_only=bool(inputs.get("refresh_only")))
    return _applied(_run_apply(head, inputs, options, gate), args.format)


def _run_apply(head: Validation, inputs: dict[str, Any], options: RunOptions,
               gate: engine.Gate) -> Outcome:
    """engine.run; an apply stopped half-way names the manifests it may have left
    pending before what stopped it is said."""
    try:
        return engine.run(head, inputs, options, gate)
    except engine.RunFailed as failed:
        if failed.outcome.applied is not None:
            _print_pending(failed.outcome.pending(stopped=True))
        raise


def _approved(plan: Plan, auto_approve: bool) -> Plan | None:
    """The plan, when it may be applied: it has no errors, and a person said yes."""
    if not plan.ok:
        print("unet: the plan has errors; nothing was applied", file=sys.stderr)
        return None
    if not plan.has_changes:
        return plan  # nothing to do: the engine records the state as applied
    if not _confirmed(auto_approve):
        print("unet: apply cancelled; nothing was changed", file=sys.stderr)
        return None
    return plan


def _confirmed(auto_approve: bool) -> bool:
    if auto_approve:
        return True
    if not sys.stdin.isatty():
        raise ApplyError("refusing to apply without confirmation: input is not a terminal; "
                         "pass --auto-approve (CI) after reviewing the plan")
    from rich.prompt import Prompt

    print()
    answer = Prompt.ask("Apply these changes? Only 'yes' is accepted")
    return answer.strip() == "yes"


def _applied(outcome: Outcome, fmt: str = "text") -> int:
    """Exit code and the last words of an apply."""
    if fmt == "json":
        _print_applied_json(outcome)
    if outcome.applied is None:  # nothing to change, or refused or cancelled (said why)
        plan = outcome.plan
        return EXIT_OK if plan is not None and plan.ok and not plan.has_changes else EXIT_ERROR
    counts = outcome.counts
    if fmt == "text":
        print(f"\nApply complete: {counts['create']} created, {counts['update']} updated, "
              f"{counts['delete']} deleted in {outcome.seconds:.1f} s.")
        _print_reports(outcome.reports)
    if outcome.failures:
        _print_failures(outcome.failures)
        _print_pending(outcome.pending())
        return EXIT_ERROR
    if outcome.mismatches:
        count = len(outcome.mismatches)
        print(f"unet: after the apply, {count} object{' is' if count == 1 else 's are'} not "
              "as planned:", file=sys.stderr)
        for uid, how in list(outcome.mismatches.items())[:20]:
            print(f"  {uid}: {how}", file=sys.stderr)
        _print_pending(outcome.pending())
        print("run `unet apply` again; if this persists, it is a bug in unet", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _print_pending(pending: list[str]) -> None:
    """The manifests a failed apply left pending (`unet show status` says why)."""
    shown = ", ".join(pending[:20]) + (f" and {len(pending) - 20} more"
                                       if len(pending) > 20 else "")
    print(f"unet: left pending: {shown}", file=sys.stderr)


def _print_applied_json(outcome: Outcome) -> None:
    """`apply --format json`: one object, the plan and what became of it."""
    import json

    plan = outcome.plan
    document = {
        "format_version": "1.0",
        "plan": plan_to_json(plan) if plan is not None else None,
        "applied": None if outcome.applied is None else dict(outcome.counts),
        "seconds": round(outcome.seconds, 3) if outcome.applied is not None else None,
        "failures": outcome.failures, "mismatches": outcome.mismatches,
        "backend_report": outcome.reports}
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")


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


# --- show bindings --------------------------------------------------------------------------


def show_bindings(args: argparse.Namespace) -> int:
    """Per workload attachment, what it needs to bind, from the live backends (or, with
    --offline, from the repo alone: allocated values are known after apply)."""
    import json

    from .bindings import render_text

    if args.offline and args.manager:
        raise UsageError("--offline reads no backend: leave out --manager")
    with working():
        document = _bindings(args)
    if document is None:
        return EXIT_ERROR
    if args.format == "json":
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(document))
    return EXIT_OK


# --- show usage -----------------------------------------------------------------------------


def show_usage(args: argparse.Namespace) -> int:
    """Size, used and free of every pool, subnet and segment range: used as the backends
    record it (or, with --offline, as the repo's own allocation takes it)."""
    import json

    from .usage import demanded, recorded, render_text, to_json

    if args.offline and args.manager:
        raise UsageError("--offline reads no backend: leave out --manager")
    with working():
        head = _tenant_view_head(args)
        if head is None:
            return EXIT_ERROR
        assert head.context is not None
        model = Model(head.context)
        if args.offline:
            usages = demanded(model, args.tenant)
        else:
            say("reading the backends")
            held = engine.read_allocations(head, RunOptions(workdir=args.path.resolve(),
                                                            only=args.manager))
            usages = recorded(model, held, args.tenant)
    if args.format == "json":
        document = to_json(usages, model.installation, "offline" if args.offline
                           else "backends")
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(usages))
    return EXIT_OK


# --- show status ----------------------------------------------------------------------------


def show_status(args: argparse.Namespace) -> int:
    """Per manifest: Ready (at which revision), Pending (why) or Failed (the error), and
    the values allocated to it, from a plan against the backends made without locks."""
    import json

    from .status import render_text, status

    with working():
        head = _tenant_view_head(args)
        if head is None:
            return EXIT_ERROR
        inputs = _inputs(args, args.path, args.rev)
        say("reading the backends")
        found, held, unread = engine.read_plan(
            head, inputs, RunOptions(workdir=args.path.resolve(), only=args.manager))
        revision = inputs["head"].get("commit")
        document = status(head.manifests, found, held, revision, args.tenant, unread)
    if args.format == "json":
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(document))
    return EXIT_OK


def _tenant_view_head(args: argparse.Namespace) -> Validation | None:
    """The validated head for a view that `--tenant` may narrow (show usage, status,
    bindings); None when it has errors or names no Tenant (said on stderr)."""
    head = _validated_head(args, args.path, args.rev)
    if head is None:
        return None
    assert head.context is not None
    if args.tenant is not None and head.context.get("Tenant", None, args.tenant) is None:
        print(f"unet: no Tenant named '{args.tenant}'", file=sys.stderr)
        return None
    return head


def _bindings(args: argparse.Namespace) -> dict[str, Any] | None:
    from .bindings import bindings
    from .desired import render_desired

    head = _tenant_view_head(args)
    if head is None:
        return None
    say("reading the backends" if not args.offline else "rendering the desired state")
    desired = render_desired(head, {}, new_are_unknown=True) if args.offline else \
        engine.read_desired(head, RunOptions(workdir=args.path.resolve(), only=args.manager))
    return bindings(desired.model, desired.allocations, desired.managers, args.tenant)


# --- reach ----------------------------------------------------------------------------------


def reach(args: argparse.Namespace) -> int:
    """`unet reach`: exit 0 when answered, allowed or not; with `--live` and
    `--detailed-exitcode`, 2 when the live fabric disagrees with the model."""
    import json

    from .desired import render_desired
    from .reach import Reachability
    from .reach_query import parse_port, probes

    if args.detailed_exitcode and not args.live:
        raise UsageError("--detailed-exitcode says whether the live fabric disagrees: give "
                         "--live too")
    head = _validated_head(args, args.path, args.rev)
    if head is None:
        return EXIT_ERROR
    desired = render_desired(head, {})
    answer, checks = probes(Reachability(desired.model, desired.allocations), args.source,
                            args.target, args.port)
    live = None
    if args.live:
        from .reach_live import cross_check

        assert head.context is not None
        live = cross_check(Model(head.context), checks, args.path.resolve(),
                           *parse_port(args.port))
    if args.format == "json":
        document = answer.to_json() | ({"live": live.to_json()} if live else {})
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    else:
        verdict = "allowed" if answer.allowed else "not allowed"
        port = f" ({args.port})" if args.port else ""
        print(f"{args.source} → {args.target}{port}: {verdict}")
        for why in answer.because:
            print(f"  {why}")
        for line in live.lines() if live else ():
            print(line)
    disagrees = live is not None and live.agrees is False
    return EXIT_CHANGES if disagrees and args.detailed_exitcode else EXIT_OK


# --- commands of plugins -------------------------------------------------------------------


def plugin_command(command: Command) -> Callable[[argparse.Namespace], int]:
    """`unet <name>` of a plugin: the repo validated, its managers (those of `--manager`)
    instantiated, then the plugin's own `run`."""
    def run(args: argparse.Namespace) -> int:
        head = _validated_head(args, args.path, None)
        if head is None:
            return EXIT_ERROR
        assert head.context is not None
        managers = managers_of(Model(head.context), args.manager, resolve=True)
        return command.run(args, managers, args.path.resolve())

    return run


# --- import ---------------------------------------------------------------------------------


def import_rows(args: argparse.Namespace) -> int:
    """`unet import`: write the manifests of unowned rows (or, with --apply, tag the rows the
    repo's manifests describe). Exit 0 whatever was refused: the report says it."""
    import json

    from .adopt import adopt_networks

    if args.rev is not None and not args.apply:
        print("unet: --rev goes with --apply: import writes its manifests to the files on "
              "disk", file=sys.stderr)
        return EXIT_ERROR
    head = _validated_head(args, args.path, args.rev)
    if head is None:
        return EXIT_ERROR
    report = adopt_networks(args.path, head, args.manager, args.tenant, args.into_region,
                            args.apply, args.lock_timeout)
    if args.format == "json":
        sys.stdout.write(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
        return EXIT_OK
    verb = "tagged" if report.applied else "to tag"
    for network in report.networks:
        if network.adopted:
            done = "adopted" if report.applied else f"written to {network.file}"
            print(f"network {network.name}: {done}; {len(network.rows)} rows {verb}, "
                  "none created or deleted")
            for row in network.rows:
                print(f"  ~ {row}  (tags only)")
        else:
            print(f"network {network.name}: not adopted")
            for reason in network.reasons:
                print(f"  ! {reason}")
    if report.refused:
        print("left as they are:")
        for refusal in report.refused:
            print(f"  - {refusal.row}: {refusal.reason}")
    adopted = [n for n in report.networks if n.adopted]
    refused = len(report.networks) - len(adopted)
    if not adopted and refused:
        print(f"nothing to adopt: {refused} network{'s' if refused > 1 else ''} not adopted "
              "(why is above; \"What is refused\" in docs/import.md says what each reason "
              "asks)")
    elif not adopted:
        print("nothing to adopt")
    elif not report.applied:
        print(f"next: review and merge {', '.join(n.file for n in adopted)}, then run "
              f"`unet import --manager {report.manager} --tenant {report.tenant} --apply`")
    return EXIT_OK
