"""What became of each manifest, as a tenant reads it (`unet show status`), against a real
OVN Northbound, and the Kubernetes manager on the contract-test clusters:

- before an apply every manifest is Pending (to create); after it Ready at the revision,
  with the values the fabric recorded for it (those `show bindings` gives);
- a manifest changed in the repo is Pending with the plan's reason, a manifest the plan
  cannot realise is Failed with its error, an attachment to an undeclared target Pending;
- a tenant's status names nothing of another tenant;
- an apply that fails part-way names the manifests it left pending.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .support.gitops import edit
from .support.ovnlab import OvnLab
from .support.ovnrun import apply, unet
from .test_k8s_contract import _set_mtu, make_env  # noqa: F401  (make_env: a fixture)
from .test_plan_golden import edit_text


def status(cwd: Path, repo: Path, *extra: str) -> dict[str, Any]:
    result = unet(cwd, "show", "status", str(repo), "--manager", "ovn", "--format", "json",
                  *extra)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["format_version"] == "1.0"
    return document


def by_ref(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{m['kind']}/{m['tenant'] + '/' if m['tenant'] else ''}{m['name']}": m
            for m in document["manifests"]}


def commit(repo: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "c")
    return git("rev-parse", "HEAD")


def test_manifests_are_pending_until_applied_then_ready_with_their_values(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    before = by_ref(status(tmp_path, repo, "--tenant", "initech"))
    assert {m["condition"]["type"] for m in before.values()} == {"Pending"}
    assert before["Subnet/initech/build"]["condition"]["reason"] == "CREATE"
    assert before["Subnet/initech/build"]["allocated"] == {}

    head = commit(repo)
    assert apply(tmp_path, repo).returncode == 0
    document = status(tmp_path, repo, "--tenant", "acme", "--rev", "HEAD")
    assert document["revision"] == head and document["tenant"] == "acme"
    after = by_ref(document)
    waiting = after.pop("ExternalIPAttachment/acme/web-3-public")
    assert waiting["condition"]["type"] == "Pending"
    assert waiting["condition"]["reason"] == "TARGET_PENDING"
    assert {m["condition"]["type"] for m in after.values()} == {"Ready"}
    assert {m["revision"] for m in after.values()} == {head}
    assert document["counts"] == {"Ready": len(after), "Pending": 1, "Failed": 0}

    bindings = json.loads(unet(tmp_path, "show", "bindings", str(repo), "--manager", "ovn",
                               "--tenant", "acme", "--format", "json").stdout)
    web1 = next(w for w in bindings["workloads"] if w["name"] == "web-1")
    nic = web1["attachments"][0]
    assert after["ComputeInstance/acme/web-1"]["allocated"] == {
        "ipv4[0]": nic["ipv4"]["address"], "ipv6[0]": nic["ipv6"]["address"],
        "mac[0]": nic["mac"]}
    assert after["ExternalIP/acme/web-1-public"]["allocated"] == {
        "address": web1["externalIPs"][0]["address"]}
    assert after["Subnet/acme/web"]["allocated"] == {"segmentId": str(nic["segmentId"])}
    assert set(after["Cluster/acme/k1"]["allocated"]) >= {"apiVip", "ingressVip"}

    shown = unet(tmp_path, "show", "status", str(repo), "--manager", "ovn", "--tenant",
                 "acme").stdout
    assert "globex" not in shown and "initech" not in shown, "another tenant's data"
    assert "globex" not in json.dumps(document) and "initech" not in json.dumps(document)
    assert "ComputeInstance acme/web-1: Ready" in shown
    assert unet(tmp_path, "show", "status", str(repo), "--tenant", "nobody").returncode == 1


def test_a_changed_manifest_is_pending_and_one_the_plan_cannot_realise_failed(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    assert apply(tmp_path, repo).returncode == 0
    taken = by_ref(status(tmp_path, repo))["ComputeInstance/acme/web-1"]["allocated"]["ipv4[0]"]
    edit_text(repo, "tenants/acme/compute.yaml",
              "  name: web-2\nspec:\n  networkAttachments:\n    - subnet: web\n"
              "      securityGroups: [web]\n",
              "  name: web-2\nspec:\n  networkAttachments:\n    - subnet: web\n"
              f"      securityGroups: [web]\n      ipAddress: {taken}\n")
    edit(repo, "tenants/acme/security-groups.yaml", "portFrom: 443\n      portTo: 443",
         "portFrom: 8443\n      portTo: 8443")
    document = by_ref(status(tmp_path, repo))
    changed = document["SecurityGroup/acme/web"]["condition"]
    assert changed["type"] == "Pending" and changed["reason"] == "UPDATE", changed
    failed = document["ComputeInstance/acme/web-2"]["condition"]
    assert failed["type"] == "Failed" and failed["reason"] == "ADDRESS_CONFLICT"
    assert failed["message"].startswith("tenants/acme/compute.yaml:")
    assert f"{taken} is held by ComputeInstance/acme/web-1" in failed["message"]
    assert document["ComputeInstance/acme/web-1"]["condition"]["type"] == "Ready"
    assert document["Subnet/globex/app"]["condition"]["type"] == "Ready"


def test_a_peering_whose_other_side_is_not_declared_is_pending_not_ready(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """Until the peer's owners declare their side, nothing is routed (PEERING_PENDING):
    the tenant's status says so, as for an attachment waiting for its target, not Ready."""
    (repo / "tenants" / "globex" / "peering.yaml").unlink()
    assert apply(tmp_path, repo).returncode == 0
    document = by_ref(status(tmp_path, repo, "--tenant", "initech"))
    condition = document["VirtualNetworkPeering/initech/mirror-globex"]["condition"]
    assert condition["type"] == "Pending" and condition["reason"] == "PEERING_PENDING", \
        condition
    assert "nothing is routed" in condition["message"]
    assert document["VirtualNetwork/initech/mirror"]["condition"]["type"] == "Ready"


