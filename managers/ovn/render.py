"""Render the validated model into OVN Northbound rows (ARCHITECTURE.md, "OVN mapping").

Pure: the model and the allocations in, rows out. Names are readable
(`unet.<tenant>.<...>`), but identity is the `unet:key` tag. Rows of non-root
tables (ports, ACLs, NAT, routes, gateway chassis) name their parent, since
OVSDB keeps them only while a parent references them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import netaddr

from unet.managers.sdk import (
    TAG_ALLOCATION,
    UNKNOWN,
    Allocations,
    BackendObject,
    Manifest,
    Model,
    adopted_key,
    content_hash,
    external_key,
    ip_of_port,
    mac_of_port,
    port_identity,
    port_key,
    primary_index,
    router_gateway_key,
    segment_key,
    segment_of,
    vip_key,
)
from unet.managers.sdk import (
    derived_mac as _derived_mac,
)

from .acls import AclRule

if TYPE_CHECKING:
    from .config import OvnConfig

# ACL priorities: the per-network default drop, infrastructure allows above it,
# security-group rules above both.
PRIORITY_DROP = 1000
PRIORITY_INFRA = 1001
PRIORITY_RULE = 1002
PRIORITY_NO_EGRESS = 1003  # above every rule: no NATGateway, no new connection out
#: Destinations that never leave a segment: broadcast and multicast (IPv6: link-local too).
_LINK_SCOPE = {4: ("255.255.255.255", "224.0.0.0/4"), 6: ("fe80::/10", "ff00::/8")}
#: On an ACL: what it opens to traffic from outside its network, in words, for people who
#: read the Northbound (plans read it from the row itself: `exposure`).
TAG_EXPOSURE = "unet:exposure"

def ident(*parts: str | None) -> str:
    """A name usable in OVN match expressions (`@pg`, `$as`): dots, no hyphens."""
    return ".".join(str(p).replace("-", "_") for p in parts)


def key(table: str, *parts: str | None) -> str:
    return "/".join([table, *(str(p) for p in parts)])


@dataclass
class _Out:
    manager: str
    rows: list[BackendObject]

    def add(self, table: str, row_key: str, owner: str, fields: dict[str, Any],
            refs: dict[str, tuple[str, ...]] | None = None,
            parent: tuple[str, str] | None = None, unknown: frozenset[str] = frozenset(),
            meta: dict[str, str] | None = None, identity: Any = None) -> None:
        self.rows.append(BackendObject(self.manager, table, row_key, owner, fields,
                                       refs or {}, parent, unknown, meta or {},
                                       identity=identity))


def render(model: Model, allocations: Allocations, manager: str,
           config: OvnConfig) -> list[BackendObject]:
    """Every OVN row the model needs from the fabric manager `manager`."""
    out = _Out(manager, [])
    renderer = _Renderer(model, allocations, manager, config, out)
    renderer.run()
    return out.rows


class _Renderer:
    def __init__(self, model: Model, allocations: Allocations, manager: str,
                 config: OvnConfig, out: _Out) -> None:
        self.model = model
        self.alloc = allocations
        self.manager = manager
        self.external_network = config.external_network
        self.chassis = list(config.gateway_chassis)
        self.out = out

    def value(self, alloc_key: str) -> tuple[str, bool]:
        found = self.alloc.get(alloc_key)
        if found is None:
            return UNKNOWN, False
        return found.value, found.known

    def recorded(self, *alloc_keys: str) -> dict[str, str]:
        """Tags recording the known allocations a row uses, so later runs keep them."""
        out = {}
        for alloc_key in alloc_keys:
            value, known = self.value(alloc_key)
            if known:
                out[TAG_ALLOCATION + alloc_key] = value
        return out

    def mac(self, identity: str) -> str:
        return _derived_mac(self.model.installation, identity, set())

    def kept(self, row_key: str, **defaults: str) -> tuple[dict[str, str], dict[str, str]]:
        """The values of `defaults` (column → what unet writes) that the row kept when it
        was adopted (`unet import`), and the tags recording them, so later runs keep them."""
        values = dict(defaults)
        tags: dict[str, str] = {}
        if not self.alloc.adopted:  # nearly every render: no row adopted
            return values, tags
        for column in defaults:
            found = self.alloc.get(adopted_key(row_key, column))
            if found is not None and found.known:
                values[column] = found.value
                tags[TAG_ALLOCATION + adopted_key(row_key, column)] = found.value
        return values, tags

    # -- the resources ----------------------------------------------------------------------
    def _index_ports(self) -> dict[tuple[str | None, str], list[tuple[str, tuple[str, ...]]]]:
        """(tenant, network) → [(port row key, its security groups)]."""
        out: dict[tuple[str | None, str], list[tuple[str, tuple[str, ...]]]] = {}
        for workload in self.model.workloads:
            vn = self.model.network_of_workload(workload)
            if vn is None or self.model.hosting_cluster(workload) is not None:
                continue
            for index, attachment in enumerate(workload.obj.spec.network_attachments):
                row = key("Logical_Switch_Port", *port_key(workload, index).split("/"))
                out.setdefault((workload.tenant, vn), []).append(
                    (row, tuple(attachment.security_groups)))
        return out

    def _index_hosted(self) -> dict[tuple[str | None, str, str, str], list[str]]:
        """(tenant, network, group, family) → the Address_Sets of VMs on hosting clusters
        that use the group: their ports are the clusters', their addresses unet's."""
        out: dict[tuple[str | None, str, str, str], list[str]] = {}
        for workload in self.model.workloads:
            vn = self.model.network_of_workload(workload)
            if vn is None or self.model.hosting_cluster(workload) is None:
                continue
            for index, attachment in enumerate(workload.obj.spec.network_attachments):
                for version in sorted(self.model.port_spaces(workload, attachment)):
                    name = _hosted_set(workload, index, version)
                    for group in attachment.security_groups:
                        out.setdefault((workload.tenant, vn, group, f"ip{version}"),
                                       []).append(name)
        return out

    def run(self) -> None:
        self.ports = self._index_ports()
        # Subnets that some workload attaches to other than by its primary attachment.
        self.secondary = {segment_of(w.tenant, a) for w in self.model.workloads
                          for i, a in enumerate(w.obj.spec.network_attachments)
                          if i != _primary_index(w)}
        self.hosted = self._index_hosted()
        networks = [vn for vn in self.model.kind("VirtualNetwork") if self._ours(vn)]
        ours = {(vn.tenant, vn.name) for vn in networks}
        regions = self._regions()
        for region in sorted(regions):
            self._external_switch(region)
        for vn in networks:
            self._network(vn)
        for subnet in self.model.kind("Subnet"):
            if (subnet.tenant, subnet.obj.spec.virtual_network) in ours:
                self._subnet(subnet)
        for network in self.model.kind("ProviderNetwork"):
            if self._realised_here(self.model.provider_network_class(network.name)):
                self._provider_network(network)
        for group in self._groups(ours):
            self._security_group(*group)
        for workload in self.model.workloads:
            if (workload.tenant, self.model.network_of_workload(workload)) in ours:
                self._workload_ports(workload)
        for eip in self.model.kind("ExternalIP"):
            pool = self.model.get("ExternalIPPool", None, eip.obj.spec.pool)
            if pool is not None and pool.obj.spec.region in regions:
                self._reservation(eip)
        for vn in networks:
            self._gateway(vn)
            self._peerings(vn)

    def _ours(self, vn: Manifest) -> bool:
        return self._realised_here(self.model.class_of(vn.tenant, vn.name))

    def _realised_here(self, cls: Manifest | None) -> bool:
        return cls is not None and cls.obj.spec.fabric_manager == self.manager

    def _regions(self) -> set[str]:
        manager = self.model.manager(self.manager)
        return set(manager.obj.spec.regions) if manager is not None else set()

    def _external_switch(self, region: str) -> None:
        pools = [p for p in self.model.kind("ExternalIPPool") if p.obj.spec.region == region]
        if not pools:
            return
        owner = pools[0].ref
        switch = key("Logical_Switch", "external", region)
        self.out.add("Logical_Switch", switch, owner, {
            "name": f"unet-ext.{region}", "other_config": {},
        })
        self.out.add("Logical_Switch_Port", key("Logical_Switch_Port", "external", region,
                                                "localnet"), owner, {
            "name": f"unet-ext.{region}.localnet", "type": "localnet",
            "addresses": ["unknown"], "options": {"network_name": self.external_network},
            "port_security": [], "tag_request": None,
        }, parent=(switch, "ports"))

    def _network(self, vn: Manifest) -> None:
        balancers = tuple(sorted(
            _balancer_key(a, protocol)
            for a in self.model.active_attachments.get((vn.tenant, vn.name), ())
            for protocol in sorted({f.protocol for f in a.obj.spec.ports or ()})))
        router = key("Logical_Router", vn.tenant, vn.name)
        kept, tags = self.kept(router, name=f"unet.{vn.tenant}.{vn.name}")
        self.out.add("Logical_Router", router, vn.ref, {
            "name": kept["name"], "options": {},
        }, refs={"load_balancer": balancers} if balancers else None, meta=tags)
        # Every port of the network belongs to this group; its ACLs drop what no rule allows.
        self._network_group(vn)

    def _network_group(self, vn: Manifest) -> None:
        group = key("Port_Group", vn.tenant, vn.name)
        pg = ident("unet", vn.tenant, vn.name)
        ports = tuple(sorted(port for port, _groups in self.ports.get((vn.tenant, vn.name), ())))
        self.out.add("Port_Group", group, vn.ref, {"name": pg}, refs={"ports": ports})
        rules = [
            ("from-lport", PRIORITY_DROP, f"inport == @{pg} && ip", "drop"),
            ("to-lport", PRIORITY_DROP, f"outport == @{pg} && ip", "drop"),
            ("from-lport", PRIORITY_INFRA,
             f"inport == @{pg} && udp && udp.src == 68 && udp.dst == 67", "allow"),
            ("from-lport", PRIORITY_INFRA,
             f"inport == @{pg} && udp && udp.src == 546 && udp.dst == 547", "allow"),
            ("from-lport", PRIORITY_INFRA, f"inport == @{pg} && (nd || nd_rs || nd_ra)", "allow"),
            ("to-lport", PRIORITY_INFRA, f"outport == @{pg} && (nd || nd_rs || nd_ra)", "allow"),
        ]
        cidrs = self.model.network_cidrs(vn.tenant, vn.name)
        for version in self.model.egress_closed(vn.tenant, vn.name):
            if version not in cidrs:
                continue
            # The router has a way out, for the replies of inbound connections: new
            # connections from the network to outside it must not take it.
            inside = [str(cidrs[version]), *self.model.routed_inside(vn.tenant, vn.name,
                                                                     version),
                      *_LINK_SCOPE[version]]
            family = f"ip{version}"
            rules.append(("from-lport", PRIORITY_NO_EGRESS,
                          f"inport == @{pg} && {family} && ct.new && {family}.dst != "
                          f"{{{', '.join(inside)}}}", "drop"))
        for direction, priority, match, action in rules:
            self._acl(group, vn.ref, direction, priority, match, action)

    def _acl(self, group: str, owner: str, direction: str, priority: int, match: str,
             action: str, meta: dict[str, str] | None = None) -> None:
        self.out.add("ACL", key("ACL", group.split("/", 1)[1], direction,
                                content_hash([priority, match, action])), owner, {
            "direction": direction, "priority": priority, "match": match, "action": action,
            "log": False, "name": None, "severity": None,
        }, parent=(group, "acls"), meta=meta)

    def _subnet(self, subnet: Manifest) -> None:
        t, name, spec = subnet.tenant, subnet.name, subnet.obj.spec
        vn = spec.virtual_network
        spaces = self.model.subnet_spaces(t, name)
        switch = key("Logical_Switch", t, name)
        router = key("Logical_Router", t, vn)
        router_port = key("Logical_Router_Port", t, name)
        mac = self.mac(router_port)
        gateways = {v: str(netaddr.IPAddress(s.gateway, v)) for v, s in spaces.items()
                    if s.gateway is not None}
        networks = sorted(f"{gateways[v]}/{s.net.prefixlen}" for v, s in spaces.items()
                          if v in gateways)
        switch_kept, switch_tags = self.kept(switch, name=f"unet.{t}.{name}")
        self.out.add("Logical_Switch", switch, subnet.ref, {
            "name": switch_kept["name"],
            "other_config": {},
        }, meta=switch_tags)
        gw, gw_tags = self.kept(router_port, name=f"unet.{t}.{name}.gw", mac=mac)
        mac = gw["mac"]
        if networks:  # without a gateway the segment is isolated: no router port at all
            ra = {"address_mode": "dhcpv6_stateful", "mtu": str(spec.mtu)} \
                if spec.dhcp and 6 in gateways else {}
            self.out.add("Logical_Router_Port", router_port, subnet.ref, {
                "name": gw["name"], "mac": mac, "networks": networks,
                "peer": None, "ipv6_ra_configs": ra, "options": {},
            }, parent=(router, "ports"), meta=gw_tags)
            peer = key("Logical_Switch_Port", t, name, "router")
            peer_kept, peer_tags = self.kept(peer, name=f"unet.{t}.{name}.router")
            self.out.add("Logical_Switch_Port", peer, subnet.ref, {
                "name": peer_kept["name"], "type": "router", "addresses": ["router"],
                "options": {"router-port": gw["name"]}, "port_security": [],
                "tag_request": None,
            }, parent=(switch, "ports"), meta=peer_tags)
            for version in sorted(v for v in spaces if v not in gateways):
                self._isolate(subnet, version)
        if spec.dhcp:
            self._dhcp(subnet, spaces, gateways, mac)
        self._localnet(subnet, switch)

    def _isolate(self, subnet: Manifest, version: int) -> None:
        """The family a subnet has no gateway in is isolated although the other has one:
        the router routes whatever is sent to its port's MAC, so nothing of that family
        passes the router's switch port, either way."""
        t, vn = subnet.tenant, subnet.obj.spec.virtual_network
        group = key("Port_Group", t, vn, subnet.name, "router")
        pg = ident("unet", t, vn, subnet.name, "router")  # never a security group's name
        self.out.add("Port_Group", group, subnet.ref, {"name": pg}, refs={
            "ports": (key("Logical_Switch_Port", t, subnet.name, "router"),)})
        for direction, port in (("to-lport", "outport"), ("from-lport", "inport")):
            self._acl(group, subnet.ref, direction, PRIORITY_DROP,
                      f"{port} == @{pg} && ip{version}", "drop")

    def _provider_network(self, network: Manifest) -> None:
        """A provider's VLAN: a switch bridged to it by a localnet port with its fixed tag,
        and DHCP; no router (its routes are offered by DHCP)."""
        spec = network.obj.spec
        switch = key("Logical_Switch", None, network.name)
        self.out.add("Logical_Switch", switch, network.ref, {
            "name": f"unet-pn.{network.name}", "other_config": {},
        })
        if spec.dhcp:
            self._dhcp(network, self.model.subnet_spaces(None, network.name), {},
                       self.mac(key("Logical_Router_Port", None, network.name)))
        self.out.add("Logical_Switch_Port", key("Logical_Switch_Port", None, network.name,
                                                "localnet"), network.ref, {
            "name": f"unet-pn.{network.name}.localnet", "type": "localnet",
            "addresses": ["unknown"], "options": {"network_name": spec.physical_network},
            "port_security": [], "tag_request": spec.segment_id,
        }, parent=(switch, "ports"),
            meta={TAG_ALLOCATION + segment_key(None, network.name): str(spec.segment_id)})

    def _dhcp(self, subnet: Manifest, spaces: dict[int, Any], gateways: dict[int, str],
              mac: str) -> None:
        t, spec = subnet.tenant, subnet.obj.spec
        dns4 = [d for d in spec.dns_servers if ":" not in d]
        dns6 = [d for d in spec.dns_servers if ":" in d]
        gateway = gateways.get(4)
        server = _dhcp4_server(spaces.get(4), gateway)
        if server is not None:
            options = {"server_id": server, "server_mac": mac,
                       "lease_time": str(spec.lease_time), "mtu": str(spec.mtu)}
            if gateway is not None:
                options["router"] = gateway
            if dns4:
                options["dns_server"] = "{" + ", ".join(dns4) + "}"
            if spec.ntp_servers:
                options["ntp_server"] = "{" + ", ".join(spec.ntp_servers) + "}"
            if spec.domain_name:
                options["domain_name"] = f'"{spec.domain_name}"'
            routes = [(r.destination, r.nexthop) for r in spec.routes if ":" not in r.nexthop]
            default = [("0.0.0.0/0", gateway)] if gateway is not None else []
            self.out.add("DHCP_Options", key("DHCP_Options", t, subnet.name, "v4"), subnet.ref,
                         {"cidr": str(spaces[4].net), "options": _with_routes(
                             options, [*routes, *default] if routes else [])})
            if (t, subnet.name) in self.secondary and t is not None:
                # the default route on one NIC only (a provider network offers none)
                options = {k: v for k, v in options.items() if k != "router"}
                self.out.add("DHCP_Options", key("DHCP_Options", t, subnet.name, "v4",
                                                 "secondary"), subnet.ref,
                             {"cidr": str(spaces[4].net), "options": _with_routes(options,
                                                                                  routes)})
        if 6 in spaces:
            options = {"server_id": mac}
            if dns6:
                options["dns_server"] = "{" + ", ".join(dns6) + "}"
            if spec.domain_name:
                options["domain_search"] = f'"{spec.domain_name}"'
            self.out.add("DHCP_Options", key("DHCP_Options", t, subnet.name, "v6"), subnet.ref,
                         {"cidr": str(spaces[6].net), "options": options})

    def _localnet(self, subnet: Manifest, switch: str) -> None:
        cls = self.model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
        physnet = self.model.physical_networks.get(cls.obj.spec.k8s_manager or "") \
            if cls is not None else None
        if physnet is None:
            return
        segment, known = self.value(segment_key(subnet.tenant, subnet.name))
        self.out.add("Logical_Switch_Port", key("Logical_Switch_Port", subnet.tenant,
                                                subnet.name, "localnet"), subnet.ref, {
            "name": f"unet.{subnet.tenant}.{subnet.name}.localnet", "type": "localnet",
            "addresses": ["unknown"], "options": {"network_name": physnet},
            "port_security": [], "tag_request": int(segment) if known else segment,
        }, parent=(switch, "ports"), unknown=frozenset() if known else frozenset({"tag_request"}),
            meta=self.recorded(segment_key(subnet.tenant, subnet.name)))

    # -- security groups --------------------------------------------------------------------
    def _groups(self, ours: set[tuple[str | None, str]]
                ) -> Iterator[tuple[str | None, str, str, Manifest | None]]:
        """(tenant, vn, group name, declared group or None for the implicit default)."""
        declared = {(g.tenant, g.obj.spec.virtual_network, g.name): g
                    for g in self.model.kind("SecurityGroup")}
        for tenant, vn in sorted(ours, key=lambda tv: (tv[0] or "", tv[1])):
            if (tenant, vn, "default") not in declared:
                yield tenant, vn, "default", None
        for (tenant, vn, name), group in sorted(declared.items(),
                                                key=lambda item: item[1].ref):
            if (tenant, vn) in ours:
                yield tenant, vn, name, group

    def _security_group(self, tenant: str | None, vn: str, name: str,
                        group: Manifest | None) -> None:
        owner = group.ref if group is not None else f"VirtualNetwork/{tenant}/{vn}"
        pg_key = key("Port_Group", tenant, vn, name)
        pg = ident("unet", tenant, vn, name)
        ports = tuple(sorted(port for port, groups in self.ports.get((tenant, vn), ())
                             if name in groups))
        self.out.add("Port_Group", pg_key, owner, {"name": pg}, refs={"ports": ports})
        if group is None:  # implicit default: ingress from its members, all egress
            rules = [("ingress", AclRule("all", remote_group="default")),
                     ("egress", AclRule("all", cidr="0.0.0.0/0")),
                     ("egress", AclRule("all", cidr="::/0"))]
        else:
            rules = [(d, AclRule.of(r, self._remote_network(tenant, vn, r)))
                     for d in ("ingress", "egress") for r in getattr(group.obj.spec, d)
                     if r.peering is None or self._remote_network(tenant, vn, r) is not None]
        by_family = self.model.network_cidrs(tenant, vn)
        cidrs = list(by_family.values())
        families = tuple(f"ip{v}" for v in sorted(by_family))

        def members(remote: str, family: str, where: tuple[str, str] | None) -> str:
            """The addresses of a group's members: its ports' and its hosted VMs'."""
            if where is not None:  # a peered network's: on the fabric only
                return f"${ident('unet', *where, remote)}_{family}"
            sets = [f"{ident('unet', tenant, vn, remote)}_{family}",
                    *sorted(self.hosted.get((tenant, vn, remote, family), ()))]
            return f"${sets[0]}" if len(sets) == 1 else "{" + ",".join(f"${n}" for n in sets) + "}"

        for direction, rule in rules:
            exposure = rule.exposure(cidrs) if direction == "ingress" else None
            meta = {TAG_EXPOSURE: f"{exposure} to {pg_key.split('/', 1)[1]}"} if exposure else {}
            for match in rule.matches(pg, direction, members, families):
                self._acl(pg_key, owner, "to-lport" if direction == "ingress" else "from-lport",
                          PRIORITY_RULE, match, "allow-related", meta)

    def _remote_network(self, tenant: str | None, vn: str, rule: Any
                        ) -> tuple[str, str] | None:
        """The peered network a rule's group is of, while the peering is established and
        the peer has the group (a group the peer removed leaves the rule stale)."""
        if rule.peering is None:
            return None
        for (peer_tenant, peer_vn), peering in self.model.peers(tenant, vn).items():
            if peering.name == rule.peering and (
                    rule.security_group == "default"
                    or self.model.get("SecurityGroup", peer_tenant, rule.security_group)):
                return str(peer_tenant), peer_vn
        return None

    # -- peerings ---------------------------------------------------------------------------
    def _peerings(self, vn: Manifest) -> None:
        """Per peered network, the network's side of the link (its own peering owns it):
        a router port whose peer is the other router's, and a route to each subnet of the
        peer in a family both have (IPv6: by the peer port's link-local address)."""
        own = (vn.tenant, vn.name)
        cidrs = self.model.network_cidrs(*own)
        router = key("Logical_Router", *own)
        for peer, peering in sorted(self.model.peers(*own).items(),
                                    key=lambda item: (str(item[0][0]), item[0][1])):
            port = _peer_port_key(own, peer)
            name = _peer_port_name(own, peer)
            self.out.add("Logical_Router_Port", port, peering.ref, {
                "name": name, "mac": self.mac(port),
                "networks": [f"{self.model.peering_address(own, peer)}/30"],
                "peer": _peer_port_name(peer, own), "ipv6_ra_configs": {}, "options": {},
            }, parent=(router, "ports"))
            theirs = self.model.network_cidrs(*peer)
            for version in sorted(set(cidrs) & set(theirs)):
                nexthop = self.model.peering_address(peer, own) if version == 4 else \
                    str(netaddr.EUI(self.mac(_peer_port_key(peer, own))).ipv6_link_local())
                for subnet, prefix in self.model.peer_prefixes(peer, version):
                    self.out.add("Logical_Router_Static_Route", key(
                        "Logical_Router_Static_Route", *own, "peering", *peer, subnet,
                        *(() if version == 4 else ("ipv6",))), peering.ref, {
                        "ip_prefix": prefix, "nexthop": nexthop,
                        "output_port": name, "policy": None, "route_table": "",
                    }, parent=(router, "static_routes"))

    # -- workloads --------------------------------------------------------------------------
    def _hosted_addresses(self, vm: Manifest) -> None:
        """A VM on a hosting cluster has no port here: per attachment and family, an
        Address_Set holds its address for the rules of its groups, and records the
        allocations (address, MAC) so they never move."""
        for index, attachment in enumerate(vm.obj.spec.network_attachments):
            port = port_key(vm, index)
            for version in sorted(self.model.port_spaces(vm, attachment)):
                address, known = self.value(ip_of_port(port, version))
                self.out.add("Address_Set", key("Address_Set", *port.split("/"), f"ip{version}"),
                             vm.ref, {"name": _hosted_set(vm, index, version),
                                      "addresses": [address]},
                             unknown=frozenset() if known else frozenset({"addresses"}),
                             meta=self.recorded(mac_of_port(port), ip_of_port(port, version)))

    def _workload_ports(self, workload: Manifest) -> None:
        if self.model.hosting_cluster(workload) is not None:
            self._hosted_addresses(workload)
            return
        t = workload.tenant
        cluster_vips: list[str] = []
        if workload.kind == "Cluster":
            cluster_vips = [self.value(vip_key(t, workload.name, e))[0] for e in ("api", "ingress")]
            unknown_vips = any(not self.value(vip_key(t, workload.name, e))[1]
                               for e in ("api", "ingress"))
        else:
            unknown_vips = False
        vip_keys = [vip_key(t, workload.name, e) for e in ("api", "ingress")] \
            if workload.kind == "Cluster" else []
        attachments = workload.obj.spec.network_attachments
        identity = port_identity(attachments)
        for index, attachment in enumerate(attachments):
            port = port_key(workload, index)
            segment = segment_of(t, attachment)
            spaces = self.model.port_spaces(workload, attachment)
            # A cluster's VIPs come from its primary subnet: recorded on that port, and
            # answered (ARP, port security) there only.
            vips = index == _primary_index(workload)
            meta = self.recorded(mac_of_port(port), *(ip_of_port(port, v) for v in sorted(spaces)),
                                 *(vip_keys if vips else ()))
            mac, _ = self.value(mac_of_port(port))
            addresses, unknown = [mac], unknown_vips and vips
            for version in sorted(spaces):
                value, known = self.value(ip_of_port(port, version))
                addresses.append(value)
                unknown |= not known
            addresses += cluster_vips if vips else []
            entry = " ".join(addresses)
            secondary = index != _primary_index(workload) and segment[0] is not None
            dhcp4 = key("DHCP_Options", *segment, "v4", *(("secondary",) if secondary else ()))
            dhcp = self._dhcp_on(*segment)
            refs = {"dhcpv4_options": (dhcp4,) if 4 in spaces and dhcp else (),
                    "dhcpv6_options": (key("DHCP_Options", *segment, "v6"),)
                    if 6 in spaces and dhcp else ()}
            row = key("Logical_Switch_Port", *port.split("/"))
            kept, tags = self.kept(
                row, name=f"unet.{t}.{_short(workload.kind)}.{workload.name}.{index}")
            meta.update(tags)
            self.out.add("Logical_Switch_Port", row, workload.ref, {
                "name": kept["name"],
                "type": "", "addresses": [entry], "port_security": [entry], "options": {},
                "tag_request": None,
            }, refs={k: v for k, v in refs.items() if v},
                parent=(key("Logical_Switch", *segment), "ports"),
                unknown=frozenset({"addresses", "port_security"}) if unknown else frozenset(),
                meta=meta, identity=identity)

    def _dhcp_on(self, tenant: str | None, subnet: str) -> bool:
        found = self.model.get("Subnet" if tenant is not None else "ProviderNetwork", tenant,
                               subnet)
        return bool(found is not None and found.obj.spec.dhcp)

    # -- external access --------------------------------------------------------------------
    def _reservation(self, eip: Manifest) -> None:
        address, known = self.value(external_key(eip.tenant, eip.name))
        self.out.add("Address_Set", key("Address_Set", eip.tenant, "eip", eip.name), eip.ref, {
            "name": ident("unet_eip", eip.tenant, eip.name), "addresses": [address],
        }, unknown=frozenset() if known else frozenset({"addresses"}),
            meta=self.recorded(external_key(eip.tenant, eip.name)))

    def _gateway(self, vn: Manifest) -> None:
        """The router's way out: its port on the region's external switch, the default
        route of each family the port has an address in, the NATGateway's SNAT and the
        attachments' DNAT."""
        t = vn.tenant
        addresses = self._router_addresses(vn)
        if not addresses:
            return
        nat = self.model.nat_gateways.get((t, vn.name))
        owner = nat.ref if nat is not None else vn.ref
        values = {version: self.value(alloc) for version, (alloc, _space) in addresses.items()}
        lrp_key = self._gateway_port(vn, addresses, values, owner)
        for version, (_alloc, space) in addresses.items():
            self._default_route(vn, version, space, owner)
        router = key("Logical_Router", t, vn.name)
        cidrs = self.model.network_cidrs(t, vn.name)
        translated = self.model.external_ip_family(t, nat.obj.spec.external_ip) \
            if nat is not None else None
        if nat is not None and translated in cidrs and translated in values:
            self._nat(router, lrp_key, key("NAT", t, vn.name, "snat"), nat.ref, "snat",
                      values[translated], str(cidrs[translated]))
        for attachment in self.model.active_attachments.get((t, vn.name), []):
            self._dnat(router, lrp_key, attachment)

    def _gateway_port(self, vn: Manifest, addresses: dict[int, tuple[str, Any]],
                      values: dict[int, tuple[str, bool]], owner: str) -> str:
        """The router's port on the external switch, with an address in each family its
        NATGateway and attachments use (model.router_pools); its key."""
        t = vn.tenant
        lrp_key = key("Logical_Router_Port", t, vn.name, "external")
        lrp_name = _gateway_port_name(vn)
        known = all(found for _value, found in values.values())
        self.out.add("Logical_Router_Port", lrp_key, owner, {
            "name": lrp_name, "mac": self.mac(lrp_key),
            "networks": [f"{values[v][0]}/{space.net.prefixlen}"
                         for v, (_alloc, space) in addresses.items()],
            "peer": None, "ipv6_ra_configs": {}, "options": {},
        }, parent=(key("Logical_Router", t, vn.name), "ports"),
            unknown=frozenset() if known else frozenset({"networks"}),
            meta=self.recorded(*(alloc for alloc, _space in addresses.values())))
        self.out.add("Logical_Switch_Port", key("Logical_Switch_Port", t, vn.name, "external"),
                     owner, {
            "name": f"{lrp_name}.router", "type": "router", "addresses": ["router"],
            "options": {"router-port": lrp_name}, "port_security": [], "tag_request": None,
        }, parent=(key("Logical_Switch", "external", vn.obj.spec.region), "ports"))
        for priority, chassis in enumerate(reversed(self.chassis), start=1):
            self.out.add("Gateway_Chassis", key("Gateway_Chassis", t, vn.name, chassis), owner, {
                "name": f"{lrp_name}.{chassis}", "chassis_name": chassis, "priority": priority,
            }, parent=(lrp_key, "gateway_chassis"))
        return lrp_key

    def _router_addresses(self, vn: Manifest) -> dict[int, tuple[str, Any]]:
        """Family → (allocation key, pool space) of the router's external addresses."""
        out = {}
        for version, (pool, eip) in sorted(self.model.router_pools(vn.tenant, vn.name).items()):
            space = self.model.pool_space(pool)
            if space is not None:
                out[version] = (external_key(vn.tenant, eip) if eip is not None
                                else router_gateway_key(vn.tenant, vn.name, version), space)
        return out

    def _default_route(self, vn: Manifest, version: int, space: Any, owner: str) -> None:
        """To the gateway of the pool the router's address of this family is from."""
        if space.gateway is None:
            return
        # The IPv4 route keeps the key it always had.
        self.out.add("Logical_Router_Static_Route", key(
            "Logical_Router_Static_Route", vn.tenant, vn.name, "default",
            *(() if version == 4 else (f"ipv{version}",))), owner, {
            "ip_prefix": "0.0.0.0/0" if version == 4 else "::/0",
            "nexthop": str(netaddr.IPAddress(space.gateway, version)),
            "output_port": _gateway_port_name(vn), "policy": None, "route_table": "",
        }, parent=(key("Logical_Router", vn.tenant, vn.name), "static_routes"))

    def _dnat(self, router: str, lrp_key: str, attachment: Manifest) -> None:
        """To the target's address of the ExternalIP's family (v6→v6, never NAT64)."""
        t, spec = attachment.tenant, attachment.obj.spec
        external = self.value(external_key(t, spec.external_ip))
        version = self.model.external_ip_family(t, spec.external_ip) or 4
        target = spec.target
        if target.kind == "Cluster":
            internal = self.value(vip_key(t, target.name, target.endpoint))
        else:
            workload = self.model.get(target.kind, t, target.name)
            index = _primary_index(workload) if workload is not None else 0
            internal = self.value(ip_of_port(f"{t}/{target.kind}/{target.name}/{index}",
                                             version))
        if spec.ports:
            self._port_forwards(attachment, external, internal, version)
            return
        # `dnat`, not `dnat_and_snat`: inbound only (OSAC); the target's replies are
        # translated back, its new connections leave through the NATGateway, if any.
        self._nat(router, lrp_key, key("NAT", t, "attachment", attachment.name), attachment.ref,
                  "dnat", external, internal[0], internal[1])

    def _port_forwards(self, attachment: Manifest, external: tuple[str, bool],
                       internal: tuple[str, bool], version: int) -> None:
        """Only the given ports, each to its internal port: a load balancer of one backend
        per protocol on the network's router (PlasmaVMC's port forwarding)."""
        t, forwards = attachment.tenant, attachment.obj.spec.ports
        unknown = frozenset() if external[1] and internal[1] else frozenset({"vips"})
        for protocol in sorted({f.protocol for f in forwards}):
            vips = {_endpoint(external[0], f.external_port, version):
                    _endpoint(internal[0], f.internal_port or f.external_port, version)
                    for f in forwards if f.protocol == protocol}
            self.out.add("Load_Balancer", _balancer_key(attachment, protocol), attachment.ref, {
                "name": ident("unet", t, attachment.name, protocol), "vips": vips,
                "protocol": protocol, "options": {},
            }, unknown=unknown)

    def _nat(self, router: str, lrp_key: str, row_key: str, owner: str, kind: str,
             external: tuple[str, bool], logical_ip: str, logical_known: bool = True) -> None:
        unknown = set()
        if not external[1]:
            unknown.add("external_ip")
        if not logical_known:
            unknown.add("logical_ip")
        self.out.add("NAT", row_key, owner, {
            "type": kind, "external_ip": external[0], "logical_ip": logical_ip,
            "external_mac": None, "logical_port": None, "external_port_range": "",
            "options": {},
        }, refs={"gateway_port": (lrp_key,)}, parent=(router, "nat"),
            unknown=frozenset(unknown))


