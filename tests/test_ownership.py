"""Ownership under attack: what one tenant's change may never do to anyone else.

A pull request reviewed only by a tenant's owners must not take another tenant's live
address, and rows that stay in the backends (pruning off) keep what they hold. Every test
applies the example repo to a real OVN Northbound database (the `lab` fixture), then plans
and applies a hostile or careless change through the unet command line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from unet.reconciler.validate import validate_repo

from .support.gitops import commit_all, git
from .support.ovnlab import OvnLab
from .support.ovnrun import (
    TABLES,
    apply,
    dump,
    ours,
    plan,
    plan_json,
    reaped,
    row_named,
    rows,
    spawn_at_prompt,
    unet,
    wait_for_text,
)
from .test_plan_golden import append_doc, edit_text

API = "network.osac.io/v1alpha1"


def _doc(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _eip(lab: OvnLab, tenant: str, name: str) -> str:
    found = row_named(lab.nb_remote, "Address_Set", f"unet_eip.{tenant}.{name.replace('-', '_')}")
    [address] = found["addresses"]
    return str(address)


def _port(lab: OvnLab, name: str) -> list[str]:
    """A port's "MAC IPv4 [IPv6] [VIPs]", split."""
    return str(row_named(lab.nb_remote, "Logical_Switch_Port", name)["addresses"][0]).split()


def _conflicts(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in document["diagnostics"] if d["code"] == "ADDRESS_CONFLICT"]


def _steal(repo: Path, address: str) -> None:
    """initech claims `address` from the public pool and points it at its CI runner."""
    rel = "tenants/initech/external.yaml"
    append_doc(repo, rel, _doc("ExternalIP", "steal", {"pool": "public-a", "address": address}))
    append_doc(repo, rel, _doc("ExternalIPAttachment", "steal", {
        "externalIP": "steal", "target": {"kind": "ComputeInstance", "name": "ci-runner-1"}}))


