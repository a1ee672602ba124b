"""VirtualNetworkPeering: two networks routed to each other once both tenants declare it,
their security groups still deciding what passes, proven with ovn-trace both ways.

The example repo peers globex's corp (10.10.0.0/16) with initech's mirror
(192.168.16.0/20), both in region-b. The fixtures add a third network in region-b that
is peered with nobody, and a repo where initech alone declares its side.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from unet.reconciler.desired import render_desired
from unet.reconciler.reach import Reachability
from unet.reconciler.reach_query import ask
from unet.reconciler.validate import validate_repo

from .conftest import EXAMPLE, copy_checkout
from .support.trace import TCP, Fabric, append_docs, applied, delivered, dropped, manifest

#: a network of initech in region-b that is peered with nobody
THIRD = (manifest("VirtualNetwork", "scratch", {"region": "region-b",
                                                "ipv4Cidr": "192.168.64.0/20"}),
         manifest("Subnet", "scratch", {"virtualNetwork": "scratch",
                                        "ipv4Cidr": "192.168.64.0/24"}),
         manifest("SecurityGroup", "scratch", {
             "virtualNetwork": "scratch",
             "ingress": [{"protocol": "all", "cidr": "0.0.0.0/0"}],
             "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"}]}),
         manifest("ComputeInstance", "scratch-1", {
             "networkAttachments": [{"subnet": "scratch", "securityGroups": ["scratch"]}]}))


@pytest.fixture(scope="module")
def peered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    """The example, plus initech's scratch network in region-b, open to everything but
    peered with nobody."""
    root = tmp_path_factory.mktemp("trace-peering")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    append_docs(repo, "tenants/initech/scratch.yaml", *THIRD)
    with applied(root, repo) as fabric:
        yield fabric


def _repo(tmp_path: Path, *, drop: str | None = None, extra: dict[str, list[Any]] | None = None
          ) -> Path:
    repo = tmp_path / "repo"
    copy_checkout(EXAMPLE, repo)
    if drop is not None:
        (repo / drop).unlink()
    for rel, docs in (extra or {}).items():
        append_docs(repo, rel, *docs)
    return repo


# --- the wire ------------------------------------------------------------------------------------


def test_a_peer_groups_members_reach_the_mirror_and_nothing_else_does(peered: Fabric) -> None:
    """globex's app-1 (group app) opens tcp/443 to initech's mirror, routed from corp's
    router to mirror's over their link; tcp/22 is dropped by the mirror's group, and so
    is tcp/443 from db-metal, which is not in group app."""
    nb = peered.nb
    app1 = nb.port("globex", "ComputeInstance", "app-1")
    db = nb.port("globex", "BaremetalInstance", "db-metal")  # on data, group database
    mirror1 = nb.port("initech", "ComputeInstance", "artifact-mirror-1")
    assert mirror1.ip4 is not None
    https = peered.send(app1, nb.gateway("globex", "app").mac, mirror1.ip4, TCP.format(443))
    delivered(https, mirror1)
    assert {nb.row("Logical_Router/globex/corp")["name"],
            nb.row("Logical_Router/initech/mirror")["name"]} <= https.datapaths
    ssh = peered.send(app1, nb.gateway("globex", "app").mac, mirror1.ip4, TCP.format(22))
    dropped(ssh, "ls_out_acl", nb.row("Logical_Switch/initech/mirror")["name"])
    other = peered.send(db, nb.gateway("globex", "data").mac, mirror1.ip4, TCP.format(443))
    dropped(other, "ls_out_acl", nb.row("Logical_Switch/initech/mirror")["name"])


def test_the_other_way_the_peers_own_groups_decide(peered: Fabric) -> None:
    """From the mirror to corp: app-1's group admits tcp/8443 from 0.0.0.0/0, which now
    covers the mirror network; the database group admits only its own groups and the DR
    site, so tcp/5432 to db-metal is dropped at its port."""
    nb = peered.nb
    app1 = nb.port("globex", "ComputeInstance", "app-1")
    db = nb.port("globex", "BaremetalInstance", "db-metal")
    mirror1 = nb.port("initech", "ComputeInstance", "artifact-mirror-1")
    gateway = nb.gateway("initech", "mirror").mac
    assert app1.ip4 is not None and db.ip4 is not None
    delivered(peered.send(mirror1, gateway, app1.ip4, TCP.format(8443)), app1)
    dropped(peered.send(mirror1, gateway, db.ip4, TCP.format(5432)), "ls_out_acl",
            nb.row("Logical_Switch/globex/data")["name"])


def test_a_third_network_stays_apart(peered: Fabric) -> None:
    """scratch, in the same region and open to everything, is peered with nobody: its
    router has no route to either network, and neither has one to it."""
    nb = peered.nb
    scratch1 = nb.port("initech", "ComputeInstance", "scratch-1")
    mirror1 = nb.port("initech", "ComputeInstance", "artifact-mirror-1")
    app1 = nb.port("globex", "ComputeInstance", "app-1")
    assert scratch1.ip4 is not None and mirror1.ip4 is not None and app1.ip4 is not None
    mine = nb.row("Logical_Router/initech/scratch")["name"]
    for target in (mirror1, app1):
        assert target.ip4 is not None
        result = peered.send(scratch1, nb.gateway("initech", "scratch").mac, target.ip4,
                             TCP.format(443))
        assert target.name not in result.ports, result
        assert result.datapaths <= {mine, nb.row("Logical_Switch/initech/scratch")["name"]}, \
            result
    for source, subnet in ((mirror1, ("initech", "mirror")), (app1, ("globex", "app"))):
        result = peered.send(source, nb.gateway(*subnet).mac, scratch1.ip4, TCP.format(443))
        assert scratch1.name not in result.ports, result


def test_the_model_answers_as_the_wire(peered: Fabric) -> None:
    """`unet reach` agrees with the traces above."""
    head = validate_repo(peered.repo)
    desired = render_desired(head, {})
    reach = Reachability(desired.model, desired.allocations)
    cases = [("globex/app-1", "initech/artifact-mirror-1", "tcp/443", True),
             ("globex/app-1", "initech/artifact-mirror-1", "tcp/22", False),
             ("globex/db-metal/0", "initech/artifact-mirror-1", "tcp/443", False),
             ("globex/backup-1", "initech/artifact-mirror-1", "tcp/443", False),
             ("initech/artifact-mirror-1", "globex/app-1/0", "tcp/8443", True),
             ("initech/artifact-mirror-1", "globex/db-metal/0", "tcp/5432", False),
             ("initech/artifact-mirror-1", "globex/backup-1", "tcp/5432", False),
             ("initech/scratch-1", "initech/artifact-mirror-1", "tcp/443", False),
             ("initech/scratch-1", "globex/app-1", "tcp/8443", False)]
    for source, target, port, expected in cases:
        answer = ask(reach, source, target, port)
        assert answer.allowed is expected, (source, target, port, answer.because)


# --- one side, and what cannot peer -----------------------------------------------------------


def test_one_side_alone_is_pending_and_routes_nothing(tmp_path: Path) -> None:
    repo = _repo(tmp_path, drop="tenants/globex/peering.yaml")
    head = validate_repo(repo)
    assert [(d.code, d.file, d.line) for d in head.diagnostics
            if d.code.startswith("PEERING")] == [
        ("PEERING_PENDING", "tenants/initech/mirror.yaml", 30)]
    assert head.ok
    desired = render_desired(head, {})
    keys = [o.key for o in desired.objects if "peering" in o.key]
    assert keys == []
    reach = Reachability(desired.model, desired.allocations)
    assert not ask(reach, "globex/app-1", "initech/artifact-mirror-1", "tcp/443").allowed


def test_overlapping_networks_cannot_peer(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    mirror = repo / "tenants/initech/mirror.yaml"
    mirror.write_text(mirror.read_text().replace("192.168.16.0/20", "10.10.0.0/16")
                      .replace("192.168.16.0/24", "10.10.16.0/24"))
    tenant = repo / "provider/tenants/initech.yaml"
    docs = yaml.safe_load(tenant.read_text())
    docs["spec"]["allowedCidrs"] = ["10.0.0.0/8", "192.168.0.0/16"]
    tenant.write_text(yaml.safe_dump(docs))
    found = [d for d in validate_repo(repo).diagnostics if d.severity == "error"]
    assert [(d.code, d.file) for d in found] == [
        ("PEERING_CIDR_OVERLAP", "tenants/globex/peering.yaml"),
        ("PEERING_CIDR_OVERLAP", "tenants/initech/mirror.yaml")]
    assert all("10.10.0.0/16 and 10.10.0.0/16" in d.message and "globex/corp" in d.message
               and "initech/mirror" in d.message for d in found)


def test_a_network_on_hosting_clusters_cannot_peer_yet(tmp_path: Path) -> None:
    """acme's prod is of standard-a, which bridges to hosting clusters."""
    repo = _repo(tmp_path, extra={"tenants/initech/peer-acme.yaml": [
        manifest("VirtualNetworkPeering", "lab-acme", {
            "virtualNetwork": "lab", "peer": {"tenant": "acme", "virtualNetwork": "prod"}})]})
    found = validate_repo(repo).diagnostics
    assert [d.code for d in found if d.code.startswith("PEERING")] == ["PEERING_NOT_SUPPORTED"]


def test_a_changed_example_applies_once(peered: Fabric, tmp_path: Path) -> None:
    """Removing one side closes the link: the plan deletes that side's rows, and the
    other side's (owned by its own peering, now pending) too."""
    repo = tmp_path / "repo"
    shutil.copytree(peered.repo, repo)
    (repo / "tenants/globex/peering.yaml").unlink()
    head = validate_repo(repo)
    desired = render_desired(head, {})
    assert not [o for o in desired.objects if "/peering/" in o.key]
