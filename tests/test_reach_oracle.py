"""The reachability model (reconciler/reach.py, reach_query.py) against ovn-trace.

Hypothesis writes small random repos (one or two tenants, networks, subnets with and
without gateways, workloads with one or two NICs (a Cluster among them, whose primary NIC,
holding its VIPs, may be its second), security groups with random rules whose
remotes are CIDRs or groups, the implicit `default` group, external addresses with and
without port forwards, NAT gateways, a peering of two networks on one or both sides with
a rule naming a peer's group), unet applies each to a real Northbound, and for many
questions per repo the model's `allowed` must be what ovn-trace says a first packet
(`--ct=new`) does: NIC to NIC inside a network and across two (peered or not), the
internet to a NIC through its public address, and a NIC to the internet.

One apply per example (about a second); shrinking is off by default, as each step would
apply again: set UNET_REACH_SHRINK=1 to find a minimal repo for a disagreement.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from unet.reconciler.desired import render_desired
from unet.reconciler.reach import Reachability
from unet.reconciler.reach_query import ask
from unet.reconciler.validate import validate_repo

from .support.trace import (
    API,
    OUTSIDE,
    Fabric,
    Port,
    applied,
    inbound,
    learn_neighbours,
    manifest,
)

REGION = "r1"
POOL = "203.0.113.0/24"
OFFICE = "192.0.2.10"  # a source inside a rule's remote 192.0.2.0/24, outside every network
OUTSIDE_CIDRS = ("198.18.0.0/15", "192.0.2.0/24")  # remotes holding OUTSIDE and OFFICE
PORTS = (22, 80, 443, 5432, 8443, 1500)
EXAMPLES = int(os.environ.get("UNET_REACH_EXAMPLES", "15"))
PHASES = tuple(Phase) if os.environ.get("UNET_REACH_SHRINK") else \
    (Phase.explicit, Phase.reuse, Phase.generate)


# --- random repos ------------------------------------------------------------------------------


@dataclass
class Net:
    """One VirtualNetwork as generated: what questions need to know of it."""

    tenant: str
    name: str
    number: int
    dual: bool
    subnets: list[str]
    groups: list[str]
    workloads: dict[str, int]  # name → number of NICs
    public: list[str] = field(default_factory=list)  # ExternalIPs attached to its workloads
    primary: dict[str, int] = field(default_factory=dict)  # name → its primary NIC


@dataclass
class Repo:
    files: dict[str, list[dict[str, Any]]]
    nets: list[Net]
    public: dict[tuple[str, str], str]  # (tenant, ExternalIP) → target workload
    #: (tenant, ExternalIP) → the network of its target
    homes: dict[tuple[str, str], str] = field(default_factory=dict)

    def text(self) -> str:
        return "\n".join(f"# {rel}\n" + yaml.safe_dump_all(docs, sort_keys=False)
                         for rel, docs in sorted(self.files.items()))

    def write(self, root: Path) -> None:
        for rel, docs in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def _provider(tenants: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {
        "unet.yaml": [{"apiVersion": API, "kind": "RepositoryConfig",
                       "metadata": {"name": "oracle"},
                       "spec": {"installation": "oracle", "prune": True}}],
        "provider/managers.yaml": [manifest("NetworkManager", "ovn", {
            "role": "fabric", "plugin": "ovn", "regions": [REGION],
            "config": {"northbound": "embedded"}})],
        "provider/classes.yaml": [manifest("NetworkClass", "fabric", {
            "region": REGION, "default": True, "fabricManager": "ovn"})],
        "provider/pools.yaml": [manifest("ExternalIPPool", "public", {
            "region": REGION, "cidr": POOL, "gateway": "203.0.113.1"})],
        **{f"provider/tenants/{t}.yaml": [manifest("Tenant", t, {"regions": [REGION]})]
           for t in tenants}}


def _cidrs(net: Net) -> tuple[str, str | None]:
    return f"10.{net.number}.0.0/16", (f"fd00:{net.number}::/48" if net.dual else None)


@st.composite
def _rule(draw: st.DrawFn, net: Net) -> dict[str, Any]:
    protocol = draw(st.sampled_from(("tcp", "tcp", "udp", "icmp", "all")))
    rule: dict[str, Any] = {"protocol": protocol}
    if protocol in ("tcp", "udp") and draw(st.booleans()):
        low = draw(st.sampled_from(PORTS))
        high = draw(st.sampled_from((low, low, low + 1000)))
        rule.update(portFrom=low, portTo=high)
    if protocol == "icmp" and draw(st.booleans()):
        rule["icmpType"] = 8  # echo request: ICMPv4 only
    v4, v6 = _cidrs(net)
    remotes: list[dict[str, str]] = [{"cidr": c} for c in (
        "0.0.0.0/0", "0.0.0.0/0", v4, f"10.{net.number}.1.0/24", f"10.{net.number}.2.0/25",
        POOL, *OUTSIDE_CIDRS)]
    remotes += [{"securityGroup": g} for g in (*net.groups, "default")]
    if v6 is not None and "icmpType" not in rule:
        remotes += [{"cidr": "::/0"}, {"cidr": v6}]
    rule.update(draw(st.sampled_from(remotes)))
    return rule


def _unique(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Without duplicates (an error): one rule per identity."""
    seen: dict[str, dict[str, Any]] = {}
    for rule in rules:
        seen.setdefault(yaml.safe_dump(rule, sort_keys=True), rule)
    return list(seen.values())