def test_a_tenant_cannot_take_an_external_address_another_tenant_holds(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    held = _eip(lab, "acme", "web-1-public")
    git(repo, "init", "-q")
    commit_all(repo, "applied")
    _steal(repo, held)

    before = dump(lab.nb_remote)
    code, document = plan_json(tmp_path, repo)
    assert code == 1 and document["valid"] is False
    [conflict] = _conflicts(document)
    assert conflict["message"] == (f"{held} is held by ExternalIP/acme/web-1-public; an "
                                   "address in use never moves to another owner")
    assert (conflict["file"], conflict["path"]) == ("tenants/initech/external.yaml",
                                                    "/spec/address")
    assert conflict["line"] is not None
    refused = apply(tmp_path, repo)
    assert refused.returncode == 1
    assert "ADDRESS_CONFLICT" in refused.stdout and "nothing was applied" in refused.stderr
    assert dump(lab.nb_remote) == before, "acme's address and NAT are untouched"
    assert _eip(lab, "acme", "web-1-public") == held

    # In a pull request, the base revision stands for the backends: the same refusal.
    pr = unet(tmp_path, "plan", str(repo), "--base", "HEAD", "--format", "json")
    assert pr.returncode == 1
    [conflict] = _conflicts(json.loads(pr.stdout))
    assert "held by ExternalIP/acme/web-1-public" in conflict["message"]


def test_fixed_port_addresses_macs_and_vips_never_take_a_live_allocation(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    mac, ip4, _ip6 = _port(lab, "unet.acme.vm.web-1.0")
    api_vip = _port(lab, "unet.acme.cluster.k1.0")[2]
    compute, cluster = "tenants/acme/compute.yaml", "tenants/acme/cluster-k1.yaml"
    append_doc(repo, compute, _doc("ComputeInstance", "web-9", {"networkAttachments": [
        {"subnet": "web", "securityGroups": ["web"], "ipAddress": ip4}]}))
    append_doc(repo, compute, _doc("ComputeInstance", "web-10", {"networkAttachments": [
        {"subnet": "web", "securityGroups": ["web"], "macAddress": mac}]}))
    append_doc(repo, cluster, _doc("Cluster", "k2", {
        "networkAttachments": [{"subnet": "nodes", "securityGroups": ["k1-nodes"]}],
        "network": {"podCidr": "10.132.0.0/14", "serviceCidr": "172.31.0.0/16"},
        "apiVip": api_vip}))
    append_doc(repo, cluster, _doc("ExternalIP", "k2-api", {"pool": "public-a"}))
    append_doc(repo, cluster, _doc("ExternalIPAttachment", "k2-api", {
        "externalIP": "k2-api", "target": {"kind": "Cluster", "name": "k2", "endpoint": "api"}}))
    # The same address in another VirtualNetwork of acme (networks may overlap) is free.
    _overlapping_network(repo, ip4)

    before = dump(lab.nb_remote)
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    found = {(c["file"], c["path"], c["message"]) for c in _conflicts(document)}
    assert found == {
        (compute, "/spec/networkAttachments/0/ipAddress",
         f"{ip4} is held by ComputeInstance/acme/web-1; an address in use never moves to "
         "another owner"),
        (compute, "/spec/networkAttachments/0/macAddress",
         f"{mac} is held by ComputeInstance/acme/web-1; an address in use never moves to "
         "another owner"),
        (cluster, "/spec/apiVip",
         f"{api_vip} is held by Cluster/acme/k1; an address in use never moves to another "
         "owner"),
    }
    assert apply(tmp_path, repo).returncode == 1
    assert dump(lab.nb_remote) == before

    # Without the three claims, the overlapping network's fixed address is applied.
    for rel, names in ((compute, ("web-9", "web-10")), (cluster, ("k2", "k2-api"))):
        _drop_docs(repo, rel, names)
    applied = apply(tmp_path, repo)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert _port(lab, "unet.acme.vm.dev-1.0")[1] == ip4
    assert _port(lab, "unet.acme.vm.web-1.0") == [mac, ip4, _ip6]


def _overlapping_network(repo: Path, address: str) -> None:
    rel = "tenants/acme/dev.yaml"
    append_doc(repo, rel, _doc("VirtualNetwork", "dev", {"region": "region-a",
                                                         "ipv4Cidr": "10.10.0.0/16"}))
    append_doc(repo, rel, _doc("Subnet", "dev-web", {"virtualNetwork": "dev",
                                                     "ipv4Cidr": "10.10.1.0/24"}))
    append_doc(repo, rel, _doc("ComputeInstance", "dev-1", {"networkAttachments": [
        {"subnet": "dev-web", "ipAddress": address}]}))


def _drop_docs(repo: Path, rel: str, names: tuple[str, ...]) -> None:
    path = repo / rel
    docs = [d for d in yaml.safe_load_all(path.read_text())
            if d is not None and d["metadata"]["name"] not in names]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _localnet_tags(lab: OvnLab) -> dict[str, int]:
    return {str(r["name"]): int(r["tag_request"]) for r in rows(lab.nb_remote,
                                                                "Logical_Switch_Port")
            if r["type"] == "localnet" and r["tag_request"] is not None}


def test_rows_kept_with_prune_off_still_hold_their_allocations(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    edit_text(repo, "unet.yaml", "prune: true", "prune: false")
    assert apply(tmp_path, repo).returncode == 0
    launch = _eip(lab, "initech", "launch-web")
    segment = _localnet_tags(lab)["unet.initech.build.localnet"]

    shutil.rmtree(repo / "tenants" / "initech")
    (repo / "provider" / "tenants" / "initech.yaml").unlink()
    (repo / "tenants" / "globex" / "peering.yaml").unlink()  # its side names initech
    kept = apply(tmp_path, repo)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "PRUNE_DISABLED" in kept.stdout
    assert _eip(lab, "initech", "launch-web") == launch, "initech's rows stay"

    # A fixed address held by a kept row is refused, like one held by a desired row.
    rel = "tenants/acme/external.yaml"
    append_doc(repo, rel, _doc("ExternalIP", "launch-2", {"pool": "public-a",
                                                          "address": launch}))
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    [conflict] = _conflicts(document)
    assert f"{launch} is held by ExternalIP/initech/launch-web" in conflict["message"]

    # Allocated values never reuse what kept rows hold: the VLAN of a kept subnet included.
    _drop_docs(repo, rel, ("launch-2",))
    append_doc(repo, rel, _doc("ExternalIP", "extra", {"pool": "public-a"}))
    append_doc(repo, "tenants/acme/network.yaml", _doc("Subnet", "zz-extra", {
        "virtualNetwork": "prod", "ipv4Cidr": "10.10.20.0/24"}))
    applied = apply(tmp_path, repo)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    addresses = [str(a) for r in ours(lab.nb_remote, "Address_Set") for a in r["addresses"]]
    assert len(addresses) == len(set(addresses)), sorted(addresses)
    assert _eip(lab, "acme", "extra") != launch
    tags = _localnet_tags(lab)
    assert tags["unet.acme.zz-extra.localnet"] != segment
    assert len(set(tags.values())) == len(tags), tags
    assert sum(len(ours(lab.nb_remote, t)) for t in TABLES) > 0
    assert plan(tmp_path, repo, "--detailed-exitcode").returncode == 0


# --- rows of others inside unet's rows ----------------------------------------------------


def _operator_rows(lab: OvnLab) -> dict[str, str]:
    """Rows an operator adds inside initech's switch, port group and router; what a plan
    must call them."""
    lab.nbctl("lsp-add", "unet.initech.build", "op-port")
    match = "outport == @unet.initech.lab.default && ip4.src == 198.18.0.1"
    lab.nbctl("--type=port-group", "acl-add", "unet.initech.lab.default", "to-lport", "900",
              match, "drop")
    lab.nbctl("lr-route-add", "unet.initech.lab", "198.18.0.0/24", "192.168.1.254")
    lab.nbctl("lr-nat-add", "unet.initech.lab", "snat", "203.0.113.252", "192.168.1.0/24")
    uuid = {table: next(r["_uuid"] for r in rows(lab.nb_remote, table)
                        if "unet:installation" not in r["external_ids"])
            for table in ("ACL", "Logical_Router_Static_Route", "NAT")}
    return {
        "Logical_Switch unet.initech.build": "Logical_Switch_Port op-port",
        "Port_Group unet.initech.lab.default":
            f"ACL {uuid['ACL']} (to-lport 900 drop `{match}`)",
        "Logical_Router unet.initech.lab":
            f"Logical_Router_Static_Route {uuid['Logical_Router_Static_Route']} "
            "(198.18.0.0/24 via 192.168.1.254), "
            f"NAT {uuid['NAT']} (snat 203.0.113.252 ↔ 192.168.1.0/24)",
    }


HOLDS = re.compile(r"the plan would (?:delete|replace) (.+?) \(.+?\), which holds what unet "
                   r"does not own: (.+); they would be destroyed with it")


def _holding(document: dict[str, Any]) -> dict[str, str]:
    """Row → what it holds, from the HOLDS_FOREIGN_OBJECTS diagnostics."""
    found = [HOLDS.fullmatch(d["message"]) for d in document["diagnostics"]
             if d["code"] == "HOLDS_FOREIGN_OBJECTS"]
    assert all(found), document["diagnostics"]
    return {match.group(1): match.group(2) for match in found if match}


def test_pruning_a_row_that_holds_an_operators_rows_is_refused(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    expected = _operator_rows(lab)
    shutil.rmtree(repo / "tenants" / "initech")
    (repo / "tenants" / "globex" / "peering.yaml").unlink()  # its side names initech

    before = dump(lab.nb_remote)
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    assert _holding(document) == expected
    text = plan(tmp_path, repo)
    assert "! holds what unet does not own: Logical_Switch_Port op-port" in text.stdout
    refused = apply(tmp_path, repo)
    assert refused.returncode == 1 and "HOLDS_FOREIGN_OBJECTS" in refused.stdout
    assert dump(lab.nb_remote) == before, "nothing deleted, the operator's rows least of all"

    # Once the operator has moved them away, initech's rows go.
    lab.nbctl("lsp-del", "op-port")
    lab.nbctl("--type=port-group", "acl-del", "unet.initech.lab.default")
    lab.nbctl("lr-route-del", "unet.initech.lab")
    lab.nbctl("lr-nat-del", "unet.initech.lab")
    pruned = apply(tmp_path, repo)
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert not [r for r in rows(lab.nb_remote, "Logical_Switch")
                if r["name"] == "unet.initech.build"]


def test_replacing_a_row_that_holds_an_operators_row_is_refused(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    lab.nbctl("lsp-add", "unet.acme.web", "op-port")
    edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.1.0/24\n",
              "ipv4Cidr: 10.10.5.0/24\n")
    edit_text(repo, "tenants/acme/network.yaml", "gateway: 10.10.1.1\n", "gateway: 10.10.5.1\n")
    before = dump(lab.nb_remote)
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    assert _holding(document) == {"Logical_Switch unet.acme.web": "Logical_Switch_Port op-port"}
    [diagnostic] = [d for d in document["diagnostics"] if d["code"] == "HOLDS_FOREIGN_OBJECTS"]
    assert diagnostic["message"].startswith("the plan would replace Logical_Switch "
                                            "unet.acme.web (Subnet/acme/web), which holds")
    assert diagnostic["file"] == "tenants/acme/network.yaml"
    assert apply(tmp_path, repo).returncode == 1
    assert dump(lab.nb_remote) == before


def test_a_fixed_address_never_takes_one_kept_from_another_subnet_name(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """Renaming a subnet moves its ports (their addresses recorded under the old name):
    a fixed claim on one of those addresses in the same change is still a conflict."""
    assert apply(tmp_path, repo).returncode == 0
    ip4 = _port(lab, "unet.acme.vm.web-1.0")[1]
    edit_text(repo, "tenants/acme/network.yaml", "  name: web\nspec:", "  name: web2\nspec:")
    text = (repo / "tenants/acme/compute.yaml").read_text()
    (repo / "tenants/acme/compute.yaml").write_text(text.replace("subnet: web\n",
                                                                 "subnet: web2\n"))
    append_doc(repo, "tenants/acme/compute.yaml", _doc("ComputeInstance", "web-8", {
        "networkAttachments": [{"subnet": "web2", "securityGroups": ["web"],
                                "ipAddress": ip4}]}))
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    [conflict] = _conflicts(document)
    assert f"{ip4} is held by ComputeInstance/acme/web-1" in conflict["message"]


def test_excluding_an_address_in_use_is_refused_not_renumbered(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    public = _eip(lab, "acme", "web-1-public")
    ip4 = _port(lab, "unet.acme.vm.web-1.0")[1]
    edit_text(repo, "provider/pools.yaml", "    - 203.0.113.53   # provider's public DNS "
              "resolver\n", f"    - 203.0.113.53   # provider's public DNS resolver\n"
              f"    - {public}\n")
    edit_text(repo, "tenants/acme/network.yaml", "  dnsServers: [192.0.2.53, 192.0.2.54]\n"
              "  mtu: 1500\n", f"  dnsServers: [192.0.2.53, 192.0.2.54]\n  mtu: 1500\n"
              f"  excludeAddresses: [{ip4}]\n")
    before = dump(lab.nb_remote)
    code, document = plan_json(tmp_path, repo)
    assert code == 1
    found = {(d["file"], d["message"].split(";")[0]) for d in document["diagnostics"]
             if d["code"] == "ALLOCATION_IN_USE"}
    assert found == {
        ("provider/pools.yaml", f"{public} is held by ExternalIP/acme/web-1-public, and "
                                "ExternalIPPool public-a no longer hands it out (its gateway, "
                                "or excluded)"),
        ("tenants/acme/network.yaml", f"{ip4} is held by ComputeInstance/acme/web-1, and "
                                      "subnet Subnet/acme/web no longer hands it out (reserved:"
                                      " its gateway, an excluded address, or the VIP block)")}
    assert apply(tmp_path, repo).returncode == 1
    assert dump(lab.nb_remote) == before, "nothing renumbered"


def test_a_row_of_others_added_while_the_plan_is_read_stops_the_apply(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.1.0/24\n",
              "ipv4Cidr: 10.10.4.0/24\n")
    edit_text(repo, "tenants/acme/network.yaml", "gateway: 10.10.1.1\n",
              "gateway: 10.10.4.1\n")
    out = tmp_path / "apply.out"
    proc, controller = spawn_at_prompt(tmp_path, out, "apply", str(repo), "--manager", "ovn")
    try:
        with reaped(proc):
            wait_for_text(proc, (out,), "Apply these changes?")
            before = dump(lab.nb_remote)
            lab.nbctl("lsp-add", "unet.acme.web", "operator-vm")  # while the plan is read
            os.write(controller, b"yes\n")
            assert proc.wait(timeout=60) == 1
    finally:
        os.close(controller)
    said = out.read_text()
    assert "HOLDS_FOREIGN_OBJECTS: Logical_Switch Logical_Switch/acme/web now holds what unet " \
           "does not own (Logical_Switch_Port operator-vm)" in said
    assert "Nothing was applied" in said
    lab.nbctl("lsp-del", "operator-vm")  # it was there all along; without it:
    assert dump(lab.nb_remote) == before, "nothing applied"


def test_two_ovn_managers_may_not_share_a_northbound(example_copy: Path) -> None:
    """Rows carry the installation, not the manager: two managers on one database would
    each plan to delete the other's rows."""
    managers = example_copy / "provider" / "managers.yaml"
    text = managers.read_text().replace("  regions: [region-a, region-b]\n",
                                        "  regions: [region-a]\n", 1)
    managers.write_text(text + "---\n" + yaml.safe_dump({
        "apiVersion": API, "kind": "NetworkManager", "metadata": {"name": "ovn-b"},
        "spec": {"role": "fabric", "plugin": "ovn", "regions": ["region-b"],
                 "config": {"northbound": "embedded"}}}))
    edit_text(example_copy, "provider/classes.yaml", "  region: region-b\n  default: true\n"
              "  fabricManager: ovn\n", "  region: region-b\n  default: true\n"
              "  fabricManager: ovn-b\n")
    problems = [d for d in validate_repo(example_copy).diagnostics if d.is_error]
    assert [(d.code, d.path) for d in problems] == [("PLUGIN_CONFIG_INVALID",
                                                     "/spec/config/northbound")]
    assert "NetworkManager 'ovn-b' uses the same backend as 'ovn'" in problems[0].message


def test_with_prune_on_a_live_plan_says_removed_not_kept(lab: OvnLab, repo: Path,
                                                          tmp_path: Path) -> None:
    """What leaves the repo is deleted with prune on, and the plan says so (it said
    "kept: … prune is off" of the deletions)."""
    assert apply(tmp_path, repo).returncode == 0
    (repo / "tenants" / "initech" / "compute.yaml").unlink()
    code, document = plan_json(tmp_path, repo)
    assert code == 2
    [runner] = [r for r in document["resources"]
                if r["address"] == "ComputeInstance/initech/ci-runner-1"]
    assert runner["actions"] == ["delete"] and "kept" not in runner["reason"], runner
    assert not [d for d in document["diagnostics"] if d["code"] == "PRUNE_DISABLED"]


def test_an_owner_never_conflicts_with_itself_when_its_attachments_are_reordered(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """A VM's fixed address moves with its attachment: swapping the attachments is one
    apply (its ports on each subnet are replaced), never ADDRESS_CONFLICT with itself."""
    rel = "tenants/acme/compute.yaml"
    first = {"subnet": "web", "ipAddress": "10.10.1.50", "primary": True}
    append_doc(repo, rel, _doc("ComputeInstance", "a", {
        "networkAttachments": [first, {"subnet": "db"}]}))
    assert apply(tmp_path, repo).returncode == 0
    text = (repo / rel).read_text()
    swapped = text.replace(
        "  - subnet: web\n    ipAddress: 10.10.1.50\n    primary: true\n  - subnet: db\n",
        "  - subnet: db\n  - subnet: web\n    ipAddress: 10.10.1.50\n    primary: true\n")
    assert swapped != text
    (repo / rel).write_text(swapped)
    code, document = plan_json(tmp_path, repo)
    assert code == 2 and not _conflicts(document), document["diagnostics"]
    done = apply(tmp_path, repo)
    assert done.returncode == 0, done.stdout + done.stderr
    [port] = [r for r in rows(lab.nb_remote, "Logical_Switch_Port")
              if "10.10.1.50" in " ".join(map(str, r["addresses"]))]
    assert port["external_ids"]["unet:owner"] == "ComputeInstance/acme/a"
    assert port["name"].endswith(".1"), port["name"]
    code, document = plan_json(tmp_path, repo)
    assert code == 0 and document["has_changes"] is False, "one apply converges"
