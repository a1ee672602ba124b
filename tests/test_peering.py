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

from unet.managers.ovn.acls import acl_exposure
from unet.reconciler.desired import render_desired
from unet.reconciler.reach import Reachability
from unet.reconciler.reach_query import ask
from unet.reconciler.validate import validate_repo

from .conftest import EXAMPLE, copy_checkout
from .support.ovnrun import apply, assert_noop, northd_problems, ours, plan_json
from .support.trace import TCP, Fabric, append_docs, applied, delivered, dropped, manifest

#: a network of initech in region-b that is peered with nobody
THIRD = (manifest("VirtualNetwork", "scratch", {"region": "region-b",
                                                "ipv4Cidr": "192.168.64.0/20"}),
         manifest("Subnet", "scratch-hosts", {"virtualNetwork": "scratch",
                                              "ipv4Cidr": "192.168.64.0/24"}),
         manifest("SecurityGroup", "scratch", {
             "virtualNetwork": "scratch",
             "ingress": [{"protocol": "all", "cidr": "0.0.0.0/0"}],
             "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"}]}),
         manifest("ComputeInstance", "scratch-1", {
             "networkAttachments": [{"subnet": "scratch-hosts", "securityGroups": ["scratch"]}]}))


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


#: two dual-stack networks of initech in region-b, peered within the tenant (no
#: `peer.tenant`): a's group admits ssh from b's group through the peering, b's group
#: admits https from a's CIDRs
DUAL = (
    *(doc for name, number in (("a", 32), ("b", 48)) for doc in (
        manifest("VirtualNetwork", f"dual-{name}", {
            "region": "region-b", "ipv4Cidr": f"192.168.{number}.0/20",
            "ipv6Cidr": f"fd20:{number}::/48"}),
        manifest("Subnet", f"dual-{name}-hosts", {
            "virtualNetwork": f"dual-{name}", "ipv4Cidr": f"192.168.{number}.0/24",
            "ipv6Cidr": f"fd20:{number}:0:1::/64"}),
        manifest("ComputeInstance", f"dual-{name}-1", {"networkAttachments": [
            {"subnet": f"dual-{name}-hosts", "securityGroups": [f"dual-{name}"]}]}))),
    # c is peered with b only: peering is not transitive, a and c stay apart
    manifest("VirtualNetwork", "dual-c", {"region": "region-b", "ipv4Cidr": "192.168.80.0/20",
                                          "ipv6Cidr": "fd20:80::/48"}),
    manifest("Subnet", "dual-c-hosts", {"virtualNetwork": "dual-c",
                                        "ipv4Cidr": "192.168.80.0/24",
                                        "ipv6Cidr": "fd20:80:0:1::/64"}),
    manifest("SecurityGroup", "dual-c", {
        "virtualNetwork": "dual-c", "ingress": [{"protocol": "all", "cidr": "0.0.0.0/0"},
                                                {"protocol": "all", "cidr": "::/0"}],
        "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"},
                   {"protocol": "all", "cidr": "::/0"}]}),
    manifest("ComputeInstance", "dual-c-1", {"networkAttachments": [
        {"subnet": "dual-c-hosts", "securityGroups": ["dual-c"]}]}),
    manifest("VirtualNetworkPeering", "b-c", {"virtualNetwork": "dual-b",
                                              "peer": {"virtualNetwork": "dual-c"}}),
    manifest("VirtualNetworkPeering", "c-b", {"virtualNetwork": "dual-c",
                                              "peer": {"virtualNetwork": "dual-b"}}),
    manifest("VirtualNetworkPeering", "a-b", {"virtualNetwork": "dual-a",
                                              "peer": {"virtualNetwork": "dual-b"}}),
    manifest("VirtualNetworkPeering", "b-a", {"virtualNetwork": "dual-b",
                                              "peer": {"virtualNetwork": "dual-a"}}),
    manifest("SecurityGroup", "dual-a", {
        "virtualNetwork": "dual-a",
        "ingress": [{"protocol": "tcp", "portFrom": 22, "portTo": 22,
                     "securityGroup": "dual-b", "peering": "a-b"}],
        "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"},
                   {"protocol": "all", "cidr": "::/0"}]}),
    manifest("SecurityGroup", "dual-b", {
        "virtualNetwork": "dual-b",
        "ingress": [{"protocol": "tcp", "portFrom": 443, "portTo": 443,
                     "cidr": "192.168.32.0/20"},
                    {"protocol": "tcp", "portFrom": 443, "portTo": 443,
                     "cidr": "fd20:32::/48"}],
        "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"},
                   {"protocol": "all", "cidr": "::/0"}]}))


