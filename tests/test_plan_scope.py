"""PR plans render only the tenants a pull request touches.

The untouched tenants' objects are the same in base and head by construction, so
the scoped plan must equal the plan of everything, except that untouched
resources list no rows. Shared allocations (pool addresses, segment ids) are
still made for the whole revision: a tenant's new address never lands on
another tenant's.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from unet.reconciler.plan_io import plan_to_json
from unet.reconciler.planner import changed_tenants, plan_between
from unet.reconciler.validate import ParsedFiles, validate_repo

from .conftest import EXAMPLE, copy_checkout
from .support.gitops import commit_all, git
from .support.trace import append_docs, manifest


def _add_vm(repo: Path) -> None:
    path = repo / "tenants/acme/compute.yaml"
    text = path.read_text()
    first = text.split("\n---\n")[1]
    path.write_text(text + "\n---\n" + first.replace("name: web-1", "name: web-9", 1))


def _add_vm_alone(repo: Path) -> None:
    """In a file of its own: compute.yaml also holds web-k1, whose NIC on a provider
    network puts a change of that file's manifests in every tenant's scope."""
    text = (repo / "tenants/acme/compute.yaml").read_text()
    first = text.split("\n---\n")[1]
    (repo / "tenants/acme/web-9.yaml").write_text(first.replace("name: web-1", "name: web-9",
                                                                1))


def _new_public_address(repo: Path) -> None:
    path = repo / "tenants/initech/external.yaml"
    text = path.read_text()
    path.write_text(text + "\n---\n" + "apiVersion: network.osac.io/v1alpha1\n"
                    "kind: ExternalIP\nmetadata:\n  name: launch-api\nspec:\n  pool: public-a\n")


def _remove_tenant(repo: Path) -> None:
    shutil.rmtree(repo / "tenants/initech")
    (repo / "provider/tenants/initech.yaml").unlink()
    (repo / "tenants/globex/peering.yaml").unlink()  # names initech


def _drop_one_side(repo: Path) -> None:
    """globex's side of its peering with initech goes: initech's rows change too."""
    (repo / "tenants/globex/peering.yaml").unlink()


def _narrow_the_peer_group(repo: Path) -> None:
    """globex's group app loses a member: initech's mirror admits one NIC fewer."""
    path = repo / "tenants/globex/compute.yaml"
    old = "      securityGroups: [app]\n      primary: true"
    new = "      securityGroups: [database]\n      primary: true"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))


def _change_pool(repo: Path) -> None:
    path = repo / "provider/pools.yaml"
    path.write_text(path.read_text().replace("metadata:\n", "metadata:\n  annotations:\n"
                                             "    note: changed\n", 1))


EDITS: dict[str, tuple[Callable[[Path], None], frozenset[str] | None]] = {
    "add a VM": (_add_vm_alone, frozenset({"acme"})),
    "add a VM beside one on a provider network": (_add_vm, None),
    # initech is peered with globex: its changes are planned with globex's rows too
    "a new address from a shared pool": (_new_public_address,
                                         frozenset({"globex", "initech"})),
    "remove a tenant": (_remove_tenant, frozenset({"globex", "initech"})),
    "one side of a peering goes": (_drop_one_side, frozenset({"globex", "initech"})),
    "a peer group's member leaves": (_narrow_the_peer_group,
                                     frozenset({"globex", "initech"})),
    "change a provider pool": (_change_pool, None),
    "nothing": (lambda repo: None, frozenset()),
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    copy_checkout(EXAMPLE, target)
    git(target, "init", "-q")
    commit_all(target, "base")
    git(target, "branch", "-q", "base")
    return target


def _comparable(plan: Any) -> dict[str, Any]:
    """The plan without what scoping leaves out: rows of untouched resources."""
    doc = plan_to_json(plan)
    for resource in doc["resources"]:
        if resource["actions"] == ["no-op"]:
            resource["backend_changes"] = []
    doc["backend_changes"] = [c for c in doc["backend_changes"] if c["actions"] != ["no-op"]]
    for key in ("observed_fingerprint", "row_counts"):
        doc.pop(key)
    return doc


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_scoped_plan_equals_the_whole_plan(repo: Path, edit: str) -> None:
    change, expected_scope = EDITS[edit]
    change(repo)
    commit_all(repo, edit)
    shared = ParsedFiles()
    head = validate_repo(repo, "HEAD", parsed=shared)
    base = validate_repo(repo, "base", parsed=shared)
    assert head.ok and base.ok
    assert changed_tenants(base, head) == expected_scope
    scoped = plan_between(base, head, {})
    # Parsed apart, no manifest is shared: every tenant counts as changed and all render.
    apart = validate_repo(repo, "base"), validate_repo(repo, "HEAD")
    assert changed_tenants(*apart) is None
    whole = plan_between(*apart, {})
    assert _comparable(scoped) == _comparable(whole)
    assert any(r.action != "no-op" for r in scoped.resources) == (edit != "nothing")



def test_unchanged_files_of_a_folder_are_parsed_once(repo: Path) -> None:
    """A reconcile daemon keeps its ParsedFiles: the next run parses only what changed."""
    parsed = ParsedFiles()
    first = validate_repo(repo, parsed=parsed)
    parsed.forget_unused()
    _add_vm(repo)
    second = validate_repo(repo, parsed=parsed)
    assert first.ok and second.ok
    changed = "tenants/acme/compute.yaml"
    before = {id(m) for m in first.manifests if m.doc.file != changed}
    after = {id(m) for m in second.manifests if m.doc.file != changed}
    assert before == after, "unchanged files reuse their manifests"
    assert not {id(m) for m in first.manifests if m.doc.file == changed} & \
        {id(m) for m in second.manifests}, "the edited file is parsed again"
    assert any(m.name == "web-9" for m in second.manifests)
    parsed.forget_unused()
    third = validate_repo(repo, parsed=parsed)
    assert {id(m) for m in third.manifests} == {id(m) for m in second.manifests}


#: acme's network whose pair with initech's mirror hashes into the /30 that links globex's
#: corp to the mirror (block 14022 of 169.254.0.0/16), and sorts before it
EDGE = "edge5634"


def _acme_in_region_b(repo: Path) -> None:
    """acme may use region-b (a provider change, in the base only), has a network there,
    and initech has declared its side of a peering with it (pending)."""
    tenant = repo / "provider/tenants/acme.yaml"
    tenant.write_text(tenant.read_text().replace("regions: [region-a]",
                                                 "regions: [region-a, region-b]"))
    append_docs(repo, f"tenants/acme/{EDGE}.yaml", manifest(
        "VirtualNetwork", EDGE, {"region": "region-b", "ipv4Cidr": "10.77.0.0/16"}))
    append_docs(repo, "tenants/initech/mirror-edge.yaml", manifest(
        "VirtualNetworkPeering", "mirror-edge", {
            "virtualNetwork": "mirror", "peer": {"tenant": "acme", "virtualNetwork": EDGE}}))


def _acme_accepts(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    copy_checkout(EXAMPLE, repo)
    _acme_in_region_b(repo)
    git(repo, "init", "-q")
    commit_all(repo, "base")
    git(repo, "branch", "-q", "base")
    append_docs(repo, f"tenants/acme/{EDGE}.yaml", manifest(
        "VirtualNetworkPeering", "edge-mirror", {
            "virtualNetwork": EDGE, "peer": {"tenant": "initech", "virtualNetwork": "mirror"}}))
    commit_all(repo, "acme accepts")
    return repo


def test_a_new_peering_is_planned_with_every_link_it_moves(tmp_path: Path) -> None:
    """acme accepts initech's peering request: its pull request touches acme's folder, and
    initech's rows change (its new link). The link's /30 is derived from the pair, and a
    pair whose block one of its routers already uses takes the next free one in the order
    of the pairs: the new pair sorts first (acme < globex) and takes the block of globex's
    corp-mirror link, which moves to the next one. So globex's router port and route
    change too, and the scoped plan must render globex: it showed them up to date while
    the apply rewrote them."""
    repo = _acme_accepts(tmp_path)
    shared = ParsedFiles()
    head = validate_repo(repo, "HEAD", parsed=shared)
    base = validate_repo(repo, "base", parsed=shared)
    assert head.ok and base.ok
    # acme, its peer initech and initech's peer globex: every tenant of the example
    assert changed_tenants(base, head) is None
    whole = plan_between(validate_repo(repo, "base"), validate_repo(repo, "HEAD"), {})
    assert _comparable(plan_between(base, head, {})) == _comparable(whole)


@pytest.mark.xfail(strict=True, reason="a link's /30 is derived, not recorded: a new pair "
                   "that sorts first and hashes into a link's block moves that link")
def test_a_new_peering_moves_no_third_tenants_link(tmp_path: Path) -> None:
    """globex changes nothing and consents to nothing new when acme and initech peer: its
    link with initech should stay where it is (a public cloud's peering never renumbers
    another's; here acme chose a network name that hashes into globex's block)."""
    repo = _acme_accepts(tmp_path)
    whole = plan_between(validate_repo(repo, "base"), validate_repo(repo, "HEAD"), {})
    globex = sorted(r.address for r in whole.resources
                    if r.address.split("/")[1] == "globex" and r.action != "no-op")
    assert globex == [], globex


def test_a_request_never_answered_widens_no_plan(tmp_path: Path) -> None:
    """globex requests a peering with acme's network, which acme never answers: it links
    no routers, so a change of initech (globex's peer) is planned with globex, not with
    acme. (Following every declared side would let one tenant that requests peerings
    with everyone put everyone in every plan.)"""
    repo = tmp_path / "repo"
    copy_checkout(EXAMPLE, repo)
    _acme_in_region_b(repo)
    (repo / "tenants/initech/mirror-edge.yaml").unlink()
    append_docs(repo, "tenants/globex/edge.yaml", manifest(
        "VirtualNetworkPeering", "corp-edge", {
            "virtualNetwork": "corp", "peer": {"tenant": "acme", "virtualNetwork": EDGE}}))
    git(repo, "init", "-q")
    commit_all(repo, "base")
    git(repo, "branch", "-q", "base")
    _new_public_address(repo)
    commit_all(repo, "initech's new address")
    shared = ParsedFiles()
    head = validate_repo(repo, "HEAD", parsed=shared)
    base = validate_repo(repo, "base", parsed=shared)
    assert head.ok and base.ok
    assert changed_tenants(base, head) == frozenset({"globex", "initech"})
    whole = plan_between(validate_repo(repo, "base"), validate_repo(repo, "HEAD"), {})
    assert _comparable(plan_between(base, head, {})) == _comparable(whole)
