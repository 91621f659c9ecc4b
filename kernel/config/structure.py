"""Turn a raw TOML table into a validated attrs config object, with errors that name the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from kernel.errors import ConfigError, ConfigErrors

T = TypeVar("T")


def structure(cls: type[T], raw: Mapping[str, Any], *, source: str, section: str) -> T:
    """Validate ``raw`` into ``cls`` (an attrs class built with :mod:`kernel.config.fields`).

    Every key is converted and validated on its own, so the error names it.

    :raises ConfigError: for unknown keys and bad values, naming ``source`` and
        ``[section] key`` (:class:`~kernel.errors.ConfigErrors` when there are several).
    """
    if not attrs.has(cls):
        raise TypeError(f"config section {section!r} declares {cls!r}, which is not an attrs class")
    fields = {f.alias or f.name: f for f in attrs.fields(cls) if f.init}
    if not isinstance(raw, Mapping):
        raise ConfigError(source, f"[{section}]", f"expected a table, got {raw!r}")
    converted: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for key, value in raw.items():
        field = fields.get(key)
        if field is None:
            known = ", ".join(sorted(fields)) or "none"
            errors.append(ConfigError(source, f"[{section}] {key}", f"unknown key; known keys: {known}"))
            continue
        try:
            if field.converter is not None:
                value = field.converter(value)  # type: ignore[operator]
            if field.validator is not None:
                field.validator(None, field, value)
        except (TypeError, ValueError) as error:
            errors.append(ConfigError(source, f"[{section}] {key}", str(error)))
            continue
        converted[key] = value
    ConfigErrors.raise_any(errors)
    try:
        return cls(**converted)
    except (TypeError, ValueError) as error:
        raise ConfigError(source, f"[{section}]", str(error)) from None


def unstructure(obj: Any) -> dict[str, Any]:
    """A config object as plain values, for display (``trocket plugins``, ``config check``)."""
    return {f.name: getattr(obj, f.name) for f in attrs.fields(type(obj))}
