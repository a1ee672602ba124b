"""`unet reconcile` and `unet reconcile history` on the command line (loaded for every
unet command: the work itself is imported when it runs)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EXIT_OK, UnetError, UsageError
from ..output import add_format
from ..sources import DEFAULT_MAX_FILE_BYTES
from .history import DEFAULT_STATE_DIR, HISTORY_FILE, read_history
from .metrics import DEFAULT_METRICS_PORT, PORT_FILE

if TYPE_CHECKING:
    from .loop import Options


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """`5m`, `90s`, `1h30m`, `2.5` (seconds)."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a duration (e.g. 30s, 5m, 1h)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    value = hours * 3600 + minutes * 60 + seconds
    if value <= 0:
        raise argparse.ArgumentTypeError("the interval must be positive")
    return value


def add_parser(commands: Any) -> None:
    """`unet reconcile` and `unet reconcile history`, on the CLI's subcommands."""
    parser = commands.add_parser(
        "reconcile", help="keep the backends equal to a branch: once, or as a daemon",
        description="Observe, plan and apply, repeatedly: the repo's changes always, drift "
                    "only with `reconcile: repair` in unet.yaml. A revision that fails "
                    "validation is never applied; the last good one is kept.")
    _source_arguments(parser)
    _daemon_arguments(parser)
    add_format(parser, help="with --once: text (default), the plan and a summary for people, "
                            "or json, the run's record; the daemon logs JSON lines")
    parser.set_defaults(func=command, format=None)  # None: not given (the daemon refuses it)
    what = parser.add_subparsers(dest="reconcile_what", required=False, metavar="history",
                                 parser_class=type(parser))
    history = what.add_parser("history", help="the last runs: revision, counts, result")
    history.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR")
    add_format(history)
    history.add_argument("--limit", type=int, default=20, metavar="N",
                         help="show the last N runs (default 20; 0: all kept)")
    history.set_defaults(func=history_command)


