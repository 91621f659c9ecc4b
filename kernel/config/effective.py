"""A running broker's effective configuration as RocketMQ properties (mqadmin
``getBrokerConfig``): every setting of the ``[broker]`` table and of each loaded plugin's table,
under RocketMQ's key and in RocketMQ's units where the table declares one, else as
``table.key`` in Trocket's own form."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kernel.config import property_aliases as rocketmq
from kernel.config.property_aliases import PropertyAlias

if TYPE_CHECKING:
    from kernel.context import BrokerContext


def render(alias: PropertyAlias | None, value: Any) -> str:
    """``value`` as a properties text: in RocketMQ's units for a declared key (milliseconds,
    seconds, hours, ``true``/``false``, ``;``-joined addresses), plainly otherwise."""
    convert = alias.convert if alias is not None else None
    if value is None:
        return ""
    if convert is rocketmq.millis:
        return str(round(float(value) * 1000))
    if convert is rocketmq.seconds:
        return str(round(float(value)))
    if convert is rocketmq.hours:
        return str(round(float(value) / 3600))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list | frozenset | set):
        return ";".join(render(None, v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{render(None, v)}" for k, v in value.items())
    return str(value)


def section_settings(
    name: str, config: Any, properties: Mapping[str, PropertyAlias]
) -> Iterable[tuple[str, str]]:
    """(key, value) of one table: RocketMQ's key where ``properties`` declares one for a field."""
    by_field: dict[str, tuple[str, PropertyAlias]] = {}
    for key, alias in properties.items():
        by_field.setdefault(alias.key, (key, alias))
    for field in attrs.fields(type(config)):
        value = getattr(config, field.name)
        declared = by_field.get(field.alias or field.name)
        if declared is not None:
            yield declared[0], render(declared[1], value)
        else:
            yield f"{name}.{field.alias or field.name}", render(None, value)


def effective_settings(ctx: BrokerContext) -> list[tuple[str, str]]:
    """Every setting of this broker (or NameServer, or controller), sorted by key."""
    from kernel.config.properties_file import BROKER_PROPERTIES

    out = dict(section_settings("broker", ctx.config.broker, BROKER_PROPERTIES))
    for declared in ctx.hook.trocket_config_sections():
        for section in declared:
            config = ctx.plugin_configs.get(section.type)
            if config is not None:
                for key, value in section_settings(section.name, config, section.properties):
                    out.setdefault(key, value)
    return sorted(out.items())


def properties_text(settings: Iterable[tuple[str, str]]) -> str:
    """``key=value`` lines (RocketMQ's ``MixAll.properties2String``)."""
    return "".join(f"{key}={value}\n" for key, value in settings)