@pytest.fixture(scope="module")
def dual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fabric]:
    root = tmp_path_factory.mktemp("trace-peering-dual")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    append_docs(repo, "tenants/initech/dual.yaml", *DUAL)
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
    dropped(ssh, "ls_out_acl", nb.row("Logical_Switch/initech/artifacts")["name"])
    other = peered.send(db, nb.gateway("globex", "data").mac, mirror1.ip4, TCP.format(443))
    dropped(other, "ls_out_acl", nb.row("Logical_Switch/initech/artifacts")["name"])


def test_the_other_way_the_peers_own_groups_decide(peered: Fabric) -> None:
    """From the mirror to corp: app-1's group admits tcp/8443 from 0.0.0.0/0, which now
    covers the mirror network; the database group admits only its own groups and the DR
    site, so tcp/5432 to db-metal is dropped at its port."""
    nb = peered.nb
    app1 = nb.port("globex", "ComputeInstance", "app-1")
    db = nb.port("globex", "BaremetalInstance", "db-metal")
    mirror1 = nb.port("initech", "ComputeInstance", "artifact-mirror-1")
    gateway = nb.gateway("initech", "artifacts").mac
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
        result = peered.send(scratch1, nb.gateway("initech", "scratch-hosts").mac, target.ip4,
                             TCP.format(443))
        assert target.name not in result.ports, result
        assert result.datapaths <= {mine, nb.row("Logical_Switch/initech/scratch-hosts")["name"]}, \
            result
    for source, subnet in ((mirror1, ("initech", "artifacts")), (app1, ("globex", "app"))):
        result = peered.send(source, nb.gateway(*subnet).mac, scratch1.ip4, TCP.format(443))
        assert scratch1.name not in result.ports, result


def test_a_peers_unused_addresses_do_not_lead_to_its_way_out(peered: Fabric) -> None:
    """corp's subnets hold 10.10.1-3.0/24 of its 10.10.0.0/16. The mirror is routed to
    those subnets only: a packet to 10.10.200.5 never reaches corp's router, whose default
    route would send it out through globex's gateway, untranslated (the peer's way out is
    not shared: docs/api.md)."""
    nb = peered.nb
    mirror1 = nb.port("initech", "ComputeInstance", "artifact-mirror-1")
    trace = peered.send(mirror1, nb.gateway("initech", "artifacts").mac, "10.10.200.5",
                        TCP.format(443))
    assert not [p for p in trace.ports if p.startswith("upstream.")], trace.ports


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


@pytest.mark.parametrize("family", [4, 6])
def test_both_families_are_routed_and_filtered_both_ways(dual: Fabric, family: int) -> None:
    """a → b: https admitted by b's CIDR rule, ssh dropped at b's port; b → a: ssh admitted
    by a's rule naming b's group through the peering (IPv6: routed to the peer port's
    link-local address), https dropped at a's port."""
    nb = dual.nb
    a1 = nb.port("initech", "ComputeInstance", "dual-a-1")
    b1 = nb.port("initech", "ComputeInstance", "dual-b-1")
    gateways = {name: nb.gateway("initech", f"dual-{name}-hosts").mac for name in "ab"}

    def to(port: Any) -> str:
        address = port.ip4 if family == 4 else port.ip6
        assert address is not None
        return str(address)

    delivered(dual.send(a1, gateways["a"], to(b1), TCP.format(443)), b1)
    dropped(dual.send(a1, gateways["a"], to(b1), TCP.format(22)), "ls_out_acl",
            nb.row("Logical_Switch/initech/dual-b-hosts")["name"])
    delivered(dual.send(b1, gateways["b"], to(a1), TCP.format(22)), a1)
    dropped(dual.send(b1, gateways["b"], to(a1), TCP.format(443)), "ls_out_acl",
            nb.row("Logical_Switch/initech/dual-a-hosts")["name"])


