"""What a run says: one JSON line on standard error, a headline, the GitHub job summary
and step outputs, and the exit code of `--once`."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..errors import EXIT_CHANGES, EXIT_ERROR, EXIT_OK
from .history import APPLIED, DRIFT, ERROR, INVALID, LOCKED, OK, STANDBY, Run, now, short

SUMMARY_LIMIT = 1024 * 1024  # GitHub's limit for one step's job summary, in bytes

def log_line(run: Run, stream: Any = None) -> None:
    """One JSON line per run (standard error: standard output is for people)."""
    record = {"ts": now(), "event": "reconcile", **run.to_json()}
    stream = stream or sys.stderr
    stream.write(json.dumps(record, sort_keys=True) + "\n")
    stream.flush()


def headline(run: Run) -> str:
    where = f"{run.branch} @ " if run.branch else ""
    return f"unet reconcile: {where}{short(run.revision)}: {run.result}: {run.message}"


def summary(run: Run) -> list[str]:
    """The run for people (`reconcile --once` on a terminal): the headline (its message
    says what was applied), then what else was found, and how long it took."""
    lines = [headline(run)]
    if run.reconciled and run.reconciled != run.revision:
        lines.append(f"  reconciled {short(run.reconciled)} (the last good revision)")
    if run.errors:
        lines.append(f"  {run.errors} errors in the revision: nothing of it was applied")
    if run.drift and (run.result != DRIFT or run.repaired):  # a drift run's message says it
        lines.append(f"  drift: {run.drift} objects changed outside unet"
                     + (f", {run.repaired} repaired" if run.repaired else ""))
    lines.append(f"  took {run.duration:.1f} s")
    return lines


def markdown_report(run: Run, plan: dict[str, Any] | None, validation: Any = None,
                    limit: int = SUMMARY_LIMIT) -> str:
    """The job summary: the run first, then the plan found (cut to fit `limit` bytes)."""
    from ..plan_render import render_markdown
    from ..report import markdown_summary, summarize

    title = {OK: "no changes", APPLIED: "changes applied", DRIFT: "drift found, not repaired",
             INVALID: "revision refused", LOCKED: "skipped: the backends are locked",
             ERROR: "failed", STANDBY: "standing by: another replica is active"}[run.result]
    revision = (f"`{run.branch}` " if run.branch else "") + f"`{short(run.revision)}`"
    rows = [("revision", revision), ("result", f"**{run.result}**: {run.message}")]
    if run.reconciled and run.reconciled != run.revision:
        rows.append(("reconciled", f"`{short(run.reconciled)}` (the last good revision)"))
    if run.mode:
        rows.append(("drift handling", f"`reconcile: {run.mode}`"))
    rows.append(("drift", f"{run.drift} objects changed outside unet"
                          + (f", {run.repaired} repaired" if run.repaired else "")))
    if run.applied:
        rows.append(("applied", f"{run.applied.get('create', 0)} created, "
                                f"{run.applied.get('update', 0)} updated, "
                                f"{run.applied.get('delete', 0)} deleted in "
                                f"{run.apply_seconds or 0:.2f} s"))
    rows.append(("duration", f"{run.duration:.2f} s"))
    head = [f"### unet reconcile: {title}", "", "| | |", "|---|---|"]
    head += ["| " + key + " | " + value.replace("|", "\\|") + " |" for key, value in rows]
    text = "\n".join(head) + "\n\n"
    if validation is not None:
        summary = summarize(validation.diagnostics, validation.files,
                            len(validation.documents))
        text += markdown_summary(sorted(validation.diagnostics, key=lambda d: d.sort_key()),
                                 summary)
    if plan is not None and (plan["has_changes"] or plan["diagnostics"]):
        budget = limit - len(text.encode()) - 200
        body = render_markdown(plan, limit=max(budget, 1000))
        while len(body.encode()) > budget and budget > 1000:  # multi-byte characters
            budget = budget * 9 // 10
            body = render_markdown(plan, limit=budget)
        if run.mode == "report":
            body = body.replace("and will be repaired.", "and are left in place "
                                "(`reconcile: report`).")
        text += body
    data = text.encode()
    if len(data) <= limit:
        return text
    cut = "\n\n_… cut here (the job summary's size limit); the run's plan has the rest._\n"
    return data[:limit - len(cut.encode())].decode(errors="ignore") + cut


def github_outputs(run: Run, path: str) -> None:
    changes = sum(v for k, v in run.row_counts.items() if k != "no-op")
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"result={run.result}\ndrift={run.drift}\nrepaired={run.repaired}\n"
                  f"changes={changes}\nrevision={run.revision or ''}\n"
                  f"reconciled={run.reconciled or ''}\n")


def exit_code(run: Run, detailed: bool) -> int:
    if run.result in (INVALID, LOCKED, ERROR):
        return EXIT_ERROR
    return EXIT_CHANGES if detailed and run.changed else EXIT_OK
