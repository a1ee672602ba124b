"""The console people read: whether it takes colour, and how text is painted.

rich decides, for every stream alike: `--no-color` (which sets NO_COLOR) and `NO_COLOR`
turn colour off, `FORCE_COLOR` turns it on for a stream that is not a terminal (CI logs),
and otherwise a terminal gets colour and a pipe or file does not. The renderers stay
plain functions returning text; they only ask for a painter.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.style import Style

Paint = Callable[[str, str], str]  # (rich style, text) → the text, painted or not


def colour_enabled(stream: TextIO) -> bool:
    from rich.console import Console

    console = Console(file=stream)
    return console.color_system is not None and not console.no_color


def painter(enabled: bool) -> Paint:
    """Paints text in a rich style (`"bold red"`) when enabled."""
    if not enabled:
        return lambda _style, text: text
    return lambda style, text: _style(style).render(text)


@cache
def _style(style: str) -> Style:
    from rich.style import Style

    return Style.parse(style)
