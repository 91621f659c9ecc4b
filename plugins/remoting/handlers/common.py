"""Helpers shared by the broker's request handlers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kernel.errors import CorruptRecord, OffsetOutOfRange
from kernel.model import PutStatus
from wire.names import group_problem, topic_problem
from wire.remoting import RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from kernel.protocols import QueryableStore
    from plugins.remoting.service import BrokerNetwork

PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.OS_PAGE_CACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}


class RequestProblem(Exception):
    """Raised inside a handler to answer with ``code`` and ``remark`` (a bad header field)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark

    def response_to(self, request: RemotingCommand) -> RemotingCommand:
        return request.response(self.code, remark=self.remark)


def required(request: RemotingCommand, *names: str) -> list[str]:
    """The named ext fields, or a clear MESSAGE_ILLEGAL-style problem naming the missing ones."""
    missing = [n for n in names if n not in request.ext]
    if missing:
        raise RequestProblem(
            ResponseCode.SYSTEM_ERROR,
            f"the request header is missing required field(s): {', '.join(missing)}",
        )
    return [request.ext[n] for n in names]


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


def valid_group(group: object, where: str) -> str:
    """``group`` if it is a valid group name, else a SYSTEM_ERROR problem saying ``where``."""
    return _valid(group_problem(group), group, where)


def valid_topic(topic: object, where: str) -> str:
    """``topic`` if it is a valid topic name, else a SYSTEM_ERROR problem saying ``where``."""
    return _valid(topic_problem(topic), topic, where)


def _valid(problem: str | None, name: object, where: str) -> str:
    if problem:
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, f"{where}: {problem}")
    assert isinstance(name, str)
    return name


def parse_json_body(request: RemotingCommand) -> Any:
    """The request body as JSON, or a SYSTEM_ERROR problem saying why it is not."""
    try:
        return json.loads(request.body)
    except ValueError as error:
        raise RequestProblem(ResponseCode.SYSTEM_ERROR, f"request body is not JSON: {error}") from None


def int_field(request: RemotingCommand, name: str, default: int | None = None) -> int:
    value = request.ext.get(name)
    if value is None or value == "":
        if default is None:
            raise RequestProblem(ResponseCode.SYSTEM_ERROR, f"the request header is missing field {name!r}")
        return default
    try:
        return int(value)
    except ValueError:
        raise RequestProblem(
            ResponseCode.SYSTEM_ERROR, f"header field {name!r} must be an integer, got {value!r}"
        ) from None


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
