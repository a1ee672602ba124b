"""The report: the results as tables for people, and against the bar.

- `format_table` and `format_comparisons` write the results and comparisons as fixed-width
  tables (standard output); `print_report` prints them with the verdicts and the profile;
- `render_markdown` writes the same figures as docs/performance.md holds them: one table per
  stage under its title, the comparisons, the bar, and the profile;
- `verdicts` hold the results against the bar (issue "Scale"): at BAR_TENANTS tenants, wall
  time per stage (BAR_WALL_S) and peak memory of any stage (BAR_PEAK_MIB); from BAR_TENANTS
  to the next size measured, growth (BAR_GROWTH). A bar the results say nothing about is
  left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .results import Comparison, Profile, Report, Result
from .stages import DAEMON_TITLES, STAGES

#: The bar (issues "Scale" and "A lean core"): at BAR_TENANTS, wall seconds per stage and
#: peak memory of every stage; the observe and the no-op reconcile against `ovn-nbctl list`
#: of the same tables; the slowest hand edit the daemon repairs; at BAR_LARGE_TENANTS,
#: peak memory of every stage and its growth; time growth from BAR_TENANTS to the next size.
BAR_TENANTS = 1000
BAR_WALL_S = {"validate": 3.0, "validate-warm": 2.0, "plan-pr": 4.0, "apply": 120.0,
              "reconcile-noop": 20.0}
BAR_PEAK_MIB = 1024.0
BAR_OBSERVE_RATIO = 0.8  # observe ÷ ovn-nbctl list, wall
BAR_NOOP_RATIO = 1.2  # one-shot no-op reconcile ÷ ovn-nbctl list, wall
BAR_REPAIR_MAX_S = 2.0  # every hand edit of daemon-repair, the slowest
BAR_LARGE_TENANTS = 10_000
BAR_LARGE_PEAK_MIB = 8192.0
BAR_GROWTH = 3.5  # time, per ×3 of tenants (from BAR_TENANTS to the next size measured)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One bar against what was measured: met or missed, and by how much."""

    bar: str
    limit: str
    measured: str
    met: bool
    by: str  # how far over (or under) the limit


def verdicts(results: list[Result], comparisons: Sequence[Comparison] = ()) -> list[Verdict]:
    """Every bar that the results can say something about."""
    at = {(r.stage, r.source): r for r in results if r.tenants == BAR_TENANTS}
    return [*_wall_verdicts(at), *_peak_verdicts(results), *_ratio_verdicts(at, comparisons),
            *_growth_verdicts(results, at)]


def _wall_verdicts(at: dict[tuple[str, str], Result]) -> list[Verdict]:
    out = []
    for stage, limit in BAR_WALL_S.items():
        result = at.get((stage, STAGES[stage].sources[0])) or at.get((stage, "folder"))
        if result is not None:
            out.append(Verdict(f"{stage} at {BAR_TENANTS:,} tenants", f"≤ {limit:g} s",
                               f"{result.wall_s:.1f} s (cpu {result.cpu_s:.1f} s)",
                               result.wall_s <= limit, f"×{result.wall_s / limit:.2f} of the bar"))
    repair = at.get(("daemon-repair", "folder"))
    if repair is not None and repair.walls:
        slowest = max(repair.walls)
        out.append(Verdict(f"daemon-repair at {BAR_TENANTS:,} tenants, the slowest of "
                           f"{len(repair.walls)} hand edits", f"≤ {BAR_REPAIR_MAX_S:g} s",
                           f"{slowest:.2f} s (median {repair.wall_s:.2f} s)",
                           slowest <= BAR_REPAIR_MAX_S,
                           f"×{slowest / BAR_REPAIR_MAX_S:.2f} of the bar"))
    return out


def _peak_verdicts(results: list[Result]) -> list[Verdict]:
    """Every stage's peak at the bar's sizes: the worst named, those over counted."""
    out = []
    for tenants, limit in ((BAR_TENANTS, BAR_PEAK_MIB), (BAR_LARGE_TENANTS, BAR_LARGE_PEAK_MIB)):
        measured = [r for r in results if r.tenants == tenants and r.peak_mib]
        if not measured:
            continue
        worst = max(measured, key=lambda r: r.peak_mib)
        over = sorted({r.stage for r in measured if r.peak_mib > limit})
        out.append(Verdict(f"peak memory at {tenants:,} tenants, every stage",
                           f"≤ {limit:.0f} MiB", f"{worst.peak_mib:.0f} MiB ({worst.stage})",
                           not over, f"×{worst.peak_mib / limit:.2f} of the bar"
                           + (f"; over: {', '.join(over)}" if over else "")))
    return out


