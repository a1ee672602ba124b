"""Synthetic network repos for tests and the benchmark.

`generate_repo` writes a valid network repo of N tenants shaped like
examples/network-repo (about 55 manifests per tenant, two regions), and
`pr_change` the files a typical tenant pull request changes.

    python -m benchmarks.generate --tenants 100 DIR
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

API = "network.osac.io/v1alpha1"
GENERATOR_VERSION = 4  # bump whenever the generated text changes: invalidates cached repos
INSTALLATION = "bench"  # the repos' installation: unet tags the rows it writes with it
REGIONS = ("a", "b")  # region-a: OVN + hosting clusters (VLANs); region-b: OVN only
# A class hands out one segment id per subnet from 100..3999 (3,900 ids); a tenant
# has 6 subnets, so 600 tenants per class. A tenant's 8 ExternalIPs come from one
# /20 pool (4,093 allocatable addresses minus 2 excluded), so 500 tenants per pool.
TENANTS_PER_CLASS = 600
TENANTS_PER_POOL = 500
POOL_PREFIX = 20
# Public space per region: never 10.x (tenant networks), never a reserved range.
POOL_BLOCKS = {
    "a": ("198.18.0.0/16", "100.64.0.0/11"),
    "b": ("198.19.0.0/16", "100.96.0.0/11"),
}


# --- the generated repo -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantLayout:
    """Where one synthetic tenant lives: region, class, pool and address prefixes."""

    index: int  # 1-based
    name: str
    region: str  # "a" or "b"
    class_name: str
    default_class: bool  # its class is the region's default
    pool: str
    pool_slot: int  # position among the pool's tenants
    pool_base: int  # first address of the pool, as an integer
    v6_prefix: str  # the /48 of the prod network, without "::/48"

    @property
    def region_name(self) -> str:
        return f"region-{self.region}"


def tenant_layout(index: int) -> TenantLayout:
    """The deterministic placement of tenant number `index` (1-based)."""
    region = REGIONS[(index - 1) % len(REGIONS)]
    rank = (index - 1) // len(REGIONS)  # position among the tenants of its region
    shard = rank // TENANTS_PER_CLASS
    pool = rank // TENANTS_PER_POOL
    return TenantLayout(
        index=index,
        name=f"tenant-{index:05d}",
        region=region,
        class_name=_class_name(region, shard),
        default_class=shard == 0,
        pool=_pool_name(region, pool),
        pool_slot=rank % TENANTS_PER_POOL,
        pool_base=int(_pool_network(region, pool).network_address),
        v6_prefix=f"fd00:{index >> 16:x}:{index & 0xFFFF:x}",
    )


def _class_name(region: str, shard: int) -> str:
    return f"standard-{region}" if shard == 0 else f"standard-{region}-{shard + 1}"


def _pool_name(region: str, pool: int) -> str:
    return f"public-{region}-{pool + 1:02d}"


def _pool_network(region: str, pool: int) -> ipaddress.IPv4Network:
    """The `pool`-th /20 of the region's public blocks."""
    for block in POOL_BLOCKS[region]:
        net = ipaddress.IPv4Network(block)
        count = 1 << (POOL_PREFIX - net.prefixlen)
        if pool < count:
            base = int(net.network_address) + (pool << (32 - POOL_PREFIX))
            return ipaddress.IPv4Network((base, POOL_PREFIX))
        pool -= count
    raise ValueError("too many tenants for the benchmark's public address blocks")


def _region_counts(tenants: int) -> dict[str, int]:
    """How many tenants each region gets (round robin)."""
    return {r: len(range(i + 1, tenants + 1, len(REGIONS))) for i, r in enumerate(REGIONS)}


def _doc(kind: str, name: str, spec: str, meta: str = "") -> str:
    """One manifest; `spec` is the indented body under `spec:`, `meta` extra metadata lines."""
    return f"apiVersion: {API}\nkind: {kind}\nmetadata:\n  name: {name}\n{meta}spec:\n{spec}"


def _file(header: str, docs: Sequence[str]) -> str:
    return f"# {header}\n---\n" + "---\n".join(docs)


# --- provider files ---------------------------------------------------------------------------


def _repo_config(reconcile: str = "report") -> str:
    spec = (f"  installation: {INSTALLATION}\n  prune: true\n  allowEmpty: false\n"
            f"  reconcile: {reconcile}\n")
    return _file("Synthetic network repo written by benchmarks/generate.py.",
                 [_doc("RepositoryConfig", "bench", spec)])


