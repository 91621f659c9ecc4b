"""Human-friendly sizes and durations for config files ("1GiB", "500ms").

Converters accept what a TOML file naturally holds (an int of bytes, a number of seconds,
or a string with a unit) and raise ``ValueError`` with the accepted forms in the message,
so the config loader can name the file and key around it.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_DURATION_UNITS = {
    "us": 0.000001,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: object) -> int:
    """Return a byte count from ``4096``, ``"64KiB"``, ``"1GiB"`` or ``"10MB"``.

    :raises ValueError: for negatives, unknown units and non-integral results.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 1048576 or '1GiB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value}")
        return value
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        if match and match.group(2).lower() in _SIZE_UNITS:
            result = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
            if result.is_integer():
                return int(result)
    raise ValueError(f"expected a size such as 1048576, '64KiB' or '1GiB', got {value!r}")


def parse_duration(value: object) -> float:
    """Return seconds from ``5`` (seconds), ``"200us"``, ``"500ms"``, ``"10s"``, ``"2m"``,
    ``"72h"``, ``"3d"``.

    :raises ValueError: for negatives and unknown units.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as '500ms' or '10s', got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a non-negative duration, got {value}")
        return float(value)
    if isinstance(value, str):
        match = _NUMBER_UNIT.match(value)
        if match and match.group(2).lower() in _DURATION_UNITS:
            # Rounded to the nanosecond: 200 * 1e-6 is 0.00019999999999999998 otherwise.
            return round(float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()], 9)
    raise ValueError(f"expected a duration such as '500ms', '10s', '2m' or '72h', got {value!r}")


def format_size(size: int) -> str:
    """Render a byte count the way config files write it (exact, binary units)."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def format_duration(seconds: float) -> str:
    """Render seconds compactly (``0.5`` -> ``"500ms"``, ``7200`` -> ``"2h"``)."""
    for unit, factor in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= factor and (seconds / factor).is_integer():
            return f"{int(seconds / factor)}{unit}"
    millis = seconds * 1000
    if millis.is_integer():
        return f"{int(millis)}ms"
    return f"{seconds}s"


def parse_delay_levels(value: object) -> tuple[float, ...]:
    """Parse RocketMQ's ``messageDelayLevel`` ("1s 5s 10s 30s 1m ... 2h") into seconds.

    Level *n* (1-based) is element ``n - 1``. RocketMQ accepts the units s, m, h and d.
    """
    if not isinstance(value, str) or not value.split():
        raise ValueError(f"expected space-separated durations such as '1s 5s 10s 1m', got {value!r}")
    levels = []
    for token in value.split():
        match = re.fullmatch(r"(\d+)([smhd])", token)
        if not match:
            raise ValueError(f"delay level {token!r} is not a whole number followed by s, m, h or d")
        levels.append(int(match.group(1)) * _DURATION_UNITS[match.group(2)])
    return tuple(levels)
