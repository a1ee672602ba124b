"""A command a plugin adds to `unet`, registered under the entry-point group
`unet.commands` (`nb = "unet.managers.ovn.commands:NB"`), and how the command line finds them.
Kept apart from the contract, and light: the command line reads every plugin's commands
each time it starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .contract import Manager

ENTRY_POINT_GROUP = "unet.commands"


@dataclass(frozen=True)
class Command:
    """`unet <name>`. unet adds its usual flags (`--path`, the repo; `--manager`, repeated),
    then `arguments` adds the command's own; to run it, unet validates the repo and
    instantiates its NetworkManagers (those of `--manager`), and calls `run` with the
    parsed arguments, those managers by name and the repo's folder. `run` gives the exit
    code; a unet.sdk.UnetError it raises is printed as unet's own errors are."""

    name: str
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Mapping[str, Manager], Path], int]


def installed_commands() -> list[Command]:
    """The commands of the installed plugins, by name; one whose entry point does not load
    is still listed, and says why when it is run."""
    from importlib.metadata import entry_points

    found: dict[str, Command] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            command = entry.load()
            if not isinstance(command, Command):
                raise TypeError(f"{entry.value} is not a managers.sdk.Command")
        except Exception as exc:  # a plugin's own bug must not take the command line down
            command = _broken(entry.name, f"{entry.value} does not load: "
                                          f"{type(exc).__name__}: {exc}")
        found.setdefault(command.name, command)
    return [found[name] for name in sorted(found)]


def _broken(name: str, why: str) -> Command:
    def run(args: argparse.Namespace, managers: Mapping[str, Manager], repo: Path) -> int:
        print(f"unet: the command '{name}' cannot run: {why}", file=sys.stderr)
        return 1

    return Command(name, help=f"(does not load: {why})", description=why,
                   arguments=lambda parser: None, run=run)