# Beyond this many tenants, one read of every row or the initial apply's last wave outlasts
# the default transactionTimeoutSeconds (60 s): at 10,000 tenants a wave of 500,000 steps
# got no reply in 60 s. An operator of such an installation raises it (docs/ovn.md).
LARGE_INSTALLATION = 3000


def _managers(counts: dict[str, int], northbound: str = "embedded") -> str:
    ovn = ("  role: fabric\n  plugin: ovn\n  regions: [region-a, region-b]\n  config:\n"
           f"    northbound: {northbound}\n    externalNetwork: physnet-external\n"
           "    gatewayChassis: [gw-1, gw-2]\n")
    if sum(counts.values()) > LARGE_INSTALLATION:
        ovn += "    transactionTimeoutSeconds: 600\n"
    docs = [_doc("NetworkManager", "ovn", ovn)]
    for shard in range(_shards(counts["a"])):
        n = shard + 1
        spec = ("  role: k8s\n  plugin: kubernetes\n  regions: [region-a]\n  config:\n"
                f"    clusters:\n      - name: hosting-a{2 * n - 1}\n"
                f"        context: hosting-a{2 * n - 1}\n      - name: hosting-a{2 * n}\n"
                f"        context: hosting-a{2 * n}\n"
                f"    physicalNetworkName: physnet-tenant-{n}\n"
                "    namespaceLabel: network.osac.io/tenant\n")
        docs.append(_doc("NetworkManager", f"kubernetes-a{n}", spec))
    return _file("OVN for both regions; one Kubernetes manager per pair of hosting clusters.",
                 docs)


def _shards(tenants_in_region: int) -> int:
    return max(1, math.ceil(tenants_in_region / TENANTS_PER_CLASS))


def _classes(counts: dict[str, int]) -> str:
    docs = []
    for region in REGIONS:
        for shard in range(_shards(counts[region])):
            spec = f"  region: region-{region}\n  default: {'true' if shard == 0 else 'false'}\n"
            spec += "  fabricManager: ovn\n"
            if region == "a":
                spec += f"  k8sManager: kubernetes-a{shard + 1}\n  vipPrefixLength: 28\n"
            spec += "  segmentRange:\n    start: 100\n    end: 3999\n"
            docs.append(_doc("NetworkClass", _class_name(region, shard), spec))
    return _file(f"Classes of {TENANTS_PER_CLASS} tenants at most (segment ids).", docs)


def _pools(counts: dict[str, int]) -> str:
    docs = []
    for region in REGIONS:
        for pool in range(max(1, math.ceil(counts[region] / TENANTS_PER_POOL))):
            net = _pool_network(region, pool)
            hosts = int(net.broadcast_address)
            spec = (f"  region: region-{region}\n  cidr: {net}\n"
                    f"  gateway: {net.network_address + 1}\n  exclude:\n"
                    f"    - {ipaddress.IPv4Address(hosts - 2)}\n"
                    f"    - {ipaddress.IPv4Address(hosts - 1)}\n")
            docs.append(_doc("ExternalIPPool", _pool_name(region, pool), spec))
    return _file(f"One /{POOL_PREFIX} per {TENANTS_PER_POOL} tenants of a region.", docs)


def _host_types() -> str:
    spec = "  interfaces:\n" + "".join(
        f"    - name: {name}\n      role: {role}\n"
        for name, role in (("eno1", "fabric"), ("eno2", "fabric"), ("eno3", "storage"),
                           ("bmc0", "management"), ("pxe0", "lifecycle")))
    return _file("Bare-metal interface catalog.", [_doc("HostType", "metal-large", spec)])


_QUOTAS = ("  quotas:\n    VirtualNetwork: 4\n    Subnet: 12\n    SecurityGroup: 12\n"
           "    ComputeInstance: 30\n    BaremetalInstance: 4\n    Cluster: 2\n"
           "    ExternalIP: 12\n    ExternalIPAttachment: 10\n    NATGateway: 2\n")


def _tenant(t: TenantLayout) -> str:
    """The Tenant object; a third carry quotas, a third custom allowedCidrs."""
    spec = f"  regions: [{t.region_name}]\n"
    if t.index % 3 == 1:
        spec += _QUOTAS
    elif t.index % 3 == 2:
        spec += "  allowedCidrs:\n    - 10.0.0.0/8\n    - fd00::/8\n"
    meta = f"  labels:\n    billing-account: \"{100000 + t.index}\"\n"
    return _file(f"Tenant {t.name}.", [_doc("Tenant", t.name, spec, meta)])


# --- tenant files -----------------------------------------------------------------------------


