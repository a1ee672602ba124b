"""The kubernetes manager against a real Kubernetes API server (kind or a lab cluster).

Runs only when UNET_TEST_KUBECONFIG names a kubeconfig (UNET_TEST_CONTEXT picks the
context; default: its current context). The credentials must be allowed to create
CRDs, namespaces, service accounts and RBAC objects (kind's admin is). Set up with kind:

    kind create cluster --name unet
    kind get kubeconfig --name unet > /tmp/unet-kind.kubeconfig
    UNET_TEST_KUBECONFIG=/tmp/unet-kind.kubeconfig .venv/bin/pytest tests/test_k8s_live.py

The tests install the upstream CRDs from managers/kubernetes/crds/ when missing
(no OVN-Kubernetes or MetalLB controller is needed: only the API), create the
namespaces unet-system and metallb-system when missing, use an installation name of
their own, and delete every object they made. Without UNET_TEST_KUBECONFIG they are
skipped, with that reason in the pytest summary: no API server can run on the machines
the always-on suite runs on (tests/test_k8s_contract.py covers the same client code
against recorded API behaviour there).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from unet.reconciler.cli import main

from .k8s_fixtures.server import refused_url
from .support.crds import crd_dir
from .test_plan_golden import copy_example, edit_docs, edit_text, find_doc

KUBECONFIG = os.environ.get("UNET_TEST_KUBECONFIG")
pytestmark = pytest.mark.skipif(
    not KUBECONFIG,
    reason="UNET_TEST_KUBECONFIG is not set: no Kubernetes API server to run the live tests "
           "against (see docs/kubernetes.md for kind); the contract tests ran instead")

GROUPS = {"clusteruserdefinednetworks": ("k8s.ovn.org", "v1"),
          "ipaddresspools": ("metallb.io", "v1beta1"),
          "l2advertisements": ("metallb.io", "v1beta1"),
          "multi-networkpolicies": ("k8s.cni.cncf.io", "v1beta1")}
#: The example's tenants: their namespaces, labelled for them.
TENANTS = ("acme", "initech")
SUBNETS = ["unet.acme.db", "unet.acme.nodes", "unet.acme.web", "unet.initech.build"]
#: The CUDNs: the subnets' and the provider's services-a (its class has this k8sManager)
NETWORKS = ["unet-pn.services-a", *SUBNETS]


def _context() -> str:
    from kubernetes import config

    _, current = config.list_kube_config_contexts(KUBECONFIG)
    return os.environ.get("UNET_TEST_CONTEXT") or current["name"]


@pytest.fixture(scope="module")
def api() -> Iterator[Any]:
    """An admin client; the CRDs and namespaces unet needs are made sure of."""
    from kubernetes import client, config

    admin = config.new_client_from_config(config_file=KUBECONFIG, context=_context(),
                                          persist_config=False)
    extensions = client.ApiextensionsV1Api(admin)
    for path in sorted(crd_dir().glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        try:
            extensions.read_custom_resource_definition(crd["metadata"]["name"])
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
            extensions.create_custom_resource_definition(crd)
        _wait_established(extensions, crd["metadata"]["name"])
    core = client.CoreV1Api(admin)
    for namespace in ("unet-system", "metallb-system", *TENANTS):
        labels = {"network.osac.io/tenant": namespace} if namespace in TENANTS else {}
        try:
            core.read_namespace(namespace)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
            core.create_namespace({"metadata": {"name": namespace, "labels": labels}})
    yield admin
    admin.close()


def _wait_established(extensions: Any, name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        crd = extensions.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.5)
    raise AssertionError(f"the CRD {name} did not become Established")


class Live:
    def __init__(self, api: Any, tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from kubernetes import client

        self.api = api
        self.objects = client.CustomObjectsApi(api)
        self.tmp = tmp
        self.capsys = capsys
        self.installation = "live-" + secrets.token_hex(4)
        self.repo = copy_example(tmp / "repo")
        edit_text(self.repo, "unet.yaml", "installation: example",
                  f"installation: {self.installation}")
        self.set_clusters({"live": _context()})

    def set_clusters(self, clusters: dict[str, str]) -> None:
        def change(docs: list[dict[str, Any]]) -> None:
            config = find_doc(docs, "NetworkManager", "kubernetes")["spec"]["config"]
            config["clusters"] = [{"name": n, "context": c} for n, c in clusters.items()]

        def host(docs: list[dict[str, Any]]) -> None:  # web-k1 runs on the first cluster
            find_doc(docs, "ComputeInstance", "web-k1")["spec"]["hostingCluster"] = \
                next(iter(clusters))

        edit_docs(self.repo, "provider/managers.yaml", change)
        edit_docs(self.repo, "tenants/acme/compute.yaml", host)

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

    def ours(self, plural: str) -> list[dict[str, Any]]:
        group, version = GROUPS[plural]
        items = self.objects.list_cluster_custom_object(
            group, version, plural,
            label_selector=f"network.osac.io/installation={self.installation}")["items"]
        return sorted(items, key=lambda o: o["metadata"]["name"])

    def names(self, plural: str) -> list[str]:
        return [o["metadata"]["name"] for o in self.ours(plural)]

    def cleanup(self) -> None:
        from kubernetes import client

        for tenant in TENANTS:
            try:
                client.CoreV1Api(self.api).delete_namespaced_config_map(
                    "unet-bindings.kubernetes", tenant)
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise
        for plural in ("multi-networkpolicies", "l2advertisements", "ipaddresspools",
                       "clusteruserdefinednetworks"):
            group, version = GROUPS[plural]
            for item in self.objects.list_cluster_custom_object(group, version,
                                                                plural)["items"]:
                labels = item["metadata"].get("labels") or {}
                mine = labels.get("network.osac.io/installation") == self.installation
                stray = item["metadata"]["name"] == "unet.initech.build" and not labels
                if not (mine or stray):
                    continue
                namespace = item["metadata"].get("namespace")
                try:
                    if namespace:
                        self.objects.delete_namespaced_custom_object(
                            group, version, namespace, plural, item["metadata"]["name"])
                    else:
                        self.objects.delete_cluster_custom_object(
                            group, version, plural, item["metadata"]["name"])
                except client.exceptions.ApiException as exc:
                    if exc.status != 404:
                        raise
        try:
            client.CoordinationV1Api(self.api).delete_namespaced_lease(
                f"unet-{self.installation}", "unet-system")
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def live(api: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    monkeypatch.setenv("KUBECONFIG", str(KUBECONFIG))
    monkeypatch.chdir(tmp_path)
    state = Live(api, tmp_path, capsys)
    try:
        yield state
    finally:
        state.cleanup()


def test_live_apply_observe_drift_and_replace(live: Live) -> None:
    code, out, _ = live.plan()
    assert code == 0
    assert "+ ClusterUserDefinedNetwork unet.acme.web on cluster live" in out
    code, out, err = live.apply()
    assert code == 0, err
    assert "Apply complete: 22 created" in out
    assert "Subnets ready on every hosting cluster: 4 of 4" in out
    assert live.names("multi-networkpolicies") == [
        "unet-pn.services-a", "unet-pn.services-a.prod.web",
        "unet.build", "unet.db", "unet.nodes", "unet.web", "unet.web.web"]
    from kubernetes import client

    bindings = client.CoreV1Api(live.api).read_namespaced_config_map(
        "unet-bindings.kubernetes", "acme")
    assert "vm.web-k1.json" in bindings.data
    assert live.names("clusteruserdefinednetworks") == NETWORKS
    assert live.names("ipaddresspools") == SUBNETS == live.names("l2advertisements")
    web = next(o for o in live.ours("clusteruserdefinednetworks")
               if o["metadata"]["name"] == "unet.acme.web")
    assert any(m["manager"] == "unet" and m["operation"] == "Apply"
               for m in web["metadata"]["managedFields"])
    code, out, _ = live.plan("--detailed-exitcode")
    assert code == 0 and "No changes." in out, out

    # drift: someone else changes a pool's addresses with a merge patch
    live.objects.patch_namespaced_custom_object(
        "metallb.io", "v1beta1", "metallb-system", "ipaddresspools", "unet.acme.web",
        {"spec": {"addresses": ["10.10.1.0/24"]}}, field_manager="kubectl-edit",
        _content_type="application/merge-patch+json")
    code, out, _ = live.plan("--detailed-exitcode")
    assert code == 2 and "Drift: 1 backend object changed outside unet" in out
    code, out, err = live.apply()
    assert code == 0, err
    pool = live.objects.get_namespaced_custom_object(
        "metallb.io", "v1beta1", "metallb-system", "ipaddresspools", "unet.acme.web")
    assert pool["spec"]["addresses"] == ["10.10.1.240/28"]

    # the CUDN's network is immutable (CEL): an MTU change replaces it
    old_uid = web["metadata"]["uid"]

    def mtu(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "Subnet", "web")["spec"]["mtu"] = 1400

    edit_docs(live.repo, "tenants/acme/network.yaml", mtu)
    code, out, err = live.apply()
    assert code == 0, err
    assert "-/+ ClusterUserDefinedNetwork unet.acme.web on cluster live" in out
    web = next(o for o in live.ours("clusteruserdefinednetworks")
               if o["metadata"]["name"] == "unet.acme.web")
    assert web["metadata"]["uid"] != old_uid
    assert web["spec"]["network"]["localnet"]["mtu"] == 1400
    assert live.plan("--detailed-exitcode")[0] == 0


def test_live_the_api_server_refuses_what_the_validator_refuses(live: Live) -> None:
    """The validator's known-bad objects are refused by the real API server too."""
    from kubernetes import client

    def cudn(**localnet: Any) -> dict[str, Any]:
        return {"apiVersion": "k8s.ovn.org/v1", "kind": "ClusterUserDefinedNetwork",
                "metadata": {"name": f"unet-bad-{live.installation}"},
                "spec": {"namespaceSelector": {}, "network": {"topology": "Localnet",
                         "localnet": {"role": "Secondary", "physicalNetworkName": "physnet",
                                      "subnets": ["10.0.0.0/24"],
                                      "vlan": {"mode": "Access", "access": {"id": 100}},
                                      **localnet}}}}

    for bad, expected in ((cudn(vlan={"mode": "Access", "access": {"id": 4095}}), "4094"),
                          (cudn(physicalNetworkName="phys:net"),
                           "physicalNetworkName cannot contain"),
                          (cudn(subnets=["10.0.0.0/24", "fd00::/64"], mtu=1200), "1280")):
        with pytest.raises(client.exceptions.ApiException) as refused:
            live.objects.create_cluster_custom_object("k8s.ovn.org", "v1",
                                                      "clusteruserdefinednetworks", bad)
        assert refused.value.status == 422
        assert expected in refused.value.body, refused.value.body


