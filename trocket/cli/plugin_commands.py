"""Commands that plugins contribute to ``trocket`` (``trocket export`` comes from spark_export).

A plugin declares ``add_parsers(sub)`` in the ``trocket.commands`` entry-point group, as pytest
plugins add options: the CLI imports no plugin by name. A command whose entry point cannot be
loaded still appears, and says why when run, so one broken plugin costs its own command only.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from typing import Any

COMMAND_GROUP = "trocket.commands"


def add_parsers(sub: Any) -> None:
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda ep: ep.name):
        try:
            add = ep.load()
        except (ImportError, AttributeError) as error:
            _unavailable(sub, ep.name, f"{ep.value}: {type(error).__name__}: {error}")
            continue
        add(sub)


def _unavailable(sub: Any, name: str, reason: str) -> None:
    parser = sub.add_parser(name, help=f"(unavailable: its plugin failed to load: {reason})")

    def handler(_args: argparse.Namespace) -> int:
        print(
            f"trocket: error: command {name!r} is unavailable: its plugin failed to load: {reason}",
            file=sys.stderr,
        )
        return 2

    parser.set_defaults(handler=handler)
