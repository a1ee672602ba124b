"""ovn-trace as an oracle for what unet's rows mean: a lab whose Northbound holds a repo
applied by `unet apply` (plus an "upstream router" port on each external switch, so that
NAT can be traced), unet's rows found by their `unet:key` tags, and ovn-trace's output
parsed into stages, conntrack states and outputs.

First packets are traced with `--ct=new` for every conntrack step, so security groups
decide them as new connections; `trace` asserts that no step silently fell back to
ovn-trace's default "established".
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..conftest import use_northbound
from .ovnlab import OvnLab

OUTSIDE = "198.18.0.1"  # RFC 2544 benchmarking space: "somewhere on the Internet"
NEW = ("--ct=new",) * 6  # more than any path here has; extra flags are unused
TABLES = ("Logical_Switch", "Logical_Switch_Port", "Logical_Router", "Logical_Router_Port",
          "Port_Group", "Address_Set")
UPSTREAM_MAC = "02:00:5e:00:00:{:02x}"
API = "network.osac.io/v1alpha1"


# --- the applied Northbound, by unet:key -----------------------------------------------------


def _ovsdb(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        kind, inner = value
        if kind == "map":
            return {k: _ovsdb(v) for k, v in inner}
        if kind == "set":
            return [_ovsdb(v) for v in inner]
        if kind == "uuid":
            return inner
    return value


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@dataclass(frozen=True)
class Port:
    """A logical switch port as traffic sees it."""

    name: str
    switch: str
    mac: str
    ip4: str | None = None
    ip6: str | None = None
    extra: tuple[str, ...] = ()  # further addresses (cluster VIPs)


@dataclass(frozen=True)
class RouterPort:
    name: str
    mac: str
    ip4: str | None
    ip6: str | None


class Northbound:
    """unet's rows of the applied Northbound database, found by their `unet:key` tag."""

    def __init__(self, lab: OvnLab) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.by_uuid: dict[str, dict[str, Any]] = {}
        for table in TABLES:
            listing = json.loads(lab.nbctl("--format=json", "list", table))
            for data in listing["data"]:
                row = {h: _ovsdb(v) for h, v in zip(listing["headings"], data, strict=True)}
                row["_table"] = table
                self.by_uuid[row["_uuid"]] = row
                tag = row["external_ids"].get("unet:key")
                if tag is not None:
                    self.rows[tag] = row
        self.switch_of = {uuid: ls["name"] for ls in self.by_uuid.values()
                          if ls["_table"] == "Logical_Switch"
                          for uuid in as_list(ls["ports"])}

    def row(self, tag: str) -> dict[str, Any]:
        assert tag in self.rows, f"unet wrote no row {tag}"
        return self.rows[tag]

    def port(self, tenant: str, kind: str, name: str, index: int = 0) -> Port:
        row = self.row(f"Logical_Switch_Port/{tenant}/{kind}/{name}/{index}")
        return self._port(row)

    def _port(self, row: dict[str, Any]) -> Port:
        mac, *addresses = as_list(row["addresses"])[0].split()
        ip4 = [a for a in addresses if ":" not in a]
        ip6 = [a for a in addresses if ":" in a]
        return Port(row["name"], self.switch_of[row["_uuid"]], mac,
                    ip4[0] if ip4 else None, ip6[0] if ip6 else None, tuple(ip4[1:]))

    def tenant_ports(self, tenant: str) -> list[Port]:
        """Every workload port of a tenant."""
        return [self._port(row) for tag, row in self.rows.items()
                if tag.startswith(f"Logical_Switch_Port/{tenant}/")
                and row["type"] == "" and tag.count("/") == 4]

    def router_port(self, tag: str) -> RouterPort:
        row = self.row(tag)
        networks = [n.split("/")[0] for n in as_list(row["networks"])]
        return RouterPort(row["name"], row["mac"],
                          next((n for n in networks if ":" not in n), None),
                          next((n for n in networks if ":" in n), None))

    def gateway(self, tenant: str, subnet: str) -> RouterPort:
        """The router port that is the subnet's gateway."""
        return self.router_port(f"Logical_Router_Port/{tenant}/{subnet}")

    def external_ip(self, tenant: str, name: str) -> str:
        """The allocated address of an ExternalIP (its reservation row)."""
        return as_list(self.row(f"Address_Set/{tenant}/eip/{name}")["addresses"])[0]

    def group(self, tenant: str, vn: str, name: str | None = None) -> str:
        """The Port_Group name of a security group (or, without a name, of the whole VN)."""
        tag = f"Port_Group/{tenant}/{vn}" + (f"/{name}" if name else "")
        return self.row(tag)["name"]

    def datapaths(self, tenant: str) -> set[str]:
        """Names of the tenant's switches and routers."""
        return {row["name"] for tag, row in self.rows.items()
                if tag.split("/")[0] in ("Logical_Switch", "Logical_Router")
                and tag.split("/")[1] == tenant}


