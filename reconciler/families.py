"""What manifests say of address families and capabilities: one spelling each (a
NetworkClass's capabilities, a family's fields in manifests and in the models)."""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any


class Capability(StrEnum):
    IPV4 = "IPv4"
    IPV6 = "IPv6"
    SECURITY_GROUPS = "SecurityGroups"
    EXTERNAL_IPS = "ExternalIPs"
    NAT_GATEWAYS = "NATGateways"
    COMPUTE_INSTANCES = "ComputeInstances"
    BAREMETAL_INSTANCES = "BaremetalInstances"
    CLUSTERS = "Clusters"
    DHCP = "DHCP"
    PEERINGS = "VirtualNetworkPeerings"


ADDRESS_FAMILIES = frozenset({Capability.IPV4, Capability.IPV6})


class Family(IntEnum):
    """An address family, and how manifests and messages spell what belongs to it: the one
    place that knows `ipv4Cidr`, `ipv4_cidr`, `IPv4` and `4` name one thing. A member equals
    its version, so maps keyed by 4 and 6 take it as a key."""

    V4 = 4
    V6 = 6

    @property
    def label(self) -> str:
        """As people write it: `IPv4`."""
        return f"IPv{self.value}"

    @property
    def capability(self) -> Capability:
        return Capability(self.label)

    @property
    def cidr_field(self) -> str:
        """The CIDR's field in manifests (`ipv4Cidr`); `cidr_attr` in the models."""
        return f"ipv{self.value}Cidr"

    @property
    def cidr_attr(self) -> str:
        return f"ipv{self.value}_cidr"

    @property
    def gateway_field(self) -> str:
        """A subnet's gateway field (`gateway` for IPv4, `ipv6Gateway`)."""
        return "gateway" if self is Family.V4 else "ipv6Gateway"

    @property
    def gateway_attr(self) -> str:
        return "gateway" if self is Family.V4 else "ipv6_gateway"

    @property
    def address_field(self) -> str:
        """An attachment's fixed address field (`ipAddress` for IPv4, `ipv6Address`)."""
        return "ipAddress" if self is Family.V4 else "ipv6Address"

    @property
    def address_attr(self) -> str:
        return "ip_address" if self is Family.V4 else "ipv6_address"

    def cidr_of(self, spec: Any) -> str | None:
        """A network's or subnet's CIDR of this family, as the manifest gives it."""
        return getattr(spec, self.cidr_attr, None)
