"""Plans that tell the truth, and applies that converge in one run, on a real OVN database.

A reviewer approves what the plan says and an operator trusts that one apply finishes the
job: after any change, one `unet apply` and then `unet plan` must find nothing to do, and
every port must be in its groups the moment the apply ends (a port missing from its
network's default-drop group is unfiltered).
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from unet.reconciler.cli import main

from .conftest import EXAMPLE, copy_checkout
from .support.ovnlab import NB_SCHEMA, OvnLab
from .support.ovnrun import apply, plan, row_named, rows, unet
from .test_plan_golden import edit_text, validated
from .test_plan_props import EDITS, EXAMPLE_FILES, validate_memory, write_layout

NETWORK = "tenants/acme/network.yaml"
SUBNET_AAA = """---
apiVersion: network.osac.io/v1alpha1
kind: Subnet
metadata:
  name: aaa
spec:
  virtualNetwork: prod
  ipv4Cidr: 10.10.200.0/24
"""


def _one_apply_converges(tmp_path: Path, repo: Path, *, saved: bool = False) -> None:
    if saved:
        plan_file = tmp_path / "plan.json"
        assert plan(tmp_path, repo, "-o", str(plan_file)).returncode == 0
        done = unet(tmp_path, "apply", str(plan_file), "--auto-approve")
    else:
        done = apply(tmp_path, repo)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "not as planned" not in done.stderr
    again = plan(tmp_path, repo, "--detailed-exitcode")
    assert again.returncode == 0, again.stdout[-3000:]


def _groups_of(lab: OvnLab, port: str) -> set[str]:
    uuid = row_named(lab.nb_remote, "Logical_Switch_Port", port)["_uuid"]
    return {r["name"] for r in rows(lab.nb_remote, "Port_Group") if uuid in r["ports"]}


def test_moving_a_subnet_converges_in_one_apply(lab: OvnLab, repo: Path,
                                                tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    edit_text(repo, NETWORK, "ipv4Cidr: 10.10.1.0/24\n", "ipv4Cidr: 10.10.5.0/24\n")
    edit_text(repo, NETWORK, "gateway: 10.10.1.1\n", "gateway: 10.10.5.1\n")
    planned = json.loads(plan(tmp_path, repo, "--format", "json").stdout)
    assert planned["drift"] == [], "rows recreated with their switch are not drift"
    _one_apply_converges(tmp_path, repo)
    assert _groups_of(lab, "unet.acme.vm.web-1.0") == {"unet.acme.prod", "unet.acme.prod.web"}

    # The same with a saved plan, and moving it back.
    edit_text(repo, NETWORK, "ipv4Cidr: 10.10.5.0/24\n", "ipv4Cidr: 10.10.1.0/24\n")
    edit_text(repo, NETWORK, "gateway: 10.10.5.1\n", "gateway: 10.10.1.1\n")
    _one_apply_converges(tmp_path, repo, saved=True)
    assert _groups_of(lab, "unet.acme.vm.web-1.0") == {"unet.acme.prod", "unet.acme.prod.web"}


def test_moving_a_clusters_subnet_converges_in_one_apply(lab: OvnLab, repo: Path,
                                                         tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    edit_text(repo, NETWORK, "ipv4Cidr: 10.10.8.0/22\n", "ipv4Cidr: 10.10.12.0/22\n")
    _one_apply_converges(tmp_path, repo)
    assert _groups_of(lab, "unet.acme.cluster.k1.0") == {"unet.acme.prod",
                                                         "unet.acme.prod.k1_nodes"}


# --- random edits, applied for real -----------------------------------------------------------


def _fresh_northbound(lab: OvnLab) -> None:
    lab.stop_daemon("nb")
    (lab.root / "nb.db").unlink(missing_ok=True)
    lab.start_db("nb", NB_SCHEMA)
    lab.nbctl("init")


def _run(*argv: str) -> int:
    return main([*argv, "--manager", "ovn"])


# UNET_APPLY_EXAMPLES=100 for a longer campaign; each example applies two revisions.
@settings(max_examples=int(os.environ.get("UNET_APPLY_EXAMPLES", "12")),
          deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.function_scoped_fixture,
                                                HealthCheck.filter_too_much])
@given(st.lists(st.tuples(st.sampled_from(sorted(EDITS)), st.integers(0, 2**32)),
                min_size=1, max_size=4))
def test_one_apply_of_any_edit_leaves_nothing_to_do(
        lab: OvnLab, tmp_path: Path, edits: list[tuple[str, int]]) -> None:
    files = copy.deepcopy(EXAMPLE_FILES)
    for name, seed in edits:
        EDITS[name](files, random.Random(seed))
    assume(validate_memory(files).ok)
    head = tmp_path / "head"
    shutil.rmtree(head, ignore_errors=True)
    write_layout(files, head, None)
    base = tmp_path / "base"
    shutil.rmtree(base, ignore_errors=True)
    copy_checkout(EXAMPLE, base)
    for repo in (base, head):
        for path in repo.rglob("*.yaml"):
            path.write_text(path.read_text().replace("northbound: embedded",
                                                     f"northbound: {lab.nb_remote}"))
    _fresh_northbound(lab)
    assert _run("apply", str(base), "--auto-approve") == 0
    assert _run("apply", str(head), "--auto-approve") == 0, edits
    assert _run("plan", str(head), "--detailed-exitcode") == 0, edits


# --- a resource's action is the worst of its rows' ------------------------------------------


def _commit(repo: Path) -> None:
    for args in (("init", "-q"), ("add", "-A"), ("-c", "user.name=t", "-c",
                                                  "user.email=t@example.com", "commit", "-q",
                                                  "-m", "base")):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _resource(document: dict[str, Any], address: str) -> dict[str, Any]:
    return next(r for r in document["resources"] if r["address"] == address)


def _plans(tmp_path: Path, repo: Path) -> dict[str, dict[str, Any]]:
    """The plan of the edited repo against the backends and against the base revision."""
    out = {}
    for mode, extra in (("live", ("--manager", "ovn")), ("pr", ("--base", "HEAD"))):
        done = unet(tmp_path, "plan", str(repo), "--format", "json", *extra)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        out[mode] = json.loads(done.stdout)
    return out


def test_a_nic_moved_to_another_subnet_replaces_its_workload(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    _commit(repo)
    edit_text(repo, "tenants/globex/baremetal.yaml", "interface: eno2\n      subnet: app",
              "interface: eno2\n      subnet: data")
    for mode, document in _plans(tmp_path, repo).items():
        metal = _resource(document, "BaremetalInstance/globex/db-metal")
        assert metal["actions"] == ["delete", "create"], (mode, metal)
        assert document["counts"]["replace"] == 1, mode
        [port] = [c for c in document["backend_changes"]
                  if c["id"] == "ovn:Logical_Switch_Port/globex/BaremetalInstance/db-metal/1"]
        assert port["actions"] == ["delete", "create"]
        if mode == "live":
            assert port["forces_replacement"] == ["parent"]
        else:
            assert metal["replaced_by_fields"] == ["spec.networkAttachments.1.subnet"]
    text = plan(tmp_path, repo).stdout
    assert "-/+ BaremetalInstance/globex/db-metal must be replaced" in text
    assert "~ parent: Logical_Switch/globex/app → Logical_Switch/globex/data  " \
           "# forces replacement" in text
    assert "Plan: 0 to delete, 1 to replace" in text


def test_every_plan_names_the_manifest_fields_that_force_a_replace(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """The reviewer wrote manifest fields: the plan against the backends names them as the
    plan between revisions does (the rows record which field each hash covers), not only
    the OVN rows; the parent a row moves from is shown once."""
    assert apply(tmp_path, repo).returncode == 0
    _commit(repo)
    edit_text(repo, "tenants/globex/baremetal.yaml", "interface: eno2\n      subnet: app",
              "interface: eno2\n      subnet: data")
    edit_text(repo, NETWORK, "ipv4Cidr: 10.10.8.0/22", "ipv4Cidr: 10.10.12.0/22")
    for mode, document in _plans(tmp_path, repo).items():
        metal = _resource(document, "BaremetalInstance/globex/db-metal")
        assert metal["replaced_by_fields"] == ["spec.networkAttachments.1.subnet"], mode
        nodes = _resource(document, "Subnet/acme/nodes")
        assert nodes["replaced_by_fields"] == ["spec.ipv4Cidr"], mode
        assert nodes["reason"] == "immutable fields changed: spec.ipv4Cidr", mode
        warned = {(d["code"], d["path"]) for d in document["diagnostics"]}
        assert ("IMMUTABLE_CHANGED", "/spec/ipv4Cidr") in warned, mode
        assert ("IMMUTABLE_CHANGED", "/spec/networkAttachments/1/subnet") in warned, mode
    text = plan(tmp_path, repo, "--manager", "ovn").stdout
    assert "-/+ Subnet/acme/nodes must be replaced  (immutable fields changed: " \
           "spec.ipv4Cidr)" in text
    assert "# Subnet/acme/nodes changed spec.ipv4Cidr, which cannot change in place" in text
    assert "an immutable field of" not in text
    assert "-/+ Cluster/acme/k1 must be replaced  (Logical_Switch_Port unet.acme.cluster.k1.0 " \
           "must be recreated: Subnet/acme/nodes is replaced, and with it its " \
           "Logical_Switch/acme/nodes)" in text
    assert text.count("Logical_Switch/globex/app → Logical_Switch/globex/data") == 1, text


def test_an_mtu_change_replaces_the_hosting_clusters_network(example_copy: Path,
                                                             tmp_path: Path) -> None:
    _commit(example_copy)
    edit_text(example_copy, NETWORK, "dnsServers: [192.0.2.53, 192.0.2.54]\n  mtu: 1500",
              "dnsServers: [192.0.2.53, 192.0.2.54]\n  mtu: 9000")
    done = unet(tmp_path, "plan", str(example_copy), "--base", "HEAD", "--format", "json")
    document = json.loads(done.stdout)
    web = _resource(document, "Subnet/acme/web")
    assert web["actions"] == ["delete", "create"]
    assert "spec.network.localnet.mtu cannot change in place" in web["reason"]
    cudns = [c for c in document["backend_changes"] if c["table"] == "ClusterUserDefinedNetwork"
             and c["owner"] == "Subnet/acme/web"]
    assert len(cudns) == 2 and all(c["actions"] == ["delete", "create"] for c in cudns)
    assert all(c["forces_replacement"] == ["fields.spec.network.localnet.mtu"] for c in cudns)
    text = unet(tmp_path, "plan", str(example_copy), "--base", "HEAD").stdout
    assert "-/+ Subnet/acme/web must be replaced" in text
    assert "~ spec.network.localnet.mtu: 1500 → 9000  # forces replacement" in text
    markdown = unet(tmp_path, "plan", str(example_copy), "--base", "HEAD", "--format",
                    "markdown").stdout
    assert "**0 to delete, 1 to replace.** Check these first." in markdown


def test_protection_added_with_a_replace_is_honoured(lab: OvnLab, repo: Path,
                                                     tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    _commit(repo)
    edit_text(repo, NETWORK, "  name: web\nspec:", "  name: web\n  annotations:\n"
              "    network.osac.io/prevent-destroy: \"true\"\nspec:")
    edit_text(repo, NETWORK, "ipv4Cidr: 10.10.1.0/24\n", "ipv4Cidr: 10.10.5.0/24\n")
    edit_text(repo, NETWORK, "gateway: 10.10.1.1\n", "gateway: 10.10.5.1\n")
    for extra in (("--manager", "ovn"), ("--base", "HEAD")):
        done = unet(tmp_path, "plan", str(repo), "--format", "json", *extra)
        assert done.returncode == 1, extra
        codes = [d["code"] for d in json.loads(done.stdout)["diagnostics"]]
        assert "PREVENT_DESTROY" in codes, (extra, codes)
    refused = apply(tmp_path, repo)
    assert refused.returncode == 1 and "PREVENT_DESTROY" in refused.stdout


# --- drift that opens access ----------------------------------------------------------------

SSH = "outport == @unet.acme.prod.web && ip4 && ip4.src == 192.0.2.0/24 && tcp.dst == 22"


def test_drift_that_opens_access_is_in_the_exposure_summary(lab: OvnLab, repo: Path,
                                                            tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    [ssh] = [r for r in rows(lab.nb_remote, "ACL") if r["match"] == SSH]
    # By hand: the SSH rule loses its office restriction; a tagged rule opens telnet.
    lab.nbctl("set", "ACL", ssh["_uuid"],
              'match="outport == @unet.acme.prod.web && ip4 && tcp.dst == 22"')
    lab.nbctl("--", "--id=@a", "create", "ACL", "direction=to-lport", "priority=1002",
              'match="outport == @unet.acme.prod.web && ip4 && tcp.dst == 23"',
              "action=allow-related", 'external_ids:"unet:installation"=example',
              'external_ids:"unet:key"="ACL/acme/prod/web/to-lport/handmade"',
              'external_ids:"unet:owner"="SecurityGroup/acme/web"',
              "--", "add", "Port_Group", "unet.acme.prod.web", "acls", "@a")
    done = plan(tmp_path, repo, "--format", "json")
    document = json.loads(done.stdout)
    assert document["exposure"]["drift_opened"] == [
        {"rule": "tcp port 22 from 0.0.0.0/0 (anywhere) to acme/prod/web",
         "owner": "SecurityGroup/acme/web"},
        {"rule": "tcp port 23 from 0.0.0.0/0 (anywhere) to acme/prod/web",
         "owner": "SecurityGroup/acme/web"}]
    # Per workload NIC: what the apply takes back from each member of the group.
    drifted = {(e["nic"], e["opening"], e["internet"]) for e in document["reachability"]
               if e["cause"].startswith("drift")}
    assert {("acme/web-1/0", "tcp port 22 from 0.0.0.0/0 (anywhere) to acme/prod/web", True),
            ("acme/web-2/0", "tcp port 23 from 0.0.0.0/0 (anywhere) to acme/prod/web", False)
            } <= drifted
    assert {e["change"] for e in document["reachability"] if e["cause"].startswith("drift")
            } == {"lost"}
    restored = {(e["nic"], e["opening"]) for e in document["reachability"]
                if e["change"] == "gained"}
    assert ("acme/web-1/0", "tcp port 22 from 192.0.2.0/24 to acme/prod/web") in restored
    text = plan(tmp_path, repo).stdout
    assert "! drift opens tcp port 22 from 0.0.0.0/0 (anywhere) to acme/prod/web — repair " \
           "closes it" in text
    assert "- acme/web-1/0 can no longer be reached with tcp port 22 from 0.0.0.0/0 " \
           "(anywhere) to acme/prod/web — drift: opened outside unet; the apply closes it" \
           in text
    markdown = plan(tmp_path, repo, "--format", "markdown").stdout
    assert "drift opens tcp port 23 from 0.0.0.0/0 (anywhere) to acme/prod/web" in markdown
    # Repaired, the summary has nothing more to say.
    assert apply(tmp_path, repo).returncode == 0
    repaired = json.loads(plan(tmp_path, repo, "--format", "json").stdout)
    assert repaired["exposure"]["drift_opened"] == [] and repaired["reachability"] == []


def test_adding_a_pool_to_a_region_replaces_nothing(lab: OvnLab, repo: Path,
                                                    tmp_path: Path) -> None:
    """The region's external switch is owned by its first pool: a pool sorting before it
    takes the switch over, which is no reason to recreate every router's gateway on it."""
    assert apply(tmp_path, repo).returncode == 0
    (repo / "provider" / "pools-extra.yaml").write_text(
        "apiVersion: network.osac.io/v1alpha1\nkind: ExternalIPPool\nmetadata:\n"
        "  name: aaa-extra\nspec:\n  region: region-a\n  cidr: 192.0.2.128/25\n"
        "  gateway: 192.0.2.129\n")
    document = json.loads(plan(tmp_path, repo, "--format", "json").stdout)
    assert document["row_counts"]["replace"] == 0 and document["counts"]["replace"] == 0
    assert document["drift"] == []
    _one_apply_converges(tmp_path, repo)