# --- ovn-trace output --------------------------------------------------------------------------

_HEADER = re.compile(r'^\s*(ingress|egress)\(dp="([^"]+)"')
_STAGE = re.compile(r"^\s*\d+\. (\S+) \([^)]*\): (.*), priority (\d+), uuid [0-9a-f]+$")
_CT = re.compile(r"^\s*ct_next\(ct_state=([^)]*)\)$")
_BLOCK = re.compile(r"^(\w+)(?:\((.*)\))?(?:\s*/\*.*\*/)?\s*\{$")
_ASSIGN = re.compile(r"^([a-z][a-z0-9_.]*) = (.+);$")
_OUTPUT = re.compile(r'^output\("([^"]+)"\);$')


def _normal(name: str, value: str) -> str:
    """ovn-trace prints some MACs as integers (0x251fd534f4d)."""
    if value.startswith("0x") and (name.startswith("eth.") or name in ("arp.sha", "arp.tha",
                                                                       "nd.sll", "nd.tll")):
        digits = f"{int(value, 16):012x}"
        return ":".join(digits[i:i + 2] for i in range(0, 12, 2))
    return value


@dataclass
class Stage:
    datapath: str
    table: str
    match: str
    priority: int
    actions: list[str] = field(default_factory=list)


@dataclass
class Trace:
    flow: str
    text: str
    outputs: list[tuple[str, dict[str, str]]]  # (port, the packet's fields as it leaves)
    stages: list[Stage]
    ct_states: list[str]
    minimal: list[str]

    @classmethod
    def parse(cls, flow: str, text: str, fields: dict[str, str]) -> Trace:
        detailed = text.split("# Detailed trace.", 1)[1].split("# Summary trace.", 1)[0]
        minimal = text.split("# Minimal trace.", 1)[1].strip().splitlines()
        stages: list[Stage] = []
        ct_states: list[str] = []
        datapath = ""
        for line in detailed.splitlines():
            if header := _HEADER.match(line):
                datapath = header.group(2)
            elif stage := _STAGE.match(line):
                stages.append(Stage(datapath, stage.group(1), stage.group(2),
                                    int(stage.group(3))))
            elif ct := _CT.match(line):
                ct_states.append(ct.group(1))
            elif stages and line.startswith("    ") and line.strip():
                stages[-1].actions.append(line.strip())
        outputs: list[tuple[str, dict[str, str]]] = []
        stack = [dict(fields)]
        for raw in minimal:
            line = raw.strip()
            if line in ("};", "}"):
                stack.pop()
            elif block := _BLOCK.match(line):
                inner = dict(stack[-1])
                for part in (block.group(2) or "").split(","):
                    name, _, value = part.strip().partition("=")
                    if "." in name and value:
                        inner[name.strip()] = _normal(name.strip(), value.strip())
                stack.append(inner)
            elif out := _OUTPUT.match(line):
                outputs.append((out.group(1), dict(stack[-1])))
            elif assign := _ASSIGN.match(line):
                stack[-1][assign.group(1)] = _normal(assign.group(1), assign.group(2))
        return cls(flow, text, outputs, stages, ct_states, minimal)

    def __str__(self) -> str:
        return f"ovn-trace of {self.flow}\n" + "\n".join(self.minimal) + "\n" + self.text

    @property
    def ports(self) -> list[str]:
        return [port for port, _ in self.outputs]

    @property
    def datapaths(self) -> set[str]:
        return {stage.datapath for stage in self.stages}

    @property
    def drops(self) -> list[Stage]:
        return [s for s in self.stages if "drop;" in s.actions]

    def acls(self, table: str) -> list[Stage]:
        """The stages of `table` (ls_in_acl, ls_out_acl) where one of unet's ACLs matched."""
        return [s for s in self.stages if s.table == table and "@unet." in s.match]


