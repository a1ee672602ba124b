"""`unet reach --live` for OVN: what ovn-trace says the live Southbound does with a probe.

The Southbound holds what ovn-northd compiled from unet's rows: port bindings carry the
`unet:key` tags of their Northbound ports, so a probe's NIC keys are found there. A packet
is traced with `--ct=new` for every conntrack step (security groups judge it as the first
packet of a connection) and each step is checked to have been traced as new.

- From a NIC: sent by its port, to the other NIC's MAC on the same switch, else to the
  MAC of its switch's router port (none: nothing leaves the switch).
- From outside: sent into the region's external switch through its `localnet` port, as
  the upstream router would, to the MAC that answers ARP (IPv6: neighbour solicitation)
  for the public address there; nobody answering is "cannot tell".
- A routed packet whose next hop has no MAC binding yet ends in an ARP request (OVN
  buffers the packet meanwhile). Leaving for the outside, that request on the external
  switch is the packet on its way out; to another network's public address, what would
  happen after the answer cannot be traced: "cannot tell", never "dropped".
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from unet.managers.sdk import TAG_KEY, Probe, Traced, UnetError

NEW = ("--ct=new",) * 6  # more conntrack steps than any path of unet's rows has
#: The source MAC of packets from the upstream router: nothing in OVN decides by it.
UPSTREAM_MAC = "02:00:5e:00:00:01"
OUTSIDE = "outside"
TIMEOUT = 60


class TraceError(UnetError):
    """The Southbound or ovn-trace cannot be used; the message says which and why."""


# --- the Southbound ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """A port of the Southbound: its name, unet's key, type, datapath name, MAC and
    addresses, and for a patch port, its peer."""

    name: str
    key: str | None
    type: str
    datapath: str
    mac: str | None
    addresses: tuple[str, ...]
    peer: str | None


class Southbound:
    """The port bindings of a Southbound database, read with ovn-sbctl."""

    def __init__(self, remote: str, tls: tuple[str, ...] = ()) -> None:
        self.remote, self.tls = remote, tls
        datapaths = {row["_uuid"]: row["external_ids"].get("name", row["_uuid"])
                     for row in self._rows("Datapath_Binding")}
        self.ports: dict[str, Binding] = {}
        for row in self._rows("Port_Binding"):
            mac, *addresses = (_as_list(row["mac"]) or [""])[0].split()
            self.ports[row["logical_port"]] = Binding(
                row["logical_port"], row["external_ids"].get(TAG_KEY), row["type"],
                datapaths.get(row["datapath"], ""), mac if ":" in mac else None,
                tuple(a.split("/")[0] for a in addresses), row["options"].get("peer"))
        self.by_key = {b.key: b for b in self.ports.values()
                       if b.key and b.type != "chassisredirect"}

    def _rows(self, table: str) -> list[dict[str, Any]]:
        out = _run(["ovn-sbctl", f"--db={self.remote}", *self.tls, "--format=json", "list",
                    table])
        listing = json.loads(out)
        return [{h: _ovsdb(v) for h, v in zip(listing["headings"], data, strict=True)}
                for data in listing["data"]]

    def router_port(self, switch: str) -> Binding | None:
        """The router port whose patch peer is on `switch` (its gateway)."""
        for port in self.ports.values():
            if port.datapath == switch and port.type == "patch" and port.peer in self.ports \
                    and self.ports[port.peer].mac is not None:
                return self.ports[port.peer]
        return None

    def trace(self, datapath: str, flow: str, *options: str) -> str:
        return _run(["ovn-trace", f"--db={self.remote}", *self.tls, *options, datapath, flow])


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


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _run(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        raise TraceError(f"{command[0]} is not installed (Debian/Ubuntu: apt-get install "
                         "ovn-common)")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                                check=False)
    except subprocess.TimeoutExpired as exc:
        raise TraceError(f"{command[0]} did not answer within {TIMEOUT} s") from exc
    if result.returncode != 0:
        raise TraceError(f"{command[0]} failed: {result.stderr.strip()[:500]}")
    return result.stdout


# --- ovn-trace's output ------------------------------------------------------------------------

_HEADER = re.compile(r'^\s*(ingress|egress)\(dp="([^"]+)"')
_STAGE = re.compile(r"^\s*\d+\. (\S+) \([^)]*\): (.*), priority (\d+), uuid [0-9a-f]+$")
_CT = re.compile(r"^\s*ct_next\(ct_state=([^)]*)\)$")
_BLOCK = re.compile(r"^(\w+)(?:\((.*)\))?(?:\s*/\*.*\*/)?\s*\{$")
_ASSIGN = re.compile(r"^([a-z][a-z0-9_.]*) = (.+);$")
_OUTPUT = re.compile(r'^output\("([^"]+)"\);$')
_RESOLVING = ("arp", "nd_ns")


@dataclass
class Output:
    """A packet leaving the fabric: its port, its fields there, and whether it is a
    neighbour request the fabric sent to resolve a next hop (not the traced packet)."""

    port: str
    fields: dict[str, str]
    resolving: bool


@dataclass
class Result:
    outputs: list[Output] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)  # "TABLE of DATAPATH (match)"
    ct_states: list[str] = field(default_factory=list)


def _normal(name: str, value: str) -> str:
    """ovn-trace prints some MACs as integers (0x251fd534f4d)."""
    if value.startswith("0x") and (name.startswith("eth.") or name in ("arp.sha", "arp.tha",
                                                                       "nd.sll", "nd.tll")):
        digits = f"{int(value, 16):012x}"
        return ":".join(digits[i:i + 2] for i in range(0, 12, 2))
    return value


def parse(text: str, fields: dict[str, str]) -> Result:
    """The drops and conntrack states of the detailed trace, the outputs of the minimal."""
    result = Result()
    detailed = text.split("# Detailed trace.", 1)[-1].split("# Summary trace.", 1)[0]
    datapath, stage = "", ""
    for line in detailed.splitlines():
        if header := _HEADER.match(line):
            datapath = header.group(2)
        elif found := _STAGE.match(line):
            stage = f"{found.group(1)} of {datapath} ({found.group(2)}, priority " \
                    f"{found.group(3)})"
        elif ct := _CT.match(line):
            result.ct_states.append(ct.group(1))
        elif line.strip() == "drop;" and stage:
            result.drops.append(stage)
    _outputs(text.split("# Minimal trace.", 1)[-1].strip().splitlines(), fields, result)
    return result


def _outputs(lines: list[str], fields: dict[str, str], result: Result) -> None:
    stack: list[tuple[str, dict[str, str]]] = [("", dict(fields))]
    for raw in lines:
        line = raw.strip()
        if line in ("};", "}"):
            stack.pop()
        elif block := _BLOCK.match(line):
            inner = dict(stack[-1][1])
            for part in (block.group(2) or "").split(","):
                name, _, value = part.strip().partition("=")
                if "." in name and value:
                    inner[name.strip()] = _normal(name.strip(), value.strip())
            stack.append((block.group(1), inner))
        elif out := _OUTPUT.match(line):
            resolving = any(name in _RESOLVING for name, _ in stack)
            result.outputs.append(Output(out.group(1), dict(stack[-1][1]), resolving))
        elif assign := _ASSIGN.match(line):
            stack[-1][1][assign.group(1)] = _normal(assign.group(1), assign.group(2))


# --- a probe -----------------------------------------------------------------------------------


def trace(sb: Southbound, probe: Probe) -> Traced:
    """What the Southbound's flows do with the first packet of `probe`."""
    start = _start(sb, probe)
    if isinstance(start, Traced):
        return start
    datapath, packet = start
    family = "ip4" if probe.family == 4 else "ip6"
    packet |= {f"{family}.src": probe.sender, f"{family}.dst": probe.destination}
    flow = " && ".join([*(f"{k} == {v}" for k, v in packet.items()), _rest(probe)])
    result = parse(sb.trace(datapath, flow, "--all", *NEW), packet)
    if not all("new" in state.split("|") for state in result.ct_states):
        return Traced(None, None, (f"a conntrack step was not traced as new "
                                   f"({', '.join(result.ct_states)})",))
    return _verdict(sb, probe, result)