def _dhcp4_server(space: Any, gateway: str | None) -> str | None:
    """The DHCPv4 server's address: the gateway; without one, the first host, which
    validation keeps for it; None: no DHCPv4 (no IPv4, or a /31 or /32)."""
    if space is None or gateway is not None:
        return gateway
    first = space.net.first + 1
    serves = space.net.size > 2 and first in space.reserved
    return str(netaddr.IPAddress(first, 4)) if serves else None


def _peer_port_key(own: tuple[str | None, str], peer: tuple[str | None, str]) -> str:
    return key("Logical_Router_Port", *own, "peering", *peer)


def _peer_port_name(own: tuple[str | None, str], peer: tuple[str | None, str]) -> str:
    return f"unet.{own[0]}.{own[1]}.peer.{peer[0]}.{peer[1]}"


def _gateway_port_name(vn: Manifest) -> str:
    return f"unet.{vn.tenant}.{vn.name}.ext"


def _endpoint(address: str, port: int, version: int) -> str:
    """An address and a port as a load balancer's VIP or backend: IPv6 in brackets."""
    return f"{address}:{port}" if version == 4 else f"[{address}]:{port}"


def _balancer_key(attachment: Manifest, protocol: str) -> str:
    return key("Load_Balancer", attachment.tenant, "attachment", attachment.name, protocol)


def _with_routes(options: dict[str, str], routes: list[tuple[str, str]]) -> dict[str, str]:
    """DHCPv4 options with RFC 3442 classless routes, when there are any (clients then
    ignore `router`: a default route must be one of them)."""
    if not routes:
        return options
    return {**options, "classless_static_route":
            "{" + ", ".join(f"{d},{h}" for d, h in routes) + "}"}


def _hosted_set(vm: Manifest, index: int, version: int) -> str:
    return f"{ident('unet_hosted', vm.tenant, vm.name, str(index))}_ip{version}"


def _short(kind: str) -> str:
    return {"ComputeInstance": "vm", "BaremetalInstance": "bm", "Cluster": "cluster"}[kind]


def _primary_index(workload: Manifest) -> int:
    return primary_index(workload.obj.spec.network_attachments)