def trace(lab: OvnLab, datapath: str, fields: dict[str, str], rest: str,
          ct: tuple[str, ...] = NEW) -> Trace:
    flow = " && ".join([*(f"{k} == {v}" for k, v in fields.items()), rest])
    result = Trace.parse(flow, lab.trace(datapath, flow, "--all", *ct), fields)
    if ct == NEW:
        assert all("new" in s.split("|") for s in result.ct_states), \
            f"a conntrack step was not traced as new: {result.ct_states}\n{result}"
    return result


def delivered(result: Trace, port: Port | str) -> dict[str, str]:
    """Assert the packet leaves through `port` only; its fields there."""
    name = port if isinstance(port, str) else port.name
    assert result.ports == [name], f"expected delivery to {name} only\n{result}"
    assert not result.drops, f"delivered, but something dropped a copy\n{result}"
    return result.outputs[0][1]


def dropped(result: Trace, table: str, datapath: str, match: str | None = None) -> Stage:
    """Assert the packet goes nowhere and was dropped in `table` of `datapath`."""
    assert result.ports == [], f"expected a drop, but it was output\n{result}"
    assert len(result.drops) == 1, f"expected exactly one drop\n{result}"
    stage = result.drops[0]
    assert (stage.table, stage.datapath) == (table, datapath), \
        f"dropped in {stage.table} of {stage.datapath}, not {table} of {datapath}\n{result}"
    if match is not None:
        assert match in stage.match, f"dropped by {stage.match!r}, not {match!r}\n{result}"
    return stage


def allowed_by(result: Trace, table: str, *parts: str) -> Stage:
    """Assert one of unet's ACLs in `table` matched and its match contains `parts`."""
    acls = result.acls(table)
    assert len(acls) == 1, f"expected one unet ACL verdict in {table}, got {acls}\n{result}"
    assert "drop;" not in acls[0].actions, f"{table} dropped\n{result}"
    for part in parts:
        assert part in acls[0].match, f"{part!r} not in the deciding ACL {acls[0].match!r}"
    return acls[0]


def ip_packet(port: Port, eth_dst: str, dst: str, *, src: str | None = None,
              eth_src: str | None = None) -> dict[str, str]:
    family = "ip6" if ":" in dst else "ip4"
    source = src or (port.ip6 if family == "ip6" else port.ip4)
    assert source is not None, f"{port.name} has no {family} address"
    return {"inport": f'"{port.name}"', "eth.src": eth_src or port.mac, "eth.dst": eth_dst,
            f"{family}.src": source, f"{family}.dst": dst}


def arp_request(inport: str, mac: str, ip: str, target: str) -> dict[str, str]:
    return {"inport": f'"{inport}"', "eth.src": mac, "eth.dst": "ff:ff:ff:ff:ff:ff",
            "arp.op": "1", "arp.sha": mac, "arp.spa": ip, "arp.tha": "00:00:00:00:00:00",
            "arp.tpa": target}


TCP = "ip.ttl == 64 && tcp && tcp.dst == {}"


# --- the labs ----------------------------------------------------------------------------------


@dataclass
class Fabric:
    lab: OvnLab
    nb: Northbound
    repo: Path
    upstream: dict[str, Port]  # region → the upstream router's port on its external switch

    def send(self, port: Port, eth_dst: str, dst: str, rest: str, *, src: str | None = None,
             eth_src: str | None = None, ct: tuple[str, ...] = NEW) -> Trace:
        return trace(self.lab, port.switch, ip_packet(port, eth_dst, dst, src=src,
                                                      eth_src=eth_src), rest, ct)

    def arp(self, port: Port, target: str) -> Trace:
        assert port.ip4 is not None
        return trace(self.lab, port.switch, arp_request(port.name, port.mac, port.ip4, target),
                     "1", ())

    def solicit(self, port: Port, target: str) -> Trace:
        """`port`'s IPv6 neighbour solicitation for `target`, to its solicited-node group."""
        assert port.ip6 is not None
        group = ipaddress.IPv6Address(int(ipaddress.IPv6Address("ff02::1:ff00:0"))
                                      | int(ipaddress.IPv6Address(target)) & 0xFFFFFF)
        fields = {"inport": f'"{port.name}"', "eth.src": port.mac,
                  "eth.dst": "33:33:" + ":".join(f"{b:02x}" for b in group.packed[-4:]),
                  "ip6.src": port.ip6, "ip6.dst": str(group), "nd.target": target}
        return trace(self.lab, port.switch, fields, "nd_ns", ())

    def resolve(self, port: Port, target: str) -> str:
        """The MAC that answers `port`'s ARP request (IPv6: neighbour solicitation) for
        `target`."""
        if ":" in target:
            result = self.solicit(port, target)
            adverts = [f for name, f in result.outputs if name == port.name and "nd.tll" in f]
            assert len(adverts) == 1, f"no single neighbour advertisement for {target}\n{result}"
            assert adverts[0]["nd.target"] == target, result
            return adverts[0]["nd.tll"]
        result = self.arp(port, target)
        replies = [f for name, f in result.outputs
                   if name == port.name and f.get("arp.op") == "2"]
        assert len(replies) == 1, f"no single ARP reply for {target}\n{result}"
        assert replies[0]["arp.spa"] == target and replies[0]["eth.dst"] == port.mac, result
        return replies[0]["arp.sha"]