def _start(sb: Southbound, probe: Probe) -> tuple[str, dict[str, str]] | Traced:
    """The datapath a probe enters and its inport and Ethernet addresses."""
    if probe.source is None:
        return _from_outside(sb, probe)
    port = sb.by_key.get(f"Logical_Switch_Port/{probe.source}")
    if port is None or port.mac is None:
        return Traced(None, None, (f"no port of {probe.source} in the Southbound (not "
                                   "applied, or ovn-northd has not compiled it yet)",))
    target = sb.by_key.get(f"Logical_Switch_Port/{probe.target}") if probe.target else None
    if target is not None and target.datapath == port.datapath \
            and probe.destination in target.addresses:
        mac = target.mac
    else:
        router = sb.router_port(port.datapath)
        if router is None:
            return Traced(False, None, (f"switch {port.datapath} has no router port: "
                                        "nothing leaves it",))
        mac = router.mac
    return port.datapath, {"inport": f'"{port.name}"', "eth.src": port.mac,
                           "eth.dst": str(mac)}


def _from_outside(sb: Southbound, probe: Probe) -> tuple[str, dict[str, str]] | Traced:
    localnet = sb.by_key.get(f"Logical_Switch_Port/external/{probe.region}/localnet")
    if localnet is None:
        return Traced(None, None, (f"no external switch of region {probe.region} in the "
                                   "Southbound",))
    mac = _resolve(sb, localnet, probe)
    if mac is None:
        return Traced(None, None, (f"nothing answers for {probe.destination} on "
                                   f"{localnet.datapath}",))
    return localnet.datapath, {"inport": f'"{localnet.name}"', "eth.src": UPSTREAM_MAC,
                               "eth.dst": mac}


