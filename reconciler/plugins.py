"""Manager plugins: discovered through the entry-point group `unet.managers`, and
instantiated, once per NetworkManager of a repo, here only."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from functools import cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import pydantic

from .contract import ClusterManager, FabricManager, Manager
from .errors import UnetError

if TYPE_CHECKING:
    from .model import Model
    from .schema import Manifest

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
        if not (isinstance(plugin, type) and issubclass(plugin, (FabricManager, ClusterManager))):
            broken[entry.name] = (f"{entry.value} is neither a managers.sdk.FabricManager nor a "
                                  "ClusterManager")
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


# --- instances ----------------------------------------------------------------------------


class ConfigError(UnetError):
    """A NetworkManager's config cannot be used: it names an environment variable that is
    not set, or a value is not of its field's type."""


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def resolve_config(value: Any, where: str) -> Any:
    """Replace `${NAME}` with the environment's value; secrets never live in the repo."""
    if isinstance(value, str):
        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in os.environ:
                raise ConfigError(f"{where} uses ${{{name}}}, but {name} is not set")
            return os.environ[name]

        return _ENV_REFERENCE.sub(lookup, value)
    if isinstance(value, list):
        return [resolve_config(v, where) for v in value]
    if isinstance(value, dict):
        return {k: resolve_config(v, where) for k, v in value.items()}
    return value


def instantiate(plugin: type[Manager], manager: Manifest, installation: str,
                resolve: bool) -> Manager:
    """The `plugin` instance of the NetworkManager `manager`, with its typed config:
    `${ENV}` values resolved with `resolve` (for a run against the backend, whose files
    must then be there), left as they are without (what validation can check)."""
    where = f"NetworkManager {manager.name}"
    config = dict(manager.obj.spec.config)
    if resolve:
        config = resolve_config(config, where)
    try:
        typed = plugin.Config.model_validate(config, context={"resolved": resolve})
    except pydantic.ValidationError as exc:  # an ${ENV} value of the wrong type, say
        problem = exc.errors()[0]
        path = "".join(f".{part}" for part in problem["loc"])
        raise ConfigError(f"{where}: config{path}: {problem['msg']}") from exc
    return plugin(manager.name, typed, installation)


def managers_of(model: Model, only: Iterable[str] | None = None,
                resolve: bool = False) -> dict[str, Manager]:
    """One plugin instance per NetworkManager of the model (or of those named in `only`)."""
    wanted = set(only) if only is not None else None
    known = {m.name for m in model.kind("NetworkManager")}
    if wanted is not None and wanted - known:
        raise ConfigError(f"no NetworkManager named {', '.join(sorted(wanted - known))}; the "
                          f"repo has {', '.join(sorted(known)) or 'none'}")
    plugins = installed_plugins()
    return {manager.name: instantiate(plugins[manager.obj.spec.plugin], manager,
                                      model.installation, resolve)
            for manager in model.kind("NetworkManager")
            if wanted is None or manager.name in wanted}
