"""What the `ovn` plugin adds to the command line: `unet nb`, ovn-nbctl against the
Northbound database of the repo's OVN NetworkManager."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from unet.managers.command import Command

if TYPE_CHECKING:
    from unet.managers.sdk import Manager


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("nbctl", nargs=argparse.REMAINDER, metavar="-- ARGS",
                        help="arguments for ovn-nbctl")


def _nb(args: argparse.Namespace, managers: Mapping[str, Manager], repo: Path) -> int:
    """The embedded database (started for the command when no unet run has it up), or the
    configured remote."""
    # Imported here: the command line reads this module each time it starts.
    from .embedded import EmbeddedNorthbound
    from .manager import OvnManager

    ovn = {name: m for name, m in managers.items() if isinstance(m, OvnManager)}
    if len(ovn) != 1:
        which = " named so" if args.manager else ""
        print(f"unet: the repo has several OVN NetworkManagers ({', '.join(sorted(ovn))}): "
              "name one with --manager" if ovn else
              f"unet: the repo has no OVN NetworkManager{which}", file=sys.stderr)
        return 1
    config = next(iter(ovn.values())).config
    command = args.nbctl[1:] if args.nbctl[:1] == ["--"] else args.nbctl
    ssl = [f"--{flag}={value}" for flag, value in (("private-key", config.ssl_key),
                                                   ("certificate", config.ssl_cert),
                                                   ("ca-cert", config.ssl_ca_cert)) if value]
    with ExitStack() as stack:
        remote = config.northbound
        if remote == "embedded":
            remote = stack.enter_context(EmbeddedNorthbound(repo)).remote
        try:
            return subprocess.run(["ovn-nbctl", f"--db={remote}", *ssl, *command],
                                  check=False).returncode
        except FileNotFoundError:
            print("unet: ovn-nbctl is not installed (apt-get install ovn-central)",
                  file=sys.stderr)
            return 1


NB = Command(
    "nb", help="run ovn-nbctl against the repo's OVN Northbound (`unet nb -- show`)",
    description="Run ovn-nbctl against the Northbound database of the repo's OVN "
                "NetworkManager: the embedded one, which unet starts when needed, or its "
                "configured remote.",
    arguments=_arguments, run=_nb)
