"""Load a native TOML configuration file."""

from __future__ import annotations

import tomllib
from pathlib import Path

from kernel.config.broker import NO_PLUGIN_DEFAULTS, BrokerConfig, Config, PluginDefaults
from kernel.config.structure import structure
from kernel.config.text import read_config_text
from kernel.errors import ConfigError, ConfigErrors
from kernel.plugin import available_plugins


def load_toml(path: Path, *, lenient: bool = False, defaults: PluginDefaults = NO_PLUGIN_DEFAULTS) -> Config:
    """Parse ``path``: ``[broker]`` is validated now, other tables once plugins are loaded.

    :param lenient: see :func:`config_from_tables`.
    :param defaults: the plugins loaded when the file names none.
    :raises ConfigError: unreadable file, TOML syntax error, or a bad ``[broker]`` key.
    """
    source = str(path)
    text = read_config_text(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(source, None, f"invalid TOML: {error}") from None
    return config_from_tables(raw, source=source, lenient=lenient, defaults=defaults)


def config_from_tables(
    raw: dict[str, object],
    *,
    source: str,
    lenient: bool = False,
    defaults: PluginDefaults = NO_PLUGIN_DEFAULTS,
) -> Config:
    """The :class:`Config` of parsed tables (``defaults.plugins`` when ``[broker]`` names none).

    :param lenient: bad ``[broker]`` keys do not raise: they keep their defaults and their
        errors go to :attr:`Config.problems`, which plugin-table validation reports together
        with its own (``trocket config check`` lists every problem of a file at once).
    :raises ConfigError: bad ``[broker]`` keys or top-level values that are not tables.
    """
    broker_raw = raw.pop("broker", {})
    if not isinstance(broker_raw, dict):
        raise ConfigError(source, "[broker]", "expected a table")
    notes: list[str] = []
    if "plugins" not in broker_raw and defaults.plugins:
        installed = available_plugins()
        broker_raw = {**broker_raw, "plugins": [p for p in defaults.plugins if p in installed]}
        missing = [p for p in defaults.plugins if p not in installed]
        if missing:
            notes.append(f"default plugins not installed (not part of this build yet): {', '.join(missing)}")
    errors: list[ConfigError] = []
    sections: dict[str, dict[str, object]] = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            problem = "top-level keys must be tables: [broker] or one table per plugin"
            errors.append(ConfigError(source, name, problem))
        else:
            sections[name] = table
    try:
        broker = structure(BrokerConfig, broker_raw, source=source, section="broker")
    except ConfigError as error:
        bad = error.errors if isinstance(error, ConfigErrors) else (error,)
        errors[:0] = bad
        if not lenient:
            ConfigErrors.raise_any(errors)
        bad_keys = {e.key.removeprefix("[broker] ") for e in bad if e.key}
        usable = {k: v for k, v in broker_raw.items() if k not in bad_keys}
        broker = structure(BrokerConfig, usable, source=source, section="broker")
    if not lenient:
        ConfigErrors.raise_any(errors)
    return Config(source=source, broker=broker, sections=sections, notes=tuple(notes), problems=tuple(errors))
