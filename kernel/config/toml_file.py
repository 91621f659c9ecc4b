"""Load a native TOML configuration file."""

from __future__ import annotations

import tomllib
from pathlib import Path

from kernel.config.broker import DEFAULT_PLUGINS, BrokerConfig, Config
from kernel.config.structure import structure
from kernel.errors import ConfigError
from kernel.plugin import available_plugins


def load_toml(path: Path) -> Config:
    """Parse ``path``: ``[broker]`` is validated now, other tables once plugins are loaded.

    :raises ConfigError: unreadable file, TOML syntax error, or a bad ``[broker]`` key.
    """
    source = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(source, None, f"cannot read: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(source, None, f"invalid TOML: {error}") from None
    return config_from_tables(raw, source=source)


def config_from_tables(raw: dict[str, object], *, source: str) -> Config:
    broker_raw = raw.pop("broker", {})
    if not isinstance(broker_raw, dict):
        raise ConfigError(source, "[broker]", "expected a table")
    notes: list[str] = []
    if "plugins" not in broker_raw:
        installed = available_plugins()
        broker_raw = {**broker_raw, "plugins": [p for p in DEFAULT_PLUGINS if p in installed]}
        missing = [p for p in DEFAULT_PLUGINS if p not in installed]
        if missing:
            notes.append(f"default plugins not installed (not part of this build yet): {', '.join(missing)}")
    broker = structure(BrokerConfig, broker_raw, source=source, section="broker")
    sections: dict[str, dict[str, object]] = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise ConfigError(source, name, "top-level keys must be tables: [broker] or one table per plugin")
        sections[name] = table
    return Config(source=source, broker=broker, sections=sections, notes=tuple(notes))