def _network(t: TenantLayout) -> str:
    """Two networks: dual-stack prod (4 subnets) and dev (2 subnets, region default class)."""
    v6 = t.v6_prefix
    prod = (f"  region: {t.region_name}\n  networkClass: {t.class_name}\n"
            f"  ipv4Cidr: 10.10.0.0/16\n  ipv6Cidr: {v6}::/48\n")
    dev_class = "" if t.default_class else f"  networkClass: {t.class_name}\n"
    dev = f"  region: {t.region_name}\n{dev_class}  ipv4Cidr: 10.20.0.0/16\n"
    protect = ("  labels:\n    env: prod\n  annotations:\n"
               "    network.osac.io/prevent-destroy: \"true\"\n")
    dns = "  dnsServers: [192.0.2.53, 192.0.2.54]\n"
    docs = [
        _doc("VirtualNetwork", "prod", prod, protect),
        _doc("Subnet", "web", f"  virtualNetwork: prod\n  ipv4Cidr: 10.10.1.0/24\n"
             f"  ipv6Cidr: {v6}:1::/64\n  gateway: 10.10.1.1\n  ipv6Gateway: {v6}:1::1\n"
             f"{dns}  mtu: 1500\n"),
        _doc("Subnet", "app", f"  virtualNetwork: prod\n  ipv4Cidr: 10.10.2.0/24\n"
             f"  ipv6Cidr: {v6}:2::/64\n{dns}"),
        _doc("Subnet", "db", "  virtualNetwork: prod\n  ipv4Cidr: 10.10.3.0/24\n"
             "  allocationRanges:\n    - start: 10.10.3.10\n      end: 10.10.3.200\n"
             "  excludeAddresses:\n    - 10.10.3.50\n" + dns +
             "  routes:\n    - destination: 172.16.0.0/12\n      nexthop: 10.10.3.5\n"
             "  mtu: 9000\n"),
        _doc("Subnet", "nodes", "  virtualNetwork: prod\n  ipv4Cidr: 10.10.8.0/22\n"),
        _doc("VirtualNetwork", "dev", dev, "  labels:\n    env: dev\n"),
        _doc("Subnet", "build", "  virtualNetwork: dev\n  ipv4Cidr: 10.20.1.0/24\n"),
        _doc("Subnet", "test", "  virtualNetwork: dev\n  ipv4Cidr: 10.20.2.0/24\n  dhcp: true\n"),
    ]
    return _file(f"{t.name}: networks in {t.region_name}.", docs)


def _rule(protocol: str, remote: str, ports: int | tuple[int, int] | None = None,
          icmp: int | None = None) -> str:
    """One security group rule; `remote` is a CIDR or a group name."""
    text = f"    - protocol: {protocol}\n"
    if ports is not None:
        low, high = (ports, ports) if isinstance(ports, int) else ports
        text += f"      portFrom: {low}\n      portTo: {high}\n"
    if icmp is not None:
        text += f"      icmpType: {icmp}\n"
    key = "cidr" if "/" in remote else "securityGroup"
    return text + f"      {key}: {remote}\n"


def _group(name: str, network: str, ingress: Sequence[str], egress: Sequence[str]) -> str:
    spec = f"  virtualNetwork: {network}\n"
    if ingress:
        spec += "  ingress:\n" + "".join(ingress)
    if egress:
        spec += "  egress:\n" + "".join(egress)
    return _doc("SecurityGroup", name, spec)


def _security_groups(t: TenantLayout) -> str:
    """Six groups, with remote-group rules between tiers (k1-nodes is in cluster.yaml)."""
    anywhere = [_rule("all", "0.0.0.0/0")]
    docs = [
        _group("web", "prod", [_rule("tcp", "0.0.0.0/0", 443), _rule("tcp", "0.0.0.0/0", 80),
                               _rule("tcp", "bastion", 22), _rule("icmp", "0.0.0.0/0", icmp=8)],
               anywhere),
        _group("app", "prod", [_rule("tcp", "web", (8080, 8089)), _rule("tcp", "bastion", 22),
                               _rule("udp", "app", (7946, 7946))], anywhere),
        _group("db", "prod", [_rule("tcp", "app", 5432), _rule("tcp", "db", 5432),
                              _rule("tcp", "192.0.2.0/24", 5432)], anywhere),
        _group("bastion", "prod", [_rule("tcp", "192.0.2.0/24", 22),
                                   _rule("tcp", "198.51.100.0/24", 22)], anywhere),
        _group("monitoring", "prod", [_rule("tcp", "monitoring", 9100),
                                      _rule("tcp", "10.10.0.0/16", 9100)],
               [_rule("tcp", "0.0.0.0/0", 443), _rule("udp", "0.0.0.0/0", 53)]),
        _group("build", "dev", [_rule("all", "build"), _rule("tcp", "192.0.2.0/24", 22)],
               anywhere),
    ]
    return _file(f"{t.name}: security groups.", docs)


