"""Helpers shared by the broker's request handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel.errors import CorruptRecord, OffsetOutOfRange
from kernel.outcomes import PUT_STATUS_CODES as PUT_STATUS_CODES  # re-exported, as the helpers below
from wire.remoting import RemotingCommand, ResponseCode
from wire.remoting.headers import RequestProblem as RequestProblem
from wire.remoting.headers import int_field as int_field
from wire.remoting.headers import parse_json_body as parse_json_body
from wire.remoting.headers import required as required
from wire.remoting.headers import valid_group as valid_group
from wire.remoting.headers import valid_topic as valid_topic

if TYPE_CHECKING:
    from kernel.protocols import QueryableStore
    from plugins.remoting.service import BrokerNetwork


GROUP_FIELDS = ("consumerGroup", "group", "groupName")
"""Request header fields that name a consumer group (RocketMQ's header classes)."""


def check_names(request: RemotingCommand) -> None:
    """Refuse a request whose header names an invalid consumer group: a group becomes the
    ``%RETRY%``/``%DLQ%`` topics (directories of the store) and keys of persisted files, so a
    name like ``../x`` must be stopped where it enters (RocketMQ's ``Validators.checkGroup``)."""
    ext = request.ext
    for field in GROUP_FIELDS:
        if field in ext:
            valid_group(ext[field], field)


_LOOKUPS = ("read_record_at", "query_by_key", "store_time", "offset_by_time")


def queryable(net: BrokerNetwork) -> QueryableStore:
    """The broker's store as a :class:`~kernel.protocols.QueryableStore`, or a SYSTEM_ERROR problem
    naming the store when it offers no lookups (a third-party store may not)."""
    store = net.runtime.store
    if not all(hasattr(store, name) for name in _LOOKUPS):
        raise RequestProblem(
            ResponseCode.SYSTEM_ERROR,
            f"the configured store ({type(store).__name__}) does not support lookups by offset, key or time",
        )
    return store  # type: ignore[return-value]


async def record_at(net: BrokerNetwork, offset: int, what: str) -> bytes:
    """The stored record at a commit-log offset, or a SYSTEM_ERROR problem saying ``what``
    could not be found."""
    try:
        return await queryable(net).read_record_at(offset)
    except (OffsetOutOfRange, CorruptRecord) as error:
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, f"{what}, {offset}: {error}") from None
