"""The project's identity for pluggy: hook prefix, markers and entry-point group.

This is the only place these names are spelled. Plugin authors import ``hookimpl`` from
``kernel`` and mark module-level functions with it; see ``docs/plugin-authors.md``.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from types import ModuleType

import pluggy

from kernel.errors import PluginLoadError

PROJECT = "trocket"
ENTRY_POINT_GROUP = "trocket.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


def available_plugins() -> dict[str, str]:
    """Installed plugins by entry-point name -> module (what a config may name)."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def resolve_plugin(name: str) -> ModuleType | object:
    """Import the plugin a config names (entry point first, then dotted module path)."""
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            return ep.load()
        except ImportError as error:
            raise PluginLoadError(name, available_plugins(), f"entry point failed: {error}") from None
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and (name == error.name or name.startswith(error.name + ".")):
            raise PluginLoadError(name, available_plugins()) from None
        raise PluginLoadError(name, available_plugins(), f"import failed: {error}") from None
    except ImportError as error:
        raise PluginLoadError(name, available_plugins(), f"import failed: {error}") from None
