"""Typed models of every kind of the manifest API (`network.osac.io/v1alpha1`).

The JSON Schemas under `schemas/` are generated from these models (`unet schema`).
Value rules that have a diagnostic code of their own (port ranges, MTU bounds,
CIDR syntax, ...) are checked by the semantic stage, not by the schema, so that
users get the specific code and hint. Those that JSON Schema can express are
declared `editor_only` as well: editors flag them from the combined schema.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from .families import Capability as Capability
from .families import Family as Family

API_VERSION = "network.osac.io/v1alpha1"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
PREVENT_DESTROY_ANNOTATION = "network.osac.io/prevent-destroy"

Name = Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=63)]
Address = Annotated[str, Field(description="An IPv4 or IPv6 address")]
Cidr = Annotated[str, Field(description="A CIDR in canonical form, e.g. 10.0.1.0/24")]


#: Key of JSON Schema keywords for editors only. `unet schema` merges them into the
#: combined schema editors read (unet.schema.json) and leaves them out of the per-kind
#: schemas `unet validate` checks shapes with: the rules they mirror have codes and hints
#: of their own (RULE_PORTS_INVALID, MTU_INVALID, ...), reported by the semantic stage.
EDITOR_ONLY = "x-unet-editor"


def editor_only(**keywords: Any) -> dict[str, Any]:
    """`json_schema_extra` of a field or model: JSON Schema keywords for editors only."""
    return {EDITOR_ONLY: keywords}


def _each_required(*fields: str) -> list[dict[str, Any]]:
    """One `required` per field: under oneOf, exactly one of them; under anyOf, any."""
    return [{"required": [field]} for field in fields]


def _forbidden_unless(field: str, values: list[str], *forbidden: str) -> dict[str, Any]:
    """`forbidden` fields only where `field` is one of `values`."""
    return {"if": {"properties": {field: {"not": {"enum": values}}}, "required": [field]},
            "then": {"properties": dict.fromkeys(forbidden, False)}}


_EITHER_FAMILY = _each_required("ipv4Cidr", "ipv6Cidr")  # under anyOf: one family or both


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
    )


# --- common ---------------------------------------------------------------------------------


class Metadata(_Model):
    name: Name
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class TenantMetadata(Metadata):
    tenant: Name | None = Field(
        default=None, description="Optional; derived from the folder and must match it"
    )


class AddressRange(_Model):
    start: Address
    end: Address


class _Resource(_Model):
    api_version: Literal["network.osac.io/v1alpha1"]
    scope: ClassVar[Literal["provider", "tenant", "root"]] = "provider"
    #: Fields whose change replaces the object: dotted paths, `*` for every list item.
    immutable: ClassVar[tuple[str, ...]] = ()
    #: What a change of one of them replaces, as the plan shows it (the editor schema's
    #: descriptions say it: `unet schema`); default: the object and what depends on it.
    replaces: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return self.metadata.name  # type: ignore[attr-defined,no-any-return]

    @property
    def prevent_destroy(self) -> bool:
        annotations = self.metadata.annotations  # type: ignore[attr-defined]
        return str(annotations.get(PREVENT_DESTROY_ANNOTATION, "")).lower() == "true"


class _ProviderResource(_Resource):
    metadata: Metadata


class _TenantResource(_Resource):
    scope: ClassVar[Literal["provider", "tenant", "root"]] = "tenant"
    metadata: TenantMetadata


# --- RepositoryConfig ---------------------------------------------------------------------


class RepositoryConfigSpec(_Model):
    installation: Name = Field(description="Stamped on every backend object")
    prune: bool = Field(description="Delete from backends what was removed from Git")
    allow_empty: bool = Field(
        default=False, description="Allow a plan that deletes every object of the installation"
    )
    reconcile: Literal["report", "repair"] = Field(
        default="report", description="What the scheduled reconcile job does with drift"
    )


class RepositoryConfig(_Resource):
    scope: ClassVar[Literal["provider", "tenant", "root"]] = "root"
    kind: Literal["RepositoryConfig"]
    metadata: Metadata
    spec: RepositoryConfigSpec


# --- provider kinds -------------------------------------------------------------------------


class NetworkManagerSpec(_Model):
    role: Literal["fabric", "k8s"]
    plugin: str = Field(min_length=1, description="Entry point in the group unet.managers")
    regions: list[Name] = Field(min_length=1)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Plugin settings; values `${ENV_NAME}` are read from the environment",
    )


class NetworkManager(_ProviderResource):
    kind: Literal["NetworkManager"]
    spec: NetworkManagerSpec


class SegmentRange(_Model):
    start: int = Field(ge=1, le=4094)
    end: int = Field(ge=1, le=4094)


class NetworkClassSpec(_Model):
    region: Name
    default: bool = False
    fabric_manager: Name | None = None
    k8s_manager: Name | None = Field(default=None, alias="k8sManager")
    disable_capabilities: list[Capability] = Field(default_factory=list)
    vip_prefix_length: int | None = Field(
        default=None,
        ge=1,
        le=32,
        description="Reserve the last /N block of every IPv4 subnet for cluster VIPs",
    )
    segment_range: SegmentRange = Field(default_factory=lambda: SegmentRange(start=100, end=3999))


class NetworkClass(_ProviderResource):
    kind: Literal["NetworkClass"]
    spec: NetworkClassSpec


class ExternalIPPoolSpec(_Model):
    region: Name
    cidr: Cidr
    gateway: Address | None = Field(default=None, description="Default: the first host")
    ranges: list[AddressRange] | None = Field(
        default=None, description="Default: the CIDR minus network, broadcast and gateway"
    )
    exclude: list[Address] = Field(default_factory=list)
    tenants: list[Name] | None = Field(default=None, description="Default: all tenants")


class ExternalIPPool(_ProviderResource):
    immutable: ClassVar[tuple[str, ...]] = ("spec.cidr",)
    kind: Literal["ExternalIPPool"]
    spec: ExternalIPPoolSpec


TenantKindName = Literal[
    "VirtualNetwork",
    "Subnet",
    "SecurityGroup",
    "ExternalIP",
    "ExternalIPAttachment",
    "NATGateway",
    "VirtualNetworkPeering",
    "ComputeInstance",
    "BaremetalInstance",
    "Cluster",
]

DEFAULT_ALLOWED_CIDRS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")


class TenantSpec(_Model):
    regions: list[Name]
    network_classes: list[Name] | None = Field(
        default=None, description="The NetworkClasses the tenant's VirtualNetworks may use; "
                                  "default: every class of its regions")
    allowed_cidrs: list[Cidr] = Field(default_factory=lambda: list(DEFAULT_ALLOWED_CIDRS))
    quotas: dict[TenantKindName, Annotated[int, Field(ge=0)]] | None = None


class Tenant(_ProviderResource):
    kind: Literal["Tenant"]
    spec: TenantSpec


class HostInterface(_Model):
    name: str = Field(min_length=1, max_length=63)
    role: Literal["fabric", "management", "storage", "lifecycle"]


class HostTypeSpec(_Model):
    interfaces: list[HostInterface] = Field(min_length=1)


class HostType(_ProviderResource):
    kind: Literal["HostType"]
    spec: HostTypeSpec


class GuardrailMatch(_Model):
    """The access a Guardrail forbids: connections from a source covering `from`, of
    `protocol`, to any of `ports`."""

    model_config = ConfigDict(json_schema_extra=editor_only(
        allOf=[_forbidden_unless("protocol", ["tcp", "udp"], "ports")]))

    from_: Cidr = Field(alias="from", description="Fires on openings whose source may have "
                        "every address of this CIDR (0.0.0.0/0: the whole IPv4 internet); "
                        "of one family: IPv6 needs a Guardrail of its own (::/0)")
    protocol: Literal["tcp", "udp", "icmp", "icmpv6", "all"] = Field(
        description="all: any traffic; icmp: ICMP of any type")
    ports: list[Annotated[int, Field(ge=1, le=65535)]] | None = Field(
        default=None, min_length=1,
        description="tcp and udp only: the workload's ports (after a port forward); "
                    "default: any port")


class GuardrailScope(_Model):
    """Which workload NICs a Guardrail protects; every given list must match (a list
    matches when the NIC has any of its values)."""

    tenants: list[Name] | None = Field(default=None, min_length=1,
                                       description="Default: every tenant")
    networks: list[Name] | None = Field(
        default=None, min_length=1, description="VirtualNetwork names; default: every network")
    groups: list[Name] | None = Field(
        default=None, min_length=1,
        description="SecurityGroup names the NIC uses; default: any")


class GuardrailExemption(_Model):
    tenant: Name
    workloads: list[Name] | None = Field(
        default=None, min_length=1, description="Default: every workload of the tenant")
    reason: str | None = None


class GuardrailSpec(_Model):
    action: Literal["deny", "warn"] = Field(
        description="deny: GUARDRAIL_DENIED, an error; warn: GUARDRAIL_WARNED, a warning")
    message: str = Field(min_length=1, description="Said with every violation")
    match: GuardrailMatch
    protects: GuardrailScope = Field(default_factory=GuardrailScope)
    exemptions: list[GuardrailExemption] = Field(default_factory=list)


class Guardrail(_ProviderResource):
    """A provider's policy over the revision's reachability (reconciler/guardrails.py)."""

    kind: Literal["Guardrail"]
    spec: GuardrailSpec


# --- tenant kinds ---------------------------------------------------------------------------


class VirtualNetworkSpec(_Model):
    model_config = ConfigDict(json_schema_extra=editor_only(anyOf=_EITHER_FAMILY))

    region: Name
    network_class: Name | None = Field(default=None, description="Default: the region's default")
    ipv4_cidr: Cidr | None = None
    ipv6_cidr: Cidr | None = None


class VirtualNetwork(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = (
        "spec.region", "spec.networkClass", "spec.ipv4Cidr", "spec.ipv6Cidr")
    replaces: ClassVar[str] = (
        "the virtual network's router, and with it its subnets' router ports, its "
        "NATGateway and its ExternalIPAttachments' NAT rules (workloads' ports stay)")
    kind: Literal["VirtualNetwork"]
    spec: VirtualNetworkSpec


class Route(_Model):
    destination: Cidr
    nexthop: Address


def _null_allowed(schema: dict[str, Any]) -> None:
    """Keep `null` in a field's JSON Schema where it means something (here: no gateway),
    unlike other optional fields, where leaving the field out is the only spelling."""
    description = schema.pop("description", None)
    inner = dict(schema)
    schema.clear()
    schema["anyOf"] = [inner, {"type": "null"}]
    if description is not None:
        schema["description"] = description


class SegmentAddressing(_Model):
    """How one L2 segment hands out addresses and what its DHCP offers: a Subnet's, and a
    ProviderNetwork's."""

    model_config = ConfigDict(json_schema_extra=editor_only(
        anyOf=_EITHER_FAMILY,
        # IPv6 needs an MTU of at least 1280 (RFC 8200)
        allOf=[{"if": {"required": ["ipv6Cidr"]},
                "then": {"properties": {"mtu": {"minimum": 1280}}}}]))

    ipv4_cidr: Cidr | None = None
    ipv6_cidr: Cidr | None = None
    allocation_ranges: list[AddressRange] | None = None
    exclude_addresses: list[Address] = Field(default_factory=list)
    dns_servers: list[Address] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)
    mtu: int = Field(1500, json_schema_extra=editor_only(minimum=68, maximum=9000))
    dhcp: bool = True
    lease_time: int = Field(43200, ge=60, le=4294967295, description="DHCPv4 lease, seconds")
    domain_name: str | None = Field(
        default=None, max_length=253,
        pattern=r"^([a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?$",
        description="Offered by DHCP (domain name, and the IPv6 domain search list)")
    ntp_servers: list[Address] = Field(default_factory=list,
                                       description="IPv4 NTP servers offered by DHCPv4")


