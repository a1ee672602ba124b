"""Diagnostics for people (grouped by file), machines (JSON) and GitHub (annotations)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TextIO

from .console import painter
from .diagnostics import Diagnostic

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


def use_colour(stream: TextIO) -> bool:
    from .console import colour_enabled

    return colour_enabled(stream)


Sources = Callable[[str], "list[str] | None"]  # a repo file → its lines, when readable


#: Larger files get no source line (the loader refuses them anyway).
_SOURCE_LIMIT = 1 << 20


def folder_sources(root: Path) -> Sources:
    """The lines of the repo's files on disk, each file read once: regular files inside
    the repo only (never a FIFO, which would block, nor what a symlink points at outside)."""
    inside = root.resolve()

    @cache
    def lines(file: str) -> list[str] | None:
        try:
            path = (root / file).resolve()
            status = path.stat()
            if not path.is_relative_to(inside) or not stat.S_ISREG(status.st_mode) \
                    or status.st_size > _SOURCE_LIMIT:
                return None
            return path.read_text(encoding="utf-8", errors="replace").splitlines()
        except (OSError, RuntimeError):  # gone, unreadable, a symlink loop
            return None

    return lines


def revision_sources(root: Path, rev: str) -> Sources:
    """The lines of the repo's files as the Git revision `rev` holds them, each read once:
    what was validated, whatever the working tree holds."""
    from .sources import SourceFile
    from .validate import repo_files

    files = {item.path: item for item in repo_files(root, rev, _SOURCE_LIMIT)
             if isinstance(item, SourceFile)}

    @cache
    def lines(file: str) -> list[str] | None:
        item = files.get(file)
        if item is None or item.size > _SOURCE_LIMIT:
            return None
        return item.read().decode("utf-8", errors="replace").splitlines()

    return lines


def sources_of(root: Path, rev: str | None) -> Sources:
    """Where diagnostics of the repo at `root` (its revision `rev`, when given) quote from."""
    return revision_sources(root, rev) if rev else folder_sources(root)


def render_human(diagnostics: Sequence[Diagnostic], summary: Summary, stream: TextIO,
                 prefix: str = "", colour: bool = False, sources: Sources | None = None) -> None:
    """One block per diagnostic: `file:line:col: severity CODE message` (terminals and
    editors make the location a link), then the source line it is about, as Terraform and
    compilers show it, then the hint."""
    paint = painter(colour)
    for diag in sorted(diagnostics, key=Diagnostic.sort_key):
        lines = sources(diag.file) if sources is not None and diag.file and diag.line else None
        text = lines[diag.line - 1] if lines and diag.line and diag.line <= len(lines) else None
        column = diag.column or (_column_of(text, diag.path) if text is not None else None)
        where = _display_file(diag, prefix) + (f":{diag.line}" if diag.line else "") + (
            f":{column}" if diag.line and column else "")
        severity = paint("bold red" if diag.is_error else "bold yellow", str(diag.severity))
        path = paint("dim", f"  ({diag.path})") if diag.path else ""
        stream.write(f"{paint('bold', where)}: {severity} {paint('bold', diag.code)} "
                     f"{diag.message}{path}\n")
        if text is not None:
            number = str(diag.line)
            stream.write(f"  {paint('dim', number + ' |')} {text}\n")
            if column:
                stream.write(f"  {' ' * len(number)} {paint('dim', '|')} {' ' * (column - 1)}"
                             f"{paint('bold red' if diag.is_error else 'bold yellow', '^')}\n")
        if diag.hint:
            stream.write(f"  {paint('cyan', 'hint:')} {diag.hint}\n")
        stream.write("\n")
    checked = f"{_plural(summary.documents, 'manifest')} in {_plural(summary.files, 'file')}"
    if summary.errors:
        stream.write(paint("bold red", f"✖ {_plural(summary.errors, 'error')}")
                     + f", {_plural(summary.warnings, 'warning')} ({checked})\n")
    elif summary.warnings:
        stream.write(paint("bold yellow", f"✔ valid with {_plural(summary.warnings, 'warning')}")
                     + f" ({checked})\n")
    else:
        stream.write(paint("bold green", "✔ valid") + f" ({checked})\n")


def _column_of(text: str, pointer: str) -> int:
    """1-based column of what a JSON pointer names on its line: the key, or the item."""
    last = pointer.rsplit("/", 1)[-1] if pointer else ""
    if last and not last.isdigit():
        found = text.find(f"{last}:")
        if found >= 0:
            return found + 1
    stripped = text.lstrip()
    return len(text) - len(stripped) + 1


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
    stream.write(github_annotations([d.to_json() for d in ordered], prefix))
    render_human(diagnostics, summary, stream, prefix)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as out:
            out.write(markdown_summary(ordered, summary, prefix))


def github_annotations(diagnostics: Sequence[dict[str, Any]], prefix: str = "") -> str:
    """`::error file=…,line=…::message` for the first ten errors and ten warnings (GitHub
    shows no more per step), and how many more there are."""
    shown = {"error": 0, "warning": 0}
    lines = []
    for diag in diagnostics:
        severity = str(diag["severity"])
        if shown[severity] >= GITHUB_ANNOTATIONS_PER_SEVERITY:
            continue
        shown[severity] += 1
        file = prefix + diag["file"] if diag.get("file") else prefix.rstrip("/") or "."
        props = [f"file={_escape_property(file)}"]
        if diag.get("line"):
            props.append(f"line={diag['line']}")
        if diag.get("column"):
            props.append(f"col={diag['column']}")
        props.append(f"title={_escape_property(str(diag['code']))}")
        message = str(diag["message"]) + (f" ({diag['path']})" if diag.get("path") else "")
        if diag.get("hint"):
            message += f"\nhint: {diag['hint']}"
        lines.append(f"::{severity} {','.join(props)}::{_escape_data(message)}\n")
    hidden = len(diagnostics) - sum(shown.values())
    if hidden:
        lines.append(f"{hidden} more diagnostics are listed in the job summary.\n")
    return "".join(lines)


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
