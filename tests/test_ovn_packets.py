"""End to end with real packets: what unet writes to OVN is what the wire does.

The example repo is applied to a real OVN control plane (`OvnLab`); one real chassis
(`Chassis`: ovs-vswitchd with the userspace datapath + ovn-controller) binds a network
namespace to each workload port. Then:

- DHCP (busybox udhcpc, no static address) hands every port exactly the address unet
  allocated, with the subnet's gateway, DNS servers, MTU and classless routes;
- ping and TCP connects between the namespaces follow the security groups: allowed
  connections reach the listener, refused ones prove the port was open but nobody
  listened, and blocked ones time out (dropped, never answered);
- a security-group change, applied and synced to the chassis (`--wait=hv`), changes the
  traffic.

Traffic only flows between the namespaces made here (their own addresses). Slow parts are
the blocked connects (one CONNECT_TIMEOUT each); the file runs in about half a minute.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import EXAMPLE, copy_checkout, use_northbound
from .support.chassis import Chassis, Lease, Vm
from .support.ovnlab import OvnLab

CONNECT_TIMEOUT = 2.0

#: VM name → (logical switch port, subnet, ports its listener serves).
VMS: dict[str, tuple[str, str, tuple[int, ...]]] = {
    "web-1": ("unet.acme.vm.web-1.0", "acme/web", ()),
    "web-2": ("unet.acme.vm.web-2.0", "acme/web", (22, 23, 443)),  # not 80: refused
    "db-1": ("unet.acme.vm.db-1.0", "acme/db", (22, 5432)),
    "ci-runner-1": ("unet.initech.vm.ci-runner-1.0", "initech/build", (22,)),
    "ci-runner-2": ("unet.initech.vm.ci-runner-2.0", "initech/build", ()),
}

#: What DHCP must offer on each subnet (from the example's Subnet manifests).
SUBNETS = {
    "acme/web": {"prefix": "24", "router": "10.10.1.1", "dns": "192.0.2.53 192.0.2.54",
                 "mtu": "1500", "staticroutes": ""},
    "acme/db": {"prefix": "24", "router": "10.10.2.1", "dns": "192.0.2.53 192.0.2.54",
                "mtu": "9000",
                # RFC 3442: with classless routes the default route must be among them.
                "staticroutes": "172.16.0.0/12 10.10.2.5 0.0.0.0/0 10.10.2.1"},
    "initech/build": {"prefix": "24", "router": "192.168.1.1", "dns": "", "mtu": "1500",
                      "staticroutes": ""},
}

#: A second build runner, so that initech's implicit "default" group has two members.
CI_RUNNER_2 = """---
apiVersion: network.osac.io/v1alpha1
kind: ComputeInstance
metadata:
  name: ci-runner-2
spec:
  networkAttachments:
    - subnet: build
"""


@dataclass
class Network:
    lab: OvnLab
    repo: Path
    chassis: Chassis
    vms: dict[str, Vm]
    mac: dict[str, str]
    ip: dict[str, str]  # the IPv4 address unet wrote to the port
    leases: dict[str, Lease]

    def vm(self, name: str) -> Vm:
        return self.vms[name]


UNET = Path(sys.executable).parent / "unet"


def apply(repo: Path) -> str:
    assert UNET.exists(), f"{UNET} is missing: run scripts/setup"
    result = subprocess.run([str(UNET), "apply", str(repo), "--manager", "ovn",
                             "--auto-approve"], capture_output=True, text=True, timeout=120,
                            cwd=repo.parent)
    assert result.returncode == 0, f"unet apply failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def port_addresses(lab: OvnLab, port: str) -> list[str]:
    """The one "MAC IP..." entry of a port's `addresses`, split."""
    raw = lab.nbctl("get", "Logical_Switch_Port", port, "addresses").strip()
    entries = json.loads(raw)
    assert len(entries) == 1, f"{port}: expected one addresses entry, got {entries}"
    return entries[0].split()


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    root = tmp_path_factory.mktemp("packets")
    repo = root / "repo"
    copy_checkout(EXAMPLE, repo)
    with (repo / "tenants" / "initech" / "compute.yaml").open("a") as out:
        out.write(CI_RUNNER_2)
    with OvnLab(root / "ovn") as lab:
        use_northbound(repo, lab.nb_remote)
        apply(repo)
        with Chassis(root / "hv", lab.sb_remote) as chassis:
            vms, macs, ips = {}, {}, {}
            for name, (port, _subnet, _ports) in VMS.items():
                mac, ipv4, *_ = port_addresses(lab, port)
                macs[name], ips[name] = mac, ipv4
                vms[name] = chassis.add_vm(name, port, mac)
            leases = {name: vm.dhcp() for name, vm in vms.items()}
            for name, (_port, _subnet, ports) in VMS.items():
                if ports:
                    vms[name].listen(ips[name], list(ports))
            yield Network(lab, repo, chassis, vms, macs, ips, leases)


# -- DHCP ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(VMS))
def test_dhcp_hands_out_the_allocated_address(net: Network, name: str) -> None:
    port, subnet, _ = VMS[name]
    expected = SUBNETS[subnet]
    lease = net.leases[name]
    assert lease["ip"] == net.ip[name], f"{port}: DHCP offered {lease['ip']}, NB says " \
                                        f"{net.ip[name]}"
    assert lease["mask"] == expected["prefix"]
    assert lease["router"] == expected["router"]
    assert lease["serverid"] == expected["router"]
    assert lease["dns"] == expected["dns"]
    assert lease["mtu"] == expected["mtu"]
    assert lease["staticroutes"] == expected["staticroutes"]
    # …and the namespace really runs with it: that one address, default route via the gateway.
    vm = net.vm(name)
    assert vm.ipv4() == [f"{net.ip[name]}/{expected['prefix']}"]
    assert vm.default_route().startswith(f"default via {expected['router']} dev eth0")


