"""A real OVN chassis for end-to-end packet tests (userspace datapath, no kernel module).

`Chassis` starts, in a temp folder, an ovsdb-server for `conf.db`, an ovs-vswitchd whose
`br-int` uses `datapath_type=netdev`, and an ovn-controller bound to a given Southbound
database (usually an `OvnLab`). ovs-vswitchd runs inside a network namespace of its own,
so `br-int`, `ovs-netdev` and the host ends of the veth pairs never appear in the root
namespace and two chassis (two test runs) never collide. Each "VM" is a further namespace
whose `eth0` is a veth peered into the chassis namespace and plugged into `br-int` with
`external_ids:iface-id=<logical switch port>`.

Everything is stopped by pid and every namespace deleted on `stop()`, which runs even
when a test fails (use the class as a context manager) and also when starting fails half
way. Missing tools fail loudly, never skip: `scripts/setup` installs them.

Traffic only ever goes between the namespaces made here: `Vm.ping`, `Vm.connect` and
`Vm.dhcp` are the only senders, and callers pass them VM addresses.
"""

from __future__ import annotations

import os
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from unet.reconciler.processes import process_alive

from .ovnlab import OvnLab

VSWITCH_SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
TOOLS = ("ovsdb-server", "ovsdb-tool", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl",
         "ovn-controller", "ovn-sbctl", "ovn-nbctl", "ip", "ethtool", "ping", "busybox")
#: Namespaces made by this module: unet-<pid of the test process>-<token>-<role>.
NETNS_PATTERN = re.compile(r"^unet-(\d+)-[0-9a-f]{4}-")

#: Run inside the target VM: accept on every port given, log each peer, answer "unet <port>".
LISTENER = r'''
import selectors, socket, sys
address, log, ports = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]
sel = selectors.DefaultSelector()
for port in ports:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen(16)
    sel.register(s, selectors.EVENT_READ, port)
print("ready", flush=True)
with open(log, "a", buffering=1) as out:
    while True:
        for key, _ in sel.select():
            conn, peer = key.fileobj.accept()
            out.write(f"{key.data} {peer[0]}\n")
            try:
                conn.sendall(f"unet {key.data}\n".encode())
            finally:
                conn.close()
'''

#: Run inside the source VM: one TCP connect; prints connected/refused/timeout/error:...
CONNECT = r'''
import errno, socket, sys
address, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
s.settimeout(timeout)
try:
    s.connect((address, port))
    banner = s.makefile().readline().strip()
    print("connected" if banner == f"unet {port}" else f"error:banner {banner!r}")
except ConnectionRefusedError:
    print("refused")
except (socket.timeout, TimeoutError):
    print("timeout")
except OSError as e:
    print(f"error:{errno.errorcode.get(e.errno, e.errno)}")
'''

#: udhcpc event script: configure what the server offered and record the lease.
DHCP_SCRIPT = r'''#!/bin/sh
out="$LEASE_FILE"
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/$mask" dev "$interface"
    for r in $router; do ip route replace default via "$r" dev "$interface"; break; done
    {
      echo "ip=$ip"; echo "mask=$mask"; echo "router=$router"; echo "dns=$dns"
      echo "mtu=$mtu"; echo "lease=$lease"; echo "serverid=$serverid"
      echo "staticroutes=$staticroutes"
    } > "$out"
    ;;
esac
exit 0
'''


def require_chassis_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    missing += [path for path in (VSWITCH_SCHEMA, "/dev/net/tun") if not Path(path).exists()]
    if missing:
        raise RuntimeError(f"the OVN chassis cannot run here (missing: {', '.join(missing)}); "
                           "run scripts/setup, which installs openvswitch-switch, ovn-host, "
                           "iproute2, iputils-ping, ethtool and busybox")
    if os.geteuid() != 0:
        raise RuntimeError("the OVN chassis needs root (network namespaces, veth pairs)")


def _run(command: list[str], timeout: float = 30, check: bool = True,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): "
                           f"{result.stderr.strip() or result.stdout.strip()}")
    return result