def _ratio_verdicts(at: dict[tuple[str, str], Result], comparisons: Sequence[Comparison]
                    ) -> list[Verdict]:
    """The observe and the no-op reconcile against `ovn-nbctl list` of the same tables."""
    listing = next((c for c in comparisons if c.name == "observe vs ovn-nbctl list"
                    and c.tenants == BAR_TENANTS and c.ok and c.other_wall_s), None)
    if listing is None:
        return []
    out = [Verdict(f"observe ÷ ovn-nbctl list at {BAR_TENANTS:,} tenants",
                   f"≤ ×{BAR_OBSERVE_RATIO:g}",
                   f"×{listing.wall_ratio:.2f} ({listing.unet_wall_s:.1f} s / "
                   f"{listing.other_wall_s:.1f} s)", listing.wall_ratio <= BAR_OBSERVE_RATIO,
                   f"×{listing.wall_ratio / BAR_OBSERVE_RATIO:.2f} of the bar")]
    noop = at.get(("reconcile-noop", "folder"))
    if noop is not None:
        ratio = noop.wall_s / listing.other_wall_s
        out.append(Verdict(f"reconcile-noop ÷ ovn-nbctl list at {BAR_TENANTS:,} tenants",
                           f"≤ ×{BAR_NOOP_RATIO:g}",
                           f"×{ratio:.2f} ({noop.wall_s:.1f} s / {listing.other_wall_s:.1f} s)",
                           ratio <= BAR_NOOP_RATIO, f"×{ratio / BAR_NOOP_RATIO:.2f} of the bar"))
    return out


def _growth_verdicts(results: list[Result], at: dict[tuple[str, str], Result]) -> list[Verdict]:
    """Time from BAR_TENANTS to the next size (the bar scaled to the sizes' ratio), and peak
    memory from BAR_TENANTS to BAR_LARGE_TENANTS (at most as the tenants grow)."""
    out: list[Verdict] = []
    bigger = sorted({r.tenants for r in results if r.tenants > BAR_TENANTS})
    if not bigger or not at:
        return out
    nxt = bigger[0]
    for r in results:
        if r.tenants == nxt and r.time_ratio is not None and r.size_ratio:
            limit = BAR_GROWTH * r.size_ratio / 3
            out.append(Verdict(f"growth of {r.stage} ({r.source}), {BAR_TENANTS:,} → {nxt:,}",
                               f"≤ ×{limit:.1f}",
                               f"×{r.time_ratio:.2f} wall, ×{r.cpu_ratio or 0:.2f} cpu",
                               r.time_ratio <= limit, f"size ×{r.size_ratio:.2f}"))
    for r in results:
        small = at.get((r.stage, r.source))
        if r.tenants == BAR_LARGE_TENANTS and small is not None and small.peak_mib:
            growth, limit = r.peak_mib / small.peak_mib, BAR_LARGE_TENANTS / BAR_TENANTS
            out.append(Verdict(f"peak memory growth of {r.stage}, {BAR_TENANTS:,} → "
                               f"{BAR_LARGE_TENANTS:,}", f"≤ ×{limit:g}",
                               f"×{growth:.2f} ({small.peak_mib:.0f} → {r.peak_mib:.0f} MiB)",
                               growth <= limit, f"×{growth / limit:.2f} of the bar"))
    return out


_COLUMNS = ("stage", "source", "tenants", "manifests", "wall s", "cpu s", "peak MiB",
            "NB cpu s", "×wall", "×cpu", "×size", "load", "clean")


def _row(r: Result) -> tuple[str, ...]:
    return (r.stage, r.source, f"{r.tenants:,}", f"{r.manifests:,}", f"{r.wall_s:.2f}",
            f"{r.cpu_s:.2f}", f"{r.peak_mib:.0f}",
            f"{r.server_cpu_s:.2f}" if r.server_cpu_s else "-",
            f"{r.time_ratio:.2f}" if r.time_ratio else "-",
            f"{r.cpu_ratio:.2f}" if r.cpu_ratio else "-",
            f"{r.size_ratio:.2f}" if r.size_ratio else "-", f"{r.load:.1f}",
            "yes" if r.ok else f"NO: {r.note}")


