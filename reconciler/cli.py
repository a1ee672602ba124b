"""The `unet` command line."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from . import heap
from .command import Command, installed_commands
from .daemon import cli as reconcile
from .diagnostics import Diagnostic, codes_markdown
from .errors import EXIT_ERROR, EXIT_OK, Stopped, UnetError, UsageError
from .output import FORMATS, add_format, not_a_format
from .sources import DEFAULT_MAX_FILE_BYTES, SourceFile
from .state import STATE_DIR, state_folder


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 1: exit code 2 means "changes present" for every unet command.
    Every command takes --no-color, before or after its name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS,
                          help="no colour (as NO_COLOR=1 does; FORCE_COLOR=1 forces it)")

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"unet: error: {message}\n")


def _add_repo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", default=None, type=Path,
                        help="the network repo (default: the one the current folder is in)")
    parser.add_argument("--rev", metavar="REV",
                        help="read this Git revision's objects instead of the files on disk")
    parser.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_BYTES,
                        metavar="BYTES", help="largest manifest file accepted (default 1 MiB)")
    _add_no_cache(parser)


def _add_no_cache(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-cache", action="store_true",
                        help="do not read or write unet's cache of parsed files")


def _add_live_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manager", action="append", metavar="NAME",
                        help="only this NetworkManager (repeatable; default: all)")
    reconcile.add_region_argument(parser)
    parser.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                        help="how long to wait for another run's lock (default 60)")


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """A command of commands.py, imported when it runs (`validate` needs none of it)."""
    def run(args: argparse.Namespace) -> int:
        from . import commands

        return int(getattr(commands, name)(args))

    return run


#: The subcommands of a parser (argparse's own type).
Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _plugin_command(command: Command) -> Callable[[argparse.Namespace], int]:
    """A command of a plugin, run through commands.py (imported when it runs)."""
    def run(args: argparse.Namespace) -> int:
        from . import commands

        return commands.plugin_command(command)(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="unet", description="Declarative GitOps reconciler for multi-tenant "
                     "cloud networking.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_validate, _add_plan, _add_apply, reconcile.add_parser, _add_schema,
                _add_codes, _add_show, _add_reach, _add_import, _add_plugin_commands,
                _add_completion):
        add(commands)
    return parser


def _add_validate(commands: Commands) -> None:
    validate = commands.add_parser(
        "validate", help="check a network repo; every problem at once",
        description="Check the network repo (the one the current folder is in, or PATH). "
                    "Given manifest files (pre-commit), the whole repo is checked and only "
                    "problems in those files are reported.")
    validate.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                          help="the network repo, or manifest files of one")
    validate.add_argument("--rev", metavar="REV",
                          help="read this Git revision's objects instead of the files on disk")
    validate.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_BYTES,
                          metavar="BYTES", help="largest manifest file accepted (default 1 MiB)")
    add_format(validate, FORMATS, aliases=("human",),
               help="text (human: its old name), json, github (annotations), markdown")
    validate.add_argument("--no-cache", action="store_true",
                          help="do not read or write unet's caches (results and parsed "
                               "files)")
    validate.set_defaults(func=_cmd_validate)


def _add_plan(commands: Commands) -> None:
    plan = commands.add_parser("plan", help="show what applying the repo would change")
    _add_repo_arguments(plan)
    plan.add_argument("--base", metavar="REV",
                      help="plan between two revisions, without any backend: BASE stands for "
                           "what the backends hold (pull requests)")
    plan.add_argument("--head", metavar="REV",
                      help="with --base: the revision to plan (default: the files on disk)")
    plan.add_argument("-o", "--out", type=_plan_file, metavar="FILE",
                      help="save the plan as JSON (the one command where -o is not --format)")
    add_format(plan, FORMATS, short=False,
               help="text, json, markdown, github: annotations for the diagnostics, the text "
                    "plan, and the Markdown plan in the job summary")
    plan.add_argument("--detailed-exitcode", action="store_true",
                      help="exit 2 when the plan has changes, 0 when it has none")
    plan.add_argument("--refresh-only", action="store_true",
                      help="only what changed in the backends outside unet (drift)")
    plan.add_argument("--show-unmanaged", action="store_true",
                      help="also list backend objects that are not this installation's")
    _add_live_arguments(plan)
    plan.set_defaults(func=_command("plan"))


def _plan_file(value: str) -> Path:
    return Path(not_a_format(value))


def _add_apply(commands: Commands) -> None:
    apply = commands.add_parser("apply", help="make the backends match the repo")
    apply.add_argument("target", nargs="?", default=None, type=Path,
                       help="the network repo (default: the one the current folder is in) "
                            "or a plan saved with plan -o")
    apply.add_argument("--rev", metavar="REV", help="apply this Git revision")
    apply.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_BYTES,
                       metavar="BYTES", help=argparse.SUPPRESS)
    _add_no_cache(apply)
    apply.add_argument("--auto-approve", action="store_true",
                       help="do not ask for confirmation (CI)")
    apply.add_argument("--refresh-only", action="store_true",
                       help="only repair drift; leave repo changes for a normal apply")
    add_format(apply, help="text or json (one object: the plan applied and the outcome; "
                           "needs --auto-approve)")
    _add_live_arguments(apply)
    apply.set_defaults(func=_command("apply"))


def _add_schema(commands: Commands) -> None:
    schema = commands.add_parser(
        "schema", help="write, print or locate the JSON Schemas of every kind",
        description="Write the JSON Schemas of every kind. Inside a network repo they go "
                    "to its .unet/schemas/; from unet's source tree, to its schemas/; "
                    "elsewhere an installed unet writes only where --out says.")
    what = schema.add_mutually_exclusive_group()
    what.add_argument("--out", type=Path, default=None, metavar="DIR",
                      help="folder to write (default: .unet/schemas/ of the network repo "
                           "you are in, else schemas/ of the unet source tree unet runs from)")
    what.add_argument("--print", action="store_true",
                      help="print the combined schema for editors (unet.schema.json; "
                           "self-contained) instead of writing files")
    what.add_argument("--path", action="store_true",
                      help="print the folder of the schemas this unet validates with")
    schema.add_argument("--check", action="store_true",
                        help="only compare (with --out DIR, or the schemas this unet "
                             "validates with); exit 1 when the files differ from the models")
    schema.set_defaults(func=_cmd_schema)


def _add_codes(commands: Commands) -> None:
    codes = commands.add_parser(
        "codes", help="list the diagnostic codes, or explain one",
        description="Without CODE, every code; with it, what it means, an example (from "
                    "examples/broken/, where unet runs from its source tree) and the fix.")
    code = codes.add_argument("code", nargs="?", metavar="CODE",
                              help="a code to explain: SUBNET_OVERLAP (subnet-overlap too)")
    code.completer = _code_names  # type: ignore[attr-defined]
    codes.add_argument("--markdown", action="store_true",
                       help="the reference page (as --format markdown)")
    add_format(codes, ("text", "json", "markdown"))
    codes.set_defaults(func=_cmd_codes)


def _add_show(commands: Commands) -> None:
    show = commands.add_parser("show", help="show a resolved object")
    show_what = show.add_subparsers(dest="what", required=True, parser_class=_Parser)
    saved = show_what.add_parser("plan", help="render a saved plan")
    saved.add_argument("file", type=Path)
    add_format(saved, FORMATS)
    saved.set_defaults(func=_command("show_plan"))
    binding = show_what.add_parser(
        "bindings", help="what each workload needs to bind: addresses, gateway, DNS, routes, "
                         "MTU, segment, the network to attach to on its hosting cluster")
    _add_repo_arguments(binding)
    binding.add_argument("--tenant", metavar="NAME", help="only this tenant's workloads")
    add_format(binding)
    binding.add_argument("--offline", action="store_true",
                         help="do not read the backends (a pull request's view): allocated "
                              "values are shown as (known after apply)")
    binding.add_argument("--manager", action="append", metavar="NAME",
                         help="read only this NetworkManager's backend (repeatable)")
    binding.set_defaults(func=_command("show_bindings"))
    _add_show_usage(show_what)
    _add_show_status(show_what)
    network_class = show_what.add_parser("networkclass",
                                         help="a NetworkClass and its effective capabilities")
    network_class.add_argument("name")
    _add_repo_arguments(network_class)
    add_format(network_class)
    network_class.set_defaults(func=_cmd_show_network_class)


def _add_show_usage(show_what: Commands) -> None:
    usage = show_what.add_parser(
        "usage", help="size, used and free of every ExternalIPPool, subnet and segment range",
        description="Used is what the backends record (their unet:alloc tags), or with "
                    "--offline what the repo's own allocation takes from empty backends.")
    _add_repo_arguments(usage)
    usage.add_argument("--tenant", metavar="NAME",
                       help="only the spaces this tenant draws from: its subnets, the "
                            "provider networks shared with it, the pools it may use, its "
                            "classes' segment ranges")
    add_format(usage)
    usage.add_argument("--offline", action="store_true",
                       help="do not read the backends: count what the repo's allocation takes")
    usage.add_argument("--manager", action="append", metavar="NAME",
                       help="read only this NetworkManager's backend (repeatable)")
    usage.set_defaults(func=_command("show_usage"))


def _add_show_status(show_what: Commands) -> None:
    shown = show_what.add_parser(
        "status", help="per manifest: Ready, Pending (why) or Failed (the error), and its "
                       "allocated values",
        description="Read from the backends without their locks (nothing is changed): a "
                    "manifest is Ready when its backend objects are what the revision asks.")
    _add_repo_arguments(shown)
    shown.add_argument("--tenant", metavar="NAME",
                       help="only this tenant's manifests (nothing of another tenant)")
    add_format(shown)
    shown.add_argument("--manager", action="append", metavar="NAME",
                       help="read only this NetworkManager's backend (repeatable)")
    reconcile.add_region_argument(shown)
    shown.set_defaults(func=_command("show_status"))


def _add_reach(commands: Commands) -> None:
    reach = commands.add_parser(
        "reach", help="whether FROM may open a connection to TO, and why",
        description="Answer from the revision's reachability (docs/api.md, \"Reachability\"): "
                    "FROM and TO are tenant/workload (optionally /NIC, the attachment's "
                    "position from 0), an address or CIDR, or internet. Addresses are the "
                    "revision's own allocation (what a fresh apply would give).")
    _add_repo_arguments(reach)
    reach.add_argument("source", metavar="FROM")
    reach.add_argument("target", metavar="TO")
    reach.add_argument("--port", metavar="PROTO/PORT",
                       help="tcp/443, udp/53, icmp or icmpv6 (default: tcp, any port)")
    add_format(reach)
    reach.add_argument("--live", action="store_true",
                       help="cross-check the answer with the live fabric (OVN: ovn-trace on "
                            "the manager's southbound) and say where they disagree")
    reach.add_argument("--detailed-exitcode", action="store_true",
                       help="with --live, exit 2 when the live fabric disagrees")
    reach.set_defaults(func=_command("reach"))


def _add_import(commands: Commands) -> None:
    adopt = commands.add_parser(
        "import", help="adopt backend rows no installation owns (writes their manifests)",
        description="Read the rows of an OVN NetworkManager that no installation owns and "
                    "write the manifests that describe them, a VirtualNetwork at a time, to "
                    "tenants/TENANT/imported/ (docs/import.md). Nothing is written to the "
                    "backend. Once they are reviewed and merged, --apply tags the rows in "
                    "place: no create, no delete.")
    adopt.add_argument("path", nargs="?", default=None, type=Path,
                       help="the network repo (default: the one the current folder is in)")
    adopt.add_argument("--manager", required=True, metavar="NAME",
                       help="the NetworkManager whose backend is read (an ovn one)")
    adopt.add_argument("--tenant", required=True, metavar="TENANT",
                       help="the tenant the networks become part of (a declared Tenant)")
    adopt.add_argument("--region", metavar="REGION", dest="into_region",  # not a shard
                       help="their region (default: the tenant's only region the manager "
                            "serves)")
    adopt.add_argument("--apply", action="store_true",
                       help="tag the rows that the repo's manifests describe exactly")
    adopt.add_argument("--rev", metavar="REV",
                       help="with --apply: the manifests of this Git revision (the merged "
                            "branch, say) instead of the files on disk")
    adopt.add_argument("--lock-timeout", type=float, default=60.0, metavar="SECONDS",
                       help="how long --apply waits for another run's lock (default 60)")
    add_format(adopt)
    adopt.set_defaults(func=_command("import_rows"), max_file_size=DEFAULT_MAX_FILE_BYTES,
                       no_cache=False)


def _add_plugin_commands(commands: Commands) -> None:
    for command in installed_commands():
        added = commands.add_parser(command.name, help=command.help,
                                     description=command.description)
        added.add_argument("--path", type=Path, default=None,
                           help="the network repo (default: the one the current folder is in)")
        added.add_argument("--manager", action="append", metavar="NAME",
                           help="the NetworkManagers to use (default: all of the repo's)")
        command.arguments(added)
        added.set_defaults(func=_plugin_command(command), max_file_size=DEFAULT_MAX_FILE_BYTES,
                           no_cache=False)


def _add_completion(commands: Commands) -> None:
    completion = commands.add_parser(
        "completion", help="print the shell completion script (bash, zsh, fish)",
        description="bash: eval \"$(unet completion bash)\" in ~/.bashrc; zsh: the same in "
                    "~/.zshrc; fish: unet completion fish | source in config.fish")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    completion.set_defaults(func=_cmd_completion)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("unet")
    except PackageNotFoundError:
        return "(not installed)"


def repo_root(start: Path) -> Path:
    """The network repo a folder is in: the nearest one holding unet.yaml, from `start`
    upwards (as Git finds its work tree); `start` itself when none does."""
    here = start.resolve()
    return next((folder for folder in (here, *here.parents)
                 if (folder / "unet.yaml").is_file()), start)


def _cmd_completion(args: argparse.Namespace) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode(["unet"], shell=args.shell))  # type: ignore[attr-defined]
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from .progress import say, working
    from .report import (
        display_prefix,
        markdown_summary,
        render_github,
        render_human,
        render_json,
        sources_of,
        summarize,
        use_colour,
    )

    args.path, only = _validate_target(args.paths)
    with working():
        say("validating")
        diagnostics, files, documents = _validated(args)
    if only is not None:  # pre-commit: the files given, and what concerns the whole repo
        diagnostics = [d for d in diagnostics if d.file is None or d.file in only]
    summary = summarize(diagnostics, files, documents)
    out = sys.stdout
    if args.format == "json":
        render_json(diagnostics, summary, out, display_prefix(args.path))
    elif args.format == "github":
        base = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd())
        render_github(diagnostics, summary, out, display_prefix(args.path, base),
                      os.environ.get("GITHUB_STEP_SUMMARY"))
    elif args.format == "markdown":
        out.write(markdown_summary(diagnostics, summary, display_prefix(args.path)))
    else:
        render_human(diagnostics, summary, out, display_prefix(args.path), use_colour(out),
                     sources_of(args.path, args.rev))
    return EXIT_ERROR if summary.errors else EXIT_OK


def _validate_target(paths: list[Path]) -> tuple[Path, set[str] | None]:
    """The repo to validate, and the repo files to report on (None: all of them)."""
    if not paths:
        return repo_root(Path.cwd()), None
    if len(paths) == 1 and paths[0].is_dir():
        return paths[0], None
    for path in paths:
        if path.is_dir():
            raise UnetError(f"{path} is a folder: give one folder, or files")
        if not path.is_file():
            raise UnetError(f"{path}: no such file or folder")
    root = repo_root(paths[0].parent)
    if not (root / "unet.yaml").is_file():
        raise UnetError(f"{paths[0]} is not in a network repo: no unet.yaml in its folder "
                        "or above")
    only = set()
    for path in paths:
        try:
            only.add(path.resolve().relative_to(root.resolve()).as_posix())
        except ValueError as exc:
            raise UnetError(f"{path} is not inside the network repo at {root}") from exc
    return root, only


def _validated(args: argparse.Namespace) -> tuple[list[Any], int, int]:
    """Diagnostics, files and documents of the repo; from the cache when nothing changed."""
    from .cache import ValidationCache, cache_dir, inputs_digest
    from .validate import parsed_files, repo_files, validate_files

    items = [_read_once(item, args.max_file_size)
             for item in repo_files(args.path, args.rev, args.max_file_size)]
    cache = None if args.no_cache else ValidationCache(cache_dir(args.path))
    key = inputs_digest(items, args.max_file_size) if cache else ""
    hit = cache.lookup(key) if cache else None
    if hit is not None:
        return hit["diagnostics"], hit["files"], hit["documents"]
    parsed = parsed_files(args.path, args.max_file_size, not args.no_cache)
    result = validate_files(iter(items), args.max_file_size, parsed)
    parsed.save()
    if cache:
        cache.store(key, result.diagnostics, result.files, len(result.documents))
    return result.diagnostics, result.files, len(result.documents)


def _read_once(item: SourceFile | Diagnostic, max_file_bytes: int) -> SourceFile | Diagnostic:
    """A file on disk, read now: the cache key and the parse then read it once, not twice."""
    if not isinstance(item, SourceFile) or item.blob_id is not None or \
            item.size > max_file_bytes:
        return item
    content = item.read()
    return SourceFile(item.path, item.size, lambda: content)


def _cmd_schema(args: argparse.Namespace) -> int:
    from .schema import (
        COMBINED_SCHEMA,
        generate_schemas,
        render_schema_file,
        schema_dir,
        source_schema_dir,
    )

    if args.check and (args.print or args.path):
        raise UnetError("--check compares files: give it alone, or with --out DIR")
    if args.path:
        return _print_schema_dir(schema_dir())
    files = {name: render_schema_file(schema) for name, schema in generate_schemas().items()}
    if args.print:
        sys.stdout.write(files[COMBINED_SCHEMA])
        return EXIT_OK
    if args.check:
        return _check_schemas(files, args.out or schema_dir())
    out_dir = args.out or _schema_out_dir() or source_schema_dir()
    if out_dir is None:
        raise UnetError(f"this unet is installed, not run from its source tree, and its "
                        f"schemas ({schema_dir()}) are part of the installation: give "
                        f"--out DIR to write them elsewhere, or --print for the combined one")
    state_folder(out_dir)
    for name, text in files.items():
        (out_dir / name).write_text(text)
    print(f"wrote {len(files)} schemas to {out_dir}")
    return EXIT_OK


def _schema_out_dir() -> Path | None:
    """Inside a network repo, a bare `unet schema` writes into its `.unet/schemas/` (never
    into the source tree of the unet that runs it)."""
    repo = repo_root(Path.cwd())
    if not (repo / "unet.yaml").is_file():
        return None
    return repo / STATE_DIR / "schemas"


def _print_schema_dir(folder: Path) -> int:
    if not folder.is_dir():
        raise UnetError(f"unet's schemas are missing (looked in {folder}): reinstall unet")
    print(folder)
    return EXIT_OK


def _check_schemas(files: dict[str, str], out_dir: Path) -> int:
    stale = [name for name, text in files.items()
             if not (out_dir / name).is_file() or (out_dir / name).read_text() != text]
    extra = sorted(p.name for p in out_dir.glob("*.json") if p.name not in files) \
        if out_dir.is_dir() else []
    for name in stale + extra:
        print(f"{out_dir / name}: differs from the models", file=sys.stderr)
    if stale or extra:
        print("run `unet schema` and commit the result", file=sys.stderr)
        return EXIT_ERROR
    print(f"{len(files)} schemas up to date in {out_dir}")
    return EXIT_OK


def _cmd_codes(args: argparse.Namespace) -> int:
    import json

    from .diagnostics import CODES

    if args.markdown and args.format != "text":
        raise UsageError("--markdown is --format markdown: give one of them")
    fmt = "markdown" if args.markdown else args.format
    if args.code is not None:
        return _explain_code(args.code, fmt)
    if fmt == "markdown":
        sys.stdout.write(codes_markdown())
    elif fmt == "json":
        listed = [{"code": code, "severity": str(info.severity), "category": info.category,
                   "when": info.when} for code, info in CODES.items()]
        sys.stdout.write(json.dumps(listed, indent=2) + "\n")
    else:
        width = max(map(len, CODES))
        for code, info in CODES.items():
            print(f"{code:{width}} {info.severity:8} {info.when}")
    return EXIT_OK


def _explain_code(text: str, fmt: str) -> int:
    import json

    from .explain import code_named, explanation, render_markdown, render_text

    document = explanation(code_named(text))
    if fmt == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(render_markdown(document) if fmt == "markdown"
                         else render_text(document))
    return EXIT_OK


def _code_names(**_kwargs: Any) -> list[str]:
    """What completes CODE: every code."""
    from .diagnostics import CODES

    return list(CODES)


def _cmd_show_network_class(args: argparse.Namespace) -> int:
    import io
    import json

    from .report import display_prefix, render_human, render_json, sources_of, summarize
    from .validate import validate_repo

    result = validate_repo(args.path, args.rev, args.max_file_size)
    ctx = result.context
    cls = ctx.get("NetworkClass", None, args.name) if ctx else None
    if cls is None or ctx is None:
        print(f"unet: no NetworkClass named '{args.name}'", file=sys.stderr)
        return EXIT_ERROR
    caps = ctx.class_caps.get(cls.name)
    document = _network_class(cls, caps)
    summary = summarize(result.diagnostics, result.files, len(result.documents))
    if args.format == "json":  # an invalid class's document says why, as validate's does
        report = io.StringIO()
        render_json(result.diagnostics, summary, report, display_prefix(args.path))
        document["diagnostics"] = json.loads(report.getvalue())["diagnostics"]
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        _print_network_class(document)
        if caps is None:
            render_human(result.diagnostics, summary, sys.stdout, display_prefix(args.path),
                         sources=sources_of(args.path, args.rev))
    return EXIT_OK if caps is not None else EXIT_ERROR


def _network_class(cls: Any, caps: set[str] | frozenset[str] | None) -> dict[str, Any]:
    spec = cls.obj.spec
    return {"format_version": "1.0", "name": cls.name, "file": cls.doc.file,
            "line": cls.doc.line, "region": spec.region, "default": bool(spec.default),
            "fabricManager": spec.fabric_manager, "k8sManager": spec.k8s_manager,
            "segmentRange": {"start": spec.segment_range.start,
                             "end": spec.segment_range.end},
            "vipPrefixLength": spec.vip_prefix_length,
            "disabledCapabilities": sorted(spec.disable_capabilities or ()),
            "capabilities": sorted(caps) if caps is not None else None}


def _print_network_class(doc: dict[str, Any]) -> None:
    print(f"NetworkClass {doc['name']}  ({doc['file']}:{doc['line']})")
    print(f"  region:        {doc['region']}{'  (default)' if doc['default'] else ''}")
    print(f"  fabricManager: {doc['fabricManager'] or '-'}")
    print(f"  k8sManager:    {doc['k8sManager'] or '-'}")
    print(f"  segmentRange:  {doc['segmentRange']['start']}-{doc['segmentRange']['end']}")
    print(f"  vipPrefixLength: {doc['vipPrefixLength'] or '-'}")
    if doc["disabledCapabilities"]:
        print(f"  disabled:      {', '.join(doc['disabledCapabilities'])}")
    if doc["capabilities"] is None:
        print("  capabilities:  unknown (the class is invalid)")
    else:
        print(f"  capabilities:  {', '.join(doc['capabilities'])}")


def argcomplete_hook(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request, when this run is one (then exit)."""
    if "_ARGCOMPLETE" in os.environ:
        import argcomplete

        argcomplete.autocomplete(parser)


