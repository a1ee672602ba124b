"""Everything a manager plugin imports of unet: the only module a backend needs.

The contract (contract.py): FabricManager or ClusterManager to subclass, ManagerConfig for
its typed config, Session, Observation, ApplyOutcome and Watch, Command for commands of its
own. And what the core hands a plugin to render and apply with: the validated Model and
the manifests in it, the allocations and their keys, backend objects with their tags, the
changes and steps of a plan. docs/plugins.md says how they fit together; a plugin that
imports only from here keeps working while the core's modules move.
"""

from unet.reconciler.allocate import (
    Allocations,
    adopted_key,
    derived_mac,
    external_key,
    ip_of_port,
    mac_of_port,
    port_key,
    router_gateway_key,
    segment_key,
    vip_key,
)
from unet.reconciler.bindings import AllocatedValues, binding_key, workload_binding
from unet.reconciler.check.netutil import network as parse_network
from unet.reconciler.command import Command
from unet.reconciler.contract import (
    WAIT_NOTICE,
    Adopter,
    Adoption,
    ApplyOutcome,
    BackendLocked,
    ClusterManager,
    Exposure,
    FabricManager,
    ImportedNetwork,
    Manager,
    ManagerConfig,
    Observation,
    Probe,
    ProgressFactory,
    Refusal,
    Session,
    Traced,
    Watch,
    each_step,
)
from unet.reconciler.diff import Action, Change, FieldChange
from unet.reconciler.errors import UnetError
from unet.reconciler.model import Model
from unet.reconciler.models import (
    Capability,
    Family,
    attachment_identity,
    immutable_values,
    port_identity,
    primary_index,
    protocol_families,
    segment_of,
)
from unet.reconciler.objects import (
    TAG_ALLOCATION,
    TAG_HASH,
    TAG_IMMUTABLE,
    TAG_INSTALLATION,
    TAG_KEY,
    TAG_OWNER,
    TAG_PROTECTED,
    TAG_REGIONS,
    UNKNOWN,
    BackendObject,
    Held,
    content_hash,
    immutable_tag,
)
from unet.reconciler.order import Step
from unet.reconciler.output import add_format
from unet.reconciler.processes import process_alive
from unet.reconciler.schema import Manifest
from unet.reconciler.state import state_folder

__all__ = [
    "TAG_ALLOCATION",
    "TAG_HASH",
    "TAG_IMMUTABLE",
    "TAG_INSTALLATION",
    "TAG_KEY",
    "TAG_OWNER",
    "TAG_PROTECTED",
    "TAG_REGIONS",
    "UNKNOWN",
    "WAIT_NOTICE",
    "Action",
    "Adopter",
    "Adoption",
    "AllocatedValues",
    "Allocations",
    "ApplyOutcome",
    "BackendLocked",
    "BackendObject",
    "Capability",
    "Change",
    "ClusterManager",
    "Command",
    "Exposure",
    "FabricManager",
    "Family",
    "FieldChange",
    "Held",
    "ImportedNetwork",
    "Manager",
    "ManagerConfig",
    "Manifest",
    "Model",
    "Observation",
    "Probe",
    "ProgressFactory",
    "Refusal",
    "Session",
    "Step",
    "Traced",
    "UnetError",
    "Watch",
    "add_format",
    "adopted_key",
    "attachment_identity",
    "binding_key",
    "content_hash",
    "derived_mac",
    "each_step",
    "external_key",
    "immutable_tag",
    "immutable_values",
    "ip_of_port",
    "mac_of_port",
    "parse_network",
    "port_identity",
    "port_key",
    "primary_index",
    "process_alive",
    "protocol_families",
    "router_gateway_key",
    "segment_key",
    "segment_of",
    "state_folder",
    "vip_key",
    "workload_binding",
]
