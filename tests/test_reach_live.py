"""`unet reach --live`: the model's answer cross-checked by ovn-trace on a real Southbound.

The example repo is applied by `unet apply` to a lab's Northbound (ovsdb-server, ovn-northd
compiling it into the Southbound), the repo's ovn manager gets the lab's Southbound as
`southbound`, and `unet reach --live` runs as people run it. A disagreement is made
behind unet's back: the ACLs of a security group deleted with ovn-nbctl.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import use_northbound
from .support.ovnlab import OvnLab

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "network-repo"
WEB = "acme/web-1"


def _unet(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=repo,
                          capture_output=True, text=True, timeout=120)


def _reach(repo: Path, *args: str) -> dict[str, Any]:
    run = _unet(repo, "reach", str(repo), *args, "--live", "--format", "json")
    assert run.returncode == 0, run.stdout + run.stderr
    document: dict[str, Any] = json.loads(run.stdout)
    return document


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OvnLab, Path]]:
    root = tmp_path_factory.mktemp("reach-live")
    repo = root / "repo"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(repo)], check=True)
    with OvnLab(root / "ovn") as ovn:
        use_northbound(repo, ovn.nb_remote)
        run = _unet(repo, "apply", str(repo), "--manager", "ovn", "--auto-approve")
        assert run.returncode == 0, run.stdout + run.stderr
        managers = repo / "provider" / "managers.yaml"
        managers.write_text(managers.read_text().replace(
            f"northbound: {ovn.nb_remote}",
            f"northbound: {ovn.nb_remote}\n    southbound: {ovn.sb_remote}"))
        ovn.sync()
        yield ovn, repo


def test_live_agrees_on_an_allowed_and_a_refused_question(lab: tuple[OvnLab, Path]) -> None:
    _, repo = lab
    for port, allowed in (("tcp/443", True), ("tcp/22", False)):
        answer = _reach(repo, "internet", WEB, "--port", port)
        assert answer["allowed"] is allowed
        assert answer["live"]["agrees"] is True, answer
        [probe] = answer["live"]["probes"]
        assert (probe["model"], probe["live"]) == (allowed, allowed)
        assert probe["to"] == "acme/ComputeInstance/web-1/0"
    inside = _reach(repo, WEB, "acme/db-1", "--port", "tcp/5432")
    verdicts = {p["address"]: (p["model"], p["live"]) for p in inside["live"]["probes"]}
    assert verdicts == {"10.10.2.20": (True, True), "fd10:aaaa:0:2::2": (False, False)}
    out = _reach(repo, WEB, "internet", "--port", "tcp/443")["live"]
    assert out["agrees"] is True and out["probes"][0]["to"] == "outside"


def test_live_without_a_port_says_what_to_give(lab: tuple[OvnLab, Path]) -> None:
    _, repo = lab
    live = _reach(repo, WEB, "internet")["live"]
    assert live == {"agrees": None, "probes": [],
                    "notes": ["give --port tcp/PORT: a probe is one packet"]}


def test_a_deleted_acl_is_a_disagreement_naming_where(lab: tuple[OvnLab, Path]) -> None:
    """The web group's ACLs deleted behind unet's back: the model still says tcp/443 is
    open, ovn-trace drops it at the per-network default drop of web-1's switch."""
    ovn, repo = lab
    group = ovn.nbctl("--bare", "--columns=name", "find", "Port_Group",
                      'external_ids:"unet:key"="Port_Group/acme/prod/web"').strip()
    assert group == "unet.acme.prod.web"
    assert ovn.nbctl("--bare", "--columns=acls", "list", "Port_Group", group).split()
    ovn.nbctl("clear", "Port_Group", group, "acls")
    ovn.sync()
    try:
        run = _unet(repo, "reach", str(repo), "internet", WEB, "--port", "tcp/443", "--live",
                    "--detailed-exitcode")
        assert run.returncode == 2, run.stdout + run.stderr
        lines = run.stdout.splitlines()
        assert lines[0] == f"internet → {WEB} (tcp/443): allowed"
        [disagrees] = [line for line in lines if line.startswith("live: ")]
        assert disagrees.startswith("live: DISAGREES — 198.18.0.1 → 203.0.113.13 (tcp/443): "
                                    "the model says allowed, ovn says ovn-trace dropped it in "
                                    "ls_out_acl of unet.acme.web"), run.stdout
        refused = _reach(repo, "internet", WEB, "--port", "tcp/22")["live"]
        assert refused["agrees"] is True  # still refused: nothing to disagree on
    finally:  # unet repairs the drift: the ACLs, unreferenced, are gone from the database
        run = _unet(repo, "apply", str(repo), "--manager", "ovn", "--auto-approve")
        assert run.returncode == 0, run.stdout + run.stderr
        ovn.sync()
    assert _reach(repo, "internet", WEB, "--port", "tcp/443")["live"]["agrees"] is True


def test_without_a_southbound_reach_answers_from_the_model(tmp_path: Path) -> None:
    """No southbound configured: the model's answer, exit 0, and a note saying why it was
    not checked; nothing is started or connected."""
    repo = tmp_path / "repo"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(repo)], check=True)
    use_northbound(repo, f"unix:{tmp_path / 'nowhere.sock'}")
    run = _unet(repo, "reach", str(repo), "internet", WEB, "--port", "tcp/443", "--live")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == (
        "live: not checked — no southbound configured for NetworkManager ovn: answered "
        "from the model alone")
    answer = _reach(repo, "internet", WEB, "--port", "tcp/443")
    assert answer["allowed"] is True and answer["live"]["agrees"] is None
    assert [p["live"] for p in answer["live"]["probes"]] == [None]


def test_an_unreachable_southbound_is_a_diagnostic(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(repo)], check=True)
    managers = repo / "provider" / "managers.yaml"
    managers.write_text(managers.read_text().replace(
        "northbound: embedded", f"northbound: embedded\n    southbound: unix:{tmp_path}/sb"))
    run = _unet(repo, "reach", str(repo), "internet", WEB, "--port", "tcp/443", "--live")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    assert "NetworkManager ovn: ovn-sbctl failed" in run.stdout + run.stderr


def test_live_agrees_across_a_peering(lab: tuple[OvnLab, Path]) -> None:
    """The example peers globex's corp with initech's mirror: app-1 (group app) reaches
    the mirror on tcp/443 over the link, and tcp/22 is refused there; ovn-trace agrees."""
    _, repo = lab
    for port, allowed in (("tcp/443", True), ("tcp/22", False)):
        answer = _reach(repo, "globex/app-1/0", "initech/artifact-mirror-1", "--port", port)
        assert answer["allowed"] is allowed, answer
        assert answer["live"]["agrees"] is True, answer
        assert [(p["model"], p["live"]) for p in answer["live"]["probes"]] == \
            [(allowed, allowed)]
