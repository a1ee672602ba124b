"""Golden plans for the example repo: the initial plan and one plan per kind of edit.

Each case copies examples/network-repo into a temporary folder, edits it there, and plans
from the example (base) to the edit (head) in process, as `unet plan --base` does. The
plan's JSON (`plan_to_json`, minus `inputs`, which holds temporary paths and commit ids,
and minus `unet_version`, which is not plan content) must equal tests/golden/<case>.json.

After an intended change of the plan format or of a renderer, rewrite the golden files with

    UNET_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_plan_golden.py

and review `git diff tests/golden/` like any other change. Every case also asserts the
facts that matter for it explicitly, so a wrong golden file cannot hide a regression.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from unet.reconciler.desired import render_desired
from unet.reconciler.plan import Plan
from unet.reconciler.plan_io import plan_to_json
from unet.reconciler.planner import plan_between
from unet.reconciler.validate import Validation, validate_repo

from .conftest import EXAMPLE, copy_checkout

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("UNET_UPDATE_GOLDEN") == "1"
API = "network.osac.io/v1alpha1"
UNKNOWN = "(known after apply)"

# --- helpers, shared with test_plan_props.py and test_plan_cli.py ------------------------------


def copy_example(dest: Path) -> Path:
    copy_checkout(EXAMPLE, dest)
    return dest


def validated(repo: Path) -> Validation:
    result = validate_repo(repo)
    assert result.ok, [d.to_json() for d in result.diagnostics if d.is_error]
    return result


def edit_text(repo: Path, rel: str, old: str, new: str) -> None:
    """Replace `old` (which must occur exactly once) in one file."""
    path = repo / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {rel}"
    path.write_text(text.replace(old, new))


def edit_docs(repo: Path, rel: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Load every document of one file, let `change` edit the list in place, write it back."""
    path = repo / rel
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    change(docs)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def find_doc(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def append_doc(repo: Path, rel: str, doc: dict[str, Any]) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    path.write_text(old + "\n---\n" + yaml.safe_dump(doc, sort_keys=False))


def remove_tenant(repo: Path, tenant: str) -> None:
    """The tenant's folder and its Tenant object."""
    shutil.rmtree(repo / "tenants" / tenant)
    (repo / "provider" / "tenants" / f"{tenant}.yaml").unlink()


def set_prune(repo: Path, prune: bool) -> None:
    edit_text(repo, "unet.yaml", "prune: true", f"prune: {str(prune).lower()}")


def plan_document(plan: Plan) -> dict[str, Any]:
    """The plan's JSON without what depends on where and when it ran, as plain JSON."""
    doc = plan_to_json(plan)
    doc.pop("inputs")
    doc.pop("unet_version")
    return json.loads(json.dumps(doc, sort_keys=True, default=str))


def resource(doc: dict[str, Any], address: str) -> dict[str, Any]:
    return next(r for r in doc["resources"] if r["address"] == address)


def changes_of(doc: dict[str, Any], owner: str) -> list[dict[str, Any]]:
    return [c for c in doc["backend_changes"] if c["owner"] == owner]


def step_waves(doc: dict[str, Any]) -> dict[str, int]:
    """Step id ("create ovn:Logical_Switch/...") → its wave index."""
    return {step: wave["index"] for wave in doc["waves"] for step in wave["steps"]}


#: The example's own warnings (test_example_repo), which every plan of it shows.
STANDING = frozenset({"TARGET_PENDING", "POLICY_RULE_NOT_REALISED"})


def planned(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's diagnostics but the example's standing warnings."""
    return [d for d in doc["diagnostics"] if d["code"] not in STANDING]


def codes(doc: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [d for d in doc["diagnostics"] if d["code"] == code]


def non_noop(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["resources"] if r["actions"] != ["no-op"]]


def check_golden(name: str, doc: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing; run UNET_UPDATE_GOLDEN=1 pytest {__file__}"
    expected = path.read_text()
    if expected != text:
        delta = "".join(list(difflib.unified_diff(
            expected.splitlines(keepends=True), text.splitlines(keepends=True),
            f"golden/{name}.json", "this run", n=2))[:80])
        pytest.fail(f"the plan differs from golden/{name}.json (UNET_UPDATE_GOLDEN=1 "
                    f"rewrites it, if the change is intended):\n{delta}")


# --- the base and the edits ----------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> Validation:
    return validated(EXAMPLE)


def plan_edit(tmp_path: Path, base: Validation, edit: Callable[[Path], None]) -> dict[str, Any]:
    head = copy_example(tmp_path / "head")
    edit(head)
    return plan_document(plan_between(base, validated(head), {}))


def test_initial_plan_creates_everything(example: Validation) -> None:
    doc = plan_document(plan_between(None, example, {}))
    check_golden("initial", doc)
    assert {tuple(r["actions"]) for r in doc["resources"]} == {("create",)}
    assert doc["counts"]["create"] == len(example.manifests)
    rows = render_desired(example, {}).objects
    assert doc["row_counts"]["create"] == len(rows) == len(doc["backend_changes"])
    assert all(c["actions"] == ["create"] and c["before"] is None
               for c in doc["backend_changes"])
    assert doc["valid"] and doc["has_changes"] and planned(doc) == []
    # New allocations are known only after apply, and marked so; fixed ones are known.
    web1 = changes_of(doc, "ComputeInstance/acme/web-1")[0]
    assert web1["unknown"] == ["addresses", "port_security"]
    assert UNKNOWN in web1["after"]["fields"]["addresses"][0]
    launch = changes_of(doc, "ExternalIP/initech/launch-web")[0]
    assert launch["after"]["fields"]["addresses"] == ["203.0.113.100"]
    assert launch["unknown"] == []
    # Every step runs after the creates of what it depends on.
    waves = step_waves(doc)
    for change in doc["backend_changes"]:
        manager = change["manager"]
        after = change["after"]
        deps = [k for keys in after["refs"].values() for k in keys]
        deps += [after["parent"][0]] if after["parent"] else []
        for dep in deps:
            assert waves[f"create {manager}:{dep}"] < waves[f"create {change['id']}"]
    opened = {e["rule"] for e in doc["exposure"]["rules_opened"]}
    assert "tcp port 443 from 0.0.0.0/0 (anywhere) to acme/prod/web" in opened
    assert doc["exposure"]["rules_closed"] == []


def test_add_subnet(tmp_path: Path, example: Validation) -> None:
    def edit(repo: Path) -> None:
        append_doc(repo, "tenants/acme/network.yaml", {
            "apiVersion": API, "kind": "Subnet", "metadata": {"name": "cache"},
            "spec": {"virtualNetwork": "prod", "ipv4Cidr": "10.10.3.0/24"}})

    doc = plan_edit(tmp_path, example, edit)
    check_golden("add_subnet", doc)
    assert [(r["address"], r["actions"]) for r in non_noop(doc)] == \
        [("Subnet/acme/cache", ["create"])]
    created = [c for c in doc["backend_changes"] if c["actions"] != ["no-op"]]
    assert {c["owner"] for c in created} == {"Subnet/acme/cache"}
    assert all(c["actions"] == ["create"] for c in created)
    assert sorted(c["table"] for c in created if c["manager"] == "ovn") == [
        "DHCP_Options", "Logical_Router_Port", "Logical_Switch", "Logical_Switch_Port",
        "Logical_Switch_Port"]
    assert sorted(c["key"] for c in created if c["manager"] == "kubernetes") == [
        f"hosting-a{n}/{kind}" for n in (1, 2) for kind in (
            "ClusterUserDefinedNetwork/unet.acme.cache",
            "IPAddressPool/metallb-system/unet.acme.cache",
            "L2Advertisement/metallb-system/unet.acme.cache",
            "MultiNetworkPolicy/acme/unet.cache")]  # isolates the new network there
    router_port = next(c for c in created if c["table"] == "Logical_Router_Port")
    assert router_port["after"]["parent"] == ["Logical_Router/acme/prod", "ports"]
    assert router_port["after"]["fields"]["networks"] == ["10.10.3.1/24"]
    localnet = next(c for c in created if c["key"].endswith("/localnet"))
    assert localnet["unknown"] == ["tag_request"]  # a new segment id: known after apply
    assert doc["row_counts"]["delete"] == doc["row_counts"]["replace"] == 0
    assert doc["row_counts"]["update"] == 0  # other subnets keep their segment ids
    assert doc["valid"] and planned(doc) == []


def test_change_immutable_subnet_cidr(tmp_path: Path, example: Validation) -> None:
    def edit(repo: Path) -> None:
        edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.8.0/22",
                  "ipv4Cidr: 10.10.12.0/22")

    doc = plan_edit(tmp_path, example, edit)
    check_golden("change_cidr", doc)
    nodes = resource(doc, "Subnet/acme/nodes")
    assert nodes["actions"] == ["delete", "create"]
    assert nodes["replaced_by_fields"] == ["spec.ipv4Cidr"]
    # The cluster on it is replaced too: its port is recreated in the new switch.
    k1 = resource(doc, "Cluster/acme/k1")
    assert k1["actions"] == ["delete", "create"] and k1["replaced_by_fields"] == []
    assert k1["reason"] == ("Logical_Switch_Port unet.acme.cluster.k1.0 must be recreated: "
                            "Subnet/acme/nodes is replaced, and with it its "
                            "Logical_Switch/acme/nodes")
    assert doc["counts"]["replace"] == 2 and doc["counts"]["delete"] == 0
    [warning] = codes(doc, "IMMUTABLE_CHANGED")
    assert warning["severity"] == "warning"
    assert "spec.ipv4Cidr" in warning["message"] and "Subnet/acme/nodes" in warning["message"]
    assert warning["path"] == "/spec/ipv4Cidr"
    assert warning["file"] == "tenants/acme/network.yaml"
    assert (EXAMPLE / warning["file"]).read_text().splitlines()[warning["line"] - 1].strip() \
        == "ipv4Cidr: 10.10.8.0/22"
    rows = changes_of(doc, "Subnet/acme/nodes")
    assert rows and all(c["actions"] == ["delete", "create"] for c in rows)
    waves = step_waves(doc)
    for change in doc["backend_changes"]:
        if change["actions"] == ["delete", "create"]:
            assert waves[f"delete {change['id']}"] < waves[f"create {change['id']}"]
    # The cluster's port moves with its switch; allocations survive the replace. Its
    # second NIC, on the provider's services-a, stays as it is.
    port, services = changes_of(doc, "Cluster/acme/k1")
    assert services["key"].endswith("/k1/1") and services["actions"] == ["no-op"]
    assert port["actions"] == ["delete", "create"]
    assert port["after"]["fields"]["addresses"][0].split()[0] == \
        port["before"]["fields"]["addresses"][0].split()[0]  # the MAC
    localnet = next(c for c in rows if c["key"].endswith("/localnet"))
    assert localnet["after"]["fields"]["tag_request"] == \
        localnet["before"]["fields"]["tag_request"]
    assert isinstance(localnet["after"]["fields"]["tag_request"], int)
    assert codes(doc, "PREVENT_DESTROY") == [] and doc["valid"]


def test_open_ssh_to_the_world(tmp_path: Path, example: Validation) -> None:
    def edit(repo: Path) -> None:
        def add_rule(docs: list[dict[str, Any]]) -> None:
            find_doc(docs, "SecurityGroup", "db")["spec"]["ingress"].append(
                {"protocol": "tcp", "portFrom": 22, "portTo": 22, "cidr": "0.0.0.0/0"})

        edit_docs(repo, "tenants/acme/security-groups.yaml", add_rule)

    doc = plan_edit(tmp_path, example, edit)
    check_golden("open_ssh", doc)
    assert doc["exposure"]["rules_opened"] == [
        {"rule": "tcp port 22 from 0.0.0.0/0 (anywhere) to acme/prod/db",
         "owner": "SecurityGroup/acme/db"}]
    assert all(not entries for key, entries in doc["exposure"].items() if key != "rules_opened")
    assert [(r["address"], r["actions"]) for r in non_noop(doc)] == \
        [("SecurityGroup/acme/db", ["update"])]
    [acl] = [c for c in doc["backend_changes"] if c["actions"] != ["no-op"]]
    assert acl["table"] == "ACL" and acl["actions"] == ["create"]
    fields = acl["after"]["fields"]
    assert fields["action"] == "allow-related" and fields["direction"] == "to-lport"
    assert fields["match"] == "outport == @unet.acme.prod.db && ip4 && tcp.dst == 22"
    assert acl["after"]["parent"] == ["Port_Group/acme/prod/db", "acls"]


def test_a_tenant_joins_a_provider_network(tmp_path: Path, example: Validation) -> None:
    """The provider lets initech onto storage-b; initech attaches a VM's second NIC to it
    and admits SSH from the storage VLAN, which the plan shows as opened to every tenant
    there."""
    def edit(repo: Path) -> None:
        edit_text(repo, "provider/networks.yaml", "tenants: [globex]",
                  "tenants: [globex, initech]")
        append_doc(repo, "tenants/initech/network.yaml", {
            "apiVersion": API, "kind": "VirtualNetwork", "metadata": {"name": "lab-b"},
            "spec": {"region": "region-b", "ipv4Cidr": "172.20.0.0/16"}})
        append_doc(repo, "tenants/initech/network.yaml", {
            "apiVersion": API, "kind": "Subnet", "metadata": {"name": "hosts"},
            "spec": {"virtualNetwork": "lab-b", "ipv4Cidr": "172.20.1.0/24"}})
        append_doc(repo, "tenants/initech/network.yaml", {
            "apiVersion": API, "kind": "SecurityGroup", "metadata": {"name": "nas"},
            "spec": {"virtualNetwork": "lab-b", "ingress": [
                {"protocol": "tcp", "portFrom": 22, "portTo": 22,
                 "cidr": "192.168.50.0/24"}]}})
        append_doc(repo, "tenants/initech/compute.yaml", {
            "apiVersion": API, "kind": "ComputeInstance", "metadata": {"name": "nas-client"},
            "spec": {"networkAttachments": [
                {"subnet": "hosts", "primary": True},
                {"providerNetwork": "storage-b", "securityGroups": ["nas"]}]}})

    doc = plan_edit(tmp_path, example, edit)
    check_golden("provider_network", doc)
    assert doc["valid"] and planned(doc) == []
    assert {r["address"] for r in non_noop(doc)} == {
        "VirtualNetwork/initech/lab-b", "Subnet/initech/hosts", "SecurityGroup/initech/nas",
        "ComputeInstance/initech/nas-client", "ProviderNetwork/storage-b"}
    storage = resource(doc, "ProviderNetwork/storage-b")
    assert storage["reason"] == "changed in the repo (spec.tenants.1); no backend change"
    assert all(c["actions"] == ["no-op"] for c in changes_of(doc, "ProviderNetwork/storage-b"))
    [port] = [c for c in changes_of(doc, "ComputeInstance/initech/nas-client")
              if c["key"].endswith("/nas-client/1")]
    assert port["after"]["parent"] == ["Logical_Switch/None/storage-b", "ports"]
    assert port["after"]["refs"]["dhcpv4_options"] == ["DHCP_Options/None/storage-b/v4"]
    assert doc["exposure"]["rules_opened"] == [
        {"rule": "provider network storage-b (shared by globex, initech, and the provider's "
                 "hosts) to unet.initech.vm.nas-client.1, as far as its groups allow",
         "owner": "ComputeInstance/initech/nas-client"},
        {"rule": "tcp port 22 from 192.168.50.0/24 to initech/lab-b/nas",
         "owner": "SecurityGroup/initech/nas"}]


INITECH = ["ComputeInstance/initech/artifact-mirror-1", "ComputeInstance/initech/ci-runner-1",
           "ExternalIP/initech/launch-web", "SecurityGroup/initech/mirror",
           "Subnet/initech/artifacts", "Subnet/initech/build", "Tenant/initech",
           "VirtualNetwork/initech/lab", "VirtualNetwork/initech/mirror",
           "VirtualNetworkPeering/initech/mirror-globex"]
#: globex's side of its peering with initech, which names initech: it goes with it
GLOBEX_PEERING = "VirtualNetworkPeering/globex/corp-initech-mirror"
GONE = sorted([*INITECH, GLOBEX_PEERING])


def remove_initech(repo: Path) -> None:
    remove_tenant(repo, "initech")
    (repo / "tenants" / "globex" / "peering.yaml").unlink()


def test_remove_tenant_without_prune_keeps_everything(tmp_path: Path) -> None:
    base_repo = copy_example(tmp_path / "base")
    set_prune(base_repo, False)
    base = validated(base_repo)

    def edit(repo: Path) -> None:
        set_prune(repo, False)
        remove_initech(repo)

    doc = plan_edit(tmp_path, base, edit)
    check_golden("remove_tenant_keep", doc)
    assert doc["counts"]["delete"] == doc["row_counts"]["delete"] == 0
    assert not doc["has_changes"] and non_noop(doc) == []
    for address in GONE:
        assert resource(doc, address)["reason"].startswith("kept")
    kept = [c for c in doc["backend_changes"] if c["owner"] in GONE]
    assert kept and all(c["actions"] == ["no-op"] and c["after"] is None for c in kept)
    warnings = codes(doc, "PRUNE_DISABLED")
    assert sorted(w["message"].split()[0] for w in warnings) == GONE
    assert all(w["severity"] == "warning" for w in warnings)
    assert doc["valid"]


def test_remove_tenant_with_prune_deletes_it(tmp_path: Path, example: Validation) -> None:
    doc = plan_edit(tmp_path, example, remove_initech)
    check_golden("remove_tenant_prune", doc)
    assert [r["address"] for r in non_noop(doc)] == GONE
    assert all(r["actions"] == ["delete"] for r in non_noop(doc))
    base_rows = [o for o in render_desired(example, {}).objects if o.owner in GONE]
    deleted = [c for c in doc["backend_changes"] if c["actions"] == ["delete"]]
    assert sorted(c["id"] for c in deleted) == sorted(o.uid for o in base_rows)
    assert doc["row_counts"] == {"create": 0, "delete": len(base_rows), "replace": 0,
                                 "update": 0, "no-op": len(doc["backend_changes"])
                                 - len(base_rows)}
    waves = step_waves(doc)
    for change in deleted:  # children and referrers go first
        before = change["before"]
        deps = [k for keys in before["refs"].values() for k in keys]
        deps += [before["parent"][0]] if before["parent"] else []
        for dep in deps:
            dep_step = f"delete {change['manager']}:{dep}"
            if dep_step in waves:
                assert waves[dep_step] > waves[f"delete {change['id']}"]
    assert codes(doc, "PRUNE_DISABLED") == [] and doc["valid"]


def test_deleting_a_protected_network_is_an_error(tmp_path: Path, example: Validation) -> None:
    def edit(repo: Path) -> None:  # prod goes, with everything of acme that needs it
        shutil.rmtree(repo / "tenants" / "acme")

    doc = plan_edit(tmp_path, example, edit)
    check_golden("protected_delete", doc)
    assert resource(doc, "VirtualNetwork/acme/prod")["actions"] == ["delete"]
    [error] = codes(doc, "PREVENT_DESTROY")
    assert error["severity"] == "error"
    assert "delete VirtualNetwork/acme/prod" in error["message"]
    assert error["file"] == "tenants/acme/network.yaml"
    assert not doc["valid"]


def test_replacing_a_protected_network_is_an_error(tmp_path: Path,
                                                   example: Validation) -> None:
    def edit(repo: Path) -> None:  # still holds every subnet, so the head stays valid
        edit_text(repo, "tenants/acme/network.yaml", "ipv4Cidr: 10.10.0.0/16",
                  "ipv4Cidr: 10.10.0.0/15")

    doc = plan_edit(tmp_path, example, edit)
    check_golden("protected_replace", doc)
    prod = resource(doc, "VirtualNetwork/acme/prod")
    assert prod["actions"] == ["delete", "create"]
    assert prod["replaced_by_fields"] == ["spec.ipv4Cidr"]
    [error] = codes(doc, "PREVENT_DESTROY")
    assert "replace VirtualNetwork/acme/prod" in error["message"]
    assert error["severity"] == "error" and not doc["valid"]
    assert [w["path"] for w in codes(doc, "IMMUTABLE_CHANGED")] == ["/spec/ipv4Cidr"]
