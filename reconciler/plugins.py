"""Manager plugins, discovered through the entry-point group `unet.managers`."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "unet.managers"


@cache
def installed_plugins() -> dict[str, Any]:
    """Plugin name → plugin class, for every installed plugin that loads."""
    plugins: dict[str, Any] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        plugin = entry.load()
        plugins[plugin.name] = plugin
    return plugins
