"""The performance benchmark of `unet` (`make bench`): its command line.

`python -m benchmarks.bench` measures unet commands on synthetic repos of growing size
(benchmarks/generate.py, benchmarks/repos.py), each run in a fresh process (wall time and
the child's peak RSS), and reports medians and how the cost grows with the size. See
docs/performance.md. For each size, from the smallest: the stages (benchmarks/stages.py,
measured by benchmarks/measure.py), the daemon's (benchmarks/daemon.py), the comparisons
(benchmarks/compare.py, benchmarks/nbctl.py) and the profile (benchmarks/profiling.py);
then the report (benchmarks/report.py). It exits 1 when a run was not clean.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from .compare import (
    COMPARISONS,
    compare_cluster,
    compare_daemon,
    compare_observe,
    compare_schema,
    compare_shard,
)
from .daemon import measure_commit, measure_daemon
from .fixture import Fixture
from .measure import measure
from .nbctl import compare_nbctl
from .northbound import ClusterServer, NbServer
from .profiling import profile_stage
from .report import BAR_TENANTS, print_report, render_markdown
from .repos import prepared_repo
from .results import Report, Result, add_growth, combine
from .stages import CLUSTERED, DAEMON_STAGES, SHARDED, SOURCES, STAGES, ensure_applied
from .system import machine


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text}") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("sizes are positive integers")
    return values


def _choice_list(choices: Sequence[str], allow_none: bool = False
                 ) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        if allow_none and text.strip() == "none":
            return []
        values = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return values
    return parse


def _stage_repeats(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, _, count = part.partition("=")
        if name.strip() not in STAGES or not count.strip().isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"STAGE=N with a stage of {', '.join(STAGES)}")
        out[name.strip()] = int(count)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench",
                                     description="Time unet on synthetic repos of growing size.")
    parser.add_argument("--sizes", type=_int_list, default=[100, 1000, 3000],
                        help="tenant counts, comma separated (default 100,1000,3000)")
    parser.add_argument("--stages", type=_choice_list([*STAGES, *DAEMON_STAGES]),
                        default=[*STAGES, *DAEMON_STAGES],
                        help=f"stages to measure: {', '.join([*STAGES, *DAEMON_STAGES])} "
                             "(default all)")
    parser.add_argument("--sources", type=_choice_list(list(SOURCES)), default=["folder"],
                        help="validate reads the folder, Git (--rev HEAD), or both "
                             "(default folder)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per figure of the light stages; the median (default 3)")
    parser.add_argument("--heavy-repeat", type=int, default=1,
                        help="runs per figure of apply and reconcile (default 1)")
    parser.add_argument("--stage-repeat", type=_stage_repeats, default={},
                        metavar="STAGE=N,...", help="runs per figure of single stages")
    parser.add_argument("--compare", type=_choice_list(COMPARISONS, allow_none=True),
                        default=list(COMPARISONS),
                        help=f"comparisons: {', '.join(COMPARISONS)} or none (default all)")
    parser.add_argument("--full-max", type=int, default=BAR_TENANTS, metavar="TENANTS",
                        help="sizes above this run each stage once and skip the schema and "
                             f"ovn-nbctl comparisons (default {BAR_TENANTS})")
    parser.add_argument("--profile-size", type=int, default=BAR_TENANTS,
                        help="profile the slowest stage at this size, when measured "
                             f"(default {BAR_TENANTS}; 0: no profile)")
    parser.add_argument("--profile-stage", choices=list(STAGES), default=None,
                        help="profile this stage instead of the slowest")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder that caches the generated repos (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results as JSON")
    parser.add_argument("--markdown", type=Path, default=None, metavar="PATH",
                        help="also write the figures as Markdown (for docs/performance.md)")
    parser.add_argument("--combine", type=lambda text: [Path(p) for p in text.split(",")],
                        default=None, metavar="JSON,JSON",
                        help="measure nothing: report the runs saved with --json together "
                             "(e.g. the small sizes and a long run of the largest)")
    return parser


def run_benchmark(args: argparse.Namespace, work: Path) -> Report:
    """Measure every stage on every size, then the comparisons and the profile."""
    report = Report()
    for tenants in sorted(args.sizes):
        repo, live, meta = prepared_repo(work, tenants)
        report.repos[tenants] = meta
        print(f"{tenants} tenants: {meta['manifests']:,} manifests in {meta['files']:,} files "
              f"(generated in {meta['generate_s']:.2f} s)", file=sys.stderr)
        scratch = work / "scratch" / str(tenants)
        scratch.mkdir(parents=True, exist_ok=True)
        nb = NbServer(Path(tempfile.mkdtemp(prefix="unet-nb-")))
        servers = {"standalone": nb}
        if any(stage in STAGES and STAGES[stage].backend == "cluster"
               for stage in args.stages):
            servers["cluster"] = ClusterServer(Path(tempfile.mkdtemp(prefix="unet-cl-")))
        fx = Fixture(tenants, repo, live, scratch, nb, meta, servers=servers)
        try:
            _measure_size(args, fx, work, report)
        finally:
            for server in servers.values():
                server.stop()
                shutil.rmtree(server.root, ignore_errors=True)
    add_growth(report.results)
    busy = [r for r in report.results if r.load > (os.cpu_count() or 1) / 2]
    if busy:
        print(f"note: the machine was busy (1-min load up to {max(r.load for r in busy):.1f} on "
              f"{os.cpu_count()} cores): wall times are inflated; compare cpu s",
              file=sys.stderr)
    return report


def _measure_size(args: argparse.Namespace, fx: Fixture, work: Path, report: Report) -> None:
    light, heavy = max(1, args.repeat), max(1, args.heavy_repeat)
    compare = list(args.compare)
    if fx.tenants > args.full_max:  # a large size: once per stage, the cheap comparison only
        light = heavy = 1
        compare = [c for c in compare if c in ("observe", "cluster")]
    here: dict[tuple[str, str], Result] = {}
    for stage in args.stages:
        if stage in DAEMON_STAGES:
            continue
        spec = STAGES[stage]
        sources = [s for s in args.sources if s in spec.sources] or [spec.sources[0]]
        repeat = args.stage_repeat.get(stage, heavy if spec.heavy else light)
        for source in sources:
            result = measure(stage, source, fx, repeat)
            report.results.append(result)
            here[(stage, source)] = result
        if stage == "validate" and "schema" in compare:
            report.comparisons.append(compare_schema(fx, here.get(("validate", "folder")),
                                                     heavy))
    _measure_daemon(args.stages, fx, report, here)
    if "observe" in compare:
        report.comparisons.append(compare_observe(fx, heavy))
    if args.profile_size == fx.tenants and here:
        stage = args.profile_stage or max((r for r in here.values() if r.stage in STAGES),
                                          key=lambda r: r.wall_s).stage
        report.profile = profile_stage(stage, fx, work)
    if "nbctl" in compare:
        smallest = fx.tenants == min(args.sizes)
        report.comparisons.append(compare_nbctl(fx, here.get(("apply", "folder")), heavy,
                                                check_equal=smallest))
    for shard, whole in SHARDED.items():
        on_shard, alone = here.get((shard, "folder")), here.get((whole, "folder"))
        if on_shard is not None and alone is not None:
            report.comparisons.append(compare_shard(fx, on_shard, alone))
    if "cluster" in compare:
        for clustered, standalone in CLUSTERED.items():
            on_cluster, alone = here.get((clustered, "folder")), here.get((standalone, "folder"))
            if on_cluster is not None and alone is not None:
                report.comparisons.append(compare_cluster(fx, on_cluster, alone))


def _measure_daemon(stages: Sequence[str], fx: Fixture, report: Report,
                    here: dict[tuple[str, str], Result]) -> None:
    wanted = [stage for stage in stages if stage in DAEMON_STAGES]
    if not wanted:
        return
    ensure_applied(fx)
    print(f"  {', '.join(wanted)} ...", end="", file=sys.stderr, flush=True)
    results = [r for r in measure_daemon(fx) if r.stage in wanted] \
        if {"daemon-repair", "daemon-idle"} & set(wanted) else []
    if "daemon-commit" in wanted:
        results.append(measure_commit(fx))
        fx.applied = False  # the commit changed the backend: apply again before other stages
    print(" " + " ".join(f"{r.stage} {r.wall_s:.2f}s" for r in results), file=sys.stderr)
    for result in results:
        report.results.append(result)
        here[(result.stage, "folder")] = result
        one_shot = here.get((DAEMON_STAGES[result.stage], "folder"))
        if one_shot is not None:
            report.comparisons.append(compare_daemon(fx, result, one_shot))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 when a run was not clean (an error, a crash)."""
    args = build_parser().parse_args(argv)
    if args.combine:
        summary, combined = combine(args.combine)
        print_report(combined)
        if args.markdown is not None:
            args.markdown.write_text(render_markdown(summary, combined.results,
                                                     combined.comparisons,
                                                     combined.profile) + "\n")
        return 0
    # a SIGTERM unwinds like an interrupt: every server the benchmark started is stopped
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    work: Path = args.work or Path(tempfile.mkdtemp(prefix="unet-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    report = run_benchmark(args, work)
    print_report(report)
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
               "load_before": load_before, "load_after": os.getloadavg()[0],
               "seconds": time.monotonic() - started, "repeat": args.repeat,
               "heavy_repeat": args.heavy_repeat, "repos": report.repos,
               "results": [asdict(r) for r in report.results],
               "comparisons": [asdict(c) for c in report.comparisons],
               "profile": asdict(report.profile) if report.profile else None}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(render_markdown(summary, report.results, report.comparisons,
                                                 report.profile) + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    clean = all(r.ok for r in report.results) and all(c.ok for c in report.comparisons)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
