"""One output vocabulary for every command that prints (docs/output-formats.md):
`--format text|json` (some commands add `github`, `markdown`), `-o` its short form, as
kubectl's. `plan` alone keeps `-o` for `--out FILE` (saving the plan, as it always did)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

#: The formats a report can take; a command accepts those it can print.
FORMATS = ("text", "json", "github", "markdown")
TEXT_JSON = FORMATS[:2]


def add_format(parser: argparse.ArgumentParser, formats: Sequence[str] = TEXT_JSON, *,
               short: bool = True, help: str | None = None,
               aliases: Sequence[str] = ()) -> argparse.Action:
    """`--format` (and `-o`, unless `short` is false) on a command that prints: text, the
    default, for people; json for tools. `aliases`: old names still accepted."""
    names = ("--format", "-o") if short else ("--format",)
    said = help or f"{', '.join(formats[:-1])} or {formats[-1]} (default text)"
    return parser.add_argument(*names, dest="format", choices=(*formats, *aliases),
                               default="text", metavar="FORMAT", help=said)


def not_a_format(value: str) -> str:
    """`plan -o VALUE`: a file to save the plan in, never a format (`-o json` would
    otherwise write a file named json)."""
    if value in FORMATS:
        raise argparse.ArgumentTypeError(
            f"'{value}' is a format: plan's -o FILE saves the plan (as Terraform's -out); "
            f"print it with --format {value}")
    return value