def _wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _netns_names() -> list[str]:
    result = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def reap_stale_namespaces() -> list[str]:
    """Delete namespaces this module made in test processes that no longer exist."""
    removed = []
    for name in _netns_names():
        found = NETNS_PATTERN.match(name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    return removed


@dataclass
class Lease:
    """What udhcpc received (the event script's environment)."""

    values: dict[str, str]

    def __getitem__(self, name: str) -> str:
        return self.values.get(name, "")


@dataclass
class Vm:
    """A network namespace standing in for a VM on one logical switch port."""

    chassis: Chassis
    name: str
    netns: str
    port: str
    mac: str
    host_ifname: str

    def run(self, *command: str, timeout: float = 10,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["ip", "netns", "exec", self.netns, *command], timeout=timeout, check=check)

    # -- addresses --------------------------------------------------------------------------
    def dhcp(self, timeout: float = 15) -> Lease:
        """Run busybox udhcpc on eth0 (no static address) and return the lease it applied."""
        lease_file = self.chassis.root / f"{self.name}.lease"
        lease_file.unlink(missing_ok=True)
        script = self.chassis.root / "udhcpc.sh"
        command = ["ip", "netns", "exec", self.netns, "env", f"LEASE_FILE={lease_file}",
                   "busybox", "udhcpc", "-i", "eth0", "-n", "-q", "-f", "-t", "5", "-T", "1",
                   "-A", "1", "-s", str(script)]
        result = _run(command, timeout=timeout, check=False)
        if result.returncode != 0 or not lease_file.exists():
            raise AssertionError(
                f"{self.name} ({self.port}) got no DHCP lease (udhcpc exit "
                f"{result.returncode}):\n{result.stdout}{result.stderr}\n"
                f"{self.chassis.diagnostics()}")
        values = dict(line.split("=", 1) for line in lease_file.read_text().splitlines()
                      if "=" in line)
        return Lease(values)

    def ipv4(self) -> list[str]:
        """The IPv4 addresses on eth0, as address/prefix."""
        out = self.run("ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout
        return [line.split()[3] for line in out.splitlines()]

    def default_route(self) -> str:
        return self.run("ip", "-4", "route", "show", "default").stdout.strip()

    # -- traffic ----------------------------------------------------------------------------
    def ping(self, address: str, count: int = 3, wait: float = 1) -> bool:
        """True if any of `count` echo requests is answered."""
        result = self.run("ping", "-n", "-c", str(count), "-i", "0.2", "-W", str(wait), address,
                          timeout=count * (wait + 0.2) + 5, check=False)
        return result.returncode == 0

    def connect(self, address: str, port: int, timeout: float = 2) -> str:
        """One TCP connect: "connected" (and the listener answered), "refused", "timeout"."""
        result = self.run(sys.executable, "-c", CONNECT, address, str(port), str(timeout),
                          timeout=timeout + 10, check=False)
        return result.stdout.strip() or f"error:{result.stderr.strip()}"

    def listen(self, address: str, ports: list[int]) -> Path:
        """Start a TCP listener on `address` for `ports`; returns the file logging each peer."""
        log = self.chassis.root / f"{self.name}.accepted"
        log.touch()
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, sys.executable, "-c", LISTENER, address,
             str(log), *map(str, ports)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.chassis.processes.append(process)
        line = _readline(process, 10)
        if line.strip() != "ready":
            raise RuntimeError(f"listener in {self.name} did not start: {line!r} "
                               f"{process.stderr.read() if process.poll() is not None else ''}")
        return log

    def accepted(self) -> list[tuple[int, str]]:
        """(port, peer address) of every connection the listener accepted so far."""
        log = self.chassis.root / f"{self.name}.accepted"
        if not log.exists():
            return []
        return [(int(p), a) for p, a in (line.split() for line in log.read_text().splitlines())]


def _end_popen(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _readline(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return process.stdout.readline()


class Chassis:
    """conf.db + ovs-vswitchd (netdev) + ovn-controller against `sb_remote`; a context manager."""

    def __init__(self, root: Path, sb_remote: str, name: str = "hv1") -> None:
        require_chassis_tools()
        self.root = root
        self.sb_remote = sb_remote
        self.prefix = f"unet-{os.getpid()}-{secrets.token_hex(2)}"
        self.system_id = f"{self.prefix}-{name}"
        self.netns = f"{self.prefix}-{name}"
        self.vms: dict[str, Vm] = {}
        self.processes: list[subprocess.Popen[str]] = []
        self.namespaces: list[str] = []
        self.env = {**os.environ, "OVS_RUNDIR": str(root), "OVN_RUNDIR": str(root),
                    "OVS_DBDIR": str(root), "OVS_LOGDIR": str(root)}

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Chassis:
        try:
            self.start()
        except BaseException:
            self.stop(raise_errors=False)
            raise
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.stop(raise_errors=exc_type is None)

    @property
    def conf_remote(self) -> str:
        return f"unix:{self.root / 'conf.sock'}"

    def start(self, timeout: float = 20) -> None:
        reap_stale_namespaces()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "udhcpc.sh").write_text(DHCP_SCRIPT)
        (self.root / "udhcpc.sh").chmod(0o755)
        db = self.root / "conf.db"
        db.unlink(missing_ok=True)  # always a fresh switch configuration
        _run(["ovsdb-tool", "create", str(db), VSWITCH_SCHEMA])
        self._daemon("conf", ["ovsdb-server", str(db), f"--remote=punix:{self.root}/conf.sock"])
        self._wait(lambda: (self.root / "conf.sock").exists(), timeout, "conf.db server socket")
        self.vsctl("--no-wait", "init")
        self.vsctl("--no-wait", "set", "Open_vSwitch", ".",
                   f"external_ids:system-id={self.system_id}",
                   f"external_ids:ovn-remote={self.sb_remote}",
                   "external_ids:ovn-encap-type=geneve",
                   "external_ids:ovn-encap-ip=127.0.0.1",
                   "external_ids:ovn-bridge-datapath-type=netdev",
                   "other_config:n-handler-threads=1",
                   "other_config:n-revalidator-threads=1")
        _run(["ip", "netns", "add", self.netns])
        self.namespaces.append(self.netns)
        _run(["ip", "-n", self.netns, "link", "set", "lo", "up"])
        self._daemon("vswitchd", ["ip", "netns", "exec", self.netns, "ovs-vswitchd",
                                  self.conf_remote])
        # Without --no-wait, ovs-vsctl returns once ovs-vswitchd has created the bridge.
        self.vsctl(f"--timeout={int(timeout)}", "add-br", "br-int", "--", "set", "Bridge",
                   "br-int", "datapath_type=netdev", "fail-mode=secure",
                   "other_config:disable-in-band=true")
        self._daemon("controller", ["ovn-controller", self.conf_remote], unixctl=False)
        # Up once ovn-controller has registered this chassis in the Southbound database.
        self._wait(self._controller_connected, timeout, "ovn-controller to register chassis "
                   f"{self.system_id} in the Southbound database")

    def _controller_connected(self) -> bool:
        result = _run(["ovn-sbctl", f"--db={self.sb_remote}", "--bare", "--columns=name",
                       "find", "Chassis_Private", f"name={self.system_id}"], check=False)
        return result.stdout.strip() == self.system_id

    def _daemon(self, name: str, command: list[str], unixctl: bool = True) -> None:
        args = [*command, f"--pidfile={self.root / name}.pid",
                f"--log-file={self.root / name}.log", "--detach", "--no-chdir"]
        if unixctl:
            args.append(f"--unixctl={self.root / name}.ctl")
        _run(args, env=self.env)

    def pid(self, name: str) -> int | None:
        try:
            return int((self.root / f"{name}.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop(self, raise_errors: bool = True) -> None:
        """Stop everything this chassis started, by pid, and delete its namespaces.

        Every step runs even when an earlier one fails; the failures are reported at the
        end (raised when `raise_errors`, which `__exit__` turns off while a test is failing).
        """
        errors: list[str] = []

        def step(what: str, action: Callable[[], object]) -> None:
            try:
                action()
            except Exception as error:  # keep tearing down
                errors.append(f"{what}: {error}")

        for process in self.processes:
            step(f"pid {process.pid}", lambda p=process: _end_popen(p))
        self.processes.clear()
        step("ovn-controller", lambda: self._stop_pid("controller"))
        step("ovs-vswitchd exit --cleanup", self._exit_vswitchd)
        step("ovs-vswitchd", lambda: self._stop_pid("vswitchd"))
        step("conf.db ovsdb-server", lambda: self._stop_pid("conf"))
        existing = set(_netns_names())
        for netns in reversed(self.namespaces):
            if netns in existing:
                step(f"ip netns del {netns}", lambda n=netns: _run(["ip", "netns", "del", n]))
        self.namespaces.clear()
        self.vms.clear()
        if errors and raise_errors:
            raise RuntimeError("chassis teardown: " + "; ".join(errors))

    def _exit_vswitchd(self) -> None:
        pid = self.pid("vswitchd")
        if pid is not None and process_alive(pid):
            # --cleanup removes br-int and ovs-netdev from the datapath before exiting.
            _run(["ovs-appctl", "-t", str(self.root / "vswitchd.ctl"), "exit", "--cleanup"],
                 timeout=10)
            _wait_dead(pid, 5)  # it answers before it exits; SIGTERM only if it hangs

    def _stop_pid(self, name: str) -> None:
        pid = self.pid(name)
        if pid is None:
            return
        if process_alive(pid):
            os.kill(pid, signal.SIGTERM)
            if not _wait_dead(pid, 5):
                os.kill(pid, signal.SIGKILL)
                if not _wait_dead(pid, 5):
                    raise RuntimeError(f"pid {pid} did not stop")
        (self.root / f"{name}.pid").unlink(missing_ok=True)

    def wait_applied(self, lab: OvnLab, timeout: float = 30) -> int:
        """Block until this chassis runs the current Northbound contents; returns nb_cfg.

        Like `ovn-nbctl --wait=hv sync`: bump NB_Global.nb_cfg and wait until hv_cfg (the
        lowest nb_cfg every chassis reports after installing its flows) reaches it. Then
        wait for two revalidator rounds of ovs-vswitchd, so that no datapath flow cached
        before the change still decides a packet.
        """
        lab.nbctl(f"--timeout={int(timeout)}", "--wait=hv", "sync")
        nb_cfg = int(lab.nbctl("get", "NB_Global", ".", "nb_cfg"))
        hv_cfg = int(lab.nbctl("get", "NB_Global", ".", "hv_cfg"))
        if hv_cfg < nb_cfg:
            raise AssertionError(f"hv_cfg {hv_cfg} < nb_cfg {nb_cfg} after --wait=hv\n"
                                 f"{self.diagnostics()}")
        for _ in range(2):
            self.appctl("revalidator/wait", timeout=timeout)
        return nb_cfg

    # -- tools ------------------------------------------------------------------------------
    def appctl(self, *args: str, timeout: float = 10) -> str:
        return _run(["ovs-appctl", "-t", str(self.root / "vswitchd.ctl"), *args],
                    timeout=timeout).stdout

    def vsctl(self, *args: str) -> str:
        return _run(["ovs-vsctl", f"--db={self.conf_remote}", *args], env=self.env).stdout

    def _wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n"
                                   f"{self.diagnostics()}")
            time.sleep(0.05)

    def diagnostics(self, lines: int = 15) -> str:
        """The tails of the daemons' logs, for failure messages."""
        out = []
        for name in ("controller", "vswitchd"):
            log = self.root / f"{name}.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(out)

    # -- VMs --------------------------------------------------------------------------------
    def add_vm(self, name: str, port: str, mac: str, timeout: float = 20) -> Vm:
        """A namespace with eth0 (MAC `mac`, up, no address) bound to logical port `port`.

        Returns once ovn-controller has installed the port's flows (`ovn-installed`).
        """
        netns = f"{self.prefix}-{name}"
        host = f"vm{len(self.vms)}"
        _run(["ip", "netns", "add", netns])
        self.namespaces.append(netns)
        vm = Vm(self, name, netns, port, mac, host)
        self.vms[name] = vm
        _run(["ip", "-n", self.netns, "link", "add", host, "type", "veth", "peer", "name",
              "eth0", "netns", netns])
        vm.run("ip", "link", "set", "lo", "up")
        vm.run("ip", "link", "set", "eth0", "address", mac)
        vm.run("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
        vm.run("ip", "link", "set", "eth0", "up")
        # Userspace datapath + veth: without this the TCP checksums are never filled in.
        vm.run("ethtool", "-K", "eth0", "tx", "off")
        _run(["ip", "-n", self.netns, "link", "set", host, "up"])
        self.vsctl("add-port", "br-int", host, "--", "set", "Interface", host,
                   f"external_ids:iface-id={port}")
        self._wait(lambda: self._installed(host), timeout,
                   f"ovn-controller to bind {port} (Interface {host} ovn-installed)")
        return vm

    def _installed(self, host: str) -> bool:
        result = _run(["ovs-vsctl", f"--db={self.conf_remote}", "--if-exists", "get",
                       "Interface", host, "external_ids:ovn-installed"], check=False,
                      env=self.env)
        return result.stdout.strip().strip('"') == "true"