@st.composite
def _groups(draw: st.DrawFn, net: Net) -> list[dict[str, Any]]:
    docs = []
    for group in net.groups:
        ingress = _unique(draw(st.lists(_rule(net), min_size=1, max_size=3)))
        egress = _unique(draw(st.lists(_rule(net), max_size=2)))
        docs.append(manifest("SecurityGroup", group, {
            "virtualNetwork": net.name, "ingress": ingress, "egress": egress}))
    return docs


@st.composite
def _subnets(draw: st.DrawFn, net: Net) -> tuple[list[dict[str, Any]], set[str]]:
    """The subnets, and those with an IPv4 gateway."""
    docs, routed = [], set()
    for index, name in enumerate(net.subnets, start=1):
        spec: dict[str, Any] = {"virtualNetwork": net.name,
                                "ipv4Cidr": f"10.{net.number}.{index}.0/24"}
        if net.dual:
            spec["ipv6Cidr"] = f"fd00:{net.number}:0:{index}::/64"
            if draw(st.integers(0, 4)) == 0:
                spec["ipv6Gateway"] = None
        if index > 1 and draw(st.integers(0, 2)) == 0:
            spec["gateway"] = None
        else:
            routed.add(name)
        docs.append(manifest("Subnet", name, spec))
    return docs, routed


@st.composite
def _workloads(draw: st.DrawFn, net: Net) -> list[dict[str, Any]]:
    """VMs (`-w`), and maybe a Cluster (`-k0`) whose primary NIC, holding its VIPs, may be
    its second one."""
    docs = []
    names = [f"{net.name}-w{i}" for i in range(draw(st.integers(1, 3)))]
    names += [f"{net.name}-k0"] * draw(st.integers(0, 1))
    for name in names:
        attachments = []
        for subnet in draw(st.lists(st.sampled_from(net.subnets), min_size=1, max_size=2)):
            attachment: dict[str, Any] = {"subnet": subnet}
            groups = draw(st.lists(st.sampled_from((*net.groups, "default")), max_size=2,
                                   unique=True))
            if groups:
                attachment["securityGroups"] = groups
            attachments.append(attachment)
        primary = draw(st.integers(0, len(attachments) - 1)) if _kind(name) == "Cluster" \
            else 0
        if len(attachments) > 1:
            attachments[primary]["primary"] = True
        net.workloads[name] = len(attachments)
        net.primary[name] = primary
        docs.append(manifest(_kind(name), name, {"networkAttachments": attachments}))
    return docs


def _kind(workload: str) -> str:
    return "Cluster" if workload.rsplit("-", 1)[-1].startswith("k") else "ComputeInstance"


