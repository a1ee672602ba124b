"""The RBAC that docs/hosting-clusters.md gives for unet's identity is what the Kubernetes
manager needs: no less (plans and applies that create, repair drift, replace and prune
succeed on API servers that refuse everything else) and no more (every rule it grants
is used by them).

The API servers are the contract tests' (tests/k8s_fixtures/server.py, real kubernetes
client, recorded API behaviour), which refuse what RBAC does not allow with the API's
Status bodies and record every request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .conftest import ROOT
from .k8s_fixtures.server import RESOURCES
from .test_k8s_contract import (  # noqa: F401  (make_env is a fixture)
    CUDNS,
    POOLS,
    _drop_subnet_build,
    _set_mtu,
    make_env,
)

GUIDE = ROOT / "docs" / "hosting-clusters.md"
VERBS = ("get", "list", "create", "update", "patch", "delete")
_METHODS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_PATH = re.compile(r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)/"
                   r"(?:namespaces/(?P<namespace>[^/]+)/)?(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")
Grant = tuple[str, str, str, str | None]  # (verb, API group, resource, namespace or None)


def documented_rbac(guide: Path = GUIDE) -> list[dict[str, Any]]:
    """The RBAC objects of the guide's YAML block that holds the ClusterRole."""
    blocks = re.findall(r"```yaml\n(.*?)```", guide.read_text(), re.DOTALL)
    found = [block for block in blocks if "kind: ClusterRole\n" in block]
    assert len(found) == 1, f"{guide.name}: {len(found)} YAML blocks with a ClusterRole"
    return [doc for doc in yaml.safe_load_all(found[0]) if doc]


def grants(objects: list[dict[str, Any]]) -> set[Grant]:
    """What the roles allow, bound to unet's service account: a ClusterRole everywhere
    (None), a Role in its namespace."""
    bound = {(o["roleRef"]["kind"], o["roleRef"]["name"], o["metadata"].get("namespace"))
             for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
             and {"kind": "ServiceAccount", "name": "unet", "namespace": "unet-system"}
             in o["subjects"]}
    out: set[Grant] = set()
    for role in objects:
        namespace = role["metadata"].get("namespace")
        if role["kind"] not in ("ClusterRole", "Role") or \
                (role["kind"], role["metadata"]["name"], namespace) not in bound:
            continue
        for rule in role["rules"]:
            out |= {(verb, group, resource, namespace) for verb in rule["verbs"]
                    for group in rule["apiGroups"] for resource in rule["resources"]}
    return out


def allows(granted: set[Grant], verb: str, group: str, resource: str,
           namespace: str | None) -> bool:
    return (verb, group, resource, None) in granted or \
        (namespace is not None and (verb, group, resource, namespace) in granted)


def used(requests: list[tuple[str, str]]) -> set[Grant]:
    """The rights the recorded requests needed. A server-side apply (PATCH) that creates
    the object needs `create` as well as `patch` (the API server authorises the create)."""
    out: set[Grant] = set()
    for method, path in requests:
        match = _PATH.match(path)
        assert match is not None and match["plural"] in RESOURCES, f"unexpected {path}"
        group, namespace = match["group"] or "", match["namespace"]
        scope = namespace if match["plural"] == "leases" else None
        verb = ("get" if match["name"] else "list") if method == "GET" else _METHODS[method]
        out.add((verb, group, match["plural"], scope))
        if verb == "patch":
            out.add(("create", group, match["plural"], scope))
    return out


def test_the_documented_rbac_is_what_the_manager_needs(make_env: Any) -> None:  # noqa: F811
    granted = grants(documented_rbac())
    env = make_env(**{"hosting-a1": {"finalizer_seconds": 0.2}})
    for cluster in env.clusters.values():
        cluster.requests.clear()
        cluster.deny |= {(verb, plural) for verb in VERBS for plural in RESOURCES
                         if not allows(granted, verb, RESOURCES[plural][0], plural,
                                       "unet-system")}
    assert env.clusters["hosting-a1"].deny, "the fake API servers refuse something"

    code, _, err = env.apply()  # everything created; the Lease created, renewed, released
    assert code == 0, err
    env.clusters["hosting-a1"].edit(POOLS, "unet.acme.web",
                                    lambda o: o["spec"].update(addresses=["10.10.1.0/24"]),
                                    namespace="metallb-system")
    _set_mtu(env.repo, 1400)  # the CUDN of acme/web replaced
    code, out, err = env.apply()
    assert code == 0, err
    assert "-/+ ClusterUserDefinedNetwork unet.acme.web on cluster hosting-a1" in out
    _drop_subnet_build(env.repo)  # pruned
    code, _, err = env.apply()
    assert code == 0, err
    code, out, _ = env.plan("--detailed-exitcode")
    assert code == 0 and "No changes." in out

    requests = [r for cluster in env.clusters.values() for r in cluster.requests]
    needed = used(requests)
    assert all(allows(granted, *grant) for grant in needed)
    assert granted == {(verb, group, resource, namespace)
                       for verb, group, resource, namespace in needed
                       if namespace is None or resource == "leases"}, \
        "every documented right is used, and no other"
    assert ("delete", "k8s.ovn.org", CUDNS, None) in needed  # the replace and the prune


def test_a_right_left_out_of_the_documented_rbac_is_refused(make_env: Any) -> None:  # noqa: F811
    """The check is not vacuous: without `create` on leases, a plan stops."""
    granted = grants(documented_rbac()) - {("create", "coordination.k8s.io", "leases",
                                            "unet-system")}
    env = make_env()
    for cluster in env.clusters.values():
        cluster.deny |= {(verb, plural) for verb in VERBS for plural in RESOURCES
                         if not allows(granted, verb, RESOURCES[plural][0], plural,
                                       "unet-system")}
    code, out, _ = env.plan()
    assert code == 1
    assert "may not create leases.coordination.k8s.io unet-example in namespace " \
           "unet-system" in out
