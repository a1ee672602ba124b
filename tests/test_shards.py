"""Shards (reconciler/shard.py): one installation over several runs, by region.

A shard's run reads provider/ and its own tenants only, and never writes a row of another
shard, although both shards apply into one Northbound as one installation: checked here
against a real ovsdb-server, with a tenant of the other shard changed, deleted and moved
between the runs, by comparing every column unet manages of the other shard's rows (and
their UUIDs) before and after.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from unet.managers.ovn.schema import MANAGED_COLUMNS
from unet.reconciler.shard import Shard
from unet.reconciler.validate import validate_repo

from .conftest import use_northbound
from .support.gitops import commit_all, git
from .support.ovnrun import ROOT_TABLES, apply, plan, unet

_PROTECTED = re.compile(r"\n  annotations:\n    network.osac.io/prevent-destroy: \"true\"")

#: Tenants of the generated repo: odd ones in region-a, even ones in region-b.
TENANTS = 6
A, B = ("region-a",), ("region-b",)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from benchmarks.generate import generate_repo

    target = tmp_path_factory.mktemp("shards") / "repo"
    generate_repo(target, TENANTS)
    for path in target.glob("tenants/*/network.yaml"):  # tenants are deleted and moved here
        path.write_text(_PROTECTED.sub("", path.read_text()))
    return target


@pytest.fixture
def repo(template: Path, lab: Any, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(template, target)
    use_northbound(target, lab.nb_remote)
    return target


def _tenant(index: int) -> str:
    return f"tenant-{index:05d}"


def _tenants_of(regions: tuple[str, ...]) -> set[str]:
    return {_tenant(i) for i in range(1, TENANTS + 1) if (i % 2 == 1) == (regions == A)}


def _shard_apply(repo: Path, regions: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    result = apply(repo, repo, *(arg for region in regions for arg in ("--region", region)))
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _rows(lab: Any) -> dict[str, dict[str, Any]]:
    """Every unet row of the Northbound: UUID → table and its managed columns."""
    operations = [{"op": "select", "table": table, "where": [],
                   "columns": ["_uuid", "external_ids", *MANAGED_COLUMNS[table]]}
                  for table in MANAGED_COLUMNS]
    out = subprocess.run(["ovsdb-client", "transact", lab.nb_remote,
                          json.dumps(["OVN_Northbound", *operations])],
                         capture_output=True, text=True, check=True).stdout
    rows: dict[str, dict[str, Any]] = {}
    for table, result in zip(MANAGED_COLUMNS, json.loads(out), strict=True):
        for row in result["rows"]:
            tags = dict(row["external_ids"][1])
            if "unet:installation" in tags:
                rows[row["_uuid"][1]] = {"table": table, **row}
    return rows


def _owner_tenant(row: dict[str, Any]) -> str | None:
    parts = dict(row["external_ids"][1])["unet:owner"].split("/")
    return parts[1] if len(parts) == 3 else None


def _region_rows(lab: Any, tenants: set[str], region: str) -> dict[str, dict[str, Any]]:
    """The rows of these tenants and of the region's provider resources."""
    return {uuid: row for uuid, row in _rows(lab).items()
            if _owner_tenant(row) in tenants
            or (_owner_tenant(row) is None
                and dict(row["external_ids"][1]).get("unet:regions") == region)}


# --- the share --------------------------------------------------------------------------


@pytest.mark.parametrize("rev", [None, "HEAD"])
def test_a_shard_reads_provider_and_its_own_tenants(template: Path, tmp_path: Path,
                                                    rev: str | None) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    if rev:
        git(repo, "init", "-q", "-b", "main")
        commit_all(repo, "generated")
    whole = validate_repo(repo, rev)
    share = validate_repo(repo, rev, shard=Shard(frozenset(A)))
    assert whole.ok and share.ok, share.diagnostics
    assert {m.tenant for m in share.manifests if m.tenant} == _tenants_of(A)
    provider = {m.ref for m in whole.manifests if m.obj.scope != "tenant"}
    assert provider == {m.ref for m in share.manifests if m.obj.scope != "tenant"}
    assert share.files < whole.files
    assert share.ownership is not None and whole.ownership is None
    assert share.ownership.owns(f"Subnet/{_tenant(1)}/web") is True
    assert share.ownership.owns(f"Subnet/{_tenant(2)}/web") is False
    assert share.ownership.owns("Subnet/gone/web") is None


