"""MultiNetworkPolicy and ConfigMap in the test support code, as an API server takes them.

The validator (`tests/support/crds.py`) against the upstream MultiNetworkPolicy CRD and
the API server's built-in ConfigMap validation, then the contract-test API server
(`tests/k8s_fixtures/server.py`) driven by the real kubernetes client: server-side
apply, list (cluster-wide, paged, field and label selectors), get, delete with UID
preconditions, 422/404/403/400 answers.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .k8s_fixtures.server import ROOT_CA, FakeCluster, write_kubeconfig
from .support import crds as validate

GROUP, VERSION, PLURAL = "k8s.cni.cncf.io", "v1beta1", "multi-networkpolicies"
MNP = "MultiNetworkPolicy"
APPLY = {"field_manager": "unet", "force": True, "_content_type": "application/apply-patch+yaml"}
BINDINGS = "unet-bindings"


def _policy(name: str = "unet.web.default-deny", namespace: str = "acme",
            **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": MNP,
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"k8s.v1.cni.cncf.io/policy-for": "acme/unet.acme.web"}},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], **spec}}


def _allow_https(**port: Any) -> dict[str, Any]:
    return _policy(
        "unet.web.allow-https",
        podSelector={"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["web", "api"]}]},
        ingress=[{"from": [{"ipBlock": {"cidr": "10.10.1.5/32"}}],
                  "ports": [{"protocol": "TCP", "port": 443, **port}]}])


def _configmap(name: str = BINDINGS, namespace: str = "acme", **data: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "unet"}},
            "data": data or {"bindings.json": json.dumps({"web": ["10.10.1.5"]})}}


# --- the CRD --------------------------------------------------------------------------------


def test_the_mnp_crd_is_shipped_byte_for_byte_and_serves_v1beta1_only() -> None:
    path = validate.DEFAULT_CRD_DIR / "k8s.cni.cncf.io_multi-networkpolicies.yaml"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"{digest}  {path.name}" in (validate.DEFAULT_CRD_DIR / "SOURCES.md").read_text()
    crds = validate.load_crds()
    crd = crds[(f"{GROUP}/{VERSION}", MNP)]
    assert (crd.plural, crd.namespaced) == (PLURAL, True)
    assert (f"{GROUP}/v1beta2", MNP) not in crds  # declared in the file, served: false
    ports = crd.schema["properties"]["spec"]["properties"]["ingress"]["items"][
        "properties"]["ports"]["items"]["properties"]
    assert set(ports) == {"port", "protocol"}  # no endPort in v1beta1
    assert "enum" not in ports["protocol"]


# --- MultiNetworkPolicy through the validator -----------------------------------------------


def test_valid_multi_network_policies_pass() -> None:
    assert validate.validate_object(_policy()) == []
    assert validate.validate_object(_allow_https()) == []
    assert validate.validate_object(_allow_https(port="https")) == []  # int-or-string


def _errors(change: Callable[[dict[str, Any]], Any], obj: dict[str, Any] | None = None
            ) -> list[str]:
    obj = copy.deepcopy(obj or _allow_https())
    change(obj)
    return validate.validate_object(obj)


def _port(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["ingress"][0]["ports"][0]  # type: ignore[no-any-return]


MNP_BAD = {
    # endPort is in the unserved v1beta2 only: the API server would prune it silently
    "endPort in v1beta1": (lambda o: _port(o).update(endPort=450), "'endPort' was unexpected"),
    "unknown spec field": (lambda o: o["spec"].update(podSelectr={}), "'podSelectr'"),
    "unknown top-level field": (lambda o: o.update(status={}), "'status' was unexpected"),
    "no podSelector": (lambda o: o["spec"].pop("podSelector"), "'podSelector' is a required"),
    "ipBlock without cidr": (
        lambda o: o["spec"]["ingress"][0]["from"][0]["ipBlock"].pop("cidr"), "'cidr'"),
    "port of another type": (lambda o: _port(o).update(port=[443]), "port"),
    "matchExpressions without operator": (
        lambda o: o["spec"]["podSelector"]["matchExpressions"][0].pop("operator"),
        "'operator' is a required"),
    "name with capitals": (lambda o: o["metadata"].update(name="Unet.Web"), "metadata.name"),
    "name with a trailing newline": (
        lambda o: o["metadata"].update(name="unet.web\n"), "metadata.name"),
    "no namespace": (lambda o: o["metadata"].pop("namespace"), "metadata.namespace: Required"),
    "bad annotation key": (
        lambda o: o["metadata"]["annotations"].update({"a/b/c": "x"}), "metadata.annotations"),
}


@pytest.mark.parametrize("case", sorted(MNP_BAD))
def test_invalid_multi_network_policies_fail(case: str) -> None:
    change, expected = MNP_BAD[case]
    errors = _errors(change)
    assert errors and any(expected in e for e in errors), errors


def test_mnp_schema_has_no_protocol_enum_nor_cidr_check() -> None:
    """What the schema does not check passes, as on the API server: unet must check it."""
    assert _errors(lambda o: _port(o).update(protocol="ICMP")) == []
    assert _errors(lambda o: o["spec"]["ingress"][0]["from"][0]["ipBlock"].update(
        cidr="10.10.1.500/32")) == []


def test_unserved_mnp_version_is_refused() -> None:
    obj = _policy()
    obj["apiVersion"] = f"{GROUP}/v1beta2"
    assert validate.validate_object(obj) == [f"no CRD serves {GROUP}/v1beta2 {MNP}"]


# --- ConfigMap through the validator --------------------------------------------------------


def test_valid_configmaps_pass() -> None:
    assert validate.validate_object(_configmap()) == []
    full = _configmap(**{"a": "x" * (validate.CONFIGMAP_MAX_BYTES - 1)})
    full.update(binaryData={"b": base64.b64encode(b"\0").decode()}, immutable=True)
    assert validate.validate_object(full) == []  # exactly 1 MiB, binary counted decoded


CM_BAD = {
    "non-string data value": (lambda o: o["data"].update({"port": 443}), "must be a string"),
    "key with a slash": (lambda o: o["data"].update({"a/b": "x"}), "valid config key"),
    "key '..'": (lambda o: o["data"].update({"..": "x"}), "must not be '..'"),
    "key starting with '..'": (lambda o: o["data"].update({"..data": "x"}), "start with '..'"),
    "key over 253 characters": (lambda o: o["data"].update({"k" * 254: "x"}), "253"),
    "data over 1 MiB": (
        lambda o: o["data"].update(big="x" * validate.CONFIGMAP_MAX_BYTES), "Too long"),
    "data and binaryData over 1 MiB together": (
        lambda o: o.update(data={"a": "x" * validate.CONFIGMAP_MAX_BYTES},
                           binaryData={"b": base64.b64encode(b"\0").decode()}), "Too long"),
    "key in data and binaryData": (
        lambda o: o.update(binaryData={"bindings.json": ""}), "duplicate of key"),
    "binaryData not base64": (lambda o: o.update(binaryData={"b": "%%%"}), "base64"),
    "data not a map": (lambda o: o.update(data=["x"]), "map of string to string"),
    "unknown top-level field": (lambda o: o.update(spec={}), "spec: field not declared"),
    "immutable not a boolean": (lambda o: o.update(immutable="yes"), "immutable"),
    "bad name": (lambda o: o["metadata"].update(name="unet_bindings"), "metadata.name"),
    "no namespace": (lambda o: o["metadata"].pop("namespace"), "metadata.namespace: Required"),
    "bad label value": (
        lambda o: o["metadata"]["labels"].update(app="-x"), "metadata.labels"),
}


@pytest.mark.parametrize("case", sorted(CM_BAD))
def test_invalid_configmaps_fail(case: str) -> None:
    change, expected = CM_BAD[case]
    errors = _errors(change, _configmap())
    assert errors and any(expected in e for e in errors), errors


def test_immutable_configmap_cannot_change() -> None:
    old = {**_configmap(), "immutable": True}
    assert validate.validate_object(old, old) == []
    changed = copy.deepcopy(old)
    changed["data"]["bindings.json"] = "{}"
    assert validate.validate_object(changed, old) == [
        "data: Forbidden: field is immutable when `immutable` is set"]
    changed = {**old, "immutable": False}
    assert validate.validate_object(changed, old) == [
        "immutable: Forbidden: field is immutable when `immutable` is set"]


# --- through the contract-test API server with the kubernetes client ------------------------


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster("hosting-a1", namespaces=("default", "unet-system", "acme",
                                               "initech")) as running:
        yield running


def _client(tmp_path: Path, cluster: FakeCluster) -> Any:
    from kubernetes import config

    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {cluster.name: cluster.url})
    return config.new_client_from_config(config_file=str(kubeconfig), context=cluster.name,
                                         persist_config=False)


@pytest.fixture
def api(tmp_path: Path, cluster: FakeCluster) -> Iterator[Any]:
    client = _client(tmp_path, cluster)
    yield client
    client.close()


def _status(exc: Any) -> dict[str, Any]:
    return json.loads(exc.body)  # type: ignore[no-any-return]


def test_contract_mnp_apply_list_get_delete(api: Any, cluster: FakeCluster) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objects = client.CustomObjectsApi(api)
    # a create answers 201, which CustomObjectsApi's patch maps to None: read it back
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, "acme", PLURAL, "unet.web.allow-https", _allow_https(), **APPLY)
    applied = objects.get_namespaced_custom_object(GROUP, VERSION, "acme", PLURAL,
                                                   "unet.web.allow-https")
    meta = applied["metadata"]
    assert applied["spec"] == _allow_https()["spec"]
    assert meta["generation"] == 1 and meta["uid"]
    assert [m["manager"] for m in meta["managedFields"]] == ["unet"]
    assert "f:ingress" in meta["managedFields"][0]["fieldsV1"]["f:spec"]
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, "initech", PLURAL, "unet.web.default-deny",
        _policy(namespace="initech"), **APPLY)

    listed = objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert listed["kind"] == "MultiNetworkPolicyList"
    assert listed["apiVersion"] == f"{GROUP}/{VERSION}"
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed["items"]] == [
        ("acme", "unet.web.allow-https"), ("initech", "unet.web.default-deny")]
    first = objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1)
    rest = objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1,
                                              _continue=first["metadata"]["continue"])
    assert [o["metadata"]["name"] for o in first["items"] + rest["items"]] == [
        "unet.web.allow-https", "unet.web.default-deny"]
    assert rest["metadata"]["continue"] == ""
    named = objects.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, field_selector="metadata.name=unet.web.default-deny")
    assert [o["metadata"]["namespace"] for o in named["items"]] == ["initech"]

    # re-applied without the ingress rules: the fields unet no longer applies go away
    again = objects.patch_namespaced_custom_object(
        GROUP, VERSION, "acme", PLURAL, "unet.web.allow-https",
        _policy("unet.web.allow-https"), **APPLY)
    assert "ingress" not in again["spec"] and again["metadata"]["generation"] == 2
    got = objects.get_namespaced_custom_object(GROUP, VERSION, "acme", PLURAL,
                                               "unet.web.allow-https")
    assert got["spec"] == again["spec"]

    stale = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    with pytest.raises(ApiException) as refused:
        objects.delete_namespaced_custom_object(GROUP, VERSION, "acme", PLURAL,
                                                "unet.web.allow-https", body=stale)
    assert refused.value.status == 409 and "Precondition failed" in _status(refused.value)[
        "message"]
    objects.delete_namespaced_custom_object(
        GROUP, VERSION, "acme", PLURAL, "unet.web.allow-https",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"])))
    assert [o["metadata"]["name"] for o in cluster.objects(PLURAL)] == ["unet.web.default-deny"]


def test_contract_mnp_invalid_is_422(api: Any, cluster: FakeCluster) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objects = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as invalid:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, "acme", PLURAL, "unet.web.allow-https", _allow_https(endPort=450),
            **APPLY)
    status = _status(invalid.value)
    assert invalid.value.status == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith(
        f'{MNP}.{GROUP} "unet.web.allow-https" is invalid: [')
    assert "endPort" in status["message"]
    assert status["details"] == {"name": "unet.web.allow-https", "group": GROUP, "kind": MNP,
                                 "causes": []}
    assert cluster.objects(PLURAL) == []


def test_contract_mnp_conflicts_missing_namespace_and_forbidden(
        api: Any, cluster: FakeCluster) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objects = client.CustomObjectsApi(api)
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, "acme", PLURAL, "unet.web.default-deny", _policy(), **APPLY)
    cluster.edit(PLURAL, "unet.web.default-deny",
                 lambda o: o["spec"].update(policyTypes=["Ingress"]), namespace="acme")
    unforced = {**APPLY, "force": False}
    with pytest.raises(ApiException) as conflict:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, "acme", PLURAL, "unet.web.default-deny", _policy(), **unforced)
    assert conflict.value.status == 409
    assert _status(conflict.value)["details"]["causes"][0]["field"] == ".spec.policyTypes"

    with pytest.raises(ApiException) as missing:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, "globex", PLURAL, "unet.web.default-deny",
            _policy(namespace="globex"), **APPLY)
    assert missing.value.status == 404
    assert _status(missing.value)["message"] == 'namespaces "globex" not found'

    cluster.deny.add(("list", PLURAL))
    with pytest.raises(ApiException) as forbidden:
        objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert forbidden.value.status == 403
    assert f'in API group "{GROUP}" at the cluster scope' in _status(forbidden.value)["message"]


def test_contract_mnp_crd_missing_but_configmaps_served(tmp_path: Path) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    with FakeCluster("no-mnp", kinds=("clusteruserdefinednetworks",)) as cluster:
        api = _client(tmp_path, cluster)
        with pytest.raises(ApiException) as missing:
            client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        assert missing.value.status == 404
        assert _status(missing.value)["message"] == \
            "the server could not find the requested resource"
        names = client.CoreV1Api(api).list_config_map_for_all_namespaces()
        assert {c.metadata.name for c in names.items} == {ROOT_CA}
        api.close()


def test_contract_configmap_apply_list_by_name_delete(api: Any, cluster: FakeCluster) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    for namespace in ("acme", "initech"):
        applied = core.patch_namespaced_config_map(
            BINDINGS, namespace, _configmap(namespace=namespace), **APPLY)
        assert applied.metadata.namespace == namespace and applied.metadata.uid
        assert applied.metadata.generation is None  # ConfigMaps have none
        assert [m.manager for m in applied.metadata.managed_fields] == ["unet"]
    core.patch_namespaced_config_map("other", "acme", _configmap("other", other="x"),
                                     **APPLY)

    def names(**selectors: str) -> list[tuple[str, str]]:
        listed = core.list_config_map_for_all_namespaces(**selectors)
        assert (listed.kind, listed.api_version) == ("ConfigMapList", "v1")
        return [(c.metadata.namespace, c.metadata.name) for c in listed.items]

    everything = names()
    assert len(everything) == 7  # 4 kube-root-ca.crt, 2 bindings, 1 other
    assert names(field_selector=f"metadata.name={BINDINGS}") == [
        ("acme", BINDINGS), ("initech", BINDINGS)]
    assert names(field_selector=f"metadata.name=={BINDINGS}") == [
        ("acme", BINDINGS), ("initech", BINDINGS)]
    assert names(field_selector=f"metadata.name={BINDINGS},metadata.namespace=initech") == [
        ("initech", BINDINGS)]
    assert names(field_selector="metadata.name=absent") == []
    assert names(label_selector="app.kubernetes.io/managed-by=unet") == [
        ("acme", "other"), ("acme", BINDINGS), ("initech", BINDINGS)]
    assert names(label_selector="app.kubernetes.io/managed-by=unet",
                 field_selector=f"metadata.name!={BINDINGS}") == [("acme", "other")]
    paged = core.list_config_map_for_all_namespaces(
        field_selector=f"metadata.name={BINDINGS}", limit=1)
    assert len(paged.items) == 1 and paged.metadata._continue

    got = core.read_namespaced_config_map(BINDINGS, "acme")
    assert got.data == _configmap()["data"]
    result = core.delete_namespaced_config_map(
        BINDINGS, "acme", body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=got.metadata.uid)))
    assert result["status"] == "Success"
    assert result["details"] == {"name": BINDINGS, "kind": "configmaps",
                                 "uid": got.metadata.uid}
    assert names(field_selector=f"metadata.name={BINDINGS}") == [("initech", BINDINGS)]


def test_contract_configmap_errors(api: Any, cluster: FakeCluster) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as invalid:
        core.patch_namespaced_config_map(BINDINGS, "acme",
                                         _configmap(**{"a/b": "x"}), **APPLY)
    status = _status(invalid.value)
    assert invalid.value.status == 422
    assert re.match(rf'ConfigMap "{BINDINGS}" is invalid: \[data\[a/b\]', status["message"])
    assert status["details"] == {"name": BINDINGS, "kind": "ConfigMap", "causes": []}

    with pytest.raises(ApiException) as unsupported:
        core.list_config_map_for_all_namespaces(field_selector="data.x=1")
    assert unsupported.value.status == 400
    assert _status(unsupported.value)["message"] == "field label not supported: data.x"

    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map(BINDINGS, "acme")
    assert missing.value.status == 404
    assert _status(missing.value)["message"] == f'configmaps "{BINDINGS}" not found'

    cluster.deny.add(("list", "configmaps"))
    with pytest.raises(ApiException) as forbidden:
        core.list_config_map_for_all_namespaces()
    assert forbidden.value.status == 403
    assert _status(forbidden.value)["message"] == (
        'configmaps is forbidden: User "system:serviceaccount:unet-system:unet" cannot list '
        'resource "configmaps" in API group "" at the cluster scope')