@pytest.mark.parametrize("family", [4, 6])
def test_peering_is_not_transitive(dual: Fabric, family: int) -> None:
    """a and c are both peered with b, not with each other: c, open to everything, is
    not reached from a (a's router has no route to it), and b still is."""
    nb = dual.nb
    a1 = nb.port("initech", "ComputeInstance", "dual-a-1")
    b1 = nb.port("initech", "ComputeInstance", "dual-b-1")
    c1 = nb.port("initech", "ComputeInstance", "dual-c-1")
    gateway = nb.gateway("initech", "dual-a-hosts").mac
    to_c = c1.ip4 if family == 4 else c1.ip6
    to_b = b1.ip4 if family == 4 else b1.ip6
    assert to_c is not None and to_b is not None
    assert c1.name not in dual.send(a1, gateway, to_c, TCP.format(443)).ports
    delivered(dual.send(a1, gateway, to_b, TCP.format(443)), b1)
    desired = render_desired(validate_repo(dual.repo), {})
    reach = Reachability(desired.model, desired.allocations)
    assert not ask(reach, "initech/dual-a-1", "initech/dual-c-1", "tcp/443").allowed
    assert ask(reach, "initech/dual-b-1", "initech/dual-c-1", "tcp/443").allowed


def test_a_peering_applies_once_and_northd_takes_it(dual: Fabric) -> None:
    assert_noop(dual.repo, dual.repo)
    assert northd_problems(dual.lab) == []


def test_removing_one_side_takes_the_link_down(dual: Fabric, tmp_path: Path) -> None:
    """Both sides' link rows go in one apply (the other side is pending now); a second
    plan has nothing left to do. Then the side comes back, and the link with it."""
    def links() -> list[str]:
        return sorted(key for table in ("Logical_Router_Port", "Logical_Router_Static_Route")
                      for r in ours(dual.lab.nb_remote, table, "example")
                      if "/dual-a" in (key := r["external_ids"]["unet:key"])
                      and "/peering/" in key)

    both = links()
    assert len(both) == 6, both  # per side: a port and a route per family
    docs = dual.repo / "tenants/initech/dual.yaml"
    text = docs.read_text()
    kept = [d for d in yaml.safe_load_all(text) if d and d["metadata"]["name"] != "b-a"]
    docs.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    try:
        _code, doc = plan_json(dual.repo, dual.repo)
        actions = {r["address"]: (r["actions"], r["reason"]) for r in doc["resources"]
                   if r["address"].startswith("VirtualNetworkPeering/initech/")
                   and r["actions"] != ["no-op"]}
        assert actions == {  # the side that stays is not "deleted": it is pending
            "VirtualNetworkPeering/initech/a-b": (
                ["update"], "in the repo, with nothing to realise now: its backend rows go"),
            "VirtualNetworkPeering/initech/b-a": (["delete"], "no longer in the repo")}
        result = apply(dual.repo, dual.repo)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "PEERING_PENDING" in result.stdout + result.stderr
        assert_noop(dual.repo, dual.repo)
        assert links() == []
    finally:
        docs.write_text(text)
        result = apply(dual.repo, dual.repo)
        assert result.returncode == 0, result.stdout + result.stderr
    assert_noop(dual.repo, dual.repo)
    assert links() == both


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


def test_every_pending_peering_says_so_not_only_the_first_of_a_tenant(
        tmp_path: Path) -> None:
    """With globex's side gone, initech's request to it is pending; a second peering of
    initech's, between two of its own networks and one-sided, is pending too and must say
    so (a warning of the first made every later one of the tenant silent)."""
    repo = _repo(tmp_path, drop="tenants/globex/peering.yaml", extra={
        "tenants/initech/mirror.yaml": [  # after the first: they were read in this order
            manifest("VirtualNetwork", "lab2", {"region": "region-b",
                                                "ipv4Cidr": "192.168.200.0/24"}),
            manifest("VirtualNetworkPeering", "lab2-mirror", {
                "virtualNetwork": "lab2", "peer": {"virtualNetwork": "mirror"}})]})
    pending = sorted((d.file, d.message) for d in validate_repo(repo).diagnostics
                     if d.code == "PEERING_PENDING")
    assert len(pending) == 2, pending
    assert any("between initech/lab2 and initech/mirror" in message
               for _file, message in pending), pending


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


def _mirror_rule(repo: Path, rule: dict[str, Any]) -> None:
    """The example with the mirror group's ingress rule replaced by `rule`."""
    path = repo / "tenants/initech/mirror.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    group = next(d for d in docs if d["kind"] == "SecurityGroup")
    group["spec"]["ingress"] = [rule]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


