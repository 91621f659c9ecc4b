"""Reading a request's header fields and body, with a clear answer for a bad one.

A handler raises :class:`RequestProblem` for a field that is missing or malformed; the
serving plugin answers it with the problem's code and remark, and the connection lives on.
"""

from __future__ import annotations

import json
from typing import Any

from wire.names import group_problem, topic_problem
from wire.remoting.codes import ResponseCode
from wire.remoting.command import RemotingCommand


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
