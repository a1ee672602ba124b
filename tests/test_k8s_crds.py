"""Rendered Kubernetes objects against the upstream CRDs (managers/kubernetes/crds/).

Every object the kubernetes manager renders for the example repo must pass what the
API server checks on create: ObjectMeta, the structural schema (jsonschema over
`openAPIV3Schema`) and the CEL rules (`x-kubernetes-validations`, with the Kubernetes
CIDR/IP functions). The validator must also reject known-bad objects, so it cannot pass
vacuously, and the round trip render → apply body → object as served → observe must
give back exactly what was rendered (a no-op plan is a no-op).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from unet.managers.kubernetes.codec import LABEL_INSTALLATION, to_backend, to_body
from unet.reconciler.desired import render_desired
from unet.reconciler.diff import Action, diff
from unet.reconciler.objects import TAG_HASH, TAG_IMMUTABLE, observed_allocations
from unet.reconciler.validate import validate_repo

from .conftest import EXAMPLE
from .support import crds as validate
from .test_plan_golden import copy_example, edit_docs, find_doc, validated

FIXTURES = Path(__file__).resolve().parent / "k8s_fixtures" / "responses"
CUDN = "ClusterUserDefinedNetwork"


@pytest.fixture(scope="module")
def rendered() -> list[Any]:
    result = validate_repo(EXAMPLE)
    assert result.ok
    return [o for o in render_desired(result, {}).objects if o.manager == "kubernetes"]


def test_crd_reference_files_are_there() -> None:
    crds = validate.load_crds()
    assert set(crds) >= {("k8s.ovn.org/v1", CUDN), ("metallb.io/v1beta1", "IPAddressPool"),
                         ("metallb.io/v1beta1", "L2Advertisement")}


def test_missing_crd_folder_is_a_clear_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNET_CRD_DIR", str(tmp_path))
    with pytest.raises(validate.CrdsMissing, match="managers/kubernetes/crds"):
        validate.crd_dir()


def test_example_renders_every_kind_for_both_clusters(rendered: list[Any]) -> None:
    keys = sorted(o.key for o in rendered)
    subnets = ["acme.db", "acme.nodes", "acme.web", "initech.build"]
    clusters = ("hosting-a1", "hosting-a2")
    assert keys == sorted(
        [f"{cluster}/{kind}/unet.{s}" for cluster in clusters
         for s in subnets for kind in (CUDN, "IPAddressPool/metallb-system",
                                       "L2Advertisement/metallb-system")]
        + [f"{cluster}/MultiNetworkPolicy/{s.split('.')[0]}/unet.{s.split('.')[1]}"
           for cluster in clusters for s in subnets]
        + ["hosting-a1/MultiNetworkPolicy/acme/unet.web.web"]  # web-k1 runs there
        # the provider's services-a (its class has this k8sManager), for acme's namespace
        + [f"{cluster}/{kind}/unet-pn.services-a" for cluster in clusters
           for kind in (CUDN, "MultiNetworkPolicy/acme")]
        + ["hosting-a1/MultiNetworkPolicy/acme/unet-pn.services-a.prod.web"]
        + [f"{cluster}/ConfigMap/{tenant}/unet-bindings.kubernetes" for cluster in clusters
           for tenant in ("acme", "initech")])
    web = next(o for o in rendered if o.key == f"hosting-a1/{CUDN}/unet.acme.web")
    localnet = web.fields["spec"]["network"]["localnet"]
    assert web.fields["spec"]["network"]["topology"] == "Localnet"
    assert localnet["role"] == "Secondary"
    assert localnet["physicalNetworkName"] == "physnet-tenant"
    assert localnet["ipam"] == {"mode": "Disabled"}, "unet hands out every address"
    assert "subnets" not in localnet and "excludeSubnets" not in localnet
    assert localnet["mtu"] == 1500
    assert localnet["vlan"]["mode"] == "Access"
    assert web.fields["spec"]["namespaceSelector"] == {
        "matchLabels": {"network.osac.io/tenant": "acme", "kubernetes.io/metadata.name": "acme"}}
    pool = next(o for o in rendered
                if o.key == "hosting-a1/IPAddressPool/metallb-system/unet.acme.web")
    assert pool.fields["spec"]["addresses"] == ["10.10.1.240/28"]


@pytest.mark.parametrize(("kind", "count"), [
    (CUDN, 10), ("IPAddressPool", 8), ("L2Advertisement", 8), ("MultiNetworkPolicy", 12),
    ("ConfigMap", 4)])
def test_every_rendered_object_validates_against_the_upstream_crd(rendered: list[Any],
                                                                  kind: str, count: int) -> None:
    objects = [o for o in rendered if o.table == kind]
    assert len(objects) == count
    for obj in objects:
        body = to_body(obj, "example", "kubernetes")  # with our labels and annotations
        assert validate.validate_object(body) == [], obj.key


def test_the_segment_id_is_the_one_the_ovn_localnet_port_uses() -> None:
    objects = render_desired(validate_repo(EXAMPLE), {}).objects
    ports = {o.owner: o.fields["tag_request"] for o in objects
             if o.manager == "ovn" and o.key.endswith("/localnet")
             and o.owner.startswith("Subnet/")}
    cudns = [o for o in objects if o.table == CUDN and o.owner.startswith("Subnet/")]
    assert len(ports) == 4 and len(cudns) == 8
    for cudn in cudns:
        assert cudn.fields["spec"]["network"]["localnet"]["vlan"]["access"]["id"] == \
            ports[cudn.owner]
        # and it is recorded under the same allocation key as on the OVN port
        [alloc] = [k for k in cudn.meta if k.startswith("unet:alloc:segment/")]
        port = next(o for o in objects if o.manager == "ovn" and o.owner == cudn.owner
                    and o.key.endswith("/localnet"))
        assert port.meta[alloc] == cudn.meta[alloc]


# --- the validator rejects known-bad objects ------------------------------------------------


def _good(rendered: list[Any]) -> dict[str, Any]:
    web = next(o for o in rendered if o.key == f"hosting-a1/{CUDN}/unet.acme.web")
    return copy.deepcopy(to_body(web, "example", "kubernetes"))


def _localnet(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["network"]["localnet"]  # type: ignore[no-any-return]


BAD = {
    "vlan id 4095 (schema maximum)": (
        lambda o: _localnet(o)["vlan"]["access"].update(id=4095), "maximum of 4094"),
    "vlan id 0 (schema minimum)": (
        lambda o: _localnet(o)["vlan"]["access"].update(id=0), "minimum of 1"),
    "physicalNetworkName with ':' (CEL)": (
        lambda o: _localnet(o).update(physicalNetworkName="phys:net"),
        "cannot contain `,` or `:`"),
    "physicalNetworkName with ',' (CEL)": (
        lambda o: _localnet(o).update(physicalNetworkName="a,b"), "cannot contain"),
    "Localnet topology without localnet (CEL)": (
        lambda o: o["spec"]["network"].pop("localnet"), "spec.localnet is required"),
    "mtu below 1280 with an IPv6 subnet (CEL)": (
        lambda o: _localnet(o).update(mtu=1279, ipam={"mode": "Enabled"},
                                      subnets=["fd10:aaaa:0:1::/64"]),
        "greater than or equal to 1280"),
    "two subnets of one family (CEL)": (
        lambda o: _localnet(o).update(subnets=["10.0.0.0/24", "10.0.1.0/24"], ipam={}),
        "different IP families"),
    "subnets with IPAM disabled (CEL)": (
        lambda o: _localnet(o).update(subnets=["10.10.1.0/24"]), "forbidden otherwise"),
    "IPAM enabled without subnets (CEL)": (
        lambda o: _localnet(o).update(ipam={"mode": "Enabled"}), "Subnets is required"),
    "an excludeSubnets entry that is not a CIDR (CEL isCIDR)": (
        lambda o: _localnet(o).update(excludeSubnets=["10.10.1.300/32"], ipam={},
                                      subnets=["10.10.1.0/24"]), "CIDR is invalid"),
    "excludeSubnets without subnets (CEL)": (
        lambda o: _localnet(o).update(excludeSubnets=["10.10.1.1/32"]),
        "excludeSubnets must be unset"),
    "persistent IPs with IPAM disabled (CEL)": (
        lambda o: _localnet(o)["ipam"].update(lifecycle="Persistent"),
        "lifecycle Persistent is only supported"),
    "vlan mode Access without access (CEL)": (
        lambda o: _localnet(o)["vlan"].pop("access"), "vlan access config is required"),
    "26 excludeSubnets (schema maxItems 25)": (
        lambda o: _localnet(o).update(excludeSubnets=[f"10.10.1.{i}/32" for i in range(2, 28)],
                                      ipam={}, subnets=["10.10.1.0/24"]), "too long"),
    "role Primary on localnet (schema enum)": (
        lambda o: _localnet(o).update(role="Primary"), "is not one of"),
    "an unknown field (would be pruned)": (
        lambda o: _localnet(o).update(vlanId=5), "Additional properties"),
    "mtu as text (schema type)": (
        lambda o: _localnet(o).update(mtu="1500"), "is not of type 'integer'"),
    "no namespaceSelector (schema required)": (
        lambda o: o["spec"].pop("namespaceSelector"), "'namespaceSelector' is a required"),
    "a name that is not a DNS subdomain (ObjectMeta)": (
        lambda o: o["metadata"].update(name="unet_acme_web"), "RFC 1123 subdomain"),
    "a namespace on a cluster-scoped kind (ObjectMeta)": (
        lambda o: o["metadata"].update(namespace="default"), "cluster scope"),
    "a label value with '/' (ObjectMeta)": (
        lambda o: o["metadata"]["labels"].update({"network.osac.io/owner": "Subnet/acme/web"}),
        "valid label"),
    "an annotation key with ':' (ObjectMeta)": (
        lambda o: o["metadata"]["annotations"].update({"unet:hash": "x"}), "name part"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_validator_rejects_known_bad_cudns(rendered: list[Any], case: str) -> None:
    change, expected = BAD[case]
    obj = _good(rendered)
    assert validate.validate_object(obj) == []
    change(obj)
    errors = validate.validate_object(obj)
    assert errors, f"{case}: accepted"
    assert any(expected in e for e in errors), errors


def test_the_validator_rejects_known_bad_metallb_objects(rendered: list[Any]) -> None:
    pool = next(o for o in rendered if o.table == "IPAddressPool")
    body = to_body(pool, "example", "kubernetes")
    missing = copy.deepcopy(body)
    missing["spec"].pop("addresses")
    assert any("'addresses' is a required" in e for e in validate.validate_object(missing))
    no_namespace = copy.deepcopy(body)
    no_namespace["metadata"].pop("namespace")
    assert "metadata.namespace: Required value" in validate.validate_object(no_namespace)
    advertisement = to_body(next(o for o in rendered if o.table == "L2Advertisement"),
                            "example", "kubernetes")
    advertisement["spec"]["ipAddressPools"] = "unet.acme.web"
    assert any("is not of type 'array'" in e for e in validate.validate_object(advertisement))


def test_transition_rules_run_only_on_update(rendered: list[Any]) -> None:
    old = _good(rendered)
    new = copy.deepcopy(old)
    _localnet(new)["mtu"] = 9000
    assert validate.validate_object(new) == []  # as a new object: fine
    assert validate.validate_object(new, old) == [
        ".spec.network.localnet: Invalid value: Localnet is immutable"]
    relabelled = copy.deepcopy(old)
    relabelled["spec"]["namespaceSelector"] = {"matchLabels": {"tenant": "acme"}}
    assert validate.validate_object(relabelled, old) == []


@pytest.mark.parametrize(("rule", "value", "expected"), [
    ("isCIDR(self)", "10.0.0.0/8", True),
    ("isCIDR(self)", "10.0.0.1/8", True),  # host bits are allowed, as in Kubernetes
    ("isCIDR(self)", "10.0.0.0/33", False),
    ("isCIDR(self)", "010.0.0.0/8", False),  # leading zeros are not
    ("isCIDR(self)", "::ffff:10.0.0.0/104", False),  # nor IPv4-mapped IPv6
    ("isCIDR(self)", "fd00::/64", True),
    ("isIP(self)", "fd00::1", True),
    ("isIP(self)", "fd00::1%eth0", False),
    ("isIP(self)", "10.0.0.256", False),
    ("cidr(self).ip().family() == 6", "fd00::/64", True),
    ("ip(self).family() == 4", "192.0.2.1", True),
    ("cidr(self).prefixLength() == 28", "10.0.0.240/28", True),
    ("cidr(self).masked() == cidr('10.0.0.0/24')", "10.0.0.7/24", True),
    ("cidr(self).containsIP('10.0.0.9')", "10.0.0.0/28", True),
    ("cidr(self).containsIP(ip('10.0.0.99'))", "10.0.0.0/28", False),
    ("cidr(self).containsCIDR('10.0.0.8/29')", "10.0.0.0/28", True),
    ("cidr(self).containsCIDR(cidr('10.0.0.0/23'))", "10.0.0.0/24", False),
    ("cidr(self).containsCIDR('fd00::/64')", "10.0.0.0/8", False),
])
def test_kubernetes_cel_cidr_and_ip_functions(rule: str, value: str, expected: bool) -> None:
    assert validate._evaluate(rule, value, validate._ABSENT) is expected


# --- render rules ----------------------------------------------------------------------------


def test_many_excluded_addresses_need_nothing_of_the_cluster(tmp_path: Path) -> None:
    """The cluster allocates nothing, so excluded addresses are unet's business alone: no
    excludeSubnets (the CRD allows 25) however many there are."""
    repo = copy_example(tmp_path / "repo")

    def exclude(docs: list[dict[str, Any]]) -> None:  # every other address: nothing merges
        subnet = find_doc(docs, "Subnet", "web")
        subnet["spec"]["excludeAddresses"] = [f"10.10.1.{i}" for i in range(10, 62, 2)]

    edit_docs(repo, "tenants/acme/network.yaml", exclude)
    cudns = [o for o in render_desired(validated(repo), {}).objects if o.table == CUDN]
    assert cudns and all("excludeSubnets" not in o.fields["spec"]["network"]["localnet"]
                         for o in cudns)


def test_a_changed_localnet_replaces_the_cudn(tmp_path: Path) -> None:
    """spec.network is immutable in the API server: an MTU change is delete + create."""
    base = validate_repo(EXAMPLE)
    repo = copy_example(tmp_path / "repo")

    def mtu(docs: list[dict[str, Any]]) -> None:
        find_doc(docs, "Subnet", "web")["spec"]["mtu"] = 1400

    edit_docs(repo, "tenants/acme/network.yaml", mtu)
    before = {o.uid: o for o in render_desired(base, {}).objects}
    allocated = observed_allocations(before.values())
    after = {o.uid: o for o in render_desired(validated(repo), allocated).objects}
    changes = {c.uid: c for c in diff(after, before)}
    cudn = changes[f"kubernetes:hosting-a1/{CUDN}/unet.acme.web"]
    assert cudn.action is Action.REPLACE
    assert cudn.before.meta[TAG_IMMUTABLE] != cudn.after.meta[TAG_IMMUTABLE]
    pool = changes["kubernetes:hosting-a1/IPAddressPool/metallb-system/unet.acme.web"]
    assert pool.action is Action.NOOP


# --- the round trip ----------------------------------------------------------------------


def test_observe_reads_back_exactly_what_was_rendered(rendered: list[Any]) -> None:
    """An object as a cluster serves it (server fields, managedFields, finalizer, status,
    defaults) maps back to the rendered BackendObject: no change, hash kept for drift."""
    served = json.loads((FIXTURES / "cudn_as_served.json").read_text())
    web = next(o for o in rendered if o.key == f"hosting-a1/{CUDN}/unet.acme.web")
    back = to_backend("hosting-a1", "kubernetes", served)
    assert back.key == web.key and back.owner == web.owner and back.table == CUDN
    assert back.fields == web.fields
    assert back.meta[TAG_HASH] == "0123456789abcdef"
    assert [c.action for c in diff({web.uid: web}, {back.uid: back})] == [Action.NOOP]
    assert served["metadata"]["labels"][LABEL_INSTALLATION] == "example"


@pytest.mark.parametrize("kind", [CUDN, "IPAddressPool", "L2Advertisement",
                                  "MultiNetworkPolicy", "ConfigMap"])
def test_apply_body_round_trips_for_every_kind(rendered: list[Any], kind: str) -> None:
    for obj in (o for o in rendered if o.table == kind):
        served = copy.deepcopy(to_body(obj, "example", "kubernetes"))
        served["metadata"].update(uid="u", resourceVersion="1", generation=1,
                                  managedFields=[{"manager": "unet"}])
        if kind == "IPAddressPool":
            served["spec"]["avoidBuggyIPs"] = False  # a CRD default the server fills in
        back = to_backend(obj.key.split("/")[0], "kubernetes", served)
        assert (back.fields, dict(back.refs), back.owner) == \
            (obj.fields, dict(obj.refs), obj.owner)
        assert {k: v for k, v in back.meta.items() if k != TAG_HASH} == dict(obj.meta)
        assert back.meta[TAG_HASH] == obj.content_hash