def test_a_tenant_claiming_an_address_another_tenant_holds_learns_not_whose_it_is(
        lab: OvnLab, repo: Path, tmp_path: Path) -> None:
    """A fixed ExternalIP address in a shared pool that acme was allocated: initech's
    status says it is taken, never by which tenant's resource (else a tenant could map the
    pool's addresses to the other tenants' resources, one probe at a time)."""
    assert apply(tmp_path, repo).returncode == 0
    taken = by_ref(status(tmp_path, repo))["ExternalIP/acme/k1-api"]["allocated"]["address"]
    with (repo / "tenants" / "initech" / "external.yaml").open("a") as out:
        out.write("---\napiVersion: network.osac.io/v1alpha1\nkind: ExternalIP\n"
                  f"metadata:\n  name: probe\nspec:\n  pool: public-a\n  address: {taken}\n")
    provider = by_ref(status(tmp_path, repo))["ExternalIP/initech/probe"]["condition"]
    assert provider["reason"] == "ADDRESS_CONFLICT"
    assert "ExternalIP/acme/k1-api" in provider["message"], "the full view names the holder"
    document = status(tmp_path, repo, "--tenant", "initech")
    failed = by_ref(document)["ExternalIP/initech/probe"]["condition"]
    assert failed["type"] == "Failed" and failed["reason"] == "ADDRESS_CONFLICT", failed
    assert f"{taken} is held by another tenant's ExternalIP" in failed["message"], failed
    shown = unet(tmp_path, "show", "status", str(repo), "--manager", "ovn", "--tenant",
                 "initech").stdout
    for text in (json.dumps(document), shown):
        assert "acme" not in text and "k1-api" not in text, "another tenant's data"


