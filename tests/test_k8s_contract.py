"""Contract tests of the kubernetes manager: the real client against recorded API behaviour.

No Kubernetes API server can run on the machines these tests run on, so each hosting
cluster here is `tests/k8s_fixtures/server.py`: a small HTTP server on 127.0.0.1 that
answers like an API server (recorded Status bodies, server-side apply with field
ownership, CRD schema + CEL validation, finalizers, Leases). unet runs unchanged — the
command line in process, the kubernetes Python client, a generated kubeconfig — so
these tests exercise the same client code paths as against a cluster. They are not a
substitute for one: tests/test_k8s_live.py runs the same flows against a real API
server when UNET_TEST_KUBECONFIG is set (docs/kubernetes.md).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from unet.managers.kubernetes import KubernetesConfig, KubernetesManager, client
from unet.managers.kubernetes.lease import Lease, holder_identity
from unet.managers.sdk import BackendLocked
from unet.reconciler.cli import main

from .k8s_fixtures.server import USER, FakeCluster, refused_url, write_kubeconfig
from .test_plan_golden import append_doc, copy_example, edit_docs, edit_text, find_doc
from .test_plan_truth import SUBNET_AAA

CUDNS, POOLS, ADVERTISEMENTS = "clusteruserdefinednetworks", "ipaddresspools", \
    "l2advertisements"
SUBNETS = ["unet.acme.db", "unet.acme.nodes", "unet.acme.web", "unet.initech.build"]
#: The CUDNs: the subnets' and the provider's services-a (its class has this k8sManager)
NETWORKS = ["unet-pn.services-a", *SUBNETS]


@dataclass
class Env:
    tmp: Path
    repo: Path
    kubeconfig: Path
    capsys: pytest.CaptureFixture[str]
    clusters: dict[str, FakeCluster]

    def point(self, **servers: str | None) -> None:
        """Rewrite the kubeconfig: context -> URL (None: leave the context out)."""
        urls = {name: c.url for name, c in self.clusters.items()}
        urls.update({k: v for k, v in servers.items() if v is not None})
        for name, url in servers.items():
            if url is None:
                urls.pop(name)
        write_kubeconfig(self.kubeconfig, urls)

    def unet(self, *argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        assert "Traceback" not in out + err and "internal error" not in err, err
        return code, out, err

    def plan(self, *extra: str) -> tuple[int, str, str]:
        return self.unet("plan", str(self.repo), "--manager", "kubernetes", *extra)

    def apply(self, *extra: str) -> tuple[int, str, str]:
        return self.unet("apply", str(self.repo), "--manager", "kubernetes", "--auto-approve",
                         *extra)

    def plan_json(self) -> dict[str, Any]:
        code, out, _ = self.plan("--format", "json")
        assert code == 0
        return json.loads(out)  # type: ignore[no-any-return]

    def names(self, cluster: str, plural: str) -> list[str]:
        return [o["metadata"]["name"] for o in self.clusters[cluster].objects(plural)]


#: A hosting cluster's namespaces: unet's, MetalLB's and the example's tenants'.
NAMESPACES = ("default", "unet-system", "metallb-system", "acme", "initech")


@contextlib.contextmanager
def _clusters(**options: dict[str, Any]) -> Iterator[dict[str, FakeCluster]]:
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(FakeCluster(
                   name, **{"namespaces": NAMESPACES, **options.get(name, {})}))
               for name in ("hosting-a1", "hosting-a2")}


@pytest.fixture
def make_env(tmp_path: Path, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """make_env(hosting_a2={...FakeCluster options}) -> Env with both clusters up."""
    stack = contextlib.ExitStack()

    def make(**options: dict[str, Any]) -> Env:
        clusters = stack.enter_context(_clusters(**options))
        kubeconfig = tmp_path / "kubeconfig"
        write_kubeconfig(kubeconfig, {n: c.url for n, c in clusters.items()})
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        monkeypatch.chdir(tmp_path)
        repo = copy_example(tmp_path / "repo")
        # The fabric records web-k1's addresses first (the embedded Northbound): a k8s
        # manager alone never publishes addresses no backend holds (ALLOCATION_UNRECORDED).
        assert main(["apply", str(repo), "--manager", "ovn", "--auto-approve"]) == 0
        capsys.readouterr()
        return Env(tmp_path, repo, kubeconfig, capsys, clusters)

    with stack:
        yield make


@pytest.fixture
def env(make_env: Any) -> Env:
    return make_env()  # type: ignore[no-any-return]


@pytest.fixture
def applied(env: Env) -> Env:
    code, _, err = env.apply()
    assert code == 0, err
    return env


# --- plan and apply --------------------------------------------------------------------------


def test_contract_policies_and_bindings_are_applied_and_kept(applied: Env) -> None:
    """The MultiNetworkPolicies and the bindings ConfigMap: written, read back without a
    change, an edit of a policy's rules is drift that the apply takes back, and a ConfigMap
    of that name that is not ours is never overwritten."""
    a1 = applied.clusters["hosting-a1"]
    policy = a1.get("multi-networkpolicies", "unet.web.web", "acme")
    assert policy is not None
    assert policy["metadata"]["annotations"]["k8s.v1.cni.cncf.io/policy-for"] == \
        "acme/unet.acme.web"
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["values"] == ["web-k1"]
    bindings = a1.get("configmaps", "unet-bindings.kubernetes", "acme")
    assert bindings is not None
    binding = json.loads(bindings["data"]["vm.web-k1.json"])
    assert binding["attachments"][0]["clusters"][0]["network"] == "unet.acme.web"
    assert applied.plan("--detailed-exitcode")[0] == 0, "read back exactly as written"

    a1.edit("multi-networkpolicies", "unet.web.web", lambda o: o["spec"].update(
        ingress=[{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]), namespace="acme")
    code, out, _ = applied.plan("--detailed-exitcode")
    assert code == 2 and "~ MultiNetworkPolicy unet.web.web in acme on cluster hosting-a1" in out
    assert "drift opens all traffic from 0.0.0.0/0 (anywhere) to acme/prod/web on hosting " \
           "cluster hosting-a1" in out
    code, out, err = applied.apply()
    assert code == 0 and "Apply complete: 0 created, 1 updated, 0 deleted" in out, err

    applied.clusters["hosting-a2"].remove("configmaps", "unet-bindings.kubernetes", "initech")
    applied.clusters["hosting-a2"].put({
        "apiVersion": "v1", "kind": "ConfigMap", "data": {"mine": "yes"},
        "metadata": {"name": "unet-bindings.kubernetes", "namespace": "initech"}})
    code, out, _ = applied.plan()
    assert code == 1 and "NAME_CONFLICT" in out
    assert "ConfigMap initech/unet-bindings.kubernetes on cluster hosting-a2" in out


def test_contract_plan_shows_objects_per_cluster_and_apply_writes_them(env: Env) -> None:
    code, out, _ = env.plan()
    assert code == 0
    for cluster in ("hosting-a1", "hosting-a2"):
        for kind in ("ClusterUserDefinedNetwork", "IPAddressPool", "L2Advertisement"):
            assert f"+ {kind} unet.acme.web on cluster {cluster}" in out
        assert f"  {cluster}: 0 of 4 subnets ready, 0 of 1 provider networks (not yet: " \
               "Subnet/acme/db," in out
    assert "Provider networks ready on every hosting cluster: 0 of 1" in out
    assert "Subnets ready on every hosting cluster: 0 of 4" in out
    assert env.names("hosting-a1", CUDNS) == []  # a plan writes nothing but its Lease

    code, out, err = env.apply()
    assert code == 0, err
    assert "Apply complete: 42 created, 0 updated, 0 deleted" in out
    assert "  hosting-a1: 4 of 4 subnets ready" in out
    assert "Subnets ready on every hosting cluster: 4 of 4" in out
    for name, cluster in env.clusters.items():
        assert env.names(name, CUDNS) == NETWORKS
        assert env.names(name, POOLS) == SUBNETS == env.names(name, ADVERTISEMENTS)
        web = cluster.get(CUDNS, "unet.acme.web")
        assert web is not None
        assert web["metadata"]["labels"] == {
            "network.osac.io/managed-by": "unet", "network.osac.io/installation": "example",
            "network.osac.io/manager": "kubernetes"}
        annotations = web["metadata"]["annotations"]
        assert annotations["network.osac.io/owner"] == "Subnet/acme/web"
        assert annotations["network.osac.io/key"] == \
            f"{name}/ClusterUserDefinedNetwork/unet.acme.web"
        assert json.loads(annotations["network.osac.io/meta"])[
            "unet:alloc:segment/acme/web"] == "1002"
        assert web["spec"]["network"]["localnet"]["vlan"]["access"]["id"] == 1002
        # written by server-side apply, one field manager
        assert [m["manager"] for m in web["metadata"]["managedFields"]] == ["unet"]
        assert {m for m, _ in cluster.requests if m in ("PATCH", "PUT", "POST")} <= {
            "PATCH", "PUT", "POST"}
        lease = cluster.get("leases", "unet-example", "unet-system")
        assert lease is not None and "holderIdentity" not in lease["spec"]  # released
        assert json.loads(lease["metadata"]["annotations"]["network.osac.io/applied"])[
            "kubernetes"]

    code, out, _ = env.plan("--detailed-exitcode")
    assert code == 0, out
    assert "No changes." in out and "Subnets ready on every hosting cluster: 4 of 4" in out
    code, out, _ = env.apply()  # idempotent
    assert code == 0 and "Apply complete" not in out


def test_contract_plan_json_carries_the_per_cluster_report(applied: Env) -> None:
    document = applied.plan_json()
    report = document["backend_report"]["kubernetes"]
    assert "  hosting-a2: 4 of 4 subnets ready, 1 of 1 provider networks" in report
    assert not document["has_changes"]


def test_contract_saved_plan_applies_and_then_is_stale(env: Env) -> None:
    plan = env.tmp / "plan.json"
    code, _, _ = env.plan("-o", str(plan))
    assert code == 0
    code, out, err = env.unet("apply", str(plan), "--auto-approve")
    assert code == 0, err
    assert "Apply complete: 42 created" in out
    code, _, err = env.unet("apply", str(plan), "--auto-approve")
    assert code == 1 and "the backends changed since the plan was made" in err


def test_contract_list_is_paged(applied: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client, "LIST_PAGE", 3)
    cluster = applied.clusters["hosting-a1"]
    cluster.requests.clear()
    code, out, _ = applied.plan("--detailed-exitcode")
    assert code == 0 and "No changes." in out
    lists = [p for m, p in cluster.requests
             if m == "GET" and p == "/apis/k8s.ovn.org/v1/clusteruserdefinednetworks"]
    assert len(lists) == 2  # 4 objects, 3 a page


# --- drift -----------------------------------------------------------------------------------


def test_contract_drift_is_detected_and_repaired(applied: Env) -> None:
    a1, a2 = applied.clusters["hosting-a1"], applied.clusters["hosting-a2"]
    a1.edit(POOLS, "unet.acme.web", lambda o: o["spec"].update(addresses=["10.10.1.0/24"]),
            namespace="metallb-system")
    a1.edit(CUDNS, "unet.acme.db", lambda o: o["spec"].update(
        namespaceSelector={"matchLabels": {"network.osac.io/tenant": "globex"}}))
    a2.remove(CUDNS, "unet.acme.nodes")
    code, out, _ = applied.plan("--detailed-exitcode")
    assert code == 2
    drift = out[out.index("Drift:"):]
    assert "Drift: 3 backend objects changed outside unet" in drift
    assert "~ IPAddressPool unet.acme.web on cluster hosting-a1" in drift
    assert '~ spec.addresses.0: "10.10.1.0/24" → "10.10.1.240/28"' in drift
    assert '~ spec.namespaceSelector.matchLabels.network.osac.io/tenant: "globex" → "acme"' \
        in drift
    assert "~ ClusterUserDefinedNetwork unet.acme.db on cluster hosting-a1" in drift
    assert "+ ClusterUserDefinedNetwork unet.acme.nodes on cluster hosting-a2" in drift
    assert "hosting-a2: 3 of 4 subnets ready, 1 of 1 provider networks (not yet: " \
           "Subnet/acme/nodes)" in out

    code, out, err = applied.apply()
    assert code == 0, err
    assert "Apply complete: 1 created, 2 updated, 0 deleted" in out
    pool = a1.get(POOLS, "unet.acme.web", "metallb-system")
    assert pool is not None and pool["spec"]["addresses"] == ["10.10.1.240/28"]
    # forced: the field is unet's again; the other manager keeps nothing of it
    owners = {m["manager"]: m["fieldsV1"] for m in pool["metadata"]["managedFields"]}
    assert "f:addresses" in owners["unet"]["f:spec"]
    assert "kubectl-edit" not in owners
    code, out, _ = applied.plan("--detailed-exitcode")
    assert code == 0 and "No changes." in out


def test_contract_fields_others_own_are_left_alone(applied: Env) -> None:
    """A field unet does not render (set by someone else) is neither drift nor removed."""
    a1 = applied.clusters["hosting-a1"]
    a1.edit(POOLS, "unet.acme.web", lambda o: o["spec"].update(
        serviceAllocation={"priority": 10}), namespace="metallb-system")
    code, out, _ = applied.plan("--detailed-exitcode")
    assert code == 0 and "No changes." in out
    a1.edit(POOLS, "unet.acme.web", lambda o: o["spec"].update(addresses=["10.10.1.0/24"]),
            namespace="metallb-system")
    code, _, err = applied.apply()
    assert code == 0, err
    pool = a1.get(POOLS, "unet.acme.web", "metallb-system")
    assert pool is not None
    assert pool["spec"]["serviceAllocation"] == {"priority": 10}
    assert pool["spec"]["addresses"] == ["10.10.1.240/28"]


# --- replace: the CUDN's network is immutable ------------------------------------------------


def _set_mtu(repo: Path, mtu: int) -> None:
    def change(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "Subnet", "web")["spec"]["mtu"] = mtu

    edit_docs(repo, "tenants/acme/network.yaml", change)


def test_contract_changed_localnet_is_replaced_after_the_finalizer(make_env: Any) -> None:
    env = make_env(**{"hosting-a1": {"finalizer_seconds": 0.4}})
    assert env.apply()[0] == 0
    old_uid = env.clusters["hosting-a1"].get(CUDNS, "unet.acme.web")["metadata"]["uid"]
    _set_mtu(env.repo, 1400)
    code, out, _ = env.plan()
    assert code == 0
    assert "-/+ ClusterUserDefinedNetwork unet.acme.web on cluster hosting-a1" in out
    code, out, err = env.apply()
    assert code == 0, err
    assert "Apply complete: 2 created, 2 updated, 2 deleted" in out  # bindings: the MTU
    new = env.clusters["hosting-a1"].get(CUDNS, "unet.acme.web")
    assert new["metadata"]["uid"] != old_uid
    assert new["spec"]["network"]["localnet"]["mtu"] == 1400
    assert env.plan("--detailed-exitcode")[0] == 0


def test_contract_replace_gives_up_on_a_stuck_finalizer(make_env: Any) -> None:
    env = make_env(**{"hosting-a1": {"finalizer_seconds": 600}})
    assert env.apply()[0] == 0
    edit_text(env.repo, "provider/managers.yaml", "    namespaceLabel: network.osac.io/tenant",
              "    namespaceLabel: network.osac.io/tenant\n    deleteTimeoutSeconds: 0.3")
    _set_mtu(env.repo, 1400)
    code, out, err = env.apply()
    assert code == 1
    assert "ClusterUserDefinedNetwork unet.acme.web on cluster hosting-a1 (context " \
           "hosting-a1) is still being deleted after 0.3 s (finalizers: " \
           "k8s.ovn.org/user-defined-network-protection)" in err
    assert "Apply complete: 1 created, 2 updated, 2 deleted" in out  # hosting-a2 replaced
    assert "hosting-a1: 3 of 4 subnets ready" in out


# --- prune: deletes only ours, only the object observed ------------------------------------


def _drop_subnet_build(repo: Path) -> None:
    def change(docs: list[dict[str, Any]]) -> None:
        docs.remove(find_doc(docs, "Subnet", "build"))

    edit_docs(repo, "tenants/initech/network.yaml", change)
    (repo / "tenants" / "initech" / "compute.yaml").unlink()  # its VMs sit on it


def test_contract_prune_deletes_only_ours(applied: Env) -> None:
    a1 = applied.clusters["hosting-a1"]
    foreign = {"apiVersion": "k8s.ovn.org/v1", "kind": "ClusterUserDefinedNetwork",
               "metadata": {"name": "team-net"},
               "spec": {"namespaceSelector": {}, "network": {"topology": "Localnet",
                        "localnet": {"role": "Secondary", "physicalNetworkName": "p",
                                     "ipam": {"mode": "Disabled"}}}}}
    a1.put(foreign)
    _drop_subnet_build(applied.repo)
    code, out, _ = applied.plan()
    assert code == 0
    assert "- ClusterUserDefinedNetwork unet.initech.build on cluster hosting-a1" in out
    assert "team-net" not in out
    code, out, err = applied.apply()
    assert code == 0, err
    assert "Apply complete: 0 created, 0 updated, 10 deleted" in out
    assert applied.names("hosting-a1", CUDNS) == ["team-net", *NETWORKS[:4]]
    assert applied.names("hosting-a2", POOLS) == SUBNETS[:3]


def test_contract_delete_names_the_observed_uid(applied: Env) -> None:
    """An object deleted and recreated between observe and delete is not deleted."""
    from unet.reconciler.diff import Action, Change
    from unet.reconciler.order import Step

    a1 = applied.clusters["hosting-a1"]
    manager = KubernetesManager("kubernetes", KubernetesConfig.model_validate({
        "clusters": [{"name": "hosting-a1", "context": "hosting-a1"}]}), "example")
    with manager.connect(applied.tmp) as session, session.lock(5, print):
        observation = session.observe()
        target = next(o for o in observation.objects
                      if o.key == "hosting-a1/ClusterUserDefinedNetwork/unet.initech.build")
        served = a1.get(CUDNS, "unet.initech.build")
        a1.remove(CUDNS, "unet.initech.build")
        for server_field in ("uid", "resourceVersion", "managedFields", "creationTimestamp"):
            served["metadata"].pop(server_field)
        a1.put(served)
        change = Change(target.uid, target, None, Action.DELETE, "no longer in the repo")
        outcome = session.apply(observation, [[Step(Action.DELETE, target.uid)]],
                                {target.uid: change},
                                lambda index, waves, steps: lambda done, total: None)
    assert outcome.counts["delete"] == 0
    assert outcome.failures[target.uid] == (
        "ClusterUserDefinedNetwork unet.initech.build on cluster hosting-a1 (context "
        "hosting-a1) is no longer the object that was observed (its UID changed); not "
        "deleted — plan again")
    assert a1.get(CUDNS, "unet.initech.build") is not None


# --- bad input -------------------------------------------------------------------------------


def unobserved(out: str, *why: str) -> None:
    """The plan failed with BACKEND_UNOBSERVED for the kubernetes manager, saying `why`, and
    planned none of its objects (it cannot tell which exist)."""
    assert "error BACKEND_UNOBSERVED provider/managers.yaml:" in out, out
    assert "NetworkManager 'kubernetes' could not read its backend" in out
    assert "plan the others alone: --manager ovn" in out
    for words in why:
        assert words in out, (words, out)
    changes = [line for line in out.splitlines() if line.lstrip().startswith(("+ ", "~ "))]
    assert not [line for line in changes if " on cluster hosting-" in line], changes
    assert "The plan has errors (see Diagnostics): it cannot be applied." in out


def test_contract_an_unreachable_cluster_fails_the_plan_and_nothing_is_applied(
        env: Env) -> None:
    """As Terraform's refresh: a backend that cannot be read is not planned as empty (its
    objects all 'to create'); the plan fails and names the manager to leave out."""
    env.point(**{"hosting-a2": refused_url()})
    code, out, _ = env.plan("--detailed-exitcode")
    assert code == 1
    unobserved(out, "cluster hosting-a2 (context hosting-a2) is unreachable: cannot connect "
                    "to http://127.0.0.1:", ": connection refused")
    assert "cannot be read: cluster hosting-a2 (context hosting-a2) is unreachable" in out
    plan = json.loads(env.plan("--format", "json")[1])
    assert plan["valid"] is False and plan["backend_changes"] == []

    code, out, err = env.apply()
    assert code == 1 and "the plan has errors; nothing was applied" in err
    assert env.names("hosting-a1", CUDNS) == [], "nothing applied, on any cluster"

    env.point()  # hosting-a2 is back
    code, out, err = env.apply()
    assert code == 0, err
    assert "Apply complete: 42 created" in out
    assert env.names("hosting-a2", CUDNS) == NETWORKS
    assert env.plan("--detailed-exitcode")[0] == 0


def test_contract_unknown_context(env: Env) -> None:
    env.point(**{"hosting-a2": None})
    code, out, _ = env.plan()
    assert code == 1
    unobserved(out, f"the kubeconfig context 'hosting-a2' of cluster hosting-a2 (context "
                    f"hosting-a2) is not in {env.kubeconfig} (contexts there: hosting-a1)")
    code, _, err = env.apply()
    assert code == 1 and "nothing was applied" in err
    assert env.names("hosting-a1", CUDNS) == []


def test_contract_missing_kubeconfig(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(env.tmp / "nowhere"))
    code, out, _ = env.plan()
    assert code == 1
    unobserved(out, f"its backend, so this plan cannot tell what exists there and leaves its "
                    f"changes out: cannot read the kubeconfig {env.tmp / 'nowhere'}")
    assert out.count("cannot read the kubeconfig") == 3, "once in the error, once per cluster"


@pytest.mark.parametrize("plain_404", [False, True], ids=["status-404", "plain-404"])
def test_contract_missing_crd_names_the_crd(make_env: Any, plain_404: bool) -> None:
    env = make_env(**{"hosting-a2": {"kinds": (CUDNS,), "plain_404": plain_404}})
    code, out, _ = env.plan()
    assert code == 0
    message = ("the CRD ipaddresspools.metallb.io (IPAddressPool, metallb.io/v1beta1) is not "
               "installed on cluster hosting-a2 (context hosting-a2): install MetalLB there "
               "first")
    assert f"warning: {message}" in out
    assert "l2advertisements.metallb.io (L2Advertisement" in out
    code, out, err = env.apply()
    assert code == 1
    assert message in err
    assert env.names("hosting-a2", CUDNS) == NETWORKS  # what can be applied, is
    assert env.names("hosting-a1", POOLS) == SUBNETS
    assert "hosting-a2: 0 of 4 subnets ready" in out


def test_contract_missing_cudn_crd(make_env: Any) -> None:
    env = make_env(**{"hosting-a1": {"kinds": (POOLS, ADVERTISEMENTS)}})
    code, out, _ = env.plan()
    assert code == 0
    assert "the CRD clusteruserdefinednetworks.k8s.ovn.org (ClusterUserDefinedNetwork, " \
           "k8s.ovn.org/v1) is not installed on cluster hosting-a1 (context hosting-a1): " \
           "install OVN-Kubernetes with user-defined networks" in out


def test_contract_name_conflict_is_never_overwritten(env: Env) -> None:
    a1 = env.clusters["hosting-a1"]
    theirs = {"apiVersion": "k8s.ovn.org/v1", "kind": "ClusterUserDefinedNetwork",
              "metadata": {"name": "unet.acme.web", "labels": {"team": "storage"}},
              "spec": {"namespaceSelector": {"matchLabels": {"team": "storage"}},
                       "network": {"topology": "Localnet", "localnet": {
                           "role": "Secondary", "physicalNetworkName": "physnet-storage",
                           "ipam": {"mode": "Disabled"}}}}}
    a1.put(theirs)
    other_installation = {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
                          "metadata": {"name": "unet.acme.db", "namespace": "metallb-system",
                                       "labels": {"network.osac.io/managed-by": "unet",
                                                  "network.osac.io/installation": "staging",
                                                  "network.osac.io/manager": "kubernetes"}},
                          "spec": {"addresses": ["192.0.2.0/28"]}}
    env.clusters["hosting-a2"].put(other_installation)
    code, out, _ = env.plan()
    assert code == 1
    assert ("error NAME_CONFLICT: ClusterUserDefinedNetwork unet.acme.web on cluster "
            "hosting-a1 (for Subnet/acme/web) already exists and is not managed by unet (it "
            "lacks the label network.osac.io/managed-by=unet); unet never overwrites it") in out
    assert ("IPAddressPool metallb-system/unet.acme.db on cluster hosting-a2 (for "
            "Subnet/acme/db) already exists and is managed by unet installation 'staging'"
            ) in out
    assert "unet import" not in out, "the kubernetes manager adopts nothing: not the advice"
    code, _, err = env.apply()
    assert code == 1 and "nothing was applied" in err
    assert a1.get(CUDNS, "unet.acme.web")["spec"] == theirs["spec"]
    assert env.names("hosting-a1", POOLS) == []
    code, out, _ = env.plan("--show-unmanaged")
    assert "hosting-a1/ClusterUserDefinedNetwork/unet.acme.web (not managed by unet" in out


def test_contract_object_that_appears_after_the_plan_is_not_overwritten(env: Env) -> None:
    plan = env.tmp / "plan.json"
    assert env.plan("-o", str(plan))[0] == 0
    a1 = env.clusters["hosting-a1"]
    theirs = {"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
              "metadata": {"name": "unet.acme.web", "namespace": "metallb-system"},
              "spec": {"addresses": ["198.51.100.0/28"]}}
    a1.put(theirs)
    # The saved plan is made again before anything is applied: the name is taken now.
    code, out, err = env.unet("apply", str(plan), "--auto-approve")
    assert code == 1
    assert "NAME_CONFLICT" in out
    assert "IPAddressPool metallb-system/unet.acme.web on cluster hosting-a1 (for " \
           "Subnet/acme/web) already exists and is not managed by unet" in out
    assert "nothing was applied" in err
    assert a1.get(POOLS, "unet.acme.web", "metallb-system")["spec"]["addresses"] == \
        ["198.51.100.0/28"]
    assert env.names("hosting-a2", CUDNS) == [], "nothing applied anywhere"


def test_contract_rbac_denial_names_verb_and_resource(make_env: Any) -> None:
    env = make_env()
    env.clusters["hosting-a1"].deny.add(("patch", POOLS))
    code, out, err = env.apply()
    assert code == 1
    assert "hosting-a1: 0 of 4 subnets ready" in out and "hosting-a2: 4 of 4" in out
    assert ("RBAC: the credentials of cluster hosting-a1 (context hosting-a1) may not patch "
            "ipaddresspools.metallb.io unet.acme.db in namespace metallb-system (403 "
            f'Forbidden: ipaddresspools.metallb.io "unet.acme.db" is forbidden: User "{USER}" '
            'cannot patch resource "ipaddresspools" in API group "metallb.io" in the namespace'
            ' "metallb-system"); grant the verb \'patch\' on resource \'ipaddresspools\' in '
            "API group 'metallb.io'") in err
    assert "not tried: it needs hosting-a1/IPAddressPool/metallb-system/unet.acme.db" in err
    assert env.names("hosting-a1", CUDNS) == NETWORKS
    assert env.names("hosting-a1", POOLS) == []
    assert env.names("hosting-a2", POOLS) == SUBNETS


def test_contract_rbac_denial_on_list_and_on_the_lease(make_env: Any) -> None:
    env = make_env()
    env.clusters["hosting-a1"].deny.add(("list", CUDNS))
    env.clusters["hosting-a2"].deny.add(("create", "leases"))
    code, out, _ = env.plan()
    assert code == 1
    unobserved(out, "RBAC: the credentials of cluster hosting-a1 (context hosting-a1) may not "
                    "list clusteruserdefinednetworks.k8s.ovn.org (cluster-wide) (403 Forbidden: "
                    f'clusteruserdefinednetworks.k8s.ovn.org is forbidden: User "{USER}" cannot '
                    'list resource "clusteruserdefinednetworks" in API group "k8s.ovn.org" at '
                    "the cluster scope)",
               "RBAC: the credentials of cluster hosting-a2 (context hosting-a2) may not "
               "create leases.coordination.k8s.io unet-example in namespace unet-system")


def test_contract_credentials_refused(env: Env) -> None:
    write_kubeconfig(env.kubeconfig, {n: c.url for n, c in env.clusters.items()},
                     token="wrong")
    code, out, _ = env.plan()
    assert code == 1
    unobserved(out, "the API server of cluster hosting-a1 (context hosting-a1) refused the "
                    "credentials (401 Unauthorized): Unauthorized")


def test_contract_lease_namespace_missing(make_env: Any) -> None:
    env = make_env(**{"hosting-a1": {"namespaces": ("metallb-system",)}})
    code, out, _ = env.plan()
    assert code == 1
    unobserved(out, "the Lease namespace unet-system does not exist on cluster hosting-a1 "
                    "(context hosting-a1): create it (kubectl create namespace unet-system) or "
                    "set leaseNamespace in the manager's config")


# --- the Lease -------------------------------------------------------------------------------


def _lease(holder: str, renewed: datetime, duration: int = 30) -> dict[str, Any]:
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "unet-example", "namespace": "unet-system"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 3}}


def test_contract_a_held_lease_makes_a_second_run_wait_then_fail(env: Env) -> None:
    env.clusters["hosting-a2"].put(_lease("build-7 pid 4242", datetime.now(UTC)))
    started = time.monotonic()
    code, _, err = env.apply("--lock-timeout", "0.6")
    assert code == 1
    assert time.monotonic() - started >= 0.6
    assert ("unet: another unet run holds the Lease unet-system/unet-example on cluster "
            "hosting-a2 (context hosting-a2): build-7 pid 4242") in err
    assert "raise --lock-timeout" in err
    assert ("unet: waiting for the Lease unet-system/unet-example on cluster hosting-a2 "
            "(context hosting-a2) held by build-7 pid 4242") in err, "said at once"
    assert env.names("hosting-a1", CUDNS) == []  # nothing applied anywhere
    a1_lease = env.clusters["hosting-a1"].get("leases", "unet-example", "unet-system")
    assert "holderIdentity" not in a1_lease["spec"]  # the one it had taken, it gave back


def test_contract_an_expired_lease_is_taken_over(env: Env) -> None:
    env.clusters["hosting-a1"].put(_lease("crashed-host pid 1",
                                          datetime.now(UTC) - timedelta(minutes=10)))
    code, _, err = env.apply("--lock-timeout", "2")
    assert code == 0, err
    lease = env.clusters["hosting-a1"].get("leases", "unet-example", "unet-system")
    assert lease["spec"]["leaseTransitions"] == 4


def test_contract_lease_is_renewed_while_held_and_released(env: Env) -> None:
    manager = KubernetesManager("kubernetes", KubernetesConfig.model_validate({
        "clusters": [{"name": "hosting-a1", "context": "hosting-a1"}],
        "leaseDurationSeconds": 2}), "example")
    a1 = env.clusters["hosting-a1"]
    with manager.connect(env.tmp) as session, session.lock(5, print):
        first = a1.get("leases", "unet-example", "unet-system")["spec"]
        assert first["holderIdentity"] == holder_identity()
        assert first["leaseDurationSeconds"] == 2
        deadline = time.monotonic() + 5
        while a1.get("leases", "unet-example", "unet-system")["spec"]["renewTime"] == \
                first["renewTime"]:
            assert time.monotonic() < deadline, "the Lease was not renewed"
            time.sleep(0.05)
        # a second run (another holder) cannot take it while it is renewed
        other = Lease(session.clusters["hosting-a1"], "unet-system", "unet-example", 2,
                      identity="other-host pid 9")
        with pytest.raises(BackendLocked, match="holds the Lease unet-system/unet-example"):
            other.acquire(1.0)
    released = a1.get("leases", "unet-example", "unet-system")["spec"]
    assert "holderIdentity" not in released


# --- with the OVN fabric: one segment allocation, both managers ----------------------------


def test_contract_ovn_and_kubernetes_share_the_segment_and_fail_apart(env: Env) -> None:
    """Both managers: the CUDN's VLAN id is the OVN localnet port's tag; an unreachable
    cluster stops the apply of both; the fabric alone is planned with --manager ovn."""
    from unet.managers.ovn.manager import OvnConfig, OvnManager

    env.point(**{"hosting-a2": refused_url()})
    code, out, err = env.unet("apply", str(env.repo), "--auto-approve")
    assert code == 1 and "nothing was applied" in err
    unobserved(out, "hosting-a2 (context hosting-a2) is unreachable")
    assert env.names("hosting-a1", CUDNS) == []
    code, out, _ = env.unet("plan", str(env.repo), "--manager", "ovn", "--detailed-exitcode")
    assert code == 0, out  # the fabric alone is planned (and was applied by the fixture)

    env.point()
    code, out, err = env.unet("apply", str(env.repo), "--auto-approve")
    assert code == 0, err
    code, out, _ = env.unet("plan", str(env.repo), "--detailed-exitcode")
    assert code == 0 and "No changes." in out

    ovn = OvnManager("ovn", OvnConfig(), "example")
    with ovn.connect(env.repo) as session:
        tags = {o.owner: o.fields["tag_request"] for o in session.observe().objects
                if o.table == "Logical_Switch_Port" and o.key.endswith("/localnet")
                and o.owner.startswith(("Subnet/", "ProviderNetwork/"))}
    assert len(tags) == 6 and tags["ProviderNetwork/services-a"] == 1950  # storage-b: no CUDN
    for cluster in env.clusters.values():
        for cudn in cluster.objects(CUDNS):
            owner = cudn["metadata"]["annotations"]["network.osac.io/owner"]
            assert cudn["spec"]["network"]["localnet"]["vlan"]["access"]["id"] == tags[owner]


def test_contract_kubernetes_alone_reads_the_segments_ovn_allocated(env: Env) -> None:
    """--manager kubernetes alone still takes each subnet's segment id from OVN's row."""
    from unet.managers.ovn.manager import OvnConfig, OvnManager

    network = env.repo / "tenants" / "acme" / "network.yaml"
    code, _out, err = env.unet("apply", str(env.repo), "--manager", "ovn", "--auto-approve")
    assert code == 0, err
    # A new subnet, sorting first: allocated alone, it would take the lowest segment id.
    network.write_text(network.read_text() + SUBNET_AAA)
    code, _out, err = env.unet("apply", str(env.repo), "--manager", "ovn", "--auto-approve")
    assert code == 0, err
    code, _out, err = env.apply()  # --manager kubernetes only
    assert code == 0, err
    ovn = OvnManager("ovn", OvnConfig(), "example")
    with ovn.connect(env.repo) as session:
        tags = {o.owner: o.fields["tag_request"] for o in session.observe().objects
                if o.table == "Logical_Switch_Port" and o.key.endswith("/localnet")
                and o.owner.startswith(("Subnet/", "ProviderNetwork/"))}
    assert tags["Subnet/acme/aaa"] != min(tags.values())
    for cluster in env.clusters.values():
        for cudn in cluster.objects(CUDNS):
            owner = cudn["metadata"]["annotations"]["network.osac.io/owner"]
            assert cudn["spec"]["network"]["localnet"]["vlan"]["access"]["id"] == tags[owner]


def test_contract_a_k8s_manager_alone_never_publishes_unrecorded_addresses(env: Env) -> None:
    """A new VM on a hosting cluster gets its addresses from the fabric, which records
    them: applying the k8s manager without it would publish addresses nothing holds."""
    append_doc(env.repo, "tenants/acme/compute.yaml", {
        "apiVersion": "network.osac.io/v1alpha1", "kind": "ComputeInstance",
        "metadata": {"name": "web-k2"},
        "spec": {"hostingCluster": "hosting-a2",
                 "networkAttachments": [{"subnet": "web", "securityGroups": ["web"]}]}})
    append_doc(env.repo, "tenants/acme/network.yaml", {
        "apiVersion": "network.osac.io/v1alpha1", "kind": "Subnet", "metadata": {"name": "cache"},
        "spec": {"virtualNetwork": "prod", "ipv4Cidr": "10.10.3.0/24"}})
    code, out, _ = env.plan()
    assert code == 1
    assert "error ALLOCATION_UNRECORDED" in out and "ComputeInstance/acme/web-k2 has " \
        "values that no backend records yet" in out and "--manager ovn" in out
    assert "Subnet/acme/cache has values that no backend records yet (segment/acme/cache)" \
        in out
    code, _, err = env.apply()
    assert code == 1 and "unet-bindings.kubernetes" not in env.names("hosting-a2", "configmaps")
    code, out, err = env.unet("apply", str(env.repo), "--auto-approve")
    assert code == 0, err
    assert env.plan("--detailed-exitcode")[0] == 0


def test_contract_a_core_kind_is_named_as_the_api_names_it(make_env: Any) -> None:
    """ConfigMaps are core (group ""): messages name `configmaps`, not a CRD."""
    env = make_env()
    env.clusters["hosting-a1"].deny.add(("list", "configmaps"))
    code, out, _ = env.plan()
    assert code == 1
    assert "RBAC: the credentials of cluster hosting-a1 (context hosting-a1) may not list " \
           "configmaps (cluster-wide)" in out
    assert "configmaps." not in out and "CRD configmaps" not in out