@st.composite
def _external(draw: st.DrawFn, net: Net, workloads: list[dict[str, Any]],
              routed: set[str], public: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Maybe a NATGateway; maybe an attachment to a workload whose primary subnet is
    routed in IPv4 (with or without port forwards)."""
    docs = []
    if draw(st.booleans()):
        docs += [manifest("ExternalIP", f"{net.name}-nat", {"pool": "public"}),
                 manifest("NATGateway", net.name, {"virtualNetwork": net.name,
                                                   "externalIP": f"{net.name}-nat"})]
    targets = [w["metadata"]["name"] for w in workloads if w["spec"]["networkAttachments"][
        net.primary[w["metadata"]["name"]]]["subnet"] in routed]
    if targets and draw(st.booleans()):
        target, name = draw(st.sampled_from(targets)), f"{net.name}-pub"
        spec: dict[str, Any] = {"externalIP": name,
                                "target": {"kind": _kind(target), "name": target}}
        if _kind(target) == "Cluster":
            spec["target"]["endpoint"] = draw(st.sampled_from(("api", "ingress")))
        if draw(st.booleans()):
            spec["ports"] = [{"protocol": draw(st.sampled_from(("tcp", "udp"))),
                              "externalPort": external, "internalPort": internal}
                             for external, internal in draw(st.lists(st.tuples(
                                 st.sampled_from(PORTS), st.sampled_from(PORTS)),
                                 min_size=1, max_size=2, unique_by=lambda p: p[0]))]
        docs += [manifest("ExternalIP", name, {"pool": "public"}),
                 manifest("ExternalIPAttachment", name, spec)]
        public[(net.tenant, name)] = target
        net.public.append(name)
    return docs


@st.composite
def repos(draw: st.DrawFn) -> Repo:
    tenants = [f"t{i}" for i in range(1, draw(st.integers(1, 2)) + 1)]
    files = _provider(tenants)
    nets: list[Net] = []
    public: dict[tuple[str, str], str] = {}
    for tenant in tenants:
        for index in range(draw(st.integers(1, 2))):
            # a second tenant's network may have the first one's CIDRs (isolated: allowed)
            number = draw(st.sampled_from(sorted({len(nets) + 1, index + 1})))
            name = "ab"[index] + "net"
            net = Net(tenant, name, number, draw(st.booleans()),
                      [f"{name}-s{s}" for s in range(1, draw(st.integers(1, 3)) + 1)],
                      [f"{name}-g{g}" for g in range(draw(st.integers(0, 2)))], {})
            v4, v6 = _cidrs(net)
            subnets, routed = draw(_subnets(net))
            workloads = draw(_workloads(net))
            prefix = f"tenants/{tenant}/{name}"
            files[f"{prefix}/network.yaml"] = [manifest("VirtualNetwork", name, {
                "region": REGION, "ipv4Cidr": v4, **({"ipv6Cidr": v6} if v6 else {})}),
                *subnets]
            files[f"{prefix}/groups.yaml"] = draw(_groups(net)) or []
            files[f"{prefix}/workloads.yaml"] = workloads
            files[f"{prefix}/external.yaml"] = draw(_external(net, workloads, routed, public))
            nets.append(net)
    draw(_peering(files, nets))
    return Repo({rel: docs for rel, docs in files.items() if docs}, nets, public)


@st.composite
def _peering(draw: st.DrawFn, files: dict[str, list[dict[str, Any]]], nets: list[Net]) -> None:
    """Maybe a VirtualNetworkPeering of two networks whose CIDRs differ: mostly both
    sides (routed), sometimes one (pending: nothing routed); maybe a rule of the first
    naming a group of the second through it."""
    pairs = [(a, b) for i, a in enumerate(nets) for b in nets[i + 1:] if a.number != b.number]
    if not pairs or not draw(st.booleans()):
        return
    a, b = draw(st.sampled_from(pairs))
    sides = [(a, b)] + ([(b, a)] if draw(st.integers(0, 3)) else [])
    for own, peer in sides:
        files[f"tenants/{own.tenant}/{own.name}/peering.yaml"] = [manifest(
            "VirtualNetworkPeering", f"{own.name}-peer", {
                "virtualNetwork": own.name,
                "peer": {"tenant": peer.tenant, "virtualNetwork": peer.name}})]
    groups = files.get(f"tenants/{a.tenant}/{a.name}/groups.yaml") or []
    if groups and draw(st.booleans()):
        group = draw(st.sampled_from(groups))
        group["spec"]["ingress"].append({
            "protocol": draw(st.sampled_from(("tcp", "all"))),
            "securityGroup": draw(st.sampled_from((*b.groups, "default"))),
            "peering": f"{a.name}-peer"})


# --- questions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    source: str  # tenant/workload/nic, an address outside, or OUTSIDE
    target: str
    port: str  # tcp/443, udp/53, icmp

    @property
    def kind(self) -> str:
        if self.target == OUTSIDE:
            return "NIC → internet"
        if self.source in (OUTSIDE, OFFICE):
            return "internet → public address"
        if self.target.startswith("203."):
            return "NIC → public address of another network"
        return "NIC → NIC" if _network(self.source) == _network(self.target) \
            else "NIC → NIC of another network"

    def __str__(self) -> str:
        return f"unet reach REPO {self.source} {self.target} --port {self.port}"


def _network(nic: str) -> tuple[str, str]:
    """(tenant, network) of a NIC `tenant/<network>-w<i>/<n>`."""
    tenant, workload, _index = nic.split("/")
    return tenant, workload.split("-")[0]


def _peers(repo: Repo, network: tuple[str, str]) -> set[tuple[str, str]]:
    """The networks a network declares a peering with (its side: maybe pending)."""
    tenant, name = network
    return {(doc["spec"]["peer"]["tenant"], doc["spec"]["peer"]["virtualNetwork"])
            for doc in repo.files.get(f"tenants/{tenant}/{name}/peering.yaml", ())}


def _nics(net: Net) -> list[str]:
    return [f"{net.tenant}/{w}/{i}" for w, count in net.workloads.items() for i in range(count)]


def _ports(repo: Repo) -> st.SearchStrategy[str]:
    return st.one_of(st.builds(lambda p, n: f"{p}/{n}", st.sampled_from(("tcp", "udp")),
                               st.sampled_from(PORTS)), st.just("icmp"))


def questions(repo: Repo, addresses: dict[tuple[str, str], str]) -> st.SearchStrategy[Question]:
    """NIC → NIC of one network, outside → a public address, NIC → the internet."""
    inside = [(a, b) for net in repo.nets for a in _nics(net) for b in _nics(net) if a != b]
    every = [n for net in repo.nets for n in _nics(net)]
    kinds = [st.builds(lambda pair, port: Question(*pair, port), st.sampled_from(inside),
                       _ports(repo))] if inside else []
    if addresses:
        kinds.append(st.builds(Question, st.sampled_from((OUTSIDE, OFFICE)),
                               st.sampled_from(sorted(addresses.values())), _ports(repo)))
    kinds.append(st.builds(Question, st.sampled_from(every), st.just(OUTSIDE), _ports(repo)))
    others = [(a, b) for one in repo.nets for two in repo.nets if one is not two
              for a in _nics(one) for b in _nics(two)]
    if others:  # routed when the two are peered, otherwise never
        kinds.append(st.builds(lambda pair, port: Question(*pair, port),
                               st.sampled_from(others), _ports(repo)))
    peered = [(a, b) for a, b in others if _network(b) in _peers(repo, _network(a))]
    if peered:  # most pairs are of networks that are not: ask these more often
        kinds.append(st.builds(lambda pair, port: Question(*pair, port),
                               st.sampled_from(peered), _ports(repo)))
    across = [(nic, addresses[(home.tenant, eip)]) for home in repo.nets for eip in home.public
              for net in repo.nets if net is not home for nic in _nics(net)]
    if across:  # out through one network's NATGateway, in through another's public address
        kinds.append(st.builds(lambda pair, port: Question(*pair, port),
                               st.sampled_from(across), _ports(repo)))
    return st.one_of(kinds)


# --- what OVN does -----------------------------------------------------------------------------


def _rest(port: str, family: int) -> str:
    protocol, _, number = port.partition("/")
    if protocol == "icmp":
        return "ip.ttl == 64 && " + ("icmp4 && icmp4.type == 8" if family == 4 else
                                     "icmp6 && icmp6.type == 128")
    return f"ip.ttl == 64 && {protocol} && {protocol}.dst == {number}"


class Wire:
    """Questions answered by ovn-trace on the applied Northbound."""

    def __init__(self, fabric: Fabric, repo: Repo) -> None:
        self.fabric, self.nb, self.repo = fabric, fabric.nb, repo
        self.addresses = {key: self.nb.external_ip(*key) for key in repo.public}
        learn_neighbours(fabric, self.addresses.values())

    def port(self, nic: str) -> Port:
        tenant, workload, index = nic.split("/")
        return self.nb.port(tenant, _kind(workload), workload, int(index))

    def gateway_mac(self, nic: str) -> str | None:
        """The MAC of the router port on the NIC's subnet (None: the subnet has none)."""
        tenant, workload, index = nic.split("/")
        row = self.nb.row(f"Logical_Switch_Port/{tenant}/{_kind(workload)}/{workload}/{index}")
        switch = next(r for r in self.nb.rows.values() if r["_table"] == "Logical_Switch"
                      and row["_uuid"] in _list(r["ports"]))
        tag = switch["external_ids"]["unet:key"].replace("Logical_Switch/",
                                                         "Logical_Router_Port/", 1)
        return self.nb.rows[tag]["mac"] if tag in self.nb.rows else None

    def allowed(self, question: Question) -> bool:
        if question.target == OUTSIDE:
            return self._outbound(question)
        if question.source in (OUTSIDE, OFFICE):
            return self._inbound(question)
        if question.target in self.addresses.values():
            return self._across(question)
        return self._between(question)

    def _between(self, question: Question) -> bool:
        source, target = self.port(question.source), self.port(question.target)
        mac = target.mac if source.switch == target.switch else \
            self.gateway_mac(question.source)
        if mac is None:
            return False  # no router on the source's segment: nothing leaves it
        for family, src, dst in ((4, source.ip4, target.ip4), (6, source.ip6, target.ip6)):
            if src is not None and dst is not None and target.name in self.fabric.send(
                    source, mac, dst, _rest(question.port, family)).ports:
                return True
        # As `unet reach` answers it: a NIC that no route leads to (another network, not
        # peered) is reached by its public addresses, if any (out through the source's
        # way out, in through the target's).
        own, other = _network(question.source), _network(question.target)
        if own == other or (other in _peers(self.repo, own) and own in _peers(self.repo, other)):
            return False
        return any(self._across(Question(question.source, address, question.port))
                   for address in self.addresses.values()
                   if self._target(address).name == target.name)

    def _target(self, address: str) -> Port:
        """The NIC a public address leads to: the target's primary (a Cluster's holds the
        VIP the address leads to)."""
        key = next(k for k, a in self.addresses.items() if a == address)
        workload = self.repo.public[key]
        primary = next(n.primary.get(workload, 0) for n in self.repo.nets
                       if n.tenant == key[0] and workload in n.workloads)
        return self.port(f"{key[0]}/{workload}/{primary}")

    def _across(self, question: Question) -> bool:
        source, mac = self.port(question.source), self.gateway_mac(question.source)
        if mac is None or source.ip4 is None:
            return False
        result = self.fabric.send(source, mac, question.target, _rest(question.port, 4))
        return self._target(question.target).name in result.ports

    def _inbound(self, question: Question) -> bool:
        result = inbound(self.fabric, REGION, question.target, _rest(question.port, 4),
                         src=question.source)
        return self._target(question.target).name in result.ports

    def _outbound(self, question: Question) -> bool:
        source, mac = self.port(question.source), self.gateway_mac(question.source)
        if mac is None or source.ip4 is None:
            return False
        result = self.fabric.send(source, mac, OUTSIDE, _rest(question.port, 4))
        return self.fabric.upstream[REGION].name in result.ports


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --- the property ------------------------------------------------------------------------------


@contextmanager
def _applied(repo: Repo, root: Path) -> Iterator[Fabric]:
    folder = root / "repo"
    repo.write(folder)
    with applied(root, folder) as fabric:
        yield fabric


def _model(folder: Path) -> Reachability:
    head = validate_repo(folder)
    assert head.ok, [d.message for d in head.diagnostics if d.severity == "error"]
    desired = render_desired(head, {})
    return Reachability(desired.model, desired.allocations)


def _same_addresses(reach: Reachability, wire: Wire) -> None:
    """The model's allocations are the applied ones, or the comparison means nothing."""
    for name, nic in reach.nics.items():
        port = wire.port(name)
        assert (nic.addresses.get(4), nic.addresses.get(6)) == (port.ip4, port.ip6), \
            f"{name}: the model has {nic.addresses}, the Northbound {port}"


@settings(max_examples=EXAMPLES, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(repo=repos(), data=st.data())
def test_the_model_answers_as_ovn_trace(repo: Repo, data: st.DataObject,
                                        tmp_path_factory: Any) -> None:
    root = tmp_path_factory.mktemp("reach-oracle")
    with _applied(repo, root) as fabric:
        reach = _model(fabric.repo)
        wire = Wire(fabric, repo)
        _same_addresses(reach, wire)
        for target in repo.public.values():
            event(f"public address of a {_kind(target)}")
        if any(p for n in repo.nets for w, p in n.primary.items() if _kind(w) == "Cluster"):
            event("a Cluster whose primary NIC is its second")
        asked = data.draw(st.lists(questions(repo, wire.addresses), min_size=20, max_size=30),
                          label="questions")
        wrong = []
        for question in dict.fromkeys(asked):
            answer = ask(reach, question.source, question.target, question.port)
            event(f"{question.kind}: {'allowed' if answer.allowed else 'not allowed'}")
            if answer.allowed != wire.allowed(question):
                wrong.append(f"{question}\n  model: {answer.allowed} {answer.because}\n"
                             f"  ovn-trace: {not answer.allowed}")
        assert not wrong, "the model and ovn-trace disagree:\n" + "\n".join(wrong) + \
            "\n--- the repo ---\n" + repo.text()


def _open_web(tenant: str, number: int) -> dict[str, list[dict[str, Any]]]:
    """A network whose one VM is open on tcp/443 to everyone, with a public address and a
    NATGateway."""
    prefix = f"tenants/{tenant}/anet"
    return {
        f"{prefix}/network.yaml": [
            manifest("VirtualNetwork", "anet", {"region": REGION,
                                                "ipv4Cidr": f"10.{number}.0.0/16"}),
            manifest("Subnet", "anet-s1", {"virtualNetwork": "anet",
                                           "ipv4Cidr": f"10.{number}.1.0/24"})],
        f"{prefix}/groups.yaml": [manifest("SecurityGroup", "anet-g0", {
            "virtualNetwork": "anet",
            "ingress": [{"protocol": "tcp", "portFrom": 443, "portTo": 443,
                         "cidr": "0.0.0.0/0"}],
            "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"}]})],
        f"{prefix}/workloads.yaml": [manifest("ComputeInstance", "anet-w0", {
            "networkAttachments": [{"subnet": "anet-s1", "securityGroups": ["anet-g0"]}]})],
        f"{prefix}/external.yaml": [
            manifest("ExternalIP", "anet-nat", {"pool": "public"}),
            manifest("NATGateway", "anet", {"virtualNetwork": "anet",
                                            "externalIP": "anet-nat"}),
            manifest("ExternalIP", "anet-pub", {"pool": "public"}),
            manifest("ExternalIPAttachment", "anet-pub", {
                "externalIP": "anet-pub",
                "target": {"kind": "ComputeInstance", "name": "anet-w0"}})]}