@pytest.mark.parametrize(("rule", "code", "words"), [
    ({"protocol": "tcp", "cidr": "10.10.0.0/16", "peering": "mirror-globex"},
     "PEERING_INVALID", "give securityGroup too"),
    ({"protocol": "tcp", "securityGroup": "app", "peering": "nothing"},
     "REF_NOT_FOUND", "no VirtualNetworkPeering named 'nothing'"),
    ({"protocol": "tcp", "securityGroup": "apps", "peering": "mirror-globex"},  # stale
     "RULE_NO_EFFECT", "the peer network globex/corp has no SecurityGroup 'apps'"),
    ({"protocol": "tcp", "securityGroup": "app"},  # no peering: a group of mirror itself
     "REF_NOT_FOUND", "no SecurityGroup named 'app' in tenant initech"),
])
def test_a_rule_names_a_peer_group_only_through_its_peering(
        tmp_path: Path, rule: dict[str, Any], code: str, words: str) -> None:
    repo = _repo(tmp_path)
    _mirror_rule(repo, rule)
    diagnostics = validate_repo(repo).diagnostics
    found = [d for d in diagnostics if d.is_error or d.code == code]
    assert [(d.code, d.file) for d in found] == [(code, "tenants/initech/mirror.yaml")], found
    assert words in found[0].message


def test_a_rule_through_another_networks_peering_is_refused(tmp_path: Path) -> None:
    """lab's group may not use mirror's peering."""
    repo = _repo(tmp_path, extra={"tenants/initech/lab-group.yaml": [
        manifest("SecurityGroup", "lab-web", {"virtualNetwork": "lab", "ingress": [
            {"protocol": "tcp", "securityGroup": "app", "peering": "mirror-globex"}]})]})
    found = [d for d in validate_repo(repo).diagnostics if d.is_error]
    assert [d.code for d in found] == ["PEERING_INVALID"]
    assert "peers VirtualNetwork 'mirror', not this group's 'lab'" in found[0].message


def test_a_pending_peerings_group_rule_writes_nothing(tmp_path: Path) -> None:
    repo = _repo(tmp_path, drop="tenants/globex/peering.yaml")
    desired = render_desired(validate_repo(repo), {})
    mirror = [o.fields["match"] for o in desired.objects if o.table == "ACL"
              and "@unet.initech.mirror.mirror " in o.fields["match"]]
    assert mirror and not [m for m in mirror if "$unet.globex" in m]
    established = render_desired(validate_repo(_repo(tmp_path / "both")), {})
    assert [o for o in established.objects if o.table == "ACL"
            and "@unet.initech.mirror.mirror " in o.fields["match"]
            and "$unet.globex.corp.app_ip4" in o.fields["match"]]


def test_a_pair_is_peered_once_per_side_and_in_one_region(tmp_path: Path) -> None:
    twice = _repo(tmp_path / "twice", extra={"tenants/globex/peering.yaml": [
        manifest("VirtualNetworkPeering", "again", {
            "virtualNetwork": "corp", "peer": {"tenant": "initech",
                                               "virtualNetwork": "mirror"}})]})
    found = [d for d in validate_repo(twice).diagnostics if d.is_error]
    assert [d.code for d in found] == ["PEERING_INVALID"]
    assert "already peered with initech/mirror by VirtualNetworkPeering" in found[0].message
    regions = _repo(tmp_path / "regions", extra={"tenants/initech/lab-peer.yaml": [
        manifest("VirtualNetworkPeering", "lab-corp", {
            "virtualNetwork": "lab", "peer": {"tenant": "globex", "virtualNetwork": "corp"}})]})
    found = [d for d in validate_repo(regions).diagnostics if d.is_error]
    assert [d.code for d in found] == ["PEERING_REGION_MISMATCH"]
    assert "initech/lab and globex/corp are in regions region-a and region-b" in \
        found[0].message


def test_the_exposure_tells_a_peer_group_from_the_networks_own_members() -> None:
    """A rule naming a peered network's group opens the group to that network; one naming
    a group of its own network (with members on a hosting cluster) opens nothing outside."""
    def opened(match: str, group: str) -> str | None:
        return acl_exposure({"direction": "to-lport", "action": "allow-related",
                             "match": match}, group, [])
    assert opened("outport == @unet.initech.mirror.mirror && ip4 && ip4.src == "
                  "$unet.globex.corp.app_ip4 && tcp.dst == 443", "initech/mirror/mirror") == \
        "tcp port 443 from the members of unet.globex.corp.app (a peered network's group) " \
        "to initech/mirror/mirror"
    assert opened("outport == @unet.acme.prod.db && ip4 && ip4.src == {$unet.acme.prod.web_ip4,"
                  "$unet_hosted.acme.web_k1.0_ip4} && tcp.dst == 5432", "acme/prod/db") is None


