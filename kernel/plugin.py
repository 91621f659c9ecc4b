"""The project's identity for pluggy: hook prefix, markers and entry-point group.

This is the only place these names are spelled. Plugin authors import ``hookimpl`` from
``kernel`` and mark module-level functions with it; see ``docs/plugin-authors.md``.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pluggy

PROJECT = "trocket"
ENTRY_POINT_GROUP = "trocket.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


def available_plugins() -> dict[str, str]:
    """Installed plugins by entry-point name -> module (what a config may name)."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