def format_table(results: list[Result]) -> str:
    """A fixed-width table of the results."""
    rows = [_COLUMNS, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) if 1 < i < len(row) - 1 else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                     for row in rows)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i >= right_from else "---"
                            for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def format_comparisons(comparisons: list[Comparison], markdown: bool = False) -> str:
    header = ("comparison", "tenants", "unet wall s", "unet cpu s", "other wall s",
              "other cpu s", "NB cpu s (unet / other)", "wall ratio", "cpu ratio", "note")
    rows = [(c.name, f"{c.tenants:,}", f"{c.unet_wall_s:.2f}", f"{c.unet_cpu_s:.2f}",
             f"{c.other_wall_s:.2f}", f"{c.other_cpu_s:.2f}",
             f"{c.unet_server_cpu_s:.2f} / {c.other_server_cpu_s:.2f}"
             if c.unet_server_cpu_s or c.other_server_cpu_s else "-",
             f"{c.wall_ratio:.2f}", f"{c.cpu_ratio:.2f}",
             c.note if c.ok else f"NOT CLEAN: {c.note}") for c in comparisons]
    if markdown:
        return _md_table(header, rows, right_from=1)
    return "\n".join("  ".join(row) for row in [header, *rows])


def render_markdown(report: dict[str, Any], results: list[Result],
                    comparisons: list[Comparison], profile: Profile | None) -> str:
    """The figures as docs/performance.md holds them."""
    m = report["machine"]
    out = [f"Measured {report['date']} on {m['cpu']}, {m['cores']} cores, "
           f"{m['memory_gib']:.0f} GiB RAM; Python {m['python']}; {m['ovn']}, {m['ovsdb']}; "
           f"python-ovs JSON parser: {m['ovs_json_parser']}; "
           f"unet {m['code'].get('commit', '?')[:12]}"
           f"{' (modified)' if m['code'].get('modified') else ''}. Load average "
           f"{report['load_before']:.1f} before, {report['load_after']:.1f} after; the run took "
           f"{report['seconds'] / 60:.0f} min.", ""]
    for stage in dict.fromkeys(r.stage for r in results):
        title = STAGES[stage].title if stage in STAGES else DAEMON_TITLES[stage]
        out += [f"**{stage}** — {title}", "",
                _md_table(_COLUMNS, [_row(r) for r in results if r.stage == stage],
                          right_from=2), ""]
        out += [f"{r.tenants:,} tenants: {r.note}" for r in results
                if r.stage == stage and r.stage in DAEMON_TITLES and r.ok and r.note] + [""]
    if comparisons:
        out += ["**Comparisons** (ratio = unet ÷ other; below 1, unet is faster; cpu ratio "
                "counts the Northbound server's CPU on both sides)", "",
                format_comparisons(comparisons, markdown=True), ""]
    verdict_rows = [(v.bar, v.limit, v.measured, "met" if v.met else "**missed**", v.by)
                    for v in verdicts(results, comparisons)]
    if verdict_rows:
        out += ["**The bar**", "", _md_table(("bar", "limit", "measured", "", "by"),
                                              verdict_rows, right_from=99), ""]
    if profile is not None:
        out += [f"**Profile** of {profile.stage} at {profile.tenants:,} tenants "
                f"({profile.seconds:.1f} s under pyinstrument)", "",
                _md_table(("function (inclusive, our code)", "share"),
                          [(f"`{n}`", f"{s:.0%}") for n, s in profile.top_inclusive
                           if s < 0.95][:12]),  # the entry points are ~100 %: not news
                "", _md_table(("function (self time, any code)", "share"),
                              [(f"`{n}`", f"{s:.0%}") for n, s in profile.top_self[:12]]), ""]
    return "\n".join(out)


def print_report(report: Report) -> None:
    print(format_table(report.results))
    for result in report.results:  # what the daemon's figures are made of
        if result.stage in DAEMON_TITLES and result.ok and result.note:
            print(f"{result.stage} at {result.tenants:,} tenants: {result.note}")
    if report.comparisons:
        print()
        print(format_comparisons(report.comparisons))
    for verdict in verdicts(report.results, report.comparisons):
        print(f"{'met   ' if verdict.met else 'MISSED'}  {verdict.bar}: {verdict.measured} "
              f"(bar {verdict.limit}; {verdict.by})")
    if report.profile is not None:
        print(f"\nprofile of {report.profile.stage} at {report.profile.tenants} tenants: "
              f"{report.profile.text}")
        for name, share in report.profile.top_inclusive[:12]:
            print(f"  {share:6.1%}  {name}")
