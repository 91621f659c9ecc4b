"""The errors of the wire formats, and the root of Trocket's exception hierarchy.

:class:`TrocketError` is defined here, on the lowest floor, so that every error Trocket raises
on purpose (these, and the kernel's in :mod:`kernel.errors`) shares one base a caller can catch.
"""

from __future__ import annotations


class TrocketError(Exception):
    """Base of every error Trocket raises on purpose."""


class CorruptRecord(TrocketError):
    """A record failed its magic, size or CRC check; it is never served."""

    def __init__(self, offset: int, reason: str, path: str | None = None) -> None:
        self.offset = offset
        self.reason = reason
        self.path = path
        where = f"{path} " if path else ""
        super().__init__(f"corrupt record at {where}offset {offset}: {reason}")


class RemotingError(TrocketError):
    """A remoting (network) call failed: the peer could not be reached, went away, or was slow."""


class RemotingConnectError(RemotingError):
    """No connection to an address could be made."""


class RemotingTimeoutError(RemotingError):
    """No response arrived within the request's timeout."""


class RemotingClosedError(RemotingError):
    """The connection closed while a request waited for its response."""


class MalformedBatch(ValueError):
    """A ``SEND_BATCH_MESSAGE`` body whose entries do not add up; the message says where."""