def test_live_unreachable_cluster_fails_only_its_steps(live: Live) -> None:
    extra = live.tmp / "unreachable.kubeconfig"
    extra.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": refused_url()}}],
        "users": [{"name": "gone", "user": {"token": "x"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}]}))
    os.environ["KUBECONFIG"] = f"{KUBECONFIG}{os.pathsep}{extra}"
    live.set_clusters({"live": _context(), "gone": "gone"})
    code, out, err = live.apply()
    assert code == 1
    assert "cluster gone (context gone) is unreachable" in err and "connection refused" in err
    assert live.names("clusteruserdefinednetworks") == NETWORKS
    assert "live: 4 of 4 subnets ready" in out


def test_live_name_conflict_and_lease(live: Live) -> None:
    theirs = {"apiVersion": "k8s.ovn.org/v1", "kind": "ClusterUserDefinedNetwork",
              "metadata": {"name": "unet.initech.build"},
              "spec": {"namespaceSelector": {}, "network": {"topology": "Localnet",
                       "localnet": {"role": "Secondary", "physicalNetworkName": "other",
                                    "ipam": {"mode": "Disabled"}}}}}
    live.objects.create_cluster_custom_object("k8s.ovn.org", "v1",
                                              "clusteruserdefinednetworks", theirs)
    code, out, _ = live.plan()
    assert code == 1 and "NAME_CONFLICT: ClusterUserDefinedNetwork unet.initech.build on " \
                         "cluster live" in out
    live.objects.delete_cluster_custom_object("k8s.ovn.org", "v1",
                                              "clusteruserdefinednetworks",
                                              "unet.initech.build")

    from kubernetes import client

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    leases = client.CoordinationV1Api(live.api)
    leases.delete_namespaced_lease(f"unet-{live.installation}", "unet-system")  # the plan's
    leases.create_namespaced_lease("unet-system", {
        "metadata": {"name": f"unet-{live.installation}"},
        "spec": {"holderIdentity": "build-7 pid 4242", "leaseDurationSeconds": 300,
                 "acquireTime": stamp, "renewTime": stamp}})
    code, _, err = live.apply("--lock-timeout", "1")
    assert code == 1
    assert f"holds the Lease unet-system/unet-{live.installation} on cluster live" in err
    assert "build-7 pid 4242" in err


