"""Adoption (`unet import --manager ovn`): Northbound rows that no installation owns, read
back as the manifests that describe them, and matched with the rows those manifests render
(the `Adopter` of an OVN session; reconciler/adopt.py runs it).

- `read_rows`: every row of the tables unet writes, with the columns unet reads; rows an
  installation's tag claims are set apart (another installation's are never adopted).
- `infer`: the manifests of one tenant, a VirtualNetwork per Logical_Router, a Subnet per
  router port and its switch, a ComputeInstance per plain port, a SecurityGroup per port
  group of a network, and what the rows hold already, so that nothing moves: addresses
  and MACs, and the names and router MACs chosen by hand (kept as `adopted/…` values).
  Inference guesses; it is never trusted alone:
- `match`: the rows the inferred (or reviewed) manifests render, paired with the unowned
  rows: by name, or, for rows without one, by parent and content. The reconciler adopts a
  network only when every row it renders is there, equal but for unet's tags, and holds
  nothing else.
- `tag`: the pairs, as updates of their tags alone, in one transaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import netaddr

from unet.managers.sdk import (
    TAG_INSTALLATION,
    Action,
    Adopter,
    Adoption,
    BackendObject,
    Change,
    Held,
    ImportedNetwork,
    Refusal,
    Step,
    adopted_key,
)

from .codec import Row, atoms, compact_row, tag, to_object, uuid_of
from .codec import label as row_label
from .northbound import Northbound
from .render import ident
from .schema import MANAGED_COLUMNS, PARENT_COLUMNS, REF_COLUMNS

API = "network.osac.io/v1alpha1"
#: Rows without a name, matched inside their parent by these columns.
_UNNAMED = {"ACL": ("direction", "priority", "match", "action"),
            "NAT": ("type", "external_ip", "logical_ip"),
            "Logical_Router_Static_Route": ("ip_prefix", "nexthop"),
            "DHCP_Options": ("cidr", "options")}


#: Read of unowned rows besides what unet reads of its own: to say what to do about them.
_READ_TOO = {"Logical_Switch_Port": ("dynamic_addresses",)}


@dataclass
class Rows:
    """The Northbound as adoption sees it: rows no installation owns, by table and UUID."""

    free: dict[str, dict[str, Row]]
    refused: list[Refusal]  # rows of other installations
    table_of: dict[str, str] = field(default_factory=dict)  # UUID → table, of free rows

    def get(self, table: str, uuid: str) -> Row | None:
        return self.free.get(table, {}).get(uuid)

    def label(self, uuid: str, table: str = "row") -> str:
        """How people know the row: its name, or what it does (a NAT rule's addresses, a
        route's prefix); `table` names a row of a table adoption does not read."""
        table = self.table_of.get(uuid, table)
        row = self.free.get(table, {}).get(uuid, {})
        if isinstance(row.get("name"), str) and row["name"]:
            return f"{table} {row['name']}"
        if table == "ACL":
            return f"ACL {row['direction']} {row['priority']} {row['action']} `{row['match']}`"
        if table == "DHCP_Options":
            return f"DHCP_Options {row['cidr']} ({uuid})"
        if table in ("NAT", "Logical_Router_Static_Route") and row:
            return row_label(table, uuid, row)
        return f"{table} {uuid}"


def _references(nb: Northbound, table: str) -> dict[str, str]:
    """Every column of `table` that refers to rows of another, with that table: what an
    adopted row refers to must be what its manifests say (a switch's load balancers)."""
    out = {}
    for name, column in nb.schema.db.tables[table].columns.items():
        for base in (column.type.key, column.type.value):
            if base is not None and base.ref_table_name:
                out[name] = str(base.ref_table_name)
    return out


def read_rows(nb: Northbound, installation: str) -> Rows:
    """Every row of the tables unet writes; those another installation's tag claims are
    refused, this installation's are left out (they are unet's already)."""
    tables = list(MANAGED_COLUMNS)
    ours = ["external_ids", "excludes", ["map", [[TAG_INSTALLATION, installation]]]]
    operations = [{"op": "select", "table": table, "where": [ours],
                   "columns": list(dict.fromkeys(["_uuid", *nb.schema.columns_read(table),
                                                  *_READ_TOO.get(table, ()),
                                                  *_references(nb, table)]))}
                  for table in tables]
    results = nb.fence(installation).read(operations, compact_row)
    free: dict[str, dict[str, Row]] = {}
    refused = []
    table_of = {}
    for table, found in zip(tables, results, strict=True):
        free[table] = {}
        for row in found:
            owner = tag(row, TAG_INSTALLATION)
            if owner == installation:
                continue
            if owner is not None:
                name = row.get("name") or uuid_of(row)
                refused.append(Refusal(f"{table} {name}", f"owned by installation {owner}: "
                                       "never adopted by another"))
                continue
            free[table][uuid_of(row)] = row
            table_of[uuid_of(row)] = table
    return Rows(free, refused, table_of)


# --- inference --------------------------------------------------------------------------------


def _keep(network: ImportedNetwork, row_key: str, column: str, value: str,
          unets: str | None = None) -> None:
    """A value the row keeps once adopted (its name, unless it is unet's own, `unets`)."""
    if value != unets:
        network.held[adopted_key(row_key, column)] = Held(value)


def label(name: str, prefix: str = "") -> str:
    """A DNS label for a row's name: unet's own prefix taken off, `_` and `.` as `-`."""
    text = name[len(prefix):] if prefix and name.startswith(prefix) else name
    text = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return text[:63].strip("-")


def infer(rows: Rows, tenant: str, region: str) -> list[ImportedNetwork]:
    """The networks of the unowned routers, as manifests of `tenant` in `region`."""
    inferring = _Inference(rows, tenant, region)
    return [inferring.network(uuid, row)
            for uuid, row in sorted(rows.free["Logical_Router"].items(),
                                    key=lambda item: str(item[1]["name"]))]


class _Inference:
    def __init__(self, rows: Rows, tenant: str, region: str) -> None:
        self.rows = rows
        self.tenant = tenant
        self.region = region
        self.prefix = f"unet.{tenant}."
        # router port name → (switch UUID, switch port UUID) of its peer
        self.peers: dict[str, tuple[str, str]] = {}
        for switch, row in rows.free["Logical_Switch"].items():
            for port in atoms(row["ports"]):
                lsp = rows.get("Logical_Switch_Port", port)
                if lsp is not None and lsp["type"] == "router":
                    peer = _map(lsp["options"]).get("router-port")
                    if peer:
                        self.peers[peer] = (switch, port)
        self.groups_of: dict[str, list[str]] = {}  # port UUID → its port groups' names
        for row in rows.free["Port_Group"].values():
            for port in atoms(row["ports"]):
                self.groups_of.setdefault(port, []).append(str(row["name"]))

    def network(self, uuid: str, router: Row) -> ImportedNetwork:
        name = label(str(router["name"]), self.prefix)
        found = ImportedNetwork(name)
        _keep(found, f"Logical_Router/{self.tenant}/{name}", "name", str(router["name"]),
              f"unet.{self.tenant}.{name}")
        cidrs: dict[int, list[netaddr.IPNetwork]] = {}
        subnets, workloads = [], []
        for port in atoms(router["ports"]):
            subnet = self._subnet(found, port)
            if subnet is None:
                continue
            subnets.append(subnet[0])
            workloads += subnet[2]
            for net in subnet[1]:
                cidrs.setdefault(net.version, []).append(net)
        spec: dict[str, Any] = {"region": self.region}
        for version, nets in sorted(cidrs.items()):
            whole = nets[0].cidr if len(nets) == 1 else netaddr.spanning_cidr(nets)
            spec["ipv4Cidr" if version == 4 else "ipv6Cidr"] = str(whole)
        if not cidrs:
            found.refused.append(Refusal(f"Logical_Router {router['name']}", "no router port "
                                         "on a switch: a VirtualNetwork needs a subnet"))
            return found
        found.manifests = [_manifest("VirtualNetwork", name, spec), *subnets,
                           *self._groups(name, set(cidrs)), *workloads]
        return found

    def _subnet(self, network: ImportedNetwork, port: str
                ) -> tuple[dict[str, Any], list[netaddr.IPNetwork], list[dict[str, Any]]] | None:
        lrp = self.rows.get("Logical_Router_Port", port)
        if lrp is None:
            return None
        peer = self.peers.get(str(lrp["name"]))
        if peer is None:
            network.refused.append(Refusal(f"Logical_Router_Port {lrp['name']}",
                                           "on no switch unet could adopt"))
            return None
        switch = self.rows.free["Logical_Switch"][peer[0]]
        ports = [p for p in (self.rows.get("Logical_Switch_Port", u)
                             for u in atoms(switch["ports"])) if p is not None]
        if any(p["type"] == "localnet" for p in ports):
            network.refused.append(Refusal(
                f"Logical_Router_Port {lrp['name']}", "its switch reaches a physical network "
                "(a localnet port): a gateway to the outside, which adoption does not read yet "
                "(NATGateway, ExternalIP)"))
            return None
        try:
            nets = [netaddr.IPNetwork(n) for n in atoms(lrp["networks"])]
        except (netaddr.AddrFormatError, ValueError):
            network.refused.append(Refusal(f"Logical_Router_Port {lrp['name']}",
                                           f"networks {atoms(lrp['networks'])} are not "
                                           "addresses with prefixes"))
            return None
        name = label(str(switch["name"]), self.prefix)
        t = self.tenant
        _keep(network, f"Logical_Switch/{t}/{name}", "name", str(switch["name"]),
              f"unet.{t}.{name}")
        _keep(network, f"Logical_Router_Port/{t}/{name}", "name", str(lrp["name"]),
              f"unet.{t}.{name}.gw")
        _keep(network, f"Logical_Router_Port/{t}/{name}", "mac", str(lrp["mac"]))
        peer_name = str(self.rows.free["Logical_Switch_Port"][peer[1]]["name"])
        _keep(network, f"Logical_Switch_Port/{t}/{name}/router", "name", peer_name,
              f"unet.{t}.{name}.router")
        spec: dict[str, Any] = {"virtualNetwork": network.name}
        for net in nets:
            cidr = net.cidr
            spec["ipv4Cidr" if net.version == 4 else "ipv6Cidr"] = str(cidr)
            if net.ip != netaddr.IPAddress(cidr.first + 1, net.version):
                spec["gateway" if net.version == 4 else "ipv6Gateway"] = str(net.ip)
        spec.update(self._dhcp(ports))
        workloads = [vm for lsp_uuid in atoms(switch["ports"])
                     if (vm := self._workload(network, name, lsp_uuid)) is not None]
        return _manifest("Subnet", name, spec), nets, workloads

    def _dhcp(self, ports: list[Row]) -> dict[str, Any]:
        """What the DHCP options the subnet's ports use say, as a Subnet's fields."""
        v4 = [self.rows.get("DHCP_Options", u) for p in ports for u in atoms(p["dhcpv4_options"])]
        v6 = [self.rows.get("DHCP_Options", u) for p in ports for u in atoms(p["dhcpv6_options"])]
        if not any(v4) and not any(v6):
            return {"dhcp": False}
        options = _map(next((o for o in v4 if o is not None), {"options": {}})["options"])
        spec: dict[str, Any] = {}
        if "lease_time" in options and options["lease_time"] != "43200":
            spec["leaseTime"] = int(options["lease_time"])
        if "mtu" in options and options["mtu"] != "1500":
            spec["mtu"] = int(options["mtu"])
        servers = _braced(options.get("dns_server", ""))
        v6_options = _map(next((o for o in v6 if o is not None), {"options": {}})["options"])
        servers += _braced(v6_options.get("dns_server", ""))
        if servers:
            spec["dnsServers"] = servers
        if options.get("ntp_server"):
            spec["ntpServers"] = _braced(options["ntp_server"])
        if options.get("domain_name"):
            spec["domainName"] = options["domain_name"].strip('"')
        return spec

    def _workload(self, network: ImportedNetwork, subnet: str, uuid: str
                  ) -> dict[str, Any] | None:
        lsp = self.rows.get("Logical_Switch_Port", uuid)
        if lsp is None or lsp["type"] != "":
            return None
        shown = f"Logical_Switch_Port {lsp['name']}"
        entries = atoms(lsp["addresses"])
        parts = str(entries[0]).split() if len(entries) == 1 else []
        if not parts or not netaddr.valid_mac(parts[0]) or len(parts) > 3 \
                or not all(netaddr.valid_ipv4(a) or netaddr.valid_ipv6(a) for a in parts[1:]):
            chosen = lsp.get("dynamic_addresses")
            if "dynamic" in parts and isinstance(chosen, str) and chosen:
                network.refused.append(Refusal(shown, f"addresses {entries}: OVN chooses them "
                                               "(dynamic), unet keeps fixed ones: set those "
                                               f"it chose, `ovn-nbctl lsp-set-addresses "
                                               f"{lsp['name']} '{chosen}'`, and import again"))
                return None
            network.refused.append(Refusal(shown, f"addresses {entries or '[]'}: a workload "
                                           "port has one MAC and at most one fixed address "
                                           "per family"))
            return None
        name = _workload_name(str(lsp["name"]), self.prefix)
        if not name:
            network.refused.append(Refusal(shown, "its name gives no workload name"))
            return None
        port = f"{self.tenant}/ComputeInstance/{name}/0"
        scope = f"Subnet/{self.tenant}/{subnet}"
        _keep(network, f"Logical_Switch_Port/{port}", "name", str(lsp["name"]),
              f"unet.{self.tenant}.vm.{name}.0")
        network.held[f"mac/{port}"] = Held(parts[0], scope)
        for address in parts[1:]:
            version = netaddr.IPAddress(address).version
            network.held[f"ipv{version}/{port}"] = Held(address, scope)
        attachment: dict[str, Any] = {"subnet": subnet}
        groups = sorted(label(g, f"unet.{self.tenant}.{network.name}.".replace("-", "_"))
                        for g in self.groups_of.get(uuid, ())
                        if g.startswith(ident("unet", self.tenant, network.name) + "."))
        if groups and groups != ["default"]:
            attachment["securityGroups"] = groups
        return _manifest("ComputeInstance", name, {"networkAttachments": [attachment]})

    def _groups(self, network: str, families: set[int]) -> Iterator[dict[str, Any]]:
        """SecurityGroups from the port groups named `unet.<tenant>.<network>.<group>`: their
        allow-related rules at unet's rule priority, read back from their matches."""
        prefix = ident("unet", self.tenant, network) + "."
        for row in sorted(self.rows.free["Port_Group"].values(), key=lambda r: str(r["name"])):
            name = str(row["name"])
            if not name.startswith(prefix) or name.endswith(".router"):
                continue
            group = name[len(prefix):].replace("_", "-")
            rules: dict[str, list[dict[str, Any]]] = {"ingress": [], "egress": []}
            for acl_uuid in atoms(row["acls"]):
                acl = self.rows.get("ACL", acl_uuid)
                rule = _rule(acl, prefix) if acl is not None else None
                if rule is not None and rule[1] not in rules[rule[0]]:
                    rules[rule[0]].append(rule[1])
            spec: dict[str, Any] = {"virtualNetwork": network}
            spec.update((d, sorted(_merged(r), key=_rule_order)) for d, r in rules.items() if r)
            if group == "default" and spec == _implicit_default(network, families):
                continue  # the implicit default group: no manifest says it
            yield _manifest("SecurityGroup", group, spec)


def _implicit_default(network: str, families: set[int]) -> dict[str, Any]:
    """The implicit `default` group as read back from its ACLs: ingress from its members,
    all egress in each family of the network."""
    return {"virtualNetwork": network,
            "ingress": [{"protocol": "all", "securityGroup": "default"}],
            "egress": sorted(({"protocol": "all", "cidr": cidr}
                              for version, cidr in ((4, "0.0.0.0/0"), (6, "::/0"))
                              if version in families), key=_rule_order)}


def _rule_order(rule: dict[str, Any]) -> tuple[Any, ...]:
    """Rules in a fixed order (a port group's ACLs have none): by protocol, port, ICMP
    type, then remote."""
    return (rule["protocol"], rule.get("portFrom", 0), rule.get("icmpType", -1),
            rule.get("icmpCode", -1), rule.get("cidr", ""), rule.get("securityGroup", ""))

_ACL = re.compile(
    r"(?P<port>outport|inport) == @\S+ && (?P<family>ip[46])"
    r"(?: && ip[46]\.(?:src|dst) == (?P<remote>\S+))?"
    r"(?: && (?:(?P<proto>tcp|udp)(?:\.dst == (?P<port1>\d+)|\.dst >= (?P<low>\d+) && "
    r"(?:tcp|udp)\.dst <= (?P<high>\d+))?|(?P<icmp>icmp[46])(?: && icmp[46]\.type == "
    r"(?P<type>\d+))?(?: && icmp[46]\.code == (?P<code>\d+))?))?")


def _rule(acl: Row, prefix: str) -> tuple[str, dict[str, Any]] | None:
    """(direction, rule) of a security group's ACL as unet writes them; None for others."""
    if acl["priority"] != 1002 or acl["action"] != "allow-related":
        return None
    found = _ACL.fullmatch(str(acl["match"]))
    if found is None:
        return None
    rule: dict[str, Any] = {}
    if found["proto"]:
        rule["protocol"] = found["proto"]
        low = found["port1"] or found["low"]
        if low:
            rule["portFrom"], rule["portTo"] = int(low), int(found["port1"] or found["high"])
    elif found["icmp"]:
        rule["protocol"] = "icmpv6" if found["icmp"] == "icmp6" else "icmp"
        if found["type"]:
            rule["icmpType"] = int(found["type"])
        if found["code"]:
            rule["icmpCode"] = int(found["code"])
    else:
        rule["protocol"] = "all"
    remote = found["remote"]
    if remote is None:
        rule["cidr"] = "0.0.0.0/0" if found["family"] == "ip4" else "::/0"
    elif remote.startswith("$" + prefix):
        group = remote[1 + len(prefix):].rsplit("_ip", 1)[0]
        rule["securityGroup"] = group.replace("_", "-")
    elif remote.startswith("$"):
        return None
    else:
        try:
            rule["cidr"] = str(netaddr.IPNetwork(remote).cidr) if "/" in remote else \
                f"{netaddr.IPAddress(remote)}/{32 if found['family'] == 'ip4' else 128}"
        except (netaddr.AddrFormatError, ValueError):
            return None  # a set of addresses: no rule of the API
    return ("ingress" if found["port"] == "outport" else "egress"), rule


def _merged(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Untyped ICMP of both families is one rule (`icmp`), as the API writes it."""
    untyped = {"protocol": "icmpv6"}
    out = []
    for rule in rules:
        if {k: v for k, v in rule.items() if k not in ("cidr", "securityGroup")} == untyped:
            twin = {**rule, "protocol": "icmp"}
            if twin in rules:
                continue
        out.append(rule)
    return out


def _workload_name(port: str, prefix: str) -> str:
    """`unet.<tenant>.vm.<name>.0` (unet's own) → name; anything else: the name as a label."""
    if port.startswith(prefix + "vm.") and port.endswith(".0"):
        return label(port[len(prefix) + 3:-2])
    return label(port)


#: On every imported manifest: until the adoption is merged and applied, a plan of a branch
#: without the manifests would delete the adopted rows; this refuses it (PREVENT_DESTROY).
PROTECTED = {"network.osac.io/prevent-destroy": "true"}


def _manifest(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind,
            "metadata": {"name": name, "annotations": dict(PROTECTED)}, "spec": spec}


def _map(value: Any) -> dict[str, str]:
    return value if isinstance(value, dict) else {}


def _braced(text: str) -> list[str]:
    """`{a, b}` or `a` as OVN writes option lists."""
    return [part.strip() for part in text.strip("{}").split(",") if part.strip()]


# --- matching ---------------------------------------------------------------------------------


class OvnAdopter(Adopter):
    """The unowned rows of one Northbound, read once (`ours`: key → (table, UUID) of the
    installation's rows, for references to them)."""

    def __init__(self, nb: Northbound, installation: str, manager: str,
                 ours: dict[str, tuple[str, str]]) -> None:
        self.nb = nb
        self.installation = installation
        self.manager = manager
        self.ours = ours
        self.rows = read_rows(nb, installation)
        self.uuids: dict[str, tuple[str, str]] = {}  # key → (table, UUID) of matched rows

    def networks(self, tenant: str, region: str) -> list[ImportedNetwork]:
        return infer(self.rows, tenant, region)

    def refused(self) -> list[Refusal]:
        return list(self.rows.refused)

    def unowned(self) -> dict[str, str]:
        return {uuid: self.rows.label(uuid) for found in self.rows.free.values()
                for uuid in found}

    def match(self, desired: Sequence[BackendObject]) -> Adoption:
        """Pair rendered rows with unowned ones: named rows by name, the others by parent
        and content."""
        rows = self.rows
        wanted = sorted(desired, key=lambda obj: (obj.parent is not None, obj.key))
        by_name = {(table, str(row["name"])): uuid for table, found in rows.free.items()
                   for uuid, row in found.items() if isinstance(row.get("name"), str)}
        taken: dict[str, str] = {}  # UUID → key
        found: dict[str, str] = {}  # key → UUID
        for obj in wanted:
            uuid = _find(obj, rows, by_name, taken, found)
            if uuid is not None:
                taken[uuid], found[obj.key] = obj.key, uuid
        ours = {uuid for _table, uuid in self.ours.values()}
        key_of = {uuid: key for key, (_table, uuid) in self.ours.items()} | taken
        parent_of = {child: (key_of[uuid], column)
                     for table, columns in PARENT_COLUMNS.items()
                     for uuid, row in rows.free[table].items() if uuid in taken
                     for column in columns for child in atoms(row[column])}
        out = Adoption({}, {})
        for uuid, key in sorted(taken.items(), key=lambda item: item[1]):
            table = rows.table_of[uuid]
            row = dict(rows.free[table][uuid])
            row["external_ids"] = dict(_map(row["external_ids"]))  # to_object takes it
            out.objects[key] = to_object(self.nb.schema, table, row, key_of, parent_of,
                                         self.manager, ())
            out.ids[key] = uuid
            self.uuids[key] = (table, uuid)
            # Every column whose rows live inside this one (the server's schema says which:
            # a switch's ACLs and QoS rules, a router's policies, besides the columns unet
            # fills), so that nothing the manifests do not say goes with it.
            out.extra += [(key, rows.label(child, held))
                          for column, held in self.nb.schema.holding.get(table, {}).items()
                          for child in atoms(row.get(column, [])) if child not in taken]
            # And every other row it refers to that unet would not write there (a switch's
            # load balancers or DNS records); those unet writes are compared as fields.
            compared = {*self.nb.schema.holding.get(table, {}), *REF_COLUMNS.get(table, ())}
            out.extra += [(key, f"refers to {rows.label(target, other)}")
                          for column, other in _references(self.nb, table).items()
                          if column not in compared
                          for target in atoms(row.get(column, []))
                          if target not in taken and target not in ours]
        return out

    def tag(self, pairs: Sequence[tuple[BackendObject, BackendObject]]) -> None:
        """Updates whose fields, references and parents are as they are: the transaction
        writes the tags alone (transaction.py writes only what changed)."""
        changes = {want.uid: Change(want.uid, have, want, Action.UPDATE, "adopted")
                   for want, have in pairs}
        steps = [Step(Action.UPDATE, uid) for uid in sorted(changes)]
        self.nb.apply({**self.ours, **self.uuids}, [steps], changes, self.installation,
                      lambda _index, _waves, _steps: lambda _done, _total: None)


def _find(obj: BackendObject, rows: Rows, by_name: dict[tuple[str, str], str],
          taken: dict[str, str], found: dict[str, str]) -> str | None:
    """The unowned row `obj` stands for (`taken`: UUID → key, `found`: key → UUID, of the
    rows matched so far, parents before children)."""
    if obj.table not in _UNNAMED:
        uuid = by_name.get((obj.table, str(obj.fields.get("name"))))
        return uuid if uuid is not None and uuid not in taken else None
    columns = _UNNAMED[obj.table]
    candidates = rows.free[obj.table]
    if obj.parent is not None:
        parent = found.get(obj.parent[0])
        if parent is None:
            return None
        holder = rows.free[rows.table_of[parent]][parent]
        candidates = {u: candidates[u] for u in atoms(holder[obj.parent[1]])
                      if u in candidates}
    # Equal in what identifies it; failing that, DHCP options of the same CIDR (whose
    # options then show as what differs).
    for identifying in (columns, columns[:1] if obj.table == "DHCP_Options" else ()):
        for uuid, row in sorted(candidates.items()):
            if identifying and uuid not in taken \
                    and all(_plain(row[c]) == obj.fields.get(c) for c in identifying):
                return uuid
    return None


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else value