def test_a_class_without_the_capability_cannot_peer(tmp_path: Path) -> None:
    """A fabric plugin that does not provide VirtualNetworkPeerings (or a class that
    disables it) would leave a peering unrealised: refused on each side."""
    repo = _repo(tmp_path)
    classes = repo / "provider/classes.yaml"
    classes.write_text(classes.read_text().replace(
        "  region: region-b\n  default: true\n",
        "  region: region-b\n  default: true\n  disableCapabilities: [VirtualNetworkPeerings]\n"))
    found = [d for d in validate_repo(repo).diagnostics if d.is_error]
    assert sorted((d.code, d.file) for d in found) == [
        ("CAPABILITY_MISSING", "tenants/globex/peering.yaml"),
        ("CAPABILITY_MISSING", "tenants/initech/mirror.yaml")]
    assert "VirtualNetworkPeerings" in found[0].message


def test_two_peers_of_one_network_must_not_overlap(tmp_path: Path) -> None:
    """mirror peered with corp (10.10.0.0/16) and with a second network of 10.10.0.0/16:
    mirror's router would have two routes to one prefix."""
    repo = _repo(tmp_path, extra={"tenants/initech/twin.yaml": [
        manifest("VirtualNetwork", "twin", {"region": "region-b",
                                            "ipv4Cidr": "10.10.0.0/16"}),
        manifest("VirtualNetworkPeering", "mirror-twin", {
            "virtualNetwork": "mirror", "peer": {"virtualNetwork": "twin"}}),
        manifest("VirtualNetworkPeering", "twin-mirror", {
            "virtualNetwork": "twin", "peer": {"virtualNetwork": "mirror"}})]})
    tenant = repo / "provider/tenants/initech.yaml"
    docs = yaml.safe_load(tenant.read_text())
    docs["spec"]["allowedCidrs"] = ["10.0.0.0/8", "192.168.0.0/16"]
    tenant.write_text(yaml.safe_dump(docs))
    found = [d for d in validate_repo(repo).diagnostics if d.is_error]
    assert [(d.code, d.file) for d in found] == [
        ("PEERING_CIDR_OVERLAP", "tenants/initech/twin.yaml")]
    assert "initech/twin (10.10.0.0/16) overlaps globex/corp (10.10.0.0/16)" in \
        found[0].message


def _request_to_scratch(tmp_path: Path) -> Path:
    """initech's scratch network (and group) in region-b; globex requests a peering with it,
    and names its group in a rule, which initech never answers."""
    return _repo(tmp_path, extra={
        "tenants/initech/scratch.yaml": list(THIRD),
        "tenants/globex/request.yaml": [
            manifest("VirtualNetworkPeering", "corp-scratch", {
                "virtualNetwork": "corp",
                "peer": {"tenant": "initech", "virtualNetwork": "scratch"}}),
            manifest("SecurityGroup", "from-scratch", {"virtualNetwork": "corp", "ingress": [
                {"protocol": "tcp", "securityGroup": "scratch", "peering": "corp-scratch"}]})]})


@pytest.mark.parametrize("removed", ["network", "group"])
def test_a_request_never_answered_keeps_no_tenant_from_removing_its_own(
        tmp_path: Path, removed: str) -> None:
    """globex, without initech's consent, names initech's scratch network and its group
    scratch. initech then removes the network, or the group: its own, in its own folder,
    and a pull request that only initech's owners approve. That must not be refused by an
    error in globex's folder, which initech cannot edit (REF_NOT_FOUND in
    tenants/globex/request.yaml did: a tenant pinned another's networks and groups in
    place by requesting a peering). As a VPC peering request that is never accepted: the
    request waits (PEERING_PENDING says that the network is not there), the accepter's
    VPC is its own to delete."""
    repo = _request_to_scratch(tmp_path)
    head = validate_repo(repo)
    assert head.ok, [d for d in head.diagnostics if d.is_error]
    path = repo / "tenants/initech/scratch.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    gone = {"network": {"VirtualNetwork", "Subnet", "SecurityGroup", "ComputeInstance"},
            "group": {"SecurityGroup"}}[removed]
    kept = [d for d in docs if d["kind"] not in gone]
    if removed == "group":  # scratch-1 in the implicit default group instead
        for d in kept:
            if d["kind"] == "ComputeInstance":
                del d["spec"]["networkAttachments"][0]["securityGroups"]
    if kept:
        path.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    else:
        path.unlink()
    head = validate_repo(repo)
    assert [d for d in head.diagnostics if d.is_error] == []
    pending = [(d.code, d.file, d.message) for d in head.diagnostics
               if d.code == "PEERING_PENDING"]
    words = "declares no VirtualNetwork 'scratch'" if removed == "network" else \
        "has not declared the other side"
    assert [(c, f) for c, f, _m in pending] == [
        ("PEERING_PENDING", "tenants/globex/request.yaml")], pending
    assert words in pending[0][2]
    desired = render_desired(head, {})
    assert not [o for o in desired.objects if "peering/initech/scratch" in o.key]
    assert not [o for o in desired.objects if o.table == "ACL" and "initech" in
                o.fields["match"] and "@unet.globex.corp.from-scratch" in o.fields["match"]]