def test_a_tenant_split_between_shards_is_refused(template: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    path = repo / "provider/tenants" / f"{_tenant(2)}.yaml"
    path.write_text(path.read_text().replace("regions: [region-b]",
                                             "regions: [region-b, region-a]"))
    assert validate_repo(repo).ok  # the whole repo is fine: only a shard cannot hold it
    share = validate_repo(repo, shard=Shard(frozenset(A)))
    codes = [d.code for d in share.diagnostics if d.is_error]
    assert codes == ["SHARD_SPLITS_TENANT"], share.diagnostics
    assert validate_repo(repo, shard=Shard(frozenset(A + B))).ok  # one shard of both: fine


def test_a_k8s_manager_split_between_shards_is_refused(template: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    path = repo / "provider/managers.yaml"
    text = path.read_text()
    k8s = text.index("role: k8s")
    regions = text.index("regions: [region-a]", k8s)
    path.write_text(text[:regions] + "regions: [region-a, region-b]" +
                    text[regions + len("regions: [region-a]"):])
    share = validate_repo(repo, shard=Shard(frozenset(A)))
    assert [d.code for d in share.diagnostics if d.is_error] == ["SHARD_SPLITS_MANAGER"]


def test_a_region_nobody_declares_is_refused(template: Path, tmp_path: Path) -> None:
    """A misspelt `--region` would make a shard of nothing: a plan of no tenant that says
    "No changes" and deletes nothing, for every run of the daemon."""
    share = validate_repo(template, shard=Shard(frozenset(["region-a", "regoin-b"])))
    errors = [d for d in share.diagnostics if d.is_error]
    assert [d.code for d in errors] == ["SHARD_REGION_UNKNOWN"], share.diagnostics
    assert "regoin-b" in errors[0].message and "region-b" in (errors[0].hint or "")


def test_a_plan_between_revisions_is_of_the_whole_repo(repo: Path) -> None:
    result = unet(repo, "plan", str(repo), "--base", "HEAD", "--region", "region-a")
    assert result.returncode == 1 and "whole repo" in result.stderr


# --- two shards, one Northbound ---------------------------------------------------------


def test_two_shards_apply_what_one_run_would(repo: Path, lab: Any) -> None:
    _shard_apply(repo, A)
    owners = {_owner_tenant(row) for row in _rows(lab).values()}
    assert owners == _tenants_of(A) | {None}
    switches = lab.nbctl("--bare", "--columns=name", "list", "Logical_Switch").split()
    assert "unet-ext.region-a" in switches and "unet-ext.region-b" not in switches
    _shard_apply(repo, B)
    # Together they made what one run makes: a run of the whole repo has nothing to do.
    whole = plan(repo, repo, "--detailed-exitcode")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    for shard in (A, B):
        again = plan(repo, repo, "--detailed-exitcode", "--region", shard[0])
        assert again.returncode == 0, again.stdout
    applied = lab.nbctl("get", "NB_Global", ".", "external_ids")
    assert "unet:applied:bench:ovn:region-a" in applied
    assert "unet:applied:bench:ovn:region-b" in applied


def test_a_shard_never_touches_the_other_shards_rows(repo: Path, lab: Any) -> None:
    _shard_apply(repo, A)
    _shard_apply(repo, B)
    theirs = _region_rows(lab, _tenants_of(B), "region-b")
    assert len(theirs) > 100
    # B's tenant changed, one deleted, one of A's changed: A's run applies only its own.
    _edit(repo, _tenant(2), "tcp", "udp")
    _delete_tenant(repo, _tenant(4))
    _edit(repo, _tenant(1), "tcp", "udp")
    _shard_apply(repo, A)
    assert _region_rows(lab, _tenants_of(B), "region-b") == theirs
    # B's run deletes its deleted tenant's rows (they record their region) and changes
    # its changed tenant; A's rows stay as A's run left them.
    mine = _region_rows(lab, _tenants_of(A), "region-a")
    _shard_apply(repo, B)
    assert _region_rows(lab, _tenants_of(A), "region-a") == mine
    assert not _region_rows(lab, {_tenant(4)}, "-")
    assert plan(repo, repo, "--detailed-exitcode").returncode == 0


def test_a_tenant_moved_to_the_other_shard(repo: Path, lab: Any) -> None:
    _shard_apply(repo, A)
    _shard_apply(repo, B)
    moved = _tenant(2)
    _move_to_region_a(repo, moved)
    assert validate_repo(repo).ok
    # B no longer holds it: B's run leaves its rows alone, although they are in region-b.
    before = _region_rows(lab, {moved}, "-")
    result = _shard_apply(repo, B)
    assert "Apply complete" not in result.stdout or "0 deleted" in result.stdout
    assert _region_rows(lab, {moved}, "-") == before
    # A holds it now: A's run moves it (its old rows go, the new ones are A's).
    theirs = _region_rows(lab, _tenants_of(B) - {moved}, "region-b")
    _shard_apply(repo, A)
    assert _region_rows(lab, _tenants_of(B) - {moved}, "region-b") == theirs
    tags = {dict(row["external_ids"][1]).get("unet:regions")
            for row in _region_rows(lab, {moved}, "-").values()}
    assert tags == {"region-a"}
    for shard in (A, B):
        assert plan(repo, repo, "--detailed-exitcode", "--region", shard[0]).returncode == 0
    assert plan(repo, repo, "--detailed-exitcode").returncode == 0


def test_rows_written_without_shards_are_left_to_an_unsharded_run(repo: Path,
                                                                  lab: Any) -> None:
    """Rows an unsharded run wrote record no region: once their tenant leaves the repo, no
    shard knows whose they are, so none deletes them (but for its ports on the switch of
    its region, which go with the switch's shard); the unsharded run does."""
    assert apply(repo, repo).returncode == 0
    gone = _tenant(4)
    _delete_tenant(repo, gone)
    kept = _roots(_region_rows(lab, {gone}, "-"))
    assert kept
    for shard in (A, B):
        _shard_apply(repo, shard)
    assert _roots(_region_rows(lab, {gone}, "-")) == kept
    assert apply(repo, repo).returncode == 0
    assert not _region_rows(lab, {gone}, "-")


def _roots(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {uuid: row for uuid, row in rows.items() if row["table"] in ROOT_TABLES}


# --- edits ----------------------------------------------------------------------------------


def _edit(repo: Path, tenant: str, old: str, new: str) -> None:
    path = repo / "tenants" / tenant / "security-groups.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _delete_tenant(repo: Path, tenant: str) -> None:
    shutil.rmtree(repo / "tenants" / tenant)
    (repo / "provider/tenants" / f"{tenant}.yaml").unlink()


def _move_to_region_a(repo: Path, tenant: str) -> None:
    """Everything of a region-b tenant to region-a (its class and pool too)."""
    for path in [repo / "provider/tenants" / f"{tenant}.yaml",
                 *(repo / "tenants" / tenant).glob("*.yaml")]:
        text = path.read_text().replace("region-b", "region-a")
        text = text.replace("standard-b", "standard-a").replace("public-b-", "public-a-")
        path.write_text(re.sub(r"\n  address: .*", "", text))  # of the pool it leaves


# --- a watching daemon of one shard ---------------------------------------------------------


def test_a_shards_daemon_repairs_its_rows_and_leaves_the_others(repo: Path, lab: Any,
                                                                tmp_path: Path) -> None:
    """The daemon of region-a watches the Northbound (its replica holds every row of the
    installation): it repairs a hand edit of its own rows, and leaves one of region-b's."""
    from unet.reconciler.daemon.loop import Options, Reconciler

    config = repo / "unet.yaml"
    config.write_text(config.read_text().replace("reconcile: report", "reconcile: repair"))
    _shard_apply(repo, A)
    _shard_apply(repo, B)
    daemon = Reconciler(Options(path=repo, state_dir=tmp_path / "state", workdir=tmp_path,
                                managers=["ovn"], watch=True, regions=list(A)))
    try:
        first = daemon.run_once()
        assert first.result == "ok", first.message
        mine, theirs = (f"unet.{_tenant(1)}.web", f"unet.{_tenant(2)}.web")
        for switch in (mine, theirs):
            lab.nbctl("set", "Logical_Switch", switch, "other_config:edited=by-hand")
        run = daemon.run_once()
        assert run.result == "applied", run.message
        assert "edited" not in lab.nbctl("get", "Logical_Switch", mine, "other_config")
        assert "edited" in lab.nbctl("get", "Logical_Switch", theirs, "other_config")
    finally:
        if daemon.watches is not None:
            daemon.watches.close()
