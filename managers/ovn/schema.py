"""The Northbound tables and columns unet reads and writes, and what the server's own
schema says of them.

unet writes the columns `MANAGED_COLUMNS` names, per table, and nothing else. Of each row
of the installation it reads those, its tags (`external_ids`), the columns that hold its
child rows (`PARENT_COLUMNS`: rows of non-root tables live only while a parent holds
them) and those that refer to other rows (`REF_COLUMNS`). Of everyone else's rows it
reads only the names, in the tables whose rows people find by name (`NAMED_TABLES`): a
row there of another owner blocks the name.

The server's schema adds what only the server knows: each column's type, which decodes
and encodes its values (codec.py), and the columns of unet's tables that hold rows of
non-root tables (`Schema.holding`): a row of others found there lives only inside the
row of ours and would go with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ovs.db.schema
import ovs.db.types

__all__ = ["MANAGED_COLUMNS", "NAMED_TABLES", "PARENT_COLUMNS", "READ_COLUMNS",
           "REF_COLUMNS", "Schema"]

#: The columns unet writes, per table; observe reads exactly these back.
MANAGED_COLUMNS: dict[str, tuple[str, ...]] = {
    "Logical_Router": ("name", "options"),
    "Logical_Switch": ("name", "other_config"),
    "Logical_Router_Port": ("name", "mac", "networks", "peer", "ipv6_ra_configs", "options"),
    "Logical_Switch_Port": ("name", "type", "addresses", "port_security", "options",
                            "tag_request"),
    "DHCP_Options": ("cidr", "options"),
    "Port_Group": ("name",),
    "ACL": ("direction", "priority", "match", "action", "log", "name", "severity"),
    "Address_Set": ("name", "addresses"),
    "NAT": ("type", "external_ip", "logical_ip", "external_mac", "logical_port",
            "external_port_range", "options"),
    "Logical_Router_Static_Route": ("ip_prefix", "nexthop", "output_port", "policy",
                                    "route_table"),
    "Gateway_Chassis": ("name", "chassis_name", "priority"),
    "Load_Balancer": ("name", "vips", "protocol", "options"),
}
#: Columns holding child rows (non-root tables live only while a parent holds them).
PARENT_COLUMNS: dict[str, tuple[str, ...]] = {
    "Logical_Switch": ("ports",),
    "Logical_Router": ("ports", "static_routes", "nat"),
    "Port_Group": ("acls",),
    "Logical_Router_Port": ("gateway_chassis",),
}
#: Columns referring to other rows of ours (weak references).
REF_COLUMNS: dict[str, tuple[str, ...]] = {
    "Logical_Router": ("load_balancer",),
    "Port_Group": ("ports",),
    "Logical_Switch_Port": ("dhcpv4_options", "dhcpv6_options"),
    "NAT": ("gateway_port",),
}


#: Tables whose rows people and ovn-nbctl find by name: a foreign row there blocks the name.
NAMED_TABLES = ("Logical_Switch", "Logical_Router", "Logical_Switch_Port", "Logical_Router_Port",
                "Port_Group", "Address_Set", "Gateway_Chassis")

#: Columns read of each row of ours: the managed ones, the tags, parents' and references.
READ_COLUMNS: dict[str, tuple[str, ...]] = {
    table: tuple(dict.fromkeys((*columns, "external_ids", *PARENT_COLUMNS.get(table, ()),
                                *REF_COLUMNS.get(table, ()))))
    for table, columns in MANAGED_COLUMNS.items()
}


@dataclass(frozen=True)
class Schema:
    """The server's OVN_Northbound schema, as unet uses it."""

    db: ovs.db.schema.DbSchema
    #: Per table of ours, the columns holding rows of non-root tables → the table they hold.
    holding: dict[str, dict[str, str]]

    @classmethod
    def from_json(cls, json: Any) -> Schema:
        """The schema as `get_schema` answers it."""
        db = ovs.db.schema.DbSchema.from_json(json)
        return cls(db, _holding_columns(db))

    def has_column(self, table: str, column: str) -> bool:
        return column in self.db.tables[table].columns

    def type_of(self, table: str, column: str) -> ovs.db.types.Type:
        return self.db.tables[table].columns[column].type

    def columns_read(self, table: str) -> tuple[str, ...]:
        """What is read of each row of ours in `table`: READ_COLUMNS and the holding columns
        (`_uuid` aside: every read has it)."""
        return tuple(dict.fromkeys((*READ_COLUMNS[table], *self.holding.get(table, {}))))


def _holding_columns(db: ovs.db.schema.DbSchema) -> dict[str, dict[str, str]]:
    """Per table of ours, the columns whose rows live only inside the row (strong references
    to non-root tables), with the table they hold: what is there goes with the row."""
    out: dict[str, dict[str, str]] = {}
    for table in MANAGED_COLUMNS:
        for name, column in db.tables[table].columns.items():
            child = column.type.key.ref_table_name
            if child and column.type.key.ref_type == "strong" \
                    and not db.tables[child].is_root:
                out.setdefault(table, {})[name] = child
    return out
