"""Manager plugins, discovered through the entry-point group `unet.managers`."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib.metadata import entry_points

from managers.base import Manager

ENTRY_POINT_GROUP = "unet.managers"


@cache
def installed_plugins() -> dict[str, type[Manager]]:
    """Plugin name → plugin class, for every installed plugin that loads."""
    return _discover()[0]


@cache
def broken_plugins() -> dict[str, str]:
    """Entry-point name → why its plugin does not load (said where a repo names it)."""
    return _discover()[1]


@cache
def _discover() -> tuple[dict[str, type[Manager]], dict[str, str]]:
    plugins: dict[str, type[Manager]] = {}
    broken: dict[str, str] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            plugin = entry.load()
        except Exception as exc:  # a plugin's own bug must not take unet down
            broken[entry.name] = f"{entry.value} does not load: {type(exc).__name__}: {exc}"
            continue
        if not (isinstance(plugin, type) and issubclass(plugin, Manager)):
            broken[entry.name] = f"{entry.value} is not a managers.base.Manager"
            continue
        plugins[plugin.name] = plugin
    return plugins, broken


@cache
def plugins_digest() -> str:
    """Of everything validation reads of the installed plugins: installing, removing or
    upgrading one changes it (the validation cache keys on it)."""
    signature = {name: {"class": f"{plugin.__module__}.{plugin.__qualname__}",
                        "role": plugin.role,
                        "capabilities": sorted(str(c) for c in plugin.capabilities),
                        "config": plugin.config_schema(),
                        "backend_field": plugin.backend_field}
                 for name, plugin in sorted(installed_plugins().items())}
    signature["(broken)"] = dict(sorted(broken_plugins().items()))
    text = json.dumps(signature, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