class SubnetSpec(SegmentAddressing):
    virtual_network: Name
    gateway: Address | None = Field(
        default=None, json_schema_extra=_null_allowed,
        description="Default: the first host; null: no gateway (an isolated segment)")
    ipv6_gateway: Address | None = Field(
        default=None, json_schema_extra=_null_allowed,
        description="Default: the first host; null: no gateway (an isolated segment)")


class Subnet(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = ("spec.virtualNetwork", "spec.ipv4Cidr", "spec.ipv6Cidr")
    replaces: ClassVar[str] = "the subnet and every port on it"
    kind: Literal["Subnet"]
    spec: SubnetSpec


# --- provider kinds that need the segment model above ---------------------------------------


class ProviderNetworkSpec(SegmentAddressing):
    region: Name
    network_class: Name | None = Field(default=None, description="Default: the region's default")
    segment_id: int = Field(ge=1, le=4094, description="The VLAN it adopts: inside the "
                            "class's segmentRange, never handed to a tenant Subnet")
    physical_network: str = Field(
        default="physnet-tenant", min_length=1,
        description="The network_name of the localnet port that reaches the VLAN")
    tenants: list[Name] = Field(description="The tenants whose workloads may attach to it")


class ProviderNetwork(_ProviderResource):
    immutable: ClassVar[tuple[str, ...]] = (
        "spec.region", "spec.networkClass", "spec.segmentId", "spec.physicalNetwork",
        "spec.ipv4Cidr", "spec.ipv6Cidr")
    kind: Literal["ProviderNetwork"]
    spec: ProviderNetworkSpec


_PORT = editor_only(minimum=1, maximum=65535)
_ICMP = editor_only(minimum=0, maximum=255)


class Rule(_Model):
    model_config = ConfigDict(json_schema_extra=editor_only(
        oneOf=_each_required("cidr", "securityGroup"),
        dependentRequired={"portFrom": ["portTo"], "portTo": ["portFrom"],
                           "icmpCode": ["icmpType"], "peering": ["securityGroup"]},
        allOf=[_forbidden_unless("protocol", ["tcp", "udp"], "portFrom", "portTo"),
               _forbidden_unless("protocol", ["icmp", "icmpv6"], "icmpType", "icmpCode")]))

    protocol: Literal["tcp", "udp", "icmp", "icmpv6", "all"] = Field(
        description="icmp: ICMPv4 when icmpType is given, else ICMP of both families; "
                    "icmpv6: ICMPv6 only (its types)")
    port_from: int | None = Field(default=None, json_schema_extra=_PORT)
    port_to: int | None = Field(default=None, json_schema_extra=_PORT)
    icmp_type: int | None = Field(default=None, description="Of the rule's ICMP family",
                                  json_schema_extra=_ICMP)
    icmp_code: int | None = Field(default=None, json_schema_extra=_ICMP)
    cidr: Cidr | None = Field(default=None, description="Source (ingress) or destination (egress)")
    security_group: Name | None = Field(
        default=None, description="The ports that use this group of the same VirtualNetwork "
                                  "(with `peering`: of the peered network)"
    )
    peering: Name | None = Field(
        default=None, description="A VirtualNetworkPeering of the group's network: "
                                  "`securityGroup` is then a group of its peer network")

    @property
    def families(self) -> frozenset[Family]:
        """The address families its protocol can match."""
        return protocol_families(self.protocol, self.icmp_type)


def protocol_families(protocol: str, icmp_type: int | None) -> frozenset[Family]:
    """The address families a rule's protocol can match: ICMP types are per family."""
    if protocol == "icmpv6":
        return frozenset({Family.V6})
    if protocol == "icmp" and icmp_type is not None:
        return frozenset({Family.V4})
    return frozenset(Family)


class SecurityGroupSpec(_Model):
    virtual_network: Name
    ingress: list[Rule] = Field(default_factory=list)
    egress: list[Rule] = Field(default_factory=list)


class SecurityGroup(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = ("spec.virtualNetwork",)
    kind: Literal["SecurityGroup"]
    spec: SecurityGroupSpec


class ExternalIPSpec(_Model):
    pool: Name
    address: Address | None = Field(default=None, description="Default: allocated")


class ExternalIP(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = ("spec.pool",)
    kind: Literal["ExternalIP"]
    spec: ExternalIPSpec


class AttachmentTarget(_Model):
    model_config = ConfigDict(json_schema_extra=editor_only(
        **{"if": {"properties": {"kind": {"const": "Cluster"}}, "required": ["kind"]},
           "then": {"required": ["endpoint"]},
           "else": {"properties": {"endpoint": False}}}))

    kind: Literal["ComputeInstance", "Cluster", "BaremetalInstance"]
    name: Name
    endpoint: Literal["api", "ingress"] | None = Field(
        default=None, description="Required for a Cluster, forbidden otherwise"
    )


class PortForward(_Model):
    protocol: Literal["tcp", "udp"]
    external_port: int = Field(ge=1, le=65535)
    internal_port: int | None = Field(default=None, ge=1, le=65535,
                                      description="Default: the external port")


class ExternalIPAttachmentSpec(_Model):
    external_ip: Name = Field(alias="externalIP")
    target: AttachmentTarget
    ports: list[PortForward] | None = Field(
        default=None, min_length=1,
        description="Forward only these ports (PlasmaVMC's port forwarding); default: "
                    "every port of the address")


class ExternalIPAttachment(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = (
        "spec.externalIP", "spec.target.kind", "spec.target.name", "spec.target.endpoint")
    replaces: ClassVar[str] = "the attachment (its NAT rule, or its load balancer)"
    kind: Literal["ExternalIPAttachment"]
    spec: ExternalIPAttachmentSpec


class NATGatewaySpec(_Model):
    virtual_network: Name
    external_ip: Name = Field(alias="externalIP")


class NATGateway(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = ("spec.virtualNetwork", "spec.externalIP")
    replaces: ClassVar[str] = "the NAT gateway (its router gateway port and SNAT rule)"
    kind: Literal["NATGateway"]
    spec: NATGatewaySpec


class PeerNetwork(_Model):
    tenant: Name | None = Field(default=None, description="Default: the peering's own tenant")
    virtual_network: Name


class VirtualNetworkPeeringSpec(_Model):
    virtual_network: Name = Field(description="The tenant's own VirtualNetwork")
    peer: PeerNetwork = Field(description="The other network; its tenant declares the other "
                                          "side in its own folder")


class VirtualNetworkPeering(_TenantResource):
    """Routes between two VirtualNetworks of one region, once both sides declare it."""

    immutable: ClassVar[tuple[str, ...]] = (
        "spec.virtualNetwork", "spec.peer.tenant", "spec.peer.virtualNetwork")
    replaces: ClassVar[str] = ("this side of the peering (its link and routes): the networks "
                               "are apart until both sides name the same pair")
    kind: Literal["VirtualNetworkPeering"]
    spec: VirtualNetworkPeeringSpec


MacAddress = Annotated[str, Field(pattern=r"^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$")]


class NetworkAttachment(_Model):
    model_config = ConfigDict(json_schema_extra=editor_only(
        oneOf=_each_required("subnet", "providerNetwork")))

    subnet: Name | None = Field(default=None, description="A Subnet of the tenant; "
                                "exactly one of subnet and providerNetwork")
    provider_network: Name | None = Field(
        default=None, description="A ProviderNetwork the tenant may use, in place of a subnet; "
                                  "never the primary attachment")
    security_groups: list[Name] = Field(
        default_factory=lambda: ["default"], min_length=1,
        description="Default: the network's default group; leave it out rather than empty")
    ip_address: Address | None = None
    ipv6_address: Address | None = None
    mac_address: MacAddress | None = None
    primary: bool | None = Field(default=None, description="Required on one of several")


class BaremetalAttachment(NetworkAttachment):
    interface: str | None = Field(default=None, description="An interface of the HostType")


#: An attachment's immutable fields: changing one replaces the workload's port.
ATTACHMENT_IMMUTABLE = (("subnet", "subnet"), ("providerNetwork", "provider_network"),
                        ("ipAddress", "ip_address"), ("ipv6Address", "ipv6_address"),
                        ("macAddress", "mac_address"))
_ATTACHMENT_IMMUTABLE = tuple(f"spec.networkAttachments.*.{name}"
                              for name, _attribute in ATTACHMENT_IMMUTABLE)
#: What changing an attachment replaces (adding, removing or reordering one does too).
_ATTACHMENT_REPLACES = "every port of the workload"


def attachment_identity(attachment: NetworkAttachment) -> list[Any]:
    """The values of one attachment's immutable fields, in order: its port's identity.
    (A provider network takes the subnet's place, so a port on a subnet keeps the
    identity it had before provider networks existed.)"""
    where = attachment.subnet if attachment.provider_network is None \
        else f"ProviderNetwork/{attachment.provider_network}"
    return [where, attachment.ip_address, attachment.ipv6_address, attachment.mac_address]


def port_identity(attachments: list[NetworkAttachment]) -> Any:
    """What a workload's ports stand for, which their immutable tag hashes (OSAC: a
    workload's attachments are immutable once it exists; adding, removing or reordering
    one recreates every port of the workload, while its groups stay mutable). One
    attachment keeps the identity it always had, so upgrading recreates no such port."""
    identities = [attachment_identity(a) for a in attachments]
    return identities[0] if len(identities) == 1 else identities


def primary_index(attachments: list[NetworkAttachment]) -> int:
    """The attachment DNAT, a Cluster's VIPs and the default route go to: the one marked
    primary, or the only one."""
    return next((i for i, a in enumerate(attachments) if a.primary), 0)


def first_subnet(attachments: list[NetworkAttachment]) -> str | None:
    """The first of a workload's attachments on its own network (not a provider's)."""
    return next((a.subnet for a in attachments if a.subnet is not None), None)


def segment_of(tenant: str | None, attachment: NetworkAttachment) -> tuple[str | None, str]:
    """The segment an attachment is on: (tenant, subnet), or (None, name) of a
    ProviderNetwork."""
    if attachment.provider_network is not None:
        return None, attachment.provider_network
    return tenant, str(attachment.subnet)


class ComputeInstanceSpec(_Model):
    network_attachments: list[NetworkAttachment] = Field(min_length=1, max_length=8)
    hosting_cluster: Name | None = Field(
        default=None,
        description="The hosting cluster (of the network's k8sManager) the VM runs on, as a "
                    "KubeVirt VM; default: a VM on the OVN fabric")


class ComputeInstance(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = _ATTACHMENT_IMMUTABLE
    replaces: ClassVar[str] = _ATTACHMENT_REPLACES
    kind: Literal["ComputeInstance"]
    spec: ComputeInstanceSpec


class BaremetalInstanceSpec(_Model):
    host_type: Name
    network_attachments: list[BaremetalAttachment] = Field(min_length=1)


class BaremetalInstance(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = _ATTACHMENT_IMMUTABLE
    replaces: ClassVar[str] = _ATTACHMENT_REPLACES
    kind: Literal["BaremetalInstance"]
    spec: BaremetalInstanceSpec


class ClusterNetwork(_Model):
    pod_cidr: Cidr = "10.128.0.0/14"
    service_cidr: Cidr = "172.30.0.0/16"


class ClusterSpec(_Model):
    # OSAC's field is repeated: the nodes' NICs. The VIPs are on the primary attachment's
    # subnet; the others are secondary NICs (a second subnet, or a provider network).
    network_attachments: list[NetworkAttachment] = Field(
        min_length=1, max_length=8,
        description="1..8; with several, exactly one is primary (the VIPs' subnet)")
    network: ClusterNetwork = Field(default_factory=ClusterNetwork)
    api_vip: Address | None = None
    ingress_vip: Address | None = None


class Cluster(_TenantResource):
    immutable: ClassVar[tuple[str, ...]] = _ATTACHMENT_IMMUTABLE
    replaces: ClassVar[str] = _ATTACHMENT_REPLACES
    kind: Literal["Cluster"]
    spec: ClusterSpec


Resource = (
    RepositoryConfig
    | NetworkManager
    | NetworkClass
    | ExternalIPPool
    | ProviderNetwork
    | Tenant
    | HostType
    | Guardrail
    | VirtualNetwork
    | Subnet
    | SecurityGroup
    | ExternalIP
    | ExternalIPAttachment
    | NATGateway
    | VirtualNetworkPeering
    | ComputeInstance
    | BaremetalInstance
    | Cluster
)

KINDS: dict[str, type[_Resource]] = {
    model.model_fields["kind"].annotation.__args__[0]: model
    for model in Resource.__args__
}
PROVIDER_KINDS = frozenset(k for k, m in KINDS.items() if m.scope == "provider")
TENANT_KINDS = frozenset(k for k, m in KINDS.items() if m.scope == "tenant")
WORKLOAD_KINDS = ("ComputeInstance", "BaremetalInstance", "Cluster")


def immutable_note(model: type[_Resource]) -> str:
    """What the schema's description of each of a kind's immutable fields says."""
    kind = model.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
    replaces = model.replaces or f"the {kind} and everything that depends on it"
    return f"Immutable: changing it replaces {replaces}."


def immutable_values(obj: _Resource) -> dict[str, Any]:
    """The values of an object's immutable fields, by path (list items numbered)."""
    if not obj.immutable:
        return {}
    data = obj.model_dump(by_alias=True, exclude_none=True)
    out: dict[str, Any] = {}
    for path in obj.immutable:
        for concrete, value in _walk(data, path.split("."), []):
            out[".".join(concrete)] = value
    return out


def _walk(data: Any, parts: list[str], done: list[str]) -> list[tuple[list[str], Any]]:
    if not parts:
        return [(done, data)]
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = data if isinstance(data, list) else []
        return [hit for i, item in enumerate(items) for hit in _walk(item, rest, [*done, str(i)])]
    if isinstance(data, dict) and head in data:
        return _walk(data[head], rest, [*done, head])
    return [([*done, head], None)]
