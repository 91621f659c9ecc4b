"""Configuration: TOML natively, RocketMQ ``broker.properties`` mapped onto the same model.

``load_config(path)`` picks the format by suffix (``.properties`` or anything else as TOML)
and validates ``[broker]``; plugin tables are validated by :class:`kernel.host.PluginHost`
against the classes plugins declare.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from kernel.config.broker import NO_PLUGIN_DEFAULTS, BrokerConfig, Config, PluginDefaults
from kernel.config.properties_file import load_properties
from kernel.config.structure import structure, unstructure
from kernel.config.text import read_config_text
from kernel.config.toml_file import config_from_tables, load_toml


def load_config(
    path: Path | str, *, lenient: bool = False, defaults: PluginDefaults = NO_PLUGIN_DEFAULTS
) -> Config:
    """Load a TOML or RocketMQ properties configuration file (``lenient``: see
    :func:`~kernel.config.toml_file.config_from_tables`; ``defaults``: the plugins a file that
    names none loads, see :class:`~kernel.config.broker.PluginDefaults`).

    ``.properties`` is properties and ``.toml`` TOML; any other name (RocketMQ ships
    ``conf/broker.conf``) is told apart by content: a file with a ``[table]`` header is TOML,
    one without is properties (a Trocket TOML config keeps everything in tables). The guess is
    named in the config's notes.
    """
    path = Path(path)
    if path.suffix == ".properties":
        return load_properties(path, lenient=lenient, defaults=defaults)
    if path.suffix == ".toml" or not path.is_file():
        return load_toml(path, lenient=lenient, defaults=defaults)
    if _looks_like_toml(read_config_text(path)):
        config = load_toml(path, lenient=lenient, defaults=defaults)
        assumed = "TOML (it has [table] headers)"
    else:
        config = load_properties(path, lenient=lenient, defaults=defaults)
        assumed = "RocketMQ broker.properties (key = value lines, no [table] headers)"
    return attrs.evolve(config, notes=(f"{path.name} read as {assumed}", *config.notes))


def _looks_like_toml(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            return True
    return False


def default_config(defaults: PluginDefaults = NO_PLUGIN_DEFAULTS, **broker: object) -> Config:
    """The configuration of no file: ``defaults``' plugins, with ``[broker]`` overrides."""
    return config_from_tables({"broker": dict(broker)}, source="<defaults>", defaults=defaults)


__all__ = [
    "NO_PLUGIN_DEFAULTS",
    "PluginDefaults",
    "BrokerConfig",
    "Config",
    "default_config",
    "load_config",
    "structure",
    "unstructure",
]