def _attachment(subnet: str, groups: Sequence[str] = (), extra: str = "",
                interface: str | None = None) -> str:
    text = f"    - interface: {interface}\n      subnet: {subnet}\n" if interface \
        else f"    - subnet: {subnet}\n"
    if groups:
        text += f"      securityGroups: [{', '.join(groups)}]\n"
    return text + extra


def _instance(name: str, *attachments: str) -> str:
    return _doc("ComputeInstance", name, "  networkAttachments:\n" + "".join(attachments))


def _compute(t: TenantLayout) -> str:
    """Twenty VMs: web and app tiers, databases with fixed addresses, a bastion, CI runners."""
    mac = f"02:00:{t.index >> 16 & 0xFF:02x}:{t.index >> 8 & 0xFF:02x}:{t.index & 0xFF:02x}:01"
    docs = [_instance("web-1", _attachment("web", ["web", "monitoring"],
                                           "      ipAddress: 10.10.1.11\n"
                                           f"      ipv6Address: {t.v6_prefix}:1::11\n"))]
    docs += [_instance(f"web-{n}", _attachment("web", ["web", "monitoring"]))
             for n in range(2, 7)]
    docs += [_instance(f"app-{n}", _attachment("app", ["app", "monitoring"],
                                               "      primary: true\n"),
                       _attachment("db", ["app"])) for n in range(1, 7)]
    docs += [_instance(f"db-{n}", _attachment("db", ["db", "monitoring"],
                                              f"      ipAddress: 10.10.3.{20 + n}\n"))
             for n in range(1, 3)]
    docs.append(_instance("bastion-1", _attachment("web", ["bastion"],
                                                   f"      macAddress: \"{mac}\"\n")))
    docs.append(_instance("build-1", _attachment("build")))  # the implicit default group
    docs += [_instance(f"build-{n}", _attachment("build", ["build"])) for n in range(2, 4)]
    docs += [_instance(f"test-{n}", _attachment("test", ["build"])) for n in range(1, 3)]
    return _file(f"{t.name}: networking view of the VMs.", docs)


def _baremetal(t: TenantLayout) -> str:
    """Two database hosts, each on two fabric NICs."""
    docs = [
        _doc("BaremetalInstance", f"db-metal-{n}", "  hostType: metal-large\n"
             "  networkAttachments:\n"
             + _attachment("db", ["db"], f"      ipAddress: 10.10.3.{30 + n}\n"
                           "      primary: true\n", interface="eno1")
             + _attachment("app", ["db"], interface="eno2"))
        for n in (1, 2)
    ]
    return _file(f"{t.name}: bare-metal database hosts.", docs)


def _external_ip(name: str, t: TenantLayout, address: int | None = None) -> str:
    spec = f"  pool: {t.pool}\n"
    if address is not None:
        spec += f"  address: {ipaddress.IPv4Address(t.pool_base + address)}\n"
    return _doc("ExternalIP", name, spec)


def _eip_attachment(name: str, kind: str, target: str, endpoint: str | None = None) -> str:
    spec = f"  externalIP: {name}\n  target:\n    kind: {kind}\n    name: {target}\n"
    return _doc("ExternalIPAttachment", name, spec + (f"    endpoint: {endpoint}\n"
                                                      if endpoint else ""))


def _cluster(t: TenantLayout) -> str:
    """Cluster k1 with its nodes' group and public API and ingress (its NAT is in external)."""
    vips = "  apiVip: 10.10.11.250\n  ingressVip: 10.10.11.251\n" if t.index % 4 < 2 else ""
    cluster = ("  networkAttachments:\n" + _attachment("nodes", ["k1-nodes"]) +
               "  network:\n    podCidr: 10.128.0.0/14\n    serviceCidr: 172.30.0.0/16\n" + vips)
    nodes = _group("k1-nodes", "prod",
                   [_rule("all", "k1-nodes"), _rule("tcp", "0.0.0.0/0", 6443),
                    _rule("tcp", "0.0.0.0/0", 80), _rule("tcp", "0.0.0.0/0", 443)],
                   [_rule("all", "0.0.0.0/0")])
    docs = [_doc("Cluster", "k1", cluster), nodes,
            _external_ip("k1-api", t), _eip_attachment("k1-api", "Cluster", "k1", "api"),
            _external_ip("k1-ingress", t),
            _eip_attachment("k1-ingress", "Cluster", "k1", "ingress")]
    return _file(f"{t.name}: cluster k1 and what it needs.", docs)