def _source_arguments(parser: argparse.ArgumentParser) -> None:
    """What a run reconciles, and how it runs: once or as a daemon."""
    parser.add_argument("--repo", metavar="URL_OR_PATH",
                        help="Git repository to pull (cloned under the state dir); without "
                             "it, the folder --path as it is on disk")
    parser.add_argument("--branch", help="with --repo: the branch to follow (default main)")
    parser.add_argument("--path", type=Path, default=Path("."),
                        help="the network repo: a folder, or one inside --repo (default .)")
    parser.add_argument("--once", action="store_true",
                        help="one run, then exit (scheduled jobs); the default is a daemon")
    parser.add_argument("--interval", type=parse_duration, metavar="DURATION",
                        help="time between runs of the daemon: 30s, 5m, 1h (default 5m)")
    parser.add_argument("--jitter", type=float, metavar="FRACTION",
                        help="vary each interval randomly by up to this fraction (default "
                             "0.1), so that replicas do not run in step")
    parser.add_argument("--detailed-exitcode", action="store_true",
                        help="with --once: exit 2 when the run found changes or drift")
    parser.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_BYTES,
                        metavar="BYTES", help=argparse.SUPPRESS)
    parser.add_argument("--manager", action="append", metavar="NAME",
                        help="only this NetworkManager (repeatable; default: all)")
    add_region_argument(parser)
    parser.add_argument("--no-cache", action="store_true",
                        help="do not read or write unet's cache of parsed files (a daemon "
                             "uses it at its first run only)")
    parser.add_argument("--lock-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="how long to wait for another run's lock (default 60)")


def add_region_argument(parser: argparse.ArgumentParser) -> None:
    """`--region`: a run of the shard of these regions (reconciler/shard.py)."""
    parser.add_argument("--region", action="append", metavar="NAME",
                        help="run as the shard of these regions (repeatable): read only "
                             "provider/ and the tenants of these regions, and change only "
                             "their rows (docs/shards.md)")


def _daemon_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the daemon keeps its state, what it serves, how it watches and elects."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, metavar="DIR",
                        help="clone, run history and state (default .unet/reconcile)")
    parser.add_argument("--history-size", type=int, default=100, metavar="N",
                        help="runs kept in the history (default 100)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help=f"serve /metrics, /healthz, /readyz (daemon default "
                             f"{DEFAULT_METRICS_PORT}; 0: any free port, written to "
                             f"DIR/{PORT_FILE}; --once: only when given)")
    parser.add_argument("--metrics-address", metavar="ADDRESS",
                        help="address to listen on (default 0.0.0.0: every IPv4 "
                             "address; :: for every IPv6 and IPv4 address)")
    parser.add_argument("--webhook-secret-env", metavar="NAME",
                        help="serve POST /hooks/git on the metrics port: a Git push webhook "
                             "signed with the secret in this environment variable makes the "
                             "daemon fetch at once (GitHub: content type application/json)")
    parser.add_argument("--resync-interval", type=parse_duration, metavar="DURATION",
                        help="the daemon watches the backends and plans only what changed; "
                             "it plans everything at least this often (default 1h)")
    parser.add_argument("--no-watch", action="store_true",
                        help="the daemon reads every backend object on every run instead of "
                             "watching the backends' change feeds")
    parser.add_argument("--replicas", action="store_true",
                        help="the daemon is one of several replicas: one is elected active "
                             "and applies, the others stand by (standby on /readyz)")


def options_of(args: argparse.Namespace) -> Options:
    from .loop import Options

    return Options(path=args.path, repo=args.repo, branch=args.branch or "main",
                   managers=args.manager,
                   lock_timeout=args.lock_timeout, max_file_size=args.max_file_size,
                   state_dir=args.state_dir, workdir=Path.cwd(),
                   history_size=args.history_size, replicas=args.replicas and not args.once,
                   watch=not args.once and not args.no_watch,
                   resync_interval=args.resync_interval or 3600.0,
                   parse_cache=not args.no_cache,
                   regions=args.region)


def command(args: argparse.Namespace) -> int:
    from .loop import Reconciler, Serving, once, serve

    check_arguments(args)
    reconciler = Reconciler(options_of(args))
    serving = Serving(args.metrics_address or "0.0.0.0", args.metrics_port,
                      args.interval or 300.0,
                      0.1 if args.jitter is None else args.jitter,
                      _webhook_secret(args.webhook_secret_env))
    if args.once:
        return once(reconciler, serving, args.detailed_exitcode, args.format or "text")
    return serve(reconciler, serving)


#: The daemon's own flags: a single run (--once) has no interval, peers or feeds.
_DAEMON_ONLY = {"interval": "--interval", "jitter": "--jitter",
                "resync_interval": "--resync-interval", "no_watch": "--no-watch",
                "replicas": "--replicas", "webhook_secret_env": "--webhook-secret-env"}


def check_arguments(args: argparse.Namespace) -> None:
    """Flags that would be silently ignored are refused, before anything starts."""
    if args.branch is not None and args.repo is None:
        raise UsageError("--branch is the branch of --repo: without --repo, the folder "
                         "--path is reconciled as it is on disk")
    if args.once:
        given = [flag for name, flag in _DAEMON_ONLY.items()
                 if getattr(args, name) not in (None, False)]
        if given:
            raise UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} the "
                             "daemon's: --once makes one run")
        if args.metrics_address is not None and args.metrics_port is None:
            raise UsageError("--metrics-address: a run of --once serves metrics only on "
                             "--metrics-port; give it too")
        return
    if args.detailed_exitcode:
        raise UsageError("--detailed-exitcode is the exit code of one run: give --once")
    if args.format is not None:
        raise UsageError("--format is for --once (and `reconcile history`): the daemon logs "
                         "one JSON line per run on standard error")


def history_command(args: argparse.Namespace) -> int:
    runs = read_history(args.state_dir)
    if args.limit:
        runs = runs[-args.limit:]
    if args.format == "json":
        json.dump(runs, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
        return EXIT_OK
    if not runs:
        print(f"no runs recorded in {args.state_dir / HISTORY_FILE}")
        return EXIT_OK
    print(f"{'STARTED':20}  {'REVISION':12}  {'RESULT':8}  {'PLAN -/±/+/~':13}  "
          f"{'DRIFT':>5}  {'DURATION':>8}  MESSAGE")
    for run in runs:
        counts = run.get("counts") or {}
        plan = "/".join(str(counts.get(a, 0)) for a in ("delete", "replace", "create",
                                                          "update")) if counts else "-"
        revision = (run.get("revision") or "files")[:12]
        print(f"{run.get('started', ''):20}  {revision:12}  "
              f"{run.get('result', ''):8}  {plan:13}  {run.get('drift', 0):>5}  "
              f"{run.get('duration', 0):>7.1f}s  {run.get('message', '')}")
    return EXIT_OK


def _webhook_secret(name: str | None) -> bytes | None:
    if name is None:
        return None
    secret = os.environ.get(name, "")
    if not secret:
        raise UnetError(f"--webhook-secret-env {name}: the environment variable is not set "
                        "(or empty); it holds the secret the webhook's sender signs with")
    return secret.encode()
