"""The benchmark harness (benchmarks/) on a tiny installation: every stage runs
clean, the pull request plans changes, the drift is repaired, and the ovn-nbctl script
loads exactly the rows unet applies (unet plans no change after it), and the live stages
run on a 3-member cluster too."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench, generate, nbctl, repos, stages
from benchmarks.fixture import Run
from unet.reconciler.validate import validate_repo

from .support.ovnlab import require_ovn


def test_pull_request_branch_is_valid_and_changes_one_tenant(tmp_path: Path) -> None:
    repo, _live, meta = repos.prepared_repo(tmp_path, 2)
    head = validate_repo(repo, generate.PR_BRANCH)
    assert head.ok, [d.to_json() for d in head.diagnostics if d.is_error]
    assert len(head.documents) == meta["manifests"] + 1  # one ComputeInstance more
    assert sorted(generate.pr_change()) == ["tenants/tenant-00001/compute.yaml",
                                         "tenants/tenant-00001/security-groups.yaml"]


def test_spread_takes_one_percent_evenly() -> None:
    assert stages.spread(list(range(1000)), 0.01) == list(range(0, 1000, 100))
    assert stages.spread([7], 0.01) == [7]
    assert stages.spread([], 0.01) == []


def test_nbctl_values_use_ovs_vsctl_syntax() -> None:
    assert nbctl.nbctl_value({"a": "b c"}) == '{"a"="b c"}'
    assert nbctl.nbctl_value(["x", "y"]) == '["x","y"]'
    assert nbctl.nbctl_value(True) == "true"
    assert nbctl.nbctl_value(1002) == "1002"


def test_every_stage_and_comparison_runs_clean(tmp_path: Path) -> None:
    require_ovn()
    out = tmp_path / "bench.json"
    code = bench.main(["--sizes", "2", "--repeat", "1", "--profile-size", "0",
                       "--compare", "nbctl,observe,cluster", "--work", str(tmp_path / "work"),
                       "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 0, report
    assert [r["stage"] for r in report["results"]] == [*stages.STAGES, *stages.DAEMON_STAGES]
    assert all(r["ok"] for r in report["results"])
    drift = next(r for r in report["results"] if r["stage"] == "reconcile-drift")
    assert drift["note"].startswith("applied")
    comparisons = {c["name"]: c for c in report["comparisons"]}
    assert list(comparisons) == [
        "daemon-repair vs reconcile-drift", "daemon-idle vs reconcile-noop",
        "daemon-commit vs reconcile-noop", "observe vs ovn-nbctl list",
        "initial apply vs ovn-nbctl script",
        "apply-shard-region-a vs apply", "apply-shard-region-b vs apply",
        "reconcile-noop-shard-region-a vs reconcile-noop",
        "reconcile-noop-shard-region-b vs reconcile-noop",
        "apply: 3-member cluster vs standalone",
        "reconcile-noop: 3-member cluster vs standalone"]
    assert "of the unsharded peak" in comparisons["apply-shard-region-b vs apply"]["note"]
    assert "same rows" in comparisons["initial apply vs ovn-nbctl script"]["note"]
    assert comparisons["daemon-idle vs reconcile-noop"]["note"] == "each run planned nothing"
    assert all(c["ok"] for c in report["comparisons"])
    markdown = tmp_path / "figures.md"
    assert bench.main(["--combine", str(out), "--markdown", str(markdown)]) == 0
    assert "**reconcile-drift**" in markdown.read_text()


def test_a_stage_killed_by_the_kernel_says_so(tmp_path: Path) -> None:
    """At 10,000 tenants the drift repair was killed for memory: the table said `None: `."""
    (tmp_path / "out").write_text("")
    (tmp_path / "err").write_text("")
    killed = Run(274.2, 188.5, 15163.0, -9, tmp_path / "out", tmp_path / "err")
    outcome = stages.check_reconcile("applied")(None, killed)  # type: ignore[arg-type]
    assert not outcome.ok and outcome.note.startswith("killed by SIGKILL (the kernel's OOM")
