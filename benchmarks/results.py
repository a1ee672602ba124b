"""What a benchmark run found, as data: the report's tables are written from these alone.

- `Result`: the medians of the repetitions of one stage, source and size, and how they grew
  from the previous size (`add_growth`);
- `Comparison`: unet against another tool doing the same work on the same size (or a
  stage against another stage), as ratios: below 1, unet is faster;
- `Profile`: where the time of one stage went, under pyinstrument;
- `Report`: all of them for a run; `--json` saves it, and `combine` reads saved runs back
  as one report (e.g. the small sizes and a long run of the largest).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class Result:
    """The medians of the repetitions of one stage, source and size."""

    stage: str
    source: str
    tenants: int
    manifests: int
    files: int
    wall_s: float
    cpu_s: float
    peak_mib: float
    ok: bool
    note: str
    server_cpu_s: float = 0.0  # the Northbound server's CPU time during the run
    errors: int = 0
    warnings: int = 0
    walls: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    load: float = 0.0  # 1-minute load average before the runs: other work on the machine
    time_ratio: float | None = None  # against the previous size of the same stage and source
    cpu_ratio: float | None = None
    size_ratio: float | None = None


@dataclass(slots=True)
class Comparison:
    """unet against another tool doing the same work, on the same size."""

    name: str
    tenants: int
    unet: str  # what was measured of unet
    other: str  # and of the other tool
    unet_wall_s: float
    unet_cpu_s: float
    other_wall_s: float
    other_cpu_s: float
    unet_server_cpu_s: float = 0.0
    other_server_cpu_s: float = 0.0
    ok: bool = True
    note: str = ""
    load: float = 0.0

    @property
    def wall_ratio(self) -> float:
        """unet's wall time over the other's: below 1, unet is faster."""
        return self.unet_wall_s / self.other_wall_s if self.other_wall_s else math.inf

    @property
    def cpu_ratio(self) -> float:
        other = self.other_cpu_s + self.other_server_cpu_s
        unet = self.unet_cpu_s + self.unet_server_cpu_s
        return unet / other if other else math.inf


@dataclass(slots=True)
class Profile:
    """One stage run once more under pyinstrument."""

    stage: str
    tenants: int
    seconds: float
    text: Path  # pyinstrument's call tree
    top_inclusive: list[tuple[str, float]]  # (function, share of the run), our code
    top_self: list[tuple[str, float]]  # (function, share), any code


@dataclass
class Report:
    """Everything a run measured."""

    results: list[Result] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    repos: dict[int, dict[str, Any]] = field(default_factory=dict)
    profile: Profile | None = None


def add_growth(results: list[Result]) -> None:
    """Fill time and size ratios against the previous size of each stage and source."""
    previous: dict[tuple[str, str], Result] = {}
    for result in sorted(results, key=lambda r: r.tenants):
        key = (result.stage, result.source)
        before = previous.get(key)
        if before is not None and before.wall_s > 0 and before.manifests > 0:
            result.time_ratio = result.wall_s / before.wall_s
            result.cpu_ratio = result.cpu_s / before.cpu_s if before.cpu_s > 0 else None
            result.size_ratio = result.manifests / before.manifests
        previous[key] = result


def combine(paths: list[Path]) -> tuple[dict[str, Any], Report]:
    """Saved reports as one: results and comparisons of every run, growth across them."""
    report = Report()
    summary: dict[str, Any] = {}
    for path in paths:
        saved = json.loads(path.read_text())
        summary = {**saved, "load_before": min(summary.get("load_before", math.inf),
                                               saved["load_before"]),
                   "load_after": max(summary.get("load_after", 0), saved["load_after"]),
                   "seconds": summary.get("seconds", 0) + saved["seconds"]}
        for item in saved["results"]:
            item.update(time_ratio=None, cpu_ratio=None, size_ratio=None)
            report.results.append(Result(**item))
        report.comparisons += [Comparison(**item) for item in saved["comparisons"]]
        if saved.get("profile"):
            report.profile = _profile(saved["profile"])
    report.results.sort(key=lambda r: r.tenants)
    report.comparisons.sort(key=lambda c: c.tenants)
    add_growth(report.results)
    return summary, report


def _profile(item: dict[str, Any]) -> Profile:
    """A Profile as --json saved it (its pairs as lists)."""
    return Profile(item["stage"], item["tenants"], item["seconds"], Path(item["text"]),
                   [(name, share) for name, share in item["top_inclusive"]],
                   [(name, share) for name, share in item["top_self"]])