def test_the_oracle_sees_ways_in_from_outside(tmp_path: Path) -> None:
    """The ways in random repos rarely open, on a fixed repo: the internet to a public
    address, and one network to another's public address (out through its NATGateway).
    Both are allowed by the model and delivered by ovn-trace, and tcp/22 is neither."""
    files = {**_provider(["t1", "t2"]), **_open_web("t1", 1), **_open_web("t2", 2)}
    nets = [Net(t, "anet", n, False, ["anet-s1"], ["anet-g0"], {"anet-w0": 1}, ["anet-pub"])
            for t, n in (("t1", 1), ("t2", 2))]
    repo = Repo(files, nets, {(t, "anet-pub"): "anet-w0" for t in ("t1", "t2")})
    with _applied(repo, tmp_path) as fabric:
        reach, wire = _model(fabric.repo), Wire(fabric, repo)
        public = wire.addresses[("t1", "anet-pub")]
        for source, port, expected in ((OUTSIDE, "tcp/443", True),
                                       ("t2/anet-w0/0", "tcp/443", True),
                                       (OUTSIDE, "tcp/22", False),
                                       ("t2/anet-w0/0", "tcp/22", False)):
            question = Question(source, public, port)
            answer = ask(reach, source, public, port)
            assert (answer.allowed, wire.allowed(question)) == (expected, expected), \
                f"{question}: model {answer.allowed} {answer.because}"