def test_dhcp_addresses_are_the_declared_ones(net: Network) -> None:
    # Fixed values from the manifests survive into NB and onto the wire.
    assert net.ip["db-1"] == "10.10.2.20"
    assert net.mac["ci-runner-1"] == "02:00:00:00:10:01"
    assert len(set(net.ip.values())) == len(net.ip)


# -- security groups on the wire -----------------------------------------------------------
#: (source, target, tcp port, outcome, why). "refused" = the ACLs let the SYN through and the
#: target's kernel answered RST (no listener); "timeout" = dropped on the way.
TCP_MATRIX = [
    ("web-1", "web-2", 443, "connected", "web: tcp 443 from 0.0.0.0/0"),
    ("web-1", "web-2", 23, "timeout", "web: no rule for 23"),
    ("web-1", "web-2", 80, "refused", "web: tcp 80 allowed, nothing listens"),
    ("web-1", "web-2", 22, "timeout", "web: 22 only from 192.0.2.0/24"),
    ("web-1", "db-1", 5432, "connected", "db: 5432 from group web"),
    ("web-1", "db-1", 22, "timeout", "db: no rule for 22"),
    ("db-1", "web-2", 443, "connected", "routed between subnets; web allows 443 from anywhere"),
    ("ci-runner-2", "ci-runner-1", 22, "connected", "initech default: all from members"),
    ("web-1", "ci-runner-1", 22, "timeout", "another tenant's VirtualNetwork"),
]


def check_tcp(net: Network, source: str, target: str, port: int, expected: str) -> None:
    before = net.vm(target).accepted()
    outcome = net.vm(source).connect(net.ip[target], port, CONNECT_TIMEOUT)
    new = net.vm(target).accepted()[len(before):]
    detail = f"{source} → {target}:{port}"
    assert outcome == expected, f"{detail}: expected {expected}, got {outcome}"
    if expected == "connected":
        # Reached the real listener, from the source's own address (nothing in between NATs).
        assert new == [(port, net.ip[source])], f"{detail}: listener saw {new}"
    else:
        assert new == [], f"{detail}: the listener accepted {new} although the client saw " \
                          f"{outcome}"


@pytest.mark.parametrize(("source", "target", "port", "expected", "why"), TCP_MATRIX,
                         ids=[f"{s}-{t}-tcp{p}-{e}" for s, t, p, e, _ in TCP_MATRIX])
def test_tcp(net: Network, source: str, target: str, port: int, expected: str,
             why: str) -> None:
    check_tcp(net, source, target, port, expected)


PING_MATRIX = [
    ("web-1", "web-2", True, "web: icmp type 8 from 0.0.0.0/0"),
    ("db-1", "web-2", True, "web: icmp type 8 from 0.0.0.0/0, routed"),
    ("web-1", "db-1", False, "db: only tcp 5432"),
    ("ci-runner-2", "ci-runner-1", True, "initech default: all from members"),
]


@pytest.mark.parametrize(("source", "target", "answered", "why"), PING_MATRIX,
                         ids=[f"{s}-{t}-{'ok' if a else 'blocked'}"
                              for s, t, a, _ in PING_MATRIX])
def test_ping(net: Network, source: str, target: str, answered: bool, why: str) -> None:
    assert net.vm(source).ping(net.ip[target]) is answered, \
        f"ping {source} → {target}: expected {'replies' if answered else 'none'} ({why})"


# -- a change in Git reaches the wire ------------------------------------------------------
def set_web_https_rule(repo: Path, port: int) -> None:
    """Make the `web` group's "HTTPS from anywhere" ingress rule allow `port` instead."""
    path = repo / "tenants" / "acme" / "security-groups.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    web = next(d for d in docs if d and d["kind"] == "SecurityGroup"
               and d["metadata"]["name"] == "web")
    rules = [r for r in web["spec"]["ingress"]
             if r["protocol"] == "tcp" and r["cidr"] == "0.0.0.0/0" and r["portFrom"] in (23, 443)]
    assert len(rules) == 1, web["spec"]["ingress"]
    rules[0]["portFrom"] = rules[0]["portTo"] = port
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def web_acls(lab: OvnLab) -> str:
    return lab.nbctl("acl-list", "unet.acme.prod.web")


def test_security_group_change_reaches_the_wire(net: Network) -> None:
    check_tcp(net, "web-1", "web-2", 443, "connected")
    check_tcp(net, "web-1", "web-2", 23, "timeout")

    # 443 → 23 in Git; apply; wait until the chassis runs it.
    set_web_https_rule(net.repo, 23)
    out = apply(net.repo)
    assert "Plan: 0 to delete, 0 to replace, 0 to create, 1 to update" in out, out
    acls = web_acls(net.lab)
    assert "tcp.dst == 23" in acls and "tcp.dst == 443" not in acls, acls
    net.chassis.wait_applied(net.lab)
    check_tcp(net, "web-1", "web-2", 23, "connected")
    check_tcp(net, "web-1", "web-2", 443, "timeout")
    check_tcp(net, "db-1", "web-2", 23, "connected")
    check_tcp(net, "web-1", "web-2", 80, "refused")  # the other rules are untouched

    # And back: the original rule set is restored on the wire.
    set_web_https_rule(net.repo, 443)
    apply(net.repo)
    net.chassis.wait_applied(net.lab)
    check_tcp(net, "web-1", "web-2", 443, "connected")
    check_tcp(net, "web-1", "web-2", 23, "timeout")

