"""Diagnostics for people (grouped by file), machines (JSON) and GitHub (annotations)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .diagnostics import Diagnostic, Severity

JSON_FORMAT_VERSION = "1.0"
GITHUB_ANNOTATIONS_PER_SEVERITY = 10  # GitHub shows at most 10 of each per step


def display_prefix(path: Path, base: Path | None = None) -> str:
    """How files of the repo at `path` are named for people: relative to `base` (default:
    the working directory), as `tenants/acme/network.yaml` when the repo is right there."""
    rel = os.path.relpath(path.resolve(), (base or Path.cwd()).resolve())
    return "" if rel == "." else Path(rel).as_posix() + "/"


@dataclass(frozen=True)
class Summary:
    files: int
    documents: int
    errors: int
    warnings: int


def summarize(diagnostics: Sequence[Diagnostic], files: int, documents: int) -> Summary:
    errors = sum(1 for d in diagnostics if d.is_error)
    return Summary(files, documents, errors, len(diagnostics) - errors)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _display_file(diag: Diagnostic, prefix: str) -> str:
    if diag.file is None:
        return prefix.rstrip("/") or "."
    return f"{prefix}{diag.file}"


# --- human ----------------------------------------------------------------------------------


class _Style:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def render_human(diagnostics: Sequence[Diagnostic], summary: Summary, stream: TextIO,
                 prefix: str = "", colour: bool = False) -> None:
    style = _Style(colour)
    by_file: dict[str, list[Diagnostic]] = defaultdict(list)
    for diag in sorted(diagnostics, key=Diagnostic.sort_key):
        by_file[_display_file(diag, prefix)].append(diag)
    for file, items in by_file.items():
        stream.write(style(file, "1;4") + "\n")
        for diag in items:
            where = f"{diag.line}" if diag.line else "-"
            severity = style(f"{diag.severity:<7}", "31" if diag.is_error else "33")
            path = style(f"  {diag.path}", "2") if diag.path else ""
            stream.write(f"  {where:>5}  {severity} {style(diag.code, '1')}  {diag.message}"
                         f"{path}\n")
            if diag.hint:
                stream.write(f"{'':16}{style('hint:', '36')} {diag.hint}\n")
        stream.write("\n")
    checked = f"{_plural(summary.documents, 'manifest')} in {_plural(summary.files, 'file')}"
    if summary.errors:
        stream.write(style(f"✖ {_plural(summary.errors, 'error')}", "1;31")
                     + f", {_plural(summary.warnings, 'warning')} ({checked})\n")
    elif summary.warnings:
        stream.write(style(f"✔ valid with {_plural(summary.warnings, 'warning')}", "1;33")
                     + f" ({checked})\n")
    else:
        stream.write(style("✔ valid", "1;32") + f" ({checked})\n")


# --- JSON -----------------------------------------------------------------------------------


def render_json(diagnostics: Sequence[Diagnostic], summary: Summary, stream: TextIO,
                prefix: str = "") -> None:
    document = {
        "format_version": JSON_FORMAT_VERSION,
        "valid": summary.errors == 0,
        "root": prefix.rstrip("/") or ".",
        "summary": {
            "files": summary.files,
            "documents": summary.documents,
            "errors": summary.errors,
            "warnings": summary.warnings,
        },
        "diagnostics": [d.to_json() for d in sorted(diagnostics, key=Diagnostic.sort_key)],
    }
    json.dump(document, stream, indent=2)
    stream.write("\n")


# --- GitHub ---------------------------------------------------------------------------------


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(diagnostics: Sequence[Diagnostic], summary: Summary, stream: TextIO,
                  prefix: str = "", step_summary: str | None = None) -> None:
    """Workflow commands for the first ten errors and warnings; the rest in the job summary."""
    ordered = sorted(diagnostics, key=Diagnostic.sort_key)
    shown = {Severity.ERROR: 0, Severity.WARNING: 0}
    for diag in ordered:
        if shown[diag.severity] >= GITHUB_ANNOTATIONS_PER_SEVERITY:
            continue
        shown[diag.severity] += 1
        props = [f"file={_escape_property(_display_file(diag, prefix))}"]
        if diag.line:
            props.append(f"line={diag.line}")
        if diag.column:
            props.append(f"col={diag.column}")
        props.append(f"title={_escape_property(diag.code)}")
        message = diag.message + (f" ({diag.path})" if diag.path else "")
        if diag.hint:
            message += f"\nhint: {diag.hint}"
        stream.write(f"::{diag.severity} {','.join(props)}::{_escape_data(message)}\n")
    hidden = len(ordered) - sum(shown.values())
    if hidden:
        stream.write(f"{hidden} more diagnostics are listed in the job summary.\n")
    render_human(diagnostics, summary, stream, prefix)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as out:
            out.write(markdown_summary(ordered, summary, prefix))


def markdown_summary(diagnostics: Sequence[Diagnostic], summary: Summary, prefix: str = "") -> str:
    head = "### unet validate: " + (
        f"{_plural(summary.errors, 'error')}, {_plural(summary.warnings, 'warning')}"
        if diagnostics else "valid")
    lines = [head, "",
             f"{_plural(summary.documents, 'manifest')} in {_plural(summary.files, 'file')}.", ""]
    if diagnostics:
        lines += ["| | code | where | message |", "|---|---|---|---|"]
        for diag in diagnostics:
            mark = "❌" if diag.is_error else "⚠️"
            where = _display_file(diag, prefix) + (f":{diag.line}" if diag.line else "")
            text = diag.message + (f" — hint: {diag.hint}" if diag.hint else "")
            text = text.replace("|", "\\|")
            lines.append(f"| {mark} | `{diag.code}` | `{where}` `{diag.path}` | {text} |")
    return "\n".join(lines) + "\n\n"