def test_a_misspelt_peer_of_ones_own_tenant_is_still_an_error(tmp_path: Path) -> None:
    """Two networks of one tenant have one owner: a misspelt name is REF_NOT_FOUND."""
    repo = _repo(tmp_path, extra={"tenants/initech/self.yaml": [
        manifest("VirtualNetworkPeering", "mirror-scratch", {
            "virtualNetwork": "mirror", "peer": {"virtualNetwork": "scrach"}})]})
    found = [(d.code, d.file) for d in validate_repo(repo).diagnostics if d.is_error]
    assert found == [("REF_NOT_FOUND", "tenants/initech/self.yaml")]


def test_a_tenant_is_removed_whatever_peerings_name_it(tmp_path: Path) -> None:
    """The provider offboards initech (its folder and its Tenant). globex's side of their
    peering stays in tenants/globex/, which the provider's owners do not approve: it must
    not make the provider's removal an error there (REF_NOT_FOUND on `peer.tenant` did).
    It waits, PEERING_PENDING saying there is no such tenant, until globex removes it; its
    rows go in the same apply as initech's."""
    repo = _repo(tmp_path)
    shutil.rmtree(repo / "tenants/initech")
    (repo / "provider/tenants/initech.yaml").unlink()
    head = validate_repo(repo)
    assert [d for d in head.diagnostics if d.is_error] == []
    pending = [(d.code, d.file, d.message, d.hint) for d in head.diagnostics
               if d.code.startswith("PEERING")]
    assert pending == [("PEERING_PENDING", "tenants/globex/peering.yaml",
                        "peering pending: there is no tenant initech; nothing is routed",
                        "check the name; remove this peering if the tenant is gone")]
    assert not [o for o in render_desired(head, {}).objects if "peering" in o.key]


def test_a_peer_removes_its_own_group_that_a_peering_rule_names(tmp_path: Path) -> None:
    """initech's mirror group admits globex's group app through their peering. globex
    moves its app-1 to another group and removes app, in its own folder: refused, by an
    error in tenants/initech/, which globex cannot edit (its only way out is to end the
    peering first, cutting the traffic). As AWS lets the peer delete a referenced group,
    the rule going stale (describe-stale-security-groups), the rule admits nothing, with a
    warning (RULE_NO_EFFECT) in initech's file, and renders no ACL."""
    repo = _repo(tmp_path)
    for rel in ("tenants/globex/security-groups.yaml", "tenants/globex/compute.yaml"):
        path = repo / rel
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        kept = [d for d in docs
                if not (d["kind"] == "SecurityGroup" and d["metadata"]["name"] == "app")]
        for d in kept:
            if d["kind"] == "SecurityGroup":  # globex's own rules naming app go too
                d["spec"]["ingress"] = [r for r in d["spec"].get("ingress", [])
                                        if r.get("securityGroup") != "app"]
            for attachment in d["spec"].get("networkAttachments", []):
                if attachment.get("securityGroups") == ["app"]:
                    attachment["securityGroups"] = ["database"]
        path.write_text(yaml.safe_dump_all(kept, sort_keys=False))
    head = validate_repo(repo)
    found = [(d.code, d.file) for d in head.diagnostics if d.is_error]
    assert found == [], found
    stale = [d for d in head.diagnostics if d.code == "RULE_NO_EFFECT"]
    assert [(d.file, "globex/corp has no SecurityGroup 'app'" in d.message)
            for d in stale] == [("tenants/initech/mirror.yaml", True)], stale
    acls = [o for o in render_desired(head, {}).objects if o.table == "ACL"]
    assert acls and not [o for o in acls if "$unet.globex.corp.app_" in o.fields["match"]]