def entry() -> None:
    """The `unet` program: the process's garbage-collector policy (heap.py), then main."""
    heap.switch_off()
    try:
        code = main()
    finally:
        heap.before_exit()
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete_hook(parser)
    args = parser.parse_args(argv)
    if getattr(args, "no_color", False):
        os.environ["NO_COLOR"] = "1"
    func: Callable[[argparse.Namespace], int] = args.func
    return _run(lambda given: func(_with_repo(given)), args)


def _with_repo(args: argparse.Namespace) -> argparse.Namespace:
    """The repo the current folder is in, unless one is given; one given must exist."""
    for name in ("path", "target"):
        if name not in vars(args) or args.command == "reconcile":  # its --path: in --repo
            continue
        given = getattr(args, name)
        if given is None:
            setattr(args, name, repo_root(Path.cwd()))
        elif isinstance(given, Path) and not given.exists():
            what = "the network repo, or a plan saved with `unet plan -o FILE`" \
                if name == "target" else "the network repo (a folder)"
            raise UsageError(f"{given}: no such file or folder; give {what}")
    return args


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        try:
            return func(args)
        except Stopped as stopped:  # what stopped it is the news; how far it got is shown
            raise stopped.cause from None
    except UsageError as exc:
        print(f"unet: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except UnetError as exc:
        print(f"unet: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("unet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_ERROR
    except Exception as exc:  # a bug of ours: say so plainly, details on request
        if os.environ.get("UNET_DEBUG"):
            traceback.print_exc()
        else:
            print(f"unet: internal error: {type(exc).__name__}: {exc}\n"
                  "This is a bug in unet, not in your manifests; set UNET_DEBUG=1 for details "
                  "and report it.", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    entry()
