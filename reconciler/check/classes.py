"""NetworkManagers, NetworkClasses and the capabilities a class provides."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
from pydantic.alias_generators import to_camel

from ..contract import ClusterManager
from ..families import ADDRESS_FAMILIES, Capability
from ..plugins import ConfigError, broken_plugins, instantiate
from ..schema import Manifest
from .context import Context


def effective_capabilities(
    managers: list[Any], disabled: list[Capability]
) -> frozenset[Capability]:
    """Address families every manager provides, features any provides, minus the disabled."""
    if not managers:
        return frozenset()
    sets = [frozenset(plugin.capabilities) for plugin in managers]
    families = frozenset.intersection(*sets) & ADDRESS_FAMILIES
    features = frozenset.union(*sets) - ADDRESS_FAMILIES
    return (families | features) - frozenset(disabled)


def check_managers(ctx: Context) -> None:
    backends: dict[tuple[str, str], Manifest] = {}
    for manager in ctx.kind("NetworkManager"):
        spec = manager.obj.spec
        plugin = ctx.plugins.get(spec.plugin)
        if plugin is None:
            broken = broken_plugins().get(spec.plugin)
            ctx.report("PLUGIN_UNKNOWN", manager, ("spec", "plugin"),
                       f"the manager plugin '{spec.plugin}' is installed, but {broken}"
                       if broken else f"no manager plugin '{spec.plugin}' is installed",
                       "installed: " + ", ".join(sorted(ctx.plugins)) if ctx.plugins else None)
            continue
        if plugin.role != spec.role:
            ctx.report("PLUGIN_CONFIG_INVALID", manager, ("spec", "role"),
                       f"plugin '{spec.plugin}' fills the role '{plugin.role}', not '{spec.role}'",
                       f"set role: {plugin.role}")
        for error in _config_validator(plugin).iter_errors(spec.config):
            path = ("spec", "config", *error.absolute_path)
            ctx.report("PLUGIN_CONFIG_INVALID", manager, path,
                       f"plugin '{spec.plugin}' rejected its config: {error.message}")
        _check_shared_backend(ctx, manager, plugin, backends)


@cache
def _config_validator(plugin: Any) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(plugin.config_schema())


def _check_shared_backend(ctx: Context, manager: Manifest, plugin: Any,
                          backends: dict[tuple[str, str], Manifest]) -> None:
    """Two managers whose plugin cannot tell their objects apart must not share a backend:
    each would take the other's objects for its own (and delete them)."""
    field = plugin.backend_field
    if field is None:
        return
    default = plugin.Config.model_fields[field].default
    value = str(manager.obj.spec.config.get(to_camel(field), default))
    first = backends.setdefault((manager.obj.spec.plugin, value), manager)
    if first is not manager:
        ctx.report("PLUGIN_CONFIG_INVALID", manager, ("spec", "config", to_camel(field)),
                   f"NetworkManager '{manager.name}' uses the same backend as '{first.name}' "
                   f"({field}: {value}); they would take each other's objects for their own",
                   f"give '{first.name}' this manager's regions too, and remove this one")


def check_classes(ctx: Context) -> None:
    defaults = ctx.default_class
    for cls in ctx.kind("NetworkClass"):
        spec = cls.obj.spec
        if spec.default:
            if spec.region in defaults:
                ctx.report("NETWORK_CLASS_INVALID", cls, ("spec", "default"),
                           f"region {spec.region} already has a default class, "
                           f"'{defaults[spec.region]}'",
                           "keep default: true on one class per region")
            else:
                defaults[spec.region] = cls.name
        if spec.segment_range.start > spec.segment_range.end:
            ctx.report("RANGE_INVALID", cls, ("spec", "segmentRange"),
                       f"segmentRange starts at {spec.segment_range.start}, after its end "
                       f"{spec.segment_range.end}")
        plugins = _class_managers(ctx, cls)
        if plugins is not None:
            ctx.class_caps[cls.name] = effective_capabilities(plugins, spec.disable_capabilities)