def test_live_rbac_denial_names_verb_and_resource(live: Live) -> None:
    """A service account that may do everything but patch IPAddressPools."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(live.api), client.RbacAuthorizationV1Api(live.api)
    name = f"unet-{live.installation}"
    rules = [{"apiGroups": ["k8s.ovn.org"], "resources": ["clusteruserdefinednetworks"],
              "verbs": ["get", "list", "create", "patch", "delete"]},
             {"apiGroups": ["metallb.io"], "resources": ["ipaddresspools"],
              "verbs": ["get", "list", "create", "delete"]},
             {"apiGroups": ["metallb.io"], "resources": ["l2advertisements"],
              "verbs": ["get", "list", "create", "patch", "delete"]},
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
              "verbs": ["get", "create", "update"]}]
    core.create_namespaced_service_account("unet-system", {"metadata": {"name": name}})
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "unet-system"}]})
    try:
        token = core.create_namespaced_service_account_token(
            name, "unet-system", {"spec": {"expirationSeconds": 600}}).status.token
        admin = yaml.safe_load(Path(str(KUBECONFIG)).read_text())
        context = next(c for c in admin["contexts"] if c["name"] == _context())["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
        restricted = live.tmp / "restricted.kubeconfig"
        restricted.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
            "users": [{"name": "restricted", "user": {"token": token}}],
            "contexts": [{"name": "restricted", "context": {"cluster": cluster["name"],
                                                           "user": "restricted"}}]}))
        os.environ["KUBECONFIG"] = str(restricted)
        live.set_clusters({"live": "restricted"})
        code, _, err = live.apply()
        assert code == 1
        assert "RBAC: the credentials of cluster live (context restricted) may not patch " \
               "ipaddresspools.metallb.io" in err
        assert "403 Forbidden" in err
        assert live.names("clusteruserdefinednetworks") == NETWORKS
    finally:
        core.delete_namespaced_service_account(name, "unet-system")
        rbac.delete_cluster_role(name)
        rbac.delete_cluster_role_binding(name)

