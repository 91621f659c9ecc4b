"""Configuration: TOML natively, RocketMQ ``broker.properties`` mapped onto the same model.

``load_config(path)`` picks the format by suffix (``.properties`` or anything else as TOML)
and validates ``[broker]``; plugin tables are validated by :class:`kernel.host.PluginHost`
against the classes plugins declare.
"""

from __future__ import annotations

from pathlib import Path

from kernel.config.broker import DEFAULT_PLUGINS, BrokerConfig, Config
from kernel.config.properties_file import load_properties
from kernel.config.structure import structure, unstructure
from kernel.config.toml_file import config_from_tables, load_toml


def load_config(path: Path | str, *, lenient: bool = False) -> Config:
    """Load a TOML or ``.properties`` configuration file (``lenient``: see
    :func:`~kernel.config.toml_file.config_from_tables`)."""
    path = Path(path)
    if path.suffix == ".properties":
        return load_properties(path, lenient=lenient)
    return load_toml(path, lenient=lenient)


def default_config(**broker: object) -> Config:
    """The built-in configuration (what ``trocket up`` uses), with ``[broker]`` overrides."""
    return config_from_tables({"broker": dict(broker)}, source="<defaults>")


__all__ = [
    "DEFAULT_PLUGINS",
    "BrokerConfig",
    "Config",
    "default_config",
    "load_config",
    "structure",
    "unstructure",
]
