"""How a RocketMQ ``broker.properties`` key lands in a config table: the key's declaration.

Each table declares the RocketMQ keys it takes (the ``[broker]`` table here in the kernel, each
plugin's table in its :class:`~kernel.model.ConfigSection`), with a converter from RocketMQ's
units (milliseconds, hours, ``true``/``false``) to the table's own. The properties loader only
collects these declarations; it knows no plugin's keys itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


@attrs.frozen
class PropertyAlias:
    """One RocketMQ key as a key of a table: ``convert`` turns the properties text into the
    table's value (raising ``ValueError``), ``expected`` says what a good value looks like."""

    key: str
    convert: Callable[[str], Any]
    expected: str


def text(value: str) -> str:
    if not value:
        raise ValueError("expected a non-empty value")
    return value


def integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def millis(value: str) -> str:
    return f"{integer(value)}ms"


def seconds(value: str) -> str:
    return f"{integer(value)}s"


def hours(value: str) -> str:
    return f"{integer(value)}h"


def boolean(value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ValueError(f"expected true or false, got {value!r}")
    return value.lower() == "true"


def addresses(value: str) -> list[str]:
    parts = [p.strip() for p in value.split(";") if p.strip()]
    for part in parts:
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"expected host:port;host:port, got {value!r}")
    return parts


def milliseconds_alias(key: str) -> PropertyAlias:
    return PropertyAlias(key, millis, "milliseconds")


def seconds_alias(key: str) -> PropertyAlias:
    return PropertyAlias(key, seconds, "seconds")


def integer_alias(key: str, expected: str) -> PropertyAlias:
    return PropertyAlias(key, integer, expected)


def boolean_alias(key: str) -> PropertyAlias:
    return PropertyAlias(key, boolean, "true|false")
