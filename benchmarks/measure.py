"""Measuring a stage: its repetitions, each a fresh `unet` process, and their medians.

`measure(stage, source, fx, repeat)` prepares and runs the stage `repeat` times against the
backend the stage names, each run after the repo was read into the page cache; its `Result`
holds the medians of wall time, CPU time, peak memory and the server's CPU time, the
largest error count, and the note of the first run that was not clean (or of the stage's
verify, or of the last run). Progress goes to standard error.
"""

from __future__ import annotations

import os
import statistics
import sys

from .fixture import Fixture, Run, run_unet, warm_page_cache
from .results import Result
from .stages import SOURCES, STAGES, Outcome, Stage


def measure(stage: str, source: str, fx: Fixture, repeat: int) -> Result:
    """Run one stage `repeat` times; the medians (a run that is not clean makes it not ok)."""
    spec = STAGES[stage]
    with fx.backend(spec.backend):
        return _measure(stage, spec, source, fx, repeat)


def _measure(stage: str, spec: Stage, source: str, fx: Fixture, repeat: int) -> Result:
    runs: list[Run] = []
    outcomes: list[Outcome] = []
    load = os.getloadavg()[0]
    print(f"  {stage} ({source}) x{repeat} ...", end="", file=sys.stderr, flush=True)
    for _ in range(repeat):
        if spec.prepare is not None:
            spec.prepare(fx, SOURCES[source])
        warm_page_cache(spec.reads(fx))
        run = run_unet(spec.argv(fx, SOURCES[source]), fx, stage)
        runs.append(run)
        outcomes.append(spec.check(fx, run))
        print(f" {run.wall_s:.1f}s", end="", file=sys.stderr, flush=True)
    problem = spec.verify(fx) if spec.verify is not None and all(o.ok for o in outcomes) \
        else None
    last = outcomes[-1]
    bad = next((o for o in outcomes if not o.ok), None)
    note = bad.note if bad is not None else (problem or last.note)
    print(" ok" if bad is None and problem is None else f" NOT CLEAN: {note}",
          file=sys.stderr)
    return Result(
        stage=stage, source=source, tenants=fx.tenants,
        manifests=int(fx.meta["manifests"]), files=int(fx.meta.get("files", 0)),
        wall_s=statistics.median(r.wall_s for r in runs),
        cpu_s=statistics.median(r.cpu_s for r in runs),
        peak_mib=statistics.median(r.peak_mib for r in runs),
        ok=bad is None and problem is None, note=note,
        server_cpu_s=statistics.median(r.server_cpu_s for r in runs),
        errors=max(o.errors for o in outcomes), warnings=last.warnings,
        walls=[round(r.wall_s, 3) for r in runs], peaks=[round(r.peak_mib, 1) for r in runs],
        load=round(load, 2),
    )