def _resolve(sb: Southbound, localnet: Binding, probe: Probe) -> str | None:
    """The MAC that answers the upstream router's ARP (neighbour solicitation) for the
    probe's destination on the external switch."""
    target = probe.destination
    if probe.family == 6:
        group = ipaddress.IPv6Address(int(ipaddress.IPv6Address("ff02::1:ff00:0"))
                                      | int(ipaddress.IPv6Address(target)) & 0xFFFFFF)
        packet = {"inport": f'"{localnet.name}"', "eth.src": UPSTREAM_MAC,
                  "eth.dst": "33:33:" + ":".join(f"{b:02x}" for b in group.packed[-4:]),
                  "ip6.src": probe.sender, "ip6.dst": str(group), "nd.target": target}
        rest, answer, mac = "nd_ns", "nd.target", "nd.tll"
    else:
        packet = {"inport": f'"{localnet.name}"', "eth.src": UPSTREAM_MAC,
                  "eth.dst": "ff:ff:ff:ff:ff:ff", "arp.op": "1", "arp.sha": UPSTREAM_MAC,
                  "arp.spa": probe.sender, "arp.tha": "00:00:00:00:00:00", "arp.tpa": target}
        rest, answer, mac = "1", "arp.spa", "arp.sha"
    flow = " && ".join([*(f"{k} == {v}" for k, v in packet.items()), rest])
    result = parse(sb.trace(localnet.datapath, flow, "--all"), packet)
    replies = {o.fields[mac] for o in result.outputs if o.port == localnet.name
               and o.fields.get(answer) == target and mac in o.fields}
    return replies.pop() if len(replies) == 1 else None


def _rest(probe: Probe) -> str:
    if probe.protocol in ("icmp", "icmpv6"):
        return "ip.ttl == 64 && " + ("icmp4 && icmp4.type == 8" if probe.family == 4 else
                                     "icmp6 && icmp6.type == 128")
    return f"ip.ttl == 64 && {probe.protocol} && {probe.protocol}.dst == {probe.port}"


def _verdict(sb: Southbound, probe: Probe, result: Result) -> Traced:
    """Delivered when the packet leaves through the target's port (the outside: an
    external switch's localnet port), whoever else it reaches."""
    sent = [o for o in result.outputs if not o.resolving]
    where = [_name(sb, o.port) for o in sent]
    if probe.target is not None:
        port = sb.by_key.get(f"Logical_Switch_Port/{probe.target}")
        if port is not None and port.name in {o.port for o in sent}:
            return Traced(True, probe.target, (f"ovn-trace: output to {port.name}",))
        asked = [o.fields.get("arp.tpa") or o.fields.get("nd.target") or "?"
                 for o in result.outputs if o.resolving]
        if asked and not sent:
            return Traced(None, None, (f"no MAC binding yet for {asked[0]}: ovn-trace "
                                       "ends in a neighbour request",))
    else:
        out = [o for o in result.outputs if _outward(sb, o.port)]
        if out:
            how = " after resolving its next hop" if all(o.resolving for o in out) else ""
            return Traced(True, OUTSIDE, (f"ovn-trace: out through {out[0].port}{how}",))
    return Traced(False, where[0] if where else None, _why_not(result, where))


def _outward(sb: Southbound, port: str) -> bool:
    binding = sb.ports.get(port)
    return binding is not None and binding.type == "localnet" and \
        (binding.key or "").startswith("Logical_Switch_Port/external/")


def _name(sb: Southbound, port: str) -> str:
    binding = sb.ports.get(port)
    key = binding.key if binding is not None else None
    return key.split("/", 1)[1] if key and key.startswith("Logical_Switch_Port/") else port


def _why_not(result: Result, where: list[str]) -> tuple[str, ...]:
    if result.drops:
        return tuple(f"ovn-trace dropped it in {stage}" for stage in result.drops)
    if where:
        return (f"ovn-trace delivered it to {', '.join(where)} instead",)
    return ("ovn-trace: no output, nothing dropped it explicitly",)