def test_a_refresh_only_apply_leaves_repo_changes_for_what_they_are(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """`apply --refresh-only` repairs drift alone: the repo's pending change is not
    applied, so it must not be recorded as applied either (it would pass for drift next
    time, and a `reconcile: report` run would leave it)."""
    assert apply(tmp_path, repo).returncode == 0
    port = "unet.acme.vm.web-1.0"
    addresses = row_named(lab.nb_remote, "Logical_Switch_Port", port)["addresses"]
    lab.nbctl("lsp-set-addresses", port, "02:00:00:00:00:99 10.10.1.99")  # drift
    network = repo / NETWORK
    network.write_text(network.read_text() + SUBNET_AAA)  # a change in the repo
    done = apply(tmp_path, repo, "--refresh-only")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert row_named(lab.nb_remote, "Logical_Switch_Port", port)["addresses"] == addresses
    assert not [r for r in rows(lab.nb_remote, "Logical_Switch") if r["name"].endswith(".aaa")]
    planned = json.loads(plan(tmp_path, repo, "--format", "json").stdout)
    assert planned["has_changes"]
    assert planned["drift"] == [], "the repo's change is not drift"


def test_an_installation_recorded_in_the_former_digest_format_still_tells_drift(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """The digest recorded after an apply changed format (2026-11-26). An installation last
    applied by an earlier unet holds the former one: on its first run after the upgrade, a
    row deleted by hand must still be drift (a `reconcile: report` run reports it), not a
    change of the repo to carry out."""
    from unet.reconciler.engine import RunOptions, read_desired
    from unet.reconciler.plan import DIGEST_FORMAT

    assert apply(tmp_path, repo).returncode == 0
    tag = "unet:applied:example:ovn"
    nb_global = rows(lab.nb_remote, "NB_Global")[0]
    assert nb_global["external_ids"][tag].startswith(DIGEST_FORMAT)
    desired = read_desired(validated(repo), RunOptions(workdir=tmp_path, only=["ovn"]))
    former = desired.digest("ovn", legacy=True)
    assert not former.startswith(DIGEST_FORMAT)
    lab.nbctl("set", "NB_Global", ".", f'external_ids:"{tag}"="{former}"')
    lab.nbctl("lsp-del", "unet.acme.vm.web-1.0")
    port = "ovn:Logical_Switch_Port/acme/ComputeInstance/web-1/0"
    assert port in json.loads(plan(tmp_path, repo, "--format", "json").stdout)["drift"]
    # A former digest that is not of this desired state: the deletion is the repo's change.
    lab.nbctl("set", "NB_Global", ".", f'external_ids:"{tag}"="0123456789abcdef"')
    assert port not in json.loads(plan(tmp_path, repo, "--format", "json").stdout)["drift"]