def test_a_manifest_whose_objects_a_manager_could_not_read_is_not_ready(
        lab: OvnLab, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hosting clusters cannot be read: a plan leaves the kubernetes manager's objects
    out (BACKEND_UNOBSERVED), so the status of what has objects there is unknown, not
    Ready; what lives on the fabric alone is Ready."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert apply(tmp_path, repo).returncode == 0
    result = unet(tmp_path, "show", "status", str(repo), "--tenant", "acme", "--format",
                  "json")
    assert result.returncode == 0, result.stderr
    document = by_ref(json.loads(result.stdout))
    web = document["Subnet/acme/web"]["condition"]  # its ClusterUserDefinedNetworks
    assert web["type"] == "Pending" and web["reason"] == "BACKEND_UNOBSERVED", web
    assert "'kubernetes'" in web["message"] and document["Subnet/acme/web"]["revision"] is None
    assert document["ComputeInstance/acme/web-1"]["condition"]["type"] == "Ready"
    assert status(tmp_path, repo, "--tenant", "acme")["counts"]["Pending"] == 1, \
        "--manager ovn: the fabric alone is read, and it is what the repo asks"


def test_what_a_tenant_reads_of_a_message_names_no_other_tenant() -> None:
    from unet.reconciler.status import own_words

    tenants = {"acme", "globex", "initech"}
    assert own_words("203.0.113.10 is held by ExternalIP/acme/k1-api; never moves",
                     "initech", tenants) == \
        "203.0.113.10 is held by another tenant's ExternalIP; never moves"
    assert own_words("globex/db-1/0 (ComputeInstance globex/db-1) gets tcp/22 from "
                     "192.0.2.0/24 (tenants/globex/compute.yaml:12)", "acme", tenants) == \
        "another tenant's NIC (another tenant's ComputeInstance) gets tcp/22 from " \
        "192.0.2.0/24 (another tenant's file)"
    own = ("acme/web-1/0 (ComputeInstance acme/web-1) is held by Subnet/acme/web in "
           "tenants/acme/network.yaml:3")
    assert own_words(own, "acme", tenants) == own, "its own names stay"


@pytest.mark.parametrize("command", [["status"], ["usage", "--offline"],
                                     ["bindings", "--offline"]])
def test_a_tenants_view_of_an_invalid_repo_shows_its_own_errors_alone(
        example_copy: Path, tmp_path: Path, command: list[str]) -> None:
    """The repo has errors, so there is no view: the tenant is told its own and how many
    others there are, never another tenant's files, lines or messages."""
    edit_text(example_copy, "tenants/globex/compute.yaml", "  name: backup-1\n",
              "  name: backup-1\n  labels: {x: 1}\n")  # a shape error of globex's
    edit(example_copy, "tenants/initech/compute.yaml", "- subnet: build", "- subnet: bulid")
    for fmt in ("text", "json"):
        result = unet(tmp_path, "show", *command, str(example_copy), "--tenant", "initech",
                      "--format", fmt)
        assert result.returncode == 1
        said = result.stdout + result.stderr
        assert "tenants/initech/compute.yaml" in said and "REF_NOT_FOUND" in said, said
        for other in ("globex", "acme", "backup-1", "web-3", "TARGET_PENDING"):
            assert other not in said, (fmt, other, said)
        assert "1 more error outside tenants/initech/" in result.stderr, result.stderr
        assert "✖ 2 errors" in said or '"valid": false' in said, "never 'valid'"
    whole = unet(tmp_path, "show", *command, str(example_copy), "--format", "json")
    assert {d["file"].split("/")[1] for d in json.loads(whole.stdout)["diagnostics"]
            if d["severity"] == "error"} == {"globex", "initech"}, "the provider's view"


def test_an_apply_that_fails_part_way_names_the_manifests_it_left_pending(
        make_env: Any) -> None:  # noqa: F811  (the fixture imported above)
    env = make_env(**{"hosting-a1": {"finalizer_seconds": 600}})
    assert env.apply()[0] == 0
    edit_text(env.repo, "provider/managers.yaml", "    namespaceLabel: network.osac.io/tenant",
              "    namespaceLabel: network.osac.io/tenant\n    deleteTimeoutSeconds: 0.3")
    _set_mtu(env.repo, 1400)
    code, _out, err = env.apply()
    assert code == 1
    assert "unet: left pending: Subnet/acme/web\n" in err
    code, out, err = env.unet("show", "status", str(env.repo), "--manager", "kubernetes",
                              "--tenant", "acme", "--format", "json")
    assert code == 0, err
    web = by_ref(json.loads(out))["Subnet/acme/web"]["condition"]
    assert web["type"] == "Pending" and "ClusterUserDefinedNetwork" in web["message"], web


def test_the_daemon_records_the_manifests_a_failed_apply_left_pending(
        make_env: Any, tmp_path: Path) -> None:  # noqa: F811  (the fixture imported above)
    from unet.reconciler.daemon.history import read_history
    from unet.reconciler.daemon.loop import Options, Reconciler

    env = make_env(**{"hosting-a1": {"finalizer_seconds": 600}})
    state = tmp_path / "state"
    reconciler = Reconciler(Options(path=env.repo, managers=["kubernetes"], state_dir=state,
                                    workdir=env.repo, parse_cache=False))
    assert reconciler.run_once().result == "applied"
    edit_text(env.repo, "provider/managers.yaml", "    namespaceLabel: network.osac.io/tenant",
              "    namespaceLabel: network.osac.io/tenant\n    deleteTimeoutSeconds: 0.3")
    _set_mtu(env.repo, 1400)
    run = reconciler.run_once()
    assert run.result == "error" and run.pending == ["Subnet/acme/web"], run.message
    assert "left pending: Subnet/acme/web; the next run tries again" in run.message
    assert read_history(state)[-1]["pending"] == ["Subnet/acme/web"]


def _published(env: Any, cluster: str, namespace: str) -> dict[str, Any] | None:
    found = [o for o in env.clusters[cluster].objects("configmaps")
             if o["metadata"]["name"] == "unet-status.kubernetes"
             and o["metadata"]["namespace"] == namespace]
    return json.loads(found[0]["data"]["status.json"]) if found else None


def test_an_apply_publishes_each_tenants_status_beside_its_bindings(
        make_env: Any) -> None:  # noqa: F811  (the fixture imported above)
    env = make_env(**{"hosting-a1": {"finalizer_seconds": 600}})
    assert env.apply()[0] == 0
    for cluster in ("hosting-a1", "hosting-a2"):
        acme = _published(env, cluster, "acme")
        assert acme is not None and acme["tenant"] == "acme"
        assert {m["tenant"] for m in acme["manifests"]} == {"acme"}, "acme's alone"
        assert "initech" not in json.dumps(acme) and "globex" not in json.dumps(acme)
        web = by_ref(acme)["Subnet/acme/web"]
        assert web["condition"]["type"] == "Ready" and web["allocated"]["segmentId"]
        assert by_ref(acme)["ExternalIPAttachment/acme/web-3-public"]["condition"][
            "reason"] == "TARGET_PENDING"
        initech = _published(env, cluster, "initech")
        assert initech is not None and {m["tenant"] for m in initech["manifests"]} == {
            "initech"}
        meta = env.clusters[cluster].objects("configmaps")
        assert any(o["metadata"].get("labels", {}).get("network.osac.io/installation")
                   == "example" for o in meta if o["metadata"]["name"].startswith("unet-st"))
    assert env.plan()[0] == 0 and "No changes" in env.plan()[1], "never drift"

    edit_text(env.repo, "provider/managers.yaml", "    namespaceLabel: network.osac.io/tenant",
              "    namespaceLabel: network.osac.io/tenant\n    deleteTimeoutSeconds: 0.3")
    _set_mtu(env.repo, 1400)
    assert env.apply()[0] == 1
    web = by_ref(_published(env, "hosting-a2", "acme") or {})["Subnet/acme/web"]
    assert web["condition"]["type"] == "Pending" and web["condition"]["reason"] == \
        "APPLY_FAILED", web
    assert "still being deleted" in web["condition"]["message"]


def test_a_status_configmap_that_is_not_ours_is_never_overwritten(
        make_env: Any) -> None:  # noqa: F811  (the fixture imported above)
    """Another installation's status of acme (or anyone's ConfigMap of that name) stays as
    it is: the apply says it cannot publish there, and publishes everywhere else."""
    env = make_env()
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"status.json": "theirs"},
              "metadata": {"name": "unet-status.kubernetes", "namespace": "acme",
                           "labels": {"network.osac.io/managed-by": "unet",
                                      "network.osac.io/installation": "staging"}}}
    env.clusters["hosting-a1"].put(theirs)
    code, out, err = env.apply()
    assert code == 0, err
    kept = env.clusters["hosting-a1"].get("configmaps", "unet-status.kubernetes", "acme")
    assert kept is not None and kept["data"] == {"status.json": "theirs"}, kept
    assert kept["metadata"]["labels"]["network.osac.io/installation"] == "staging"
    assert "the status of tenant acme is not published on cluster hosting-a1" in out + err
    assert _published(env, "hosting-a2", "acme") is not None
    assert _published(env, "hosting-a1", "initech") is not None
