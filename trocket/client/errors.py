"""Client errors: what went wrong, with the broker's code and remark when it answered."""

from __future__ import annotations

from kernel.errors import TrocketError


class ClientError(TrocketError):
    """A client operation failed; the message says why."""


class SendError(ClientError):
    """A send failed on every attempt it was allowed.

    ``code`` is the broker's response code of the last attempt (None when no broker answered).
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class InvalidMessage(ClientError):
    """The message cannot be sent as it is (empty body, over the size limit, bad topic)."""