def _external(t: TenantLayout) -> str:
    """NAT for both networks, floating IPs, and one fixed address per tenant."""
    docs = []
    for network in ("prod", "dev"):
        docs += [_external_ip(f"{network}-nat", t),
                 _doc("NATGateway", network,
                      f"  virtualNetwork: {network}\n  externalIP: {network}-nat\n")]
    for name in ("web-1", "web-2"):
        docs += [_external_ip(f"{name}-public", t),
                 _eip_attachment(f"{name}-public", "ComputeInstance", name)]
    docs += [_external_ip("bastion-1-public", t, address=16 + t.pool_slot),
             _eip_attachment("bastion-1-public", "ComputeInstance", "bastion-1"),
             _external_ip("db-metal-1-dr", t),
             _eip_attachment("db-metal-1-dr", "BaremetalInstance", "db-metal-1")]
    return _file(f"{t.name}: public addresses from {t.pool}.", docs)


TENANT_FILES: dict[str, Callable[[TenantLayout], str]] = {
    "network.yaml": _network,
    "security-groups.yaml": _security_groups,
    "compute.yaml": _compute,
    "baremetal.yaml": _baremetal,
    "cluster-k1.yaml": _cluster,
    "external.yaml": _external,
}


def _repo_files(tenants: int, northbound: str = "embedded",
               reconcile: str = "report") -> Iterator[tuple[str, str]]:
    """(path, text) of every file of the repo, in a fixed order."""
    counts = _region_counts(tenants)
    yield "unet.yaml", _repo_config(reconcile)
    yield "provider/managers.yaml", _managers(counts, northbound)
    yield "provider/classes.yaml", _classes(counts)
    yield "provider/pools.yaml", _pools(counts)
    yield "provider/hosttypes.yaml", _host_types()
    layouts = [tenant_layout(i) for i in range(1, tenants + 1)]
    yield "CODEOWNERS", "/unet.yaml @provider-netops\n/provider/ @provider-netops\n" + "".join(
        f"/tenants/{t.name}/ @{t.name}-team\n" for t in layouts)
    for t in layouts:
        yield f"provider/tenants/{t.name}.yaml", _tenant(t)
        for name, render in TENANT_FILES.items():
            yield f"tenants/{t.name}/{name}", render(t)


def generate_repo(root: Path, tenants: int, *, northbound: str = "embedded",
                  reconcile: str = "report") -> int:
    """Write a valid network repo of `tenants` tenants into `root`; return the manifest count.

    The output depends on the arguments only (same arguments, same bytes). `root` must
    be empty or absent, so that no stale tenant of an earlier run survives.
    `northbound` is the OVN manager's database (the benchmark's live stages point it
    at a server of their own); `reconcile` is the repo's drift policy.
    """
    if tenants < 1:
        raise ValueError("the benchmark repo needs at least one tenant")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"{root} is not an empty folder; generate into a new one")
    manifests = 0
    made: set[str] = set()
    for rel, text in _repo_files(tenants, northbound, reconcile):
        folder = os.path.join(root, os.path.dirname(rel))
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(os.path.join(root, rel), "w", encoding="utf-8") as out:
            out.write(text)
        if rel.endswith(".yaml"):
            manifests += text.count("\napiVersion: ")
    return manifests


# --- the pull request of `plan-pr` ------------------------------------------------------------

PR_TENANT = 1  # the tenant whose files the pull request changes
PR_BRANCH = "pr"


def pr_change() -> dict[str, str]:
    """The files a typical tenant pull request changes: one VM added, one rule changed."""
    t = tenant_layout(PR_TENANT)
    compute = _compute(t) + "---\n" + _instance(
        "web-7", _attachment("web", ["web", "monitoring"]))
    groups = _security_groups(t)
    old, new = _rule("tcp", "0.0.0.0/0", 80), _rule("tcp", "0.0.0.0/0", 8080)
    if old not in groups:
        raise ValueError("the pull request's rule is not in the generated security groups")
    return {f"tenants/{t.name}/compute.yaml": compute,
            f"tenants/{t.name}/security-groups.yaml": groups.replace(old, new, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate",
                                     description="Write a synthetic network repo.")
    parser.add_argument("--tenants", type=int, required=True)
    parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    manifests = generate_repo(args.dir, args.tenants)
    print(f"wrote {manifests} manifests of {args.tenants} tenants to {args.dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