def test_the_oracle_sees_peered_networks(tmp_path: Path) -> None:
    """What random repos reach only now and then, on a fixed repo: two tenants' networks
    peered, both ways open on tcp/443 (a rule of 0.0.0.0/0 covers the peer), tcp/22 in
    neither; t1's bnet, peered with nobody, reaches neither; and a rule naming the peer's
    group admits its members only."""
    files = {**_provider(["t1", "t2"]), **_open_web("t1", 1), **_open_web("t2", 2)}
    for own, peer in (("t1", "t2"), ("t2", "t1")):
        files[f"tenants/{own}/anet/peering.yaml"] = [manifest(
            "VirtualNetworkPeering", "anet-peer",
            {"virtualNetwork": "anet", "peer": {"tenant": peer, "virtualNetwork": "anet"}})]
    files["tenants/t1/anet/groups.yaml"][0]["spec"]["ingress"].append(
        {"protocol": "tcp", "portFrom": 5432, "portTo": 5432, "securityGroup": "anet-g0",
         "peering": "anet-peer"})
    files["tenants/t1/bnet/network.yaml"] = [
        manifest("VirtualNetwork", "bnet", {"region": REGION, "ipv4Cidr": "10.3.0.0/16"}),
        manifest("Subnet", "bnet-s1", {"virtualNetwork": "bnet", "ipv4Cidr": "10.3.1.0/24"})]
    files["tenants/t1/bnet/workloads.yaml"] = [manifest("ComputeInstance", "bnet-w0", {
        "networkAttachments": [{"subnet": "bnet-s1", "securityGroups": ["bnet-g0"]}]})]
    files["tenants/t1/bnet/groups.yaml"] = [manifest("SecurityGroup", "bnet-g0", {
        "virtualNetwork": "bnet", "ingress": [{"protocol": "all", "cidr": "0.0.0.0/0"}],
        "egress": [{"protocol": "all", "cidr": "0.0.0.0/0"}]})]
    nets = [Net(t, "anet", n, False, ["anet-s1"], ["anet-g0"], {"anet-w0": 1}, ["anet-pub"])
            for t, n in (("t1", 1), ("t2", 2))]
    nets.append(Net("t1", "bnet", 3, False, ["bnet-s1"], ["bnet-g0"], {"bnet-w0": 1}))
    repo = Repo(files, nets, {(t, "anet-pub"): "anet-w0" for t in ("t1", "t2")})
    with _applied(repo, tmp_path) as fabric:
        reach, wire = _model(fabric.repo), Wire(fabric, repo)
        public = wire.addresses[("t1", "anet-pub")]
        for source, target, port, expected in (
                # t1's public address is reached from t2 out through t2's NATGateway, not
                # over the peering: the peer group's rule does not admit its address
                ("t2/anet-w0/0", public, "tcp/443", True),
                ("t2/anet-w0/0", public, "tcp/5432", False),
                ("t2/anet-w0/0", "t1/anet-w0/0", "tcp/443", True),
                ("t1/anet-w0/0", "t2/anet-w0/0", "tcp/443", True),
                ("t2/anet-w0/0", "t1/anet-w0/0", "tcp/5432", True),  # the peer's group
                ("t1/anet-w0/0", "t2/anet-w0/0", "tcp/5432", False),
                ("t2/anet-w0/0", "t1/anet-w0/0", "tcp/22", False),
                ("t1/bnet-w0/0", "t1/anet-w0/0", "tcp/443", False),
                ("t1/anet-w0/0", "t1/bnet-w0/0", "tcp/443", False),
                ("t2/anet-w0/0", "t1/bnet-w0/0", "tcp/443", False)):
            question = Question(source, target, port)
            answer = ask(reach, source, target, port)
            assert (answer.allowed, wire.allowed(question)) == (expected, expected), \
                f"{question}: model {answer.allowed} {answer.because}"
