"""Diagnostics: the stable codes and the record every stage reports problems with.

`CODES` is the single source of truth for the codes: docs/codes.md is generated
from it (`unet codes --markdown`) and a test keeps both in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class CodeInfo:
    category: str
    severity: Severity
    when: str


_E, _W = Severity.ERROR, Severity.WARNING

CODES: dict[str, CodeInfo] = {
    # Reading files
    "YAML_SYNTAX": CodeInfo("Reading files", _E, "the file is not YAML (or not UTF-8 text)"),
    "YAML_DUPLICATE_KEY": CodeInfo("Reading files", _E, "a mapping repeats a key"),
    "YAML_UNSAFE": CodeInfo(
        "Reading files", _E, "tags, or more aliases than a small bound (alias bombs)"
    ),
    "FILE_TOO_LARGE": CodeInfo(
        "Reading files", _E, "a file or document above the configured bound (default 1 MiB)"
    ),
    "PATH_UNSAFE": CodeInfo(
        "Reading files", _E, "a symlink leaving the repo, or a path that is not plain"
    ),
    "UNET_DIR_TRACKED": CodeInfo(
        "Reading files", _E, "Git tracks files under `.unet/`, which holds one machine's state"
    ),
    "REPO_CONFIG_MISSING": CodeInfo(
        "Reading files", _E, "no `unet.yaml` (or more than one RepositoryConfig)"
    ),
    # Shape
    "SCHEMA_REQUIRED": CodeInfo("Shape (JSON Schema)", _E, "a required field is missing"),
    "SCHEMA_UNKNOWN_FIELD": CodeInfo("Shape (JSON Schema)", _E, "a field the kind does not have"),
    "SCHEMA_TYPE": CodeInfo(
        "Shape (JSON Schema)", _E, "wrong type, enum value, pattern or bound"
    ),
    "UNKNOWN_KIND": CodeInfo("Shape (JSON Schema)", _E, "`apiVersion`/`kind` unknown"),
    # Placement and identity
    "KIND_NOT_ALLOWED_HERE": CodeInfo(
        "Placement and identity",
        _E,
        "provider kind under `tenants/`, tenant kind under `provider/`",
    ),
    "TENANT_MISMATCH": CodeInfo(
        "Placement and identity", _E, "`metadata.tenant` differs from the folder"
    ),
    "UNKNOWN_TENANT": CodeInfo("Placement and identity", _E, "`tenants/<t>/` with no Tenant `t`"),
    "DUPLICATE_NAME": CodeInfo("Placement and identity", _E, "two objects with the same identity"),
    "REF_NOT_FOUND": CodeInfo(
        "Placement and identity", _E, "a reference names nothing of the expected kind in scope"
    ),
    "REGION_NOT_ALLOWED": CodeInfo(
        "Placement and identity", _E, "a region the tenant, class or manager does not have"
    ),
    "QUOTA_EXCEEDED": CodeInfo(
        "Placement and identity", _E, "more objects of a kind than the Tenant's quota"
    ),
    # Addresses
    "CIDR_INVALID": CodeInfo("Addresses", _E, "does not parse, or wrong family for its field"),
    "CIDR_NOT_CANONICAL": CodeInfo("Addresses", _E, "host bits set (hint: the canonical form)"),
    "CIDR_RESERVED": CodeInfo(
        "Addresses", _E, "loopback, multicast, link-local, unspecified, broadcast"
    ),
    "CIDR_NOT_ALLOWED": CodeInfo(
        "Addresses", _E, "VirtualNetwork CIDR outside the Tenant's `allowedCidrs`"
    ),
    "SUBNET_OUTSIDE_NETWORK": CodeInfo(
        "Addresses", _E, "subnet not inside its VirtualNetwork CIDR, or a family the VN lacks"
    ),
    "SUBNET_OVERLAP": CodeInfo("Addresses", _E, "two subnets of one VirtualNetwork overlap"),
    "SUBNET_TOO_SMALL": CodeInfo("Addresses", _E, "no usable address left for ports"),
    "GATEWAY_INVALID": CodeInfo(
        "Addresses", _E, "gateway outside the subnet, or its network/broadcast address"
    ),
    "RANGE_INVALID": CodeInfo(
        "Addresses", _E, "start > end, family mismatch, or outside the subnet/pool"
    ),
    "RANGE_OVERLAP": CodeInfo("Addresses", _E, "two allocation ranges overlap"),
    "RANGE_CONTAINS_GATEWAY": CodeInfo("Addresses", _E, "a range holds the gateway"),
    "ADDRESS_INVALID": CodeInfo(
        "Addresses", _E, "a fixed address outside its subnet/pool, or reserved, or excluded"
    ),
    "ADDRESS_CONFLICT": CodeInfo(
        "Addresses", _E, "two consumers claim the same address, or (at plan time) a fixed "
        "value is held by another owner in the backends"
    ),
    "POOL_OVERLAP": CodeInfo(
        "Addresses", _E, "ExternalIPPools overlap each other or a tenant network of the region"
    ),
    "POOL_EXHAUSTED": CodeInfo("Addresses", _E, "more ExternalIPs than the pool can give"),
    "POOL_NOT_ALLOWED": CodeInfo("Addresses", _E, "the tenant is not in the pool's `tenants`"),
    "POOL_NEARLY_FULL": CodeInfo(
        "Addresses", _W, "an ExternalIPPool, a subnet's (or ProviderNetwork's) address family "
        "or a NetworkClass's segmentRange is 90 % used or more: validate counts what the "
        "revision takes, a plan against the backends what they hold after it; the message "
        "names the pool and its size, used and free (`unet show usage`)"),
    "MTU_INVALID": CodeInfo("Addresses", _E, "outside bounds, or < 1280 with IPv6"),
    "SEGMENT_OUT_OF_RANGE": CodeInfo(
        "Addresses", _E, "a ProviderNetwork's `segmentId` outside its class's `segmentRange`"
    ),
    "SEGMENT_ID_CONFLICT": CodeInfo(
        "Addresses", _E, "two ProviderNetworks on one physical network use one `segmentId`"
    ),
    "PROVIDER_NETWORK_NOT_ALLOWED": CodeInfo(
        "Addresses", _E, "a workload attaches to a ProviderNetwork whose `tenants` lacks its tenant"
    ),
    # Security groups
    "RULE_PORTS_INVALID": CodeInfo(
        "Security groups",
        _E,
        "one of portFrom/portTo, from > to, out of range, or ports on icmp/all",
    ),
    "RULE_ICMP_INVALID": CodeInfo(
        "Security groups",
        _E,
        "icmp fields out of range, code without type, icmp fields on tcp/udp",
    ),
    "RULE_REMOTE_INVALID": CodeInfo(
        "Security groups", _E, "neither or both of `cidr`/`securityGroup`"
    ),
    "RULE_DUPLICATE": CodeInfo("Security groups", _E, "the same rule twice in one direction"),
    "RULE_NO_EFFECT": CodeInfo(
        "Security groups", _W, "a rule that matches nothing: its remote is of a family the "
        "VirtualNetwork lacks, or its ICMP family and remote disagree"
    ),
    "SECURITY_GROUP_WRONG_NETWORK": CodeInfo(
        "Security groups", _E, "a port uses a group of another VirtualNetwork"
    ),
    # External access
    "EXTERNAL_IP_IN_USE": CodeInfo(
        "External access", _E, "an ExternalIP with more than one consumer"
    ),
    "ENDPOINT_REQUIRED": CodeInfo("External access", _E, "Cluster target without `endpoint`"),
    "ENDPOINT_FORBIDDEN": CodeInfo("External access", _E, "`endpoint` on a non-Cluster target"),
    "ATTACHMENT_TARGET_UNREACHABLE": CodeInfo(
        "External access", _E, "the target's primary subnet has no CIDR or no gateway of the "
        "ExternalIP's family, or a Cluster's VIP is of the other family"
    ),
    "PORT_FORWARD_DUPLICATE": CodeInfo(
        "External access", _E, "an ExternalIPAttachment forwards one external port twice"
    ),
    "NAT_GATEWAY_DUPLICATE": CodeInfo(
        "External access", _E, "a second NATGateway on one VirtualNetwork"
    ),
    "NAT_GATEWAY_FAMILY_MISSING": CodeInfo(
        "External access", _E, "a NATGateway's ExternalIP is of a family its VirtualNetwork "
        "has no CIDR of"
    ),
    "TARGET_PENDING": CodeInfo(
        "External access", _W, "the attachment's target is not declared yet"
    ),
    # Peering
    "PEERING_PENDING": CodeInfo(
        "Peering", _W, "a VirtualNetworkPeering whose other side is not declared (yet): "
        "planned, but nothing is routed until the peer network's tenant declares it"
    ),
    "PEERING_CIDR_OVERLAP": CodeInfo(
        "Peering", _E, "the two networks of a VirtualNetworkPeering have overlapping CIDRs, "
        "or the peer overlaps another peer of the network"
    ),
    "PEERING_REGION_MISMATCH": CodeInfo(
        "Peering", _E, "the two networks of a VirtualNetworkPeering are in different regions"
    ),
    "PEERING_NOT_SUPPORTED": CodeInfo(
        "Peering", _E, "a VirtualNetworkPeering of a network realised on hosting clusters "
        "(a class with a k8sManager), or of two networks of different fabric managers"
    ),
    "PEERING_INVALID": CodeInfo(
        "Peering", _E, "a network peered with itself, a pair peered twice by one tenant, or "
        "a rule whose `peering` is of another network or lacks a `securityGroup`"
    ),
    # Workloads
    "ATTACHMENTS_DIFFERENT_NETWORKS": CodeInfo(
        "Workloads", _E, "a workload's subnets lie in different VirtualNetworks"
    ),
    "PROVIDER_NETWORK_ATTACHMENT_INVALID": CodeInfo(
        "Workloads", _E, "an attachment names both or neither of `subnet` and `providerNetwork`, "
        "or attaches a provider network as primary, from another region or fabric manager, "
        "overlapping the workload's network or sharing no address family with it"
    ),
    "PROVIDER_NETWORK_NOT_BRIDGED": CodeInfo(
        "Workloads", _E, "a VM on a hosting cluster attaches to a provider network whose "
        "class has no k8sManager, or another one: no localnet for it on the VM's cluster"
    ),
    "PRIMARY_INVALID": CodeInfo(
        "Workloads", _E, "not exactly one primary among several attachments"
    ),
    "INTERFACE_REQUIRED": CodeInfo(
        "Workloads", _E, "several bare-metal attachments and one lacks `interface`"
    ),
    "INTERFACE_INVALID": CodeInfo(
        "Workloads", _E, "unknown on the HostType, `lifecycle`, or used twice"
    ),
    "CLUSTER_CIDR_OVERLAP": CodeInfo(
        "Workloads", _E, "pod/service CIDRs overlap each other, the VN, the subnet or a "
        "provider network the Cluster attaches to"
    ),
    "HOSTING_CLUSTER_UNKNOWN": CodeInfo(
        "Workloads", _E, "`hostingCluster` is not a cluster of the network's k8sManager"
    ),
    "POLICY_RULE_NOT_REALISED": CodeInfo(
        "Workloads", _W, "a rule a VM's hosting cluster cannot express (ICMP, a port "
        "range): left out there"
    ),
    "CLUSTER_PREREQUISITE_MISSING": CodeInfo(
        "Workloads", _W, "a Cluster without an `api` ExternalIPAttachment or a NATGateway: "
        "planned, but unreachable from outside (or cut off from it) until they exist"
    ),
    # Classes and managers
    "NETWORK_CLASS_INVALID": CodeInfo(
        "Classes and managers",
        _E,
        "no manager, wrong role, manager not in the region, two defaults",
    ),
    "NO_NETWORK_CLASS": CodeInfo(
        "Classes and managers", _E, "a VirtualNetwork names none and its region has no default"
    ),
    "NETWORK_CLASS_NOT_ALLOWED": CodeInfo(
        "Classes and managers", _E,
        "a VirtualNetwork uses a NetworkClass its Tenant's `networkClasses` does not list"
    ),
    "CAPABILITY_MISSING": CodeInfo(
        "Classes and managers", _E, "the resource needs a capability its class lacks"
    ),
    "PLUGIN_UNKNOWN": CodeInfo(
        "Classes and managers", _E,
        "a NetworkManager names a plugin that is not installed, or that does not load"
    ),
    "PLUGIN_CONFIG_INVALID": CodeInfo(
        "Classes and managers", _E, "the plugin rejected its config"
    ),
    # Guardrails
    "GUARDRAIL_DENIED": CodeInfo(
        "Guardrails", _E, "a deny Guardrail matches a way in to a workload NIC (a source "
        "covering its `from`, its protocol and a port); said at the rule, membership or "
        "external IP that grants it"
    ),
    "GUARDRAIL_WARNED": CodeInfo(
        "Guardrails", _W, "a warn Guardrail matches a way in to a workload NIC, as "
        "`GUARDRAIL_DENIED` says"
    ),
    # Between two revisions (PR mode) and at plan time
    "IMMUTABLE_CHANGED": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _W,
        "an immutable field changed: the plan replaces the object",
    ),
    "PREVENT_DESTROY": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "the plan would delete or replace a protected object",
    ),
    "SHARD_SPLITS_TENANT": CodeInfo(
        "Between two revisions (PR mode) and at plan time", _E,
        "a run of a shard (`--region`): a Tenant has regions both in and outside the shard"
    ),
    "SHARD_REGION_UNKNOWN": CodeInfo(
        "Between two revisions (PR mode) and at plan time", _E,
        "a run of a shard (`--region`): no Tenant uses the region and no NetworkManager "
        "serves it (misspelt?)"
    ),
    "SHARD_SPLITS_MANAGER": CodeInfo(
        "Between two revisions (PR mode) and at plan time", _E,
        "a run of a shard (`--region`): a k8s NetworkManager serves regions both in and "
        "outside the shard (its segment ids span them)"
    ),
    "PRUNE_DISABLED": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _W,
        "objects removed from Git stay, because `prune` is false",
    ),
    "EMPTY_DESIRED_STATE": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "the plan deletes every object of the installation and `allowEmpty` is false",
    ),
    "ALLOCATION_UNRECORDED": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "a k8s manager alone would publish a segment id or a VM's addresses that its fabric "
        "has not recorded",
    ),
    "NAME_CONFLICT": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "a backend object not managed by this installation already uses the name",
    ),
    "HOLDS_FOREIGN_OBJECTS": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "the plan would delete or replace a backend object that holds objects of others "
        "(an operator's port in a unet switch), which would be destroyed with it",
    ),
    "ALLOCATION_IN_USE": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "a change makes a value in use unallocatable (reserved, excluded): it would move",
    ),
    "SEGMENT_RANGE_EXHAUSTED": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "a class's segmentRange has no free segment id for a new subnet",
    ),
    "BACKEND_UNOBSERVED": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "a manager could not read (part of) its backend, so the plan cannot tell what exists "
        "there; leave the manager out with `--manager` to plan the others",
    ),
    "STALE_PLAN": CodeInfo(
        "Between two revisions (PR mode) and at plan time",
        _E,
        "a saved plan's observed-state fingerprint no longer matches",
    ),
}

#: Codes that only arise between two revisions or at plan time, never from `validate`.
PLAN_TIME_CODES = frozenset(
    code for code, info in CODES.items() if info.category.startswith("Between two revisions")
)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    message: str
    file: str | None = None
    line: int | None = None
    path: str = ""
    hint: str | None = None
    severity: Severity = field(default=Severity.ERROR)
    column: int | None = None  # 1-based, where the reader knows it (YAML syntax errors)

    def __post_init__(self) -> None:
        info = CODES.get(self.code)
        if info is None:
            raise ValueError(f"unknown diagnostic code {self.code}")
        # Severity always follows the catalogue, so no caller can disagree with it.
        object.__setattr__(self, "severity", info.severity)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def sort_key(self) -> tuple[str, int, str, str]:
        return (self.file or "", self.line or 0, self.path, self.code)

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": str(self.severity),
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "hint": self.hint,
        }


def json_pointer(path: tuple[str | int, ...]) -> str:
    """RFC 6901 pointer for a path of keys and indexes."""
    return "".join(
        "/" + str(part).replace("~", "~0").replace("/", "~1") for part in path
    )


def codes_markdown() -> str:
    """The reference page of all codes, grouped as in the design."""
    out = [
        "# Diagnostic codes",
        "",
        "Generated by `unet codes --markdown` from `reconciler/diagnostics.py`; do not edit.",
        "Codes are stable: they are never renamed or reused.",
        "",
    ]
    category = None
    for code, info in CODES.items():
        if info.category != category:
            category = info.category
            out += ["", f"## {category}", "", "| code | severity | when |", "|---|---|---|"]
        out.append(f"| `{code}` | {info.severity} | {info.when} |")
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"
