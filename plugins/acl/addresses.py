"""RocketMQ's white-list address patterns (``globalWhiteRemoteAddresses``,
``whiteRemoteAddress``), compiled once when the file is read.

IPv4 patterns have four dot-separated parts, each a number, ``*``, a range ``a-b`` or a set
``{a,b,c}``: ``192.168.0.*``, ``10.1.1.1-50``, ``192.168.1.{3,7}``. ``*`` (or ``*.*.*.*``)
matches every address; an empty pattern matches none; anything else (an IPv6 address) must be
equal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

AddressMatch = Callable[[str], bool]


class AddressPatternError(ValueError):
    pass


def compile_pattern(pattern: str) -> AddressMatch:
    """A predicate over a peer's IP address (without port).

    :raises AddressPatternError: the pattern is not one RocketMQ accepts.
    """
    text = pattern.strip()
    if not text:
        return lambda address: False
    if text in ("*", "*.*.*.*"):
        return lambda address: True
    if ":" in text:  # IPv6: exact only
        return lambda address: address == text
    parts = text.split(".")
    if len(parts) != 4:
        raise AddressPatternError(f"{pattern!r} is not an IPv4 pattern of four parts")
    allowed = [_part(part, pattern) for part in parts]

    def match(address: str) -> bool:
        octets = address.split(".")
        if len(octets) != 4:
            return False
        try:
            return all(int(octet) in ok for octet, ok in zip(octets, allowed, strict=True))
        except ValueError:
            return False

    return match


def _part(part: str, pattern: str) -> range | frozenset[int]:
    try:
        if part == "*":
            return range(256)
        if part.startswith("{") and part.endswith("}"):
            values = frozenset(int(v) for v in part[1:-1].split(","))
            if not values or not all(0 <= v <= 255 for v in values):
                raise ValueError
            return values
        if "-" in part:
            low, high = (int(v) for v in part.split("-", 1))
            if not 0 <= low <= high <= 255:
                raise ValueError
            return range(low, high + 1)
        value = int(part)
        if not 0 <= value <= 255:
            raise ValueError
        return range(value, value + 1)
    except ValueError:
        raise AddressPatternError(
            f"{pattern!r}: {part!r} is not a number 0-255, '*', a range 'a-b' or a set '{{a,b}}'"
        ) from None


@functools.lru_cache(maxsize=8192)
def peer_ip(peer: str) -> str:
    """``ip:port`` → ``ip`` (IPv6 brackets dropped); cached, since it runs on every request
    and a connection keeps its peer."""
    host, sep, _ = peer.rpartition(":")
    return (host if sep else peer).strip("[]")