def _class_managers(ctx: Context, cls: Manifest) -> list[Any] | None:
    spec = cls.obj.spec
    if spec.fabric_manager is None and spec.k8s_manager is None:
        ctx.report("NETWORK_CLASS_INVALID", cls, ("spec",),
                   "a NetworkClass needs a fabricManager, a k8sManager, or both")
        return None
    plugins: list[Any] = []
    ok = True
    for field, role in (("fabricManager", "fabric"), ("k8sManager", "k8s")):
        name = getattr(spec, "fabric_manager" if role == "fabric" else "k8s_manager")
        if name is None:
            continue
        manager = ctx.lookup(cls, ("spec", field), "NetworkManager", name)
        if manager is None:
            ok = False
            continue
        if manager.obj.spec.role != role and not ctx.rejected(manager, ("spec", "role")):
            ctx.report("NETWORK_CLASS_INVALID", cls, ("spec", field),
                       f"NetworkManager '{name}' has role {manager.obj.spec.role}; "
                       f"{field} needs role {role}")
            ok = False
        if spec.region not in manager.obj.spec.regions:
            ctx.report("NETWORK_CLASS_INVALID", cls, ("spec", field),
                       f"NetworkManager '{name}' does not serve region {spec.region}",
                       f"add {spec.region} to its spec.regions")
            ok = False
        plugin = ctx.plugins.get(manager.obj.spec.plugin)
        if plugin is None:  # PLUGIN_UNKNOWN is reported; the capabilities are unknown
            ok = False
            continue
        plugins.append(plugin)
    return plugins if ok else None


def class_of_network(ctx: Context, vn: Manifest) -> str | None:
    """Resolve a VirtualNetwork's class, reporting what is wrong with it."""
    spec = vn.obj.spec
    if spec.network_class is None:
        default = ctx.default_class.get(spec.region)
        if default is None and ctx.declares_invalid("NetworkClass"):
            return None  # the invalid class may be the region's default
        if default is None:
            ctx.report("NO_NETWORK_CLASS", vn, ("spec", "region"),
                       f"region {spec.region} has no default NetworkClass",
                       "name one with spec.networkClass, or ask the provider for a default")
            return None
        return default
    cls = ctx.lookup(vn, ("spec", "networkClass"), "NetworkClass", spec.network_class)
    if cls is None:
        return None
    if cls.obj.spec.region != spec.region:
        ctx.report("REGION_NOT_ALLOWED", vn, ("spec", "networkClass"),
                   f"NetworkClass '{cls.name}' serves region {cls.obj.spec.region}, "
                   f"not {spec.region}")
        return None
    return str(cls.name)


def require(ctx: Context, manifest: Manifest, path: tuple[str | int, ...],
            class_name: str | None, capability: Capability, what: str) -> bool:
    """Report CAPABILITY_MISSING unless the class provides `capability`."""
    if class_name is None or class_name not in ctx.class_caps:
        return True  # the class itself is already reported
    if capability in ctx.class_caps[class_name]:
        return True
    ctx.report("CAPABILITY_MISSING", manifest, path,
               f"{what} needs {capability}, which NetworkClass '{class_name}' does not provide",
               "use a class whose managers provide it")
    return False


def cluster_manager_of(ctx: Context, manager_name: str | None) -> ClusterManager | None:
    """The plugin instance of a k8s NetworkManager, for what only it knows; None when it
    is not one, or its config cannot tell yet."""
    manager = ctx.get("NetworkManager", None, manager_name)
    plugin = ctx.plugins.get(manager.obj.spec.plugin) if manager is not None else None
    if manager is None or plugin is None or id(manager) in ctx.invalid:
        return None
    try:
        instance = instantiate(plugin, manager, "", resolve=False)
    except ConfigError:  # e.g. an ${ENV} value, resolved only when running
        return None
    return instance if isinstance(instance, ClusterManager) else None
