"""Typed field constructors for configuration classes (the broker's and every plugin's).

Each helper returns an ``attrs.field`` whose converter checks the raw TOML value and raises
``ValueError`` saying what was expected; :func:`kernel.config.structure.structure` turns that
into a :class:`~kernel.errors.ConfigError` that names the file and the key. Converters are
idempotent, so already-converted values pass through unchanged.

Example::

    @attrs.frozen(kw_only=True)
    class MyConfig:
        segment_size: int = fields.size("1GiB")
        interval: float = fields.duration("500ms")
        mode: str = fields.choice("fast", ("fast", "safe"))
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from wire import units

E = TypeVar("E", bound=enum.Enum)


def _int(minimum: int | None, maximum: int | None) -> Callable[[object], int]:
    def convert(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            else:
                raise ValueError(f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"expected an integer <= {maximum}, got {value}")
        return value

    return convert


def integer(default: int, *, minimum: int | None = None, maximum: int | None = None) -> Any:
    """An integer, optionally bounded."""
    return attrs.field(default=default, converter=_int(minimum, maximum))


def optional_integer(*, minimum: int | None = None, maximum: int | None = None) -> Any:
    """An integer, optionally bounded, or None (absent: the consumer derives a default)."""
    convert = _int(minimum, maximum)
    return attrs.field(default=None, converter=lambda value: None if value is None else convert(value))


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def boolean(default: bool) -> Any:
    return attrs.field(default=default, converter=_bool)


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def string(default: str) -> Any:
    return attrs.field(default=default, converter=_str)


def optional_string(default: str | None = None) -> Any:
    def convert(value: object) -> str | None:
        return None if value is None else _str(value)

    return attrs.field(default=default, converter=convert)


def choice(default: str, choices: Sequence[str]) -> Any:
    allowed = tuple(choices)

    def convert(value: object) -> str:
        text = _str(value)
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(map(repr, allowed))}, got {text!r}")
        return text

    return attrs.field(default=default, converter=convert)


def enum_value(default: E, enum_type: type[E]) -> Any:
    def convert(value: object) -> E:
        if isinstance(value, enum_type):
            return value
        names = [member.value for member in enum_type]
        if isinstance(value, str) and value.upper() in names:
            return enum_type(value.upper())
        raise ValueError(f"expected one of {', '.join(names)}, got {value!r}")

    return attrs.field(default=default, converter=convert)


def size(default: int | str, *, minimum: int = 0) -> Any:
    """A byte count: an integer or a string such as ``"64KiB"`` / ``"1GiB"``."""

    def convert(value: object) -> int:
        result = units.parse_size(value)
        if result < minimum:
            raise ValueError(f"expected a size of at least {units.format_size(minimum)}, got {value!r}")
        return result

    return attrs.field(default=units.parse_size(default), converter=convert)


def duration(default: float | str) -> Any:
    """Seconds: a number, or a string such as ``"500ms"``, ``"10s"``, ``"72h"``."""
    return attrs.field(default=units.parse_duration(default), converter=units.parse_duration)


def ratio_percent(default: int, *, minimum: int = 0, maximum: int = 100) -> Any:
    return integer(default, minimum=minimum, maximum=maximum)


def path(default: str | None) -> Any:
    """A filesystem path (``None`` means "derive from another setting")."""

    def convert(value: object) -> Path | None:
        if value is None or isinstance(value, Path):
            return value
        if isinstance(value, str) and value:
            return Path(value).expanduser()
        raise ValueError(f"expected a path string, got {value!r}")

    return attrs.field(default=None if default is None else Path(default), converter=convert)


def string_list(default: Sequence[str]) -> Any:
    """A list of strings; a single string with ``;`` or ``,`` separators is accepted too."""

    def convert(value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            return tuple(p.strip() for p in value.replace(",", ";").split(";") if p.strip())
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ValueError(f"expected a list of strings, got {value!r}")

    return attrs.field(default=tuple(default), converter=convert)


def delay_levels(default: str) -> Any:
    """RocketMQ's ``messageDelayLevel`` string, kept as a tuple of seconds."""

    def convert(value: object) -> tuple[float, ...]:
        if isinstance(value, tuple):
            return value
        return units.parse_delay_levels(value)

    return attrs.field(default=units.parse_delay_levels(default), converter=convert)