def learn_neighbours(fabric: Fabric, addresses: Iterable[str]) -> None:
    """What routers learn by ARP before a first packet goes out (OVN buffers it meanwhile):
    the MAC that answers each public address on the external switch, as the Southbound
    MAC_Binding an ovn-controller writes for every other router's gateway port there.
    ovn-trace follows no ARP exchange: without this, a packet from one network to
    another's public address ends in an ARP request."""
    region = next(iter(fabric.upstream))
    answers = {address: fabric.resolve(fabric.upstream[region], address)
               for address in addresses}
    for tag, row in fabric.nb.rows.items():
        if row["_table"] != "Logical_Router_Port" or not tag.endswith("/external"):
            continue
        router = next(r["name"] for r in fabric.nb.by_uuid.values()
                      if r["_table"] == "Logical_Router" and row["_uuid"] in as_list(r["ports"]))
        datapath = fabric.lab.sbctl("--bare", "--columns=_uuid", "find", "Datapath_Binding",
                                    f"external_ids:name={router}").strip()
        for address, mac in answers.items():
            if mac != row["mac"]:
                fabric.lab.sbctl("create", "MAC_Binding", f"logical_port={row['name']}",
                                 f"ip={address}", f'mac="{mac}"', f"datapath={datapath}")


def read_docs(repo: Path, rel: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((repo / rel).read_text()) if d]


def append_docs(repo: Path, rel: str, *docs: dict[str, Any]) -> None:
    path = repo / rel
    old = path.read_text() if path.exists() else ""
    path.write_text(old + "".join("\n---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs))


def pool_gateways(repo: Path) -> dict[str, dict[int, str]]:
    """Region → family → the address of the upstream router: its pools' gateway (by
    default their first host)."""
    out: dict[str, dict[int, str]] = {}
    for pool in read_docs(repo, "provider/pools.yaml"):
        spec = pool["spec"]
        cidr = ipaddress.ip_network(spec["cidr"])
        gateway = spec.get("gateway") or str(cidr.network_address + 1)
        out.setdefault(spec["region"], {}).setdefault(cidr.version, gateway)
    return out


@contextmanager
def applied(root: Path, repo: Path) -> Iterator[Fabric]:
    """A lab whose Northbound holds the repo, applied by `unet apply`, plus upstream routers."""
    with OvnLab(root / "ovn") as lab:
        use_northbound(repo, lab.nb_remote)
        run = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "apply", str(repo),
                              "--manager", "ovn", "--auto-approve"],
                             capture_output=True, text=True, cwd=repo, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        upstream = {}
        for index, (region, gateways) in enumerate(sorted(pool_gateways(repo).items()),
                                                   start=1):
            switch = Northbound(lab).row(f"Logical_Switch/external/{region}")["name"]
            name, mac = f"upstream.{region}", UPSTREAM_MAC.format(index)
            lab.nbctl("lsp-add", switch, name, "--", "lsp-set-addresses", name,
                      " ".join([mac, *gateways.values()]))
            upstream[region] = Port(name, switch, mac, gateways.get(4), gateways.get(6))
        lab.sync()
        yield Fabric(lab, Northbound(lab), repo, upstream)



def inbound(fabric: Fabric, region: str, address: str, rest: str,
            src: str = OUTSIDE) -> Trace:
    """A first packet from `src` on the internet to a public `address`, as the region's
    upstream router sends it."""
    upstream = fabric.upstream[region]
    mac = fabric.resolve(upstream, address)  # who answers for the public address
    return fabric.send(upstream, mac, address, rest, src=src)


def manifest(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}
